"""Reading a run directory: its config, metrics, checkpoints, and models at any step (layout: mechsynth/runs/rundir.py).

Every file is checked as it is read: a missing or damaged one raises `RunFileError` naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn as nn

from mechsynth import models, plugins
from mechsynth.errors import ConfigError, CorruptFileError, one_line
from mechsynth.runs import rundir
from mechsynth.runs.runconfig import RunConfig, parse_config
from mechsynth.tasks.base import Task


def parse_stored(run_dir: Path | str, data: Optional[dict[str, Any]] = None) -> RunConfig:
    """The config stored in a run directory, validated, after importing the plugins the run recorded
    (mechsynth/plugins.py). A config.json that does not hold a valid run config is named as the damaged
    file (not as a bad --set); one that names a task, model kind or optimizer no plugin here registers
    says which plugin is missing, or to name it in MECHSYNTH_PLUGINS."""
    path = Path(run_dir) / rundir.CONFIG
    data = dict(rundir.read_config(run_dir) if data is None else data)
    entries = data.get("plugins", [])
    for key in rundir.EXTRAS:
        data.pop(key, None)
    missing = plugins.load_recorded(entries, path)  # before anything looks a name up
    if "model" in data:  # runs made before each model kind had its own config stored every kind's fields
        data["model"] = models.stored_table(data["model"])
    try:  # opened anywhere (a CPU-only machine too): the device and memory are checked when it trains
        cfg = parse_config(data, resources=False)
    except ConfigError as e:
        plugins.check_names(data, path, missing, entries)
        raise CorruptFileError(path, f"not a valid run config: {e}") from None
    plugins.warn_missing(missing, path)
    return cfg


class Run:
    """A finished or running run directory: config, metrics, checkpoints, and models at any step."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        stored = rundir.read_config(self.path)
        self.config: RunConfig = parse_stored(self.path, stored)
        # Keys the run never recorded (a Monitor over your loop that was not told your batch size): `config` holds
        # mechsynth's defaults there only so that it parses; the report shows them as "not recorded".
        self.not_recorded: frozenset[str] = rundir.unknown_keys(stored)
        # What made a run mechsynth did not train ({"by": "mechsynth.Monitor", ...}); None for its own runs.
        self.origin: Optional[dict[str, Any]] = stored.get("origin") if isinstance(stored.get("origin"), dict) else None
        self.task: Task = self.config.build_task()
        if self.config.train.seeds == 1:
            rundir.read_metrics(self.path)  # checked now: a damaged metrics.jsonl fails on opening, named

    @property
    def seeds(self) -> list[Run]:
        """The seeds of a batched run (`train.seeds` > 1), each a run of its own (RUN_DIR/seed_i);
        a single run is its own only seed."""
        if self.config.train.seeds == 1:
            return [self]
        return [Run(d) for d in rundir.members(self.path, self.config.train.seeds)]

    def _one_model(self) -> None:
        """Metrics, checkpoints and models live in the seed directories of a batched run, not its parent."""
        if self.config.train.seeds > 1:
            raise ConfigError(
                "run_dir",
                f"{self.path} trained {self.config.train.seeds} seeds side by side; open one "
                f"of them: {rundir.seed_dir(self.path, 0)} ... (in Python: load_run(...).seeds[i])",
            )

    @property
    def metrics(self) -> list[dict[str, Any]]:
        self._one_model()
        return rundir.read_metrics(self.path)  # read afresh: the run may still be training

    @property
    def steps(self) -> list[int]:
        """Steps that have a checkpoint."""
        self._one_model()
        return rundir.steps(self.path)

    def meta(self, step: int) -> dict[str, Any]:
        self._one_model()
        return rundir.read_meta(self.path, step)

    def weights(self, step: int, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        """The checkpoint's state dict, checked against the checksum written with it."""
        self._one_model()
        return rundir.read_weights(self.path, step, device)

    def state(self, step: int) -> dict[str, Any]:
        """The checkpoint's resumable state (optimizer, data RNG, W&B run id)."""
        self._one_model()
        return rundir.read_state(self.path, step)

    def trainable(self, step: Optional[int] = None, device: str | torch.device = "cpu") -> nn.Module:
        """The model we train (fused transformer or MLP) with the weights of `step` (default: last)."""
        step = self.steps[-1] if step is None else step
        if step not in self.steps:
            raise ValueError(f"step: {step} has no checkpoint in {self.path}; allowed: {self.steps}")
        model = models.build(self.config.model, self.task.spec)
        load_weights(model, self.weights(step), rundir.ckpt_dir(self.path, step) / rundir.WEIGHTS)
        return model.to(device).eval()

    def model(self, step: Optional[int] = None, device: str | torch.device = "cpu") -> nn.Module:
        """The hooked TransformerLens model at `step` (default: last) — ready for run_with_cache."""
        return models.hooked(self.trainable(step), device)

    def models(self, steps: Optional[list[int]] = None, device: str | torch.device = "cpu"):
        """Yield (step, hooked model) for each step, reusing one hooked model and loading each
        checkpoint's weights into it (building a TransformerLens model per checkpoint costs more
        than probing it). The yielded model is the same object each time."""
        hooked = None
        for step in self.steps if steps is None else steps:
            model = self.trainable(step, device)
            hooked = models.hooked(model, device) if hooked is None else models.reload(hooked, model)
            yield step, hooked

    def recorded_config(self) -> dict[str, Any]:
        """`config.to_dict()` without the keys the run never recorded (`not_recorded`): what may be shown or
        logged as this run's own configuration."""
        return rundir.drop_unknown(self.config.to_dict(), self.not_recorded)

    def __repr__(self) -> str:
        if self.config.train.seeds > 1:
            return f"Run({str(self.path)!r}, task={self.config.task_name}, seeds={self.config.train.seeds})"
        return f"Run({str(self.path)!r}, task={self.config.task_name}, checkpoints={len(self.steps)})"


def load_weights(model: nn.Module, weights: dict[str, torch.Tensor], path: Path) -> None:
    """`model.load_state_dict`, naming the file when its tensors do not fit the model config.json describes."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise CorruptFileError(
            path, f"its tensors do not fit the model of config.json: {one_line(e, typed=False)}"
        ) from None


def load_run(path: Path | str) -> Run:
    """Open a run directory: `.config`, `.metrics`, `.steps`, `.model(step)`; for a batched run
    (`train.seeds` > 1) `.seeds` lists its seeds' runs, which have those."""
    return Run(path)
