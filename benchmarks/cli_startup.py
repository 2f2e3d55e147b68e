"""How long the `mechsynth` command takes to answer, beside `python -c "import torch"` on the same machine, in one run:

    python -m benchmarks.cli_startup [--repeats 5] [--busy 0] [--out assets]

Each command runs in a fresh process, as a user types it: `--help`, `tasks`, `probes`, and `train` of a config with
a bad field (its one-line error, exit 2). "busy": that many processes spinning in plain Python throughout. Prints
the median wall time of each and its ratio to importing torch, and writes OUT/cli_startup.json (for docs/speed.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.threads_under_load import busy_processes
from experiments import harness

BAD = '[task]\nname = "markov_icl"\nk = 0\n'  # task.k must be ≥ 2


def seconds(argv: list[str], repeats: int, expect: int) -> float:
    """The median wall time of `argv` over `repeats` fresh processes."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        assert done.returncode == expect, (argv, done.returncode, done.stderr[-500:])
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--busy", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "assets")
    args = p.parse_args()
    cli = [sys.executable, "-m", "mechsynth.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        bad = Path(tmp) / "bad.toml"
        bad.write_text(BAD)
        commands = {
            "python -c 'import torch'": ([sys.executable, "-c", "import torch"], 0),
            "mechsynth --help": ([*cli, "--help"], 0),
            "mechsynth tasks": ([*cli, "tasks"], 0),
            "mechsynth probes": ([*cli, "probes"], 0),
            "mechsynth train BAD.toml": ([*cli, "train", str(bad)], 2),
        }
        with busy_processes(args.busy):
            load = os.getloadavg()[0]
            rows = {name: seconds(argv, args.repeats, expect) for name, (argv, expect) in commands.items()}
    torch_s = rows["python -c 'import torch'"]
    for name, s in rows.items():
        print(f"{name:28s} {s:6.2f} s  {s / torch_s:5.2f}× import torch")
    out = {
        "commit": harness.commit(),
        "device": harness.device_name("cpu"),
        "versions": harness.versions(),
        "busy": args.busy,
        "repeats": args.repeats,
        "load_average": round(load, 2),
        "seconds": {k: round(v, 3) for k, v in rows.items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("cli_startup.json" if not args.busy else f"cli_startup_busy{args.busy}.json")
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
