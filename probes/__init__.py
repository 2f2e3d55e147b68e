"""Probes that find circuits in checkpoints (installed as `mechsynth.probes`); one file per probe.

A probe declares the hooks it reads and the task truth it needs; `run` caches only those hooks and
returns a `ProbeResult`. Probes work on any TransformerLens-hooked model: `task=None` gives the
task-free probes random tokens from the model's own vocabulary and context size.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.registry import Registry


class ProbeError(ValueError):
    """A probe cannot run on this model or task; the message says why."""


@dataclass
class ProbeResult:
    probe: str
    per_head: Optional[Float[Tensor, "n_layers n_heads"]]  # the probe's score for every head, where it scores heads
    metrics: dict[str, float] = field(default_factory=dict)  # named scalars
    render: dict[str, Any] = field(default_factory=dict)  # tokens and attention of the top heads, for views

    def top_heads(self, n: int = 3) -> list[tuple[int, int, float]]:
        """(layer, head, score) of the n highest-scoring heads."""
        if self.per_head is None:
            return []
        flat = self.per_head.flatten()
        idx = flat.argsort(descending=True)[:n]
        n_heads = self.per_head.shape[1]
        return [(int(i) // n_heads, int(i) % n_heads, float(flat[i])) for i in idx]


@dataclass(frozen=True)
class Probe:
    name: str
    fn: Callable[..., ProbeResult]
    hooks: Callable[[int], list[str]]  # n_layers -> the hook names it caches
    truth: tuple[str, ...]  # keys of Batch.truth it reads
    needs_task: bool  # False: runs on random tokens when task is None
    threshold: float  # a head "has" the circuit once its score stays at or above this
    tasks: Optional[tuple[str, ...]]  # the tasks it applies to; None = any

    def applies_to(self, task) -> bool:
        return self.tasks is None or (task is not None and task.name in self.tasks)


PROBES: Registry[Probe] = Registry("probe")


def register(name: str, *, hooks: Callable[[int], list[str]], truth: tuple[str, ...] = (), needs_task: bool = False,
             threshold: float = 0.5, tasks: Optional[tuple[str, ...]] = None):
    """Decorator: `@register("induction", hooks=attention_hooks, threshold=0.5)` on fn(model, task, generator, batch_size)."""

    def deco(fn):
        PROBES.register(name)(Probe(name, fn, hooks, truth, needs_task, threshold, tasks))
        return fn

    return deco


def attention_hooks(n_layers: int) -> list[str]:
    return [f"blocks.{layer}.attn.hook_pattern" for layer in range(n_layers)]


def shape(model) -> tuple[int, int, int, int]:
    """(n_layers, n_heads, d_vocab, n_ctx) of a hooked transformer; a clear error for models without attention."""
    hooks = getattr(model, "hook_dict", {})
    if not any(name.endswith("attn.hook_pattern") for name in hooks):
        raise ProbeError(f"{type(model).__name__} has no attention heads; this probe needs a transformer")
    cfg = model.cfg
    return cfg.n_layers, cfg.n_heads, cfg.d_vocab, cfg.n_ctx


@torch.no_grad()
def patterns(model, tokens: Int[Tensor, "batch pos"], probe: str) -> Float[Tensor, "layer batch head query_pos key_pos"]:
    """Attention patterns of every layer, caching nothing but the probe's declared hooks."""
    names = set(PROBES.get(probe).hooks(shape(model)[0]))
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)
    return torch.stack([cache[n] for n in attention_hooks(shape(model)[0])])


def device_of(model) -> torch.device:
    return next(model.parameters()).device


def random_tokens(model, batch: int, length: int, generator: torch.Generator) -> Int[Tensor, "batch pos"]:
    _, _, d_vocab, n_ctx = shape(model)
    return torch.randint(d_vocab, (batch, min(length, n_ctx)), generator=generator).to(device_of(model))


def task_tokens(model, task, batch: int, generator: torch.Generator):
    """A held-out batch of the task, on the model's device."""
    return task.sample(batch, generator, "cpu", task.main_eval).to(device_of(model))


def head_metrics(prefix: str, per_head: Tensor) -> dict[str, float]:
    return {f"{prefix}L{layer}H{head}": float(per_head[layer, head])
            for layer in range(per_head.shape[0]) for head in range(per_head.shape[1])}


def render_heads(tokens: Tensor, pattern: Tensor, per_head: Tensor, n: int = 3) -> dict[str, Any]:
    """What a view needs: the first sequence's tokens and the attention of the n top heads on it."""
    flat = per_head.flatten().argsort(descending=True)[:n]
    heads = {}
    for i in flat.tolist():
        layer, head = divmod(i, per_head.shape[1])
        heads[f"L{layer}H{head}"] = pattern[layer, 0, head].cpu()
    return {"tokens": tokens[0].cpu(), "heads": heads}


def names() -> list[str]:
    return PROBES.names()


def run(name: str, model, task=None, *, batch_size: int = 64, seed: int = 0) -> ProbeResult:
    """Run probe `name` on a hooked model; same seed, same result."""
    probe = PROBES.get(name)
    if probe.needs_task and task is None:
        raise ProbeError(f"probe {name!r} reads the task's ground truth ({', '.join(probe.truth)}); pass the task")
    if not probe.applies_to(task):
        raise ProbeError(f"probe {name!r} applies to {', '.join(probe.tasks or ())}, not {task.name!r}")
    generator = torch.Generator().manual_seed(seed)
    was_training = model.training
    if was_training:  # toggling is not free on a TransformerBridge, so only when needed
        model.eval()
    try:
        return probe.fn(model, task, generator, batch_size)
    finally:
        if was_training:
            model.train()


for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["PROBES", "Probe", "ProbeError", "ProbeResult", "names", "register", "run"]
