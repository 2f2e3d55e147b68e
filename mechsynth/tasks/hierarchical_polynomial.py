"""Hierarchical polynomials (Nichani, Damian & Lee 2023; Wang, Nichani & Lee 2023; Fu et al. 2024, seed 004): learn
f*(x) = g*(p_1(x), …, p_r(x)) from x ~ N(0, I_d), where each p_i is a quadratic feature and g* a polynomial. A
three-layer network trained layerwise first learns the features (its hidden layer comes to hold p) from n ≈ d²
samples, then fits g* on them; a kernel method needs n ≈ d^{2q} for a degree-q g*.

One position, a vector (`TaskSpec.d_input` = d), a real target scored by squared error, as single_index. The features
are p_i(x) = (xᵀA_i x − tr A_i)/√(2‖A_i‖_F²): mean 0 and variance 1 for any symmetric A_i. Each A_i is
Σ_j s_j u_j u_jᵀ over `rank` random orthonormal directions u_j (unset: d, full rank) with eigenvalues s_j alternating
+1, −1: a balanced spectrum (for even rank, tr of every odd power of A_i is 0), so p_i is symmetric about 0, its odd
cumulants vanish, and for odd q the quadratic part of He_q(p_i) points along p_i itself (A³ = A), not along ‖x‖² —
the theory's "well-spread" A (‖A‖_op/‖A‖_F = 1/√rank).

The link is single_index's applied to each feature, h_q = He_q/√(q!), plus an optional first Hermite term:

    g*(p) = Σ_i [linear · p_i + h_q(p_i) − E h_q(p_i)] / √(r (1 + linear²))

(for r = 1 the single-index link of p_1), scaled so that f* would have unit variance were the p_i Gaussian and
independent (large d). At small d they are not: p has excess kurtosis 12/rank, and Var f* is 3.4 at d = 8, 1.6 at d = 24
(q = 3, linear = 1, full rank). The theory's first stage sees f* only through its quadratic part, which is
≈ c₁ p with c₁ the first Hermite coefficient of g*: it needs `linear` ≠ 0 (E g*' ≠ 0); with linear = 0 and q ≥ 2 that
part vanishes as d grows. p is not Gaussian, so h_q(p) is not centred: its mean, computed exactly from p's cumulants
κ_n = 2^{n−1}(n−1)! tr(Aⁿ)/(2‖A‖_F²)^{n/2}, is subtracted, and f* has mean 0. Fu et al.'s setting is a general
polynomial g* of the r features; a sum is the simplest with a known answer (each feature is learned alike).

Truth: `A` [features, d, d]; per sample `features` [batch, features] (the p_i(x)) and `f_star` [batch] (the target
before noise). y = f*(x) + noise·ε. A and the directions are drawn from the task's `seed`, on a stream of their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from jaxtyping import Float
from torch import Tensor

from mechsynth.config import MAX_SEED, check, check_fields, doc, validates_itself
from mechsynth.tasks.base import (
    TASKS,
    Batch,
    Latent,
    Task,
    TaskSpec,
    align,
    masked_loss,
    squared_error,
    task_generator,
)
from mechsynth.tasks.single_index import hermite


@validates_itself
@dataclass(frozen=True)
class HierarchicalPolynomialConfig:
    d: int = doc("dimension of x", 16, lo=1, hi=2**12, why="each feature is a d × d matrix")
    features: int = doc(
        "r: how many quadratic features p_1 … p_r the target reads",
        1,
        lo=1,
        hi=64,
        why="r ≪ d is the theory's setting; each feature costs a d × d matrix",
    )
    rank: Optional[int] = doc(
        "rank of each A_i (eigenvalues alternating +1, −1 over that many random orthonormal "
        "directions); unset = d, full rank. Low rank makes p a function of few directions",
        None,
        lo=1,
        hi=2**12,
    )
    degree: int = doc(
        "q: the link applies h_q = He_q/√(q!) to each feature",
        3,
        lo=1,
        hi=8,
        why="the mean of h_q(p) needs p's moments to order q, and p's tails grow with them",
    )
    linear: float = doc(
        "weight of the link's first Hermite term, linear · p_i, beside h_q(p_i) (the sum scaled by "
        "1/√(1 + linear²)); the theory's first stage needs it ≠ 0",
        0.0,
    )
    noise: float = doc("std of the label noise: y = f*(x) + noise·ε", 0.0)
    seed: int = doc("seed of the matrices A_i", 0, lo=0, hi=MAX_SEED)

    def __post_init__(self):
        check_fields(self)
        check(
            self.rank is None or self.rank <= self.d,
            "rank",
            f"{self.rank} is more than d = {self.d}; allowed: 1 to {self.d}, or unset for full rank",
        )
        check(self.noise >= 0, "noise", f"must be ≥ 0, got {self.noise}")

    @property
    def k(self) -> int:
        """The rank each A_i has."""
        return self.rank or self.d

    def sample_bytes(self, n_seqs: int, split: str) -> tuple[int, int]:
        """(bytes of a batch, peak while making it): float32 x, features, f*, targets, mask; the projections
        x·u_j of every feature while computing them."""
        kept = n_seqs * (4 * self.d + 4 * self.features + 13) + 4 * self.features * self.d**2
        return kept, kept + 4 * n_seqs * self.features * self.k


def hermite_coefficients(q: int) -> list[int]:
    """He_q(z) = Σ_k c[k] z^k, by He_{j+1} = z He_j − j He_{j−1}."""
    prev, cur = [1], [0, 1]
    if q == 0:
        return prev
    for j in range(1, q):
        nxt = [0] + cur
        for k, c in enumerate(prev):
            nxt[k] -= j * c
        prev, cur = cur, nxt
    return cur


def feature_moments(eigenvalues: list[float], order: int) -> list[float]:
    """E[p^n] for n = 0 … order of p = (xᵀAx − tr A)/√(2‖A‖_F²), x ~ N(0, I), A with these eigenvalues: from the
    cumulants of a Gaussian quadratic form, κ_n(xᵀAx) = 2^{n−1}(n−1)! tr(Aⁿ), and m_n = Σ_k C(n−1, k−1) κ_k m_{n−k}."""
    scale = math.sqrt(2 * sum(s * s for s in eigenvalues))
    kappa = [0.0, 0.0] + [
        2 ** (n - 1) * math.factorial(n - 1) * sum(s**n for s in eigenvalues) / scale**n for n in range(2, order + 1)
    ]
    m = [1.0]
    for n in range(1, order + 1):
        m.append(sum(math.comb(n - 1, k - 1) * kappa[k] * m[n - k] for k in range(1, n + 1)))
    return m


def link_mean(eigenvalues: list[float], q: int) -> float:
    """E[h_q(p)], exactly: He_q's coefficients against p's moments (0 for q = 1, 2; κ₃/√6 for q = 3)."""
    m = feature_moments(eigenvalues, q)
    return sum(c * m[k] for k, c in enumerate(hermite_coefficients(q))) / math.sqrt(math.factorial(q))


def spectrum(k: int) -> list[float]:
    """+1, −1, +1, … over k directions: balanced, so odd powers of A have trace 0 (or 1 for odd k)."""
    return [1.0 if j % 2 == 0 else -1.0 for j in range(k)]


def hierarchical_truth(
    A: Float[Tensor, "feature d d"], features: Float[Tensor, "batch feature"], f_star: Float[Tensor, "batch"]
) -> dict[str, Tensor]:
    """Batch.truth of hierarchical_polynomial: the matrices `A` [feature, d, d] (one for the batch), the feature values
    `features` [batch, feature] and the target before noise `f_star` [batch]."""
    return {"A": A, "features": features, "f_star": f_star}


@TASKS.register("hierarchical_polynomial")
class HierarchicalPolynomial(Task):
    Config = HierarchicalPolynomialConfig
    truth_keys = ("A", "features", "f_star")
    loss_kind = "squared_error"
    latents = (
        Latent(
            "features",
            "vector",
            "features",
            about="the quadratic features p_1 … p_r of x, which the first layer learns before g* (Nichani et al.)",
        ),
    )

    def __init__(self, cfg: HierarchicalPolynomialConfig):
        super().__init__(cfg)
        # A stream of its own (not task_generator(seed), nor single_index's): a run's data stream starts from torch's
        # generator at train.seed, so with train.seed = task.seed its first x would be a direction of A itself.
        g = task_generator(cfg.seed ^ 0x6A09E667F3BCC909)
        # Orthonormal directions: QR of a Gaussian matrix, signs fixed by R's diagonal so the draw is Haar.
        q, r = torch.linalg.qr(torch.randn(cfg.features, cfg.d, cfg.d, generator=g))
        self.U = (q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2))[..., : cfg.k]  # [feature, d, k]
        self.s = torch.tensor(spectrum(cfg.k))
        self.A = torch.einsum("fdk,k,fek->fde", self.U, self.s, self.U)
        # p = Σ_j s_j ((u_j·x)² − 1)/√(2k): tr A = Σ s_j and ‖A‖_F² = k for orthonormal u_j.
        self.mean = link_mean(spectrum(cfg.k), cfg.degree)

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec(
            d_vocab=self.cfg.d, d_vocab_out=1, n_ctx=1, token_names=("x",), target_names=("y",), d_input=self.cfg.d
        )

    def features_of(self, x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch feature"]:
        """p_i(x) for every feature, through the projections on A_i's directions (batch·d·k per feature, not d²)."""
        z = torch.einsum("bd,fdk->bfk", x, self.U.to(x.device))
        return ((z.square() - 1) * self.s.to(x.device)).sum(-1) / math.sqrt(2 * self.cfg.k)

    def link(self, p: Float[Tensor, "batch feature"]) -> Float[Tensor, "batch"]:
        """g*(p): the centred Hermite link of every feature (plus its linear term), summed and scaled."""
        c = self.cfg
        per = c.linear * p + hermite(p, c.degree) - self.mean
        return per.sum(-1) / math.sqrt(c.features * (1 + c.linear**2))

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        self.check_split(split)
        x = torch.randn(batch_size, 1, self.cfg.d, generator=generator, device=device)
        p = self.features_of(x[:, 0])
        f = self.link(p)
        y = f[:, None]
        if self.cfg.noise:
            y = y + self.cfg.noise * torch.randn(batch_size, 1, generator=generator, device=device)
        mask = torch.ones(batch_size, 1, dtype=torch.bool, device=device)
        return Batch(x, y, mask, hierarchical_truth(self.A.to(device), p, f))

    def metrics(self, logits: Float[Tensor, "batch out_pos 1"], batch: Batch) -> dict[str, float]:
        """`loss` (the squared error training minimises), `squared_error`, and `explained`: 1 − squared error / the
        batch's variance of y, so 0 for the mean prediction and 1 for f* itself without noise. The batch's own
        variance, not a constant: p is not Gaussian, so Var f* depends on d and the rank (heavier tails at small d)."""
        logits, targets, mask = align(logits, batch)
        sq = float(squared_error(logits, targets, mask).sum() / mask.sum())
        var = float(targets[mask].float().var(unbiased=False)) if mask.sum() > 1 else 0.0
        return {
            "loss": float(masked_loss(logits, batch, self.loss_kind)),
            "squared_error": sq,
            "explained": 1 - sq / var if var > 0 else float("nan"),
        }
