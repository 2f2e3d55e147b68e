"""Probing speed, from one run: all applicable probes over every checkpoint of a run, against bare
forward passes of the fused model on the same number and size of inputs.

    python benchmarks/probe_speed.py [RUN_DIR]

Without RUN_DIR it trains the demo configuration for 500 steps with 100 checkpoints first.
The target is probing in ≤ 2x the time of the bare forward passes.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

from mechsynth import io, load_run, parse_config, train_run
from mechsynth.cli import DEMO_CONFIG
from mechsynth.config import tomllib
from mechsynth.run import ckpt_dir
from mechsynth.timeline import applicable, probe_run

# Forward passes each probe makes per checkpoint (its inputs: random tokens, repeated tokens, task batches).
FORWARDS = {"previous_token": 2, "induction": 3, "duplicate_token": 1, "icl_strategy": 1, "sparse_selection": 1}
BATCH = 64


def main() -> None:
    if len(sys.argv) > 1:
        run_dir = Path(sys.argv[1])
    else:
        data = tomllib.loads(DEMO_CONFIG)
        data["train"] |= {"steps": 500, "checkpoints": 100, "device": "cpu"}
        data["wandb"] = {"mode": "disabled"}
        run_dir = train_run(parse_config(data), Path(tempfile.mkdtemp()) / "run", progress=False)
    run = load_run(run_dir)
    names = applicable(run)
    steps = run.steps

    t0 = time.perf_counter()
    probe_run(run, names, steps, batch_size=BATCH)
    probing = time.perf_counter() - t0

    model = run.trainable(steps[0])
    n_forwards = sum(FORWARDS.get(n, 1) for n in names)
    tokens = run.task.sample(BATCH, torch.Generator().manual_seed(0), "cpu", run.task.main_eval).tokens
    t0 = time.perf_counter()
    with torch.no_grad():
        for step in steps:
            model.load_state_dict(io.read_tensors(ckpt_dir(run.path, step) / "model.safetensors"))
            for _ in range(n_forwards):
                model(tokens)
    bare = time.perf_counter() - t0

    print(f"{len(steps)} checkpoints, probes: {', '.join(names)}; {n_forwards} forward passes of {BATCH} x "
          f"{tokens.shape[1]} tokens per checkpoint; torch threads {torch.get_num_threads()}")
    print(f"  probing       {probing:7.2f} s")
    print(f"  bare forwards {bare:7.2f} s")
    print(f"probing / bare forwards = {probing / bare:.2f}x  (target <= 2)")


if __name__ == "__main__":
    main()
