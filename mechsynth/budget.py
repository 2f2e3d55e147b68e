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

Sizes come from the config and the task's spec, never from a built model. A task's Config may
describe its own data (`sample_bytes(n, split) -> (batch bytes, peak bytes)`, `fixed_bytes`,
`context_field`); without them the estimate counts int64 tokens and targets and a bool mask.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from mechsynth.config import ConfigError
from mechsynth.models import ModelConfig
from mechsynth.tasks.base import Task
from mechsynth.train import TrainConfig

FLOAT = 4  # bytes: weights, activations and optimizer state are float32


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


# ---- parameters ---------------------------------------------------------------------------------------

def transformer_params(cfg: ModelConfig, d_vocab: int, d_vocab_out: int, n_ctx: int) -> tuple[int, int]:
    """(parameters in the blocks, in the embeddings, unembedding and final norm) of one FusedTransformer."""
    dm, h, dh, L = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.n_layers
    norm = 2 * dm if cfg.normalization == "LN" else 0  # LNPre and none have no weights
    attn = 4 * h * dm * dh + 3 * h * dh + dm  # W_Q, W_K, W_V, W_O; b_Q, b_K, b_V; b_O
    mlp = 0 if cfg.attn_only else norm + 2 * dm * cfg.mlp_dim + cfg.mlp_dim + dm
    pos = 0 if cfg.positional == "rotary" else n_ctx * dm
    return L * (norm + attn + mlp), d_vocab * dm + pos + norm + dm * d_vocab_out + d_vocab_out


def mlp_params(cfg: ModelConfig, n_inputs: int, d_vocab_out: int) -> int:
    return n_inputs * cfg.width + cfg.width + cfg.width * d_vocab_out + d_vocab_out


def param_count(cfg: ModelConfig, task: Task) -> int:
    """Parameters of one model as `models.build(cfg, task.spec)` makes it."""
    spec = task.spec
    if cfg.kind == "mlp":
        return mlp_params(cfg, spec.n_ctx - 1, spec.d_vocab_out)
    return sum(transformer_params(cfg, spec.d_vocab, spec.d_vocab_out, _model_ctx(cfg, task)))


def _model_ctx(cfg: ModelConfig, task: Task) -> int:
    return cfg.n_ctx if cfg.n_ctx is not None else task.spec.n_ctx


# ---- activations --------------------------------------------------------------------------------------

def activation_bytes(cfg: ModelConfig, task: Task, batch: int) -> tuple[int, int]:
    """(bytes one model's forward keeps for its backward pass on `batch` sequences, of which one layer's
    attention pattern). Per position and layer: the norms' inputs and outputs, Q, K, V, the attention
    output (and its copy laid out for W_O), the MLP's hidden layer before and after its activation."""
    spec = task.spec
    T, V = spec.n_ctx, spec.d_vocab_out
    if cfg.kind == "mlp":  # input bits, hidden before and after the activation, output
        return batch * FLOAT * (spec.n_ctx - 1 + 2 * cfg.width + 3 * V), 0
    dm, hd, L = cfg.d_model, cfg.n_heads * cfg.head_dim, cfg.n_layers
    norm = 2 * dm if cfg.normalization != "none" else dm
    layer = norm + 5 * hd + (0 if cfg.attn_only else norm + 2 * cfg.mlp_dim)
    ends = dm + norm + 3 * V  # embedding; final norm, logits, log-softmax and its gradient
    pattern = batch * cfg.n_heads * T * T * FLOAT
    return batch * T * FLOAT * (L * layer + ends) + pattern, pattern


def eval_activation_bytes(cfg: ModelConfig, task: Task, batch: int) -> tuple[int, int]:
    """(bytes of a forward without gradients: a few tensors of the widest layer at a time, the logits and
    the metrics' copies of them, of which one layer's attention pattern)."""
    spec = task.spec
    if cfg.kind == "mlp":
        return batch * FLOAT * (spec.n_ctx - 1 + 2 * cfg.width + 3 * spec.d_vocab_out), 0
    T = spec.n_ctx
    widest = max(cfg.d_model, 3 * cfg.n_heads * cfg.head_dim, 0 if cfg.attn_only else cfg.mlp_dim)
    pattern = batch * cfg.n_heads * T * T * FLOAT
    return batch * T * FLOAT * (3 * widest + 3 * spec.d_vocab_out) + pattern, pattern


# ---- data ---------------------------------------------------------------------------------------------

def sample_bytes(task: Task, n_seqs: int, split: str) -> tuple[int, int]:
    """(bytes of a batch of `n_seqs` sequences of `split`, peak bytes while sampling it)."""
    own = getattr(task.cfg, "sample_bytes", None)
    if own is not None:
        return own(n_seqs, split)
    batch = n_seqs * task.spec.n_ctx * 17  # int64 tokens and targets, bool mask
    return batch, 2 * batch


def context_field(task: Task) -> str:
    """The task's field that sets the sequence length (e.g. task.length), for the error."""
    return getattr(task.cfg, "context_field", "task")


# ---- the estimate -------------------------------------------------------------------------------------

def _weight_field(cfg: ModelConfig, task: Task) -> str:
    """The model field to blame when the weights dominate: the layer count for a deep model, else the
    width whose matrices are largest (W_pos: the context length)."""
    if cfg.kind == "mlp":
        return "model.width"
    n_ctx = _model_ctx(cfg, task)
    blocks, embeddings = transformer_params(cfg, task.spec.d_vocab, task.spec.d_vocab_out, n_ctx)
    if blocks < embeddings:
        if cfg.positional != "rotary" and 2 * n_ctx * cfg.d_model > embeddings:
            return "model.n_ctx" if cfg.n_ctx is not None else context_field(task)
        return "model.d_model"
    if cfg.n_layers > 1:
        return "model.n_layers"
    attention = cfg.n_heads * cfg.d_model * cfg.head_dim
    mlp = 0 if cfg.attn_only else cfg.d_model * cfg.mlp_dim
    if attention >= mlp:
        return "model.d_head" if cfg.d_head is not None else "model.d_model"
    return "model.d_mlp" if cfg.d_mlp is not None else "model.d_model"


def optimizer_slots(cfg: TrainConfig) -> int:
    """Parameter-sized buffers besides the weights: the gradient, the optimizer's state (Adam: two
    moments; SGD: momentum, if any) and one temporary of its update."""
    state = 2 if cfg.optimizer in ("adam", "adamw") else (1 if cfg.momentum > 0 else 0)
    return 1 + state + 1


def estimate(model: ModelConfig, train: TrainConfig, task: Task) -> Estimate:
    """The memory a run of this config needs (see the module docstring)."""
    S = train.seeds
    params = param_count(model, task)
    # Side by side with per-seed passes, gradients are stacked from the seeds' views: one more copy.
    weights = S * params * FLOAT * (1 + optimizer_slots(train) + (1 if S > 1 else 0))
    weight_field = _weight_field(model, task)
    chunk = train.data_chunk * train.batch_size
    chunk_kept, chunk_peak = sample_bytes(task, chunk, "train")
    eval_splits = [s for s in task.splits if s != "train"]
    eval_sizes = [sample_bytes(task, train.eval_batch_size, s) for s in eval_splits]
    eval_kept = sum(k for k, _ in eval_sizes)
    eval_peak = max((p - k for k, p in eval_sizes), default=0)

    acts, pattern = activation_bytes(model, task, train.batch_size)
    evals, eval_pattern = eval_activation_bytes(model, task, train.eval_batch_size)
    # Attention patterns grow with the square of the context: when they dominate, the context is to blame.
    act_field = context_field(task) if 2 * pattern > acts else "train.batch_size"
    eval_field = context_field(task) if 2 * eval_pattern > evals else "train.eval_batch_size"
    resident = (
        Part("weights", weights, weight_field, f"weights, gradients and optimizer state of {params:,} parameters"),
        Part("data", S * chunk_kept, "train.data_chunk", f"the training data chunk ({chunk:,} sequences)"),
        Part("eval data", S * eval_kept, "train.eval_batch_size", "the held-out batches"),
        Part("fixed data", getattr(task.cfg, "fixed_bytes", 0), "task.n_train", "the fixed training set"),
    )
    transient = (
        Part("activations", S * acts, act_field, "training activations (batch_size x sequence x widths x layers, "
                                                 "attention batch_size x heads x n_ctx**2)"),
        Part("evaluation", S * evals, eval_field, "the evaluation's forward pass (eval_batch_size x sequence x widths, "
                                                  "attention eval_batch_size x heads x n_ctx**2)"),
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


def check(model: ModelConfig, train: TrainConfig, task: Task, device: torch.device,
          available: int | None = None) -> Estimate:
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
        raise ConfigError(field, f"the run needs about {fmt_bytes(est.total)} of memory{seeds}, more than the "
                                 f"{fmt_bytes(available)} {_where(device)} has; mostly {part.what}: {fmt_bytes(part.bytes)}; "
                                 f"allowed: a smaller {field}, or any change that brings the estimate under "
                                 f"{fmt_bytes(available)}")
    return est


def describe(est: Estimate) -> dict[str, Any]:
    """The estimate as {part: bytes} (and the total), for logs and tests."""
    return {**{p.name: p.bytes for p in (*est.resident, *est.transient)}, "total": est.total}
