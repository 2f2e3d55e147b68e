"""Bounded Dyck and the balanced condition (Wen, Li, Liu & Risteski 2023; seed 003): do 2-layer transformers that
learn Dyck_{2,4} balance the layer that reads depth, does balance go with length generalisation, and do they need
the stack-like attention an interpretation would look for?

    python -m experiments.dyck_balance            # CPU size: 3 architectures × 6 seeds (300-305), their 1440 steps
    python -m experiments.dyck_balance --full     # 3 × 20 seeds, tested at 500 brackets
    python -m experiments.dyck_balance --smoke    # seconds; checks the pipeline only

Their setting (YuchenLi01/transformers_are_uninterpretable, config/example/baseline: `bounded_dyck` as its defaults):
k = 2 bracket types, depth ≤ 4, random prefixes of 28 brackets, the loss on the closes only, AdamW lr 3e-3 with
cosine decay, batch 100, 1440 steps (their 40 epochs of 100k tokens), tested at the training length and at 400
brackets. Three architectures, each over seeds:
  - nope: theirs — 2 layers, 1 head, width 50, an MLP, no positional encoding;
  - rotary: the same with rotary positions;
  - attn_only: no positional encoding, no MLP.
Not theirs: our embeddings are learned (theirs frozen one-hot), our LayerNorms pre-attention and pre-MLP (theirs one,
after attention), fresh sequences every step (theirs a fixed 100k tokens). Each final model reads the same held-out
sequences (Yao et al.'s closing-bracket accuracy at both lengths), and the dyck_balance probe gives its last layer's
balance violation, at step 0 and at the end, and its heads' attention on the open a close must match. The claims
and their rules are experiments/rules/dyck_balance.py.

Writes OUT/dyck_balance.json and OUT/dyck_balance.png.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from experiments import harness
from mechsynth import probes
from mechsynth.runs.run import Run
from mechsynth.tasks.bounded_dyck import close_correct, open_positions

NAME = "dyck_balance"
GROUPS = {
    "nope": {"positional": "none"},
    "rotary": {"positional": "rotary"},
    "attn_only": {"positional": "none", "attn_only": True},
}
TEST_SEED = 4242  # the held-out sequences: the same for every run
PAPER_STEPS = 1440

SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(seeds=2, steps=20, long=48, d_model=16, test=64, long_test=16, probe_batch=32),
    "cpu": dict(
        seeds=list(range(300, 306)), steps=1440, long=400, d_model=50, test=1024, long_test=256, probe_batch=256
    ),
    "full": dict(
        seeds=list(range(300, 320)), steps=1440, long=500, d_model=50, test=4096, long_test=1024, probe_batch=512
    ),
}


def run_config(c: dict[str, Any], group: str) -> dict[str, Any]:
    return {
        "task": {
            "name": "bounded_dyck",
            "k": 2,
            "depth": 4,
            "length": 28,
            "eval_long_length": c["long"],
            "loss_on": "closes",
        },
        "model": {"n_layers": 2, "n_heads": 1, "d_model": c["d_model"], **GROUPS[group]},
        "train": {
            "steps": c["steps"],
            "batch_size": 100,
            "optimizer": "adamw",
            "lr": 3e-3,
            "schedule": "cosine",
            "eval_every": max(c["steps"] // 24, 1),
            "eval_batch_size": 128,
            "checkpoints": 12,
        },
    }


@torch.no_grad()
def close_acc(model: torch.nn.Module, task: Any, split: str, n: int) -> float:
    """Yao et al.'s closing-bracket accuracy on n held-out sequences of `split`, pooled over positions."""
    hits = total = 0
    g = torch.Generator().manual_seed(TEST_SEED)
    for start in range(0, n, 64):
        batch = task.sample(min(64, n - start), g, split=split)
        on = open_positions(batch)
        hits += int(close_correct(model(batch.tokens), batch, task.cfg.k)[on].sum())
        total += int(on.sum())
    return hits / total


def balance(run: Run, step: int, c: dict[str, Any]) -> dict[str, float]:
    m = probes.run("dyck_balance", run.model(step), run.task, batch_size=c["probe_batch"], seed=TEST_SEED).metrics
    return {"bv": m["bv"], "bv_first": m["bv/L0"], "match_mass": m["match_mass"]}


def analyse(run: Run, group: str, seed: int, c: dict[str, Any]) -> dict[str, Any]:
    model, init = run.trainable(run.steps[-1]), run.trainable(0)
    end, start = balance(run, run.steps[-1], c), balance(run, 0, c)
    return {
        "group": group,
        "seed": seed,
        "eval": close_acc(model, run.task, "eval", c["test"]),
        "long": close_acc(model, run.task, "eval_long", c["long_test"]),
        "bv": end["bv"],
        "bv_init": start["bv"],
        "bv_first": end["bv_first"],
        "bv_first_init": start["bv_first"],
        "match_mass": end["match_mass"],
        "eval_init": close_acc(init, run.task, "eval", c["test"]),
        "match_mass_init": start["match_mass"],
        "train_time_s": round(harness.train_seconds(run), 1),
    }


def plot(c: dict[str, Any], rows: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for gi, group in enumerate(GROUPS):
        mine = [r for r in rows if r["group"] == group]
        solved = [r["eval"] >= 0.99 for r in mine]
        for ax, x, xl in (
            (axes[0], "bv", "last layer's balance violation (end)"),
            (axes[1], "match_mass", "best head's attention on the matching open"),
        ):
            ax.scatter(
                [r[x] for r in mine],
                [r["long"] for r in mine],
                color=f"C{gi}",
                s=[30 if s else 10 for s in solved],
                label=group,
            )
            ax.set_xlabel(xl)
            ax.set_ylabel(f"close_acc at {c['long']} brackets")
        axes[2].scatter([r["bv_init"] for r in mine], [r["bv"] for r in mine], color=f"C{gi}", s=20, label=group)
    axes[0].set_xscale("log")  # the violation is a ratio whose denominator can near 0: unbounded, so on a log scale
    lim = [min(min(r["bv_init"], r["bv"]) for r in rows), max(max(r["bv_init"], r["bv"]) for r in rows)]
    axes[2].plot(lim, lim, "k:", linewidth=1)
    axes[2].set_xscale("log")
    axes[2].set_yscale("log")
    axes[2].set_xlabel("balance violation at step 0")
    axes[2].set_ylabel("at the end")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.suptitle(
        f"Dyck(2, 4): trained on 28 brackets, {c['steps']} steps; large markers solve the training length "
        f"(close_acc ≥ 0.99)"
    )
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    c = SIZES[args.size]
    seeds = harness.seeds(c["seeds"])
    runs = session.train_runs([({"group": g}, seed, run_config(c, g)) for g in GROUPS for seed in seeds])
    rows = [analyse(runs.run(seed, group=g), g, seed, c) for g in GROUPS for seed in seeds]
    for r in rows:
        harness.log(
            f"{r['group']} seed {r['seed']}: close_acc {r['eval']:.3f} (at {c['long']}: {r['long']:.3f}); "
            f"balance violation {r['bv_init']:.3g} → {r['bv']:.3g}; stack head {r['match_mass']:.2f}"
        )
    results = {"runs": rows, "steps": c["steps"], "paper_steps": PAPER_STEPS, "long_length": c["long"]}
    figures = [plot(c, rows, args.out / f"{NAME}.png")]
    session.finish({"size": c, "runs": {g: run_config(c, g) for g in GROUPS}}, results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
