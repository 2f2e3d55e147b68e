"""Duplicate-token heads: attention from a token to earlier copies of itself.

`chance`: the score of a uniform head on the same tokens. With few symbols it is high (about 0.5 with two:
half of a query's earlier keys hold its token), so formation needs the score clearly above it as well as
at or above the threshold (`mechsynth.probes._formation`)."""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth.probes import (
    FormationOptions,
    ProbeResult,
    View,
    attention_hooks,
    register,
    render_heads,
    uniform_attention,
)


def duplicate_targets(tokens: Int[Tensor, "batch pos"]) -> Bool[Tensor, "batch pos pos"]:
    """[batch, query_pos, key_pos]: key < query holds the same token as query."""
    same = tokens[:, :, None] == tokens[:, None, :]
    return same & torch.ones_like(same[0]).tril(-1)


def target_mass(
    pattern: Float[Tensor, "layer batch head_index query_pos key_pos"], targets: Bool[Tensor, "batch query_pos key_pos"]
) -> Float[Tensor, "layer head_index"]:
    """Attention on the target keys, averaged over queries that have at least one target: a head
    that puts all its attention on the targets scores 1.0 however many there are."""
    mass = (pattern * targets[None, :, None].float()).sum(-1)  # [layer, batch, head_index, query_pos]
    has = targets.any(-1)[None, :, None].expand_as(mass)
    return (mass * has).sum(dim=(1, 3)) / has.sum(dim=(1, 3)).clamp_min(1)


def uniform_target_mass(targets: Bool[Tensor, "batch query_pos key_pos"]) -> float:
    """`target_mass` of a uniform causal head: per query with targets, the share of its keys ≤ query that are
    targets, averaged over those queries as the score is."""
    batch, n, _ = targets.shape
    uniform = uniform_attention(n, targets.device).expand(1, batch, 1, n, n)  # [layer, batch, head_index, ...]
    return float(target_mass(uniform, targets))


@register("duplicate_token", reads={"data": attention_hooks}, options=FormationOptions, token_ids=True)
def duplicate_token(view: View) -> ProbeResult:
    tokens, pattern = view.tokens("data"), view.patterns("data")
    targets = duplicate_targets(tokens)
    per_head = target_mass(pattern, targets)
    return ProbeResult(
        "duplicate_token",
        per_head.cpu(),
        {"max": float(per_head.max()), "chance": uniform_target_mass(targets)},
        render_heads(tokens, pattern, per_head),
    )
