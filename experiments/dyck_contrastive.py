"""Wen et al.'s contrastive regulariser on bounded Dyck (Wen, Li, Liu & Risteski 2023; seed 003): does training
with "a balanced prefix must not change the outputs" make the layer balanced, and does it generalise further?

    python -m experiments.dyck_contrastive            # CPU size: 10 seeds (300-309) with and 10 without, 360 steps
    python -m experiments.dyck_contrastive --full     # 40 seeds each (theirs), tested at 500 brackets
    python -m experiments.dyck_contrastive --smoke    # seconds; checks the pipeline only

Their setting (YuchenLi01/transformers_are_uninterpretable, config/balance_acc): Dyck_{2,4}, random prefixes of 28
brackets, the loss on the closes; a 1-layer, 1-head, width-50 attention-only transformer with no positional
encoding; Adam lr 1e-2 with cosine decay, batch 100, 10 epochs of 100k tokens (360 steps); the contrastive
objective adds 0.3 × the mean squared change of the logits when a balanced prefix of 18 brackets is prepended
(`bounded_dyck`'s `contrastive`). Not theirs: our model keeps its residual stream and learned embeddings, draws
fresh sequences every step, and one prefix per sequence (theirs one per batch). Each final model reads the same
held-out sequences as experiments/dyck_balance.py does (Yao et al.'s closing-bracket accuracy at both lengths), and
the dyck_balance probe gives its layer's balance violation. The claims and their rules are
experiments/rules/dyck_contrastive.py.

Writes OUT/dyck_contrastive.json and OUT/dyck_contrastive.png.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from experiments import harness
from experiments.dyck_balance import balance, close_acc
from mechsynth.runs.run import Run

NAME = "dyck_contrastive"
GROUPS = {"baseline": 0.0, "contrastive": 0.3}  # the regulariser's weight
PAPER_STEPS = 360

SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(seeds=2, steps=20, long=48, d_model=16, test=64, long_test=16, probe_batch=32),
    "cpu": dict(
        seeds=list(range(300, 310)), steps=360, long=400, d_model=50, test=1024, long_test=256, probe_batch=256
    ),
    "full": dict(
        seeds=list(range(300, 340)), steps=360, long=500, d_model=50, test=4096, long_test=1024, probe_batch=512
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
            "contrastive": GROUPS[group],
        },
        "model": {"n_layers": 1, "n_heads": 1, "d_model": c["d_model"], "positional": "none", "attn_only": True},
        "train": {
            "steps": c["steps"],
            "batch_size": 100,
            "optimizer": "adam",
            "lr": 1e-2,
            "schedule": "cosine",
            "eval_every": max(c["steps"] // 12, 1),
            "eval_batch_size": 128,
            "checkpoints": 6,
        },
    }


def analyse(run: Run, group: str, seed: int, c: dict[str, Any]) -> dict[str, Any]:
    model = run.trainable(run.steps[-1])
    end = balance(run, run.steps[-1], c)
    return {
        "group": group,
        "seed": seed,
        "eval": close_acc(model, run.task, "eval", c["test"]),
        "long": close_acc(model, run.task, "eval_long", c["long_test"]),
        "bv": end["bv"],
        "match_mass": end["match_mass"],
        "train_time_s": round(harness.train_seconds(run), 1),
    }


def plot(c: dict[str, Any], rows: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for gi, group in enumerate(GROUPS):
        mine = [r for r in rows if r["group"] == group]
        ax.scatter(
            [r["bv"] for r in mine],
            [r["long"] for r in mine],
            color=f"C{gi}",
            s=24,
            label=f"{group} (weight {GROUPS[group]:g})",
        )
    ax.set_xscale("log")
    ax.set_xlabel("the layer's balance violation (end)")
    ax.set_ylabel(f"close_acc at {c['long']} brackets")
    ax.legend(fontsize=8)
    ax.set_title(f"Dyck(2, 4), 1 layer, {c['steps']} steps: with and without the contrastive term", fontsize=10)
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
            f"balance violation {r['bv']:.3g}"
        )
    results = {"runs": rows, "steps": c["steps"], "paper_steps": PAPER_STEPS, "long_length": c["long"]}
    figures = [plot(c, rows, args.out / f"{NAME}.png")]
    session.finish({"size": c, "runs": {g: run_config(c, g) for g in GROUPS}}, results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
