"""AdamW: Adam with decoupled weight decay (the default)."""

from __future__ import annotations

import torch

from mechsynth.optimizers.base import OPTIMIZERS, Hyper, OptimizerKind, Params


@OPTIMIZERS.register("adamw")
class AdamW(OptimizerKind):
    elementwise = True

    @classmethod
    def state_slots(cls, cfg: Hyper) -> int:
        return 2  # first and second moments

    @classmethod
    def build(cls, params: Params, cfg: Hyper) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
