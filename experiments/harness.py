"""What the reproduction scripts in experiments/ share: one command line, training that reuses or
continues runs already on disk, a results JSON that says how it was made, and small statistics."""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from mechsynth import io, rundir
from mechsynth.config import ConfigError
from mechsynth.run import Run, load_run
from mechsynth.runconfig import parse_config
from mechsynth.runner import train_run

SIZES = ("smoke", "cpu", "full")


def parse_args(name: str, doc: str, argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"experiments/{name}.py", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_const", dest="size", const="full",
                      help="the paper-size configuration (hours on a CPU; see the README)")
    size.add_argument("--smoke", action="store_const", dest="size", const="smoke",
                      help="a tiny configuration that only checks the pipeline (seconds)")
    p.add_argument("--out", default=None, help="where the results JSON and figures go (default: assets; for --smoke, RUNS/assets)")
    p.add_argument("--runs", default=None, help=f"where the run directories go (default: runs/{name}-<size>)")
    p.add_argument("--wandb", choices=["online", "offline", "disabled"], default="disabled",
                   help="W&B mode of the training runs (default: disabled; offline writes a W&B run per training run)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: these models are so small that more threads mostly wait on each other)")
    p.add_argument("--device", default="cpu", help="training device: cpu, cuda, auto (default: cpu)")
    args = p.parse_args(argv)
    args.size = args.size or "cpu"
    args.runs = Path(args.runs or f"runs/{name}-{args.size}")
    # A smoke run never overwrites the real results in assets/.
    args.out = Path(args.out or (args.runs / "assets" if args.size == "smoke" else "assets"))
    if args.threads < 1:
        p.error("--threads: must be ≥ 1")
    return args


class Session:
    """One invocation of an experiment: sets threads, trains runs, times the whole, writes the JSON."""

    def __init__(self, name: str, args: argparse.Namespace):
        self.name, self.args = name, args
        torch.set_num_threads(args.threads)
        import matplotlib

        matplotlib.use("Agg")  # figures go to files; no display needed
        self.t0 = time.perf_counter()
        self.trained, self.reused = 0, 0

    def train(self, cfg: dict[str, Any], run_dir: Path) -> Run:
        """Train `cfg` into `run_dir`. A run already there with the same config is reused, or
        continued when it has fewer steps (so a longer budget, or a killed command, costs only the
        missing steps); one with a different config is an error, never overwritten."""
        cfg = {**cfg, "wandb": {"mode": self.args.wandb, "project": "mechsynth-experiments",
                                "group": self.name, **cfg.get("wandb", {})}}
        cfg["train"] = {"device": self.args.device, **cfg["train"]}
        parsed = parse_config(cfg)
        run_dir = Path(run_dir)
        state = rundir.status(run_dir)
        if state == "foreign":
            raise ConfigError("--runs", f"{run_dir} holds files but no readable run; move it away or choose another --runs")
        if state != "new":
            run = load_run(run_dir)
            if run.steps and run.steps[-1] >= parsed.train.steps:  # (also a run trained longer than asked)
                rundir.check_resumable(run.config.to_dict(), parsed.to_dict(), field="--runs")
                self.reused += 1
                return run
            # Continue it: only keys a resume may change (steps, device, W&B) may differ.
            train_run(parsed, run_dir, resume=True, progress=False)
        else:
            train_run(parsed, run_dir, progress=False)
        self.trained += 1
        return load_run(run_dir)

    def finish(self, config: dict[str, Any], results: dict[str, Any], figures: Sequence[Path]) -> Path:
        """Write OUT/<name>.json: the numbers, the configuration, where and how long it ran."""
        wall = time.perf_counter() - self.t0
        out = {"experiment": self.name, "size": self.args.size, "command": command(self.name, self.args),
               "wall_time_s": round(wall, 1), "date": time.strftime("%Y-%m-%d"),
               "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
               "device": device_name(self.args.device),
               "threads": self.args.threads, "runs_trained": self.trained, "runs_reused": self.reused,
               "versions": versions(), "config": config, "results": results,
               "figures": [Path(f).name for f in figures]}
        path = self.args.out / f"{self.name}.json"
        io.write_json(path, _finite(out))
        print(f"{path} ({wall:.0f} s)")
        return path


def command(name: str, args: argparse.Namespace) -> str:
    flag = {"smoke": " --smoke", "cpu": "", "full": " --full"}[args.size]
    return f"python experiments/{name}.py{flag}"


def log(msg: str) -> None:
    """Progress, on stderr: stdout is the summary."""
    print(msg, file=sys.stderr, flush=True)


def device_name(device: str) -> str:
    if device != "cpu" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    model = platform.processor() or platform.machine()
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"CPU: {model}, {os.cpu_count()} cores visible"


def versions() -> dict[str, str]:
    from mechsynth import models

    return {"mechsynth": version("mechsynth"), "torch": torch.__version__,
            "transformer_lens": models.TL_VERSION, "python": platform.python_version()}


def _finite(x: Any) -> Any:
    """JSON has no NaN or infinity: they become null. Floats keep 5 significant digits."""
    if isinstance(x, float):  # 5 significant digits: plenty for these numbers, and a file half the size
        return float(f"{x:.5g}") if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


# ---- statistics ---------------------------------------------------------------------------------


def spread(values: Sequence[Optional[float]]) -> dict[str, Any]:
    """Median, min, max and count of the values that exist (None = did not happen)."""
    xs = [float(v) for v in values if v is not None]
    return {"median": statistics.median(xs) if xs else None, "min": min(xs) if xs else None,
            "max": max(xs) if xs else None, "n": len(xs), "of": len(values)}


def power_fit(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """Least squares of log y = a + b log x: the exponent b, the prefactor e^a, and R²."""
    lx, ly = [math.log(v) for v in x], [math.log(v) for v in y]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    b = sum((a - mx) * (c - my) for a, c in zip(lx, ly)) / sxx
    a = my - b * mx
    ss_res = sum((c - a - b * v) ** 2 for v, c in zip(lx, ly))
    ss_tot = sum((c - my) ** 2 for c in ly)
    return {"exponent": b, "prefactor": math.exp(a), "r2": 1 - ss_res / ss_tot if ss_tot > 0 else 1.0}


def linear_fit(x: Sequence[float], y: Sequence[float]) -> Optional[dict[str, float]]:
    """Least squares y = a + b x, with R² and the root-mean-square residual (None: x has one value)."""
    if len(set(x)) < 2:
        return None
    mx, my = statistics.fmean(x), statistics.fmean(y)
    b = sum((u - mx) * (v - my) for u, v in zip(x, y)) / sum((u - mx) ** 2 for u in x)
    a = my - b * mx
    ss_res = sum((v - a - b * u) ** 2 for u, v in zip(x, y))
    ss_tot = sum((v - my) ** 2 for v in y)
    return {"intercept": a, "slope": b, "r2": 1 - ss_res / ss_tot if ss_tot > 0 else 1.0,
            "rms_residual": math.sqrt(ss_res / len(x))}


def pearson(x: Sequence[float], y: Sequence[float]) -> Optional[float]:
    if len(x) < 3:
        return None
    mx, my = statistics.fmean(x), statistics.fmean(y)
    sx = math.sqrt(sum((a - mx) ** 2 for a in x))
    sy = math.sqrt(sum((b - my) ** 2 for b in y))
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / (sx * sy) if sx > 0 and sy > 0 else None


def spearman(x: Sequence[float], y: Sequence[float]) -> Optional[float]:
    return pearson(_ranks(x), _ranks(y))


def _ranks(x: Sequence[float]) -> list[float]:
    order = sorted(range(len(x)), key=lambda i: x[i])
    ranks = [0.0] * len(x)
    i = 0
    while i < len(order):  # ties share their mean rank
        j = i
        while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for m in range(i, j + 1):
            ranks[order[m]] = (i + j) / 2
        i = j + 1
    return ranks


def rise_step(steps: Sequence[int], scores: Sequence[float], fraction: float = 0.5) -> Optional[int]:
    """The first step after which a score stays above start + fraction × (end − start): when a head
    forms, measured against its own start and end rather than a fixed threshold (chance levels differ:
    a uniform head already scores 0.5 on the induction probe with two tokens)."""
    from mechsynth.timeline import formation_step

    start, end = scores[0], max(scores[-3:]) if len(scores) >= 3 else scores[-1]
    if end <= start:
        return None
    return formation_step(steps, scores, start + fraction * (end - start))


def train_seconds(run: Run) -> float:
    """Training time of a run, first to last checkpoint, whenever it was trained (also when reused)."""
    return run.meta(run.steps[-1])["time"] - run.meta(run.steps[0])["time"]


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
