"""MeZO (Malladi et al. 2023, "Fine-tuning language models with just forward passes"): zeroth-order SGD.

Each step draws a direction z ~ N(0, I) over all weights from one seed, evaluates the batch's loss at θ + εz and
θ − εz (two forward passes, no backward), and moves θ by −lr · (L₊ − L₋)/(2ε) · z, regenerating z from the seed
instead of storing it, so memory stays at inference level: no gradients, no optimizer state, one weight-sized
tensor at a time. Their Algorithm 1, with their ε = 1e-3 and decoupled weight decay applied before the step.

Not elementwise: the projected gradient is one scalar from the whole model's loss, so seeds stacked side by side
would share it; seeds side by side refuse MeZO. The step count lives in the param groups (the optimizer's
state_dict), and z's seed is the step count, so a resumed run draws the same directions; every run draws the same
sequence of directions (its seed, init and data differ). `train.grad_clip`, betas and momentum do not apply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch
from torch import Tensor

from mechsynth.optimizers.base import OPTIMIZERS, Hyper, OptimizerKind, Params

EPS = 1e-3  # Malladi et al.'s perturbation scale ε
SEED = 20_230_531  # z at step t is drawn from SEED + t


class MeZOOptimizer(torch.optim.Optimizer):
    def __init__(self, params: Params, lr: float, eps: float = EPS, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, eps=eps, weight_decay=weight_decay, step=0))

    def _walk(self, seed: int, move: Callable[[dict, Tensor, Tensor], None]) -> None:
        """move(group, p, z) for every parameter in a fixed order, z drawn afresh from `seed`: the same z each walk."""
        generators: dict[torch.device, torch.Generator] = {}
        for group, p in ((g, p) for g in self.param_groups for p in g["params"]):
            if p.device not in generators:
                generators[p.device] = torch.Generator(device=p.device).manual_seed(seed)
            move(group, p, torch.randn(p.shape, generator=generators[p.device], device=p.device, dtype=p.dtype))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Tensor]] = None) -> Tensor:  # type: ignore[override]
        """One MeZO step; `closure` returns the batch's loss at the current weights (called twice). Returns the
        mean of the two losses (the loss at θ up to O(ε²))."""
        if closure is None:
            raise RuntimeError("MeZO steps from two forward passes: call step(closure), closure returning the loss")
        seed = SEED + self.param_groups[0]["step"]
        self._walk(seed, lambda g, p, z: p.add_(z, alpha=g["eps"]))
        plus = closure().detach()
        self._walk(seed, lambda g, p, z: p.add_(z, alpha=-2 * g["eps"]))
        minus = closure().detach()
        self._walk(seed, lambda g, p, z: p.add_(z, alpha=g["eps"]))
        projected = float(plus - minus) / (2 * self.param_groups[0]["eps"])

        def update(g: dict, p: Tensor, z: Tensor) -> None:
            if g["weight_decay"]:
                p.mul_(1 - g["lr"] * g["weight_decay"])
            p.add_(z, alpha=-g["lr"] * projected)

        self._walk(seed, update)
        for g in self.param_groups:
            g["step"] += 1
        return (plus + minus) / 2


@OPTIMIZERS.register("mezo")
class MeZO(OptimizerKind):
    elementwise = False
    zeroth_order = True

    @classmethod
    def state_slots(cls, cfg: Hyper) -> int:
        return 0

    @classmethod
    def build(cls, params: Params, cfg: Hyper) -> torch.optim.Optimizer:
        return MeZOOptimizer(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
