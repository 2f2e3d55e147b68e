"""The demo's training pace idle and beside busy processes, with the threads mechsynth picks against torch's default
(every core, OpenMP spin-waiting), in one run:

    python -m benchmarks.threads_under_load [--steps 300] [--busy 2] [--out assets]

Each row trains the demo config for --steps steps with `mechsynth train` (a fresh process, as a user runs it) and
reads the run's own training time. "busy": --busy processes spinning in plain Python for the whole row (what a
second training job or a browser does to a laptop). "default": MECHSYNTH_THREADS and OMP_WAIT_POLICY set to what
torch does without mechsynth (every core; ACTIVE); "mechsynth": neither set. Prints steps/s and, last, the share of
its idle pace each keeps when busy, against the most a fair scheduler leaves it: "one thread" is the idle pace of a
single thread, and beside --busy spinning processes one thread gets at most cores / (busy + 1) of a core. Writes
OUT/threads_under_load.json (OUT/threads_under_load_busyN.json for --busy N other than 2), for docs/speed.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def spin(stop: float) -> None:
    while time.time() < stop:
        pass


@contextlib.contextmanager
def busy_processes(n: int) -> Iterator[None]:
    """`n` processes spinning in plain Python while the block runs (what a second training job or a browser does to
    a laptop); with n > 0 the block starts after the load average has caught up with them."""
    workers = [mp.Process(target=spin, args=(time.time() + 3600,)) for _ in range(n)]
    for w in workers:
        w.start()
    try:
        if n:
            time.sleep(20)
        yield
    finally:
        for w in workers:
            w.terminate()


def pace(steps: int, env: dict[str, str], busy: int) -> tuple[float, int]:
    """(steps/s of training, the threads it trained with) for one `mechsynth train` of the demo config."""
    from mechsynth import load_run

    with busy_processes(busy), tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "demo"
        subprocess.run(
            [
                str(Path(sys.executable).parent / "mechsynth"),
                "train",
                str(ROOT / "mechsynth" / "configs" / "demo.toml"),
                "--out",
                str(run),
                "--no-progress",
                "--set",
                f"train.steps={steps}",
                "--set",
                "wandb.mode=disabled",
            ],
            check=True,
            capture_output=True,
            env=env,
        )
        r = load_run(run)
        meta = r.meta(r.steps[-1])
        return steps / meta["train_s"], r.state(r.steps[-1])["threads"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--busy", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "assets")
    args = p.parse_args()
    started = time.time()
    base = {k: v for k, v in os.environ.items() if k not in ("MECHSYNTH_THREADS", "OMP_WAIT_POLICY")}
    ways = {
        "default": {**base, "MECHSYNTH_THREADS": str(os.cpu_count()), "OMP_WAIT_POLICY": "ACTIVE"},
        "mechsynth": base,
    }
    cores = os.cpu_count() or 1
    print(f"{cores} cores, load before {os.getloadavg()[0]:.1f}; demo config, {args.steps} steps")
    result = {}
    for name, env in ways.items():
        for busy in (0, args.busy):
            result[name, busy] = pace(args.steps, env, busy)
            rate, n = result[name, busy]
            print(f"{name:<10} {'busy' if busy else 'idle':<5} {rate:8.1f} steps/s  ({n} threads)", flush=True)
    result["one thread", 0] = pace(args.steps, {**base, "MECHSYNTH_THREADS": "1"}, 0)
    print(f"{'one thread':<10} idle  {result['one thread', 0][0]:8.1f} steps/s", flush=True)
    ceiling = min(1.0, cores / (args.busy + 1)) * result["one thread", 0][0] / result["mechsynth", 0][0]
    for name in ways:
        print(f"{name}: busy keeps {result[name, args.busy][0] / result[name, 0][0]:.0%} of its idle pace")
    print(f"a fair scheduler leaves one thread at most {ceiling:.0%} of mechsynth's idle pace")
    from experiments import harness

    record = {
        "steps": args.steps,
        "busy_processes": args.busy,
        "cores": cores,
        "fair_share_ceiling": round(ceiling, 3),
        "rows": [
            {"way": name, "busy": bool(busy), "steps_per_s": round(rate, 2), "threads": n}
            for (name, busy), (rate, n) in result.items()
        ],
        "device": harness.device_name("cpu"),
        "commit": harness.commit(),
        "versions": harness.versions(),
        "wall_time_s": round(time.time() - started),
        "date": time.strftime("%Y-%m-%d"),
    }
    name = "threads_under_load.json" if args.busy == 2 else f"threads_under_load_busy{args.busy}.json"
    (args.out / name).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
