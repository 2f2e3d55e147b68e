"""Progressive sharpening and the edge of stability (Cohen et al. 2021; Damian, Nichani & Lee's
self-stabilization, seed 004) on a small mechsynth run: full-batch gradient descent (plain SGD on the whole
fixed training set, no clipping, no decay) of a 2-layer attention-only transformer on in-context Markov
chains, at three step sizes η. The sharpness probe measures λ_max, the top eigenvalue of the training loss's
Hessian on that same training set, at every checkpoint; the trainer records the full-batch loss every few
steps. The theory: while λ_max < 2/η it rises (progressive sharpening) and the loss falls monotonically;
once it reaches 2/η it stops there and hovers, and the loss keeps falling but not monotonically. A step
size whose 2/η is above the sharpness at initialization and beyond the budget's reach is the control:
sharpening without an edge.

    python -m experiments.edge_of_stability            # 3 step sizes × 3 seeds (~10 min on 2 cores)
    python -m experiments.edge_of_stability --full     # longer, 5 seeds
    python -m experiments.edge_of_stability --smoke    # seconds; checks the pipeline only

Runs already in --runs are reused, and each run's sharpness timeline (its probes.json) too. The claim and
the rule that judges it are in experiments/rules/edge_of_stability.py (the harness applies it to this
script's results). The CPU and full sizes' seeds start at 300: the rule was rewritten after the runs of
seeds 0-2 and 100-102 had been seen.
Writes OUT/edge_of_stability.json and OUT/edge_of_stability.png."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from experiments import harness, stats, verdicts
from mechsynth.analysis import timeline
from mechsynth.runs.run import Run

NAME = "edge_of_stability"
RULES = verdicts.rules_of(NAME)
# seeds: a count from 0, or a list (from 300: fresh seeds for the rule of issue 46; earlier runs used 0-2, 100-102)
SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(seeds=3, lrs=(0.05, 0.1), steps=30, eval_every=2, checkpoints=8, n_train=16, length=8, d_model=8),
    "cpu": dict(
        seeds=list(range(300, 303)),
        lrs=(0.02, 0.05, 0.1),
        steps=1500,
        eval_every=5,
        checkpoints=60,
        n_train=256,
        length=32,
        d_model=32,
    ),
    "full": dict(
        seeds=list(range(300, 305)),
        lrs=(0.02, 0.05, 0.1, 0.2),
        steps=6000,
        eval_every=5,
        checkpoints=120,
        n_train=1024,
        length=32,
        d_model=64,
    ),
}
# "at the edge": λ_max within this fraction of 2/η (two readings); "reaches": first ≥ (1 - fraction) × 2/η
# from its lowest point on (sharpening towards the edge, not the initial sharpness)
NEAR = RULES.BANDS


def run_config(size: dict[str, Any], lr: float) -> dict[str, Any]:
    return {
        "task": {"name": "markov_icl", "k": 3, "length": size["length"]},
        "model": {"n_layers": 2, "n_heads": 1, "d_model": size["d_model"], "attn_only": True},
        "train": {
            "steps": size["steps"],
            "data": "fixed",
            "n_train": size["n_train"],
            "batch_size": size["n_train"],
            "optimizer": "sgd",
            "lr": lr,
            "momentum": 0.0,
            "weight_decay": 0.0,
            "grad_clip": 0,
            "eval_every": size["eval_every"],
            "eval_batch_size": 64,
            "checkpoints": size["checkpoints"],
        },
    }


def sharpness(run: Run) -> timeline.Timeline:
    """λ_max at every checkpoint (probes.json when it has it, else measured now and saved)."""
    try:
        tl = timeline.load(run.path)
        if "sharpness" in tl.metrics and tl.steps == run.steps and tl.options["sharpness"]["checkpoints"] == 0:
            return tl
    except (FileNotFoundError, ValueError, KeyError):
        pass
    tl = timeline.probe_run(run, ["sharpness"], options={"sharpness": {"checkpoints": 0}})
    timeline.save(tl, run.path)
    return tl


def analyse(run: Run) -> dict[str, Any]:
    tl = sharpness(run)
    m = tl.metrics["sharpness"]
    steps, top, limit = tl.steps, m["lambda_max"], m["stability_limit"][0]
    low = min(range(len(top)), key=top.__getitem__)
    records = [r for r in run.metrics if "train_set/loss" in r]
    loss_steps, loss = [r["step"] for r in records], [r["train_set/loss"] for r in records]
    out: dict[str, Any] = {
        "steps": steps,
        "lambda_max": top,
        "limit": limit,
        "loss_steps": loss_steps,
        "loss": loss,
        "initial": top[0],
        "min": top[low],
        "min_step": steps[low],
        "max_after_min": max(top[low:]),
        "sharpening": max(top[low:]) / top[low],
    }
    # "approach" and the per-band numbers, as the rule's negative control recomputes them against another 2/η
    out.update({k: v for k, v in RULES.edge_numbers(steps, top, loss_steps, loss, limit).items() if k != "limit"})
    out["final_loss"] = loss[-1]
    return out


def summary(res: dict[str, list[dict[str, Any]]], lrs: tuple[float, ...]) -> dict[str, Any]:
    """Each step size's spreads over seeds (no verdict: experiments/rules/edge_of_stability.py gives it)."""
    out: dict[str, Any] = {}
    for lr in lrs:
        seeds = res[str(lr)]
        c: dict[str, Any] = {
            "limit": seeds[0]["limit"],
            "initial_sharpness": stats.spread([r["initial"] for r in seeds]),
            "approach": [r["approach"] for r in seeds],
            "sharpening_factor": stats.spread([r["sharpening"] for r in seeds]),
            "max_over_limit": stats.spread([r["max_after_min"] / r["limit"] for r in seeds]),
        }
        for near in NEAR:
            k = f"near{near}"
            c[k] = {
                "reached": sum(r[k]["reached_step"] is not None for r in seeds),
                "of": len(seeds),
                "reached_step": stats.spread([r[k]["reached_step"] for r in seeds]),
                "median_ratio_after": stats.spread([r[k]["median_ratio_after"] for r in seeds]),
                "fraction_within_after": stats.spread([r[k]["fraction_within_after"] for r in seeds]),
                "loss_increases_before": [r[k]["loss_increases_before"] for r in seeds],
                "loss_increases_after": [r[k]["loss_increases_after"] for r in seeds],
                "evals_after": [r[k]["evals_after"] for r in seeds],
            }
        out[str(lr)] = c
    return out


def plot(res: dict[str, list[dict[str, Any]]], lrs: tuple[float, ...], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(lrs), figsize=(5 * len(lrs), 7), sharex=True, squeeze=False)
    for col, lr in enumerate(lrs):
        for i, r in enumerate(res[str(lr)]):
            axes[0, col].plot(r["steps"], r["lambda_max"], color=f"C{i}", label=f"seed {r['seed']}")
            axes[1, col].plot(r["loss_steps"], r["loss"], color=f"C{i}", linewidth=0.8)
        limit = res[str(lr)][0]["limit"]
        axes[0, col].axhline(limit, color="black", linestyle="--", label=f"2/η = {limit:g}")
        axes[0, col].set_title(f"full-batch GD, η = {lr}")
        axes[0, col].legend(fontsize=7)
        axes[1, col].set_xlabel("training step")  # linear: the edge is the late part of training
    axes[0, 0].set_ylabel("λ_max of the training loss's Hessian")
    axes[1, 0].set_ylabel("full-batch training loss")
    fig.suptitle("Progressive sharpening up to 2/η and the edge of stability (markov_icl, 2-layer attention-only)")
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    size = SIZES[args.size]
    specs = [({"lr": lr}, seed, run_config(size, lr)) for lr in size["lrs"] for seed in harness.seeds(size["seeds"])]
    runs = session.train_runs(specs)  # each step size's seeds side by side: the same training set, own init and order
    res: dict[str, list[dict[str, Any]]] = {}
    for lr in size["lrs"]:
        res[str(lr)] = []
        for job in runs.jobs(lr=lr):
            r = {"seed": job.seed, "run": str(args.runs / job.dir), **analyse(runs.load(job))}
            res[str(lr)].append(r)
            print(
                f"η = {lr} seed {job.seed}: λ_max {r['initial']:.1f} → min {r['min']:.1f} → max {r['max_after_min']:.1f}; "
                f"2/η = {r['limit']:.1f}",
                file=sys.stderr,
            )
    figures = [plot(res, size["lrs"], args.out / f"{NAME}.png")]
    config = {
        "size": size,
        "seeds": harness.seeds(size["seeds"]),
        "runs": {str(lr): run_config(size, lr) for lr in size["lrs"]},
        "near": NEAR,
    }
    session.finish(
        config,
        {"seeds": harness.seeds(size["seeds"]), "summary": summary(res, size["lrs"]), "step_sizes": res},
        figures,
    )
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
