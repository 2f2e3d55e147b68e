"""Probes that find circuits in checkpoints (installed as `mechsynth.probes`); one file per probe.

A probe declares which inputs it reads and which hooks it needs on each, and the task truth it uses;
`run` draws each input once, runs the model once per input with `run_with_cache` caching only the
declared hooks, and hands the probe a `View` of the results. Inputs are shared: probes that read the
same input share one forward pass, and `run_many` probes M side-by-side models (checkpoints of a run,
or seeds) with one batched forward per input.

Inputs, each drawn from its own generator so it is the same for every probe and every checkpoint:
- `random`: uniform random tokens from the model's vocabulary, the model's full context;
- `data`: a held-out batch of the task (its main evaluation split) — `random` when there is no task;
- `repeated`: a random sequence repeated twice (induction);
- `task:<split>`: a batch of another split of the task (e.g. automata's longer `eval_long`).

Probes work on any TransformerLens-hooked model; a probe whose hooks a model lacks (attention on an
MLP) raises ProbeError saying what it needs.
"""

from __future__ import annotations

import importlib
import pkgutil
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.registry import Registry
from mechsynth.tasks.base import Batch


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


Hooks = Callable[[int], list[str]]  # n_layers -> hook names


@dataclass(frozen=True)
class Probe:
    name: str
    fn: Callable[["View"], ProbeResult]
    reads: dict[str, Hooks]  # input -> the hooks it caches on that input (an empty list: logits only)
    truth: tuple[str, ...]  # keys of Batch.truth it reads
    needs_task: bool  # False: runs on random tokens when task is None
    needs_init: bool  # reads the step-0 weights (hidden progress)
    threshold: float  # a head "has" the circuit once its score stays at or above this
    tasks: Optional[tuple[str, ...]]  # the tasks it applies to; None = any

    def applies_to(self, task) -> bool:
        return self.tasks is None or (task is not None and task.name in self.tasks)


PROBES: Registry[Probe] = Registry("probe")


def register(name: str, *, reads: dict[str, Hooks], truth: tuple[str, ...] = (), needs_task: bool = False,
             needs_init: bool = False, threshold: float = 0.5, tasks: Optional[tuple[str, ...]] = None):
    """Decorator: `@register("induction", reads={"repeated": attention_hooks})` on fn(view) -> ProbeResult."""

    def deco(fn):
        PROBES.register(name)(Probe(name, fn, reads, truth, needs_task, needs_init, threshold, tasks))
        return fn

    return deco


def attention_hooks(n_layers: int) -> list[str]:
    return [f"blocks.{layer}.attn.hook_pattern" for layer in range(n_layers)]


def no_hooks(n_layers: int) -> list[str]:
    return []


@dataclass
class View:
    """What a probe sees of one model: its inputs, the logits and cached activations on each, and its
    weights (TransformerLens names: W_E, W_pos, W_V, ...; W_in for the MLP baseline)."""

    task: Any
    n_layers: int
    n_heads: int
    outputs: dict[str, tuple[Batch, Tensor, dict[str, Tensor]]]  # input -> (batch, logits, cache)
    weight: Callable[[str], Tensor]
    init_weight: Optional[Callable[[str], Tensor]] = None  # the same weights at step 0

    def batch(self, input: str) -> Batch:
        return self.outputs[_resolve(input, self.task)][0]

    def tokens(self, input: str) -> Int[Tensor, "batch pos"]:
        return self.batch(input).tokens

    def logits(self, input: str) -> Float[Tensor, "batch pos d_vocab_out"]:
        return self.outputs[_resolve(input, self.task)][1]

    def cache(self, input: str) -> dict[str, Tensor]:
        return self.outputs[_resolve(input, self.task)][2]

    def patterns(self, input: str) -> Float[Tensor, "layer batch head query_pos key_pos"]:
        return torch.stack([self.cache(input)[h] for h in attention_hooks(self.n_layers)])


# ---- inputs -------------------------------------------------------------------------------------


def _dims(model) -> tuple[int, int, int, int]:
    """(n_layers, n_heads, d_vocab, n_ctx); no layers or heads for a model without attention."""
    hooks = getattr(model, "hook_dict", {})
    n_layers = sum(f"blocks.{layer}.attn.hook_pattern" in hooks for layer in range(len(hooks)))
    own = isinstance(getattr(model, "d_vocab", None), int)  # our models; TransformerLens keeps sizes in cfg
    return (n_layers, model.cfg.n_heads if n_layers else 0, model.d_vocab if own else model.cfg.d_vocab,
            model.n_ctx if own else model.cfg.n_ctx)


def _resolve(input: str, task) -> str:
    return "random" if input == "data" and task is None else input


def _draw(input: str, model, task, batch_size: int, seed: int) -> Batch:
    """The input `input`: its own generator, so every probe and checkpoint sees the same tokens."""
    g = torch.Generator().manual_seed((zlib.crc32(input.encode()) + seed * 1_000_003) % 2**63)
    _, _, d_vocab, n_ctx = _dims(model)
    if input == "random":
        tokens = torch.randint(d_vocab, (batch_size, n_ctx), generator=g)
    elif input == "repeated":
        first = torch.randint(d_vocab, (batch_size, min(n_ctx // 2, 64)), generator=g)
        tokens = torch.cat([first, first], 1)
    elif input == "data" or input.startswith("task:"):
        return task.sample(batch_size, g, "cpu", task.main_eval if input == "data" else input[5:])
    else:
        raise ProbeError(f"unknown probe input {input!r}; allowed: random, data, repeated, task:<split>")
    return Batch(tokens, torch.zeros_like(tokens), torch.zeros_like(tokens, dtype=torch.bool))


def _check(probe: Probe, model, task, init) -> None:
    if probe.needs_task and task is None:
        raise ProbeError(f"probe {probe.name!r} reads the task's ground truth ({', '.join(probe.truth)}); pass the task")
    if not probe.applies_to(task):
        raise ProbeError(f"probe {probe.name!r} applies to {', '.join(probe.tasks or ())}, not {task.name!r}")
    if probe.needs_init and init is None:
        raise ProbeError(f"probe {probe.name!r} compares with the initial weights; pass init= (the step-0 model)")
    n_layers = max(1, _dims(model)[0])  # at least one layer, so a model without attention misses its hooks
    hooks = getattr(model, "hook_dict", {})
    for names in probe.reads.values():
        missing = [h for h in names(n_layers) if h not in hooks]
        if missing:
            kind = "attention heads" if "attn" in missing[0] else f"hook {missing[0]!r}"
            raise ProbeError(f"{type(model).__name__} has no {kind}; probe {probe.name!r} needs a transformer")


# ---- running ------------------------------------------------------------------------------------


def names() -> list[str]:
    return PROBES.names()


def can_run(name: str, model, task=None) -> bool:
    """Whether probe `name` applies to this model and task (without running it)."""
    try:
        _check(PROBES.get(name), model, task, init=True)
        return True
    except ProbeError:
        return False


def run(name: str, model, task=None, *, batch_size: int = 64, seed: int = 0, init=None) -> ProbeResult:
    """Run probe `name` on a hooked model; same seed, same result. `init`: the model at step 0, for
    probes that measure how far the weights moved."""
    return run_many([name], model, task, batch_size=batch_size, seed=seed, init=init)[0][name]


@torch.no_grad()
def run_many(probe_names: Sequence[str], model, task=None, *, batch_size: int = 64, seed: int = 0,
             init=None) -> list[dict[str, ProbeResult]]:
    """Run several probes, one forward pass per distinct input. `model` may hold M models side by side
    (`n_models=M`, e.g. M checkpoints of a run): the result is then one {probe: result} per model."""
    chosen = [PROBES.get(n) for n in probe_names]
    for probe in chosen:
        _check(probe, model, task, init)
    n_layers, n_heads = _dims(model)[:2]
    wanted: dict[str, set[str]] = {}
    for probe in chosen:
        for input, hooks in probe.reads.items():
            wanted.setdefault(_resolve(input, task), set()).update(hooks(n_layers))
    device = next(model.parameters()).device
    batches = {i: _draw(i, model, task, batch_size, seed).to(device) for i in wanted}
    m = getattr(model, "n_models", None)
    was_training = model.training
    if was_training:  # toggling is not free on a TransformerBridge, so only when needed
        model.eval()
    try:
        outputs = {i: model.run_with_cache(batches[i].tokens, names_filter=lambda n, h=hooks: n in h)
                   for i, hooks in wanted.items()}
    finally:
        if was_training:
            model.train()

    results = []
    for index in range(m) if m else [None]:
        pick = (lambda t: t) if index is None else (lambda t: t.unflatten(0, (m, -1))[index])
        view = View(task, n_layers, n_heads, {
            i: (batches[i], logits if index is None else logits[index], {k: pick(v) for k, v in cache.items()})
            for i, (logits, cache) in outputs.items()}, _weights(model, index), _weights(init, None))
        results.append({p.name: p.fn(view) for p in chosen})
    return results


def _weights(model, index: Optional[int]) -> Optional[Callable[[str], Tensor]]:
    if model is None:
        return None
    return lambda name: getattr(model, name).detach() if index is None else getattr(model, name).detach()[index]


# ---- helpers for probe files --------------------------------------------------------------------


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


for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["PROBES", "Probe", "ProbeError", "ProbeResult", "View", "can_run", "names", "register", "run", "run_many"]
