"""Optimizers: each file registers one; adding an optimizer touches one file. `train.optimizer` names it."""

from __future__ import annotations

import importlib
import pkgutil

import torch

from mechsynth.optimizers.base import OPTIMIZERS, Hyper, OptimizerKind, Params

# Import every sibling module so each registers itself.
for _m in pkgutil.iter_modules(__path__):
    if _m.name != "base":
        importlib.import_module(f"{__name__}.{_m.name}")


def names() -> list[str]:
    return OPTIMIZERS.names()


def elementwise() -> list[str]:
    """The optimizers seeds side by side allow."""
    return [n for n in names() if OPTIMIZERS.get(n).elementwise]


def get(name: str) -> type[OptimizerKind]:
    return OPTIMIZERS.get(name)


def build(name: str, params: Params, cfg: Hyper) -> torch.optim.Optimizer:
    """Optimizer `name` over `params` with `cfg`'s lr, betas, momentum and weight decay."""
    return OPTIMIZERS.get(name).build(list(params), cfg)


__all__ = ["OPTIMIZERS", "Hyper", "OptimizerKind", "build", "elementwise", "get", "names"]
