"""Modular arithmetic (grokking): c = a ∘ b mod a prime p, learned from a fixed fraction of all pairs.

Power et al. 2022, "Grokking: generalization beyond overfitting on small algorithmic datasets": trained on
part of an operation's table, a network fits it at once and generalizes to the rest only much later.
Nanda et al. 2023, "Progress measures for grokking via mechanistic interpretability": a one-layer
transformer learns a + b by rotating a few Fourier frequencies of the residues into each other.

Sequences are Nanda et al.'s, 3 tokens: `a b =`. Token ids 0..p-1 are the residues, id p is "="; the
answer c (a class 0..p-1) is scored at "=" only. The input pairs are listed in a canonical order
(a-major: a = 0..p-1, then b = 0..p-1; for a/b without b = 0, which has no inverse), shuffled once by
the task seed; the first round(train_frac * N) are the training split, the rest the held-out "eval".
All pairs are few enough to list, so `enumerate` gives exact held-out metrics rather than a sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Optional, get_args

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from mechsynth.config import MAX_SEED, check, check_fields, doc, validates_itself
from mechsynth.tasks.base import TASKS, Batch, Latent, Task, TaskSpec, task_generator

Op = Literal["a+b", "a-b", "a*b", "a/b", "a^2+b^2", "a^2+ab+b^2", "a^3+ab"]  # from Power et al.'s list
OPS: tuple[str, ...] = get_args(Op)
# Ops whose answer is c_a*a + c_b*b mod p: on these, the Fourier directions of a and b are the algorithm
# (Nanda et al.), so a Fourier probe declares the truth key "linear" and applies to them alone.
LINEAR = {"a+b": (1, 1), "a-b": (1, -1)}
# All p² pairs are listed and shuffled when the config is read (9 bytes each: about 140 MiB at p = 4093), and
# `enumerate("all")` makes a batch of 51 bytes per pair; beyond 2**12 both would crowd a laptop's memory.
MAX_P = 2**12


def is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


@validates_itself
@dataclass(frozen=True)
class ModularArithmeticConfig:
    p: int = doc(
        "the prime modulus: residues 0..p-1 (Nanda et al.: 113)",
        113,
        lo=2,
        hi=MAX_P,
        why="all p² pairs are listed in memory when the config is read",
    )
    op: Op = doc("the operation a ∘ b (mod p); a/b is a · b^(p-2), over pairs with b ≠ 0", "a+b")
    train_frac: float = doc("fraction of all pairs in the training split; the rest are held out (eval)", 0.3)
    seed: int = doc("seed of the train/eval split of the pairs", 0, lo=0, hi=MAX_SEED, why="torch seeds are 64-bit")

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first
        check(is_prime(self.p), "p", f"must be prime, got {self.p}; allowed: a prime from 2 to {MAX_P}")
        check(self.op in OPS, "op", f"{self.op!r} is not allowed; allowed: {', '.join(map(repr, OPS))}")
        check(0 < self.train_frac < 1, "train_frac", f"must be in (0, 1), got {self.train_frac}")
        check(
            0 < self.n_train < self.n_pairs,
            "train_frac",
            f"round(train_frac * {self.n_pairs} pairs) = {self.n_train} leaves a split empty (p={self.p}, "
            f"op={self.op!r}); allowed: a fraction giving both splits at least one pair",
        )

    @property
    def n_pairs(self) -> int:
        """N, the number of input pairs: p², or p(p-1) for a/b."""
        return self.p * (self.p - 1 if self.op == "a/b" else self.p)

    @property
    def n_train(self) -> int:
        return round(self.train_frac * self.n_pairs)

    # For the memory estimate (mechsynth/training/budget.py). The sequence is always 3 tokens: p, which sets the
    # vocabulary and the pair tables, is the one field that sizes this task.
    context_field: ClassVar[str] = "task.p"

    @property
    def fixed_bytes(self) -> int:
        """The split: int64 indices of both splits' pairs and a bool in_train per pair."""
        return self.n_pairs * 9

    def sample_bytes(self, n_seqs: int, split: str) -> tuple[int, int]:
        """(bytes of `sample(n_seqs, split=split)`'s batch, peak bytes while making it)."""
        batch = n_seqs * (3 * 17 + 25)  # int64 tokens and targets, bool mask; truth a, b, c (int64), in_train
        return batch, batch + n_seqs * 6 * 8  # the draws, pair indices, the answer's int64 temporaries


def modpow(x: Int[Tensor, "*batch"], e: int, p: int) -> Int[Tensor, "*batch"]:
    """x**e mod p by square-and-multiply (on x's device; products stay below p² < 2**24)."""
    out, x = torch.ones_like(x), x % p
    while e:
        if e & 1:
            out = out * x % p
        x, e = x * x % p, e >> 1
    return out


def answer(op: str, a: Int[Tensor, "batch"], b: Int[Tensor, "batch"], p: int) -> Int[Tensor, "batch"]:
    """c = a ∘ b mod p (torch's % is non-negative for p > 0; a**3 < 2**36 fits int64)."""
    c = {
        "a+b": lambda: a + b,
        "a-b": lambda: a - b,
        "a*b": lambda: a * b,
        "a/b": lambda: a * modpow(b, p - 2, p),
        "a^2+b^2": lambda: a * a + b * b,
        "a^2+ab+b^2": lambda: a * a + a * b + b * b,
        "a^3+ab": lambda: a**3 + a * b,
    }[op]()
    return c % p


def modular_truth(
    a: Int[Tensor, "batch"],
    b: Int[Tensor, "batch"],
    modulus: int,
    in_train: Bool[Tensor, "batch"],
    c: Int[Tensor, "batch"],
    linear: Optional[tuple[int, int]] = None,
) -> dict[str, Any]:
    """Batch.truth of modular_arithmetic: `a` [batch] and `b` [batch], the operands; `modulus`, p (an int);
    `in_train` [batch], whether the pair is in the training split; `c` [batch], the answer a ∘ b mod p (the
    target at "="); and for ops linear in a and b (a+b, a-b) `linear`, a tuple (c_a, c_b) of ints with
    c = c_a·a + c_b·b mod p."""
    out = {"a": a, "b": b, "modulus": modulus, "in_train": in_train, "c": c}
    return out | ({} if linear is None else {"linear": linear})


@TASKS.register("modular_arithmetic")
class ModularArithmetic(Task):
    Config = ModularArithmeticConfig
    patch_metric = "logit_diff"

    def __init__(self, cfg: ModularArithmeticConfig):
        super().__init__(cfg)
        perm = torch.randperm(cfg.n_pairs, generator=task_generator(cfg.seed))
        in_train = torch.zeros(cfg.n_pairs, dtype=torch.bool)
        in_train[perm[: cfg.n_train]] = True
        # Each split's pair indices in canonical order (what `enumerate` lists; `sample` draws from them).
        split = {"train": in_train.nonzero()[:, 0], "eval": (~in_train).nonzero()[:, 0]}
        self._tables: dict[torch.device, tuple[dict[str, Tensor], Tensor]] = {torch.device("cpu"): (split, in_train)}

    @property
    def truth_keys(self) -> tuple[str, ...]:  # type: ignore[override]
        """modular_truth's keys; "linear" only where the op is linear in a and b."""
        return ("a", "b", "modulus", "in_train", "c") + (("linear",) if self.cfg.op in LINEAR else ())

    @property
    def latents(self) -> tuple[Latent, ...]:  # type: ignore[override]
        """The operands and the answer, at "=" (where the answer is read out)."""
        p = self.cfg.p
        return (
            Latent("a", "categorical", "a", p, where="scored", about='the first operand, moved to "=" by attention'),
            Latent("b", "categorical", "b", p, where="scored", about='the second operand, moved to "=" by attention'),
            Latent(
                "c",
                "categorical",
                "c",
                p,
                where="scored",
                about="the answer a ∘ b mod p, which Nanda et al.'s MLP computes from Fourier terms of a and b",
            ),
        )

    @property
    def spec(self) -> TaskSpec:
        # The default token_labels reads these: residues as their numbers, "=" for the last token.
        residues = tuple(str(i) for i in range(self.cfg.p))
        return TaskSpec(
            d_vocab=self.cfg.p + 1,
            d_vocab_out=self.cfg.p,
            n_ctx=3,
            token_names=residues + ("=",),
            target_names=residues,
        )

    def tables(self, device: torch.device | str) -> tuple[dict[str, Tensor], Tensor]:
        """(each split's pair indices, in_train per pair) on `device`, copied there once: at large p they
        are up to ~140 MiB, too much to move for every batch."""
        device = torch.empty(0, device=device).device  # "cuda" and "cuda:0" are one device: one copy
        if device not in self._tables:
            split, in_train = self._tables[torch.device("cpu")]
            self._tables[device] = ({k: v.to(device) for k, v in split.items()}, in_train.to(device))
        return self._tables[device]

    def batch(self, index: Int[Tensor, "batch"]) -> Batch:
        """The sequences `a b =` of the pairs with these canonical indices, answer at "="."""
        cfg, (_, in_train) = self.cfg, self.tables(index.device)
        if cfg.op == "a/b":  # b = 0 is not an input
            a, b = index // (cfg.p - 1), index % (cfg.p - 1) + 1
        else:
            a, b = index // cfg.p, index % cfg.p
        tokens = torch.stack([a, b, torch.full_like(a, cfg.p)], 1)
        targets = torch.zeros_like(tokens)
        c = answer(cfg.op, a, b, cfg.p)
        targets[:, -1] = c
        mask = torch.zeros_like(tokens, dtype=torch.bool)
        mask[:, -1] = True
        return Batch(tokens, targets, mask, modular_truth(a, b, cfg.p, in_train[index], c, LINEAR.get(cfg.op)))

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        """Pairs of `split` drawn uniformly with replacement."""
        self.check_split(split)
        pairs = self.tables(device)[0][split]
        return self.batch(pairs[torch.randint(len(pairs), (batch_size,), generator=generator, device=device)])

    def enumerate(self, split: str) -> Batch:
        """Every pair of "train" or "eval", or "all" pairs, in canonical order, as one batch on the CPU."""
        if split == "all":
            return self.batch(torch.arange(self.cfg.n_pairs))
        if split not in self.splits:
            raise ValueError(f"split: {split!r} is not a split of {self.name}; allowed: {', '.join(self.splits)}, all")
        return self.batch(self.tables("cpu")[0][split])

    def counterfactual(self, batch, generator, control=False) -> Optional[Batch]:
        """b replaced by a residue giving another answer, uniform among those (for a/b, among b ≠ 0); where a
        leaves every b the same answer (a = 0 in a*b, a/b, a^3+ab), by any other b, and the answer stays.
        Checks all p residues per pair: O(batch · p). No control: the answer reads every token but "="."""
        if control:
            return None
        cfg, device = self.cfg, batch.tokens.device
        a, b = batch.tokens[:, 0], batch.tokens[:, 1]
        B, p = len(a), cfg.p
        other = torch.arange(p, device=device).expand(B, p)
        c = answer(cfg.op, a.repeat_interleave(p), other.flatten(), p).view(B, p)
        allowed = (other != b[:, None]) & ((other != 0) if cfg.op == "a/b" else True)
        differs = allowed & (c != c.gather(1, b[:, None]))
        score = torch.rand(B, p, generator=generator).to(device) + allowed + differs
        new = torch.where(allowed.any(-1), score.argmax(-1), b)
        index = a * (p - 1) + new - 1 if cfg.op == "a/b" else a * p + new
        return self.batch(index)
