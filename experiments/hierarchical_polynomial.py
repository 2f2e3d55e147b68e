"""Three-layer networks learn hierarchical polynomials layerwise (Nichani, Damian & Lee 2023; Wang, Nichani & Lee 2023;
seed 004): the samples a three-layer network trained layerwise needs to recover a quadratic feature p, against d, and
whether random features (the same network, only its last layer trained) learn f* = g*(p) from as many.

    python -m experiments.hierarchical_polynomial           # CPU size: d = 8–24, n = 64 … 32768, 5 seeds (300–304; 36 min, shared)
    python -m experiments.hierarchical_polynomial --full    # d = 16–48, n up to 131072, 8 seeds (300–307; a GPU: --device cuda)
    python -m experiments.hierarchical_polynomial --smoke   # seconds; checks the pipeline only (seeds 0–1)

The seeds are set in the TOMLs (experiments/hierarchical_polynomial*.toml); runs before issue 46 used 0–4 (CPU size).

The task: x ~ N(0, I_d), p(x) = (xᵀAx − tr A)/√(2‖A‖_F²) with A of eigenvalues ±1 (full rank), f* = g*(p) with
g*(p) = (p + h₃(p) − E h₃(p))/√2 (hierarchical_polynomial, degree 3, linear 1). The network: mlp, depth 2, width 2d²,
first layer x**2, then ReLU, weights ~ N(0, 0.01²) (the theory's hidden weights start at 0). Layerwise training,
runs chained with train.init_from, each training one part (train.params), on n samples per stage:

  0. the output bias, fitted to the training set's mean in one exact step (experiments/hierarchical_polynomial.toml:
     the sweep of (d, n) × seeds): the step of stage 1 then sees the targets' quadratic part, not their sample mean,
     which a Gaussian x would otherwise carry into the layer along ‖x‖²;
  1. the hidden layer W_hidden: one full-batch gradient step of rate η = 0.1/(width · 0.01⁴) with weight decay 1/η,
     which replaces W_hidden by −η∇ (their λ = 1/η), on the same n samples;
  2. the last layer (W_out, b_out) by Adam, full batch, on n fresh samples — for claim (b) only, at n ≈ 64 d²; the
     random-features baseline is stage 2 from a default initialisation instead of stage 1.

Recovery: the feature_span probe's `top` — the held-out R² of p from the hidden layer's top principal component — at the
end of stage 1, and n* the n at which it first reaches 1/2 (interpolated in log n between the grid's powers of 2).
Not its ridge `span`: at initialisation the x**2 units already span every quadratic of x, so p is decodable from the
random layer (span ≈ 1 before any training); `top` is ≈ 0 there and high only once the layer's units are functions of
p. The claims and their rules: experiments/rules/hierarchical_polynomial.py.

Writes OUT/hierarchical_polynomial.json and OUT/hierarchical_polynomial.png.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from experiments import harness, stats, verdicts
from mechsynth.analysis import timeline
from mechsynth.runs.run import Run
from mechsynth.tasks.base import Task

NAME = "hierarchical_polynomial"
RECOVERED = 0.5  # the top-component R² of p that counts as recovered
ARMS = ("layerwise", "random_features")

# rate: stage 1's η · width · init_range⁴, the step's size against the initial weights' scale (the learned part of a
# unit's input is then of the order of its bias). Stage 2: at the grid's n nearest n_b · d², for `dims_b` (None: every
# d), Adam at each of `lrs_b`; `probe`: feature_span's samples (half fit, half scored); `mc`: samples for corr(f*, p)².
SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(rate=0.1, dims_b=[8], n_b=16, steps_b=10, lrs_b=[0.1], probe=256, mc=2**14),
    "cpu": dict(rate=0.1, dims_b=[8, 12, 16], n_b=64, steps_b=200, lrs_b=[0.01, 0.1], probe=4096, mc=2**17),
    "full": dict(rate=0.1, dims_b=None, n_b=64, steps_b=1000, lrs_b=[0.003, 0.01, 0.03, 0.1], probe=8192, mc=2**18),
}


def stage1(zero: dict[str, Any], rate: float, init_from: str) -> dict[str, Any]:
    """Stage 1 from a stage-0 run: one full-batch step on W_hidden, on the same training set."""
    lr = rate / (zero["model"]["width"] * zero["model"]["init_range"] ** 4)
    return {
        **zero,
        "train": {**zero["train"], "params": ["W_hidden"], "lr": lr, "weight_decay": 1 / lr, "init_from": init_from},
    }


def stage2(zero: dict[str, Any], arm: str, lr: float, steps: int, seed: int, init_from: str) -> dict[str, Any]:
    """Stage 2: the last layer by Adam on a fresh training set (set_seed 10000 + seed, the same for both arms), from
    stage 1 (layerwise) or from a default initialisation (random features)."""
    train = {
        **zero["train"],
        "params": ["W_out", "b_out"],
        "optimizer": "adam",
        "lr": lr,
        "steps": steps,
        "set_seed": 10_000 + seed,
        "weight_decay": 0.0,
        "eval_every": max(steps // 4, 1),
        "checkpoints": 3,
    }
    if arm == "layerwise":
        return {**zero, "train": {**train, "init_from": init_from}}
    return {**zero, "model": {**zero["model"], "init_range": None}, "train": train}


def crossing(ns: list[int], r2s: list[float], level: float = RECOVERED) -> Optional[float]:
    """The n at which R² first reaches `level`, interpolated in log n from the grid point before (ns[0] when the first
    is there already); None when no n of the grid reaches it."""
    for i, (n, r) in enumerate(zip(ns, r2s)):
        if r >= level:
            if i == 0:
                return float(n)
            a, b = r2s[i - 1], r
            t = (level - a) / (b - a)
            return float(math.exp(math.log(ns[i - 1]) + t * (math.log(n) - math.log(ns[i - 1]))))
    return None


def median(xs: list[Optional[float]]) -> Optional[float]:
    """The median counting a seed that did not recover as infinitely many samples (None when that is the median)."""
    m = statistics.median([math.inf if x is None else x for x in xs])
    return None if math.isinf(m) else m


def fit(dims: list[int], samples: dict[int, list[Optional[float]]], draws: int = 2000) -> Optional[dict[str, Any]]:
    """Slope of log median n* on log d, R², and a 95% bootstrap interval (seeds resampled within each d)."""
    medians = [median(samples[d]) for d in dims]
    if any(m is None for m in medians) or len(dims) < 2:
        return None
    f = stats.power_fit(dims, medians)
    rng, slopes = np.random.default_rng(0), []
    for _ in range(draws):
        ms = [median([samples[d][i] for i in rng.integers(0, len(samples[d]), len(samples[d]))]) for d in dims]
        if all(m is not None for m in ms):
            slopes.append(stats.power_fit(dims, ms)["exponent"])
    interval = [float(np.quantile(slopes, 0.025)), float(np.quantile(slopes, 0.975))] if slopes else None
    return {
        "slope": f["exponent"],
        "prefactor": f["prefactor"],
        "r2": f["r2"],
        "interval": interval,
        "draws_with_every_median": len(slopes),
    }


def quadratic_share(task: Task, n: int) -> float:
    """corr(f*, p)²: the share of Var f* that a function linear in p explains — what the quadratics of x (random
    features at n ≪ d^{2q}) can reach, the link's first Hermite term and p's finite-d skew."""
    b = task.sample(n, torch.Generator().manual_seed(12_345))
    p, f = b.truth["features"][:, 0].double(), b.truth["f_star"].double()
    return float(torch.corrcoef(torch.stack([p, f]))[0, 1] ** 2)


def span_at(run: Run, probe: int) -> dict[str, list[float]]:
    """feature_span's `top/p1` and `span/p1` at the run's checkpoints (stage 1: step 0, its start, and step 1)."""
    m = timeline.probe_run(run, ["feature_span"], batch_size=probe).metrics["feature_span"]
    return {"top": m["top/p1"], "span": m["span/p1"]}


def plot(results: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(15, 4.2))
    dims = results["dims"]
    for i, d in enumerate(dims):
        r = results["recovery"][str(d)]
        ns = [n / d**2 for n in r["ns"]]
        ax.plot(
            ns, [statistics.median(col) for col in zip(*r["top"])], "o-", color=f"C{i}", label=f"d = {d}: top component"
        )
        ax.plot(ns, [statistics.median(col) for col in zip(*r["span"])], ":", color=f"C{i}", alpha=0.6)
    ax.axhline(RECOVERED, color="k", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("n / d²")
    ax.set_ylabel("held-out R² of p, median over seeds\n(dotted: ridge over all units)")
    ax.legend(fontsize=7)
    have = [(d, results["recovery"][str(d)]["median"]) for d in dims if results["recovery"][str(d)]["median"]]
    for d in dims:
        xs = [x for x in results["recovery"][str(d)]["n_star"] if x is not None]
        bx.scatter([d] * len(xs), xs, color="C0", alpha=0.3, s=12)
    if have:
        bx.plot(*zip(*have), "o-", color="C0", label="median n*")
        bx.legend(fontsize=7)
    f = results["fit"]
    if f is not None:
        bx.plot(
            dims,
            [f["prefactor"] * d ** f["slope"] for d in dims],
            ":",
            color="C0",
            label=f"fit d^{f['slope']:.2f} (predicted d^{results['predicted_exponent']})",
        )
        bx.legend(fontsize=7)
    bx.set_xscale("log", base=2)
    bx.set_xlim(min(dims) / 1.2, max(dims) * 1.2)
    if any(x is not None for d in dims for x in results["recovery"][str(d)]["n_star"]):
        bx.set_yscale("log")
    else:
        bx.text(0.5, 0.5, f"no seed reached R² {RECOVERED:g} within the grid", ha="center", transform=bx.transAxes)
    bx.set_xticks(dims, [str(d) for d in dims])
    bx.minorticks_off()
    bx.set_xlabel("d")
    bx.set_ylabel(f"n* (top-component R² of p ≥ {RECOVERED:g})")
    feats = results["features"]
    for j, arm in enumerate(ARMS):
        for k, d in enumerate(feats["dims"]):
            ys = feats[str(d)][arm]["explained"]
            cx.scatter(
                [k + (j - 0.5) * 0.25] * len(ys),
                ys,
                color=f"C{j}",
                s=14,
                label=arm.replace("_", " ") if k == 0 else None,
            )
    for k, d in enumerate(feats["dims"]):
        cx.hlines(
            feats[str(d)]["quadratic_share"],
            k - 0.4,
            k + 0.4,
            color="k",
            linestyle=":",
            label="share of Var f* linear in p" if k == 0 else None,
        )
    cx.set_xticks(range(len(feats["dims"])), [f"d = {d}\nn = {feats[str(d)]['n']}" for d in feats["dims"]])
    cx.set_ylabel("held-out share of Var f* explained")
    cx.legend(fontsize=7)
    fig.suptitle(
        "Hierarchical polynomial f* = g*(p), p quadratic: layerwise training of a three-layer network", fontsize=10
    )
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    c = SIZES[args.size]
    zero = session.sweep()  # stage 0, the sweep file's grid
    jobs = {(int(j.labels["dim"]), int(j.labels["n"]), j.seed): j for j in zero.plan.jobs}
    dims, seeds = sorted({d for d, _, _ in jobs}), sorted({s for _, _, s in jobs})
    grid = {d: sorted({n for dd, n, _ in jobs if dd == d}) for d in dims}
    first = session.train_runs(
        [
            ({"stage": 1, "dim": d, "n": n}, s, stage1(j.config, c["rate"], str(args.runs / j.dir)))
            for (d, n, s), j in jobs.items()
        ]
    )

    results: dict[str, Any] = {
        "threshold": RECOVERED,
        "predicted_exponent": 2,
        "dims": dims,
        "seeds": seeds,
        "recovery": {},
    }
    for d in dims:
        per_seed = [[span_at(first.run(s, stage=1, dim=d, n=n), c["probe"]) for n in grid[d]] for s in seeds]
        top = [[m["top"][-1] for m in row] for row in per_seed]
        n_star = [crossing(grid[d], row) for row in top]
        results["recovery"][str(d)] = {
            "ns": grid[d],
            "top": top,
            "span": [[m["span"][-1] for m in row] for row in per_seed],
            "init_top": [row[0]["top"][0] for row in per_seed],
            "init_span": [row[0]["span"][0] for row in per_seed],
            "n_star": n_star,
            "censored": [x == grid[d][0] for x in n_star],
            "median": median(n_star),
        }
        harness.log(f"d={d}: median n* {verdicts.num(median(n_star))} ({verdicts.span(n_star)})")
    results["fit"] = fit(dims, {d: results["recovery"][str(d)]["n_star"] for d in dims})

    dims_b = c["dims_b"] or dims
    n_b = {d: min(grid[d], key=lambda n: abs(math.log(n / (c["n_b"] * d * d)))) for d in dims_b}
    learned = {(d, j.seed): str(args.runs / j.dir) for d in dims_b for j in first.jobs(stage=1, dim=d, n=n_b[d])}
    specs = [
        (
            {"stage": 2, "arm": arm, "dim": d, "lr": lr},
            s,
            stage2(jobs[(d, n_b[d], s)].config, arm, lr, c["steps_b"], s, learned[(d, s)]),
        )
        for d in dims_b
        for arm in ARMS
        for lr in c["lrs_b"]
        for s in seeds
    ]
    second = session.train_runs(specs)
    feats: dict[str, Any] = {"dims": dims_b}
    for d in dims_b:
        cell: dict[str, Any] = {
            "n": n_b[d],
            "quadratic_share": quadratic_share(first.run(seeds[0], stage=1, dim=d, n=n_b[d]).task, c["mc"]),
        }
        for arm in ARMS:
            by_lr = {
                lr: [second.run(s, stage=2, arm=arm, dim=d, lr=lr).metrics[-1]["eval/explained"] for s in seeds]
                for lr in c["lrs_b"]
            }
            best = max(c["lrs_b"], key=lambda lr: statistics.median(by_lr[lr]))
            cell[arm] = {
                "lr": best,
                "explained": by_lr[best],
                "median": statistics.median(by_lr[best]),
                "grid": [{"lr": lr, "explained": v} for lr, v in by_lr.items()],
            }
        feats[str(d)] = cell
        harness.log(
            f"d={d}, n={n_b[d]}: explained layerwise {cell['layerwise']['median']:.2f}, random features "
            f"{cell['random_features']['median']:.2f} (share linear in p {cell['quadratic_share']:.2f})"
        )
    results["features"] = feats
    results["budget"] = {
        "recovery": grid[dims[-1]][-1] / (dims[-1] ** 2 * math.log(dims[-1])),
        "features": n_b[dims_b[-1]] / (dims_b[-1] ** 2 * math.log(dims_b[-1])),
    }
    figures = [plot(results, args.out / f"{NAME}.png")]
    session.finish({"size": c, "seeds": seeds, "stage0": str(session.sweep_file().name), "n_b": n_b}, results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
