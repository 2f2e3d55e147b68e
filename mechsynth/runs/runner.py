"""Training a config into a run directory — new or continued, one model or seeds side by side — on one path.

A single run is the one-seed case of seeds side by side: the same code locks the directory, loads the
checkpoint to continue from, writes config.json, appends metrics, writes checkpoints and logs to W&B
for each member directory (RUN_DIR itself, or RUN_DIR/seed_i; see mechsynth/runs/rundir.py). Nothing is
written until everything a resume needs has been read and checked, so a resume that fails leaves the
run exactly as it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import torch

from mechsynth import models, plugins
from mechsynth.errors import ConfigError, CorruptFileError, DivergedError, one_line
from mechsynth.runs import io, rundir
from mechsynth.runs.run import load_weights, parse_stored
from mechsynth.runs.runconfig import RunConfig, complete
from mechsynth.runs.wandb_log import WandbLogger, resolve_mode
from mechsynth.training.seeds import SeedsTrainer, stack_weights
from mechsynth.training.train import Trainer, checkpoint_steps, resolve_device


def seed_config(cfg: RunConfig, i: int, name: str) -> RunConfig:
    """Seed i of a batched run as a run of its own. Its W&B run is named after the batch and grouped with
    the other seeds (under `wandb.group`, or else the batch's name)."""
    base = cfg.wandb.name or name
    return replace(
        cfg,
        model=replace(cfg.model, init_seed=cfg.model.init_seed + i),
        train=replace(cfg.train, seed=cfg.train.seed + i, seeds=1),
        wandb=replace(cfg.wandb, name=f"{base}-seed_{i}", group=cfg.wandb.group or base),
    )


def train_run(
    cfg: RunConfig,
    run_dir: Path | str,
    *,
    resume: bool = False,
    progress: bool = True,
    log: Optional[Callable[[str], None]] = None,
) -> Path:
    """Train `cfg` into `run_dir` (new: absent or empty), or continue the run there when `resume` (from its
    last checkpoint; from step 0 if it has none yet). With `resume`, `cfg` may differ from the stored
    config only in keys `rundir.RESUMABLE` allows. `log` gets one line saying where training starts."""
    run_dir, n = Path(run_dir), cfg.train.seeds
    resolve_mode(cfg.wandb)  # a bad WANDB_MODE fails here, before any work
    dirs = rundir.members(run_dir, n)
    cfgs = [cfg] if n == 1 else [seed_config(cfg, i, run_dir.name) for i in range(n)]
    if resume:
        # Parsed, so a run made before a config field existed compares with that field's default.
        rundir.check_resumable(parse_stored(run_dir).to_dict(), cfg.to_dict(), field="--resume")
    else:
        _check_new(run_dir)
    rundir.check_writable(run_dir, "--resume" if resume else "--out")
    task = cfg.build_task()
    device = resolve_device(cfg.train.device)
    owned = list(dict.fromkeys([run_dir, *dirs]))  # (one seed: the run directory is its only member)
    made = [d for d in owned if not d.exists()]
    fresh = True  # nothing written yet: a failure undoes the directories this call made
    threads = torch.get_num_threads()  # given back after: train.threads is this run's, not the process's
    if cfg.train.threads is not None:
        torch.set_num_threads(cfg.train.threads)
    try:
        for d in made:
            d.mkdir(parents=True)
        with rundir.RunLock(owned):
            if not resume:
                _check_new(run_dir, ours=made)  # again, now that we hold it: another process may have started here
            model = models.build(cfg.model, task.spec, n_models=None if n == 1 else n)
            trainer = (
                Trainer(model, task, cfg.train, device) if n == 1 else SeedsTrainer(model, task, cfg.train, device)
            )
            wandb_ids: list[Optional[str]] = [None] * n
            start = resume_step(dirs) if resume else None
            recorded = rundir.read_config(run_dir).get("threads") if resume else None  # what it started with
            if start is not None:
                wandb_ids, at_start = _load(trainer, dirs, start)
                recorded = at_start or recorded
            elif cfg.train.init_from:  # read only when used: a resumed fine-tuning run needs only its own checkpoints
                weights, path = initial_weights(cfg.train.init_from)
                check_fits(weights, trainer.module.state_dict(), set() if n == 1 else trainer.stacked, path)
                load_weights(trainer.module, weights if n == 1 else stack_weights([weights] * n, trainer.stacked), path)
            if cfg.train.threads is None and isinstance(recorded, int) and recorded > 0:  # the numerics it trained with
                torch.set_num_threads(recorded)
            if resume:
                if log:
                    log(
                        f"continuing {run_dir} from step {start}"
                        if start is not None
                        else f"continuing {run_dir} from step 0 (it has no checkpoint yet)"
                    )
                fresh = False  # everything is read: only now change the directory
                _rewrite_configs(run_dir, cfg, dirs, cfgs, start)
            else:
                if log:
                    log(f"training {cfg.task_name} -> {run_dir}")
                fresh = False
                for d, c in _config_files(run_dir, cfg, dirs, cfgs):
                    extras = {**rundir.stored_extras(c.to_dict()), "threads": torch.get_num_threads()}
                    io.write_json(d / rundir.CONFIG, {**c.to_dict(), **extras})
            _fit(trainer, cfg, run_dir, dirs, cfgs, wandb_ids, start, progress)
    except BaseException:
        if fresh:
            for d in reversed(made):
                remove_if_empty(d)
        raise
    finally:
        torch.set_num_threads(threads)
    return run_dir


def _fit(
    trainer: Trainer,
    cfg: RunConfig,
    run_dir: Path,
    dirs: list[Path],
    cfgs: list[RunConfig],
    wandb_ids: list[Optional[str]],
    start: Optional[int],
    progress: bool,
) -> None:
    loggers = [WandbLogger(c.wandb, d, c.to_dict(), run_id=w) for c, d, w in zip(cfgs, dirs, wandb_ids)]
    writers: list[rundir.MetricsWriter] = []
    last = [start]  # the last checkpoint on disk
    # Training time accumulates over resumes, so a continued run's time excludes the wait between them.
    before = rundir.read_meta(dirs[0], start).get("train_s", 0.0) if start is not None else 0.0
    t0 = time.perf_counter()

    def on_eval(step: int, metrics: Any) -> None:
        for writer, logger, m in zip(writers, loggers, trainer.seed_records(metrics)):
            writer.write(step, m)
            logger.log(m, step)

    def on_checkpoint(step: int, metrics: Any) -> None:
        for d, c, logger, w, m, s in zip(
            dirs, cfgs, loggers, trainer.seed_weights(), trainer.seed_records(metrics), trainer.seed_states()
        ):
            rundir.write_checkpoint(
                d,
                step,
                w,
                m,
                {**s, "wandb_id": logger.id, "threads": torch.get_num_threads()},
                before + time.perf_counter() - t0,
            )
            if c.wandb.log_checkpoints:
                logger.checkpoint(rundir.ckpt_dir(d, step), step)
        last[0] = step

    try:
        writers.extend(rundir.MetricsWriter(d) for d in dirs)
        trainer.fit(on_eval, on_checkpoint, set(checkpoint_steps(cfg.train.steps, cfg.train.checkpoints)), progress)
    except KeyboardInterrupt:
        # Keep the work done so far: checkpoint the step reached so --resume loses nothing.
        if any(trainer.step not in rundir.steps(d) for d in dirs):
            metrics = trainer.evaluate()
            try:
                trainer.check_finite(metrics, weights=True)
                on_checkpoint(trainer.step, metrics)
            except DivergedError:
                pass
        raise
    except DivergedError as e:
        seeds = (
            f" (seed{'s' if len(e.seeds) > 1 else ''} {', '.join(map(str, e.seeds))})" if cfg.train.seeds > 1 else ""
        )
        kept = (
            f"the last finite checkpoint, step {last[0]}, is kept: probe and report work up to it"
            if last[0] is not None
            else "no checkpoint was written"
        )
        raise DivergedError(
            f"{run_dir}: training diverged: the loss is not finite at step {e.step}{seeds}; {kept}. "
            "Train again with a smaller train.lr",
            e.step,
            last[0],
            e.seeds,
        ) from None
    finally:
        for writer in writers:
            writer.close()
        for logger in loggers:
            logger.finish()


def _load(trainer: Trainer, dirs: list[Path], step: int) -> tuple[list[Optional[str]], Optional[int]]:
    """Weights and resumable state of every member at `step` into `trainer`; returns their W&B run ids and the CPU
    threads the run trained with (None in runs from before it was recorded)."""
    weights = [rundir.read_weights(d, step) for d in dirs]
    states = [rundir.read_state(d, step) for d in dirs]
    load_weights(
        trainer.module,
        weights[0] if len(dirs) == 1 else stack_weights(weights, trainer.stacked),
        rundir.ckpt_dir(dirs[0], step) / rundir.WEIGHTS,
    )
    try:
        trainer.load_seed_states(states)
    except (KeyError, ValueError, TypeError, RuntimeError, IndexError) as e:
        raise CorruptFileError(
            rundir.ckpt_dir(dirs[0], step) / rundir.STATE, f"not the training state of this run ({one_line(e)})"
        ) from None
    return [s.get("wandb_id") for s in states], states[0].get("threads")


def initial_weights(source: str) -> tuple[dict[str, Any], Path]:
    """The weights `train.init_from` names — a run directory's last checkpoint, or one checkpoint directory —
    and their file; read and checked before training starts, a bad path is one line naming train.init_from."""
    path = Path(source)
    if (path / rundir.WEIGHTS).is_file():  # RUN/checkpoints/step_N
        run_dir, step = (
            path.parent.parent,
            int(path.name.removeprefix("step_")) if path.name.startswith("step_") else None,
        )
        if step is None or rundir.ckpt_dir(run_dir, step) != path:
            raise ConfigError("train.init_from", f"{source!r} holds weights but is not RUN/checkpoints/step_N")
        return rundir.read_weights(run_dir, step), path / rundir.WEIGHTS
    if not path.is_dir():
        raise ConfigError("train.init_from", f"{source!r} is not a run or checkpoint directory")
    if rundir.seed_dir(path, 0).is_dir():
        raise ConfigError(
            "train.init_from", f"{source!r} holds seeds side by side; name one: {rundir.seed_dir(path, 0)}"
        )
    steps = rundir.steps(path)
    if not steps:
        raise ConfigError("train.init_from", f"{source!r} has no checkpoint")
    return rundir.read_weights(path, steps[-1]), rundir.ckpt_dir(path, steps[-1]) / rundir.WEIGHTS


def check_fits(weights: dict[str, Any], state: dict[str, Any], stacked: set[str], path: Path) -> None:
    """ConfigError naming train.init_from when `weights` (one model's) are not the tensors of the model whose
    `state` this is (`stacked`: the keys holding seeds side by side on a leading axis)."""
    want = {k: tuple(v.shape[1:] if k in stacked else v.shape) for k, v in state.items()}
    got = {k: tuple(v.shape) for k, v in weights.items()}
    wrong = [
        f"{k} {got.get(k, 'missing')} (this model: {want.get(k, 'none')})"
        for k in sorted(want.keys() | got.keys())
        if got.get(k) != want.get(k)
    ]
    if wrong:
        raise ConfigError(
            "train.init_from",
            f"the weights of {path} do not fit this run's model: {wrong[0]}"
            + (f" and {len(wrong) - 1} more" if len(wrong) > 1 else ""),
        )


def resume_step(dirs: list[Path]) -> Optional[int]:
    """The last step checkpointed by every member (None: none yet, so training restarts at step 0). A kill
    while the seeds' records or checkpoints were being written leaves some seeds one record or checkpoint
    ahead; that step is redone. More than one ahead means the seed was continued on its own, and resuming
    the batch would overwrite that work: refused."""
    steps = [set(rundir.steps(d)) for d in dirs]
    common = set.intersection(*steps)
    step = max(common) if common else None
    records = [[r["step"] for r in rundir.read_metrics(d)] for d in dirs]  # also: every metrics file is sound
    shared = min(r[-1] if r else -1 for r in records)
    for d, own, rec in zip(dirs, steps, records):
        ahead = sorted({x for x in own if step is None or x > step} | {x for x in rec if x > shared})
        if len(dirs) > 1 and len(ahead) > 1:
            raise ConfigError(
                "--resume",
                f"{d} has records or checkpoints at steps {ahead} that the other seeds lack: "
                "it was continued on its own; resume it alone",
            )
    return step


def _rewrite_configs(
    run_dir: Path, cfg: RunConfig, dirs: list[Path], cfgs: list[RunConfig], start: Optional[int]
) -> None:
    """Before continuing from `start`: drop what a kill left half-written and the records after `start`
    (they will be produced again), and store the config as given (its resumable keys may have changed),
    with the versions that made the run and its plugins as found now (a plugin that moved, found through
    MECHSYNTH_PLUGINS, is recorded where it is now)."""
    for d, c in _config_files(run_dir, cfg, dirs, cfgs):
        path = d / rundir.CONFIG
        old = io.read_json(path) if path.exists() else {}
        old = old if isinstance(old, dict) else {}
        extras = rundir.stored_extras(c.to_dict())
        found = _found(old.get("plugins"), extras["plugins"])
        if not old or rundir.changed_keys(complete(old), c.to_dict()) or found != old.get("plugins", []):
            kept = {"versions": old.get("versions") or extras["versions"], "plugins": found}
            io.write_json(path, {**c.to_dict(), **kept, **({"threads": old["threads"]} if "threads" in old else {})})
    for d in dirs:
        rundir.remove_stale_temps(d)
        rundir.truncate_metrics(d, start or None)  # from step 0, `fit` records step 0 again


def _found(old: Any, now: list[str]) -> list[str]:
    """The plugins to record on a resume: those needed now, and those recorded before that this process
    imported and that are still where recorded (a plugin adding probes only, when MECHSYNTH_PLUGINS is not
    set this time; a moved one is in `now` at its new place)."""
    if not isinstance(old, list):
        return now
    kept = [
        e for e in old if isinstance(e, str) and plugins.imported(e) and (not e.endswith(".py") or Path(e).is_file())
    ]
    return list(dict.fromkeys(now + kept))


def _config_files(
    run_dir: Path, cfg: RunConfig, dirs: list[Path], cfgs: list[RunConfig]
) -> list[tuple[Path, RunConfig]]:
    """Where a config.json goes: the run directory, and (side by side) each seed's with its own config."""
    return [(run_dir, cfg)] + (list(zip(dirs, cfgs)) if len(dirs) > 1 else [])


def _check_new(run_dir: Path, ours: list[Path] = ()) -> None:
    """A new run goes into an absent or empty directory (`ours`: the seed directories this call made)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError("--out", f"{run_dir} is a file; give a directory to train into")
    if run_dir.is_dir() and any(p.name != rundir.LOCK and p not in ours for p in run_dir.iterdir()):
        raise ConfigError(
            "--out", f"{run_dir} already exists and is not empty; choose another directory or --resume it"
        )


def remove_if_empty(run_dir: Path) -> None:
    """Undo creating a run directory that got nothing (a start that failed); never touches a file we did not make."""
    try:  # (an OSError here would hide the one that brought us here)
        (run_dir / rundir.LOCK).unlink(missing_ok=True)
        run_dir.rmdir()
    except OSError:
        pass
