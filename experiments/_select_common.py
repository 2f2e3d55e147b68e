"""What experiments/sparse_selection.py and experiments/automata_depth.py share: the command line,
training one config into a run directory that a second invocation reuses, and the record of where,
with what and how long each result was made."""

from __future__ import annotations

import time

START = time.perf_counter()  # before the heavy imports: the wall time covers the whole command

import argparse
import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

import mechsynth
from mechsynth import io
from mechsynth.config import ConfigError
from mechsynth.run import Run, read_metrics

ROOT = Path(__file__).resolve().parent.parent


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="the paper-size configuration (meant for a GPU)")
    size.add_argument("--smoke", action="store_true", help="a seconds-long run of every step (for tests)")
    p.add_argument("--out", type=Path, help="where the JSON and figures go (default: assets/; for --smoke, runs/smoke)")
    p.add_argument("--runs", type=Path, help="where run directories go (default: runs/<experiment>[-full|-smoke]); "
                   "finished runs found there are reused, interrupted ones resumed")
    p.add_argument("--wandb", choices=("disabled", "offline", "online"), default="disabled",
                   help="W&B mode of each training run (default: disabled; the JSON holds the results)")
    p.add_argument("--device", default="auto", help="training device: auto (CUDA when available), cpu, cuda, ...")
    return p


@dataclass
class Setup:
    name: str  # the experiment, e.g. "sparse_selection"
    size: str  # "smoke", "cpu" or "full"
    out: Path
    runs: Path
    wandb: str
    device: str
    trained: int = 0  # runs trained (or resumed) by this invocation
    reused: int = 0  # finished runs found in s.runs and reused

    @property
    def stem(self) -> str:
        return self.name if self.size == "cpu" else f"{self.name}_{self.size}"


def setup(name: str, args: argparse.Namespace) -> Setup:
    size = "full" if args.full else "smoke" if args.smoke else "cpu"
    out = args.out or (ROOT / "runs" / "smoke" if size == "smoke" else ROOT / "assets")
    runs = args.runs or ROOT / "runs" / (name if size == "cpu" else f"{name}-{size}")
    if args.device != "auto" and args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device", f"{args.device!r} but CUDA is not available here; allowed: auto, cpu")
    # These models are tiny: on a CPU, intra-op threads cost more than they give, and on a shared
    # machine two threads per process made a step 4x slower than one (measured, 2 busy cores).
    torch.set_num_threads(1)
    return Setup(name, size, Path(out), Path(runs), args.wandb, args.device)


def train(s: Setup, config: dict[str, Any], name: str) -> Run:
    """Train `config` (TOML-style tables) into s.runs/name, or reuse the finished run found there
    (resume it when it was interrupted). A different run in that place is an error, never overwritten."""
    config = {**config, "wandb": {"mode": s.wandb, "name": name, "group": s.stem}}
    config["train"] = {"device": s.device, **config["train"]}
    cfg = mechsynth.parse_config(config)
    run_dir = s.runs / name
    if (run_dir / "config.json").exists():
        stored = io.read_json(run_dir / "config.json")
        stored.pop("versions", None)
        if stored != json.loads(json.dumps(cfg.to_dict())):
            raise ConfigError("--runs", f"{run_dir} holds a run with another config; choose another --runs or remove it")
        run = mechsynth.load_run(run_dir)
        if run.steps and run.steps[-1] == cfg.train.steps:
            s.reused += 1
            return run
        mechsynth.train_run(cfg, run_dir, resume=True, progress=False)
    else:
        mechsynth.train_run(cfg, run_dir, progress=False)
    s.trained += 1
    return mechsynth.load_run(run_dir)


def train_seconds(run: Run) -> float:
    """Training time of a run, from its first to its last checkpoint (whenever it was trained)."""
    return run.meta(run.steps[-1])["time"] - run.meta(run.steps[0])["time"]


def last_metrics(run: Run) -> dict[str, Any]:
    """The record of the last evaluation (at the final step)."""
    return read_metrics(run.path)[-1]


def device_name(device: str) -> str:
    if device != "cpu" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU ({model}), {os.cpu_count()} cores, 1 torch thread"


def record(s: Setup, config: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    """The JSON: the numbers, with how and where they were made."""
    from importlib.metadata import version

    from mechsynth import models

    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"experiment": s.name, "size": s.size, "command": command(s), "config": config, **results,
            "runs_trained": s.trained, "runs_reused": s.reused,
            "device": device_name("cpu" if s.device == "cpu" else "auto"), "load_average": load, "date": time.strftime("%Y-%m-%d"),
            "versions": {"mechsynth": version("mechsynth"), "transformer_lens": models.TL_VERSION,
                         "torch": torch.__version__, "python": platform.python_version()}}


def command(s: Setup) -> str:
    flag = {"cpu": "", "full": " --full", "smoke": " --smoke"}[s.size]
    return f"python experiments/{s.name}.py{flag}"


def write(s: Setup, data: dict[str, Any]) -> Path:
    s.out.mkdir(parents=True, exist_ok=True)
    path = s.out / f"{s.stem}.json"
    data["wall_time_s"] = round(time.perf_counter() - START, 1)  # this invocation; reused runs cost no training
    io.write_json(path, data)
    return path


def save_figure(s: Setup, fig, suffix: str) -> Path:
    """Write a matplotlib figure to OUT/<stem>_<suffix>.png atomically."""
    s.out.mkdir(parents=True, exist_ok=True)
    path = s.out / f"{s.stem}_{suffix}.png"
    io.atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    return path


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fit_line(x: list[float], y: list[float]) -> Optional[dict[str, float]]:
    """Least-squares y = a + b x, with R^2 and the root-mean-square residual."""
    if len(set(x)) < 2:
        return None
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((xi - mx) ** 2 for xi in x)
    b = sum((xi - mx) * (yi - my) for xi, yi in zip(x, y)) / sxx
    a = my - b * mx
    ss_res = sum((yi - a - b * xi) ** 2 for xi, yi in zip(x, y))
    ss_tot = sum((yi - my) ** 2 for yi in y)
    return {"intercept": a, "slope": b, "r2": 1 - ss_res / ss_tot if ss_tot > 0 else 1.0,
            "rms_residual": (ss_res / n) ** 0.5}
