"""A sweep's plan: its runs, each a grid point and a seed with a complete, validated run config.

A plan comes from a sweep file (`load_sweep`: a run config, or `base = "other.toml"`, plus a
`[sweep]` table) or from Python (`plan_of_runs`: explicit configs, for scripts whose runs are not a
grid, such as the rounds of an adaptive search):

    [sweep]
    name = "parity_n"              # default: the file's name; also the W&B group of every run
    seeds = 8                      # or a list [0, 1, 5]; a seed sets train.seed and model.init_seed
    seed_keys = ["task.seed"]      # more keys the seed sets (here each seed draws its own task)
    side_by_side = true            # a point's seeds 0..S-1 train as one batched job where allowed
    [sweep.grid]
    "task.n" = [20, 30, 40]        # an axis over one config value
    automaton = [                  # an axis whose values set several keys at once
      {label = "C2", "task.automaton" = "cyclic", "task.n" = 2},
      {label = "D8", "task.automaton" = "dihedral", "task.n" = 4},
    ]

Every run is validated here, before any work; a bad value names its field and grid point.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from mechsynth.config import apply_override, check, key_path, parse_value, read_toml, show
from mechsynth.errors import ConfigError
from mechsynth.runs import rundir
from mechsynth.runs.runconfig import SECTIONS, parse_config
from mechsynth.runs.wandb_log import resolve_mode

SWEEP_KEYS = ("name", "seeds", "seed_keys", "side_by_side", "grid", "num_cpus", "num_gpus")
# Seeds are the sweep's own axis; a grid over them would collide with `seeds`.
SEED_KEYS = ("train.seed", "model.init_seed")


@dataclass(frozen=True)
class Axis:
    """One grid axis: `key` is a dotted config key ("task.n") or the name of a multi-key axis."""

    key: str
    labels: tuple[str, ...]  # each value's name in directories and reports
    settings: tuple[dict[str, Any], ...]  # each value as {dotted key: value} ({} in explicit plans)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "labels": list(self.labels), "settings": list(self.settings)}


@dataclass(frozen=True)
class Job:
    """One run of the sweep: a grid point and a seed."""

    point: str
    seed: int
    labels: dict[str, str]  # axis key -> label of this point's value
    config: dict[str, Any]  # the complete, validated run config

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
    num_gpus: Optional[float] = None  # None: 1 for runs that need CUDA, else 0
    side_by_side: bool = True  # how seeds are trained, not what: not part of a sweep's identity
    seed_keys: tuple[str, ...] = field(default=())  # set by the seed besides SEED_KEYS

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "axes": [a.to_json() for a in self.axes],
            "seeds": list(self.seeds),
            "seed_keys": list(self.seed_keys),
            "side_by_side": self.side_by_side,
            "num_cpus": self.num_cpus,
            "num_gpus": self.num_gpus,
            "runs": [j.to_json() for j in self.jobs],
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> "Plan":
        axes = tuple(Axis(a["key"], tuple(a["labels"]), tuple(a["settings"])) for a in data["axes"])
        jobs = tuple(Job(r["point"], r["seed"], r["labels"], r["config"]) for r in data["runs"])
        # (sweep.json files written before side by side existed have neither key)
        return Plan(
            data["name"],
            axes,
            tuple(data["seeds"]),
            jobs,
            data.get("num_cpus", 1.0),
            data.get("num_gpus"),
            data.get("side_by_side", False),
            tuple(data.get("seed_keys", ())),
        )

    def points(self) -> list[str]:
        return list(dict.fromkeys(j.point for j in self.jobs))


# ---- reading a sweep file ----------------------------------------------------------------------


def read_with_base(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The TOML at `path`, on top of the file its `base` names (relative to it), recursively."""
    data = read_toml(path)
    base = data.pop("base", None)
    if base is None:
        return data
    check(isinstance(base, str), "base", f"must be a path to a TOML file, got {base!r}")
    base_path = (path.parent / base).resolve()
    check(base_path not in seen + (path.resolve(),), "base", f"{base!r} includes itself")
    return _merge(read_with_base(base_path, seen + (path.resolve(),)), data)


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    """config[section][key] = value; a longer key reaches into a table the section holds ("model.base.n_layers":
    the linearized kind's base)."""
    *tables, key = dotted.split(".")
    node = config
    for i, part in enumerate(tables):
        node = node.setdefault(part, {})
        check(
            isinstance(node, dict),
            ".".join(tables[: i + 1]),
            f"is {show(node)}, not a table, so {dotted!r} cannot go into it; allowed: a table",
        )
    node[key] = copy.deepcopy(value)


def label(value: Any) -> str:
    """A config value as it appears in point names ("lr=1e-3", "n_layers=2")."""
    if isinstance(value, float):
        return repr(value).replace("e-0", "e-").replace("e+0", "e")
    if isinstance(value, (list, tuple)):
        return "-".join(label(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _check_key(dotted: str, field: str, seed_keys: Sequence[str] = ()) -> None:
    parts = dotted.split(".")
    check(
        len(parts) >= 2 and parts[0] in SECTIONS and all(parts),
        field,
        f"{dotted!r} must be section.key (or section.table.key, into a table such as model.base) with section one "
        f"of {', '.join(SECTIONS)}",
    )
    check(dotted not in (*SEED_KEYS, *seed_keys), field, f"{dotted!r} is set by the seed; give seeds with sweep.seeds")


def _parse_axis(key: str, values: Any, seed_keys: Sequence[str]) -> Axis:
    field = f"sweep.grid.{key}"
    check(isinstance(values, list) and len(values) > 0, field, f"must be a non-empty list of values, got {values!r}")
    if all(isinstance(v, dict) for v in values):
        labels, settings = [], []
        for i, table in enumerate(values):
            flat = rundir.flatten(table)
            name = flat.pop("label", None)
            check(len(flat) > 0, f"{field}[{i}]", "sets no config key")
            for dotted in flat:
                _check_key(dotted, f"{field}[{i}].{dotted}", seed_keys)
            labels.append(str(name) if name is not None else "-".join(label(v) for v in flat.values()))
            settings.append(flat)
        return Axis(key, tuple(labels), tuple(settings))
    check(not any(isinstance(v, dict) for v in values), field, "mixes tables and plain values; use one kind")
    _check_key(key, field, seed_keys)
    return Axis(key, tuple(label(v) for v in values), tuple({key: v} for v in values))


def _short_names(axes: list[Axis]) -> list[str]:
    """Axis names in point names: the key's last part ("n_layers"), unless two axes share it."""
    last = [a.key.split(".")[-1] for a in axes]
    return [s if last.count(s) == 1 else a.key for s, a in zip(last, axes)]


def safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", name)


def _flatten_axes(grid: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    # A quoted key "task.n" stays one key; a bare task.n becomes a nested table: accept both (and bare
    # model.base.n_layers, tables within a section: an axis's values are a list, never a table).
    for k, v in grid.items():
        if isinstance(v, dict) and (prefix or k in SECTIONS):
            yield from _flatten_axes(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _axes_of(grid: dict[str, Any]) -> dict[str, Any]:
    """The grid as {axis key: values}, in file order; one axis spelt both ways ("task.n" and task.n) is refused."""
    out: dict[str, Any] = {}
    for key, values in _flatten_axes(grid):
        check(
            key not in out,
            f"sweep.grid.{key}",
            'is given twice (quoted "task.n" and bare task.n are one axis); give it once',
        )
        out[key] = values
    return out


def _override(data: dict[str, Any], assignment: str) -> None:
    """`--set` on the sweep file's data. Under sweep.grid a dotted key names one axis, spelt either way the
    file may spell it (sweep.grid.task.n or sweep.grid."task.n"), and replaces that axis rather than adding
    a second one beside it."""
    parts = key_path(assignment.split("=", 1)[0].strip()) if "=" in assignment else []
    if len(parts) < 3 or parts[:2] != ["sweep", "grid"]:
        apply_override(data, assignment)
        return
    axis = ".".join(parts[2:])
    value = parse_value(assignment.split("=", 1)[1], f"sweep.grid.{axis}")
    sweep = data.setdefault("sweep", {})
    check(isinstance(sweep, dict), "sweep", f"must be a table, got {show(sweep)}")
    grid = sweep.get("grid", {})
    check(isinstance(grid, dict), "sweep.grid", f"must be a table of axis = [values], got {show(grid)}")
    # (an axis already there keeps its place; sweep.grid.task={n=[10, 20]} is the axis task.n too)
    sweep["grid"] = {**_axes_of(grid), **dict(_flatten_axes({axis: value}))}


def _number(sweep: dict[str, Any], key: str, default: Any, lo_ok) -> Any:
    v = sweep.get(key, default)
    check(
        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and lo_ok(v)),
        f"sweep.{key}",
        f"must be a number {'> 0' if key == 'num_cpus' else '≥ 0'}, got {v!r}",
    )
    return None if v is None else float(v)


def _seeds(value: Any) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        check(value >= 1, "sweep.seeds", f"must be ≥ 1 or a list of seeds, got {value}")
        value = list(range(value))
    check(
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
        and len(set(value)) == len(value),
        "sweep.seeds",
        f"must be a count ≥ 1 or a list of distinct integers ≥ 0, got {value!r}",
    )
    return value


def _seed_keys(value: Any) -> tuple[str, ...]:
    check(
        isinstance(value, list) and all(isinstance(k, str) for k in value),
        "sweep.seed_keys",
        f'must be a list of config keys such as "task.seed", got {value!r}',
    )
    for k in value:
        _check_key(k, "sweep.seed_keys")
    return tuple(dict.fromkeys(value))


def load_sweep(
    path: str | Path, overrides: tuple[str, ...] = (), wandb_mode: Optional[str] = None, resources: bool = True
) -> Plan:
    """Read a sweep file and expand it into validated runs; any bad field raises ConfigError before work.
    `resources`: also check that this machine has each run's device and memory (see `parse_config`)."""
    path = Path(path)
    data = read_with_base(path)
    for o in overrides:
        _override(data, o)
    sweep = data.pop("sweep", None)
    check(isinstance(sweep, dict), "sweep", "missing: a sweep file needs a [sweep] table (seeds, [sweep.grid])")
    for key in sweep:
        check(key in SWEEP_KEYS, f"sweep.{key}", f"unknown key; allowed: {', '.join(SWEEP_KEYS)}")
    name = sweep.get("name", path.stem)
    check(
        isinstance(name, str) and name != "" and safe(name) == name,
        "sweep.name",
        f"must be a non-empty name of letters, digits and ._=,+-, got {name!r}",
    )
    seeds = _seeds(sweep.get("seeds", 1))
    seed_keys = _seed_keys(sweep.get("seed_keys", []))
    side_by_side = sweep.get("side_by_side", True)
    check(isinstance(side_by_side, bool), "sweep.side_by_side", f"must be true or false, got {side_by_side!r}")
    num_cpus = _number(sweep, "num_cpus", 1.0, lambda v: v > 0)
    num_gpus = _number(sweep, "num_gpus", None, lambda v: v >= 0)
    grid = sweep.get("grid", {})
    check(isinstance(grid, dict), "sweep.grid", f"must be a table of axis = [values], got {grid!r}")
    axes = [_parse_axis(k, v, seed_keys) for k, v in _axes_of(grid).items()]
    short = _short_names(axes)

    jobs, points = [], set()
    for combo in itertools.product(*(range(len(a.labels)) for a in axes)):
        point = safe(",".join(f"{s}={a.labels[i]}" for s, a, i in zip(short, axes, combo))) or "base"
        check(point not in points, "sweep.grid", f"two grid points share the name {point!r}; give distinct labels")
        points.add(point)
        config = copy.deepcopy(data)
        for a, i in zip(axes, combo):
            for dotted, value in a.settings[i].items():
                _set(config, dotted, value)
        labels = {a.key: a.labels[i] for a, i in zip(axes, combo)}
        jobs += [make_job(name, point, labels, seed, config, seed_keys, wandb_mode, resources) for seed in seeds]
    return Plan(name, tuple(axes), tuple(seeds), tuple(jobs), num_cpus, num_gpus, side_by_side, seed_keys)


# ---- plans built in Python ---------------------------------------------------------------------


def plan_of_runs(
    name: str,
    runs: Sequence[tuple[Mapping[str, Any], int, Mapping[str, Any]]],
    *,
    seed_keys: Sequence[str] = (),
    side_by_side: bool = True,
    wandb_mode: Optional[str] = None,
    resources: bool = True,
) -> Plan:
    """A plan of explicit runs, each (labels, seed, config): `labels` names its point ({"T": 16, "n": 45}
    -> runs/T=16,n=45/seed_<seed>), the seed sets train.seed, model.init_seed and `seed_keys` in
    `config` (a run config as TOML tables). For runs that are not one grid: the rounds of an adaptive
    search, or points whose settings differ by seed."""
    check(
        safe(name) == name and name != "",
        "sweep.name",
        f"must be a non-empty name of letters, digits and ._=,+-, got {name!r}",
    )
    keys = tuple(dict.fromkeys(_seed_keys(list(seed_keys))))
    axes: dict[str, list[str]] = {}
    jobs, seen = [], set()
    for labels, seed, config in runs:
        _seeds([seed])
        shown = {str(k): label(v) for k, v in labels.items()}
        for k, v in shown.items():
            axes.setdefault(k, [])
            if v not in axes[k]:
                axes[k].append(v)
        point = safe(",".join(f"{k}={v}" for k, v in shown.items())) or "base"
        check((point, seed) not in seen, "runs", f"run {point!r}, seed {seed} is given twice")
        seen.add((point, seed))
        jobs.append(make_job(name, point, shown, seed, copy.deepcopy(dict(config)), keys, wandb_mode, resources))
    check(len(jobs) > 0, "runs", "no runs given")
    seeds = tuple(sorted({j.seed for j in jobs}))
    return Plan(
        name,
        tuple(Axis(k, tuple(v), tuple({} for _ in v)) for k, v in axes.items()),
        seeds,
        tuple(jobs),
        side_by_side=side_by_side,
        seed_keys=keys,
    )


def make_job(
    name: str,
    point: str,
    labels: dict[str, str],
    seed: int,
    config: dict[str, Any],
    seed_keys: Sequence[str],
    wandb_mode: Optional[str],
    resources: bool,
) -> Job:
    """One validated run: `config` with the seed set and W&B named; an error names the point and seed."""
    config = copy.deepcopy(config)
    if wandb_mode:
        apply_override(config, f'wandb.mode="{wandb_mode}"')
    wandb = config.setdefault("wandb", {})
    check(isinstance(wandb, dict), "wandb", "must be a table")
    wandb.setdefault("group", name)  # every run of a sweep lands in one W&B group
    # `<base>-seed_<s>`: the name seeds side by side give each seed (mechsynth.runs.runner.seed_config), so a
    # seed's config is the same whichever way it trained.
    wandb["name"] = f"{wandb.get('name') or f'{name}/{point}'}-seed_{seed}"
    for dotted in (*SEED_KEYS, *seed_keys):
        _set(config, dotted, seed)
    try:
        cfg = parse_config(config, resources=resources)
        resolve_mode(cfg.wandb)
    except ConfigError as e:
        raise ConfigError(e.field, f"{str(e).split(': ', 1)[1]} (sweep point {point}, seed {seed})") from None
    return Job(point, seed, labels, cfg.to_dict())
