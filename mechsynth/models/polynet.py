"""The polynet kind: PolyNet f(x) = ∏ᵢ₌₁..d (wᵢᵀx) of Barak et al. 2022, a product of d linear forms. On
±1 bits, d = k forms each reading one bit of S (wᵢ = e_{sᵢ}) give the parity ∏_{i∈S} xᵢ exactly, so
`degree` should be the task's k (or k plus an even number: xᵢ² = 1). 0/1 bits need `bias = true`
(∏(1 − 2xᵢ) is the parity there). Logits as in mechsynth/models/scalar.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from jaxtyping import Float
from torch import Tensor

from mechsynth.config import MAX_SEED, doc, validates_itself
from mechsynth.models.base import MODEL_KINDS
from mechsynth.models.scalar import ScalarKind, ScalarNet


class PolyNet(ScalarNet):
    """f(x) = ∏ᵢ (wᵢᵀx + bᵢ): the forms at hook_pre [batch, degree], f at hook_out."""

    def combine(self, pre: Float[Tensor, "n_models batch form"]) -> Float[Tensor, "n_models batch"]:
        return pre.prod(-1)


@MODEL_KINDS.register("polynet")
@validates_itself
@dataclass(frozen=True)
class PolyNetConfig(ScalarKind):
    degree: int = doc(
        "d, the number of linear forms multiplied (the parity degree k it can represent)",
        3,
        lo=1,
        hi=64,
        why="a product of more forms overflows float32 long before",
    )
    bias: bool = doc("add a learned bias to each form, ∏(wᵢᵀx + bᵢ) (needed for 0/1 bits)", False)
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

    module = PolyNet

    @property
    def forms(self) -> int:
        return self.degree

    def describe(self) -> str:
        return f"PolyNet, degree {self.degree}" + (", with biases" if self.bias else "")
