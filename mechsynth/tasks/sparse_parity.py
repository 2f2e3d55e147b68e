"""Sparse parity (Barak et al. 2022): the label is the parity of k hidden bits out of n.

Sequence: the n input bits, then a readout token; the label is scored at the readout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Optional

import torch
from jaxtyping import Int
from torch import Tensor

from mechsynth.config import MAX_CTX, MAX_SEED, check, check_fields, doc, validates_itself
from mechsynth.tasks.base import (
    TASKS,
    Batch,
    Latent,
    Task,
    TaskSpec,
    readout_batch,
    readout_labels,
    task_generator,
)


# The fixed training set (n_train examples of n bits) is built when the config is read: 2**26 bits are
# 512 MiB as int64, far more than the finite-sample experiments use (n_train of 10**3 to 10**5).
MAX_TRAIN_BITS = 2**26


@validates_itself
@dataclass(frozen=True)
class SparseParityConfig:
    n: int = doc("number of input bits", 10, lo=1, hi=MAX_CTX - 1, why="the sequence is n + 1 tokens")
    k: int = doc("size of the hidden support S", 2, lo=1)
    encoding: Literal["pm1", "01"] = doc("bit values: ±1 (label = product) or 0/1 (label = sum mod 2)", "pm1")
    noise: float = doc("probability that a training label is flipped", 0.0)
    n_train: Optional[int] = doc(
        "fixed training set of this many examples (finite-sample regime); unset = fresh samples; "
        "n_train * n ≤ 2**26 bits",
        None,
        lo=1,
        hi=2**26,
        why="it is built when the config is read",
    )
    seed: int = doc(
        "seed of the hidden support S (and of the fixed training set)",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit",
    )

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first
        check(1 <= self.k <= self.n, "k", f"must be between 1 and n={self.n}, got {self.k}")
        check(0.0 <= self.noise < 0.5, "noise", f"must be in [0, 0.5), got {self.noise}")
        check(
            self.n_train is None or self.n_train * self.n <= MAX_TRAIN_BITS,
            "n_train",
            f"n_train * n = {self.n_train * self.n if self.n_train else 0} bits is too many; allowed: n_train * n ≤ 2**26 "
            "(the fixed training set is built in memory when the config is read)",
        )

    # For the memory estimate (mechsynth/training/budget.py) before anything is built.
    context_field: ClassVar[str] = "task.n"

    @property
    def fixed_bytes(self) -> int:
        """The fixed training set: int64 bits plus two int64 labels per example."""
        return 0 if self.n_train is None else self.n_train * (self.n + 2) * 8

    def sample_bytes(self, n_seqs: int, split: str) -> tuple[int, int]:
        """(bytes of `sample(n_seqs, split=split)`'s batch, peak bytes while making it)."""
        batch = n_seqs * ((self.n + 1) * 17 + 16)  # int64 tokens and targets, bool mask; labels
        return batch, batch + n_seqs * (self.n * 8 + 16)  # the bits, flips


def parity_labels(bits: Int[Tensor, "*batch bit"], support: Int[Tensor, "support"]) -> Int[Tensor, "*batch"]:
    """Parity of `bits[..., support]` for 0/1 bits (token ids): 1 iff an odd number are set."""
    return bits[..., support].sum(-1) % 2


def support_bits(bits: Int[Tensor, "batch bit"], support: Int[Tensor, "support"]) -> dict[str, Int[Tensor, "batch"]]:
    """`bit:<i>` [batch] for each i < |S|: the value (token id, 0 or 1) of the i-th bit of S in each sequence."""
    return {f"bit:{i}": v for i, v in enumerate(bits[:, support].unbind(1))}


def readout_latents(support: Int[Tensor, "support"], label: str) -> tuple[Latent, ...]:
    """The label (`label`: what it is, for people) and a categorical latent `bit:<i>` per bit of S, at the readout:
    what attention to S gathers there."""
    bits = tuple(
        Latent(
            f"bit:{i}",
            "categorical",
            f"bit:{i}",
            2,
            where="scored",
            about=f"the value of the bit at position {p}, the {i}-th of S, gathered at the readout",
        )
        for i, p in enumerate(support.tolist())
    )
    return (Latent("label", "categorical", "label", 2, where="scored", about=label),) + bits


def parity_truth(
    bits: Int[Tensor, "batch bit"], support: Int[Tensor, "support"], label: Int[Tensor, "batch"]
) -> dict[str, Any]:
    """Batch.truth of sparse_parity: `support` [support], the positions of the k bits the label reads
    (sorted); `label` [batch], the label before noise; `readout`, the readout token's position (an int:
    it follows the n bits); `bit:<i>` [batch] for i < k, the i-th bit of S (`support_bits`)."""
    return {"support": support, "label": label, "readout": bits.shape[1]} | support_bits(bits, support)


@TASKS.register("sparse_parity")
class SparseParity(Task):
    Config = SparseParityConfig
    patch_metric = "logit_diff"

    @property
    def truth_keys(self) -> tuple[str, ...]:  # type: ignore[override]
        """S, the label before noise, the readout position and each bit of S (parity_truth)."""
        return ("support", "label", "readout") + tuple(f"bit:{i}" for i in range(self.cfg.k))

    @property
    def latents(self) -> tuple[Latent, ...]:  # type: ignore[override]
        """The label before noise and each bit of S, at the readout."""
        return readout_latents(
            self.support, "the parity of S before noise: what Barak et al.'s network computes at the readout"
        )

    def __init__(self, cfg: SparseParityConfig):
        super().__init__(cfg)
        g = task_generator(cfg.seed)
        self.support = torch.randperm(cfg.n, generator=g)[: cfg.k].sort().values
        self._train_set = None
        if cfg.n_train is not None:
            bits = torch.randint(2, (cfg.n_train, cfg.n), generator=g)
            flips = (torch.rand(cfg.n_train, generator=g) < cfg.noise).long()
            self._train_set = (bits, parity_labels(bits, self.support) ^ flips, parity_labels(bits, self.support))

    @property
    def spec(self) -> TaskSpec:
        values = (1.0, -1.0) if self.cfg.encoding == "pm1" else (0.0, 1.0)
        # Token 0 is the bit value 0 (+1 in ±1 encoding); token 1 is bit 1 (−1); token 2 marks the readout.
        # In ±1 encoding the label "product = −1" is class 1, so both encodings share one label rule.
        names = ("+1", "-1") if self.cfg.encoding == "pm1" else ("0", "1")
        return TaskSpec(
            d_vocab=3,
            d_vocab_out=2,
            n_ctx=self.cfg.n + 1,
            token_names=names + ("?",),
            target_names=names,
            token_values=values + (0.0,),
        )

    def token_labels(self, tokens) -> list[str]:
        return readout_labels(self.spec.token_names, tokens, self.support)

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        self.check_split(split)
        cfg = self.cfg
        if split == "train" and self._train_set is not None:
            idx = torch.randint(cfg.n_train, (batch_size,), generator=generator, device=device)
            bits, labels, clean = (t.to(device)[idx] for t in self._train_set)
        else:
            bits = torch.randint(2, (batch_size, cfg.n), generator=generator, device=device)
            clean = parity_labels(bits, self.support.to(device))
            labels = clean
            if split == "train" and cfg.noise > 0:
                flips = torch.rand(batch_size, generator=generator, device=device) < cfg.noise
                labels = clean ^ flips.long()
        return readout_batch(bits, labels, parity_truth(bits, self.support.to(device), clean))

    def counterfactual(self, batch, generator, control=False) -> Optional[Batch]:
        """One bit flipped per sequence, uniform among S (the label flips) or, for `control`, among the bits
        outside S (the label stays; None when S is every bit)."""
        bits, device = batch.tokens[:, :-1], batch.tokens.device
        outside = torch.ones(self.cfg.n, dtype=torch.bool)
        outside[self.support] = False
        where = outside.nonzero()[:, 0] if control else self.support
        if len(where) == 0:
            return None
        pos = where[torch.randint(len(where), (len(bits),), generator=generator)].to(device)
        bits = bits.scatter(1, pos[:, None], 1 - bits.gather(1, pos[:, None]))
        clean = parity_labels(bits, self.support.to(device))
        # Each sequence keeps its label-noise flip (targets ^ clean label; none in eval): its target flips with the parity.
        labels = clean ^ batch.targets[:, -1] ^ batch.truth["label"]
        return readout_batch(bits, labels, parity_truth(bits, self.support.to(device), clean))
