"""Adafactor (Shazeer & Stern 2018): Adam's second moment factored into row and column statistics.

Not elementwise: a matrix's update is scaled by its row and column means and by its own RMS, so weights
stacked side by side would share statistics across seeds; seeds side by side refuse it. Its step is
relative to each weight's RMS, so train.lr is about 1e-2 rather than Adam's 1e-3; betas and momentum are
not used (the second moment's decay follows the step count).
"""

from __future__ import annotations

import torch

from mechsynth.optimizers.base import OPTIMIZERS, Hyper, OptimizerKind, Params


if hasattr(torch.optim, "Adafactor"):  # torch >= 2.5

    @OPTIMIZERS.register("adafactor")
    class Adafactor(OptimizerKind):
        elementwise = False

        @classmethod
        def state_slots(cls, cfg: Hyper) -> int:
            return 1  # row and column means for a matrix, a full second moment for a vector: at most one

        @classmethod
        def build(cls, params: Params, cfg: Hyper) -> torch.optim.Optimizer:
            return torch.optim.Adafactor(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
