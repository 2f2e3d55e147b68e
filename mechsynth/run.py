"""Run directories: config + metrics.jsonl + checkpoints, written so that a kill never corrupts them.

    RUN_DIR/config.json                  everything needed to rebuild task and model
    RUN_DIR/metrics.jsonl                one JSON record per evaluation, keys namespaced (train/loss, eval/acc)
    RUN_DIR/checkpoints/step_00000100/   model.safetensors, meta.json (step, metrics), state.pt (resume)

With `train.seeds = S` > 1, RUN_DIR holds the batched job's config.json and one such run directory per
seed, RUN_DIR/seed_0 ... RUN_DIR/seed_{S-1} (see mechsynth/seeds.py).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn as nn

from mechsynth import io, models, tasks
from mechsynth.config import ConfigError, check, from_dict, to_dict
from mechsynth.models import ModelConfig
from mechsynth.tasks.base import Task
from mechsynth.train import Trainer, TrainConfig, checkpoint_steps, resolve_device
from mechsynth.wandb_log import WandbConfig, WandbLogger

SECTIONS = ("task", "model", "train", "wandb")


@dataclass(frozen=True)
class RunConfig:
    task_name: str
    task_params: dict[str, Any]
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)

    def to_dict(self) -> dict[str, Any]:
        return {"task": {"name": self.task_name, **self.task_params}, "model": to_dict(self.model),
                "train": to_dict(self.train), "wandb": to_dict(self.wandb)}

    def build_task(self) -> Task:
        return tasks.make(self.task_name, self.task_params)


def parse_config(data: dict[str, Any]) -> RunConfig:
    """Validate a whole config (TOML tables) before any work: unknown sections/keys, ranges, and
    the checks that need task and model together (e.g. sequence longer than n_ctx)."""
    for key in data:
        check(key in SECTIONS, key, f"unknown section; allowed: {', '.join(SECTIONS)}")
    task_table = dict(data.get("task", {}))
    check(isinstance(task_table, dict), "task", "must be a table")
    name = task_table.pop("name", None)
    check(isinstance(name, str), "task.name", f"missing or not a string; allowed: {', '.join(tasks.names())}")
    task = tasks.make(name, task_table)
    cfg = RunConfig(name, {k: (list(v) if isinstance(v, tuple) else v) for k, v in to_dict(task.cfg).items()},
                    from_dict(ModelConfig, data.get("model", {}), "model"),
                    from_dict(TrainConfig, data.get("train", {}), "train"),
                    from_dict(WandbConfig, data.get("wandb", {}), "wandb"))
    models.validate(cfg.model, task.spec)
    return cfg


def ckpt_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:08d}"


def _complete_steps(run_dir: Path) -> list[int]:
    """Steps with a complete checkpoint (temp directories of an interrupted write are ignored)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(int(p.name[5:]) for p in root.iterdir() if p.name.startswith("step_") and p.name[5:].isdigit()
                  and (p / "model.safetensors").exists())


def is_complete(run_dir: Path | str) -> bool:
    """A run is complete when it has a checkpoint at its configured `train.steps` — the one
    definition sweeps use to skip finished runs (checkpoints appear atomically, so this never
    sees a half-written one)."""
    cfg_path = Path(run_dir) / "config.json"
    if not cfg_path.exists():
        return False
    steps = io.read_json(cfg_path).get("train", {}).get("steps")
    return isinstance(steps, int) and steps in _complete_steps(run_dir)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Records of metrics.jsonl; a line cut short by a kill (the last one) is skipped."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise io.CorruptFileError(path, f"line {i + 1} is not JSON") from None
    return out


def seed_dir(run_dir: Path | str, i: int) -> Path:
    """The run directory of seed i of a batched (`train.seeds` > 1) run."""
    return Path(run_dir) / f"seed_{i}"


def truncate_metrics(run_dir: Path, step: int) -> None:
    """On resume, records after the checkpoint will be produced again; drop them so the file has no duplicates."""
    kept = [r for r in read_metrics(run_dir) if r["step"] <= step]
    io.atomic_write(Path(run_dir) / "metrics.jsonl", lambda p: p.write_text("".join(json.dumps(r) + "\n" for r in kept)))


def write_checkpoint(run_dir: Path, step: int, weights: dict[str, torch.Tensor], metrics: dict[str, Any],
                     state: dict[str, Any]) -> None:
    def fill(tmp: Path) -> None:
        io.write_tensors(tmp / "model.safetensors", weights)
        io.write_json(tmp / "meta.json", {"step": step, "metrics": metrics, "time": time.time()})
        io.write_state(tmp / "state.pt", state)

    io.atomic_dir(ckpt_dir(run_dir, step), fill)


def train_run(cfg: RunConfig, run_dir: Path | str, *, resume: bool = False, progress: bool = True) -> Path:
    """Train `cfg` into `run_dir` (a new run), or continue the run there when `resume`."""
    if cfg.train.seeds > 1:
        from mechsynth.seeds import train_seeds

        return train_seeds(cfg, run_dir, resume=resume, progress=progress)
    run_dir = Path(run_dir)
    task = cfg.build_task()
    device = resolve_device(cfg.train.device)
    model = models.build(cfg.model, task.spec)
    trainer = Trainer(model, task, cfg.train, device)
    wandb_id = None
    if resume:
        steps = _complete_steps(run_dir)
        if not steps:
            raise ConfigError("--resume", f"{run_dir} has no complete checkpoint to resume from")
        # Leftovers of writes a kill interrupted: never read, so only clutter.
        for stale in [*(run_dir / "checkpoints").glob(".step_*"), *run_dir.glob(".*.tmp")]:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        last = ckpt_dir(run_dir, steps[-1])
        model.load_state_dict(io.read_tensors(last / "model.safetensors", device))
        state = io.read_state(last / "state.pt")
        trainer.load_state(state)
        wandb_id = state.get("wandb_id")
        truncate_metrics(run_dir, trainer.step)
    else:
        if run_dir.exists() and any(run_dir.iterdir()):
            raise ConfigError("--out", f"{run_dir} already exists and is not empty; choose another directory or --resume it")
        run_dir.mkdir(parents=True, exist_ok=True)
        io.write_json(run_dir / "config.json", {**cfg.to_dict(), "versions": _versions()})

    logger = WandbLogger(cfg.wandb, run_dir, cfg.to_dict(), run_id=wandb_id)
    metrics_file = open(run_dir / "metrics.jsonl", "a")

    def on_eval(step: int, metrics: dict[str, float]) -> None:
        metrics_file.write(json.dumps({"step": step, **metrics}) + "\n")
        metrics_file.flush()
        logger.log(metrics, step)

    def on_checkpoint(step: int, metrics: dict[str, float]) -> None:
        write_checkpoint(run_dir, step, trainer.module.state_dict(), metrics, {**trainer.state(), "wandb_id": logger.id})
        if cfg.wandb.log_checkpoints:
            logger.checkpoint(ckpt_dir(run_dir, step), step)

    try:
        trainer.fit(on_eval, on_checkpoint, set(checkpoint_steps(cfg.train.steps, cfg.train.checkpoints)), progress)
    except KeyboardInterrupt:
        # Keep the work done so far: checkpoint the current step so --resume loses nothing.
        if trainer.step not in _complete_steps(run_dir):
            on_checkpoint(trainer.step, trainer.evaluate())
        raise
    finally:
        metrics_file.close()
        logger.finish()
    return run_dir


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {"mechsynth": version("mechsynth"), "transformer_lens": models.TL_VERSION, "torch": torch.__version__}


class Run:
    """A finished or running run directory: config, metrics, checkpoints, and models at any step."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        cfg_path = self.path / "config.json"
        if not cfg_path.exists():
            raise FileNotFoundError(f"{self.path} is not a mechsynth run (no config.json)")
        data = io.read_json(cfg_path)
        data.pop("versions", None)
        self.config: RunConfig = parse_config(data)
        self.task: Task = self.config.build_task()

    @property
    def seeds(self) -> list[Run]:
        """The seeds of a batched run (`train.seeds` > 1), each a run of its own (RUN_DIR/seed_i);
        a single run is its own only seed."""
        if self.config.train.seeds == 1:
            return [self]
        return [Run(seed_dir(self.path, i)) for i in range(self.config.train.seeds)]

    def _one_model(self) -> None:
        """Metrics, checkpoints and models live in the seed directories of a batched run, not its parent."""
        if self.config.train.seeds > 1:
            raise ConfigError("run_dir", f"{self.path} trained {self.config.train.seeds} seeds side by side; open one "
                                         f"of them: {seed_dir(self.path, 0)} ... (in Python: load_run(...).seeds[i])")

    @property
    def metrics(self) -> list[dict[str, Any]]:
        self._one_model()
        return read_metrics(self.path)

    @property
    def steps(self) -> list[int]:
        """Steps that have a checkpoint."""
        self._one_model()
        return _complete_steps(self.path)

    def meta(self, step: int) -> dict[str, Any]:
        self._one_model()
        return io.read_json(ckpt_dir(self.path, step) / "meta.json")

    def trainable(self, step: Optional[int] = None, device: str | torch.device = "cpu") -> nn.Module:
        """The model we train (fused transformer or MLP) with the weights of `step` (default: last)."""
        step = self.steps[-1] if step is None else step
        if step not in self.steps:
            raise ValueError(f"step: {step} has no checkpoint in {self.path}; allowed: {self.steps}")
        model = models.build(self.config.model, self.task.spec)
        model.load_state_dict(io.read_tensors(ckpt_dir(self.path, step) / "model.safetensors"))
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
            if hooked is None or not isinstance(model, models.FusedTransformer):
                hooked = models.hooked(model, device)
            else:
                models.load_weights(hooked, model.cfg, {k: v.detach() for k, v in model.state_dict().items()})
            yield step, hooked

    def __repr__(self) -> str:
        if self.config.train.seeds > 1:
            return f"Run({str(self.path)!r}, task={self.config.task_name}, seeds={self.config.train.seeds})"
        return f"Run({str(self.path)!r}, task={self.config.task_name}, checkpoints={len(self.steps)})"


def load_run(path: Path | str) -> Run:
    """Open a run directory: `.config`, `.metrics`, `.steps`, `.model(step)`; for a batched run
    (`train.seeds` > 1) `.seeds` lists its seeds' runs, which have those."""
    return Run(path)
