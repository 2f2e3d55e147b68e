"""What the loss landscape probes (llc, sharpness) share: the loss they differentiate, the batch they
differentiate it on, and which checkpoints they visit."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from jaxtyping import Float
from torch import Tensor, nn

from mechsynth.probes._base import ProbeError, View
from mechsynth.tasks.base import Batch, LossKind, masked_loss


def training_batch(view: View, n: int, seed: int) -> Batch:
    """The data the run's training loss is a mean over: its fixed training set where it trained on one
    (`train.data = "fixed"`: the whole set, the loss gradient descent saw), else `n` sequences of the
    task's training split drawn with `seed` (a fixed batch, the same at every checkpoint)."""
    if view.train_set is not None:
        return view.train_set
    if view.task is None:
        raise ProbeError("a loss landscape probe differentiates the task's training loss; pass the task")
    return view.task.sample(n, torch.Generator().manual_seed(seed), "cpu", "train")


def loss(model: Callable[[Tensor], Tensor], batch: Batch, kind: LossKind = "cross_entropy") -> Float[Tensor, ""]:
    """The training loss of `model` (a module, or its forward as a function of the tokens): the mean of the
    task's loss (`kind`: cross-entropy, or squared error) over the scored positions, what the trainer minimises."""
    return masked_loss(model(batch.tokens), batch, kind)


def loss_kind(view: View) -> LossKind:
    """The loss of the view's task (`Task.loss_kind`); cross-entropy without a task."""
    return getattr(view.task, "loss_kind", "cross_entropy")


def device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def log_spaced(steps: Sequence[int], n: int) -> list[int]:
    """At most `n` of `steps`, as evenly spaced in log(step + 1) as the checkpoints allow, always with
    the first and the last (all of them when n is 0 or there are no more than n; the last alone when n is 1)."""
    if n <= 0 or len(steps) <= n:
        return list(steps)
    if n == 1:  # the trained model
        return [steps[-1]]
    lo, hi = math.log1p(steps[0]), math.log1p(steps[-1])
    chosen = []
    for i in range(n):
        target = lo + (hi - lo) * i / (n - 1)
        best = min((s for s in steps if s not in chosen), key=lambda s: abs(math.log1p(s) - target))
        chosen.append(best)
    return sorted(chosen)


def finite(steps: Sequence[int], values: Sequence[float]) -> tuple[list[int], list[float]]:
    """The (step, value) pairs a landscape probe measured: it leaves the other checkpoints NaN."""
    pairs = [(s, v) for s, v in zip(steps, values) if v is not None and math.isfinite(v)]
    return [s for s, _ in pairs], [v for _, v in pairs]
