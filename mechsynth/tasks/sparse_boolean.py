"""Sparse Boolean functions (Edelman et al. 2022): the label is an s-sparse function of T input bits.

The function reads the bits at hidden positions S (drawn from the task seed). A transformer can
learn it by attending from the readout position to S ("sparse variable creation"), with a sample
complexity that grows only like log T.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Optional

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth.config import MAX_CTX, MAX_SEED, check, check_fields, doc, validates_itself
from mechsynth.tasks.base import (
    TASKS,
    Batch,
    Latent,
    Task,
    TaskSpec,
    align,
    readout_batch,
    readout_labels,
    task_generator,
)
from mechsynth.tasks.sparse_parity import MAX_TRAIN_BITS, readout_latents, support_bits


@validates_itself
@dataclass(frozen=True)
class SparseBooleanConfig:
    length: int = doc("T, the number of input bits", 16, lo=1, hi=MAX_CTX - 1, why="the sequence is length + 1 tokens")
    s: int = doc("number of relevant positions |S|", 3, lo=1, hi=16, why="the truth table has 2**s rows")
    function: Literal["and", "or", "majority", "parity", "table"] = doc("the Boolean function of the s bits", "and")
    table: tuple[int, ...] = doc(
        "truth table for function='table': 2**s outputs, indexed by the s bits read as a binary number (first bit most significant)",
        (),
    )
    bias: Optional[float] = doc(
        "probability that an input bit is 1; unset = 0.5, or for 'and'/'or' the value making the label balanced", None
    )
    n_train: Optional[int] = doc(
        "fixed training set of this many examples; unset = fresh samples; n_train * length ≤ 2**26 bits",
        None,
        lo=1,
        hi=2**26,
        why="it is built when the config is read",
    )
    seed: int = doc(
        "seed of the hidden positions S (and of the fixed training set)",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit",
    )

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first
        check(1 <= self.s <= self.length, "s", f"must be between 1 and length={self.length}, got {self.s}")
        check(self.s <= 16, "s", f"must be ≤ 16 (the truth table has 2**s rows), got {self.s}")
        if self.function == "table":
            check(
                len(self.table) == 2**self.s and set(self.table) <= {0, 1},
                "table",
                f"must list 2**s = {2**self.s} outputs, each 0 or 1; got {len(self.table)} values",
            )
        else:
            check(not self.table, "table", "is only allowed with function='table'")
        check(self.bias is None or 0.0 < self.bias < 1.0, "bias", f"must be in (0, 1) or unset, got {self.bias}")
        check(
            self.n_train is None or self.n_train * self.length <= MAX_TRAIN_BITS,
            "n_train",
            f"n_train * length = {self.n_train * self.length if self.n_train else 0} bits is too many; allowed: "
            "n_train * length ≤ 2**26 (the fixed training set is built in memory when the config is read)",
        )

    # For the memory estimate (mechsynth/training/budget.py) before anything is built.
    context_field: ClassVar[str] = "task.length"

    @property
    def fixed_bytes(self) -> int:
        """The fixed training set: int64 bits."""
        return 0 if self.n_train is None else self.n_train * self.length * 8

    def sample_bytes(self, n_seqs: int, split: str) -> tuple[int, int]:
        """(bytes of `sample(n_seqs, split=split)`'s batch, peak bytes while making it)."""
        batch = n_seqs * ((self.length + 1) * 17 + 16)  # int64 tokens and targets, bool mask; labels
        return batch, batch + n_seqs * self.length * 13  # float32 draws, bool, int64 bits


def truth_table(function: str, s: int, table: tuple[int, ...] = ()) -> Int[Tensor, "row"]:
    """Output for each of the 2**s inputs, row index = the bits read as a binary number (MSB first)."""
    rows = torch.arange(2**s)
    bits = (rows[:, None] >> torch.arange(s - 1, -1, -1)) & 1
    ones = bits.sum(-1)
    return {
        "and": (ones == s).long(),
        "or": (ones > 0).long(),
        "majority": (2 * ones > s).long(),
        "parity": ones % 2,
        "table": torch.tensor(table, dtype=torch.long) if table else torch.zeros(0, dtype=torch.long),
    }[function]


def selection_truth(
    bits: Int[Tensor, "batch bit"], support: Int[Tensor, "support"], label: Int[Tensor, "batch"]
) -> dict[str, Any]:
    """Batch.truth of sparse_boolean: `support` [support], the s positions the function reads (sorted);
    `readout`, the readout token's position (an int: it follows the T bits); `label` [batch], the function's
    value (the target); `bit:<i>` [batch] for i < s, the i-th bit of S (`support_bits`)."""
    return {"support": support, "readout": bits.shape[1], "label": label} | support_bits(bits, support)


@TASKS.register("sparse_boolean")
class SparseBoolean(Task):
    Config = SparseBooleanConfig
    patch_metric = "logit_diff"

    @property
    def truth_keys(self) -> tuple[str, ...]:  # type: ignore[override]
        """S, the readout position, the label and each bit of S (selection_truth)."""
        return ("support", "readout", "label") + tuple(f"bit:{i}" for i in range(self.cfg.s))

    @property
    def latents(self) -> tuple[Latent, ...]:  # type: ignore[override]
        """The label and each bit of S, at the readout."""
        return readout_latents(
            self.support, "the function's value, computed at the readout from the bits of S (Edelman et al.)"
        )

    def __init__(self, cfg: SparseBooleanConfig):
        super().__init__(cfg)
        g = task_generator(cfg.seed)
        self.support = torch.randperm(cfg.length, generator=g)[: cfg.s].sort().values
        self.table = truth_table(cfg.function, cfg.s, cfg.table)
        # AND/OR of s fair bits is almost always 0/1; bias the bits so both labels are common.
        default = {"and": 0.5 ** (1 / cfg.s), "or": 1 - 0.5 ** (1 / cfg.s)}.get(cfg.function, 0.5)
        self.p_one = cfg.bias if cfg.bias is not None else default
        self._train_set = None
        if cfg.n_train is not None:
            self._train_set = (torch.rand(cfg.n_train, cfg.length, generator=g) < self.p_one).long()

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec(
            d_vocab=3,
            d_vocab_out=2,
            n_ctx=self.cfg.length + 1,
            token_names=("0", "1", "?"),
            target_names=("0", "1"),
            token_values=(-1.0, 1.0, 0.0),
        )

    def token_labels(self, tokens) -> list[str]:
        return readout_labels(self.spec.token_names, tokens, self.support)

    def label(self, bits: Int[Tensor, "batch bit"]) -> Int[Tensor, "batch"]:
        weights = 2 ** torch.arange(self.cfg.s - 1, -1, -1, device=bits.device)
        return self.table.to(bits.device)[(bits[:, self.support.to(bits.device)] * weights).sum(-1)]

    def metrics(self, logits: Float[Tensor, "batch out_pos d_vocab_out"], batch: Batch) -> dict[str, float]:
        """Adds balanced_acc, the mean of the accuracies on label-0 and label-1 examples (over the labels the
        batch has): with fair bits an AND is 1 once in 2**s, so always answering 0 scores acc 1 - 2**-s
        but balanced_acc 0.5."""
        out = super().metrics(logits, batch)
        out["balanced_acc"] = balanced_accuracy(logits, batch)
        return out

    def training_set(self) -> Optional[Batch]:
        """The whole fixed training set (`n_train` sequences, in the order drawn) as one batch, to check
        that a model fits it; None when training samples are fresh."""
        if self._train_set is None:
            return None
        labels = self.label(self._train_set)
        return readout_batch(self._train_set, labels, selection_truth(self._train_set, self.support, labels))

    def pivotal(self, bits: Int[Tensor, "batch bit"]) -> Bool[Tensor, "batch support"]:
        """Which bits of S change the label when flipped, in each sequence."""
        weights = 2 ** torch.arange(self.cfg.s - 1, -1, -1, device=bits.device)
        row = (bits[:, self.support.to(bits.device)] * weights).sum(-1, keepdim=True)
        table = self.table.to(bits.device)
        return table[row ^ weights] != table[row]

    def counterfactual(self, batch, generator, control=False) -> Optional[Batch]:
        """One bit flipped per sequence: uniform among its pivotal bits of S (the label flips), or among all of S
        where none is (AND with two zeros in S: no single flip changes it, and the label stays); for `control`,
        uniform among the bits outside S (None when S is every bit)."""
        bits, device = batch.tokens[:, :-1], batch.tokens.device
        if control:
            outside = torch.ones(self.cfg.length, dtype=torch.bool)
            outside[self.support] = False
            where = outside.nonzero()[:, 0]
            if len(where) == 0:
                return None
            pos = where[torch.randint(len(where), (len(bits),), generator=generator)].to(device)
        else:  # the argmax of iid uniforms is uniform over the pivotal bits, or over S where there are none
            u = torch.rand(bits.shape[0], self.cfg.s, generator=generator).to(device)
            pos = self.support.to(device)[(u + self.pivotal(bits)).argmax(-1)]
        bits = bits.scatter(1, pos[:, None], 1 - bits.gather(1, pos[:, None]))
        labels = self.label(bits)
        return readout_batch(bits, labels, selection_truth(bits, self.support.to(device), labels))

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        self.check_split(split)
        if split == "train" and self._train_set is not None:
            idx = torch.randint(len(self._train_set), (batch_size,), generator=generator, device=device)
            bits = self._train_set.to(device)[idx]
        else:
            bits = (torch.rand(batch_size, self.cfg.length, generator=generator, device=device) < self.p_one).long()
        labels = self.label(bits)
        return readout_batch(bits, labels, selection_truth(bits, self.support.to(device), labels))


def balanced_accuracy(logits: Float[Tensor, "batch out_pos d_vocab_out"], batch: Batch) -> float:
    """Mean over the target classes present at scored positions of the accuracy on that class's examples."""
    logits, targets, mask = align(logits, batch)
    right, targets = (logits.argmax(-1) == targets)[mask], targets[mask]
    return torch.stack([right[targets == c].float().mean() for c in targets.unique()]).mean().item()
