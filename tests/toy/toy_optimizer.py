"""An optimizer in one file: sign descent (each weight moves by lr against its gradient's sign)."""

from __future__ import annotations

import torch

from mechsynth.optimizers import OPTIMIZERS, OptimizerKind


class SignDescent(torch.optim.Optimizer):
    def __init__(self, params, lr: float):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad.sign(), alpha=-group["lr"])


@OPTIMIZERS.register("toy_sign")
class Sign(OptimizerKind):
    elementwise = True  # each weight's step reads only its own gradient

    @classmethod
    def state_slots(cls, cfg) -> int:
        return 0

    @classmethod
    def build(cls, params, cfg) -> torch.optim.Optimizer:
        return SignDescent(params, cfg.lr)
