"""The neuron kind: the student of Damian, Nichani, Ge & Lee (2023, seed 004) for a single-index model, one unit
f(x) = σ(w·x) with the link σ known (the normalised Hermite polynomial He_k/√(k!)) and w on the unit sphere.

Their online SGD keeps w on the sphere: each step moves along the loss's gradient and renormalises. Here the
forward reads ŵ = w/‖w‖ (so at ‖w‖ = 1 the gradient is already the spherical one) and the module's `project_`,
which the trainer calls after every optimizer step, renormalises w.

`smoothing` = λ > 0 is their smoothed loss: the prediction is E_z σ(((ŵ + λz)/‖ŵ + λz‖)·x) with z uniform on
the unit sphere orthogonal to ŵ. It is computed exactly, not sampled: with s = ŵ·x and r² = ‖x‖² − s², the
argument is (s + λ r ζ)/√(1+λ²), ζ a coordinate of a uniform point of the (d−2)-sphere, whose even moments are
E ζ^{2i} = Π_{l<i} (2l+1)/(d−1+2l). Under the correlation loss 1 − f·y (single_index's `loss = "correlation"`)
the loss of this prediction is their smoothed loss L_λ, and its gradient theirs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional

import torch
import torch.nn as nn
from jaxtyping import Float
from torch import Tensor

from mechsynth.config import MAX_SEED, check, check_fields, doc, validates_itself
from mechsynth.errors import ConfigError
from mechsynth.models.base import FLOAT, MODEL_KINDS, ModelKind
from mechsynth.models.tl_compat import HookedRootModule, HookPoint
from mechsynth.tasks.base import TaskSpec


@MODEL_KINDS.register("neuron")
@validates_itself
@dataclass(frozen=True)
class NeuronConfig(ModelKind):
    degree: int = doc(
        "k of the link σ = He_k/√(k!), the normalised Hermite polynomial the student knows",
        2,
        lo=1,
        hi=12,
        why="He_k of a Gaussian overflows float32 tails past that",
    )
    smoothing: float = doc(
        "λ of Damian et al.'s smoothed loss: the prediction averages σ over directions "
        "(ŵ + λz)/‖ŵ + λz‖, z uniform on the sphere orthogonal to ŵ (exactly, not sampled); "
        "0 = none",
        0.0,
    )
    init_seed: int = doc(
        "seed of the initial direction (uniform on the sphere)",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit; seeds side by side add their index",
    )

    reads_vectors: ClassVar[bool] = True

    def __post_init__(self):
        check_fields(self)
        check(self.smoothing >= 0, "smoothing", f"must be ≥ 0, got {self.smoothing}")

    def describe(self) -> str:
        return f"one neuron, link He_{self.degree}" + (f", smoothed (λ = {self.smoothing:g})" if self.smoothing else "")

    def validate(self, spec: TaskSpec) -> None:
        if spec.d_input is None or spec.n_ctx != 1 or spec.d_vocab_out != 1:
            raise ConfigError(
                "model.kind",
                "'neuron' reads one input vector and predicts one real number "
                "(single_index); allowed here: 'transformer', 'mlp'",
            )
        check(
            self.smoothing == 0 or spec.d_input >= 2,
            "model.smoothing",
            f"smoothing averages over directions orthogonal to w, and d = {spec.d_input} has none; allowed: 0",
        )

    def build(self, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
        return Neuron(self, spec.d_input, n_models)

    def input_weights(self) -> Optional[str]:
        return "W_in"  # [d, 1]: the direction w, read like an MLP's first layer of one unit

    def param_count(self, spec: TaskSpec) -> int:
        return spec.d_input

    def activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        return batch * FLOAT * (spec.d_input + 2 * self.degree + 4), 0  # x, the powers of s and r², s, f

    def eval_activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        return self.activation_bytes(spec, batch)

    def weight_field(self, spec: TaskSpec, context_field: str) -> str:
        return "task.d"


def hermite_coefficients(k: int) -> list[float]:
    """c_n with He_k(z)/√(k!) = Σ_n c_n zⁿ: He_k(z) = k! Σ_m (−1)^m z^{k−2m} / (m! (k−2m)! 2^m)."""
    c = [0.0] * (k + 1)
    for m in range(k // 2 + 1):
        c[k - 2 * m] = (-1) ** m * math.factorial(k) / (math.factorial(m) * math.factorial(k - 2 * m) * 2**m)
    return [v / math.sqrt(math.factorial(k)) for v in c]


def smoothed_terms(k: int, lam: float, d: int) -> list[tuple[float, int, int]]:
    """(coefficient, p, i): E_z σ((s + λ r ζ)/√(1+λ²)) = Σ coefficient · s^p · (r²)^i, for σ = He_k/√(k!)."""
    scale, terms = 1 / (1 + lam**2), {}
    for n, c in enumerate(hermite_coefficients(k)):
        for i in range(n // 2 + 1):
            moment = math.prod((2 * l + 1) / (d - 1 + 2 * l) for l in range(i))  # E ζ^{2i}
            term = c * math.comb(n, 2 * i) * scale ** (n / 2) * lam ** (2 * i) * moment
            if term:
                terms[(n - 2 * i, i)] = terms.get((n - 2 * i, i), 0.0) + term
    return [(v, p, i) for (p, i), v in sorted(terms.items())]


def stream(seed: int) -> int:
    """The torch seed of the initial direction: a draw of N(0, I_d) from `seed` itself would be single_index's
    w* for task.seed = init_seed (the task draws w* that way), a student that starts at the answer."""
    return seed ^ 0x5DEECE66D


class Neuron(HookedRootModule):
    """f(x) = σ(ŵ·x), or its smoothed average. `n_models=M`: M neurons side by side (W_in [M, d, 1])."""

    def __init__(self, cfg: NeuronConfig, d: int, n_models: Optional[int] = None):
        super().__init__()
        self.cfg, self.d, self.n_models = cfg, d, n_models
        self.d_vocab, self.d_vocab_out, self.n_ctx = d, 1, 1
        self.terms = (
            smoothed_terms(cfg.degree, cfg.smoothing, d)
            if cfg.smoothing
            else [(c, n, 0) for n, c in enumerate(hermite_coefficients(cfg.degree)) if c]
        )
        self.W_in = nn.Parameter(torch.empty(*(() if n_models is None else (n_models,)), d, 1))
        self.hook_in = HookPoint()  # [batch, d]: x
        self.hook_pre = HookPoint()  # [batch, 1]: s = ŵ·x
        self.hook_post = HookPoint()  # [batch, 1]: the prediction
        with torch.no_grad():
            for i in range(n_models or 1):
                w = torch.randn(d, 1, generator=torch.Generator().manual_seed(stream(cfg.init_seed + i)))
                (self.W_in if n_models is None else self.W_in[i]).copy_(w / w.norm())
        self.setup()

    @torch.no_grad()
    def project_(self) -> None:
        """Back onto the unit sphere, after an optimizer step (their w_{t+1} = ŵ_{t+1}/‖ŵ_{t+1}‖)."""
        self.W_in.div_(self.W_in.norm(dim=-2, keepdim=True))

    def forward(self, x: Float[Tensor, "*#n_models batch 1 d_input"]) -> Float[Tensor, "*#n_models batch 1 1"]:
        """x [batch, 1, d] (side by side: shared, or [n_models, batch, 1, d]) -> [.., batch, 1, 1]. Hooks see
        [n_models * batch, ...]."""
        m = self.n_models or 1
        x = self.hook_in(x[..., 0, :].expand(m, -1, -1).reshape(-1, self.d)).view(m, -1, self.d)
        W = self.W_in if self.n_models else self.W_in.unsqueeze(0)
        w = W / W.norm(dim=-2, keepdim=True)
        s = self.hook_pre(torch.bmm(x, w).flatten(0, 1)).view(m, -1)
        r2 = (x.square().sum(-1) - s.square()).clamp_min(0) if self.cfg.smoothing else None
        f = sum(c * s**p * (r2**i if i else 1) for c, p, i in self.terms)
        f = self.hook_post(f.reshape(-1, 1)).view(m, -1, 1, 1)
        return f if self.n_models else f[0]
