"""Probing speed, from one run: all applicable probes over every checkpoint of a run, three ways —

- mechsynth: `probe_run`, checkpoints loaded side by side into one fused model, one forward per input;
- per checkpoint on TransformerLens: each checkpoint's weights loaded into TransformerLens's own hooked
  model and probed there (`probes.run_many` on `run.models()`), the way one would without mechsynth;
- bare: load each checkpoint into the fused model and run plain forward passes (no hooks, no cache,
  no probe math) on the same inputs the probes read.

    python benchmarks/probe_speed.py [RUN_DIR]

Without RUN_DIR it trains the demo configuration for 2000 steps with 100 checkpoints first.
Target: mechsynth ≤ 2x the bare forward passes.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from mechsynth import load_run, parse_config, probes, train_run
from mechsynth import configs
from mechsynth.analysis.timeline import applicable, probe_run

BATCH = 64


def main() -> None:
    if len(sys.argv) > 1:
        run_dir = Path(sys.argv[1])
    else:
        data = configs.load("demo")
        data["train"] |= {"checkpoints": 100, "device": "cpu"}
        data["wandb"] = {"mode": "disabled"}
        run_dir = train_run(parse_config(data), Path(tempfile.mkdtemp()) / "run", progress=False)
    run = load_run(run_dir)
    names, steps = applicable(run), run.steps
    inputs = {probes.resolve(i, run.task) for n in names for i in probes.PROBES.get(n).reads}
    tokens = [probes.draw(i, run.trainable(0), run.task, BATCH, 0).tokens for i in sorted(inputs)]

    def ours():
        probe_run(run, names, steps, batch_size=BATCH)

    def per_checkpoint_tl():
        init = run.trainable(steps[0])
        for _, model in run.models(steps):
            probes.run_many(names, model, run.task, batch_size=BATCH, init=init)

    @torch.no_grad()
    def bare():
        model = run.trainable(steps[0])
        for step in steps:
            model.load_state_dict(run.weights(step))
            for t in tokens:
                model(t)

    times: dict[str, list[float]] = {"mechsynth": [], "per-checkpoint TL": [], "bare": []}
    for _ in range(3):  # interleaved rounds; the median of each
        for name, fn in zip(times, (ours, per_checkpoint_tl, bare)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{len(steps)} checkpoints; probes: {', '.join(names)}; inputs: {', '.join(sorted(inputs))} "
          f"({BATCH} sequences each); torch {torch.__version__}, {torch.get_num_threads()} threads")
    for k, v in med.items():
        print(f"  {k:<18} {v:7.2f} s")
    print(f"mechsynth / bare forwards = {med['mechsynth'] / med['bare']:.2f}x  (target <= 2)")
    print(f"per-checkpoint TL / mechsynth = {med['per-checkpoint TL'] / med['mechsynth']:.2f}x")


if __name__ == "__main__":
    main()
