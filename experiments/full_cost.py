"""What each experiment's `--full` size costs, measured on this device rather than guessed:

    python experiments/full_cost.py                      # every experiment with a --full size, on the CPU
    python experiments/full_cost.py --device cuda        # the same on a GPU (GPU-hours)
    python experiments/full_cost.py --only grokking,dyck_balance

For each experiment it asks the script for its first round of `--full` runs without training them (harness.PLAN_ONLY),
then, for each distinct run configuration (seeds aside), builds the model and data exactly as training would and times
a few training steps after a warm-up, and one evaluation. A run's time is its steps at that pace plus its evaluations;
the experiment's, the sum over its runs (one device, one run at a time; the local pool or Ray divides it by the
runs at a time). Checkpoint writes and probing are not counted. A script that plans later rounds from its first
round's results trains more than is counted here.

Writes OUT/full_cost.json, one entry per device kind (cpu, cuda) merged with what the file already holds; the
experiments' docs pages state their cost from it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io as _io
import json
import math
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

from mechsynth import models  # noqa: E402
from mechsynth.errors import UserError  # noqa: E402
from mechsynth.runs import io  # noqa: E402
from mechsynth.runs.runconfig import parse_config  # noqa: E402
from mechsynth.training.seeds import SeedsTrainer  # noqa: E402
from mechsynth.training.train import Trainer, resolve_device  # noqa: E402

EXPERIMENTS = Path(__file__).resolve().parent
# Fields that change neither a step's nor an evaluation's cost: one timing serves every run that differs only here.
FREE = {("train", "steps"), ("train", "checkpoints"), ("train", "seed"), ("train", "lr"), ("train", "eval_every"),
        ("model", "init_seed"), ("task", "seed"), ("train", "warmup"), ("train", "decay"), ("train", "set_seed")}


def first_round(name: str, device: str, size: str = "full") -> harness.Plan:
    """The plan of `name`'s first round of runs at `size`, on `device`, from the script itself."""
    module = importlib.import_module(name)
    harness.PLAN_ONLY = True
    try:
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(_io.StringIO()):
            flag = {"full": ["--full"], "smoke": ["--smoke"], "cpu": []}[size]
            module.main([*flag, "--device", device, "--runs", str(Path(tmp) / "runs"), "--out", tmp])
    except harness.Planned as planned:
        return planned.plan
    finally:
        harness.PLAN_ONLY = False
    raise UserError(f"{name}: its {size} size trains no runs")


def cost_key(config: dict[str, Any]) -> str:
    return json.dumps({section: {k: v for k, v in table.items() if (section, k) not in FREE}
                       for section, table in config.items() if section != "wandb"}, sort_keys=True)


def pace(config: dict[str, Any], warmup: int, steps: int) -> dict[str, float]:
    """Seconds per training step and per evaluation of one run of `config`, as its trainer does them."""
    cfg = parse_config(config)
    task, device, n = cfg.build_task(), resolve_device(cfg.train.device), cfg.train.seeds
    model = models.build(cfg.model, task.spec, n_models=None if n == 1 else n)
    trainer = Trainer(model, task, cfg.train, device) if n == 1 else SeedsTrainer(model, task, cfg.train, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        trainer.train_step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        trainer.train_step()
    sync()
    step_s = (time.perf_counter() - t0) / steps
    trainer.evaluate()  # the first draws the held-out batches
    sync()
    t0 = time.perf_counter()
    trainer.evaluate()
    sync()
    return {"step_s": step_s, "eval_s": time.perf_counter() - t0}


def measure(name: str, device: str, warmup: int, steps: int, size: str = "full", log=print) -> dict[str, Any]:
    plan = first_round(name, device, size)
    timed: dict[str, Optional[dict[str, float]]] = {}
    hours: list[float] = []
    t0 = time.perf_counter()
    out: dict[str, Any] = {"runs": len(plan.jobs), "model_steps": sum(j.config["train"]["steps"] * j.config["train"].get("seeds", 1)
                                                                     for j in plan.jobs)}
    for job in plan.jobs:
        key = cost_key(job.config)
        if key not in timed:
            try:
                timed[key] = pace(job.config, warmup, steps)
            except (MemoryError, RuntimeError) as e:  # RuntimeError: torch's "can't allocate memory"
                if "alloc" not in str(e) and not isinstance(e, MemoryError):
                    raise
                timed[key] = None
                asked = re.search(r"allocate (\d+) bytes", str(e))
                out["does_not_fit"] = (f"a run of {job.point} needs more memory than the {fmt_gib(memory_limit())} "
                                       "this machine lets one process have"
                                       + (f" (it asked for {int(asked.group(1)) / 2**30:.1f} GiB more)" if asked else ""))
        if timed[key] is not None:
            train = job.config["train"]
            evals = math.ceil(train["steps"] / train["eval_every"]) + 1
            hours.append((train["steps"] * timed[key]["step_s"] + evals * timed[key]["eval_s"]) / 3600)
    fits = "does_not_fit" not in out
    out.update(configs_timed=len(timed), hours=sum(hours) if fits else None,
               longest_run_hours=max(hours) if fits else None, measured_in_s=round(time.perf_counter() - t0, 1))
    log(f"{name}: {out['runs']} runs, {len(timed)} configurations: "
        + (f"{out['hours']:.2f} h on {device}" if fits else out["does_not_fit"])
        + f" (measured in {out['measured_in_s']:.0f} s)")
    return out


def memory_limit() -> int:
    """What one process may map here: 85 % of the machine's memory (a bigger configuration fails to allocate, and
    is reported, rather than taking the machine down)."""
    return int(0.85 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def fmt_gib(n: int) -> str:
    return f"{n / 2**30:.0f} GiB"


def with_full_size() -> list[str]:
    """The experiment scripts that have a --full size."""
    return sorted(p.stem for p in EXPERIMENTS.glob("*.py")
                  if (EXPERIMENTS / "rules" / p.name).exists() and '"full"' in p.read_text())


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="experiments/full_cost.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.add_argument("--only", help="comma-separated experiment names (default: every one with a --full size)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--steps", type=int, default=5, help="timed steps per configuration")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the experiments train with 1)")
    p.add_argument("--size", choices=("full", "cpu", "smoke"), default="full",
                   help="the size to cost (default: full; the JSON holds one size, so another needs --out elsewhere)")
    p.add_argument("--out", type=Path, default=EXPERIMENTS.parent / "assets")
    args = p.parse_args(argv)
    known = with_full_size()
    names = [n.strip() for n in args.only.split(",")] if args.only else known
    unknown = [n for n in names if n not in known]
    if unknown:
        p.error(f"--only: {', '.join(unknown)} has no --full size; allowed: {', '.join(known)}")
    torch.set_num_threads(args.threads)
    if not args.device.startswith("cuda"):  # (CUDA maps far more address space than it uses)
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit(), memory_limit()))
    kind = "cuda" if args.device.startswith("cuda") else "cpu"
    path = args.out / "full_cost.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    entry = stored.get(kind, {"experiments": {}})
    for name in names:
        entry["experiments"][name] = {**measure(name, args.device, args.warmup, args.steps, args.size),
                                      "load_average": round(os.getloadavg()[0], 2)}
        entry.update(device=harness.device_name(args.device), commit=harness.commit(), versions=harness.versions(),
                     date=time.strftime("%Y-%m-%d"), size=args.size, threads=args.threads, warmup=args.warmup, steps=args.steps)
        stored[kind] = entry
        io.write_json(path, stored)  # after each: a run cut short keeps what it measured
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
