"""Sweeps: a plan of runs (mechsynth/sweep/plan.py) trained into one directory, on a local process pool or Ray.

    SWEEP_DIR/sweep.json                 the expanded plan: axes, seeds, every run's full config, and the
                                         plugins they need (as a run's config.json: mechsynth/plugins.py)
    SWEEP_DIR/runs/<point>/seed_<s>/     a normal run directory (load_run and `mechsynth probe` work on it)
    SWEEP_DIR/runs/<point>/config.json   where the point's seeds trained side by side: the batched job
    SWEEP_DIR/failures.json              the jobs that failed in the last invocation, with tracebacks

Running a sweep again skips complete runs, continues the others, and starts those not begun, so a killed
sweep finishes by starting the same command again. A run directory is never deleted: one that holds
files but no readable run config is moved aside. Seeds side by side (mechsynth/sweep/units.py) change
how runs train, never which: the same runs, in the same directories, with the same configs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from mechsynth import plugins
from mechsynth.errors import ConfigError
from mechsynth.runs import io, rundir
from mechsynth.runs.runconfig import complete
from mechsynth.sweep import local_pool
from mechsynth.sweep.job import Backend, BackendName, Resources, State, record_failures, run_state
from mechsynth.sweep.plan import Axis, Job, Plan, load_sweep, plan_of_runs
from mechsynth.sweep.units import Unit, plan_units

__all__ = [
    "Axis",
    "Job",
    "Outcome",
    "Plan",
    "check_dir",
    "describe_plan",
    "load_plan",
    "load_sweep",
    "plan_of_runs",
    "prepare",
    "run_sweep",
    "state",
]


# ---- the sweep directory -----------------------------------------------------------------------


def _fixed(config: dict[str, Any]) -> dict[str, Any]:
    """The keys of a run config that a restart must not change (all but `rundir.RESUMABLE`)."""
    return {k: v for k, v in rundir.flatten(complete(config)).items() if not rundir.may_change_on_resume(k)}


def _comparable(plan_json: dict[str, Any]) -> dict[str, Any]:
    """What must match for a restart to continue the same sweep: everything but how seeds train
    (side_by_side) and the keys a resumed run may change (steps, device, W&B, ...)."""
    runs = [(r["dir"], _fixed(r["config"])) for r in plan_json["runs"]]
    return {"name": plan_json["name"], "axes": plan_json["axes"], "seeds": plan_json["seeds"], "runs": runs}


def _difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    if old["name"] != new["name"]:
        return f"its name is {old['name']!r}, this one is {new['name']!r}"
    if old["axes"] != new["axes"]:
        fmt = lambda p: "{" + ", ".join(f"{a['key']}: [{', '.join(a['labels'])}]" for a in p["axes"]) + "}"  # noqa: E731
        return f"its grid is {fmt(old)}, this one is {fmt(new)}"
    if old["seeds"] != new["seeds"]:
        return f"its seeds are {old['seeds']}, these are {new['seeds']}"
    for (d, fa), (_, fb) in zip(old["runs"], new["runs"]):
        diff = _first_change(fa, fb)
        if diff:
            return f"{d} has {diff}"
    return "its runs differ"


def _first_change(old: dict[str, Any], new: dict[str, Any]) -> Optional[str]:
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            return f"{key}={old.get(key)!r}, this one {key}={new.get(key)!r}"
    return None


def check_dir(plan: Plan, sweep_dir: Path, extend: bool = False) -> bool:
    """Raise unless `sweep_dir` is new, empty, or holds this same plan; True when it holds it. `extend`:
    the directory may hold other runs too (earlier rounds of an experiment); only runs in both must match."""
    stored = sweep_dir / "sweep.json"
    if stored.exists():
        data = io.read_json(stored)
        if extend:
            _check_runs(data, plan, sweep_dir)
            return True
        old, new = _comparable(data), _comparable(plan.to_json())
        if old != new:
            raise ConfigError(
                "--out",
                f"{sweep_dir} holds a different sweep ({_difference(old, new)}); "
                "choose another directory, or delete it to start over",
            )
        return True
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise ConfigError("--out", f"{sweep_dir} is a file; give a directory for the sweep")
    if sweep_dir.exists() and any(p.name != rundir.LOCK for p in sweep_dir.iterdir()):
        raise ConfigError("--out", f"{sweep_dir} is not empty and has no sweep.json; choose another directory")
    return False


def _check_runs(data: dict[str, Any], plan: Plan, sweep_dir: Path) -> None:
    if data["name"] != plan.name:
        raise ConfigError(
            "--out", f"{sweep_dir} holds the sweep {data['name']!r}, not {plan.name!r}; choose another directory"
        )
    stored = {r["dir"]: _fixed(r["config"]) for r in data["runs"]}
    for job in plan.jobs:
        diff = job.dir in stored and _first_change(stored[job.dir], _fixed(job.config))
        if diff:
            raise ConfigError(
                "--out",
                f"{sweep_dir / job.dir} was trained with {diff}; a run is never overwritten: "
                "choose another directory, or move that run away",
            )


def _union(data: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """The stored plan with `plan`'s runs added (or updated: resumable keys such as train.steps)."""
    new = plan.to_json()
    runs = {r["dir"]: r for r in data["runs"]}
    runs.update({r["dir"]: r for r in new["runs"]})
    axes = {a["key"]: a for a in data["axes"]}
    for a in new["axes"]:
        old = axes.setdefault(a["key"], {"key": a["key"], "labels": [], "settings": []})
        for lab, setting in zip(a["labels"], a["settings"]):
            if lab not in old["labels"]:
                old["labels"].append(lab)
                old["settings"].append(setting)
    return {
        **new,
        "axes": list(axes.values()),
        "seeds": sorted(set(data["seeds"]) | set(new["seeds"])),
        "runs": list(runs.values()),
    }


def prepare(plan: Plan, sweep_dir: Path, extend: bool = False) -> None:
    """Write sweep.json for a new sweep, or check that an existing one holds this same plan (`extend`:
    add this plan's runs to it)."""
    if not check_dir(plan, sweep_dir, extend):
        sweep_dir.mkdir(parents=True, exist_ok=True)
    path = sweep_dir / "sweep.json"
    want = _union(io.read_json(path), plan) if extend and path.exists() else plan.to_json()
    kept = io.read_json(path).get("plugins", []) if extend and path.exists() else []
    want["plugins"] = list(dict.fromkeys([*kept, *(p for j in plan.jobs for p in plugins.recorded(j.config))]))
    if not path.exists() or io.read_json(path) != want:
        io.write_json(path, want)  # new, or a resumable key changed


def load_plan(sweep_dir: Path | str) -> Plan:
    path = Path(sweep_dir) / "sweep.json"
    if not path.exists():
        raise ConfigError("sweep_dir", f"{sweep_dir} is not a sweep directory (no sweep.json)")
    return Plan.from_json(io.read_json(path))


def state(run_dir: Path, steps: Optional[int] = None) -> State:
    """'complete', 'partial' (a run of ours to continue), 'new', or 'foreign' (files but no run config:
    moved aside, never deleted, when the sweep gets to it); against `steps` when given (`run_state`)."""
    return run_state(run_dir, steps)


def _states(plan: Plan, sweep_dir: Path) -> dict[str, State]:
    return {j.dir: state(sweep_dir / j.dir, j.config["train"]["steps"]) for j in plan.jobs}


# ---- the whole sweep ---------------------------------------------------------------------------


@dataclass
class Outcome:
    counts: dict[str, int]  # runs by what happened: complete (before), done, resumed, skipped, failed
    failures: list[dict[str, Any]]  # one per failed job: run (its directory), runs (its seeds'), error, traceback


def run_sweep(
    plan: Plan,
    sweep_dir: Path | str,
    *,
    backend: BackendName = "local",
    workers: Optional[int] = None,
    address: Optional[str] = None,
    num_cpus: Optional[float] = None,
    num_gpus: Optional[float] = None,
    threads: Optional[int] = None,
    extend: bool = False,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
) -> Outcome:
    """Run every incomplete run of `plan` into `sweep_dir`; returns counts by status and failures.
    `threads`: torch CPU threads per job on the local backend (default: the CPU count / workers).
    `extend`: the directory may hold other runs of the same sweep name (see `check_dir`)."""
    sweep_dir = Path(sweep_dir).resolve()
    check_dir(plan, sweep_dir, extend)
    rundir.check_writable(sweep_dir, "--out")
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with rundir.RunLock([sweep_dir], what="sweep"):
        prepare(plan, sweep_dir, extend)
        states = _states(plan, sweep_dir)
        units = plan_units(plan, sweep_dir, resources=backend != "ray")
        # Each job carries the plugins of this process: a worker does not inherit one imported by hand here.
        todo = [
            (replace(u, config={**u.config, "plugins": plugins.recorded(u.config)}), str(sweep_dir / u.dir))
            for u in units
            if any(states[j.dir] != "complete" for j in u.jobs)
        ]
        # Longest first (by model-steps), so that the pool does not end on one long job while other workers idle.
        todo.sort(key=lambda t: -t[0].config["train"]["steps"] * t[0].config["train"].get("seeds", 1))
        n = {s: list(states.values()).count(s) for s in ("complete", "partial", "new", "foreign")}
        log(
            f"sweep {plan.name}: {len(plan.jobs)} runs — {n['complete']} complete, {n['partial']} to resume, "
            f"{n['new'] + n['foreign']} to start — in {sweep_dir}"
        )
        batched = [u for u, _ in todo if u.side_by_side]
        if batched:
            log(f"  seeds side by side: {sum(len(u.jobs) for u in batched)} runs in {len(batched)} jobs")
        counts = {"complete": n["complete"], "done": 0, "resumed": 0, "skipped": 0, "failed": 0}
        failures: list[dict[str, Any]] = []
        finished = [0]

        def on_result(unit: Unit, result: dict[str, Any]) -> None:
            finished[0] += 1
            counts[result["status"]] = counts.get(result["status"], 0) + sum(
                states[j.dir] != "complete" for j in unit.jobs
            )
            head = f"[{finished[0]}/{len(todo)}] {unit.describe()}"
            if "moved_aside" in result:
                log(f"{head}: held files but no readable run config; moved aside to {result['moved_aside']}")
            if result["status"] == "failed":
                failures.append(
                    {
                        "run": unit.dir,
                        "runs": [j.dir for j in unit.jobs],
                        "error": result["error"],
                        "traceback": result.get("traceback", ""),
                    }
                )
                log(f"{head} FAILED: {result['error']}")
                return
            log(f"{head} {result['status']} in {result['seconds']:.1f} s{_accuracies(result.get('finals', []))}")

        if todo:
            resources = Resources(
                workers or min(local_pool.cpu_count(), len(todo)),
                address,
                num_cpus or plan.num_cpus,
                num_gpus if num_gpus is not None else plan.num_gpus,
                threads,
            )
            get_backend(backend)(todo, on_result, resources)
        record_failures(
            sweep_dir / "failures.json", failures, len(todo), "jobs failed", "start the sweep again to retry them", log
        )
        return Outcome(counts, failures)


def _accuracies(finals: list[dict[str, Any]]) -> str:
    keys = [k for k in (finals[0] if finals else {}) if k.endswith("/acc")]
    return "".join(
        f"  {k}=" + "/".join(f"{f[k]:.3f}" for f in finals if isinstance(f.get(k), (int, float))) for k in keys
    )


def get_backend(name: BackendName) -> Backend:
    """The `run` function of backend `name` (importing ray only when asked for)."""
    if name == "ray":
        from mechsynth.sweep import ray_backend

        return ray_backend.run
    return local_pool.run


def describe_plan(plan: Plan, sweep_dir: Path, extend: bool = False, resources: bool = True) -> list[str]:
    """One line per run with its state, and how it will train (for --dry-run)."""
    sweep_dir = Path(sweep_dir)
    check_dir(plan, sweep_dir, extend)
    models = {j.config["train"].get("seeds", 1) for j in plan.jobs}
    each = f" of {models.pop()} models side by side each" if models != {1} and len(models) == 1 else ""
    points = plan.points()
    lines = [
        f"sweep {plan.name}: {len(plan.axes)} ax{'is' if len(plan.axes) == 1 else 'es'}, "
        f"{len(points)} points × {len(plan.seeds)} seeds = {len(plan.jobs)} runs{each} -> {sweep_dir}"
    ]
    for a in plan.axes:
        lines.append(f"  {a.key}: {', '.join(a.labels)}")
    states = _states(plan, sweep_dir)
    units = plan_units(plan, sweep_dir, resources)
    batched = [u for u in units if u.side_by_side]
    lines.append(
        f"  {len(units)} jobs: {sum(len(u.jobs) for u in batched)} runs in {len(batched)} jobs of seeds side "
        f"by side, {len(units) - len(batched)} runs on their own"
    )
    for u in units:
        for j in u.jobs:
            how = (
                f"  (side by side in {u.dir})"
                if u.side_by_side
                else (f"  (on its own: {u.separate_why})" if u.separate_why else "")
            )
            lines.append(f"  {states[j.dir]:<8} {j.dir}{how}")
    return lines
