"""Depth and test risk in over-parameterized networks (Nichani, Radhakrishnan & Uhler 2020; seed 004).

    python -m experiments.depth_risk           # CPU size: widths 32, 128; depths 1–8; 3 seeds (300–302); 128 samples
    python -m experiments.depth_risk --full    # widths 64–1024; depths 1–16; 5 seeds; 256 samples
    python -m experiments.depth_risk --smoke   # seconds; checks the pipeline only

Theirs: ResNets and fully convolutional networks on CIFAR-10 and ImageNet32, trained to fit their training sets,
test error against depth; linear convolutional networks in theory. Ours, an image-free task as the issue asks:
ReLU MLPs (the `mlp` kind, `depth` hidden layers of `width` units) fit a fixed set of samples of a single-index
model (d = 16, y = He_2(w*·x)/√2 + 0.25·ε) by full-batch Adam (lr 1e-3, constant; 2000 steps at the CPU size)
until the training loss is a small share of the targets' variance; the test risk is the squared error on 4096 held-out samples over that variance.
Each width has ≥ 4× more parameters than samples at every depth. The claim and its rule:
experiments/rules/depth_risk.py.

Writes OUT/depth_risk.json and OUT/depth_risk.png.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from experiments import harness, stats

NAME = "depth_risk"
NOISE = 0.25
VAR_Y = 1 + NOISE**2  # Var He_2(w*·x)/√2 = 1, plus the noise's

SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(widths=[16], depths=[1, 2, 3], seeds=2, steps=50, n_train=64, d=8),
    "cpu": dict(widths=[32, 128], depths=[1, 2, 3, 4, 6, 8], seeds=[300, 301, 302], steps=2000, n_train=128, d=16),
    "full": dict(
        widths=[64, 256, 1024],
        depths=[1, 2, 3, 4, 6, 8, 12, 16],
        seeds=[300, 301, 302, 303, 304],
        steps=10_000,
        n_train=256,
        d=16,
    ),
}


def config(c: dict[str, Any], width: int, depth: int) -> dict[str, Any]:
    return {
        "task": {"name": "single_index", "d": c["d"], "k_star": 2, "noise": NOISE},
        "model": {"kind": "mlp", "width": width, "depth": depth},
        "train": {
            "data": "fixed",
            "n_train": c["n_train"],
            "batch_size": c["n_train"],
            "steps": c["steps"],
            "optimizer": "adam",
            "lr": 1e-3,
            "schedule": "constant",
            "grad_clip": 0.0,
            "eval_every": max(c["steps"] // 20, 1),
            "eval_batch_size": 4096,
            "checkpoints": 4,
        },
    }


def final(run: Any, key: str) -> float:
    return next(r[key] for r in reversed(run.metrics) if key in r) / VAR_Y


def curves(run: Any) -> dict[str, list[list[float]]]:
    """[step, value / Var y] of the test risk and the training-set loss over training."""
    return {
        name: [[r["step"], r[key] / VAR_Y] for r in run.metrics if key in r]
        for name, key in (("risk", "eval/squared_error"), ("fit", "train_set/squared_error"))
    }


def plot(c: dict[str, Any], results: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, w in enumerate(c["widths"]):
        cells = [results[str(w)][str(d)] for d in c["depths"]]
        for d, cell in zip(c["depths"], cells):
            ax.scatter([d] * len(cell["risk"]), cell["risk"], color=f"C{i}", alpha=0.3, s=12)
            bx.scatter([d] * len(cell["fit"]), [max(f, 1e-6) for f in cell["fit"]], color=f"C{i}", alpha=0.5, s=12)
        ax.plot(
            c["depths"], [statistics.median(cell["risk"]) for cell in cells], "o-", color=f"C{i}", label=f"width {w}"
        )
    ax.set_xlabel("depth (hidden layers)")
    ax.set_ylabel("test risk (squared error / Var y)")
    ax.legend(fontsize=8)
    bx.set_yscale("log")
    bx.set_xlabel("depth (hidden layers)")
    bx.set_ylabel("training-set loss / Var y at the end")
    fig.suptitle(
        f"Over-parameterized ReLU MLPs fitting {c['n_train']} samples of a single-index model (d = {c['d']})",
        fontsize=10,
    )
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    c = SIZES[args.size]
    seeds = harness.seeds(c["seeds"])
    runs = session.train_runs(
        [({"width": w, "depth": d}, seed, config(c, w, d)) for w in c["widths"] for d in c["depths"] for seed in seeds]
    )
    results: dict[str, Any] = {"widths": c["widths"], "depths": c["depths"], "noise": NOISE}
    for w in c["widths"]:
        results[str(w)] = {}
        for d in c["depths"]:
            rs = [runs.run(seed, width=w, depth=d) for seed in seeds]
            results[str(w)][str(d)] = {
                "risk": [final(r, "eval/squared_error") for r in rs],
                "fit": [final(r, "train_set/squared_error") for r in rs],
                "params": rs[0].config.model.param_count(rs[0].task.spec),
                "curves": [curves(r) for r in rs],
            }
            cell = results[str(w)][str(d)]
            harness.log(
                f"width {w}, depth {d}: test risk {stats.spread(cell['risk'])['median']:.3g} "
                f"(fit {max(cell['fit']):.2g} at most)"
            )
    figures = [plot(c, results, args.out / f"{NAME}.png")]
    session.finish(
        {
            "size": c,
            "seeds": seeds,
            "runs": {f"width {w}, depth {d}": config(c, w, d) for w in c["widths"] for d in c["depths"]},
        },
        results,
        figures,
    )
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
