"""How long `mechsynth demo` takes here, run as a user runs it; written to assets/demo.json for the README and the docs.

    python -m benchmarks.demo_time [--out assets]

Runs the `mechsynth` command of this environment into a new temporary run directory (what `make demo` does
once its virtualenv is installed) and records its wall time, the training part of it (the run's own
record), the machine's load before and while it ran (the 1-minute load average, sampled every second:
the demo itself adds about its thread count), the CPU, the commit and library versions, and what the demo
printed. The machines here are shared, so the load says how far the time stands for an idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from experiments import harness
from mechsynth import load_run
from mechsynth.runs import io, rundir


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "assets", help="where demo.json goes (default: assets)")
    args = p.parse_args()
    mechsynth = Path(sys.executable).parent / "mechsynth"
    loads: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            loads.append(os.getloadavg()[0])

    before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "demo"
        env = {**os.environ, "WANDB_DIR": tmp}  # the demo logs to an offline W&B run, as for a user
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        out = subprocess.run(
            [str(mechsynth), "demo", "--out", str(run_dir)], cwd=tmp, env=env, capture_output=True, text=True
        )
        wall = time.perf_counter() - t0
        done.set()
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return out.returncode
        run = load_run(run_dir)
        last = run.meta(run.steps[-1])
    record = {
        "command": "mechsynth demo",
        "wall_time_s": round(wall, 1),
        "train_time_s": round(last["train_s"], 1),
        "steps": last["step"],
        "steps_per_s": round(last["step"] / last["train_s"], 1),
        "load_average": {
            "before": round(before, 2),
            "mean_while": round(statistics.fmean(loads or [before]), 2),
            "max_while": round(max(loads or [before]), 2),
        },
        "device": harness.device_name("cpu"),
        "torch_threads": _threads(mechsynth),
        "date": time.strftime("%Y-%m-%d"),
        "commit": harness.commit(),
        "versions": rundir.libraries(),
        "printed": [line.replace(str(run_dir), "<run>") for line in out.stdout.splitlines()],
    }
    path = args.out / "demo.json"
    io.write_json(path, record)
    print(
        f"{path}: mechsynth demo took {wall:.0f} s ({last['train_s']:.0f} s training, {record['steps_per_s']} "
        f"steps/s) at load {record['load_average']['mean_while']} on {record['device']}"
    )
    return 0


def _threads(mechsynth: Path) -> int:
    """The torch threads the demo's process gets (torch's default: one per core it may use)."""
    python = mechsynth.parent / "python"
    return int(
        subprocess.run(
            [str(python), "-c", "import torch; print(torch.get_num_threads())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )


if __name__ == "__main__":
    sys.exit(main())
