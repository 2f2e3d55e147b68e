"""A fixed training set for any task (`train.data = "fixed"`): the finite-data regime of grokking and of
hidden progress with few samples, where the training loss reaches 0 long before the held-out loss.

The set is drawn once from the task's training split, seeded by `train.set_seed` alone, so every seed
trained side by side (and every separate run with another `train.seed`) sees the same examples, in its
own order. Training goes through it in epochs: each chunk of training data the trainer asks for is one
epoch, the set in a fresh order, so resuming mid-epoch regenerates the epoch from the stored generator
state like any chunk. Its whole is evaluated as the split `train_set`, beside the task's held-out splits.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from jaxtyping import Float
from torch import Tensor

from mechsynth.tasks.base import Batch

TRAIN_SET = "train_set"  # the split under which the fixed set's own metrics are recorded


class FixedTrainingSet:
    """A DataSource (mechsynth/training/train.py) serving `n` examples of `data`'s training split, or all of them
    (n None) for a task that lists its inputs (`enumerate`). `epoch` is the set's size."""

    def __init__(self, data: Any, n: Optional[int], seed: int):
        self.data = data
        self.splits = (*data.splits, TRAIN_SET)
        listed = data.enumerate("train")
        if listed is None:  # a task that only samples: n draws (parse_config refuses n unset here)
            self.set = data.sample(n, torch.Generator().manual_seed(seed), "cpu", "train")
        else:  # n distinct examples of the listed split, or all of it
            order = torch.randperm(len(listed.tokens), generator=torch.Generator().manual_seed(seed))[:n]
            self.set = select(listed, order.sort().values)
        self.epoch = len(self.set.tokens)
        self._on: dict[str, Batch] = {}

    def _set(self, device: Any) -> Batch:
        key = str(device)
        if key not in self._on:
            self._on[key] = self.set.to(device)
        return self._on[key]

    def sample(self, batch_size: int, generator: torch.Generator, device: Any = "cpu", split: str = "train") -> Batch:
        """For "train": consecutive epochs, each the set in a fresh order drawn with `generator`, cut to
        `batch_size` sequences (no truth: training needs only tokens, targets and mask). Other splits: the task's."""
        if split == TRAIN_SET:
            return self._set(device)
        if split != "train":
            return self.data.sample(batch_size, generator, device, split)
        epochs = -(-batch_size // self.epoch)
        order = torch.cat(
            [torch.randperm(self.epoch, generator=generator, device=generator.device) for _ in range(epochs)]
        )[:batch_size]
        s = self._set(device)
        order = order.to(s.tokens.device)
        return Batch(s.tokens[order], s.targets[order], s.mask[order])

    def enumerate(self, split: str) -> Optional[Batch]:
        return self.set if split == TRAIN_SET else self.data.enumerate(split)

    def metrics(self, logits: Float[Tensor, "batch out_pos d_vocab_out"], batch: Batch) -> dict[str, float]:
        return self.data.metrics(logits, batch)

    def __getattr__(self, name: str) -> Any:  # main_eval, spec, truth_keys, ...: the task's own
        if name == "data":
            raise AttributeError(name)
        return getattr(self.data, name)


def select(batch: Batch, rows: Tensor) -> Batch:
    """The examples `rows` of a listed batch, with the truth of every per-example tensor (those with the
    batch's length) taken along."""
    n = len(batch.tokens)
    take = lambda v: v[rows] if isinstance(v, Tensor) and v.ndim and v.shape[0] == n else v  # noqa: E731
    return Batch(
        batch.tokens[rows], batch.targets[rows], batch.mask[rows], {k: take(v) for k, v in batch.truth.items()}
    )
