"""Seeds side by side vs one after another, from one run: training throughput of `train.seeds = S`.

    python -m benchmarks.seeds_speed [--seeds 32] [--device cpu|cuda] [--steps 16] [--rounds 5]

The demo-size model (`mechsynth demo`): `markov_icl` k=3, order 2, length 64; a 2-layer attention-only
transformer, d_model 32, 1 head; batch 64, AdamW, gradient clipping at 1.0. Ways to train the same
S models (init seeds 0..S-1, data seeds 0..S-1):
  batched     - one SeedsTrainer, as `train.seeds = S` runs by default: every weight stacked on a seed
                axis, one batched clip and optimizer step for all S; `seed_passes = "auto"` runs the
                forward/backward passes stacked on a GPU and, for this model, per seed on worker
                threads on a CPU (see mechsynth/training/seeds.py).
  stacked     - (CPU only) the same with `seed_passes = "stacked"`, one pass for all S, a GPU's way.
  sequential  - S ordinary Trainers, each stepped in turn: what S separate runs cost.
All count model-steps (one optimizer step of one model) per second, data generation included. Rounds
are interleaved and the ratio is the median of each round's ratio, so machine noise hits all alike.
Evaluation (each seed's 512 held-out sequences) is timed the same way and printed beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace
from typing import Any

os.environ.setdefault("TQDM_DISABLE", "1")

import torch

from mechsynth import models, tasks
from mechsynth.training.seeds import SeedsTrainer
from mechsynth.training.train import Trainer, TrainConfig


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: torch.device) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def max_seed_difference(batched: SeedsTrainer, sequential: list[Trainer]) -> float:
    """The largest |weight difference| between seed i side by side and the i-th model trained alone after the
    same steps: float rounding (tests/test_seeds.py checks it on a CPU), not a different model. Key biases are
    left out: they get no gradient in exact arithmetic, so Adam scales float noise up to ±lr steps."""
    stacked = dict(batched.module.named_parameters())
    return max(
        float((stacked[k][i] - p).detach().abs().max())
        for i, one in enumerate(sequential)
        for k, p in one.module.named_parameters()
        if not k.endswith("b_K")
    )


def measure(
    device: str | torch.device,
    n_seeds: int = 32,
    steps: int = 16,
    rounds: int = 5,
    eval_batch_size: int = 512,
    stacked: bool = True,
) -> dict[str, Any]:
    """Model-steps/s of each way (median over `rounds` interleaved rounds of `steps` steps each), each way's
    median ratio to sequential, evaluation times, and how far seed i side by side ends from model i alone
    (also what benchmarks/gpu_check.py records). `eval_batch_size`: each seed's held-out sequences (drawing
    them, Bayes predictor included, takes seconds per seed on a CPU at the default); `stacked`: on a CPU, also
    time the stacked passes a GPU runs."""
    device = torch.device(device)
    task = tasks.make("markov_icl", {"k": 3, "order": 2, "length": 64})
    mcfg = models.TransformerConfig(n_layers=2, n_heads=1, d_model=32, attn_only=True)
    tcfg = TrainConfig(batch_size=64, lr=3e-3, eval_batch_size=eval_batch_size, device=str(device))

    def side_by_side(passes: str) -> SeedsTrainer:
        cfg = replace(tcfg, seeds=n_seeds, seed_passes=passes)
        return SeedsTrainer(models.build(mcfg, task.spec, n_models=n_seeds), task, cfg, device)

    trainers: dict[str, Any] = {"batched": side_by_side("auto")}
    if device.type == "cpu" and stacked:
        trainers["stacked"] = side_by_side("stacked")
    trainers["sequential"] = [
        Trainer(models.build(replace(mcfg, init_seed=i), task.spec), task, replace(tcfg, seed=i), device)
        for i in range(n_seeds)
    ]

    def each(t: Any) -> list[Any]:
        return t if isinstance(t, list) else [t]

    def train(t: Any) -> None:
        for one in each(t):
            for _ in range(steps):
                one.train_step()

    def evaluate(t: Any) -> None:
        for one in each(t):
            one.evaluate()

    # Warm up (first chunks of data, eval batches, allocator) before timing anything.
    for t in trainers.values():
        for one in each(t):
            one.train_step()
            one.evaluate()

    rates: dict[str, list[float]] = {k: [] for k in trainers}
    evals: dict[str, list[float]] = {k: [] for k in trainers}
    for _ in range(rounds):
        for k, t in trainers.items():
            rates[k].append(n_seeds * steps / timed(lambda: train(t), device))
            evals[k].append(timed(lambda: evaluate(t), device))
    return {
        "seed_passes_auto": "stacked" if trainers["batched"].stacked_passes else "per_seed",
        "model_steps_per_s": {k: statistics.median(v) for k, v in rates.items()},
        "vs_sequential": {k: statistics.median(r / s for r, s in zip(rates[k], rates["sequential"])) for k in trainers},
        "eval_s": {k: statistics.median(v) for k, v in evals.items()},
        "eval_vs_sequential": {
            k: statistics.median(s / e for e, s in zip(evals[k], evals["sequential"])) for k in trainers
        },
        "max_weight_difference": max_seed_difference(trainers["batched"], trainers["sequential"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=32)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=16, help="steps of each model per round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    device = torch.device(args.device)
    out = measure(device, args.seeds, args.steps, args.rounds)
    print(f"seed_passes = 'auto' chose {out['seed_passes_auto']} passes")
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(
        f"demo-size model: markov_icl k=3 order 2 length 64; 2 layers attention-only, d_model 32, 1 head; "
        f"batch 64, AdamW, grad clip 1.0; {args.seeds} seeds; {args.rounds} rounds of {args.steps} steps each"
    )
    target = 8 if device.type == "cuda" else 1.5
    for k, rate in out["model_steps_per_s"].items():
        print(
            f"  {k:<10} {rate:8.1f} model-steps/s (median)  {out['vs_sequential'][k]:5.2f}x sequential"
            f"{f' (target >= {target})' if k == 'batched' else ''}; "
            f"evaluating all seeds {out['eval_s'][k]:.2f} s ({out['eval_vs_sequential'][k]:.2f}x)"
        )
    print(f"seed i side by side vs model i alone: weights differ by at most {out['max_weight_difference']:.2g}")


if __name__ == "__main__":
    main()
