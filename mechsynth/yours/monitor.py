"""Watch a training loop you wrote: checkpoints at log-spaced steps into a normal run directory, the
task's held-out metrics beside your loss, probes at the end (or as it goes), and W&B in your own run.

    model = mechsynth.hooked_model(n_layers=2, d_model=32, n_heads=1, d_head=32, n_ctx=64,
                                   d_vocab=task.spec.d_vocab, act_fn="relu", attn_only=True)
    with Monitor(model, "runs/mine", task, steps=2000) as monitor:   # checkpoints the model as step 0
        for step in range(1, 2001):
            ...  # your forward, backward and optimizer step
            monitor.step(step, loss)                                  # after update number `step`
    monitor.timeline   # what `mechsynth probe` would print; `mechsynth report runs/mine` works as for any run

The directory is what `mechsynth train` writes (config.json, metrics.jsonl, checksummed checkpoints), so
`mechsynth probe` and `report` read it unchanged; its [train] table records only the steps and the
checkpoint schedule (your loop chose the rest), and config.json's "origin" says it came from here.
"""

from __future__ import annotations

import os
import time
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn as nn
from torch import Tensor

from mechsynth import hooks, probes, tasks
from mechsynth.analysis.wandb_log import WandbConfig, WandbLogger
from mechsynth.config import check, show
from mechsynth.errors import ConfigError
from mechsynth.models import ModelKind
from mechsynth.runs import io, rundir
from mechsynth.runs.runconfig import RunConfig
from mechsynth.tasks.base import Task
from mechsynth.training.runner import remove_if_empty
from mechsynth.training.train import TrainConfig, checkpoint_steps, held_out_batches, held_out_metrics
from mechsynth.yours import external

PER_DECADE = 20  # checkpoints per factor of 10 in steps when the total is not known


@typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
def resolve_task(task: Task | str | None, model: Any) -> Task:
    """A Task, a registered task's name (its defaults), or None: random tokens the model's size."""
    if isinstance(task, Task):
        return task
    if isinstance(task, str):
        return tasks.make(task)
    if task is not None:
        raise ConfigError("task", f"expected a mechsynth Task, a task name or None, got {type(task).__name__}")
    try:
        d_vocab, d_vocab_out, n_ctx = external.sizes(model)
    except AttributeError:
        raise ConfigError("task", f"missing: {type(model).__name__} does not say its vocabulary and context, so random "
                                  "tokens cannot be sized to it; give the task it learns") from None
    return random_tokens(d_vocab, d_vocab_out or d_vocab, n_ctx)


def random_tokens(d_vocab: int, d_vocab_out: int, n_ctx: int) -> Task:
    """The task of a model without one: uniform random tokens of its sizes."""
    return tasks.make("random_tokens", {"d_vocab": d_vocab, "n_ctx": n_ctx, "d_vocab_out": d_vocab_out})


def start_run(run_dir: Path, kind: ModelKind, task: Task, train: TrainConfig, origin: dict[str, Any],
              field: str = "run_dir") -> RunConfig:
    """Write config.json into the new run directory `run_dir` (absent or empty: checked again, now that the
    caller holds its lock)."""
    cfg = RunConfig.of(task, kind, train, WandbConfig(mode="disabled"))
    check_new(run_dir, field)
    io.write_json(run_dir / rundir.CONFIG, {**cfg.to_dict(), **rundir.stored_extras(cfg.to_dict()), "origin": origin})
    return cfg


def as_dir(run_dir: Any, field: str = "run_dir") -> Path:
    """`run_dir` as a Path; a ConfigError naming `field` for anything that is not a path (None, a number)."""
    check(isinstance(run_dir, (str, os.PathLike)), field, f"expected a directory path, got {show(run_dir)}")
    return Path(run_dir)


def check_int(value: Any, field: str, lo: int) -> None:
    """An integer argument ≥ `lo` (not a bool, not a float): checked before anything is made, since a float
    step would only fail when the first checkpoint's name is formatted, inside the new run directory."""
    check(isinstance(value, int) and not isinstance(value, bool), field, f"expected an integer, got {show(value)}")
    check(value >= lo, field, f"must be ≥ {lo}, got {value}")


def probe_names(names: Any, field: str = "probes") -> Optional[list[str]]:
    """`names` as a list of registered probe names (None stays None: all that apply), checked before any work."""
    if names is None:
        return None
    check(isinstance(names, Iterable) and not isinstance(names, (str, bytes)), field,
          f"expected a list of probe names, got {show(names)}")
    names = list(names)
    probes.check_known(names, field)
    return names


def check_new(run_dir: Path, field: str = "run_dir") -> None:
    """A new run goes into an absent or empty directory that can be made and written."""
    if run_dir.is_dir() and any(p.name != rundir.LOCK for p in run_dir.iterdir()):
        raise ConfigError(field, f"{run_dir} already exists and is not empty; choose another directory")
    rundir.check_writable(run_dir, field)


class Monitor:
    """Checkpoints, metrics and probes for a training loop of your own (see the module docstring).

    `model`: a TransformerLens transformer (TL 3 HookedTransformer, TL 4 TransformerBridge; any TL version
    mechsynth runs on) or a model mechsynth built. `task`: a Task (`mechsynth.tasks.make(name, params)`),
    a task name, or None (random tokens: only the probes that need no ground truth apply). `steps`: the
    loop's length, for the checkpoint schedule `mechsynth train` uses (`checkpoints` of them, log-spaced
    early); unset: 20 per factor of 10, however long the loop runs; `schedule`: your own checkpoint steps.
    `probes`: names to run at the end (None: all that apply; [] none); `live`: also probe each checkpoint
    as it is written and log the scores to W&B during training. `wandb`: a W&B run of yours
    (`wandb.init(...)`), which gets the held-out metrics, probe series and formation steps and is left open.
    `eval_batch_size`: sequences of each held-out split, measured at every checkpoint (128, where `mechsynth
    train` takes 512: the demo's loop then runs well within 10% slower watched; benchmarks/monitor_overhead.py).
    `start`: the step of the model as given (checkpointed at once).
    """

    @typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
    def __init__(self, model: nn.Module, run_dir: Path | str, task: Task | str | None = None, *,
                 steps: Optional[int] = None, checkpoints: int = 100, schedule: Optional[Sequence[int]] = None,
                 eval_every: int = 100, eval_batch_size: int = 128, seed: int = 0,
                 probes: Optional[Sequence[str]] = None, live: bool = False, wandb: Any = None,
                 start: int = 0, progress: bool = False):
        # Every argument is checked before anything is made: a mistake is one line naming it, and leaves no directory.
        if schedule is not None and steps is not None:
            raise ConfigError("schedule", "give steps (the log-spaced schedule) or schedule, not both")
        if schedule is not None:
            listed = isinstance(schedule, Iterable) and not isinstance(schedule, (str, bytes))
            schedule = list(schedule) if listed else schedule
            if not listed or not schedule or any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in schedule):
                raise ConfigError("schedule", f"must be a non-empty list of steps ≥ 0, got {show(schedule)}")
        if steps is not None:
            check_int(steps, "steps", 1)  # `steps or ...` once took 0 for unset
        for name, value, lo in (("checkpoints", checkpoints, 2), ("eval_every", eval_every, 1),
                                ("eval_batch_size", eval_batch_size, 1), ("seed", seed, 0), ("start", start, 0)):
            check_int(value, name, lo)
        for name, value in (("live", live), ("progress", progress)):
            check(isinstance(value, bool), name, f"expected True or False, got {show(value)}")
        if wandb is not None and not all(hasattr(wandb, a) for a in ("log", "define_metric", "id")):
            raise ConfigError("wandb", f"expected a W&B run (what wandb.init() returns), got {show(wandb)}")
        # The upper bounds are TrainConfig's own; a schedule alone gives the steps of its last checkpoint.
        train = TrainConfig(steps=steps if steps is not None else max([1, *(schedule or [])]), checkpoints=checkpoints,
                            eval_every=eval_every, eval_batch_size=eval_batch_size, seed=seed, device="cpu")
        self.probe_names = probe_names(probes)
        check(isinstance(model, nn.Module), "model", f"expected a TransformerLens transformer or a model mechsynth built, "
                                                     f"got {show(model)}")
        self.model, self.task = model, resolve_task(task, model)
        self.run_dir = as_dir(run_dir)
        self.schedule = (set(schedule) if schedule is not None else
                         set(checkpoint_steps(steps, checkpoints)) if steps is not None else None)
        self.live, self.progress, self.eval_every = live, progress, eval_every
        self.timeline = None
        self._logger = WandbLogger.attach(wandb) if wandb is not None else None
        made = not self.run_dir.exists()
        check_new(self.run_dir)
        kind, weights = external.convert(model, self.task)  # a model that cannot make a run fails before anything is made
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = rundir.RunLock([self.run_dir]).__enter__()
        self._writer: Optional[rundir.MetricsWriter] = None
        try:
            origin = {"by": "mechsynth.Monitor", "model": type(model).__name__}
            self.config = start_run(self.run_dir, kind, self.task, train, origin)
            self._device = next(model.parameters()).device
            self._plain = external.rebuild(kind, self.task.spec, weights).to(self._device)
            self._batches = held_out_batches(self.task, seed, eval_batch_size, self._device)
            self._writer = rundir.MetricsWriter(self.run_dir)
            self._running: Optional[Tensor] = None
            self._n, self._last, self._saved, self._t0 = 0, start, None, time.perf_counter()
            self._latest: dict[str, float] = {}
            self._exponent = 0  # without a schedule: the next log-spaced step is round(10 ** (exponent / PER_DECADE))
            self._checkpoint(start, {})
        except BaseException:  # (a full disk): free the run for the next try; what was written stays
            if self._writer is not None:
                self._writer.close()
            self._lock.__exit__()
            self._lock = None
            if made:
                remove_if_empty(self.run_dir)
            raise

    # ---- the loop ---------------------------------------------------------------------------------

    def step(self, step: int, loss: Optional[Tensor | float] = None, **metrics: float) -> None:
        """After update number `step` (1, 2, ...): `loss` of its batch (a tensor is not synced until it is
        recorded) and any scalars of yours. Checkpoints where the schedule says; records every eval_every."""
        if step <= self._last:
            raise ConfigError("step", f"{step} does not follow step {self._last}; call step() once per update, "
                                      "with increasing steps")
        self._last, self._latest = step, metrics  # the last step's own scalars, for the final checkpoint
        if loss is not None:
            loss = loss.detach().float() if isinstance(loss, Tensor) else torch.tensor(float(loss))
            self._running = loss.clone() if self._running is None else self._running.add_(loss)
            self._n += 1
        if self._due(step):
            self._checkpoint(step, metrics)
        elif step % self.eval_every == 0:
            self._record(step, metrics)

    __call__ = step

    def _due(self, step: int) -> bool:
        if self.schedule is not None:
            return step in self.schedule
        due = False
        while (next_step := round(10 ** (self._exponent / PER_DECADE))) <= step:
            due, self._exponent = due or next_step == step, self._exponent + 1
        return due

    def _record(self, step: int, metrics: dict[str, float], held_out: Optional[dict[str, float]] = None) -> dict[str, Any]:
        record: dict[str, Any] = {}
        if self._running is not None:
            record["train/loss"] = float(self._running) / self._n
            self._running, self._n = None, 0
        record |= {k: float(v) for k, v in metrics.items()} | (held_out or {})
        self._writer.write(step, record)
        if self._logger is not None:
            self._logger.log_against("mechsynth/step", [{"mechsynth/step": step} | {f"mechsynth/{k}": v for k, v in record.items()}])
        return record

    def _checkpoint(self, step: int, metrics: dict[str, float]) -> None:
        weights = external.weights_of(self.model)
        device = next(self.model.parameters()).device
        if device != self._device:  # a Trainer may move the model after the monitor was made (to the GPU)
            self._device, self._plain = device, self._plain.to(device)
            self._batches = {split: b.to(device) for split, b in self._batches.items()}
        # Held-out metrics from mechsynth's own model of these weights (its logits equal yours within 1e-5, checked
        # when the monitor started): 5x faster than a TransformerBridge's forward, so checkpoints stay cheap.
        self._plain.load_state_dict(weights)
        record = self._record(step, metrics, held_out_metrics(self._plain, self.task, self._batches))
        rundir.write_checkpoint(self.run_dir, step, weights, record,
                                {"step": step, "wandb_id": self._logger.id if self._logger else None},
                                time.perf_counter() - self._t0)
        self._saved = step
        if self.live and self._logger is not None:
            self._probe_live(step)

    def _probe_live(self, step: int) -> None:
        names = self._names(self.model)
        results = probes.run_many(names, self.model, self.task)[0] if names else {}
        row: dict[str, Any] = {"probe_step": step}
        for name, result in results.items():
            if result.per_head is not None:
                row |= {f"probe/{name}/{hooks.head_label(layer, head)}": float(result.per_head[layer, head])
                        for layer in range(result.per_head.shape[0]) for head in range(result.per_head.shape[1])}
            row |= {f"probe/{name}/{k}": v for k, v in result.metrics.items() if isinstance(v, (int, float))}
        self._logger.log_against("probe_step", [row])

    def _names(self, model: nn.Module) -> list[str]:
        if self.probe_names is not None:
            return [n for n in self.probe_names if not probes.PROBES.get(n).costly]
        return [n for n in probes.names() if not probes.PROBES.get(n).costly and probes.why_not(n, model, self.task) is None]

    # ---- the end ----------------------------------------------------------------------------------

    def finish(self):
        """Checkpoint the last step (if the schedule did not), close the run, probe it (unless probes=[]), log
        the timeline and formation steps to your W&B run; returns the timeline (None without probes)."""
        if self._lock is None:
            return self.timeline
        try:
            if self._saved != self._last:
                self._checkpoint(self._last, self._latest)
            data = io.read_json(self.run_dir / rundir.CONFIG)
            data["train"]["steps"] = max(1, self._last)  # complete at the step the loop ended (only step 0: partial)
            io.write_json(self.run_dir / rundir.CONFIG, data)
        finally:
            self._writer.close()
            self._lock.__exit__()
            self._lock = None
        if self.probe_names == []:
            return None
        from mechsynth.analysis import timeline
        from mechsynth.runs.run import load_run

        run = load_run(self.run_dir)
        names = self.probe_names if self.probe_names is not None else timeline.applicable(run)
        self.timeline = timeline.probe_run(run, names, progress=self.progress)
        timeline.save(self.timeline, self.run_dir)
        if self._logger is not None:
            timeline.log_to_wandb(self.timeline, self._logger)
        return self.timeline

    @property
    def closed(self) -> bool:
        """Whether the run is closed (finished, or its loop failed): it takes no more steps."""
        return self._lock is None

    def __enter__(self) -> "Monitor":
        return self

    def __exit__(self, kind, *exc) -> None:
        if kind is None:
            self.finish()
        elif self._lock is not None:  # the loop failed: keep what was written, probe nothing
            self._writer.close()
            self._lock.__exit__()
            self._lock = None


__all__ = ["Monitor", "as_dir", "check_int", "check_new", "probe_names", "resolve_task"]
