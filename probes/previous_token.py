"""Previous-token heads: attention mass at offset −1 (the first half of an induction circuit)."""

from __future__ import annotations

from jaxtyping import Float
from torch import Tensor

from mechsynth.probes import (ProbeResult, attention_hooks, head_metrics, patterns, random_tokens, register,
                              render_heads, shape, task_tokens)


def offset_score(pattern: Float[Tensor, "layer batch head query key"], offset: int = 1) -> Float[Tensor, "layer head"]:
    """Mean attention from each query to the key `offset` positions back (queries that have one)."""
    return pattern.diagonal(offset=-offset, dim1=-2, dim2=-1).mean(dim=(1, 3))


# 0.4: in-context bigram models keep some attention on the current token (Edelman et al. 2024).
@register("previous_token", hooks=attention_hooks, threshold=0.4)
def previous_token(model, task, generator, batch_size) -> ProbeResult:
    _, _, _, n_ctx = shape(model)
    rand = random_tokens(model, batch_size, n_ctx, generator)
    random_pattern = patterns(model, rand, "previous_token")
    random_score = offset_score(random_pattern)
    metrics = {"max_random": float(random_score.max()), **head_metrics("random/", random_score)}
    tokens, pattern, per_head = rand, random_pattern, random_score
    if task is not None:
        tokens = task_tokens(model, task, batch_size, generator).tokens
        pattern = patterns(model, tokens, "previous_token")
        per_head = offset_score(pattern)
    metrics["max"] = float(per_head.max())
    return ProbeResult("previous_token", per_head.cpu(), metrics, render_heads(tokens, pattern, per_head))
