"""An experiment's training, before and after it ran on the sweep machinery, from one run.

    python -m benchmarks.experiment_speed [--smoke] [--workers N] [--keep DIR]

Trains every run of experiments/statistical_induction.py at its CPU size (--smoke: its smoke size;
experiments/statistical_induction[_smoke].toml), end to end, twice, each into its own temporary directory:
  before  - one model at a time in this process with one torch thread: the loop the script had
            (harness.Session.train per run, seeds as separate runs, the script's default --threads 1);
  after   - `mechsynth.sweep.run_sweep`, as the script runs now: each condition's seeds side by side
            (one batched job per condition), jobs on the local process pool (--workers, default the
            CPU count, each worker the CPU count / workers torch threads).
Both train exactly the same runs (the same configs; the sweep's seed directories equal the separate
runs'). Prints both wall times and their ratio. The two are timed one after the other, so load from
other processes on the machine hits them unevenly: compare ratios from several runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")

import torch

from mechsynth.runs import rundir
from mechsynth.runs.runconfig import parse_config
from mechsynth.runs.runner import train_run
from mechsynth.sweep import load_sweep, run_sweep
from mechsynth.sweep.local_pool import cpu_count
from mechsynth.sweep.units import plan_units

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def before(plan, out: Path) -> float:
    """The old loop: each run in turn, in this process, one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        for job in plan.jobs:
            train_run(parse_config(job.config), out / job.dir, progress=False)
    finally:
        torch.set_num_threads(threads)
    return time.perf_counter() - t0


def after(plan, out: Path, workers: int | None) -> float:
    t0 = time.perf_counter()
    outcome = run_sweep(plan, out, workers=workers, log=lambda s: None)
    if outcome.failures:
        sys.exit(f"the sweep failed: {outcome.failures[0]['error']}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true", help="the experiment's smoke size (seconds): checks this script")
    ap.add_argument("--workers", type=int, default=None, help="local pool workers of 'after' (default: the CPU count)")
    ap.add_argument(
        "--keep", default=None, help="train into DIR/before and DIR/after and keep them (default: temporary)"
    )
    args = ap.parse_args()
    file = EXPERIMENTS / ("statistical_induction_smoke.toml" if args.smoke else "statistical_induction.toml")
    plan = load_sweep(file, ('train.device="cpu"',), "disabled")
    with tempfile.TemporaryDirectory(prefix="experiment_speed-") as tmp:
        root = Path(args.keep or tmp)
        units = plan_units(plan, root / "after")
        print(
            f"{file.name}: {len(plan.jobs)} runs ({len(plan.points())} conditions × {len(plan.seeds)} seeds), "
            f"{sum(j.config['train']['steps'] for j in plan.jobs)} model-steps; torch {torch.__version__}, "
            f"{cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
        )
        t_before = before(plan, root / "before")
        print(f"  before  {t_before:7.1f} s  one model at a time, one process, 1 thread")
        t_after = after(plan, root / "after", args.workers)
        workers = args.workers or min(cpu_count(), len(units))
        print(
            f"  after   {t_after:7.1f} s  sweep: {len(units)} jobs ({sum(u.side_by_side for u in units)} of seeds side "
            f"by side), local pool of {workers} worker(s)"
        )
        print(f"  after is {t_before / t_after:.2f}x as fast as before")
        done = [rundir.is_complete(root / d / j.dir) for d in ("before", "after") for j in plan.jobs]
        if not all(done):
            sys.exit("not every run of both is complete")


if __name__ == "__main__":
    main()
