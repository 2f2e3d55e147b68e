"""Synthetic tasks with known ground truth. Each file registers one family; adding a task touches one file."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from mechsynth.config import from_dict
from mechsynth.tasks.base import TASKS, Batch, Task, TaskSpec, align

# Import every sibling module so each registers itself.
for _m in pkgutil.iter_modules(__path__):
    if _m.name != "base":
        importlib.import_module(f"{__name__}.{_m.name}")


def names() -> list[str]:
    return TASKS.names()


def make(name: str, params: dict[str, Any] | None = None) -> Task:
    """Build task `name` from a dict of its parameters (validated; errors name `task.<key>`)."""
    cls = TASKS.get(name)
    return cls(from_dict(cls.Config, dict(params or {}), "task"))


__all__ = ["TASKS", "Batch", "Task", "TaskSpec", "align", "make", "names"]
