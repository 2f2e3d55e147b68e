"""SGD with optional momentum (the MLP baselines of the sparse-parity papers)."""

from __future__ import annotations

import torch

from mechsynth.optimizers.base import OPTIMIZERS, Hyper, OptimizerKind, Params


@OPTIMIZERS.register("sgd")
class SGD(OptimizerKind):
    elementwise = True

    @classmethod
    def state_slots(cls, cfg: Hyper) -> int:
        return 1 if cfg.momentum > 0 else 0  # the momentum buffer

    @classmethod
    def build(cls, params: Params, cfg: Hyper) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
