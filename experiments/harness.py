"""What the reproduction scripts in experiments/ share: one command line, training through the sweep
machinery (runs already on disk are reused or continued), a results JSON that says how it was made, and
small statistics.

A script's runs are a sweep file beside it: experiments/<name>.toml is the CPU size, <name>_smoke.toml
and <name>_full.toml (`base = "<name>.toml"`) the others. `Session.sweep()` trains it into --runs
(seeds side by side where the configs allow; mechsynth/sweep/units.py) and returns the runs to analyse:

    @harness.experiment(NAME, __doc__)                  # main(argv) -> int: parses argv, opens the Session
    def main(session: harness.Session, args: harness.Args) -> int:
        runs = session.sweep()                          # experiments/NAME[_size].toml -> args.runs
        for job in runs.jobs(condition="k3"):           # a grid axis by its key or the key's last part
            run = runs.load(job)                        # load_run(args.runs / "runs/condition=k3/seed_0")

Runs that are not one grid (adaptive searches) are given in Python, a round at a time: each call trains
the runs it names (a sweep of explicit configs) into the same directory and returns them; a run already
there is reused, or continued when asked for more steps; a different config for it is an error.

    runs = session.train_runs([({"T": 16, "n": 45}, seed, config) for seed in seeds], seed_keys=("task.seed",))
    run = runs.run(0, T=16, n=45)                       # load_run(args.runs / "runs/T=16,n=45/seed_0")
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import torch

from experiments import verdicts
from mechsynth.errors import ConfigError, UserError
from mechsynth.runs import io, rundir
from mechsynth.runs.run import Run, load_run
from mechsynth.runs.wandb_log import MODES
from mechsynth.sweep import Job, Plan, load_sweep, plan_of_runs, run_sweep
from mechsynth.sweep.job import BACKENDS
from mechsynth.sweep.plan import label

SIZES = ("smoke", "cpu", "full")
EXPERIMENTS = Path(__file__).resolve().parent
EXAMPLES = EXPERIMENTS.parent / "examples"  # the ready task configs some experiments start from
# (labels, seed, config): one run of `Session.train_runs`; labels name its point ({"T": 16, "n": 45})
RunSpec = tuple[Mapping[str, Any], int, Mapping[str, Any]]
Args = argparse.Namespace  # an experiment's command line, as `parse_args` reads it


def parse_args(name: str, doc: str, argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=f"python -m experiments.{name}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--full",
        action="store_const",
        dest="size",
        const="full",
        help="the paper-size configuration (hours on a CPU; see the experiment's docs page)",
    )
    size.add_argument(
        "--smoke",
        action="store_const",
        dest="size",
        const="smoke",
        help="a tiny configuration that only checks the pipeline (seconds)",
    )
    p.add_argument(
        "--out", default=None, help="where the results JSON and figures go (default: assets; for --smoke, RUNS/assets)"
    )
    p.add_argument("--runs", default=None, help=f"the sweep directory the runs go to (default: runs/{name}-<size>)")
    p.add_argument(
        "--wandb",
        choices=MODES,
        default="disabled",
        help="W&B mode of the training runs (default: disabled; offline writes a W&B run per training run)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads of each training job and of the analysis (default 1: these models are so "
        "small that more threads mostly wait on each other)",
    )
    p.add_argument("--device", default="cpu", help="training device: cpu, cuda, auto (default: cpu)")
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="local",
        help="where the runs train: a local process pool (default) or Ray (see `mechsynth sweep`)",
    )
    p.add_argument("--workers", type=int, default=None, help="local backend: jobs at a time (default: the CPU count)")
    p.add_argument("--address", default=None, help="ray backend: an existing cluster (default: a local Ray instance)")
    args = p.parse_args(argv)
    args.size = args.size or "cpu"
    args.runs = Path(args.runs or f"runs/{name}-{args.size}")
    # A smoke run never overwrites the real results in assets/.
    args.out = Path(args.out or (args.runs / "assets" if args.size == "smoke" else "assets"))
    if args.threads < 1:
        p.error("--threads: must be ≥ 1")
    if args.workers is not None and (args.workers < 1 or args.backend == "ray"):
        p.error("--workers: must be ≥ 1, and is for the local backend")
    if args.address and args.backend != "ray":
        p.error("--address: needs --backend ray")
    return args


class Runs:
    """The runs of one sweep (or round) in the sweep directory `dir`, to load for analysis."""

    # (a plain class: the tests load this file without registering it as a module, which dataclasses need)
    def __init__(self, dir: Path, plan: Plan, diverged: Sequence[str] = ()):
        self.dir, self.plan = dir, plan
        self.diverged = set(diverged)  # the job directories whose loss stopped being finite (`diverged_ok`)

    def jobs(self, **labels: Any) -> list[Job]:
        """The runs whose grid labels match, in plan order (points, then seeds); an axis is named by its key
        or the key's last part (`n_layers=2` for "model.n_layers")."""
        keys = {a.key for a in self.plan.axes}
        want = {}
        for name, value in labels.items():
            key = [k for k in keys if k == name] or [k for k in keys if k.split(".")[-1] == name]
            if len(key) != 1:
                raise ConfigError(name, f"is not an axis of {self.plan.name}; allowed: {', '.join(sorted(keys))}")
            want[key[0]] = label(value)
        return [j for j in self.plan.jobs if all(j.labels.get(k) == v for k, v in want.items())]

    def load(self, job: Job) -> Run:
        return load_run(self.dir / job.dir)

    def run(self, seed: int, **labels: Any) -> Run:
        """The run of one point and seed."""
        found = [j for j in self.jobs(**labels) if j.seed == seed]
        if len(found) != 1:
            raise ConfigError("labels", f"{labels}, seed {seed} names {len(found)} runs of {self.plan.name}, not one")
        return self.load(found[0])

    def all(self) -> list[Run]:
        return [self.load(j) for j in self.plan.jobs]

    def finished(self, seed: int, **labels: Any) -> bool:
        """Whether the run of this point and seed trained all its steps (False: it diverged, and its checkpoints
        stop at the last finite one)."""
        return not any(j.dir in self.diverged for j in self.jobs(**labels) if j.seed == seed)


class Planned(Exception):
    """What a script's first round of runs would be, raised in place of training it while `PLAN_ONLY` is set
    (experiments/full_cost.py)."""

    def __init__(self, plan: Plan):
        super().__init__(plan.name)
        self.plan = plan


PLAN_ONLY = False


class Session:
    """One invocation of an experiment: sets threads, trains runs, times the whole, writes the JSON."""

    def __init__(self, name: str, args: argparse.Namespace):
        self.name, self.args = name, args
        torch.set_num_threads(args.threads)
        import matplotlib

        matplotlib.use("Agg")  # figures go to files; no display needed
        self.t0, self.started = time.perf_counter(), time.time()
        self.trained, self.reused = 0, 0  # training jobs over every round (a run continued twice counts twice)
        self.used: list[Runs] = []

    @property
    def _resources(self) -> bool:
        """Whether planned runs are checked against this machine's devices and memory: not where Ray places them,
        nor while only planning them (PLAN_ONLY: their cost is measured, and a run too large here is reported)."""
        return self.args.backend != "ray" and not PLAN_ONLY

    def sweep_file(self) -> Path:
        """experiments/<name>.toml at the CPU size, experiments/<name>_<size>.toml otherwise."""
        return EXPERIMENTS / (f"{self.name}.toml" if self.args.size == "cpu" else f"{self.name}_{self.args.size}.toml")

    def sweep(self, overrides: Sequence[str] = (), file: Optional[Path] = None) -> Runs:
        """Train the experiment's sweep file (`sweep_file()`, or `file`) into --runs and return its runs."""
        plan = load_sweep(
            file or self.sweep_file(),
            (*overrides, f'train.device="{self.args.device}"'),
            self.args.wandb,
            resources=self._resources,
        )
        return self._run(plan)

    def train_runs(
        self,
        runs: Sequence[RunSpec],
        *,
        seed_keys: Sequence[str] = (),
        side_by_side: bool = True,
        diverged_ok: bool = False,
    ) -> Runs:
        """One round of explicit runs, trained as a sweep into --runs (with the runs of earlier rounds).
        The seed sets train.seed, model.init_seed and `seed_keys` (e.g. "task.seed": each seed its own
        task; such seeds train separately). A run already there is skipped when it has the steps asked
        for (or more), else continued; a different config for it is an error, never overwritten.
        `diverged_ok`: a run whose loss stops being finite is an outcome of the setup, not a failure to retry
        (`Runs.finished` says which); any other failure still stops the script."""
        specs = [
            (
                labels,
                seed,
                {
                    **config,
                    "train": {**config.get("train", {}), "device": self.args.device},
                    "wandb": {"project": "mechsynth-experiments", **config.get("wandb", {})},
                },
            )
            for labels, seed, config in runs
        ]
        plan = plan_of_runs(
            self.name,
            specs,
            seed_keys=seed_keys,
            side_by_side=side_by_side,
            wandb_mode=self.args.wandb,
            resources=self._resources,
        )
        return self._run(plan, diverged_ok)

    def _run(self, plan: Plan, diverged_ok: bool = False) -> Runs:
        if PLAN_ONLY:
            raise Planned(plan)
        sweep_dir = self.args.runs
        if self.args.backend == "ray":
            from mechsynth.sweep import ray_backend

            ray_backend.require()
        if sweep_dir.is_dir() and not (sweep_dir / "sweep.json").exists() and any(sweep_dir.iterdir()):
            raise ConfigError(
                "--runs",
                f"{sweep_dir} holds files but no sweep.json (runs of an earlier version of this "
                "script, one directory per run?); move it away or choose another --runs",
            )
        try:
            outcome = run_sweep(
                plan,
                sweep_dir,
                backend=self.args.backend,
                workers=self.args.workers,
                address=self.args.address,
                threads=self.args.threads,
                extend=True,
                log=log,
            )
        except ConfigError as e:
            if e.field != "--out":
                raise
            raise ConfigError("--runs", str(e).split(": ", 1)[1]) from None
        diverged = [f for f in outcome.failures if diverged_ok and f["error"].startswith("DivergedError")]
        failures = [f for f in outcome.failures if f not in diverged]
        if failures:
            first = failures[0]
            raise UserError(
                f"{len(failures)} training job(s) failed, first {first['run']}: {first['error']} "
                f"(tracebacks in {sweep_dir / 'failures.json'}); run the command again to retry"
            )
        c = outcome.counts
        self.trained += c["done"] + c["resumed"]
        self.reused += c["complete"] + c["skipped"]
        self.used.append(Runs(sweep_dir.resolve(), plan, [d for f in diverged for d in f["runs"]]))
        return self.used[-1]

    def finish(self, config: dict[str, Any], results: dict[str, Any], figures: Sequence[Path]) -> Path:
        """Write OUT/<name>.json: the numbers, the configuration, where and how long it ran, and the
        verdict of each of the experiment's claims under its rules (experiments/rules/<name>.py); print the
        verdicts, a line each."""
        wall = time.perf_counter() - self.t0
        runs = list({run.path: run for runs in self.used for run in runs.all()}.values())
        made = provenance(runs, self.started)
        trained = made.pop("trained_here")
        out = {
            "experiment": self.name,
            "size": self.args.size,
            "command": command(self.name, self.args.size),
            "wall_time_s": round(wall, 1),
            "date": time.strftime("%Y-%m-%d"),
            "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "device": device_name(self.args.device),
            "threads": self.args.threads,
            "runs_trained": trained,
            "runs_reused": made["count"] - trained,
            "jobs_trained": self.trained,
            "runs": made,
            "commit": commit(),
            "versions": versions(),
            "claims": verdicts.judge_all(self.name, results),
            "rules": verdicts.provenance(self.name, list(made["commits"])),
            "config": config,
            "results": results,
            "figures": [Path(f).name for f in figures],
        }
        path = self.args.out / f"{self.name}.json"
        io.write_json(path, _finite(out))
        print(f"{path} ({wall:.0f} s)")
        for claim in out["claims"]:
            print(f"{claim['id']}: {claim['verdict']} — {claim['why']}")
        return path


def experiment(name: str, doc: Optional[str]) -> Callable[[Callable[[Session, Args], int]], Callable[..., int]]:
    """An experiment script's `main`, from the science alone: the decorated function takes the Session and the
    parsed arguments; what it becomes takes the command line (`main(["--smoke", "--out", DIR])`, None for
    sys.argv) and raises a user's mistake as `UserError` (`cli` turns that into one line)."""

    def wrap(science: Callable[[Session, Args], int]) -> Callable[..., int]:
        def main(argv: Optional[Sequence[str]] = None) -> int:
            args = parse_args(name, doc or "", argv)
            return science(Session(name, args), args)

        main.__doc__ = science.__doc__
        return main

    return wrap


def cli(main: Any) -> int:
    """Run a script's `main()` from the command line: a mistake the user can fix is one line, exit 2."""
    try:
        return main()
    except UserError as e:
        print(f"{Path(sys.argv[0]).name}: error: {e}", file=sys.stderr)
        return 2


def seeds(value: int | Sequence[int]) -> list[int]:
    """A size's seeds (or draws, data sets): a list as it is, a count n as 0..n-1."""
    return list(range(value)) if isinstance(value, int) else list(value)


def command(name: str, size: str) -> str:
    """The command that runs experiment `name` at `size` (smoke, cpu, full)."""
    flag = {"smoke": " --smoke", "cpu": "", "full": " --full"}[size]
    return f"python -m experiments.{name}{flag}"


def log(msg: str) -> None:
    """Progress, on stderr: stdout is the summary."""
    print(msg, file=sys.stderr, flush=True)


def versions() -> dict[str, str]:
    """The versions of every library the numbers depend on (those installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = rundir.libraries()
    for lib in ("numpy", "scipy", "devinterp", "tensorly", "matplotlib"):
        try:
            out[lib] = version(lib)
        except PackageNotFoundError:
            pass
    return out


def provenance(runs: Sequence[Run], started: float = math.inf) -> dict[str, Any]:
    """How the runs behind the numbers were made, also when this invocation only reused them: the commits
    and library versions they were trained with, their seeds, when, how many this invocation trained (a
    checkpoint written since `started`), and their training time (seeds side by side share their batch's
    time, counted once)."""
    configs = [rundir.read_config(run.path) for run in runs]
    stored = [c.get("versions", {}) for c in configs]
    metas = [[run.meta(step) for step in run.steps] for run in runs]
    times = [m["time"] for ms in metas for m in ms]

    def seeds_of(run: Run) -> int:
        batch = run.path.parent / rundir.CONFIG
        return io.read_json(batch)["train"]["seeds"] if batch.exists() else 1

    def count(key: str) -> dict[str, int]:
        values = [v.get(key, "not recorded") for v in stored]
        return {v: values.count(v) for v in sorted(set(values))}

    def stamp(pick: Any) -> Optional[str]:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(pick(times))) if times else None

    train_s = sum(_train_s(ms) / seeds_of(run) for run, ms in zip(runs, metas))
    return {
        "count": len(runs),
        "trained_here": sum(max(m["time"] for m in ms) >= started for ms in metas if ms),
        "seeds": sorted({c.get("train", {}).get("seed", 0) for c in configs}),
        "commits": count("commit"),
        "torch": count("torch"),
        "transformer_lens": count("transformer_lens"),
        "trained_from": stamp(min),
        "trained_until": stamp(max),
        "train_time_s": round(train_s, 1),
        # runs made before checkpoints recorded their training time: estimated from checkpoint times
        "train_time_estimated": sum("train_s" not in ms[-1] for ms in metas),
    }


def _train_s_from_times(metas: list[dict[str, Any]]) -> float:
    """Training time of a run made before checkpoints recorded it, from their wall-clock times: a gap
    between checkpoints far slower per step than the run's median is the run waiting to be continued,
    and counts at the median pace instead."""
    gaps = [(b["time"] - a["time"], b["step"] - a["step"]) for a, b in zip(metas, metas[1:])]
    if not gaps:
        return 0.0
    pace = sorted(dt / steps for dt, steps in gaps)[len(gaps) // 2]
    return sum(dt if dt <= 20 * pace * steps else pace * steps for dt, steps in gaps)


def device_name(device: str) -> str:
    if device != "cpu" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    model = platform.processor() or platform.machine()
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    return f"CPU: {model}, {os.cpu_count()} cores visible"


def commit() -> Optional[str]:
    """The checkout's commit, with "-dirty" when tracked code (the package, probes, experiments,
    pyproject.toml) differs from it; None outside a git checkout."""
    return rundir.code_commit(EXPERIMENTS)


def _finite(x: Any) -> Any:
    """JSON has no NaN or infinity: they become null. Floats keep 5 significant digits."""
    if isinstance(x, float):  # 5 significant digits: plenty for these numbers, and a file half the size
        return float(f"{x:.5g}") if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def train_seconds(run: Run) -> float:
    """Training time of a run, over every resume, whenever it was trained (also when reused)."""
    return _train_s([run.meta(step) for step in run.steps])


def _train_s(metas: list[dict[str, Any]]) -> float:
    """What the last checkpoint records, or for a run made before checkpoints recorded it, an estimate."""
    return metas[-1]["train_s"] if "train_s" in metas[-1] else _train_s_from_times(metas)


def save_figure(fig, path: Path, tight: bool = True) -> Path:
    """Lay the figure out tight (unless it places its own colorbar), write it as a PNG atomically, and
    close it (pyplot keeps every open figure alive)."""
    import matplotlib.pyplot as plt

    if tight:
        fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    io.atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return path
