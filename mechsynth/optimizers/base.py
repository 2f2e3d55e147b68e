"""What every optimizer provides: whether it is elementwise, its state's size, and how to build it.

An optimizer is one file in mechsynth/optimizers/ that registers a subclass of `OptimizerKind`
(`@OPTIMIZERS.register("adamw")`); `train.optimizer` names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, Union, runtime_checkable

import torch
from torch import Tensor

from mechsynth.registry import Registry


@runtime_checkable
class Hyper(Protocol):
    """The TrainConfig fields an optimizer may read (a Protocol: this package does not import mechsynth.training.train,
    which imports it)."""

    lr: float
    betas: tuple[float, float]
    momentum: float
    weight_decay: float


# The tensors to optimize, or torch's param groups ({"params": [...], "weight_decay": 0.0}) where some differ.
Params = Union[Sequence[Tensor], Sequence[dict[str, Any]]]


class OptimizerKind:
    name: ClassVar[str]  # set by OPTIMIZERS.register
    # Whether each element's update depends only on that element's own gradient history (and scalars such
    # as the step count). Seeds side by side stack every seed's weights into one tensor, so only an
    # elementwise optimizer keeps the seeds independent (mechsynth/training/seeds.py).
    elementwise: ClassVar[bool]
    # Whether it steps from losses alone (`step(closure)`, the closure returning the batch's loss without
    # gradients) rather than from gradients the trainer computed: the trainer then skips the backward pass.
    zeroth_order: ClassVar[bool] = False

    @classmethod
    def state_slots(cls, cfg: Hyper) -> int:
        """Parameter-sized buffers of optimizer state (an upper estimate, for mechsynth/training/budget.py)."""
        raise NotImplementedError

    @classmethod
    def build(cls, params: Params, cfg: Hyper) -> torch.optim.Optimizer:
        """The torch optimizer over `params`, at the peak `cfg.lr` (the trainer sets each step's LR in
        its param groups)."""
        raise NotImplementedError


OPTIMIZERS: Registry[type[OptimizerKind]] = Registry("optimizer")
