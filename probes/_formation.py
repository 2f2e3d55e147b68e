"""When a head "has" an attention probe's circuit: its score stays at or above the probe's threshold, and
clearly above chance — the score a head attending uniformly would get on the very inputs the probe scored.

Chance matters where targets are common: with two tokens, about half of a query's earlier keys hold its own
token, so a uniform head already puts about half its attention on duplicates and would "form" at a 0.5
threshold. The rule compares odds, not differences. A head that gives each target key `over_chance` times
the attention it gives each other key puts mass s = r·c / (1 − c + r·c) on the targets where a uniform head
puts c (for one query with t targets among n keys, c = t/n and s = r·t / (r·t + n − t)): its odds
s / (1 − s) are r times the uniform head's c / (1 − c). So a head forms only where

    score ≥ max(threshold, r·c / (1 − c + r·c)),  r = over_chance (3 by default), c = chance.

Where targets are rare (c ≈ 0.06 for the previous token in a 64-token context) the threshold decides, as it
always did; where they are common (c ≈ 0.5) it rises to about 0.75, and the summary says so. The probes keep
their raw scores as the per-head series (and chance as the metric `chance`); only formation reads the rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from jaxtyping import Float
from torch import Tensor

from mechsynth.config import check, check_fields, doc, validates_itself

THRESHOLD_HELP = "a head forms once its score stays at or above this (and clearly above chance: over_chance) [0 to 1]"


def threshold_field(default: float):
    """The `threshold` field of a probe's options, with the probe's own default."""
    return doc(THRESHOLD_HELP, default)


@validates_itself
@dataclass(frozen=True)
class FormationOptions:
    """Options of a probe whose heads form by the rule above; a probe with more options subclasses it."""

    threshold: float = threshold_field(0.5)
    over_chance: float = doc(
        "r: a head forms only where it also favours each target key at least r times over each "
        "other key, relative to a uniform head (which scores c, the metric `chance`): score ≥ "
        "r·c / (1 − c + r·c) [≥ 1; 1: the threshold alone]",
        3.0,
    )

    def __post_init__(self) -> None:
        check_fields(self)
        check(0 <= self.threshold <= 1, "threshold", f"must be in [0, 1], got {self.threshold}; allowed: 0 to 1")
        check(self.over_chance >= 1, "over_chance", f"must be ≥ 1, got {self.over_chance}; allowed: ≥ 1 (1: at chance)")


def above_chance(chance: float, over_chance: float) -> float:
    """The score of a head whose odds on the targets are `over_chance` times a uniform head's (which scores
    `chance`)."""
    return over_chance * chance / (1 - chance + over_chance * chance) if chance < 1 else 1.0


def raised(threshold: float, over_chance: float, chance: Optional[float]) -> float:
    """The score a head must reach and hold: the threshold, raised where chance is high (unknown chance: as is)."""
    if chance is None or not math.isfinite(chance):
        return threshold
    return max(threshold, above_chance(chance, over_chance))


def uniform_attention(n: int, device: torch.device | str = "cpu") -> Float[Tensor, "query_pos key_pos"]:
    """The pattern of a causal head that attends equally to every key it can see: 1/(query_pos+1) on keys ≤ query."""
    causal = torch.ones(n, n, device=device).tril()
    return causal / causal.sum(-1, keepdim=True)
