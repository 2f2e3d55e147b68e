"""The training loop. Model-agnostic: it takes a model and a data source that samples batches.

Not TransformerLens's training helper: that one overwrites its checkpoint every epoch and saves
no optimizer state, so runs cannot be resumed, and it trains the unfused hooked model.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Optional, Protocol, runtime_checkable

import torch
import torch.nn as nn
from jaxtyping import Float
from torch import Tensor

from mechsynth import optimizers
from mechsynth.config import MAX_SEED, MAX_STEPS, check, check_fields, doc, show, validates_itself
from mechsynth.errors import DivergedError
from mechsynth.tasks.base import Batch, LossKind, masked_loss
from mechsynth.training.fixed_set import FixedTrainingSet
from mechsynth.util.progress import Progress

# Device names `train.device` accepts (ASCII digits: `\d` would take other scripts' digits too).
DEVICE = re.compile(r"auto|cpu|mps|cuda(:[0-9]{1,4})?", re.ASCII)
DEVICES = "auto, cpu, cuda, cuda:N (N = 0, 1, ...), mps"


@validates_itself
@dataclass(frozen=True)
class TrainConfig:
    steps: int = doc("optimizer steps", 2000, lo=1, hi=MAX_STEPS, why="about 12 days at 1000 steps/s")
    batch_size: int = doc(
        "sequences per step, sampled fresh on the training device (from a fixed training set: "
        "the set's size or more trains full batch)",
        64,
        lo=1,
        hi=2**20,
    )
    data: Literal["online", "fixed"] = doc(
        "online: fresh samples every step; fixed: a training set drawn once from the task's training split "
        "(train.n_train examples, train.set_seed), trained on in epochs and evaluated whole as the split train_set",
        "online",
    )
    n_train: Optional[int] = doc(
        "with data = fixed, the training set's size; unset = the task's whole training split "
        "(tasks that list their inputs, e.g. modular_arithmetic)",
        None,
        lo=1,
        hi=2**24,
        why="the set is held in memory and evaluated whole",
    )
    set_seed: int = doc(
        "seed of the fixed training set: the same for every seed side by side, which differ in "
        "initialization and data order only",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit",
    )
    lr: float = doc("peak learning rate", 1e-3)
    optimizer: str = doc(
        "optimizer, by its name in mechsynth/optimizers/ (adam, adamw, sgd, adafactor, mezo, and any "
        "plugin's); with seeds > 1 an elementwise one",
        "adamw",
    )
    betas: tuple[float, float] = doc("Adam betas", (0.9, 0.999))
    momentum: float = doc("SGD momentum", 0.0)
    weight_decay: float = doc("weight decay (decoupled for adamw, L2 for adam/sgd)", 0.0)
    decay: Literal["all", "matrices"] = doc(
        "which weights decay: all, or only the matrices of attention, MLP and unembedding, not embeddings, "
        "positions, norms or biases (minGPT's and GPT-2's convention)",
        "all",
    )
    warmup_steps: int = doc("linear warmup from 0 to lr over this many steps", 0, lo=0, hi=MAX_STEPS)
    schedule: Literal["constant", "cosine", "linear"] = doc(
        "after warmup: constant, or cosine or linear decay to min_lr_frac * lr at the last step", "constant"
    )
    min_lr_frac: float = doc("floor of the cosine or linear schedule as a fraction of lr", 0.0)
    grad_clip: Optional[float] = doc("clip the global gradient norm to this; 0 or unset = no clipping", 1.0)
    data_chunk: int = doc(
        "training batches generated per call to the task: amortizes kernel launches on a GPU",
        16,
        lo=1,
        hi=4096,
        why="the chunk is held in memory",
    )
    eval_every: int = doc("evaluate every this many steps (and at every checkpoint)", 100, lo=1, hi=MAX_STEPS)
    eval_batch_size: int = doc("sequences per evaluation split (a fixed held-out batch)", 512, lo=1, hi=2**20)
    checkpoints: int = doc(
        "about this many checkpoints, log-spaced early and linear later",
        100,
        lo=2,
        hi=10_000,
        why="each one is written to disk",
    )
    seed: int = doc(
        "seed of the training data stream (and of the held-out batches)",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit and held-out splits add offsets",
    )
    seeds: int = doc(
        "train this many models side by side in one batched computation; model i uses data seed "
        "seed + i and model.init_seed + i, so it equals a separate run with those values and "
        "seeds = 1, and gets its own run directory RUN_DIR/seed_i",
        1,
        lo=1,
        hi=1024,
        why="each seed has its own run directory and W&B run",
    )
    seed_passes: Literal["auto", "stacked", "per_seed"] = doc(
        "with seeds > 1, how the forward and backward passes run: 'stacked' (one batched pass for all seeds), "
        "'per_seed' (each seed's own pass, spread over one worker thread per core; the optimizer step stays "
        "batched), or 'auto': stacked on a GPU; on a CPU per_seed when one seed's pass keeps >= 4 MiB of "
        "activations for its backward pass, else stacked",
        "auto",
    )
    device: str = doc(
        "'auto' (CUDA when available), 'cpu', 'cuda', 'cuda:N', or 'mps' (Apple GPUs); one this "
        "machine lacks is refused when the config is parsed",
        "auto",
    )
    threads: Optional[int] = doc(
        "torch's CPU threads while training; unset: what the command picks (mechsynth train "
        "and demo: the CPUs free when it starts, or MECHSYNTH_THREADS), and on --resume the "
        "count the run trained with, which keeps a resumed run bit-identical",
        None,
        lo=1,
        hi=4096,
    )
    init_from: Optional[str] = doc(
        "fine-tuning: start from the weights of this run directory's last checkpoint, or "
        "of one checkpoint directory (RUN/checkpoints/step_N); the model must have the "
        "same shapes; unset: a fresh initialisation",
        None,
    )
    params: Optional[tuple[str, ...]] = doc(
        "train only these parameters, each named as the checkpoints name it (W_hidden, blocks.0.attn.W_Q) or by a "
        "prefix ending at a dot (blocks.0: every weight of block 0); the others keep their initial (or init_from's) "
        "values. Unset: all. Layerwise training is runs chained with init_from, each training its own layer",
        None,
    )
    compile: bool = doc(
        "torch.compile the model (fuses kernels; ~1 min of compiling up front; measured gains are small at these sizes)",
        False,
    )

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first
        check(
            self.n_train is None or self.data == "fixed",
            "n_train",
            "is set but train.data is 'online'; allowed: train.data = 'fixed' with it, or leave n_train unset",
        )
        check(self.lr > 0, "lr", f"must be a positive number, got {self.lr}")
        check(self.weight_decay >= 0, "weight_decay", f"must be ≥ 0, got {self.weight_decay}")
        check(0 <= self.min_lr_frac <= 1, "min_lr_frac", f"must be in [0, 1], got {self.min_lr_frac}")
        check(self.grad_clip is None or self.grad_clip >= 0, "grad_clip", f"must be ≥ 0 or unset, got {self.grad_clip}")
        check(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            "betas",
            f"must be two numbers in [0, 1), got {show(self.betas)}",
        )
        check(0 <= self.momentum < 1, "momentum", f"must be in [0, 1), got {self.momentum}")
        check(
            isinstance(self.optimizer, str) and self.optimizer in optimizers.OPTIMIZERS,
            "optimizer",
            f"{show(self.optimizer)} is not allowed; allowed: {', '.join(optimizers.names())}",
        )
        check(
            self.seeds == 1 or optimizers.get(self.optimizer).elementwise,
            "optimizer",
            f"{self.optimizer!r} is not elementwise, so seeds side by side would couple the seeds; allowed with "
            f"train.seeds > 1: {', '.join(optimizers.elementwise())}",
        )
        check(
            isinstance(self.device, str) and DEVICE.fullmatch(self.device) is not None,
            "device",
            f"{show(self.device)} is not allowed; allowed: {DEVICES}",
        )
        if self.params is not None:  # (the message lists it: only where it is set)
            check(
                len(self.params) > 0 and all(self.params),
                "params",
                f"{show(list(self.params))} names nothing to "
                "train; allowed: parameter names or prefixes, or unset to train all",
            )


@runtime_checkable
class DataSource(Protocol):
    """What the trainer needs from a task."""

    splits: tuple[str, ...]
    loss_kind: LossKind  # what training minimises: the task's (`Task.loss_kind`), `masked_loss` computes it

    def sample(self, batch_size: int, generator: torch.Generator, device: Any, split: str) -> Batch: ...

    def regulariser(
        self, forward: Callable[[Tensor], Tensor], batch: Batch, logits: Float[Tensor, "batch out_pos d_vocab_out"]
    ) -> Optional[Float[Tensor, ""]]: ...

    def metrics(self, logits: Float[Tensor, "batch out_pos d_vocab_out"], batch: Batch) -> dict[str, float]: ...


def resolve_device(name: str) -> torch.device:
    """The torch device `train.device` names on this machine; ConfigError (naming train.device) for a
    malformed name or a device this machine lacks (CUDA or MPS unavailable, cuda:N past the last GPU)."""
    check(
        isinstance(name, str) and DEVICE.fullmatch(name) is not None,
        "train.device",
        f"{show(name)} is not allowed; allowed: {DEVICES}",
    )
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        check(torch.cuda.is_available(), "train.device", f"{name!r} but CUDA is not available here; allowed: auto, cpu")
        count, index = torch.cuda.device_count(), int(name.split(":")[1]) if ":" in name else 0
        check(
            index < count,
            "train.device",
            f"{name!r} but this machine has {count} CUDA device(s); allowed: auto, cpu, cuda, cuda:0 to cuda:{count - 1}",
        )
    if name == "mps":
        check(
            torch.backends.mps.is_available(), "train.device", "'mps' but MPS is not available here; allowed: auto, cpu"
        )
    return torch.device(name)


def keep_freed_memory() -> None:
    """Let glibc keep freed memory for reuse instead of handing it back to the OS. Its default serves
    blocks over 32 MiB with fresh mmaps, so every activation of seeds trained side by side (or of a
    large batch) is page-faulted in and zeroed by the kernel at every step: measured 2x on the
    batched evaluation. PyTorch's CPU tuning guide suggests jemalloc for the same reason; this needs
    no preload. Linux with glibc only; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # musl and friends
        return
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    libc.mallopt(M_MMAP_MAX, 0)
    libc.mallopt(M_TRIM_THRESHOLD, 2**30)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate for the update that takes the model from `step` to `step + 1`."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
    left = 1 - progress if cfg.schedule == "linear" else 0.5 * (1 + math.cos(math.pi * progress))
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * left)


def checkpoint_steps(total: int, count: int = 100) -> list[int]:
    """About `count` steps in [0, total]: half log-spaced (circuits form early), half evenly spaced."""
    n_log = count // 2
    log = (
        {round(math.exp(math.log(total) * i / (n_log - 1))) for i in range(n_log)} if total > 1 and n_log > 1 else set()
    )
    lin = {round(total * i / (count - n_log - 1)) for i in range(count - n_log)} if count - n_log > 1 else set()
    return sorted({0, total} | log | lin)


def selects(name: str, pattern: str) -> bool:
    """Whether `train.params` entry `pattern` takes parameter `name`: the name itself, or a prefix ending at a dot
    ("blocks.1" takes blocks.1.attn.W_Q, not blocks.10.attn.W_Q)."""
    return name == pattern or name.startswith(pattern + ".")


def freeze_unselected(model: nn.Module, params: Optional[Sequence[str]]) -> None:
    """Keep every parameter `params` (train.params) does not select at its value: requires_grad off, so it gets no
    gradient, is not in the optimizer (no update, no weight decay) and does not count in the clipped gradient norm.
    ConfigError naming train.params, listing the model's parameter names, for an entry that selects none, or when
    what it selects is only what the model kind itself keeps fixed (the memory kinds' embeddings)."""
    if params is None:
        return
    named = list(model.named_parameters())
    names = [n for n, _ in named]
    trainable = [n for n, p in named if p.requires_grad]
    for pattern in params:
        check(
            any(selects(n, pattern) for n in names),
            "train.params",
            f"{pattern!r} names no parameter of this model (a name, or a prefix ending at a dot); allowed: {', '.join(names)}",
        )
    check(
        any(selects(n, pattern) for n in trainable for pattern in params),
        "train.params",
        f"{show(list(params))} selects only parameters this model kind keeps fixed; allowed: {', '.join(trainable)}",
    )
    for n, p in named:
        if not any(selects(n, pattern) for pattern in params):
            p.requires_grad_(False)


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The optimizer `cfg.optimizer` names (registered in mechsynth/optimizers/) over the trainable parameters."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if cfg.decay == "all":
        return optimizers.build(cfg.optimizer, [p for _, p in named], cfg)
    matrix = [n.rsplit(".", 1)[-1].startswith("W_") and n.rsplit(".", 1)[-1] not in NOT_MATRICES for n, _ in named]
    return optimizers.build(
        cfg.optimizer,
        [
            {"params": [p for (_, p), m in zip(named, matrix) if m]},
            {"params": [p for (_, p), m in zip(named, matrix) if not m], "weight_decay": 0.0},
        ],
        cfg,
    )


# Weights (TransformerLens's names) that look up a row rather than multiply: embeddings, not matrices.
NOT_MATRICES = ("W_E", "W_pos", "W_rel")


def held_out_batches(data: DataSource, seed: int, batch_size: int, device: torch.device) -> dict[str, Batch]:
    """One fixed held-out batch per evaluation split, drawn from its own seed so curves are comparable;
    all of the split where the task lists its inputs (exact metrics, not a sample's)."""
    out = {}
    for i, split in enumerate(s for s in data.splits if s != "train"):
        listed = data.enumerate(split) if hasattr(data, "enumerate") else None
        g = torch.Generator(device=device).manual_seed(seed + 1_000_003 * (i + 1))
        out[split] = listed.to(device) if listed is not None else data.sample(batch_size, g, device, split)
    return out


@contextlib.contextmanager
def interrupts_between_steps() -> Iterator[Callable[[], bool]]:
    """Ctrl-C (SIGINT; Ray's cancel too) is held until the current step is done: a step cut midway could
    leave the weights half updated, or the data stream a batch ahead of the step count, and the
    checkpoint written on the way out would keep that. Yields `pending()`; a second Ctrl-C acts at once."""
    pending = False

    def hold(signum: int, frame: Any) -> None:
        nonlocal pending
        if pending:
            raise KeyboardInterrupt
        pending = True

    try:
        previous = signal.signal(signal.SIGINT, hold)
    except ValueError:  # not the main thread, where Python handles signals: nothing to hold
        yield lambda: False
        return
    try:
        yield lambda: pending
    finally:
        signal.signal(signal.SIGINT, previous)


@torch.no_grad()
def held_out_metrics(model: nn.Module, data: DataSource, batches: dict[str, Batch]) -> dict[str, float]:
    """The task's metrics of the model on each held-out batch, as {"split/metric": value}."""
    was_training = model.training
    model.eval()
    out = {f"{split}/{k}": v for split, b in batches.items() for k, v in data.metrics(model(b.tokens), b).items()}
    model.train(was_training)
    return out


class Trainer:
    """Owns the model, optimizer and data stream; `state()` / `load_state()` make it resumable bit for bit."""

    def __init__(self, model: nn.Module, data: DataSource, cfg: TrainConfig, device: torch.device | str = "cpu"):
        self.cfg, self.device = cfg, torch.device(device)
        self.data = FixedTrainingSet(data, cfg.n_train, cfg.set_seed) if cfg.data == "fixed" else data
        self.n_seeds = 1  # models trained (side by side: SeedsTrainer's parameters have a leading n_models axis)
        if self.device.type == "cpu":
            keep_freed_memory()
        self.module = model.to(self.device)  # what checkpoints save: never the compiled wrapper
        self.model = torch.compile(self.module) if cfg.compile else self.module
        freeze_unselected(self.module, cfg.params)  # before the optimizer, which takes the parameters that train
        self.optimizer = make_optimizer(self.module, cfg)
        # A kind whose weights live on a constraint set (the neuron kind's sphere) puts them back after each step.
        self.project = getattr(self.module, "project_", None)
        self.zeroth_order = optimizers.get(cfg.optimizer).zeroth_order
        self.step = 0
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self._eval_batches: dict[str, Batch] = {}
        # Training data comes in chunks of `data_chunk` batches. To resume mid-chunk we keep the
        # generator state from before the chunk and the position in it, and regenerate the chunk.
        self._chunk: Optional[Batch] = None
        self._chunk_state = self.generator.get_state()
        self._chunk_pos = 0

    def eval_batches(self) -> dict[str, Batch]:
        if not self._eval_batches:
            self._eval_batches = held_out_batches(self.data, self.cfg.seed, self.cfg.eval_batch_size, self.device)
        return self._eval_batches

    def evaluate(self) -> dict[str, float]:
        return held_out_metrics(self.model, self.data, self.eval_batches())

    def train_step(self) -> Float[Tensor, ""]:
        """One update; returns the (device) loss without syncing, so GPU steps stay asynchronous."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(self.step, self.cfg)
        batch = self._next_batch()
        if self.zeroth_order:
            with torch.no_grad():
                loss = self.optimizer.step(lambda: sum(self._losses(batch)))
        else:
            loss, extra = self._losses(batch)
            self.optimizer.zero_grad(set_to_none=True)
            (loss + extra).backward()
            if self.cfg.grad_clip:
                nn.utils.clip_grad_norm_(self.module.parameters(), self.cfg.grad_clip)
            self.optimizer.step()
        if self.project is not None:
            self.project()
        self.step += 1
        return loss.detach()

    def _losses(self, batch: Batch) -> tuple[Float[Tensor, ""], Float[Tensor, ""] | float]:
        """The task's loss on `batch` and the term its regulariser adds (0 without one)."""
        logits = self.model(batch.tokens)
        extra = self.data.regulariser(self.model, batch, logits)
        return masked_loss(logits, batch, self.data.loss_kind), 0.0 if extra is None else extra

    def chunk_shape(self) -> tuple[int, int]:
        """(batches, sequences) in a chunk of training data: data_chunk batches of fresh samples, or one
        epoch of a fixed training set (its last batch short where batch_size does not divide the set)."""
        b, epoch = self.cfg.batch_size, getattr(self.data, "epoch", None)
        return (self.cfg.data_chunk, self.cfg.data_chunk * b) if epoch is None else (-(-epoch // b), epoch)

    def _next_batch(self) -> Batch:
        (n, size), b = self.chunk_shape(), self.cfg.batch_size
        if self._chunk is None or self._chunk_pos == n:
            if self._chunk is not None:
                self._chunk_state, self._chunk_pos = self.generator.get_state(), 0
            self._chunk = self.data.sample(size, self.generator, self.device, "train")
        i, self._chunk_pos = self._chunk_pos, self._chunk_pos + 1
        take = lambda v: v[i * b : (i + 1) * b] if isinstance(v, torch.Tensor) and v.ndim and v.shape[0] == size else v  # noqa: E731
        c = self._chunk
        return Batch(take(c.tokens), take(c.targets), take(c.mask), {k: take(v) for k, v in c.truth.items()})

    def fit(
        self,
        on_eval: Callable[[int, Any], None],
        on_checkpoint: Callable[[int, Any], None],
        checkpoint_at: set[int],
        progress: bool = True,
    ) -> None:
        """Train to `cfg.steps`, evaluating every `eval_every` steps and at each checkpoint step. The
        callbacks get `record()`'s metrics: a dict (a list of dicts, one per seed, side by side)."""
        self.model.train()
        bar = Progress(self.cfg.steps, self.step, progress)
        running, n_running, t0, s0 = None, 0, time.perf_counter(), self.step
        with interrupts_between_steps() as interrupted:
            if self.step == 0:  # a resumed run already has this step's record
                metrics = self.evaluate()
                on_eval(self.step, metrics)
                if self.step in checkpoint_at:
                    on_checkpoint(self.step, metrics)
            while self.step < self.cfg.steps:
                loss = self.train_step()
                running = loss.clone() if running is None else running.add_(loss)
                n_running += 1
                bar.update(1)
                is_ckpt = self.step in checkpoint_at
                if is_ckpt or self.step % self.cfg.eval_every == 0 or self.step == self.cfg.steps:
                    mean_loss = running / n_running  # [] or, side by side, [n_models]
                    metrics = self.record(mean_loss)
                    self.check_finite(metrics, weights=is_ckpt)
                    rate = (self.step - s0) / max(1e-9, time.perf_counter() - t0)
                    bar.show(self.step, loss=f"{mean_loss.mean().item():.4f}", steps_per_s=f"{rate:.1f}")
                    running, n_running = None, 0
                    on_eval(self.step, metrics)
                    if is_ckpt:
                        on_checkpoint(self.step, metrics)
                if interrupted():
                    raise KeyboardInterrupt
        bar.close()

    def check_finite(self, metrics: Any, weights: bool = False) -> None:
        """Raise DivergedError when a loss in `record()`'s metrics (or, for a checkpoint, a weight) is not
        finite: training on would only write NaN checkpoints. Checked where metrics are recorded anyway,
        so a GPU step never waits for it."""
        bad = [
            i
            for i, m in enumerate(self.seed_records(metrics))
            if any(k.endswith("loss") and isinstance(v, float) and not math.isfinite(v) for k, v in m.items())
        ]
        if weights and not bad:  # every model's parameters at once, in place: one sync, no copies
            finite = torch.stack(
                [p.detach().isfinite().reshape(self.n_seeds, -1).all(1) for p in self.module.parameters()]
            )
            bad = [i for i, ok in enumerate(finite.all(0).tolist()) if not ok]
        if bad:
            raise DivergedError(f"the loss is not finite at step {self.step}", self.step, None, bad)

    def seed_records(self, metrics: Any) -> list[dict[str, float]]:
        """`record()`'s metrics as one dict per model trained (here one; side by side, one per seed)."""
        return [metrics]

    def seed_weights(self) -> list[dict[str, torch.Tensor]]:
        """Each model's weights as a single model's state dict (what its checkpoint holds)."""
        return [self.module.state_dict()]

    def seed_states(self) -> list[dict[str, Any]]:
        """Each model's resumable state, as `state()` gives it for a single run."""
        return [self.state()]

    def load_seed_states(self, states: list[dict[str, Any]]) -> None:
        self.load_state(states[0])

    def record(self, train_loss: Float[Tensor, ""]) -> dict[str, float]:
        """What `on_eval` gets: the mean training loss since the last record, the LR and held-out metrics."""
        return {"train/loss": train_loss.item(), "train/lr": lr_at(self.step - 1, self.cfg), **self.evaluate()}

    def state(self) -> dict[str, Any]:
        """Everything besides the weights needed to continue exactly: optimizer, data RNG, step.
        (The LR schedule is a pure function of the step, so it needs no state.)"""
        return {
            "optimizer": self.optimizer.state_dict(),
            "generator": self._chunk_state,
            "chunk_pos": self._chunk_pos,
            "step": self.step,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        self._chunk_state, self._chunk_pos = state["generator"], int(state["chunk_pos"])
        self.generator.set_state(self._chunk_state)
        if self._chunk_pos > 0:  # regenerate the chunk we were in the middle of
            self._chunk = self.data.sample(self.chunk_shape()[1], self.generator, self.device, "train")
