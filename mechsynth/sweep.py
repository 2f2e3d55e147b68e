"""Sweeps: a grid of configs times seeds, expanded into ordinary run directories.

    SWEEP_DIR/sweep.json                 the expanded plan: axes, seeds, every run's full config
    SWEEP_DIR/runs/<point>/seed_<s>/     a normal run directory (load_run and `mechsynth probe` work on it)
    SWEEP_DIR/failures.json              the runs that failed in the last invocation, with tracebacks

A sweep file is a run config (or `base = "other.toml"`) plus a `[sweep]` table:

    [sweep]
    name = "parity_n"              # default: the file's name; also the W&B group of every run
    seeds = 8                      # or a list [0, 1, 5]; a seed sets train.seed and model.init_seed
    [sweep.grid]
    "task.n" = [20, 30, 40]        # an axis over one config value
    automaton = [                  # an axis whose values set several keys at once
      {label = "C2", "task.automaton" = "cyclic", "task.n" = 2},
      {label = "D8", "task.automaton" = "dihedral", "task.n" = 4},
    ]

Running a sweep again skips complete runs (`rundir.is_complete`), continues the others, and starts
those not begun, so a killed sweep finishes by starting the same command again. A run directory is never
deleted: one that holds files but no readable run config is moved aside.
"""

from __future__ import annotations

import copy
import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from mechsynth import io, local_pool, rundir
from mechsynth.config import ConfigError, apply_override, check, read_toml
from mechsynth.runconfig import SECTIONS, parse_config
from mechsynth.sweep_job import Backend, Resources
from mechsynth.wandb_log import resolve_mode

SWEEP_KEYS = ("name", "seeds", "grid", "num_cpus", "num_gpus")
# Seeds are the sweep's own axis; a grid over them would collide with `seeds`.
SEED_KEYS = ("train.seed", "model.init_seed")


@dataclass(frozen=True)
class Axis:
    """One grid axis: `key` is a dotted config key ("task.n") or the name of a multi-key axis."""

    key: str
    labels: tuple[str, ...]                   # each value's name in directories and reports
    settings: tuple[dict[str, Any], ...]      # each value as {dotted key: value}

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "labels": list(self.labels), "settings": list(self.settings)}


@dataclass(frozen=True)
class Job:
    """One run of the sweep: a grid point and a seed."""

    point: str
    seed: int
    labels: dict[str, str]     # axis key -> label of this point's value
    config: dict[str, Any]     # the complete, validated run config

    @property
    def dir(self) -> str:
        """Relative to the sweep directory."""
        return f"runs/{self.point}/seed_{self.seed}"

    def to_json(self) -> dict[str, Any]:
        return {"point": self.point, "seed": self.seed, "dir": self.dir, "labels": self.labels, "config": self.config}


@dataclass(frozen=True)
class Plan:
    name: str
    axes: tuple[Axis, ...]
    seeds: tuple[int, ...]
    jobs: tuple[Job, ...]
    num_cpus: float = 1.0
    num_gpus: Optional[float] = None   # None: 1 for runs that need CUDA, else 0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "axes": [a.to_json() for a in self.axes], "seeds": list(self.seeds),
                "num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "runs": [j.to_json() for j in self.jobs]}

    @staticmethod
    def from_json(data: dict[str, Any]) -> "Plan":
        axes = tuple(Axis(a["key"], tuple(a["labels"]), tuple(a["settings"])) for a in data["axes"])
        jobs = tuple(Job(r["point"], r["seed"], r["labels"], r["config"]) for r in data["runs"])
        return Plan(data["name"], axes, tuple(data["seeds"]), jobs, data.get("num_cpus", 1.0), data.get("num_gpus"))


# ---------------------------------------------------------------------------------------------
# Reading and expanding a sweep file


def _read_with_base(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The TOML at `path`, on top of the file its `base` names (relative to it), recursively."""
    data = read_toml(path)
    base = data.pop("base", None)
    if base is None:
        return data
    check(isinstance(base, str), "base", f"must be a path to a TOML file, got {base!r}")
    base_path = (path.parent / base).resolve()
    check(base_path not in seen + (path.resolve(),), "base", f"{base!r} includes itself")
    return _merge(_read_with_base(base_path, seen + (path.resolve(),)), data)


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    section, key = dotted.split(".", 1)
    config.setdefault(section, {})[key] = copy.deepcopy(value)


def _label(value: Any) -> str:
    if isinstance(value, float):
        return repr(value).replace("e-0", "e-").replace("e+0", "e")
    if isinstance(value, (list, tuple)):
        return "-".join(_label(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _check_key(dotted: str, field: str) -> None:
    check(dotted.count(".") == 1 and dotted.split(".")[0] in SECTIONS, field,
          f"{dotted!r} must be section.key with section one of {', '.join(SECTIONS)}")
    check(dotted not in SEED_KEYS, field, f"{dotted!r} is set by the seed; give seeds with sweep.seeds")


def _parse_axis(key: str, values: Any) -> Axis:
    field = f"sweep.grid.{key}"
    check(isinstance(values, list) and len(values) > 0, field, f"must be a non-empty list of values, got {values!r}")
    if all(isinstance(v, dict) for v in values):
        labels, settings = [], []
        for i, table in enumerate(values):
            flat = rundir.flatten(table)
            label = flat.pop("label", None)
            check(len(flat) > 0, f"{field}[{i}]", "sets no config key")
            for dotted in flat:
                _check_key(dotted, f"{field}[{i}].{dotted}")
            labels.append(str(label) if label is not None else "-".join(_label(v) for v in flat.values()))
            settings.append(flat)
        return Axis(key, tuple(labels), tuple(settings))
    check(not any(isinstance(v, dict) for v in values), field, "mixes tables and plain values; use one kind")
    _check_key(key, field)
    return Axis(key, tuple(_label(v) for v in values), tuple({key: v} for v in values))


def _short_names(axes: list[Axis]) -> list[str]:
    """Axis names in point names: the key's last part ("n_layers"), unless two axes share it."""
    last = [a.key.split(".")[-1] for a in axes]
    return [s if last.count(s) == 1 else a.key for s, a in zip(last, axes)]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", name)


def load_sweep(path: str | Path, overrides: tuple[str, ...] = (), wandb_mode: Optional[str] = None,
               resources: bool = True) -> Plan:
    """Read a sweep file and expand it into validated runs; any bad field raises ConfigError before work.
    `resources`: also check that this machine has each run's device and memory (see `parse_config`)."""
    path = Path(path)
    data = _read_with_base(path)
    for o in overrides:
        apply_override(data, o)
    sweep = data.pop("sweep", None)
    check(isinstance(sweep, dict), "sweep", "missing: a sweep file needs a [sweep] table (seeds, [sweep.grid])")
    for key in sweep:
        check(key in SWEEP_KEYS, f"sweep.{key}", f"unknown key; allowed: {', '.join(SWEEP_KEYS)}")
    if wandb_mode:
        apply_override(data, f'wandb.mode="{wandb_mode}"')

    name = sweep.get("name", path.stem)
    check(isinstance(name, str) and name != "" and _safe(name) == name, "sweep.name",
          f"must be a non-empty name of letters, digits and ._=,+-, got {name!r}")
    seeds = sweep.get("seeds", 1)
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        check(seeds >= 1, "sweep.seeds", f"must be ≥ 1 or a list of seeds, got {seeds}")
        seeds = list(range(seeds))
    check(isinstance(seeds, list) and len(seeds) > 0
          and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
          and len(set(seeds)) == len(seeds), "sweep.seeds", f"must be a count ≥ 1 or a list of distinct integers ≥ 0, got {seeds!r}")
    num_cpus = sweep.get("num_cpus", 1.0)
    check(isinstance(num_cpus, (int, float)) and not isinstance(num_cpus, bool) and num_cpus > 0, "sweep.num_cpus",
          f"must be a number > 0, got {num_cpus!r}")
    num_gpus = sweep.get("num_gpus")
    check(num_gpus is None or (isinstance(num_gpus, (int, float)) and not isinstance(num_gpus, bool) and num_gpus >= 0),
          "sweep.num_gpus", f"must be a number ≥ 0, got {num_gpus!r}")
    grid = sweep.get("grid", {})
    check(isinstance(grid, dict), "sweep.grid", f"must be a table of axis = [values], got {grid!r}")
    # A quoted key "task.n" stays one key; a bare task.n becomes a nested table: accept both.
    grid = {k: v for k, v in _flatten_axes(grid)}
    axes = [_parse_axis(k, v) for k, v in grid.items()]
    short = _short_names(axes)

    wandb = data.setdefault("wandb", {})
    check(isinstance(wandb, dict), "wandb", "must be a table")
    wandb.setdefault("group", name)  # every run of a sweep lands in one W&B group
    jobs, points = [], set()
    for combo in itertools.product(*(range(len(a.labels)) for a in axes)):
        point = _safe(",".join(f"{s}={a.labels[i]}" for s, a, i in zip(short, axes, combo))) or "base"
        check(point not in points, "sweep.grid", f"two grid points share the name {point!r}; give distinct labels")
        points.add(point)
        for seed in seeds:
            config = copy.deepcopy(data)
            for a, i in zip(axes, combo):
                for dotted, value in a.settings[i].items():
                    _set(config, dotted, value)
            _set(config, "train.seed", seed)
            _set(config, "model.init_seed", seed)
            config["wandb"].setdefault("name", f"{name}/{point}/seed_{seed}")
            try:
                cfg = parse_config(config, resources=resources)
                resolve_mode(cfg.wandb)
            except ConfigError as e:
                raise ConfigError(e.field, f"{str(e).split(': ', 1)[1]} (sweep point {point}, seed {seed})") from None
            jobs.append(Job(point, seed, {a.key: a.labels[i] for a, i in zip(axes, combo)}, cfg.to_dict()))
    return Plan(name, tuple(axes), tuple(seeds), tuple(jobs), float(num_cpus),
                None if num_gpus is None else float(num_gpus))


def _flatten_axes(grid: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for k, v in grid.items():
        if isinstance(v, dict) and k in SECTIONS and not prefix:
            yield from _flatten_axes(v, f"{k}.")
        else:
            yield f"{prefix}{k}", v


# ---------------------------------------------------------------------------------------------
# The sweep directory


def _comparable(plan_json: dict[str, Any]) -> dict[str, Any]:
    """What must match for a restart to continue the same sweep: everything but the keys a resumed run
    may change (`rundir.RESUMABLE`: steps, device, W&B, ...)."""
    runs = [(r["dir"], {k: v for k, v in rundir.flatten(r["config"]).items() if not rundir.may_change_on_resume(k)})
            for r in plan_json["runs"]]
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
        for key in sorted(set(fa) | set(fb)):
            if fa.get(key) != fb.get(key):
                return f"{d} has {key}={fa.get(key)!r}, this one {key}={fb.get(key)!r}"
    return "its runs differ"


def check_dir(plan: Plan, sweep_dir: Path) -> bool:
    """Raise unless `sweep_dir` is new, empty, or holds this same plan; True when it holds it."""
    stored = sweep_dir / "sweep.json"
    if stored.exists():
        old, new = _comparable(io.read_json(stored)), _comparable(plan.to_json())
        if old != new:
            raise ConfigError("--out", f"{sweep_dir} holds a different sweep ({_difference(old, new)}); "
                                       "choose another directory, or delete it to start over")
        return True
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise ConfigError("--out", f"{sweep_dir} is a file; give a directory for the sweep")
    if sweep_dir.exists() and any(p.name != rundir.LOCK for p in sweep_dir.iterdir()):
        raise ConfigError("--out", f"{sweep_dir} is not empty and has no sweep.json; choose another directory")
    return False


def prepare(plan: Plan, sweep_dir: Path) -> None:
    """Write sweep.json for a new sweep, or check that an existing one holds this same plan."""
    if not check_dir(plan, sweep_dir):
        sweep_dir.mkdir(parents=True, exist_ok=True)
    if not (sweep_dir / "sweep.json").exists() or io.read_json(sweep_dir / "sweep.json") != plan.to_json():
        io.write_json(sweep_dir / "sweep.json", plan.to_json())  # new, or a resumable key changed


def load_plan(sweep_dir: Path | str) -> Plan:
    path = Path(sweep_dir) / "sweep.json"
    if not path.exists():
        raise ConfigError("sweep_dir", f"{sweep_dir} is not a sweep directory (no sweep.json)")
    return Plan.from_json(io.read_json(path))


def state(run_dir: Path) -> str:
    """'complete', 'partial' (a run of ours to continue), 'new', or 'foreign' (files but no run config:
    moved aside, never deleted, when the sweep gets to it)."""
    return rundir.status(run_dir)


# ---------------------------------------------------------------------------------------------
# The whole sweep


@dataclass
class Outcome:
    counts: dict[str, int]
    failures: list[dict[str, Any]]


def run_sweep(plan: Plan, sweep_dir: Path | str, *, backend: str = "local", workers: Optional[int] = None,
              address: Optional[str] = None, num_cpus: Optional[float] = None, num_gpus: Optional[float] = None,
              log: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> Outcome:
    """Run every incomplete run of `plan` into `sweep_dir`; returns counts by status and failures."""
    sweep_dir = Path(sweep_dir).resolve()
    check_dir(plan, sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with rundir.RunLock([sweep_dir], what="sweep"):
        prepare(plan, sweep_dir)
        states = [state(sweep_dir / j.dir) for j in plan.jobs]
        todo = [(j, str(sweep_dir / j.dir)) for j, s in zip(plan.jobs, states) if s != "complete"]
        n = {s: states.count(s) for s in ("complete", "partial", "new", "foreign")}
        log(f"sweep {plan.name}: {len(plan.jobs)} runs — {n['complete']} complete, {n['partial']} to resume, "
            f"{n['new'] + n['foreign']} to start — in {sweep_dir}")
        counts = {"complete": n["complete"], "done": 0, "resumed": 0, "skipped": 0, "failed": 0}
        failures: list[dict[str, Any]] = []
        finished = [0]

        def on_result(job: Job, result: dict[str, Any]) -> None:
            finished[0] += 1
            counts[result["status"]] = counts.get(result["status"], 0) + 1
            head = f"[{finished[0]}/{len(todo)}] {job.dir}"
            if "moved_aside" in result:
                log(f"{head}: held files but no readable run config; moved aside to {result['moved_aside']}")
            if result["status"] == "failed":
                failures.append({"run": job.dir, "error": result["error"], "traceback": result.get("traceback", "")})
                log(f"{head} FAILED: {result['error']}")
                return
            acc = {k: v for k, v in result.get("final", {}).items() if k.endswith("/acc")}
            log(f"{head} {result['status']} in {result['seconds']:.1f} s"
                + "".join(f"  {k}={v:.3f}" for k, v in acc.items()))

        if todo:
            resources = Resources(workers or min(local_pool.cpu_count(), len(todo)), address, num_cpus or plan.num_cpus,
                                  num_gpus if num_gpus is not None else plan.num_gpus)
            _backend(backend)(todo, on_result, resources)
        failed_path = sweep_dir / "failures.json"
        if failures:
            io.write_json(failed_path, failures)
            log(f"{len(failures)} of {len(todo)} runs failed (tracebacks in {failed_path}); "
                "start the sweep again to retry them")
        elif failed_path.exists():
            failed_path.unlink()
        return Outcome(counts, failures)


def _backend(name: str) -> Backend:
    if name == "ray":
        from mechsynth import ray_backend

        return ray_backend.run
    return local_pool.run


def describe_plan(plan: Plan, sweep_dir: Path) -> list[str]:
    """One line per run with its state (for --dry-run)."""
    check_dir(plan, sweep_dir)
    lines = [f"sweep {plan.name}: {len(plan.axes)} ax{'is' if len(plan.axes) == 1 else 'es'}, "
             f"{len(plan.jobs) // len(plan.seeds)} points × "
             f"{len(plan.seeds)} seeds = {len(plan.jobs)} runs -> {sweep_dir}"]
    for a in plan.axes:
        lines.append(f"  {a.key}: {', '.join(a.labels)}")
    for j in plan.jobs:
        lines.append(f"  {state(sweep_dir / j.dir):<8} {j.dir}")
    return lines

