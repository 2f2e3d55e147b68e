"""A run's whole configuration: the task, the model, training and W&B, validated together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from mechsynth import models, tasks
from mechsynth.config import check, fields_entry, from_dict, key_name, show, to_dict
from mechsynth.errors import ConfigError
from mechsynth.models import ModelKind
from mechsynth.runs import rundir
from mechsynth.runs.wandb_log import WandbConfig
from mechsynth.tasks.base import Task, TaskSpec
from mechsynth.training import budget
from mechsynth.training.train import TrainConfig, freeze_unselected, resolve_device

SECTIONS = ("task", "model", "train", "wandb")


@dataclass(frozen=True)
class RunConfig:
    task_name: str
    task_params: dict[str, Any]
    model: ModelKind = field(default_factory=lambda: models.parse({}))  # a registered kind's config
    train: TrainConfig = field(default_factory=TrainConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": {"name": self.task_name, **self.task_params},
            "model": models.to_dict(self.model),
            "train": to_dict(self.train),
            "wandb": to_dict(self.wandb),
        }

    def build_task(self) -> Task:
        return tasks.make(self.task_name, self.task_params)

    @classmethod
    def of(cls, task: Task, model: ModelKind, train: TrainConfig, wandb: WandbConfig) -> "RunConfig":
        """The run config of a built task (its parameters as config.json stores them: lists, not tuples)."""
        return cls(
            task.name,
            {k: (list(v) if isinstance(v, tuple) else v) for k, v in to_dict(task.cfg).items()},
            model,
            train,
            wandb,
        )


def parse_config(data: dict[str, Any], *, resources: bool = True) -> RunConfig:
    """Validate a whole config (TOML tables) before any work: unknown sections/keys, types, ranges, the
    checks that need task and model together (e.g. sequence longer than n_ctx), and with `resources`
    (the default) what this machine must have: the device `train.device` names, and memory for the
    run's estimated peak (mechsynth/training/budget.py). Opening a finished run elsewhere (another machine, no
    GPU) needs only the first part: `resources=False`."""
    check(
        isinstance(data, dict),
        "config",
        f"must be a table of sections, got {show(data)}; allowed: {', '.join(SECTIONS)}",
    )
    for key in data:
        check(key in SECTIONS, key_name(key), f"unknown section; allowed: {', '.join(SECTIONS)}")
    for section, table in data.items():  # `task = 5` is a value, not a [task] table
        check(isinstance(table, dict), section, f"must be a table ([{section}]), got {show(table)}")
    task_table = dict(data.get("task", {}))
    name = task_table.pop("name", None)
    check(isinstance(name, str), "task.name", f"missing or not a string; allowed: {', '.join(tasks.names())}")
    task = tasks.make(name, task_table)
    train, wandb = (
        from_dict(TrainConfig, data.get("train", {}), "train"),
        from_dict(WandbConfig, data.get("wandb", {}), "wandb"),
    )
    # the model table last: its kinds import TransformerLens (seconds), which a mistake above need not wait for
    cfg = RunConfig.of(task, models.parse(data.get("model", {}), "model"), train, wandb)
    models.validate(cfg.model, task.spec)
    if cfg.train.params is not None:
        check_params(cfg.model, task.spec, cfg.train.params)
    # A task's regulariser reads truth that only its own fresh training batches carry, one seed at a time.
    check(
        not task.regularised or cfg.train.seeds == 1,
        "train.seeds",
        f"{cfg.train.seeds} seeds side by side, but task {task.name} adds a regulariser to the loss, which trains "
        f"one seed per run; allowed: 1 (a sweep over seeds instead)",
    )
    check(
        not task.regularised or cfg.train.data != "fixed",
        "train.data",
        f"'fixed', but task {task.name} adds a regulariser to the loss, which needs fresh batches; allowed: online",
    )
    if cfg.train.data == "fixed":
        check_fixed_set(cfg.train, task)
    if resources:
        budget.check(cfg.model, cfg.train, task, resolve_device(cfg.train.device))
    return cfg


def schema() -> dict[str, Any]:
    """What `configs.quick_check` reads (mechsynth/configs/schema.json): every field of every section, per task and
    model kind mechsynth ships (a plugin's are left to the full check)."""
    ours = lambda cls: cls.__module__.startswith("mechsynth.")  # noqa: E731
    task_classes = {n: tasks.TASKS.get(n).Config for n in tasks.names()}
    kinds = {k: models.MODEL_KINDS.get(k) for k in models.MODEL_KINDS.names()}
    return {
        "task": {n: fields_entry(c) for n, c in task_classes.items() if ours(tasks.TASKS.get(n))},
        "model": {k: {f: v for f, v in fields_entry(c).items() if f != "kind"} for k, c in kinds.items() if ours(c)},
        "train": fields_entry(TrainConfig),
        "wandb": fields_entry(WandbConfig),
        "default_kind": models.DEFAULT_KIND,
        "sections": list(SECTIONS),
    }


def check_params(model: ModelKind, spec: TaskSpec, params: Sequence[str]) -> None:
    """train.params against the names of the parameters this model has (ConfigError naming train.params): read
    from the model built on the meta device, which allocates and initialises nothing."""
    try:
        with torch.device("meta"):
            module = models.build(model, spec)
    except Exception:  # a kind (a plugin's) that cannot be built on the meta device: built for real, once
        module = models.build(model, spec)
    freeze_unselected(module, params)


def check_fixed_set(train: TrainConfig, task: Task) -> None:
    """A fixed training set needs its size from the config or from the task's list of its training inputs."""
    listed = task.enumerate("train")
    if listed is None:
        check(
            train.n_train is not None,
            "train.n_train",
            f"missing: task {task.name} samples its inputs rather than "
            "listing them, so a fixed training set needs its size; allowed: a positive integer",
        )
    else:
        check(
            train.n_train is None or train.n_train <= len(listed.tokens),
            "train.n_train",
            f"{train.n_train} is more than the {len(listed.tokens)} examples of task {task.name}'s training split; "
            f"allowed: 1 to {len(listed.tokens)}, or unset for all of them",
        )


def complete(config: dict[str, Any]) -> dict[str, Any]:
    """A stored run config with every field the current version has, at its default where the config
    predates the field (the run trained as that default says: e.g. `train.decay`); as stored where it is
    not a valid config (whoever reads it says what is wrong)."""
    data = {k: v for k, v in config.items() if k not in rundir.EXTRAS}
    try:
        if isinstance(data.get("model"), dict):
            data["model"] = models.stored_table(data["model"])
        return parse_config(data, resources=False).to_dict()
    except (ConfigError, TypeError, ValueError):
        return data
