"""The sin kind: the sinusoidal neuron f(x) = sin(wᵀx) of Barak et al. 2022, one of the smallest models
that can represent a sparse parity: on ±1 bits with odd |S| = k, w = (π/2)·1_S gives
sin((π/2)·Σ_{i∈S} xᵢ) = (−1)^((k−1)/2)·∏_{i∈S} xᵢ (and −w the other sign). An even k needs a bias
(w = (π/2)·1_S, b = π/2 gives a cosine): set `bias = true`. Logits as in mechsynth/models/scalar.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from jaxtyping import Float
from torch import Tensor

from mechsynth.config import MAX_SEED, doc, validates_itself
from mechsynth.models.base import MODEL_KINDS
from mechsynth.models.scalar import ScalarKind, ScalarNet


class SinNeuron(ScalarNet):
    """f(x) = sin(wᵀx + b): one form (hook_pre [batch, 1]), and f at hook_out."""

    def combine(self, pre: Float[Tensor, "n_models batch form"]) -> Float[Tensor, "n_models batch"]:
        return torch.sin(pre[..., 0])


@MODEL_KINDS.register("sin")
@validates_itself
@dataclass(frozen=True)
class SinConfig(ScalarKind):
    bias: bool = doc("add a learned bias inside the sine, sin(wᵀx + b) (needed for an even parity degree)", False)
    init_seed: int = doc(
        "seed of the initial weights",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit; seeds side by side add their index",
    )
    init_range: Optional[float] = doc(
        "std of the normal weight init; unset = uniform ±1/sqrt(n) (PyTorch's Linear)", None
    )

    module = SinNeuron

    @property
    def forms(self) -> int:
        return 1

    def describe(self) -> str:
        return "sinusoidal neuron sin(wᵀx + b)" if self.bias else "sinusoidal neuron sin(wᵀx)"
