"""A Monitor inside the HuggingFace Trainer or a Lightning Trainer, as a callback: the one module that
imports their trainer classes, lazily (`pip install 'mechsynth[hf]'` or `'mechsynth[lightning]'`).

The Monitor is given the TransformerLens model itself; what the Trainer trains is a module of yours that
holds it (its forward computes the loss from the TL model's logits). The run directory is the Monitor's,
as for a loop of your own: `mechsynth probe` and `mechsynth report` read it unchanged.

Both, as examples that run as written (CI runs them): docs/concepts/yours.md, "The HuggingFace Trainer and
Lightning".

When training begins each callback records what the Trainer says of the loop in the run's config.json
(`monitor.note`): HuggingFace's TrainingArguments give the learning rate, the batch size per update
(per-device batch x devices x gradient accumulation), the seed (data_seed, else seed), gradient clipping and the
lr schedule (linear, cosine or constant, with its warmup); Lightning gives the batch size (the training loader's
x accumulation x devices), the seed `seed_everything` set, gradient clipping, and a constant schedule where
configure_optimizers returns no scheduler. Both read the optimizer itself (its class, lr, betas, momentum,
weight decay). What neither says (the model's init_seed, a Lightning scheduler's shape, ...) stays "not recorded".

Each callback calls `monitor.step(global_step, loss=...)` after every update and `monitor.finish()` when
training ends (the `with` block then does nothing more; it still closes the run if training fails). A
Trainer that moves the model to a GPU must find it there already: `model.to(device)` before the Monitor.
"""

from __future__ import annotations

import functools
import os
import typing
from collections.abc import Mapping
from typing import Any, Optional

import torch
import torch.nn as nn
from torch import Tensor

from mechsynth.config import show
from mechsynth.errors import ConfigError
from mechsynth.yours.monitor import Monitor

HF_HINT = "transformers is not installed; install it with: pip install 'mechsynth[hf]'"
LIGHTNING_HINT = "lightning is not installed; install it with: pip install 'mechsynth[lightning]'"


@typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
def hf_callback(monitor: Monitor) -> Any:
    """A `transformers.TrainerCallback` that steps `monitor` after each update (with the loss the Trainer
    logged for it, if it logged one) and finishes it when training ends. See the module docstring."""
    _check_monitor(monitor, "hf_callback")
    return _hf_class()(monitor)


@typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
def lightning_callback(monitor: Monitor) -> Any:
    """A Lightning `Callback` (accepted by `lightning.Trainer` and `pytorch_lightning.Trainer` alike) that
    steps `monitor` after each update with its loss and finishes it when fit ends. See the module docstring."""
    _check_monitor(monitor, "lightning_callback")
    return _lightning_class()(monitor)


def _check_monitor(monitor: Any, field: str) -> None:
    """Refused here, in one line: otherwise the Trainer would fail at its first step, deep in its own loop."""
    if not isinstance(monitor, Monitor):
        raise ConfigError(
            field,
            f"expected a mechsynth.Monitor, got {show(monitor)}; make one first "
            "(with mechsynth.Monitor(model, run_dir, task) as monitor: ...)",
        )
    if monitor.closed:
        raise ConfigError(
            field, f"the monitor of {monitor.run_dir} is closed (finished); make a new one for this training"
        )


def _check_trains(monitor: Monitor, trained: nn.Module, field: str) -> None:
    """The Trainer must train the monitor's own model: otherwise every checkpoint would hold the untouched
    initial weights."""
    ours = list(monitor.model.parameters())
    theirs = {id(p) for p in trained.parameters()}
    missing = sum(id(p) not in theirs for p in ours)
    if missing:
        raise ConfigError(
            field,
            f"the Trainer's model does not hold the monitor's model ({missing} of its {len(ours)} "
            "parameters are not among the Trainer's); wrap the very model you gave the Monitor",
        )


# HuggingFace lr_scheduler_type -> train.schedule, where the two are the same curve (HF's decays to 0 at max_steps)
HF_SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant", "constant_with_warmup": "constant"}


def hf_fields(args: Any, max_steps: int) -> dict[str, Any]:
    """What a HuggingFace TrainingArguments says of the loop, as TrainConfig fields (see the module docstring)."""
    fields: dict[str, Any] = {
        "batch_size": args.train_batch_size * args.gradient_accumulation_steps * args.world_size,
        "seed": args.data_seed if args.data_seed is not None else args.seed,
        "grad_clip": float(args.max_grad_norm) if args.max_grad_norm else None,
    }  # 0: no clipping
    if args.learning_rate > 0:
        fields["lr"] = float(args.learning_rate)
    kind = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    if kind in HF_SCHEDULES and not args.lr_scheduler_kwargs:  # (kwargs such as num_cycles change the curve)
        fields |= {"schedule": HF_SCHEDULES[kind], "warmup_steps": args.get_warmup_steps(max_steps)}
        fields |= {"min_lr_frac": 0.0} if HF_SCHEDULES[kind] != "constant" else {}
    return fields


def lightning_fields(trainer: Any) -> dict[str, Any]:
    """What a Lightning Trainer says of the loop, as TrainConfig fields (see the module docstring)."""
    fields: dict[str, Any] = {}
    batch = getattr(trainer.train_dataloader, "batch_size", None)  # (None: a batch sampler of the user's)
    if isinstance(batch, int) and batch > 0:
        fields["batch_size"] = batch * trainer.accumulate_grad_batches * trainer.world_size
    seed = os.environ.get("PL_GLOBAL_SEED", "")  # what seed_everything set; unset: not recorded
    if seed.isdigit():
        fields["seed"] = int(seed)
    clip = trainer.gradient_clip_val
    if not clip:
        fields["grad_clip"] = None
    elif trainer.gradient_clip_algorithm in (None, "norm"):  # ("value" clips elementwise: not train.grad_clip)
        fields["grad_clip"] = float(clip)
    if not trainer.lr_scheduler_configs:
        fields |= {"schedule": "constant", "warmup_steps": 0}
    return fields


@functools.cache
def _hf_class() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError:
        raise ConfigError("hf_callback", HF_HINT) from None

    class MonitorCallback(TrainerCallback):
        """Steps a mechsynth Monitor. The Trainer logs an update's loss only after on_step_end, so each step is
        held until its log (or the next update begins, before the weights change again)."""

        def __init__(self, monitor: Monitor):
            self.monitor = monitor
            self.pending: Optional[int] = None

        def flush(self, loss: Optional[float] = None) -> None:
            if self.pending is not None:
                self.monitor.step(self.pending, loss)
                self.pending = None

        def on_train_begin(
            self,
            args: Any,
            state: Any,
            control: Any,
            model: Optional[nn.Module] = None,
            optimizer: Any = None,
            **kw: Any,
        ) -> None:
            if model is not None:
                _check_trains(self.monitor, model, "hf_callback")
            self.monitor.note(optimizer, **hf_fields(args, state.max_steps))

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.flush()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.flush()
            self.pending = state.global_step

        def on_log(self, args: Any, state: Any, control: Any, logs: Optional[dict[str, Any]] = None, **kw: Any) -> None:
            if logs and "loss" in logs and self.pending == state.global_step:
                self.flush(float(logs["loss"]))

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.flush()
            self.monitor.finish()

    MonitorCallback.__qualname__ = MonitorCallback.__name__
    return MonitorCallback


def _lightning_bases() -> tuple[type, ...]:
    """Callback of each Lightning package installed: `lightning` installs `pytorch_lightning` beside it, and
    each Trainer accepts only its own package's Callback class."""
    bases = []
    try:
        import lightning.pytorch

        bases.append(lightning.pytorch.Callback)
    except ImportError:
        pass
    try:
        import pytorch_lightning

        bases.append(pytorch_lightning.Callback)
    except ImportError:
        pass
    if not bases:
        raise ConfigError("lightning_callback", LIGHTNING_HINT)
    return tuple(bases)


def _loss_of(outputs: Any) -> Optional[Tensor]:
    if isinstance(outputs, Tensor):
        return outputs.detach()
    if isinstance(outputs, Mapping) and isinstance(outputs.get("loss"), Tensor):
        return outputs["loss"].detach()
    return None  # training_step returned None (a skipped batch) or no loss


@functools.cache
def _lightning_class() -> type:
    class MonitorCallback(*_lightning_bases()):
        """Steps a mechsynth Monitor once per update (trainer.global_step), not once per batch."""

        def __init__(self, monitor: Monitor):
            self.monitor = monitor
            self.losses: list[Tensor] = []  # of the batches since the last update (gradient accumulation)
            self.last = 0

        def on_train_start(self, trainer: Any, pl_module: nn.Module) -> None:
            _check_trains(self.monitor, pl_module, "lightning_callback")
            optimizers = trainer.optimizers
            self.monitor.note(optimizers[0] if len(optimizers) == 1 else None, **lightning_fields(trainer))

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            loss = _loss_of(outputs)
            if loss is not None:
                self.losses.append(loss)
            step = trainer.global_step
            if step <= self.last:  # mid-accumulation: no update yet
                return
            total = None
            if self.losses:
                # automatic optimization divides each batch's loss by the batches accumulated: their sum is the mean
                total = (
                    torch.stack(self.losses).sum()
                    if pl_module.automatic_optimization
                    else torch.stack(self.losses).mean()
                )
            self.monitor.step(step, total)
            self.losses, self.last = [], step

        def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
            self.monitor.finish()

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            self.monitor.__exit__(type(exception), exception, exception.__traceback__)  # keep what was written

    MonitorCallback.__qualname__ = MonitorCallback.__name__
    return MonitorCallback


__all__ = ["hf_callback", "lightning_callback"]
