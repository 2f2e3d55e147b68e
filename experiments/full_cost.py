"""What each experiment's `--full` size costs, measured on this device rather than guessed:

    python -m experiments.full_cost                      # every experiment with a --full size, on the CPU
    python -m experiments.full_cost --device cuda        # the same on a GPU (GPU-hours)
    python -m experiments.full_cost --only grokking,dyck_balance

For each experiment it asks the script for its first round of `--full` runs without training them (harness.PLAN_ONLY),
then, for each distinct run configuration (seeds aside), builds the model and data exactly as training would and times
a few training steps after a warm-up, and one evaluation (of at most 256 sequences, scaled to the run's evaluation
batch: its cost is linear in it), the largest first; past --budget-s seconds the configurations left are scaled from
the timed one nearest in size, by parameters × tokens. A run's time is its steps at that pace plus its evaluations;
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

from experiments import harness
from mechsynth import models
from mechsynth.errors import UserError
from mechsynth.runs import io
from mechsynth.runs.runconfig import parse_config
from mechsynth.training import budget
from mechsynth.training.seeds import SeedsTrainer
from mechsynth.training.train import Trainer, resolve_device

EXPERIMENTS = Path(__file__).resolve().parent
# Fields that change neither a step's nor an evaluation's cost: one timing serves every run that differs only here.
FREE = {
    ("train", "steps"),
    ("train", "checkpoints"),
    ("train", "seed"),
    ("train", "lr"),
    ("train", "eval_every"),
    ("model", "init_seed"),
    ("task", "seed"),
    ("train", "warmup_steps"),
    ("train", "set_seed"),
}


def first_round(name: str, device: str, size: str = "full") -> harness.Plan:
    """The plan of `name`'s first round of runs at `size`, on `device`, from the script itself."""
    module = importlib.import_module(f"experiments.{name}")
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
    return json.dumps(
        {
            section: {k: v for k, v in table.items() if (section, k) not in FREE}
            for section, table in config.items()
            if section != "wandb"
        },
        sort_keys=True,
    )


EVAL_TIMED = 256  # sequences of an evaluation timed; its cost is linear in them, so a larger one is scaled


def work(config: dict[str, Any]) -> dict[str, float]:
    """What a run of `config` computes per training step and per evaluation, as parameters × tokens (to scale a timed
    configuration's pace to an untimed one), and the memory it needs (training/budget.py's estimate)."""
    cfg = parse_config(config, resources=False)  # (memory is measure's to judge: a run too large is reported)
    task = cfg.build_task()
    per_token = cfg.model.param_count(task.spec) * task.spec.n_ctx * cfg.train.seeds
    return {
        "step": per_token * cfg.train.batch_size,
        "eval": per_token * cfg.train.eval_batch_size,
        "bytes": budget.estimate(cfg.model, cfg.train, task).total,
    }


def pace(config: dict[str, Any], warmup: int, steps: int) -> dict[str, float]:
    """Seconds per training step and per evaluation of one run of `config`, as its trainer does them."""
    eval_batch = config["train"]["eval_batch_size"]
    cfg = parse_config(
        {**config, "train": {**config["train"], "eval_batch_size": min(eval_batch, EVAL_TIMED)}}, resources=False
    )
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
    return {"step_s": step_s, "eval_s": (time.perf_counter() - t0) * eval_batch / cfg.train.eval_batch_size}


def measure(
    name: str, device: str, warmup: int, steps: int, size: str = "full", budget_s: float = 120, log=print
) -> dict[str, Any]:
    """The cost of `name`'s first round at `size`. The configurations are timed largest first until `budget_s` is
    spent; the rest are scaled from the timed one nearest in size (by parameters × tokens)."""
    plan = first_round(name, device, size)
    t0 = time.perf_counter()
    configs = {cost_key(j.config): j for j in plan.jobs}
    size_of = {k: work(j.config) for k, j in configs.items()}
    out: dict[str, Any] = {
        "runs": len(plan.jobs),
        "model_steps": sum(j.config["train"]["steps"] * j.config["train"].get("seeds", 1) for j in plan.jobs),
        "peak_gib": round(max(w["bytes"] for w in size_of.values()) / 2**30, 2),
    }
    timed: dict[str, dict[str, float]] = {}
    cpu = not device.startswith("cuda")
    for key in sorted(configs, key=lambda k: -size_of[k]["step"]):
        job = configs[key]
        try:
            if cpu and size_of[key]["bytes"] > memory_limit():
                raise MemoryError(f"its estimate is {size_of[key]['bytes'] / 2**30:.1f} GiB")
            if not timed or time.perf_counter() - t0 < budget_s:
                timed[key] = pace(job.config, warmup, steps)
        except (MemoryError, RuntimeError) as e:  # RuntimeError: torch's "can't allocate memory"
            if "alloc" not in str(e) and not isinstance(e, MemoryError):
                raise
            asked = re.search(r"allocate (\d+) bytes", str(e))
            why = f"it asked for {int(asked.group(1)) / 2**30:.1f} GiB more" if asked else str(e)
            out["does_not_fit"] = (
                f"a run of {job.point} needs more memory than the {fmt_gib(memory_limit())} "
                f"this machine lets one process have ({why})"
            )
    hours = []
    for job in plan.jobs if "does_not_fit" not in out else []:
        key = cost_key(job.config)
        ref = (
            key if key in timed else min(timed, key=lambda r: abs(math.log(size_of[r]["step"] / size_of[key]["step"])))
        )
        step_s = timed[ref]["step_s"] * size_of[key]["step"] / size_of[ref]["step"]
        eval_s = timed[ref]["eval_s"] * size_of[key]["eval"] / size_of[ref]["eval"]
        train = job.config["train"]
        hours.append((train["steps"] * step_s + (math.ceil(train["steps"] / train["eval_every"]) + 1) * eval_s) / 3600)
    fits = "does_not_fit" not in out
    out.update(
        configs=len(configs),
        configs_timed=len(timed),
        hours=sum(hours) if fits else None,
        longest_run_hours=max(hours) if fits else None,
        measured_in_s=round(time.perf_counter() - t0, 1),
    )
    log(
        f"{name}: {out['runs']} runs, {len(timed)} of {len(configs)} configurations timed: "
        + (f"{out['hours']:.2f} h on {device}" if fits else out["does_not_fit"])
        + f" (measured in {out['measured_in_s']:.0f} s)"
    )
    return out


def memory_limit() -> int:
    """What one process may map here: 85 % of the machine's memory (a bigger configuration fails to allocate, and
    is reported, rather than taking the machine down)."""
    return int(0.85 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def fmt_gib(n: int) -> str:
    return f"{n / 2**30:.0f} GiB"


def with_full_size() -> list[str]:
    """The experiment scripts that have a --full size."""
    return sorted(
        p.stem
        for p in EXPERIMENTS.glob("*.py")
        if (EXPERIMENTS / "rules" / p.name).exists() and '"full"' in p.read_text()
    )


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.full_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.add_argument("--only", help="comma-separated experiment names (default: every one with a --full size)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--steps", type=int, default=3, help="timed steps per configuration")
    p.add_argument(
        "--budget-s",
        type=float,
        default=120,
        help="seconds per experiment for timing; the configurations left are scaled from the timed ones",
    )
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the experiments train with 1)")
    p.add_argument(
        "--size",
        choices=("full", "cpu", "smoke"),
        default="full",
        help="the size to cost (default: full; the JSON holds one size, so another needs --out elsewhere)",
    )
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
    for earlier in entry["experiments"].values():  # each keeps the commit and date it was measured at
        earlier.setdefault("commit", entry.get("commit"))
        earlier.setdefault("date", entry.get("date"))
    for name in names:
        entry["experiments"][name] = {
            **measure(name, args.device, args.warmup, args.steps, args.size, args.budget_s),
            "load_average": round(os.getloadavg()[0], 2),
            "commit": harness.commit(),
            "date": time.strftime("%Y-%m-%d"),
        }
        entry.update(
            device=harness.device_name(args.device),
            commit=harness.commit(),
            versions=harness.versions(),
            date=time.strftime("%Y-%m-%d"),
            size=args.size,
            threads=args.threads,
            warmup=args.warmup,
            steps=args.steps,
        )
        stored[kind] = entry
        io.write_json(path, stored)  # after each: a run cut short keeps what it measured
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
