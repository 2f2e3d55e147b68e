"""Induction heads (Olsson et al. 2022): on a sequence repeated twice, attend to the token after the
earlier occurrence of the current token, and copy it.

Synthetic tasks have 2–10 token vocabularies, so tokens repeat inside each copy. The target of a
query is therefore every key whose *previous* token equals the query's token — the same set
TransformerLens's induction detection pattern marks — and the score is the attention on that set,
averaged over second-copy queries, so a perfect head scores 1.0 however often tokens repeat.
(TransformerLens's 'mul' score averages over all queries, first copy included, and tops out near 0.5.)
Because tokens repeat, a uniform head also puts a share of its attention on the targets (about 1/d_vocab of
its keys, more with two or three tokens): `chance`, which formation must clearly beat
(`mechsynth.probes._formation`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth.probes import (
    FormationOptions,
    ProbeResult,
    View,
    attention_hooks,
    head_metrics,
    no_hooks,
    register,
    render_heads,
)
from mechsynth.probes.duplicate_token import target_mass, uniform_target_mass


def induction_targets(tokens: Int[Tensor, "batch pos"]) -> Bool[Tensor, "batch pos pos"]:
    """[batch, query_pos, key_pos]: 1 <= key <= query and tokens[key - 1] == tokens[query]."""
    prev = torch.cat([torch.full_like(tokens[:, :1], -1), tokens[:, :-1]], 1)
    return (tokens[:, :, None] == prev[:, None, :]) & torch.ones(
        tokens.shape[1], tokens.shape[1], dtype=torch.bool, device=tokens.device
    ).tril()


def copying_score(weight: Callable[[str], Tensor]) -> Float[Tensor, "layer head_index"] | None:
    """Σλ / Σ|λ| over the eigenvalues of each head's full OV circuit W_E W_V W_O W_U (Elhage et al. 2021):
    near 1 for a head that copies the token it attends to. None when input and output vocabularies differ."""
    W_E, W_U = weight("W_E"), weight("W_U")
    if W_E.shape[0] != W_U.shape[1]:
        return None
    ov = torch.einsum("vm,lhmd,lhdn,nw->lhvw", W_E, weight("W_V"), weight("W_O"), W_U)
    eig = torch.linalg.eigvals(ov.double().cpu())
    return (eig.sum(-1).real / eig.abs().sum(-1).clamp_min(1e-12)).float()


def icl_score(logits: Float[Tensor, "batch pos d_vocab_out"], targets: Int[Tensor, "batch pos"]) -> float:
    """Loss late in the context minus loss early (Olsson et al. 2022); negative = learning in context."""
    loss = -logits.float().log_softmax(-1).gather(-1, targets[..., None])[..., 0].mean(0)  # per position
    fifth = max(1, loss.shape[0] // 5)
    return float(loss[-fifth:].mean() - loss[:fifth].mean())


@register(
    "induction",
    reads={"repeated": attention_hooks, "data": no_hooks},
    options=FormationOptions,
    weights=("W_E", "W_V", "W_O", "W_U"),
    token_ids=True,
)
def induction(view: View) -> ProbeResult:
    tokens, pattern = view.tokens("repeated"), view.patterns("repeated")
    half = tokens.shape[1] // 2
    second = torch.zeros_like(tokens, dtype=torch.bool)
    second[:, half:] = True
    targets = induction_targets(tokens) & second[:, :, None]
    per_head = target_mass(pattern, targets)
    # Prefix matching: attention on exactly the position after this token's first-copy occurrence.
    q = torch.arange(half, 2 * half, device=tokens.device)
    prefix = pattern[..., q, q - half + 1].mean(dim=(1, 3))
    metrics = {
        "max": float(per_head.max()),
        "chance": uniform_target_mass(targets),
        **head_metrics("prefix_matching/", prefix),
    }
    logits = view.logits("repeated")
    if logits.shape[-1] > int(tokens.max()):  # the outputs name the input tokens (not so for the readout tasks)
        metrics["icl_score"] = icl_score(logits[:, :-1], tokens[:, 1:])
    copying = copying_score(view.weight)
    if copying is not None:
        metrics.update(head_metrics("copying/", copying))
    batch = view.batch("data")
    if view.task is not None and bool(batch.mask.all()):  # a prediction at every position: the task's own curve
        metrics["icl_score_task"] = icl_score(view.logits("data"), batch.targets)
    return ProbeResult("induction", per_head.cpu(), metrics, render_heads(tokens, pattern, per_head))
