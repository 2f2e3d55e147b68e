"""One run of a sweep, as a backend runs it (in a pool worker or a Ray task), and what backends share."""

from __future__ import annotations

import copy
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class Resources:
    """What a backend may use: `workers` (local pool), or `address`, `num_cpus`, `num_gpus` (Ray)."""

    workers: int = 1
    address: Optional[str] = None
    num_cpus: float = 1.0
    num_gpus: Optional[float] = None   # None: 1 for runs that need CUDA, else 0


# What a backend is: `run(tasks, on_result, resources)` runs each (task, run_dir) to completion with
# `run_job` and calls `on_result(task, result)` as each finishes.
Backend = Callable[[list[tuple[Any, str]], Callable[[Any, dict], None], Resources], None]


def run_job(run_dir: str, config: dict[str, Any], threads: int = 1) -> dict[str, Any]:
    """Bring one run to completion: skip it if complete, continue it if it is ours (from its last
    checkpoint, or from step 0), or train it from scratch. A directory that holds files but no readable
    run config is moved aside, never deleted. Decided here, at run time, so a retried task does the
    right thing. Never raises for a failed run: returns {"status": "failed", "error", "traceback"}."""
    import torch

    from mechsynth import rundir
    from mechsynth.errors import DivergedError, UserError
    from mechsynth.runconfig import parse_config
    from mechsynth.runner import train_run

    torch.set_num_threads(max(1, threads))
    path, t0, out = Path(run_dir), time.time(), {}
    try:
        cfg = parse_config(copy.deepcopy(config))
        state = rundir.status(path)
        if state == "foreign":
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
        last = rundir.read_metrics(rundir.members(path, cfg.train.seeds)[0])
    except (UserError, DivergedError) as e:  # one line says it all
        return {**out, "status": "failed", "error": f"{type(e).__name__}: {e}", "traceback": "", "seconds": time.time() - t0}
    except Exception as e:  # noqa: BLE001 - one run's failure is reported, the others go on
        return {**out, "status": "failed", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(),
                "seconds": time.time() - t0}
    return {**out, "status": status, "seconds": time.time() - t0, "final": last[-1] if last else {}}


def failed(why: str) -> dict[str, Any]:
    """The result of a run whose worker (process, Ray task or node) died."""
    return {"status": "failed", "error": why, "traceback": ""}
