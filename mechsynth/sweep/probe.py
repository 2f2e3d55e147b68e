"""`mechsynth probe` on a directory of many runs: every complete run of a sweep (SWEEP_DIR/runs/<point>/seed_<s>),
or each seed of a run that trained its seeds side by side (RUN_DIR/seed_i), probed in parallel on a sweep
backend (mechsynth/sweep/local_pool.py, or Ray) as `mechsynth sweep` trains them.

Every run gets the same request (probes, checkpoints, options, batch size) and is probed as `mechsynth probe
RUN_DIR` probes it: probes.json and probes.csv in the run directory, merged with the probes it already has. A
run whose probes.json already covers the request is skipped, so the command started again after a kill or a
failure finishes the rest; a run that fails is one line, and the others still finish.
"""

from __future__ import annotations

import json
import math
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from mechsynth.config import apply_override
from mechsynth.errors import ConfigError, DivergedError, UserError, one_line
from mechsynth.runs import rundir
from mechsynth.sweep import local_pool
from mechsynth.sweep.job import BackendName, Resources, record_failures, run_state

FAILURES = "probe_failures.json"  # in the directory probed, while any run failed; tracebacks inside


@dataclass(frozen=True)
class Target:
    """One run for a backend: `dir` is shown in the report (relative to the directory probed); `config` is
    the request every run gets (`probe_job` reads it)."""

    dir: str
    config: dict[str, Any]


def runs_within(path: Path) -> Optional[list[tuple[Path, bool]]]:
    """(run directory, complete) for each run a sweep directory or a seeds-side-by-side run holds; None for
    anything else (a single run, or no run: `mechsynth probe`'s single-run path says what is wrong)."""
    if (path / "sweep.json").is_file():
        from mechsynth.sweep import load_plan

        out = []
        for j in load_plan(path).jobs:  # (a run of the plan may itself train seeds side by side: each of them)
            done = run_state(path / j.dir, j.config["train"]["steps"]) == "complete"
            out += [(d, done) for d in rundir.members(path / j.dir, j.config["train"].get("seeds", 1))]
        return out
    try:
        n = rundir.n_seeds(rundir.read_config(path))
    except UserError:
        return None
    return [(d, rundir.is_complete(d)) for d in rundir.members(path, n)] if n > 1 else None


def check_single_run(backend: str, workers: Optional[int], address: Optional[str], num_cpus: Optional[float]) -> None:
    """The parallel flags mean nothing for one run: say so rather than ignore them."""
    if backend != "local" or workers is not None or address or num_cpus is not None:
        raise ConfigError(
            "--backend" if workers is None else "--workers",
            "probes the runs of a sweep directory or of a run with seeds side by side in parallel; "
            "this is a single run",
        )


def _check_flags(
    backend: BackendName, workers: Optional[int], address: Optional[str], num_cpus: Optional[float]
) -> None:
    if workers is not None and workers < 1:
        raise ConfigError("--workers", f"must be an integer ≥ 1, got {workers}")
    if num_cpus is not None and not num_cpus > 0:
        raise ConfigError("--cpus-per-run", f"must be a number > 0, got {num_cpus}")
    if backend != "ray" and (address or num_cpus is not None):
        raise ConfigError("--backend", "--address and --cpus-per-run need --backend ray")
    if backend == "ray" and workers is not None:
        raise ConfigError("--workers", "is for the local backend; Ray schedules runs by --cpus-per-run")
    if backend == "ray":
        from mechsynth.sweep import ray_backend

        ray_backend.require()


def _request(
    probe_names: Optional[str], steps: Optional[str], batch_size: int, sets: Sequence[str], wandb: Optional[str]
) -> dict[str, Any]:
    """What every run is asked for, each value checked before any work."""
    from mechsynth import probes

    if batch_size < 1:
        raise ConfigError("--batch-size", f"must be ≥ 1, got {batch_size}")
    names = None
    if probe_names:
        names = list(dict.fromkeys(n.strip() for n in probe_names.split(",") if n.strip()))
        probes.check_known(names, "--probes")
    options: dict[str, Any] = {}
    for assignment in sets:
        apply_override(options, assignment)
    # Without --probes each run gets the probes that apply to it: the options of any that run by default.
    running = names if names is not None else [n for n in probes.names() if not probes.PROBES.get(n).costly]
    for n, table in options.items():
        if n not in running:
            raise ConfigError(f"--set {n}", f"probe {n!r} is not being run; allowed: options of {', '.join(running)}")
        probes.options(n, table)  # every bad option named before any work
    chosen = None
    if steps:
        try:
            chosen = [int(s) for s in steps.split(",")]
        except ValueError:
            raise ConfigError("--steps", f"{steps!r} must be comma-separated integers") from None
    return {"probes": names, "steps": chosen, "batch_size": batch_size, "options": options, "wandb": wandb}


def _applicability_key(run_dir: Path) -> str:
    """Runs that differ only in their seeds take the same probes: one of them is checked for all."""
    config = rundir.read_config(run_dir)
    task = {k: v for k, v in config["task"].items() if k != "seed"}
    model = {k: v for k, v in config.get("model", {}).items() if k != "init_seed"}
    return json.dumps([task, model], sort_keys=True)


def _sort(runs: list[Path], request: dict[str, Any], base: Path) -> tuple[list[Path], list[Path]]:
    """(runs to probe, runs whose probes.json covers the request already). A named probe must apply to every
    run, as for one run: checked once per kind of run, before any work. A run that cannot be opened is left
    to its job, which reports it in one line."""
    from mechsynth.analysis import timeline
    from mechsynth.runs.run import load_run

    names_of: dict[str, list[str]] = {}
    todo, done = [], []
    for d in runs:
        try:
            key = _applicability_key(d)
            if key not in names_of:
                run = load_run(d)
                names_of[key] = timeline.applicable(run) if request["probes"] is None else list(request["probes"])
                why = {n: timeline.why_not(run, n) for n in request["probes"] or []}
            else:
                why = {}
        except UserError:
            todo.append(d)
            continue
        for n, reason in why.items():
            if reason is not None:
                raise ConfigError("--probes", f"{n!r} does not apply to {d.relative_to(base)}: {reason}")
        steps = request["steps"] or rundir.steps(d)
        (done if covered(d, names_of[key], steps, request["options"]) else todo).append(d)
    return todo, done


def _check_steps(runs: list[Path], steps: list[int], base: Path) -> None:
    for d in runs:
        have = rundir.steps(d)
        missing = [s for s in steps if s not in have]
        if missing:
            raise ConfigError("--steps", f"no checkpoint at {missing} in {d.relative_to(base)}; allowed: {have}")


def covered(run_dir: Path, names: Sequence[str], steps: Sequence[int], options: dict[str, Any]) -> bool:
    """Whether RUN_DIR/probes.json already holds `names` at `steps`, each probe that takes options with these
    (a probes.json that records none for a probe ran it with its defaults: written before it had options). The
    batch size is not recorded: a run probed with another one counts as covered."""
    from mechsynth import probes
    from mechsynth.analysis import timeline
    from mechsynth.config import to_dict

    try:
        tl = timeline.load(run_dir)
    except (FileNotFoundError, UserError):
        return False
    if not set(steps) <= set(tl.steps) or any(n not in tl.per_head for n in names):
        return False

    def stored(n: str) -> Any:
        return tl.options[n] if n in tl.options else json.loads(json.dumps(to_dict(probes.options(n))))

    asked = {n: to_dict(probes.options(n, options.get(n))) for n in names if probes.PROBES.get(n).options is not None}
    return all(json.loads(json.dumps(o)) == stored(n) for n, o in asked.items())


def forms(probe: str, formation: Optional[dict[str, Optional[int]]]) -> bool:
    """Whether `probe` says when a circuit forms: it scored heads against a finite threshold (the others,
    llc or icl_strategy, report metrics of their own)."""
    from mechsynth import probes

    return bool(formation) and probe in probes.PROBES and math.isfinite(probes.PROBES.get(probe).threshold)


def earliest(formation: dict[str, Optional[int]]) -> Optional[tuple[str, int]]:
    """(head, step) of the head that formed first (a probe's circuit forms when its first head does), or
    None when none did."""
    formed = [(s, h) for h, s in formation.items() if s is not None]
    if not formed:
        return None
    step, head = min(formed)
    return head, step


def probe_job(run_dir: str, request: dict[str, Any], threads: int = 1) -> dict[str, Any]:
    """Probe one run as `mechsynth probe RUN_DIR` does (skipped when its probes.json covers `request`). Never
    raises: returns {"status": "failed", "error", "traceback"}; else "status" (probed, skipped), "seconds"
    and "formed" ({probe: [head, step] of its earliest head, or None}) for each probe asked for."""
    import torch

    from mechsynth.analysis import timeline
    from mechsynth.runs.run import load_run

    torch.set_num_threads(max(1, threads))
    t0 = time.time()
    try:
        run = load_run(run_dir)
        if not run.steps:
            raise ConfigError("run_dir", f"{run_dir} has no checkpoint yet")
        names = request["probes"] if request["probes"] is not None else timeline.applicable(run)
        for n in request["probes"] or []:
            why = timeline.why_not(run, n)
            if why is not None:
                raise ConfigError("--probes", f"{n!r} does not apply to this run: {why}")
        steps = request["steps"] or run.steps
        missing = [s for s in steps if s not in run.steps]
        if missing:
            raise ConfigError("--steps", f"no checkpoint at {missing}; allowed: {run.steps}")
        status = "skipped"
        if covered(run.path, names, steps, request["options"]):
            tl = timeline.load(run.path)
        else:
            tl = timeline.probe_run(run, names, steps, batch_size=request["batch_size"], options=request["options"])
            try:  # probing again for some probes keeps the others'
                tl = timeline.merge(timeline.load(run.path), tl)
            except (FileNotFoundError, UserError):
                pass
            timeline.save(tl, run.path)
            _log_to_wandb(run, tl, request["wandb"])
            status = "probed"
        formed = {n: earliest(tl.formation[n]) for n in names if forms(n, tl.formation.get(n))}
    except (UserError, DivergedError) as e:  # one line says it all
        return {"status": "failed", "error": f"{type(e).__name__}: {e}", "traceback": "", "seconds": time.time() - t0}
    except Exception as e:  # noqa: BLE001 - one run's failure is reported, the others go on
        return {
            "status": "failed",
            "error": one_line(e),
            "traceback": traceback.format_exc(),
            "seconds": time.time() - t0,
        }
    return {"status": status, "seconds": time.time() - t0, "formed": formed}


def _log_to_wandb(run: Any, tl: Any, mode: Optional[str]) -> None:
    """Into the training run's W&B run, as `mechsynth probe RUN_DIR` does."""
    from dataclasses import replace

    from mechsynth.analysis import timeline
    from mechsynth.runs.wandb_log import WandbLogger, resolve_mode

    cfg = run.config.wandb if mode is None else replace(run.config.wandb, mode=mode)
    if resolve_mode(cfg) != "disabled":
        logger = WandbLogger(
            cfg,
            run.path,
            run.recorded_config(),
            run_id=run.state(run.steps[-1]).get("wandb_id"),
            yours=run.origin is not None,
        )
        timeline.log_to_wandb(tl, logger)
        logger.finish()


def _formed_text(formed: dict[str, Any]) -> str:
    return "; ".join(f"{n} {f[0]} at step {f[1]}" if f else f"{n} not reached" for n, f in formed.items())


def probe_many(
    path: Path,
    runs: list[tuple[Path, bool]],
    probe_names: Optional[str],
    steps: Optional[str],
    batch_size: int,
    sets: Sequence[str] = (),
    *,
    wandb: Optional[str] = None,
    backend: BackendName = "local",
    workers: Optional[int] = None,
    address: Optional[str] = None,
    num_cpus: Optional[float] = None,
    as_json: bool = False,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
) -> int:
    """Probe the complete ones of `runs` (from `runs_within(path)`) in parallel; exit code 1 when any failed."""
    from mechsynth.sweep import get_backend

    _check_flags(backend, workers, address, num_cpus)
    request = _request(probe_names, steps, batch_size, sets, wandb)
    complete = [d for d, done in runs if done]
    if not complete:
        raise ConfigError("run_dir", f"{path} has no complete run to probe yet ({len(runs)} not complete)")
    if request["steps"] is not None:
        _check_steps(complete, request["steps"], path)
    to_probe, done = _sort(complete, request, path)
    for d in to_probe:  # each probes.json goes into its run: refused before any probing, as for one run
        rundir.check_writable(d, "run_dir")
    todo = [(Target(str(d.relative_to(path)), request), str(d)) for d in to_probe]
    left_out = len(runs) - len(complete)
    log(
        f"probe {path}: {len(complete)} complete runs — {len(done)} probed already, {len(todo)} to probe"
        + (f"; {left_out} not complete, left out" if left_out else "")
    )
    results: dict[str, dict[str, Any]] = {}
    failures: list[dict[str, Any]] = []

    def on_result(target: Target, result: dict[str, Any]) -> None:
        results[target.dir] = result
        head = f"[{len(results)}/{len(todo)}] {target.dir}"
        if result["status"] == "failed":
            failures.append({"run": target.dir, "error": result["error"], "traceback": result.get("traceback", "")})
            log(f"{head} FAILED: {result['error']}")
            return
        when = f" in {result['seconds']:.1f} s" if result["status"] == "probed" else " (probes.json covers it)"
        log(f"{head} {result['status']}{when}: {_formed_text(result['formed']) or 'no probe scores heads'}")

    if todo:
        resources = Resources(
            workers or min(local_pool.cpu_count(), len(todo)), address, num_cpus or 1.0, 0.0
        )  # probing runs on the CPU (as for one run): no GPU asked of Ray
        get_backend(backend)(todo, on_result, resources, probe_job)
    results |= {str(d.relative_to(path)): {"status": "skipped"} for d in done}
    record_failures(
        path / FAILURES, failures, len(todo), "runs failed to probe", "run the same command again to retry them", log
    )
    if as_json:
        print(json.dumps(results))
    else:
        print(path)
        if (path / "sweep.json").is_file():
            print(f"next: mechsynth sweep-report {path}")
    return 1 if failures else 0
