"""Probing speed, from one run: all applicable probes over every checkpoint of a run, three ways —

- mechsynth: `probe_run`, checkpoints loaded side by side into one fused model, one forward per input;
- per checkpoint on TransformerLens: each checkpoint's weights loaded into TransformerLens's own hooked
  model and probed there (`probes.run_many` on `run.models()`), the way one would without mechsynth;
- bare: load each checkpoint into the fused model and run plain forward passes (no hooks, no cache,
  no probe math) on the same inputs the probes read.

    python -m benchmarks.probe_speed [RUN_DIR]

Without RUN_DIR it trains the demo configuration for 2000 steps with 100 checkpoints first.
Target: mechsynth ≤ 2x the bare forward passes.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import torch

from mechsynth import load_run, parse_config, probes, train_run
from mechsynth import configs
from mechsynth.analysis.timeline import applicable, probe_run

BATCH = 64


def demo_run(
    device: str, steps: Optional[int] = None, checkpoints: int = 100, eval_batch_size: Optional[int] = None
) -> Path:
    """The demo configuration (its steps, or `steps`) with `checkpoints` checkpoints, trained on `device`;
    `eval_batch_size`: fewer held-out sequences than its 512 (their Bayes predictor takes seconds on a CPU)."""
    data = configs.load("demo")
    data["train"] |= (
        {"checkpoints": checkpoints, "device": device}
        | ({"steps": steps} if steps else {})
        | ({"eval_batch_size": eval_batch_size} if eval_batch_size else {})
    )
    data["wandb"] = {"mode": "disabled"}
    return train_run(parse_config(data), Path(tempfile.mkdtemp()) / "run", progress=False)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(run_dir: Path, device: str | torch.device = "cpu", rounds: int = 3, batch: int = BATCH) -> dict[str, Any]:
    """Seconds of each way (median of `rounds` interleaved rounds) over every checkpoint of `run_dir` and their
    ratios (also what benchmarks/gpu_check.py records)."""
    device = torch.device(device)
    run = load_run(run_dir)
    names, steps = applicable(run), run.steps
    inputs = {probes.resolve(i, run.task) for n in names for i in probes.PROBES.get(n).reads}
    tokens = [probes.draw(i, run.trainable(0), run.task, batch, 0).tokens.to(device) for i in sorted(inputs)]

    def ours():
        probe_run(run, names, steps, batch_size=batch, device=device)

    def per_checkpoint_tl():
        init = run.trainable(steps[0], device)
        for _, model in run.models(steps, device):
            probes.run_many(names, model, run.task, batch_size=batch, init=init)

    @torch.no_grad()
    def bare():
        model = run.trainable(steps[0], device)
        for step in steps:
            model.load_state_dict(run.weights(step))
            for t in tokens:
                model(t)

    times: dict[str, list[float]] = {"mechsynth": [], "per-checkpoint TL": [], "bare": []}
    for _ in range(rounds):  # interleaved rounds; the median of each
        for name, fn in zip(times, (ours, per_checkpoint_tl, bare)):
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "checkpoints": len(steps),
        "probes": names,
        "inputs": sorted(inputs),
        "batch": batch,
        "seconds": med,
        "ratios": {
            "mechsynth/bare": med["mechsynth"] / med["bare"],
            "per_checkpoint_tl/mechsynth": med["per-checkpoint TL"] / med["mechsynth"],
        },
    }


def main() -> None:
    run_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else demo_run("cpu")
    out = measure(run_dir)
    print(
        f"{out['checkpoints']} checkpoints; probes: {', '.join(out['probes'])}; inputs: {', '.join(out['inputs'])} "
        f"({BATCH} sequences each); torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    for k, v in out["seconds"].items():
        print(f"  {k:<18} {v:7.2f} s")
    print(f"mechsynth / bare forwards = {out['ratios']['mechsynth/bare']:.2f}x  (target <= 2)")
    print(f"per-checkpoint TL / mechsynth = {out['ratios']['per_checkpoint_tl/mechsynth']:.2f}x")


if __name__ == "__main__":
    main()
