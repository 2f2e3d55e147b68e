"""Single-index models (Ben Arous, Gheissari & Jagannath 2021; Damian, Nichani, Ge & Lee 2023, seed 004): learn
y = σ(w*·x) from x ~ N(0, I_d), with σ the normalised Hermite polynomial h_{k*} = He_{k*}/√(k*!) of degree k*, so
that k* is σ's information exponent (its first nonzero Hermite coefficient). Online SGD needs n ≈ d^{k*−1}
samples to find w*, SGD on a smoothed loss n ≈ d^{k*/2}; before it does, the loss sits at Var σ = 1 while the
alignment w·w* climbs from its 1/√d at random ("hidden progress", the `single_index_alignment` probe).

One position, a vector (`TaskSpec.d_input` = d), a real target scored by squared error. w* is a unit vector drawn
from the task's `seed`: the truth `w_star`. y = σ(w*·x) + noise·ε.

Truth (`index_truth`): `w_star` and each sample's projection w*·x, the latent `projection`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from jaxtyping import Float
from torch import Tensor

from mechsynth.config import MAX_SEED, check_fields, doc, validates_itself
from mechsynth.tasks.base import (
    TASKS,
    Batch,
    Latent,
    LossKind,
    Task,
    TaskSpec,
    align,
    masked_loss,
    squared_error,
    task_generator,
)


@validates_itself
@dataclass(frozen=True)
class SingleIndexConfig:
    d: int = doc("dimension of x and w*", 32, lo=1, hi=2**16, why="x costs d floats per sample")
    k_star: int = doc(
        "information exponent k*: σ = He_{k*}/√(k*!), the normalised Hermite polynomial of that degree",
        2,
        lo=1,
        hi=12,
        why="He_k of a Gaussian overflows float32 tails past that",
    )
    noise: float = doc("std of the label noise: y = σ(w*·x) + noise·ε", 0.0)
    seed: int = doc("seed of w*", 0, lo=0, hi=MAX_SEED)
    loss: Literal["squared", "correlation"] = doc(
        "what training minimises: the squared error (f − y)², or Damian et al.'s correlation loss 1 − f·y (for a "
        "student whose f has unit variance, as the neuron kind's)",
        "squared",
    )

    def __post_init__(self):
        check_fields(self)

    def sample_bytes(self, n_seqs: int, split: str) -> tuple[int, int]:
        """(bytes of a batch, peak while making it): float32 x, targets, mask, w* and w*·x; the Hermite recursion."""
        kept = n_seqs * (8 * self.d + 13)
        return kept, kept + 3 * 4 * n_seqs


def hermite(z: Float[Tensor, "*shape"], k: int) -> Float[Tensor, "*shape"]:
    """He_k(z)/√(k!), the probabilists' Hermite polynomial normalised to unit variance under N(0, 1), by the
    recursion He_{j+1} = z He_j − j He_{j−1}."""
    prev, cur = torch.ones_like(z), z
    if k == 0:
        return prev
    for j in range(1, k):
        prev, cur = cur, z * cur - j * prev
    return cur / math.sqrt(math.factorial(k))


def index_truth(w_star: Float[Tensor, "d"], projection: Float[Tensor, "batch"]) -> dict[str, Tensor]:
    """Batch.truth of single_index: `w_star` [batch, d], the hidden direction (the same for every sample), and
    `projection` [batch], each sample's w*·x, the argument of the link."""
    return {"w_star": w_star.expand(len(projection), -1), "projection": projection}


@TASKS.register("single_index")
class SingleIndex(Task):
    Config = SingleIndexConfig
    truth_keys = ("w_star", "projection")  # index_truth
    latents = (
        Latent(
            "projection",
            "real",
            "projection",
            about="w*·x, the single index σ reads: what a network aligned with w* computes first (Damian et al.)",
        ),
    )

    def __init__(self, cfg: SingleIndexConfig):
        super().__init__(cfg)
        # Not task_generator(seed): a run's data stream starts from torch's generator at train.seed, so with
        # train.seed = task.seed its first x would be w* itself, a first step straight onto the answer.
        w = torch.randn(cfg.d, generator=task_generator(cfg.seed ^ 0x2545F4914F6CDD1D))
        self.w_star = w / w.norm()

    @property
    def loss_kind(self) -> LossKind:
        return "correlation" if self.cfg.loss == "correlation" else "squared_error"

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec(
            d_vocab=self.cfg.d, d_vocab_out=1, n_ctx=1, token_names=("x",), target_names=("y",), d_input=self.cfg.d
        )

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        self.check_split(split)
        cfg = self.cfg
        x = torch.randn(batch_size, 1, cfg.d, generator=generator, device=device)
        w = self.w_star.to(device)
        z = x[..., 0, :] @ w
        y = hermite(z, cfg.k_star)[:, None]
        if cfg.noise:
            y = y + cfg.noise * torch.randn(batch_size, 1, generator=generator, device=device)
        mask = torch.ones(batch_size, 1, dtype=torch.bool, device=device)
        return Batch(x, y, mask, index_truth(w, z))

    def metrics(self, logits: Float[Tensor, "batch out_pos 1"], batch: Batch) -> dict[str, float]:
        """`loss`, what training minimises; `squared_error`; `explained`, the share of the targets' variance
        explained, 1 − squared_error / (1 + noise²): 0 for the mean prediction (Var σ = 1), 1 for σ(w*·x) itself."""
        logits, targets, mask = align(logits, batch)
        sq = float(squared_error(logits, targets, mask).sum() / mask.sum())
        return {
            "loss": float(masked_loss(logits, batch, self.loss_kind)),
            "squared_error": sq,
            "explained": 1 - sq / (1 + self.cfg.noise**2),
        }
