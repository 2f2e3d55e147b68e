"""MeZO (Malladi et al. 2023; seed 004): fine-tuning with forward passes only, at the memory of inference.

    python -m experiments.mezo_finetune            # CPU size: 3 seeds (300-302); MeZO 10k steps, Adam and SGD 1k
    python -m experiments.mezo_finetune --full     # 5 seeds; MeZO 100k steps (theirs)
    python -m experiments.mezo_finetune --smoke    # seconds; checks the pipeline only

A pretrained-then-fine-tuned setting of our own (theirs: RoBERTa-large and OPT on SST-2, SQuAD and others): a
2-layer attention-only transformer pretrained with Adam on in-context bigrams (markov_icl, k = 3, order 2), then
fine-tuned on in-context trigrams (order 3, the same vocabulary and context, so the same weights) from its last
checkpoint (`train.init_from`) three ways, each at a constant learning rate:
  - adam: backpropagation, lr 1e-3, 1k steps (their fine-tuning: Adam, 1k steps);
  - sgd: backpropagation, lr 0.1, 1k steps;
  - mezo: the `mezo` optimizer (ε = 1e-3, as theirs), lr 1e-3, 10× the steps (theirs 100×).
Each arm's held-out loss on trigrams over its steps; and, from the final weights, the peak memory of one training
step against that of one inference pass (forward and loss) on the same batch: on a CPU the running sum of the
allocations and frees torch.profiler records (profile_memory), on a GPU the CUDA allocator's peak; also the bytes a
step keeps beyond a forward pass (tensors autograd saves for backward, gradients, optimizer state).
The claims and their rules are experiments/rules/mezo_finetune.py.

Writes OUT/mezo_finetune.json and OUT/mezo_finetune.png.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import torch

from experiments import harness
from mechsynth.runs.run import Run
from mechsynth.tasks.base import masked_loss
from mechsynth.training.train import Trainer, resolve_device

NAME = "mezo_finetune"
ARMS = {
    "adam": dict(optimizer="adam", lr=1e-3),
    "sgd": dict(optimizer="sgd", lr=0.1),
    "mezo": dict(optimizer="mezo", lr=1e-3),
}

SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(seeds=2, length=12, d_model=8, pretrain=30, steps={"adam": 10, "sgd": 10, "mezo": 20}),
    "cpu": dict(
        seeds=[300, 301, 302], length=32, d_model=16, pretrain=2000, steps={"adam": 1000, "sgd": 1000, "mezo": 10_000}
    ),
    "full": dict(
        seeds=list(range(300, 305)),
        length=64,
        d_model=32,
        pretrain=10_000,
        steps={"adam": 1000, "sgd": 1000, "mezo": 100_000},
    ),
}


def base(c: dict[str, Any], order: int) -> dict[str, Any]:
    return {
        "task": {"name": "markov_icl", "k": 3, "order": order, "length": c["length"]},
        "model": {"n_layers": 2, "n_heads": 1, "d_model": c["d_model"], "attn_only": True},
    }


def pretrain_config(c: dict[str, Any]) -> dict[str, Any]:
    return {
        **base(c, 2),
        "train": {
            "steps": c["pretrain"],
            "batch_size": 64,
            "optimizer": "adam",
            "lr": 1e-3,
            "eval_every": max(c["pretrain"] // 10, 1),
            "checkpoints": 4,
        },
    }


def finetune_config(c: dict[str, Any], arm: str, init_from: str) -> dict[str, Any]:
    steps = c["steps"][arm]
    return {
        **base(c, 3),
        "train": {
            "steps": steps,
            "batch_size": 64,
            **ARMS[arm],
            "schedule": "constant",
            "grad_clip": 0.0,
            "eval_every": max(steps // 20, 1),
            "checkpoints": 4,
            "init_from": init_from,
        },
    }


def peak_above(fn: Callable[[], Any], device: torch.device) -> int:
    """The peak bytes allocated while `fn` runs, above what was allocated before it: on a GPU the CUDA allocator's
    peak; on a CPU the running sum of the allocations and frees the profiler records from PyTorch's CPU allocator
    (profile_memory), in the order they happened."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    )
    live = top = 0
    for _, nbytes in events:  # an allocation counts positive, a free negative
        live += nbytes
        top = max(top, live)
    return top


def step_memory(run: Run) -> dict[str, Any]:
    """One training step from the run's final weights, on a fresh trainer (so Adam's state and the gradients are
    allocated within it): its peak memory against that of one inference pass (the forward pass and loss, without
    autograd) on the same batch, each drawing that batch itself (data_chunk 1: the step draws one batch); then the
    bytes a step keeps beyond a forward pass: those autograd saves for backward (a saved-tensors hook), the gradients
    and the optimizer state."""
    cfg, task = run.config, run.task
    trainer = Trainer(
        run.trainable(run.steps[-1]), task, replace(cfg.train, data_chunk=1), resolve_device(cfg.train.device)
    )
    device = trainer.device

    def inference() -> None:
        generator = torch.Generator(device)
        generator.set_state(trainer.generator.get_state())  # the batch the step will draw
        with torch.no_grad():
            batch = task.sample(cfg.train.batch_size, generator, device, "train")
            masked_loss(trainer.model(batch.tokens), batch, task.loss_kind)

    inference()  # once unmeasured, so that nothing allocated once for the process counts
    peak = {
        "inference": peak_above(inference, device),
        "step": peak_above(trainer.train_step, device),
        "measure": "CUDA allocator" if device.type == "cuda" else "CPU allocator (profiler)",
    }
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        trainer.train_step()
    tensors = lambda xs: sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))  # noqa: E731
    out = {
        "saved": saved,
        "grads": tensors(p.grad for p in trainer.module.parameters()),
        "state": tensors(v for s in trainer.optimizer.state.values() for v in s.values()),
    }
    return {"memory": out, "peak": peak}


def curve(run: Run) -> list[list[float]]:
    return [[r["step"], r["eval/loss"]] for r in run.metrics if "eval/loss" in r]


def plot(c: dict[str, Any], seeds: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, arm in enumerate(ARMS):
        for j, s in enumerate(seeds):
            steps, loss = zip(*s[arm]["curve"])
            ax.plot(
                [max(x, 1) for x in steps],
                loss,
                color=f"C{i}",
                alpha=0.7,
                label=f"{arm} (lr {ARMS[arm]['lr']:g})" if j == 0 else None,
            )
    ax.axhline(
        sum(s["pretrained"] for s in seeds) / len(seeds), color="k", linestyle=":", linewidth=1, label="pretrained"
    )
    ax.set_xscale("log")
    ax.set_xlabel("fine-tuning step")
    ax.set_ylabel("held-out loss on in-context trigrams")
    ax.legend(fontsize=8)
    ax.set_title("Fine-tuning a bigram-pretrained transformer to trigrams: MeZO against backpropagation", fontsize=10)
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    c = SIZES[args.size]
    seeds = harness.seeds(c["seeds"])
    pre = session.train_runs([({"stage": "pretrain"}, seed, pretrain_config(c)) for seed in seeds])
    start = {seed: str(pre.run(seed, stage="pretrain").path) for seed in seeds}
    tuned = session.train_runs(
        [({"stage": arm}, seed, finetune_config(c, arm, start[seed])) for arm in ARMS for seed in seeds]
    )
    rows = []
    for seed in seeds:
        row: dict[str, Any] = {"seed": seed}
        for arm in ARMS:
            run = tuned.run(seed, stage=arm)
            row[arm] = {
                "final": curve(run)[-1][1],
                "curve": curve(run),
                **step_memory(run),
                "train_time_s": round(harness.train_seconds(run), 1),
            }
        row["pretrained"] = row["adam"]["curve"][0][1]  # step 0 of a fine-tuning run: the pretrained weights
        rows.append(row)
        harness.log(
            f"seed {seed}: pretrained {row['pretrained']:.4f} → "
            + ", ".join(
                f"{arm} {row[arm]['final']:.4f} (step peak {row[arm]['peak']['step'] / max(row[arm]['peak']['inference'], 1):.2f}× "
                f"inference's)"
                for arm in ARMS
            )
        )
    results = {"seeds": rows, "steps": c["steps"]}
    figures = [plot(c, rows, args.out / f"{NAME}.png")]
    session.finish(
        {
            "size": c,
            "pretrain": pretrain_config(c),
            "finetune": {arm: finetune_config(c, arm, "<the seed's pretrained run>") for arm in ARMS},
        },
        results,
        figures,
    )
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
