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
`mechsynth probe` and `report` read it unchanged. Its config.json records only what is known: the steps,
the checkpoint schedule and the model, and what you tell the Monitor of your loop (`optimizer=` your torch
optimizer, whose class, learning rate, betas, momentum and weight decay it reads; `lr=`, `batch_size=`,
`seed=`). Every other training key is left out of the [train] table and listed in config.json's
origin["not_recorded"] (with model.init_seed: your loop initialised the model); the report shows them as
"not recorded", and `load_run(...).not_recorded` names them. The Trainer callbacks read the rest from the
Trainer (mechsynth/yours/callbacks.py).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import sys
import time
import typing
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn as nn
from torch import Tensor

from mechsynth import hooks, optimizers, probes, tasks
from mechsynth.config import check, show
from mechsynth.errors import ConfigError
from mechsynth.models import ModelKind, external
from mechsynth.runs import io, rundir
from mechsynth.runs.runconfig import RunConfig
from mechsynth.runs.runner import remove_if_empty
from mechsynth.runs.wandb_log import WandbConfig, WandbLogger
from mechsynth.tasks.base import Task
from mechsynth.training.train import DEVICE, TrainConfig, checkpoint_steps, held_out_batches, held_out_metrics
from mechsynth.util.progress import Progress

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
        raise ConfigError(
            "task",
            f"missing: {type(model).__name__} does not say its vocabulary and context, so random "
            "tokens cannot be sized to it; give the task it learns",
        ) from None
    return random_tokens(d_vocab, d_vocab_out or d_vocab, n_ctx)


def random_tokens(d_vocab: int, d_vocab_out: int, n_ctx: int) -> Task:
    """The task of a model without one: uniform random tokens of its sizes."""
    return tasks.make("random_tokens", {"d_vocab": d_vocab, "n_ctx": n_ctx, "d_vocab_out": d_vocab_out})


def start_run(
    run_dir: Path,
    kind: ModelKind,
    task: Task,
    train: TrainConfig,
    origin: dict[str, Any],
    field: str = "run_dir",
    not_recorded: Collection[str] = (),
) -> RunConfig:
    """Write config.json into the new run directory `run_dir` (absent or empty: checked again, now that the
    caller holds its lock). `not_recorded`: dotted keys nobody gave (see `write_config`)."""
    cfg = RunConfig.of(task, kind, train, WandbConfig(mode="disabled"))
    check_new(run_dir, field)
    write_config(run_dir, cfg, origin, not_recorded)
    return cfg


def write_config(run_dir: Path, cfg: RunConfig, origin: dict[str, Any], not_recorded: Collection[str] = ()) -> None:
    """config.json of a run mechsynth did not train. The keys in `not_recorded` ("train.lr") are left out of its
    tables, which would otherwise hold TrainConfig's defaults as if the run had used them, and are listed in
    origin["not_recorded"]: a reader gets the defaults back only so that the config parses (rundir.unknown_keys)."""
    tables = cfg.to_dict()
    listed = {rundir.NOT_RECORDED: sorted(not_recorded)} if not_recorded else {}
    io.write_json(
        run_dir / rundir.CONFIG,
        {**rundir.drop_unknown(tables, not_recorded), **rundir.stored_extras(tables), "origin": {**origin, **listed}},
    )


# What a Monitor knows of any loop: its own schedule, and that it watches one model.
MONITOR_KNOWS = ("steps", "checkpoints", "eval_every", "eval_batch_size", "seeds")
# torch's optimizers that are mechsynth's of the same name (mechsynth/optimizers/) with these options left alone.
SAME_AS_OURS = {torch.optim.Adam: "adam", torch.optim.AdamW: "adamw", torch.optim.SGD: "sgd"}
PLAIN_OPTIONS = {"amsgrad": False, "maximize": False, "nesterov": False, "dampening": 0}
GROUP_KEYS = ("lr", "betas", "momentum", "weight_decay")  # TrainConfig fields a parameter group holds under that name


def unwrapped(optimizer: Any) -> Any:
    """The torch optimizer inside a Trainer's wrapper (accelerate's AcceleratedOptimizer, Lightning's
    LightningOptimizer), whose class is the one the user chose."""
    for _ in range(4):
        inner = getattr(optimizer, "optimizer", None) or getattr(optimizer, "_optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer) or inner is optimizer:
            break
        optimizer = inner
    return optimizer


def _number(value: Any) -> Any:
    """A parameter group's value as config.json stores it (torch allows tensors for lr and betas)."""
    if isinstance(value, Tensor):
        return float(value)
    return tuple(_number(v) for v in value) if isinstance(value, (tuple, list)) else value


def optimizer_fields(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The TrainConfig fields a torch optimizer says of itself: `optimizer` where its class and options are
    mechsynth's optimizer of that name, and lr, betas, momentum, weight_decay where every parameter group
    agrees (groups that differ, e.g. no decay on biases, record none)."""
    groups = optimizer.param_groups
    out: dict[str, Any] = {}
    for key in GROUP_KEYS:
        # initial_lr: what a torch LR scheduler started from (it rewrites lr as it goes); the peak TrainConfig.lr means
        values = {_number(g.get("initial_lr", g.get(key)) if key == "lr" else g.get(key)) for g in groups}
        if len(values) == 1 and (value := values.pop()) is not None:
            out[key] = value
    if not (isinstance(out.get("lr"), float) and out["lr"] > 0):
        out.pop("lr", None)  # (0 at the start of a warmup the scheduler has not yet said)
    name = SAME_AS_OURS.get(type(optimizer))
    if name == "adam" and all(g.get("decoupled_weight_decay") for g in groups):
        name = "adamw"  # torch ≥ 2.6's Adam(decoupled_weight_decay=True) is AdamW
    if name is not None and all(g.get(k, v) == v for g in groups for k, v in PLAIN_OPTIONS.items()):
        out["optimizer"] = name
    return out


def class_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def told(optimizer: Any, lr: Any, batch_size: Any, seed: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(TrainConfig fields, origin entries) from the Monitor's arguments about the loop; each checked, and a value
    given twice (lr= and the optimizer's own) must agree."""
    fields: dict[str, Any] = {}
    origin: dict[str, Any] = {}
    if isinstance(optimizer, str):
        check(
            optimizer in optimizers.OPTIMIZERS,
            "optimizer",
            f"{show(optimizer)} is not an optimizer mechsynth "
            f"knows; allowed: {', '.join(optimizers.names())}, or your torch optimizer itself (optimizer=opt)",
        )
        fields["optimizer"] = optimizer
    elif optimizer is not None:
        inner = unwrapped(optimizer)
        check(
            isinstance(inner, torch.optim.Optimizer),
            "optimizer",
            f"expected your torch optimizer (optimizer=opt, "
            f"e.g. torch.optim.Adam(model.parameters())) or a name ({', '.join(optimizers.names())}), got {show(optimizer)}",
        )
        fields, origin = optimizer_fields(inner), {"optimizer": class_name(inner)}
    if lr is not None:
        check(
            isinstance(lr, (int, float)) and not isinstance(lr, bool) and math.isfinite(lr) and lr > 0,
            "lr",
            f"expected a positive number (your loop's peak learning rate), got {show(lr)}",
        )
        check(
            fields.get("lr", lr) == lr,
            "lr",
            f"{lr:g}, but your optimizer's learning rate is {fields.get('lr'):g}; "
            "give one of them (optimizer= records its own)",
        )
        fields["lr"] = float(lr)
    for name, value, lo in (("batch_size", batch_size, 1), ("seed", seed, 0)):
        if value is not None:
            check_int(value, name, lo)
            fields[name] = value
    return fields, origin


def device_name(model: nn.Module) -> Optional[str]:
    """The model's device as train.device spells it (None for one it cannot: not recorded)."""
    device = next(iter(model.parameters()), torch.empty(0, device="meta")).device
    name = "cpu" if device.type == "cpu" else str(device)
    return name if DEVICE.fullmatch(name) else None


def not_recorded(known: Collection[str]) -> list[str]:
    """The dotted keys of a Monitor's run that nobody gave: every TrainConfig field not in `known`, and the
    model's init_seed (your loop, not mechsynth, initialised it)."""
    return ["model.init_seed"] + [f"train.{f.name}" for f in dataclasses.fields(TrainConfig) if f.name not in known]


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
    check(
        isinstance(names, Iterable) and not isinstance(names, (str, bytes)),
        field,
        f"expected a list of probe names, got {show(names)}",
    )
    names = list(names)
    probes.check_known(names, field)
    return names


def check_new(run_dir: Path, field: str = "run_dir", overwrite_hint: str = "") -> None:
    """A new run goes into an absent or empty directory that can be made and written. `overwrite_hint`: how the
    caller replaces an existing run (", or pass overwrite=True to replace it"), said where one is there."""
    if run_dir.is_dir() and any(p.name != rundir.LOCK for p in run_dir.iterdir()):
        hint = overwrite_hint if rundir.status(run_dir) in ("complete", "partial") else ""
        raise ConfigError(field, f"{run_dir} already exists and is not empty; choose another directory{hint}")
    rundir.check_writable(run_dir, field)


def check_replaceable(run_dir: Path, field: str = "run_dir") -> None:
    """overwrite=True replaces a run directory, never a directory of other files (a typo'd run_dir=".")."""
    if rundir.status(run_dir) == "foreign":
        raise ConfigError(
            field,
            f"{run_dir} holds files but no mechsynth run (no readable config.json), and "
            "overwrite=True replaces only a run; choose another directory",
        )
    rundir.check_writable(run_dir, field)


def clear(run_dir: Path) -> None:
    """Delete everything in the run directory `run_dir` but the lock its caller holds (overwrite=True)."""
    for p in run_dir.iterdir():
        if p.name == rundir.LOCK:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def probe_options(options: Any, names: Optional[list[str]], field: str = "options") -> dict[str, Any]:
    """{probe: {option: value}} for the probes to run, every option checked now (not after the loop)."""
    if options is None:
        return {}
    check(isinstance(options, Mapping), field, f"expected {{probe: {{option: value}}}}, got {show(options)}")
    for name, table in options.items():
        probes.check_known([name], field)
        if names is not None:
            check(
                name in names, field, f"probe {name!r} is not among probes={names}; name it there or drop its options"
            )
        else:  # all that apply: a costly probe runs only when named
            check(not probes.PROBES.get(name).costly, field, f"probe {name!r} runs only when named; add it to probes=")
        try:
            probes.options(name, table)
        except ConfigError as e:
            raise ConfigError(field, str(e)) from None
    return {n: dict(t or {}) for n, t in options.items()}


def check_applies(names: Optional[list[str]], model: nn.Module, task: Task, field: str = "probes") -> None:
    """Each named probe applies to this model (what its checkpoints rebuild) and task: refused now, not after the loop."""
    from mechsynth.analysis import timeline

    for name in names or []:
        why = timeline.why_not_model(model, task, name)
        if why is not None:
            allowed = [n for n in probes.names() if timeline.why_not_model(model, task, n) is None]
            raise ConfigError(field, f"{name!r} does not apply: {why}; allowed: {', '.join(allowed) or 'none'}")


class Monitor:
    """Checkpoints, metrics and probes for a training loop of your own (see the module docstring).

    `model`: a TransformerLens transformer (TL 3 HookedTransformer, TL 4 TransformerBridge; any TL version
    mechsynth runs on) or a model mechsynth built. `task`: a Task (`mechsynth.tasks.make(name, params)`),
    a task name, or None (random tokens: only the probes that need no ground truth apply). `steps`: the
    loop's length, for the checkpoint schedule `mechsynth train` uses (`checkpoints` of them, log-spaced
    early); unset: 20 per factor of 10, however long the loop runs; `schedule`: your own checkpoint steps.
    What your loop used, recorded in config.json (anything not given is recorded as not recorded, never as a
    default): `optimizer` your torch optimizer (its class, and the lr, betas, momentum and weight decay its
    parameter groups agree on) or a mechsynth optimizer name; `lr`; `batch_size` (sequences per update); `seed`
    (your loop's seed; it also seeds the held-out batches, which use 0 when it is unset).
    `probes`: names to run at the end (None: all that apply; [] none), each checked against the model and task
    now; `options`: {probe: {option: value}} for them; `live`: also probe each checkpoint as it is written and
    log the scores to W&B during training. `wandb`: a W&B run of yours (`wandb.init(...)`), which gets the
    held-out metrics, probe series and formation steps and is left open. `eval_batch_size`: sequences of each
    held-out split, measured at every checkpoint (128, where `mechsynth train` takes 512: the demo's loop then
    runs well within 10% slower watched; benchmarks/monitor_overhead.py). `start`: the step of the model as
    given (checkpointed at once). `progress`: a bar on a terminal (a line per ~5% of the steps elsewhere) while
    the loop runs, and a line before the probes at the end. `overwrite`: replace the run already in `run_dir`
    (deleted once every other argument has been checked; a directory that holds no run is never replaced).
    """

    @typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
    def __init__(
        self,
        model: nn.Module,
        run_dir: Path | str,
        task: Task | str | None = None,
        *,
        steps: Optional[int] = None,
        checkpoints: int = 100,
        schedule: Optional[Sequence[int]] = None,
        eval_every: int = 100,
        eval_batch_size: int = 128,
        optimizer: Any = None,
        lr: Optional[float] = None,
        batch_size: Optional[int] = None,
        seed: Optional[int] = None,
        probes: Optional[Sequence[str]] = None,
        options: Optional[Mapping[str, Mapping[str, Any]]] = None,
        live: bool = False,
        wandb: Any = None,
        start: int = 0,
        progress: bool = False,
        overwrite: bool = False,
    ):
        # Every argument is checked before anything is made: a mistake is one line naming it, and leaves no directory.
        if schedule is not None and steps is not None:
            raise ConfigError("schedule", "give steps (the log-spaced schedule) or schedule, not both")
        if schedule is not None:
            listed = isinstance(schedule, Iterable) and not isinstance(schedule, (str, bytes))
            schedule = list(schedule) if listed else schedule
            if (
                not listed
                or not schedule
                or any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in schedule)
            ):
                raise ConfigError("schedule", f"must be a non-empty list of steps ≥ 0, got {show(schedule)}")
        if steps is not None:
            check_int(steps, "steps", 1)  # `steps or ...` once took 0 for unset
        for name, value, lo in (
            ("checkpoints", checkpoints, 2),
            ("eval_every", eval_every, 1),
            ("eval_batch_size", eval_batch_size, 1),
            ("start", start, 0),
        ):
            check_int(value, name, lo)
        for name, value in (("live", live), ("progress", progress), ("overwrite", overwrite)):
            check(isinstance(value, bool), name, f"expected True or False, got {show(value)}")
        if wandb is not None and not all(hasattr(wandb, a) for a in ("log", "define_metric", "id")):
            raise ConfigError("wandb", f"expected a W&B run (what wandb.init() returns), got {show(wandb)}")
        loop, loop_origin = told(optimizer, lr, batch_size, seed)
        self.probe_names = probe_names(probes)
        self.options = probe_options(options, self.probe_names)
        check(
            isinstance(model, nn.Module),
            "model",
            f"expected a TransformerLens transformer or a model mechsynth built, got {show(model)}",
        )
        device = device_name(model)
        # The upper bounds are TrainConfig's own; a schedule alone gives the steps of its last checkpoint.
        known = {
            "steps": steps if steps is not None else max([1, *(schedule or [])]),
            "checkpoints": checkpoints,
            "eval_every": eval_every,
            "eval_batch_size": eval_batch_size,
            "seeds": 1,
            **loop,
        }
        known |= {"device": device} if device is not None else {}
        train = TrainConfig(**known)
        self.model, self.task = model, resolve_task(task, model)
        self.run_dir = as_dir(run_dir)
        self.schedule = (
            set(schedule)
            if schedule is not None
            else set(checkpoint_steps(steps, checkpoints))
            if steps is not None
            else None
        )
        self.live, self.progress, self.eval_every = live, progress, eval_every
        self.timeline = None
        kind, weights = external.convert(
            model, self.task
        )  # a model that cannot make a run fails before anything is made
        self._device = next(model.parameters()).device
        self._plain = external.rebuild(kind, self.task.spec, weights).to(self._device)
        check_applies(self.probe_names, self._plain, self.task)
        hint = ", or pass overwrite=True to replace the run there"
        check_replaceable(self.run_dir) if overwrite else check_new(self.run_dir, overwrite_hint=hint)
        self._logger = WandbLogger.attach(wandb) if wandb is not None else None
        made = not self.run_dir.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = rundir.RunLock([self.run_dir]).__enter__()
        self._writer: Optional[rundir.MetricsWriter] = None
        self._bar: Optional[Progress] = None
        try:
            if overwrite:
                clear(self.run_dir)  # asked for, and only now: every argument has been checked and the run is ours
            self._origin = {"by": "mechsynth.Monitor", "model": type(model).__name__, **loop_origin}
            self._known = set(known)
            self.config = start_run(
                self.run_dir, kind, self.task, train, self._origin, not_recorded=not_recorded(self._known)
            )
            self._batches = held_out_batches(self.task, train.seed, eval_batch_size, self._device)
            self._writer = rundir.MetricsWriter(self.run_dir)
            self._running: Optional[Tensor] = None
            self._n, self._last, self._saved, self._t0 = 0, start, None, time.perf_counter()
            self._latest: dict[str, float] = {}
            self._exponent = 0  # without a schedule: the next log-spaced step is round(10 ** (exponent / PER_DECADE))
            self._checkpoint(start, {})
            total = steps if steps is not None else max(schedule) if schedule is not None else None
            self._bar = Progress(total, start, progress)
        except BaseException:  # (a full disk): free the run for the next try; what was written stays
            self._release()
            if made:
                remove_if_empty(self.run_dir)
            raise

    def note(self, optimizer: Any = None, **train: Any) -> None:
        """Record what the loop used, learned after the Monitor started: `optimizer` (your torch optimizer, read
        as `optimizer=` is) and TrainConfig fields by name (lr=3e-3, batch_size=32, seed=1234, grad_clip=None,
        schedule="linear", ...). The Trainer callbacks call it when training begins, from the Trainer's own
        arguments; config.json is rewritten at once, and the keys given leave its "not recorded" list."""
        check(
            self._lock is not None,
            "note",
            f"the monitor of {self.run_dir} is closed; note what the loop used before it ends",
        )
        fields, origin = told(optimizer, None, None, None)
        fields |= train
        self.config = dataclasses.replace(self.config, train=dataclasses.replace(self.config.train, **fields))
        self._origin |= origin
        self._known |= set(fields)
        write_config(self.run_dir, self.config, self._origin, not_recorded(self._known))

    # ---- the loop ---------------------------------------------------------------------------------

    def step(self, step: int, loss: Optional[Tensor | float] = None, **metrics: float) -> None:
        """After update number `step` (1, 2, ...): `loss` of its batch (a tensor is not synced until it is
        recorded) and any scalars of yours. Checkpoints where the schedule says; records every eval_every."""
        if step <= self._last:
            raise ConfigError(
                "step", f"{step} does not follow step {self._last}; call step() once per update, with increasing steps"
            )
        if self._bar is not None:
            self._bar.update(step - self._last)
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

    def _record(
        self, step: int, metrics: dict[str, float], held_out: Optional[dict[str, float]] = None
    ) -> dict[str, Any]:
        record: dict[str, Any] = {}
        if self._running is not None:
            record["train/loss"] = float(self._running) / self._n
            self._running, self._n = None, 0
        record |= {k: float(v) for k, v in metrics.items()} | (held_out or {})
        self._writer.write(step, record)
        if self._bar is not None:  # (values already synced for the record: the bar costs no extra sync)
            self._bar.show(
                step,
                **{
                    k.split("/")[-1] if k == "train/loss" else k: f"{record[k]:.4f}"
                    for k in ("train/loss", f"{self.task.main_eval}/acc")
                    if k in record
                },
            )
        if self._logger is not None:
            self._logger.log_against(
                "mechsynth/step", [{"mechsynth/step": step} | {f"mechsynth/{k}": v for k, v in record.items()}]
            )
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
        rundir.write_checkpoint(
            self.run_dir,
            step,
            weights,
            record,
            {"step": step, "wandb_id": self._logger.id if self._logger else None},
            time.perf_counter() - self._t0,
        )
        self._saved = step
        if self.live and self._logger is not None:
            self._probe_live(step)

    def _probe_live(self, step: int) -> None:
        names = self._names(self.model)
        options = {n: self.options[n] for n in names if n in self.options}
        results = probes.run_many(names, self.model, self.task, options=options)[0] if names else {}
        row: dict[str, Any] = {"probe_step": step}
        for name, result in results.items():
            if result.per_head is not None:
                row |= {
                    f"probe/{name}/{hooks.head_label(layer, head)}": float(result.per_head[layer, head])
                    for layer in range(result.per_head.shape[0])
                    for head in range(result.per_head.shape[1])
                }
            row |= {f"probe/{name}/{k}": v for k, v in result.metrics.items() if isinstance(v, (int, float))}
        self._logger.log_against("probe_step", [row])

    def _names(self, model: nn.Module) -> list[str]:
        if self.probe_names is not None:
            return [n for n in self.probe_names if not probes.PROBES.get(n).costly]
        return [
            n for n in probes.names() if not probes.PROBES.get(n).costly and probes.why_not(n, model, self.task) is None
        ]

    # ---- the end ----------------------------------------------------------------------------------

    def finish(self):
        """Checkpoint the last step (if the schedule did not), close the run, probe it (unless probes=[]), log
        the timeline and formation steps to your W&B run; returns the timeline (None without probes)."""
        if self._lock is None:
            return self.timeline
        try:
            if self._saved != self._last:
                self._checkpoint(self._last, self._latest)
            # complete at the step the loop ended (only step 0: partial)
            self.config = dataclasses.replace(
                self.config, train=dataclasses.replace(self.config.train, steps=max(1, self._last))
            )
            write_config(self.run_dir, self.config, self._origin, not_recorded(self._known))
        finally:
            self._release()
        if self.probe_names == []:
            return None
        from mechsynth.analysis import timeline
        from mechsynth.runs.run import load_run

        run = load_run(self.run_dir)
        names = self.probe_names if self.probe_names is not None else timeline.applicable(run)
        if self.progress:  # the probes can take a while after the bar has ended
            print(
                f"probing {len(run.steps)} checkpoints of {self.run_dir}: {', '.join(names)}",
                file=sys.stderr,
                flush=True,
            )
        self.timeline = timeline.probe_run(run, names, options=self.options, progress=self.progress)
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
            self._release()

    def _release(self) -> None:
        """Close the bar, the metrics file and the lock (whichever were opened)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._writer is not None:
            self._writer.close()
        if self._lock is not None:
            self._lock.__exit__()
            self._lock = None


__all__ = [
    "Monitor",
    "as_dir",
    "check_int",
    "check_new",
    "not_recorded",
    "optimizer_fields",
    "probe_names",
    "resolve_task",
    "start_run",
    "unwrapped",
    "write_config",
]
