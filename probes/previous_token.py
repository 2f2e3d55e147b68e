"""Previous-token heads: attention mass at offset −1 (the first half of an induction circuit).

Also the mass at offsets −2 and −3 (`offset2/L*H*`, `offset3/L*H*`): a model of in-context trigrams
needs a second layer-0 head that looks two tokens back (Edelman et al. 2024)."""

from __future__ import annotations

from jaxtyping import Float
from torch import Tensor

from mechsynth.probes import ProbeResult, View, attention_hooks, head_metrics, register, render_heads

FURTHER_OFFSETS = (2, 3)


def offset_score(pattern: Float[Tensor, "layer batch head_index query_pos key_pos"],
                 offset: int = 1) -> Float[Tensor, "layer head_index"]:
    """Mean attention from each query to the key `offset` positions back (queries that have one)."""
    return pattern.diagonal(offset=-offset, dim1=-2, dim2=-1).mean(dim=(1, 3))


# 0.4: in-context bigram models keep some attention on the current token (Edelman et al. 2024).
@register("previous_token", reads={"random": attention_hooks, "data": attention_hooks}, threshold=0.4)
def previous_token(view: View) -> ProbeResult:
    random_score = offset_score(view.patterns("random"))
    pattern = view.patterns("data")  # the task's data; random tokens again without a task
    per_head = offset_score(pattern)
    metrics = {"max": float(per_head.max()), "max_random": float(random_score.max()),
               **head_metrics("random/", random_score)}
    for offset in FURTHER_OFFSETS:
        if pattern.shape[-1] > offset:
            metrics.update(head_metrics(f"offset{offset}/", offset_score(pattern, offset)))
    return ProbeResult("previous_token", per_head.cpu(), metrics, render_heads(view.tokens("data"), pattern, per_head))
