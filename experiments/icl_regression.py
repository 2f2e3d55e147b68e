"""In-context linear regression (seed 001): Garg et al. 2022's transformer that predicts as least squares, Raventós
et al. 2023's task-diversity threshold, and Hoogland et al. 2024's stages with the LLC beside them.

    python -m experiments.icl_regression            # CPU size: d = 5 / 4, 2-3 layer d_model 64 models, ~10k steps
    python -m experiments.icl_regression --full     # their dimensions and models, far longer (a GPU)
    python -m experiments.icl_regression --smoke    # seconds; checks the pipeline only

Three groups of runs on `linear_regression` (x, w ~ N(0, I_d); a prompt's x token (0, x), its y token (y, 0, …)):
  - garg: no noise, d = 5, k = 2d + 1 examples, Garg et al.'s "tiny" 3-layer, 2-head, d_model 64 model (theirs: d = 20,
    12 layers at lr 1e-4 for 500k steps with a curriculum; ours Adam at lr 1e-3 for 10k steps, no curriculum); the
    regression_strategy probe on held-out prompts at the last checkpoint gives the model's distance from each reference
    predictor and its normalized error at every number of examples;
  - diversity: Raventós et al.'s noise σ² = 0.25 at d = 4, k = 8 (theirs D = 8, K = 16), a 2-layer d_model 64 model,
    M = 1…256 training tasks (3 seeds each, 6400 steps); each final model on prompts of new tasks (the task's `eval` split: w from the prior):
    nearer ridge or nearer dMMSE, and how far apart ridge and dMMSE themselves are on those prompts;
  - stages: Hoogland et al.'s D = 4, K = 16, σ² = 0.125 and 2-layer, 4-head, d_model 64 model at their one-cycle lr
    (linear up to 3e-3 over the first half, down over the second), batch 64 (theirs 256), 10k steps (theirs 500k);
    the llc probe at log-spaced checkpoints, regression_strategy at every one: the LLC's stage boundaries against
    the behavioural events. SGLD at ε 1e-5, nβ 200, γ 200: at the probe's defaults (ε 1e-3, nβ 100, γ 100) every
    chain of the first analysis diverged at every checkpoint (a squared error on real targets is steeper than a
    token cross-entropy); these were chosen on seed 100's checkpoints at steps 1579 and 10000, where no chain
    diverged and both estimates are positive. Hoogland et al.'s released settings (ε 1e-6, nβ 6·10⁴, γ 6·10³)
    gave negative estimates there: the chains kept descending.
The claims and their rules are experiments/rules/icl_regression.py.

Writes OUT/icl_regression.json and OUT/icl_regression.png.
"""

from __future__ import annotations

import inspect
import math
import sys
from pathlib import Path
from typing import Any

from experiments import harness, stats
from mechsynth import probes
from mechsynth.analysis import stages, timeline
from mechsynth.runs.run import Run

NAME = "icl_regression"
PROBE_SEED = 777  # the held-out prompts: the same for every run

SGLD = dict(lr=1e-5, n_beta=200.0, localization=200.0)

SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(
        seeds=2,
        garg=dict(d=2, layers=1, heads=1, steps=20),
        diversity=dict(d=2, k=4, M=[1, 4, 16], steps=20),
        stages=dict(d=2, k=4, steps=30, batch=16),
        probe_batch=64,
        checkpoints=6,
        llc=dict(checkpoints=4, draws=10, chains=2, pool=32, batch=8),
    ),
    "cpu": dict(
        seeds=[300, 301, 302],
        garg=dict(d=5, layers=3, heads=2, steps=10_000),
        diversity=dict(d=4, k=8, M=[1, 4, 16, 64, 256], steps=6400),
        stages=dict(d=4, k=16, steps=10_000, batch=64),
        probe_batch=1024,
        checkpoints=40,
        llc=dict(checkpoints=16, chains=2, **SGLD),
    ),
    "full": dict(
        seeds=list(range(300, 305)),
        garg=dict(d=20, layers=12, heads=8, d_model=256, steps=500_000, lr=1e-4),
        diversity=dict(d=8, k=16, M=[2**i for i in range(0, 21, 2)], steps=500_000, layers=8, d_model=128, batch=256),
        stages=dict(d=4, k=16, steps=500_000, batch=256),
        probe_batch=4096,
        checkpoints=100,
        llc=dict(checkpoints=32, draws=400, **SGLD),
    ),
}
PAPER_PROMPTS = {"garg": 500_000 * 64, "diversity": 500_000 * 256, "stages": 500_000 * 256}


def train(steps: int, batch: int, lr: float, checkpoints: int, one_cycle: bool = False) -> dict[str, Any]:
    out = {
        "steps": steps,
        "batch_size": batch,
        "optimizer": "adam",
        "lr": lr,
        "eval_every": max(steps // 40, 1),
        "eval_batch_size": 512,
        "checkpoints": checkpoints,
    }
    if one_cycle:  # Hoogland et al.'s OneCycleLR, linear: up over the first half, down over the second
        out |= {"warmup_steps": steps // 2, "schedule": "linear"}
    return out


def run_configs(c: dict[str, Any]) -> list[tuple[dict[str, Any], int, dict[str, Any]]]:
    out = []
    g = c["garg"]
    garg = {
        "task": {"name": "linear_regression", "d": g["d"], "k": 2 * g["d"] + 1},
        "model": {"n_layers": g["layers"], "n_heads": g["heads"], "d_model": g.get("d_model", 64)},
        "train": train(g["steps"], 64, g.get("lr", 1e-3), c["checkpoints"]),
    }
    out += [({"group": "garg", "M": "inf"}, s, garg) for s in harness.seeds(c["seeds"])]
    v = c["diversity"]
    for M in v["M"]:
        cfg = {
            "task": {"name": "linear_regression", "d": v["d"], "k": v["k"], "noise": 0.5, "n_tasks": M},
            "model": {"n_layers": v.get("layers", 2), "n_heads": 2, "d_model": v.get("d_model", 64)},
            "train": train(v["steps"], v.get("batch", 64), 1e-3, c["checkpoints"]),
        }
        out += [({"group": "diversity", "M": str(M)}, s, cfg) for s in harness.seeds(v.get("seeds", c["seeds"]))]
    st = c["stages"]
    stages_cfg = {
        "task": {"name": "linear_regression", "d": st["d"], "k": st["k"], "noise": math.sqrt(0.125)},
        "model": {"n_layers": 2, "n_heads": 4, "d_model": 64},
        "train": train(st["steps"], st["batch"], 3e-3, c["checkpoints"], one_cycle=True),
    }
    out += [({"group": "stages", "M": "inf"}, s, stages_cfg) for s in harness.seeds(c["seeds"])]
    return out


def strategy(run: Run, step: int, c: dict[str, Any]) -> dict[str, float]:
    return probes.run(
        "regression_strategy", run.model(step), run.task, batch_size=c["probe_batch"], seed=PROBE_SEED
    ).metrics


def analyse_garg(run: Run, seed: int, c: dict[str, Any]) -> dict[str, Any]:
    m = strategy(run, run.steps[-1], c)
    to = {k[3:]: v for k, v in m.items() if k.startswith("to/") and k.count("/") == 1}
    error = [m[f"error/{n}"] for n in range(sum(k.startswith("error/") for k in m))]
    ls = least_squares_error(run, c)
    m0 = strategy(run, run.steps[0], c)  # the untrained checkpoint: the rules' negative control
    error0 = [m0[f"error/{n}"] for n in range(len(error))]
    init = {
        "to": {k[3:]: v for k, v in m0.items() if k.startswith("to/") and k.count("/") == 1},
        "gap": max(abs(e - x) for e, x in zip(error0, ls)),
    }
    return {
        "seed": seed,
        "to": to,
        "error": error,
        "least_squares_error": ls,
        "gap": max(abs(e - x) for e, x in zip(error, ls)),
        "init": init,
        "train_time_s": round(harness.train_seconds(run), 1),
    }


def least_squares_error(run: Run, c: dict[str, Any]) -> list[float]:
    """Least squares' own normalized error at each in-context length, on the probe's prompts."""
    import torch

    batch = probes.draw("data", run.model(run.steps[-1]), run.task, c["probe_batch"], PROBE_SEED)
    d = batch.truth["w"].shape[1]
    ls, y = batch.truth["least_squares"].float(), batch.targets.float()
    err = torch.where(batch.mask, (ls - y).square() / d, torch.nan)
    return [float(x) for x in err[:, batch.mask.any(0)].nanmean(0)]


def analyse_diversity(run: Run, M: int, seed: int, c: dict[str, Any]) -> dict[str, Any]:
    m = strategy(run, run.steps[-1], c)  # the task's main eval split: w from the Gaussian prior
    return {
        "M": M,
        "seed": seed,
        "to_ridge": m["to/ridge"],
        "to_dmmse": m["to/dmmse"],
        "apart": m["apart/ridge/dmmse"],
        "error": m["error"],
        "train_time_s": round(harness.train_seconds(run), 1),
    }


def analyse_stages(run: Run, seed: int, c: dict[str, Any]) -> dict[str, Any]:
    tl = probe_timeline(run, c)
    steps, rs = tl.steps, tl.metrics["regression_strategy"]
    k = max(int(key.split("/")[1]) for key in rs if key.startswith("error/"))
    names = [key[3:] for key in rs if key.startswith("to/") and key.count("/") == 1]
    ls_near = [1.0 if names[int(s)] in ("least_squares", "ridge") else 0.0 for s in rs["stage"]]
    valid = stages.series(tl)["llc"]
    kept = [s for s, v in zip(steps, valid) if v is not None and math.isfinite(v)]
    margin = inspect.signature(stages.change_points).parameters["min_size"].default
    loss = [r.get("eval/loss") for r in run.metrics if "eval/loss" in r]
    loss_steps = [r["step"] for r in run.metrics if "eval/loss" in r]
    return {
        "seed": seed,
        "steps": steps,
        "error_last": rs[f"error/{k}"],
        "stage": rs["stage"],
        "names": names,
        "llc": {
            "steps": [s for s, v in zip(steps, tl.metrics["llc"]["llc"]) if math.isfinite(v)],
            "mean": [v for v in tl.metrics["llc"]["llc"] if math.isfinite(v)],
        },
        "llc_boundaries": {"change_points": stages.change_points(steps, valid), "turns": stages.turns(steps, valid)},
        "boundary_candidates": {"change_points": kept[margin : len(kept) - margin + 1], "turns": kept[1:-1]},
        "events": {
            "icl_onset": stats.stays_below(steps, rs[f"error/{k}"], 0.5),
            "ls_nearest": timeline.formation_step(steps, ls_near, 1.0),
            "loss_drop": timeline.steepest_drop(loss_steps, loss),
        },
        "train_time_s": round(harness.train_seconds(run), 1),
    }


def probe_timeline(run: Run, c: dict[str, Any]) -> timeline.Timeline:
    """regression_strategy at every checkpoint and the LLC at log-spaced ones (probes.json reused when it holds them)."""
    try:
        tl = timeline.load(run.path)
        if (
            {"llc", "regression_strategy"} <= set(tl.metrics)
            and tl.steps == run.steps
            and tl.options.get("llc") == {**tl.options["llc"], **c["llc"]}
        ):
            return tl
    except (FileNotFoundError, ValueError):
        pass
    tl = timeline.probe_run(
        run, ["regression_strategy", "llc"], batch_size=c["probe_batch"], seed=PROBE_SEED, options={"llc": c["llc"]}
    )
    timeline.save(tl, run.path)
    return tl


def plot(c: dict[str, Any], results: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    ax = axes[0]
    for i, r in enumerate(results["garg"]):
        n = range(len(r["error"]))
        ax.plot(n, r["error"], color="C0", alpha=0.7, label="transformer" if i == 0 else None)
        ax.plot(n, r["least_squares_error"], color="k", linestyle=":", label="least squares" if i == 0 else None)
    ax.axvline(results["d"], color="gray", linewidth=0.6)
    ax.set_xlabel("in-context examples")
    ax.set_ylabel("squared error / d")
    ax.set_title(f"Garg et al.: d = {results['d']}")
    ax.legend(fontsize=7)
    ax = axes[1]
    rows = results["diversity"]["rows"]
    Ms = sorted({r["M"] for r in rows})
    for key, colour in (("to_ridge", "C1"), ("to_dmmse", "C2")):
        ax.plot(
            Ms,
            [sum(r[key] for r in rows if r["M"] == m) / max(1, sum(r["M"] == m for r in rows)) for m in Ms],
            "o-",
            color=colour,
            label=f"distance to {key[3:]}",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("M, training tasks")
    ax.set_title("Raventós et al.: on new tasks")
    ax.legend(fontsize=7)
    ax = axes[2]
    twin = ax.twinx()
    for i, r in enumerate(results["stages"]):
        ax.plot(
            [max(s, 1) for s in r["steps"]],
            r["error_last"],
            color="C0",
            alpha=0.6,
            label="error, last length" if i == 0 else None,
        )
        twin.plot([max(s, 1) for s in r["llc"]["steps"]], r["llc"]["mean"], color="C3", alpha=0.6)
        for b in r["llc_boundaries"]["change_points"]:
            ax.axvline(max(b, 1), color="C3", linestyle=":", linewidth=0.6)
    ax.set_xscale("log")
    ax.set_xlabel("step")
    ax.set_title("Hoogland et al.: error (blue) and LLC (red)")
    fig.suptitle("in-context linear regression")
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    c = SIZES[args.size]
    runs = session.train_runs(run_configs(c))
    seeds = harness.seeds(c["seeds"])
    garg = [analyse_garg(runs.run(s, group="garg", M="inf"), s, c) for s in seeds]
    v = c["diversity"]
    div_rows = [
        analyse_diversity(runs.run(s, group="diversity", M=str(M)), M, s, c)
        for M in v["M"]
        for s in harness.seeds(v.get("seeds", c["seeds"]))
    ]
    stage_rows = [analyse_stages(runs.run(s, group="stages", M="inf"), s, c) for s in seeds]
    budget = {
        "garg": c["garg"]["steps"] * 64 / PAPER_PROMPTS["garg"],
        "diversity": v["steps"] * v.get("batch", 64) / PAPER_PROMPTS["diversity"],
        "stages": c["stages"]["steps"] * c["stages"]["batch"] / PAPER_PROMPTS["stages"],
    }
    results = {
        "d": c["garg"]["d"],
        "garg": garg,
        "diversity": {"M": v["M"], "rows": div_rows},
        "stages": stage_rows,
        "budget": budget,
    }
    for r in garg:
        harness.log(
            f"garg seed {r['seed']}: nearest {min(r['to'], key=r['to'].get)}, largest gap to least squares "
            f"{r['gap']:.3f}"
        )
    figures = [plot(c, results, args.out / f"{NAME}.png")]
    configs = {f"{labels['group']}/M={labels['M']}": cfg for labels, _, cfg in run_configs(c)}
    session.finish({"size": c, "runs": configs}, results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
