"""Seeds side by side vs one after another, from one run: training throughput of `train.seeds = S`.

    python benchmarks/seeds_speed.py [--seeds 32] [--device cpu|cuda] [--steps 20] [--rounds 3]

The demo-size model (`mechsynth demo`): `markov_icl` k=3, order 2, length 64; a 2-layer attention-only
transformer, d_model 32, 1 head; batch 64, AdamW, gradient clipping at 1.0. Two ways to train the same
S models (init seeds 0..S-1, data seeds 0..S-1):
  batched     - one SeedsTrainer: every weight stacked on a seed axis, one batched step for all S.
  sequential  - S ordinary Trainers, each stepped in turn: what S separate runs cost.
Both count model-steps (one optimizer step of one model) per second, data generation included. Rounds
are interleaved and the median is reported, so machine noise hits both alike. Evaluation (each
seed's 512 held-out sequences) is timed the same way and printed beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace

os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402

from mechsynth import models, tasks  # noqa: E402
from mechsynth.seeds import SeedsTrainer  # noqa: E402
from mechsynth.train import Trainer, TrainConfig  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: torch.device) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=32)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=20, help="steps of each model per round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    device, n_seeds, steps = torch.device(args.device), args.seeds, args.steps
    task = tasks.make("markov_icl", {"k": 3, "order": 2, "length": 64})
    mcfg = models.ModelConfig(n_layers=2, n_heads=1, d_model=32, attn_only=True)
    tcfg = TrainConfig(batch_size=64, lr=3e-3, device=args.device)

    batched = SeedsTrainer(models.build(mcfg, task.spec, n_models=n_seeds), task, replace(tcfg, seeds=n_seeds), device)
    singles = [Trainer(models.build(replace(mcfg, init_seed=i), task.spec), task, replace(tcfg, seed=i), device)
               for i in range(n_seeds)]

    def run_batched() -> None:
        for _ in range(steps):
            batched.train_step()

    def run_sequential() -> None:
        for t in singles:
            for _ in range(steps):
                t.train_step()

    def eval_sequential() -> None:
        for t in singles:
            t.evaluate()

    # Warm up (first chunks of data, eval batches, allocator) before timing anything.
    for t in [batched, *singles]:
        t.train_step()
        t.evaluate()

    rates: dict[str, list[float]] = {"batched": [], "sequential": []}
    evals: dict[str, list[float]] = {"batched": [], "sequential": []}
    for _ in range(args.rounds):
        rates["batched"].append(n_seeds * steps / timed(run_batched, device))
        rates["sequential"].append(n_seeds * steps / timed(run_sequential, device))
        evals["batched"].append(timed(batched.evaluate, device))
        evals["sequential"].append(timed(eval_sequential, device))
    med = {k: statistics.median(v) for k, v in rates.items()}
    ev = {k: statistics.median(v) for k, v in evals.items()}
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"demo-size model: markov_icl k=3 order 2 length 64; 2 layers attention-only, d_model 32, 1 head; "
          f"batch 64, AdamW, grad clip 1.0; {n_seeds} seeds; median of {args.rounds} rounds of {steps} steps each")
    for k, v in med.items():
        print(f"  {k:<10} {v:8.1f} model-steps/s  ({v / n_seeds:.2f} steps/s of all {n_seeds} seeds)")
    target = 8 if device.type == "cuda" else 1.5
    print(f"batched / sequential = {med['batched'] / med['sequential']:.2f}x  (target >= {target})")
    print(f"evaluation of all seeds: batched {ev['batched']:.2f} s, sequential {ev['sequential']:.2f} s "
          f"({ev['sequential'] / ev['batched']:.2f}x)")


if __name__ == "__main__":
    main()
