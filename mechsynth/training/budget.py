"""Will the run fit in memory? An estimate from the config alone, made before anything is built.

A config whose model or activations cannot fit would otherwise fail minutes in (or, on a CPU, swap
the machine to a halt). `estimate` adds up, in bytes:

    resident all run   weights, gradients and optimizer state; the training data chunk (data_chunk x
                       batch_size sequences); the fixed held-out batches; a task's fixed training set
    transient, the     training activations kept for the backward pass; the evaluation's forward;
    largest counts     making a data chunk or the held-out batches (some tasks need far more while
                       sampling than the batch they return: Markov chains solve for stationary laws)

all times `train.seeds` (models side by side). It is an upper estimate of the usual case, not a
measurement: float32 everywhere, every saved activation counted once per layer, one layer's attention
pattern (batch x heads x n_ctx**2) as if attention were computed unfused, the logits three times
(logits, log-softmax, gradient). `check` refuses a config only when the estimate exceeds the device's
total memory (physical RAM for a CPU, the GPU's memory for CUDA): clearly too large, never a normal run.

Sizes come from the config and the task's spec, never from a built model: each model kind sizes its
own (mechsynth/models/<kind>.py), each optimizer counts its state (mechsynth/optimizers/). A task's
Config may describe its own data (`sample_bytes(n, split) -> (batch bytes, peak bytes)`,
`fixed_bytes`, `context_field`); without them the estimate counts int64 tokens and targets and a bool
mask.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from mechsynth import optimizers
from mechsynth.errors import ConfigError
from mechsynth.models.base import FLOAT, ModelKind
from mechsynth.tasks.base import Task
from mechsynth.training.train import TrainConfig


@dataclass(frozen=True)
class Part:
    """One term of the estimate: its bytes, what it is, and the config field that drives it."""

    name: str
    bytes: int
    field: str
    what: str


@dataclass(frozen=True)
class Estimate:
    params: int  # parameters of one model
    resident: tuple[Part, ...]  # held all run
    transient: tuple[Part, ...]  # held in turn; the largest counts

    @property
    def peak(self) -> Part:
        return max(self.transient, key=lambda p: p.bytes)

    @property
    def total(self) -> int:
        return sum(p.bytes for p in self.resident) + self.peak.bytes

    @property
    def largest(self) -> Part:
        """The part that drives the estimate: the one the error names."""
        return max((*self.resident, self.peak), key=lambda p: p.bytes)


# ---- the model: each kind sizes its own (mechsynth/models/<kind>.py) -----------------------------------


def param_count(cfg: ModelKind, task: Task) -> int:
    """Parameters of one model as `models.build(cfg, task.spec)` makes it."""
    return cfg.param_count(task.spec)


def activation_bytes(cfg: ModelKind, task: Task, batch: int) -> tuple[int, int]:
    """(bytes one model's forward keeps for its backward pass on `batch` sequences, of which one layer's
    attention pattern)."""
    return cfg.activation_bytes(task.spec, batch)


def eval_activation_bytes(cfg: ModelKind, task: Task, batch: int) -> tuple[int, int]:
    """(bytes of a forward without gradients, of which one layer's attention pattern)."""
    return cfg.eval_activation_bytes(task.spec, batch)


# ---- data ---------------------------------------------------------------------------------------------


def sample_bytes(task: Task, n_seqs: int, split: str) -> tuple[int, int]:
    """(bytes of a batch of `n_seqs` sequences of `split`, peak bytes while sampling it)."""
    own = getattr(task.cfg, "sample_bytes", None)
    if own is not None:
        return own(n_seqs, split)
    batch = n_seqs * task.spec.n_ctx * 17  # int64 tokens and targets, bool mask
    return batch, 2 * batch


def split_size(task: Task, split: str, sampled: int) -> int:
    """Sequences of `split`'s held-out batch: all of it where the task lists its inputs, else `sampled`."""
    listed = task.enumerate(split)
    return sampled if listed is None else len(listed.tokens)


def fixed_set_size(train: TrainConfig, task: Task) -> int | None:
    """Examples in the fixed training set (None: online data)."""
    if train.data != "fixed":
        return None
    return train.n_train if train.n_train is not None else split_size(task, "train", 0)


def context_field(task: Task) -> str:
    """The task's field that sets the sequence length (e.g. task.length), for the error."""
    return getattr(task.cfg, "context_field", "task")


# ---- the estimate -------------------------------------------------------------------------------------


def optimizer_slots(cfg: TrainConfig) -> int:
    """Parameter-sized buffers besides the weights: the gradient, the optimizer's state (its own count:
    Adam two moments, SGD its momentum if any) and one temporary of its update."""
    return 1 + optimizers.get(cfg.optimizer).state_slots(cfg) + 1


def estimate(model: ModelKind, train: TrainConfig, task: Task) -> Estimate:
    """The memory a run of this config needs (see the module docstring)."""
    S = train.seeds
    params = param_count(model, task)
    # Side by side with per-seed passes, gradients are stacked from the seeds' views: one more copy.
    weights = S * params * FLOAT * (1 + optimizer_slots(train) + (1 if S > 1 else 0))
    weight_field = model.weight_field(task.spec, context_field(task))
    fixed = fixed_set_size(train, task)
    chunk = train.data_chunk * train.batch_size if fixed is None else fixed  # a fixed set's chunk is an epoch
    chunk_kept, chunk_peak = sample_bytes(task, chunk, "train")
    # Held-out splits a task lists are evaluated whole, a fixed training set too (as train_set).
    eval_counts = [split_size(task, s, train.eval_batch_size) for s in task.splits if s != "train"] + [fixed or 0]
    eval_sizes = [sample_bytes(task, n, "eval") for n in eval_counts if n]
    eval_kept = sum(k for k, _ in eval_sizes)
    eval_peak = max((p - k for k, p in eval_sizes), default=0)

    acts, pattern = activation_bytes(model, task, min(train.batch_size, chunk))
    evals, eval_pattern = eval_activation_bytes(model, task, max(eval_counts))
    # Attention patterns grow with the square of the context: when they dominate, the context is to blame.
    act_field = context_field(task) if 2 * pattern > acts else "train.batch_size"
    eval_field = context_field(task) if 2 * eval_pattern > evals else "train.eval_batch_size"
    resident = (
        Part("weights", weights, weight_field, f"weights, gradients and optimizer state of {params:,} parameters"),
        Part("data", S * chunk_kept, "train.data_chunk", f"the training data chunk ({chunk:,} sequences)"),
        Part("eval data", S * eval_kept, "train.eval_batch_size", "the held-out batches"),
        Part(
            "fixed data",
            getattr(task.cfg, "fixed_bytes", 0) + (sample_bytes(task, fixed, "train")[0] if fixed else 0),
            "train.n_train" if fixed else "task.n_train",
            "the fixed training set",
        ),
    )
    transient = (
        Part(
            "activations",
            S * acts,
            act_field,
            "training activations (batch_size x sequence x widths x layers, attention batch_size x heads x n_ctx**2)",
        ),
        Part(
            "evaluation",
            S * evals,
            eval_field,
            "the evaluation's forward pass (eval_batch_size x sequence x widths, "
            "attention eval_batch_size x heads x n_ctx**2)",
        ),
        Part("sampling", S * (chunk_peak - chunk_kept), "train.data_chunk", "sampling a training data chunk"),
        Part("eval sampling", S * eval_peak, "train.eval_batch_size", "sampling the held-out batches"),
    )
    return Estimate(params, resident, transient)


# ---- the device ---------------------------------------------------------------------------------------


def device_memory(device: torch.device) -> int:
    """Total memory of `device` in bytes: the GPU's for CUDA, physical RAM otherwise (MPS shares it)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device.index or 0).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _where(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device.index or 0)})"
    return f"this machine's RAM (train.device {device.type})"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # unreachable


def check(
    model: ModelKind, train: TrainConfig, task: Task, device: torch.device, available: int | None = None
) -> Estimate:
    """Raise ConfigError, naming the field that drives the estimate, when the run clearly cannot fit in
    `device`'s memory (`available` bytes; default: the device's total). Returns the estimate."""
    est = estimate(model, train, task)
    available = device_memory(device) if available is None else available
    if est.total > available:
        part = est.largest
        field = part.field
        if train.seeds > 1 and est.total / train.seeds <= available:
            field = "train.seeds"  # one model would fit: the seeds side by side do not
        seeds = f" for {train.seeds} seeds side by side" if train.seeds > 1 else ""
        raise ConfigError(
            field,
            f"the run needs about {fmt_bytes(est.total)} of memory{seeds}, more than the "
            f"{fmt_bytes(available)} {_where(device)} has; mostly {part.what}: {fmt_bytes(part.bytes)}; "
            f"allowed: a smaller {field}, or any change that brings the estimate under "
            f"{fmt_bytes(available)}",
        )
    return est


def describe(est: Estimate) -> dict[str, Any]:
    """The estimate as {part: bytes} (and the total), for logs and tests."""
    return {**{p.name: p.bytes for p in (*est.resident, *est.transient)}, "total": est.total}
