"""One job of a sweep, as a backend runs it (in a pool worker or a Ray task), and what backends share.

A job is one run, or a grid point's seeds side by side (`train.seeds` > 1 into runs/<point>; see
mechsynth/sweep/units.py). Whether to skip, continue or start it is decided here, at run time, from
what is on disk, so a job retried after its worker died does the right thing.
"""

from __future__ import annotations

import copy
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, get_args


@dataclass(frozen=True)
class Resources:
    """What a backend may use: `workers` and `threads` (local pool), or `address`, `num_cpus`, `num_gpus` (Ray)."""

    workers: int = 1
    address: Optional[str] = None
    num_cpus: float = 1.0
    num_gpus: Optional[float] = None  # None: 1 for runs that need CUDA, else 0
    threads: Optional[int] = None  # torch CPU threads per job (local); None: the CPU count / workers


# What a backend is: `run(units, on_result, resources, fn=run_job)` runs each (unit, run_dir) to completion
# with `fn(run_dir, unit.config, threads)` and calls `on_result(unit, result)` as each finishes. `fn` is a
# module-level function (it is pickled to pool workers and Ray tasks) that never raises for a failed unit.
JobFn = Callable[[str, dict[str, Any], int], dict[str, Any]]
Backend = Callable[..., None]
BackendName = Literal["local", "ray"]
BACKENDS: tuple[str, ...] = get_args(BackendName)

State = Literal["complete", "partial", "new", "foreign"]


def record_failures(
    path: Path, failures: list[dict[str, Any]], total: int, failed: str, retry: str, log: Callable[[str], None]
) -> None:
    """Write the failures of this invocation, with their tracebacks, to `path` and say so ("3 of 8 `failed`"),
    or remove the file an earlier invocation left when none failed this time."""
    if failures:
        from mechsynth.runs import io

        io.write_json(path, failures)
        log(f"{len(failures)} of {total} {failed} (tracebacks in {path}); {retry}")
    elif path.exists():
        path.unlink()


def run_state(run_dir: Path | str, steps: Optional[int] = None) -> State:
    """`rundir.status`, measured against `steps` when given (a sweep's plan may ask for more or fewer steps
    than a run on disk was configured with): 'complete' once every model of the run has a checkpoint at
    or past `steps`, so a run trained longer is kept as it is and a shorter one is continued."""
    from mechsynth.runs import rundir

    state = rundir.status(run_dir)
    if steps is None or state not in ("complete", "partial"):
        return state
    members = rundir.members(run_dir, rundir.n_seeds(rundir.read_config(run_dir)))
    return "complete" if min(max(rundir.steps(d), default=-1) for d in members) >= steps else "partial"


def run_job(run_dir: str, config: dict[str, Any], threads: int = 1) -> dict[str, Any]:
    """Bring one job to completion: skip it if complete, continue it if it is ours (from its last
    checkpoint, or from step 0), or train it from scratch. A directory that holds files but no readable
    run config is moved aside, never deleted (seeds side by side: never over runs of its seeds). Never
    raises for a failed run: returns {"status": "failed", "error", "traceback"}; else "status" (done,
    resumed, skipped), "seconds" and "finals" (each model's last metrics record). `config` may carry the
    "plugins" the sweep's process had (`plugins.recorded`): a worker imports them first, as it does not
    inherit a plugin that was imported by hand there."""
    import torch

    from mechsynth import plugins
    from mechsynth.errors import ConfigError, DivergedError, UserError, one_line
    from mechsynth.runs import rundir
    from mechsynth.runs.runconfig import parse_config
    from mechsynth.runs.runner import train_run
    from mechsynth.sweep import units as sweep_units

    torch.set_num_threads(max(1, threads))
    path, t0, out = Path(run_dir), time.time(), {}
    try:
        config = copy.deepcopy(config)
        needed = config.pop("plugins", [])
        missing = plugins.load_recorded(needed, path)
        try:
            cfg = parse_config(config)
        except ConfigError:
            plugins.check_names(config, path, missing, needed)
            raise
        n = cfg.train.seeds
        state = run_state(path, cfg.train.steps)
        if state == "foreign" and n > 1 and sweep_units.is_vacant(path, n):
            sweep_units.clear_vacant(path, n)  # a batch killed before it wrote its config
            state = "new"
        elif state == "foreign":
            if n > 1 and any((d / rundir.CONFIG).exists() for d in rundir.members(path, n)):
                raise UserError(
                    f"{path} holds runs of its seeds trained on their own; a batch does not train over "
                    "them (set [sweep] side_by_side = false)"
                )
            out["moved_aside"] = str(rundir.move_aside(path))
            state = "new"
        if state == "complete":
            status = "skipped"
        elif state == "partial":
            train_run(cfg, path, resume=True, progress=False)
            status = "resumed"
        else:
            train_run(cfg, path, progress=False)
            status = "done"
        finals = [(rundir.read_metrics(d) or [{}])[-1] for d in rundir.members(path, n)]
    except (UserError, DivergedError) as e:  # one line says it all
        return {
            **out,
            "status": "failed",
            "error": f"{type(e).__name__}: {e}",
            "traceback": "",
            "seconds": time.time() - t0,
        }
    except Exception as e:  # noqa: BLE001 - one run's failure is reported, the others go on
        return {
            **out,
            "status": "failed",
            "error": one_line(e),
            "traceback": traceback.format_exc(),
            "seconds": time.time() - t0,
        }
    return {**out, "status": status, "seconds": time.time() - t0, "finals": finals}


def failed(why: str) -> dict[str, Any]:
    """The result of a job whose worker (process, Ray task or node) died."""
    return {"status": "failed", "error": why, "traceback": ""}
