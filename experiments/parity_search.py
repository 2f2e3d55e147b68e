"""Sparse parity: who learns it online, whether learning is a random search, and grokking from fixed samples.

  1. online learning (seed 000: "Train a one layer Transformer with online SGD", n = 15, k = 3; seed 001:
     a width-100 ReLU MLP on n = 40, k = 4): fresh samples every step (the task's default: `train.data`
     "online", a new batch from the data stream each step), each seed its own support S. The transformer
     is experiments/sparse_parity_hidden_progress.py's (1 layer, 4 heads, d_model 32, AdamW lr 1e-3,
     batch 32); the MLP Barak et al.'s (SGD lr 0.1, batch 32, no clipping);
  2. random search or initialization (000: "why does its trajectory depend heavily on initialization?";
     001: "Random search would look like an exponential distribution … Convergence times would depend on
     SGD's stochasticity and not purely initialization"): a grid of I initializations × D data orders of
     the width-100 ReLU MLP on n = 20, k = 3, one S. A run's seed sets train.seed (the data stream and the
     held-out batches) and model.init_seed alike, so the grid sets model.init_seed after the seed
     (`train_round`'s overrides): cell (i, d) has model.init_seed i and train.seed d. The rule
     (experiments/rules/parity_search.py) decomposes the variance of log convergence steps into init,
     data order and the rest, with permutation nulls, and tests the pooled steps against a shifted
     exponential;
  3. grokking (001: "training loss goes to 0, validation loss hits 0 much later"): a fixed training set of
     500 samples for n = 30, k = 3 (online learning of n = 30 takes ~2000 steps × 32 = 64 000 samples), a
     width-1000 ReLU MLP, SGD lr 0.1 with weight decay 0.01 (L2), each seed its own S and training set: the
     step the training set is fit (train accuracy ≥ 0.99, for good) against the step the held-out
     accuracy follows.

    python -m experiments.parity_search            # the CPU size (see below)
    python -m experiments.parity_search --full     # more seeds, a 16 × 16 grid, longer caps (a GPU)
    python -m experiments.parity_search --smoke    # seconds; checks the pipeline only

A run converges at the first evaluation with held-out accuracy ≥ 0.99 (fresh samples). Runs train in
doubling budgets, each continuing the last, until they converge (grokking: held-out ≥ 0.99 at the last
evaluation) or reach their cap, which censors them. The runs go to --runs as a sweep directory,
runs/<point>/seed_<seed> with points part=transformer,n=…,k=…; part=mlp,n=…,k=…;
part=grid,n=…,k=…,init=<model.init_seed> (seed = train.seed); part=grok,n=…,k=…,samples=…; the negative
controls (training labels flipped at random, noise 0.49, one short budget: control_cap) part=control_transformer,
control_mlp, control_grok with noise=0.49; runs
already there are reused, or continued when a longer budget asks for more steps.

CPU size (3 transformer seeds, cap 4 000; 3 MLP seeds, cap 32 000; a 10 × 10 grid, cap 8 000; 4 grokking
seeds, cap 32 000), timed one run at a time with this script's configs on this 2-core machine shared with
other jobs (load 3.5–4.5; a slower moment in brackets): the transformer 4.5 (20) ms/step, converged at 200
and 1 000 steps in two pilots (3 seeds ≥ 1 000 steps: ~15–60 s); the MLP n = 40, k = 4 0.5 (3.6) ms/step,
converged at 3 000 in a pilot, ≤ 8 000 steps expected (3 seeds: ~12–90 s); a grid cell (~1 000 steps, first
budget 2 000) 1.6 (2.3) s, 100 cells ~160–230 s; grokking 1.1 (3) ms/step to ~16 000 steps, 4 seeds ~70–190 s;
the statistics ~1 s. Serially ~4.5–9.5 minutes; on the default 2 workers ~3–5.5 minutes.

Writes OUT/parity_search.json and OUT/parity_search_{online,grid,grokking}.png.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from experiments import harness, stats, verdicts
from mechsynth.probes import formation_step
from mechsynth.runs import rundir
from mechsynth.runs.run import Run
from mechsynth.sweep.plan import plan_of_runs

NAME = "parity_search"
CONVERGED_ACC = 0.99
RULES = verdicts.rules_of(NAME)

SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(
        transformer=dict(
            n=6, k=2, seeds=[0, 1, 2], d_model=16, n_heads=2, first=100, cap=200, eval_every=20, control_cap=100
        ),
        mlp=dict(n=8, k=2, seeds=[0, 1, 2], first=200, cap=400, eval_every=20, control_cap=100),
        grid=dict(n=8, k=2, inits=[0, 1, 2, 3], data=[0, 1, 2, 3], task_seed=0, first=200, cap=400, eval_every=10),
        grok=dict(
            n=8,
            k=2,
            n_train=60,
            width=64,
            weight_decay=0.01,
            seeds=[0, 1, 2],
            first=200,
            cap=400,
            eval_every=20,
            control_cap=100,
        ),
    ),
    "cpu": dict(
        transformer=dict(
            n=15,
            k=3,
            seeds=[300, 301, 302],
            d_model=32,
            n_heads=4,
            first=1000,
            cap=4000,
            eval_every=50,
            control_cap=500,
        ),
        mlp=dict(n=40, k=4, seeds=[300, 301, 302], first=4000, cap=32000, eval_every=50, control_cap=1000),
        grid=dict(
            n=20,
            k=3,
            inits=list(range(300, 310)),
            data=list(range(300, 310)),
            task_seed=300,
            first=2000,
            cap=8000,
            eval_every=10,
        ),
        grok=dict(
            n=30,
            k=3,
            n_train=500,
            width=1000,
            weight_decay=0.01,
            seeds=[300, 301, 302, 303],
            first=4000,
            cap=32000,
            eval_every=50,
            control_cap=1000,
        ),
    ),
    "full": dict(
        transformer=dict(
            n=15,
            k=3,
            seeds=list(range(300, 308)),
            d_model=32,
            n_heads=4,
            first=1000,
            cap=64000,
            eval_every=50,
            control_cap=2000,
        ),
        mlp=dict(n=40, k=4, seeds=list(range(300, 308)), first=4000, cap=256000, eval_every=50, control_cap=4000),
        grid=dict(
            n=20,
            k=3,
            inits=list(range(300, 316)),
            data=list(range(300, 316)),
            task_seed=300,
            first=2000,
            cap=32000,
            eval_every=10,
        ),
        grok=dict(
            n=30,
            k=3,
            n_train=500,
            width=1000,
            weight_decay=0.01,
            seeds=list(range(300, 310)),
            first=4000,
            cap=128000,
            eval_every=50,
            control_cap=4000,
        ),
    ),
}


# ---- configs ------------------------------------------------------------------------------------


def transformer_config(t: dict[str, Any], seed: int, noise: float = 0.0) -> dict[str, Any]:
    """sparse_parity_hidden_progress's transformer: 1 layer, AdamW lr 1e-3, batch 32; the seed draws S. `noise`:
    the share of training labels flipped (0.49, the negative control: labels next to independent of the bits)."""
    return {
        "task": {
            "name": "sparse_parity",
            "n": t["n"],
            "k": t["k"],
            "seed": seed,
            **({"noise": noise} if noise else {}),
        },
        "model": {"n_layers": 1, "n_heads": t["n_heads"], "d_model": t["d_model"]},
        "train": {
            "batch_size": 32,
            "lr": 1e-3,
            "eval_every": t["eval_every"],
            "eval_batch_size": 512,
            "checkpoints": 2,
        },
    }


def mlp_config(n: int, k: int, task_seed: int, eval_every: int, width: int = 100, noise: float = 0.0) -> dict[str, Any]:
    """Barak et al.'s MLP: ReLU, plain SGD lr 0.1, batch 32, no clipping. Two checkpoints: nothing is probed,
    and writing them costs more than training these models. `noise`: as `transformer_config`'s."""
    return {
        "task": {"name": "sparse_parity", "n": n, "k": k, "seed": task_seed, **({"noise": noise} if noise else {})},
        "model": {"kind": "mlp", "width": width, "act_fn": "relu"},
        "train": {
            "batch_size": 32,
            "lr": 0.1,
            "optimizer": "sgd",
            "grad_clip": 0,
            "eval_every": eval_every,
            "eval_batch_size": 512,
            "checkpoints": 2,
        },
    }


def grok_config(q: dict[str, Any], seed: int, noise: float = 0.0) -> dict[str, Any]:
    """The MLP on a fixed training set of q["n_train"] samples (its own S and set per seed), with weight decay;
    the training set is evaluated whole at each evaluation (split train_set). `noise`: as `transformer_config`'s."""
    cfg = mlp_config(q["n"], q["k"], seed, q["eval_every"], q["width"], noise)
    cfg["train"].update(
        data="fixed", n_train=q["n_train"], set_seed=seed, weight_decay=q["weight_decay"], eval_batch_size=1024
    )
    return cfg


# ---- training in rounds -------------------------------------------------------------------------


def entry(
    labels: dict[str, Any],
    seed: int,
    cfg: dict[str, Any],
    q: dict[str, Any],
    kind: str,
    overrides: Optional[dict[str, Any]] = None,
    control: bool = False,
) -> dict[str, Any]:
    """One run to train in doubling budgets: kind "converge" stops at held-out ≥ 0.99 at any evaluation,
    "grok" at held-out ≥ 0.99 at the last one. A negative control (`control`) trains one budget, q["control_cap"]."""
    first, cap = (q["control_cap"], q["control_cap"]) if control else (q["first"], q["cap"])
    return {
        "labels": labels,
        "seed": seed,
        "config": cfg,
        "first": first,
        "cap": cap,
        "kind": kind,
        "overrides": overrides or {},
        "budget": None,
        "run": None,
    }


def train_round(session: harness.Session, todo: list[dict[str, Any]]) -> harness.Runs:
    """`Session.train_runs` with overrides set after the seed: the seed sets train.seed and model.init_seed
    alike, and the grid needs them apart. Every run separately (a batch of seeds side by side would step
    both seeds together)."""
    args = session.args
    specs = [
        (
            r["labels"],
            r["seed"],
            {
                **r["config"],
                "train": {**r["config"]["train"], "steps": r["budget"], "device": args.device},
                "wandb": {"project": "mechsynth-experiments"},
            },
        )
        for r in todo
    ]
    plan = plan_of_runs(NAME, specs, side_by_side=False, wandb_mode=args.wandb, resources=args.backend != "ray")
    jobs = []
    for job, r in zip(plan.jobs, todo):
        config = {section: dict(table) for section, table in job.config.items()}
        for dotted, value in r["overrides"].items():
            section, key = dotted.split(".", 1)
            config[section][key] = value
        jobs.append(replace(job, config=config))
    return session._run(replace(plan, jobs=tuple(jobs)))  # harness.Session.train_runs, less the seed's say


def converged_at(run: Run) -> Optional[int]:
    return next((r["step"] for r in run.metrics if r.get("eval/acc", 0) >= CONVERGED_ACC), None)


def done(r: dict[str, Any]) -> bool:
    if r["kind"] == "grok":
        evals = [m for m in r["run"].metrics if "eval/acc" in m]
        return bool(evals) and evals[-1]["eval/acc"] >= CONVERGED_ACC
    return converged_at(r["run"]) is not None


def train_until_done(session: harness.Session, todo: list[dict[str, Any]]) -> list[float]:
    """Budgets first, 2·first, … up to the cap, every open run's next budget in one round; sets "run"."""
    seconds = []
    while todo:
        for r in todo:
            r["budget"] = r["first"] if r["budget"] is None else min(2 * r["budget"], r["cap"])
        harness.log(f"round {len(seconds) + 1}: {len(todo)} runs")
        t = time.perf_counter()
        runs = train_round(session, todo)
        for r in todo:
            r["run"] = runs.run(r["seed"], **r["labels"])
        seconds.append(round(time.perf_counter() - t, 1))
        todo = [r for r in todo if r["budget"] < r["cap"] and not done(r)]
    return seconds


# ---- measurements -------------------------------------------------------------------------------


def online_summary(
    rs: list[dict[str, Any]], q: dict[str, Any], cfg: dict[str, Any], cap: Optional[int] = None
) -> dict[str, Any]:
    seeds = []
    for r in rs:
        evals = [m for m in r["run"].metrics if "eval/acc" in m]
        seeds.append(
            {
                "seed": r["seed"],
                "converged_at": converged_at(r["run"]),
                "last_step": evals[-1]["step"],
                "final_acc": evals[-1]["eval/acc"],
                "steps": [m["step"] for m in evals],
                "eval_acc": [m["eval/acc"] for m in evals],
            }
        )
    return {
        "n": q["n"],
        "k": q["k"],
        "cap": cap or q["cap"],
        "seeds": seeds,
        "converged_at": [s["converged_at"] for s in seeds],
        "spread": stats.spread([s["converged_at"] for s in seeds]),
        "model": cfg["model"],
        "optimizer": cfg["train"].get("optimizer", "adamw"),
        "lr": cfg["train"]["lr"],
    }


def grok_measures(run: Run) -> dict[str, Any]:
    """When the training set is fit and when the held-out accuracy follows (each ≥ 0.99 for good), and the
    held-out accuracy at the fit."""
    rs = [m for m in run.metrics if "eval/acc" in m and "train_set/acc" in m]
    steps = [m["step"] for m in rs]
    train_acc, eval_acc = [m["train_set/acc"] for m in rs], [m["eval/acc"] for m in rs]
    fit = formation_step(steps, train_acc, CONVERGED_ACC)
    gen = formation_step(steps, eval_acc, CONVERGED_ACC)
    return {
        "fit_at": fit,
        "generalized_at": gen,
        "eval_acc_at_fit": eval_acc[steps.index(fit)] if fit is not None else None,
        "ratio": gen / max(fit, 1) if None not in (fit, gen) else None,
        "last_step": steps[-1],
        "curves": {
            "steps": steps,
            "train_set_acc": train_acc,
            "eval_acc": eval_acc,
            "train_set_loss": [m["train_set/loss"] for m in rs],
            "eval_loss": [m["eval/loss"] for m in rs],
        },
    }


# ---- figures ------------------------------------------------------------------------------------


def plot_online(online: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (key, title) in zip(
        axes, (("transformer", "1-layer transformer (AdamW)"), ("mlp_k4", "width-100 ReLU MLP (SGD)"))
    ):
        o = online[key]
        for j, s in enumerate(o["seeds"]):
            ax.plot(s["steps"], s["eval_acc"], color=f"C{j}", label=f"seed {s['seed']}")
            if s["converged_at"] is not None:
                ax.axvline(s["converged_at"], color=f"C{j}", linestyle=":", linewidth=1)
        ax.axhline(0.5, color="gray", linestyle=":", linewidth=1)
        ax.set_ylim(0.4, 1.02)
        ax.set_xlabel("step (fresh batch of 32 each step)")
        done = sum(t is not None for t in o["converged_at"])
        ax.set_title(
            f"{title}: n = {o['n']}, k = {o['k']}\n{done}/{len(o['seeds'])} converged within {o['cap']} steps",
            fontsize=9,
        )
        ax.legend(fontsize=7)
    axes[0].set_ylabel("held-out accuracy")
    fig.suptitle("Sparse parity learned online (dotted: held-out accuracy ≥ 0.99)")
    return harness.save_figure(fig, path)


def plot_grid(grid: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt
    import numpy as np

    steps = np.array([[t if t is not None else grid["cap"] for t in row] for row in grid["steps"]], dtype=float)
    st, ex = grid["stats"], grid["stats"]["exponential"]
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 4.5))
    im = a1.imshow(np.log10(steps), cmap="viridis", aspect="auto")
    a1.set_xticks(range(len(grid["data"])), [str(d) for d in grid["data"]], fontsize=7)
    a1.set_yticks(range(len(grid["inits"])), [str(i) for i in grid["inits"]], fontsize=7)
    a1.set_xlabel("data order (train.seed)")
    a1.set_ylabel("initialization (model.init_seed)")
    fig.colorbar(im, ax=a1, label="log10 steps to held-out ≥ 0.99")
    an = st["anova_log_steps"]
    a1.set_title(
        f"shares of variance (log steps): init {an['share_init']:.2f} (p {st['p_init']:.3g}), "
        f"data {an['share_data']:.2f} (p {st['p_data']:.3g})",
        fontsize=8,
    )
    pooled = steps.ravel()
    a2.hist(pooled, bins=min(30, max(5, len(pooled) // 3)), density=True, color="tab:blue", alpha=0.6, label="all runs")
    xs = np.linspace(min(pooled.min(), ex["loc"]), pooled.max() * 1.1, 200)
    dens = np.where(xs >= ex["loc"], np.exp(-(xs - ex["loc"]) / max(ex["scale"], 1e-9)) / max(ex["scale"], 1e-9), 0)
    a2.plot(xs, dens, color="black", label="fitted shifted exponential")
    a2.set_xlabel("steps to held-out ≥ 0.99")
    a2.set_title(f"CV {ex['cv']:.2f} (exponential 1); KS {ex['ks']:.2f}, bootstrap p {ex['p']:.3g}", fontsize=8)
    a2.legend(fontsize=7)
    order = np.argsort(steps.mean(1))
    for pos, i in enumerate(order):
        a3.scatter([pos] * steps.shape[1], steps[i], color="tab:blue", s=10, alpha=0.6)
    a3.plot(range(len(order)), steps.mean(1)[order], color="black", marker="_", linestyle="none", markersize=14)
    a3.set_yscale("log")
    a3.set_xticks(range(len(order)), [str(grid["inits"][i]) for i in order], fontsize=7)
    a3.set_xlabel("initialization, by mean steps")
    a3.set_ylabel("steps (each point a data order)")
    fig.suptitle(
        f"Init × data order: width-100 ReLU MLP, SGD, n = {grid['n']}, k = {grid['k']} "
        f"({grid['stats']['censored']} censored at {grid['cap']})"
    )
    return harness.save_figure(fig, path)


def plot_grokking(g: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for j, s in enumerate(g["seeds"]):
        c = s["curves"]
        ax.plot(c["steps"], c["train_set_acc"], color=f"C{j}", linestyle="--", linewidth=1)
        ax.plot(c["steps"], c["eval_acc"], color=f"C{j}", label=f"seed {s['seed']}")
        for t in (s["fit_at"], s["generalized_at"]):
            if t is not None:
                ax.axvline(t, color=f"C{j}", linestyle=":", linewidth=1)
    ax.axhline(0.5, color="gray", linestyle=":", linewidth=1)
    ax.set_xscale("symlog", linthresh=g["eval_every"])  # linear up to the first evaluation
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy (dashed: training set; solid: held out)")
    ax.legend(fontsize=7)
    ax.set_title(
        f"Sparse parity n = {g['n']}, k = {g['k']} from {g['n_train']} fixed samples, width-{g['width']} MLP, "
        f"SGD + weight decay {g['weight_decay']:g}",
        fontsize=9,
    )
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    size = SIZES[args.size]
    t, m, g, q = size["transformer"], size["mlp"], size["grid"], size["grok"]
    tfs = [
        entry({"part": "transformer", "n": t["n"], "k": t["k"]}, s, transformer_config(t, s), t, "converge")
        for s in t["seeds"]
    ]
    mlps = [
        entry(
            {"part": "mlp", "n": m["n"], "k": m["k"]}, s, mlp_config(m["n"], m["k"], s, m["eval_every"]), m, "converge"
        )
        for s in m["seeds"]
    ]
    cells = {
        (i, d): entry(
            {"part": "grid", "n": g["n"], "k": g["k"], "init": i},
            d,
            mlp_config(g["n"], g["k"], g["task_seed"], g["eval_every"]),
            g,
            "converge",
            overrides={"model.init_seed": i},
        )
        for i in g["inits"]
        for d in g["data"]
    }
    groks = [
        entry({"part": "grok", "n": q["n"], "k": q["k"], "samples": q["n_train"]}, s, grok_config(q, s), q, "grok")
        for s in q["seeds"]
    ]
    # the negative controls: the same models with training labels flipped at random (noise 0.49: next to nothing
    # to learn), one short budget each (control_cap)
    shuffled = 0.49  # (the task allows noise < 0.5): the label agrees with the parity in 51 % of training examples
    tf_ctl = [
        entry(
            {"part": "control_transformer", "n": t["n"], "k": t["k"], "noise": shuffled},
            s,
            transformer_config(t, s, shuffled),
            t,
            "converge",
            control=True,
        )
        for s in t["seeds"]
    ]
    mlp_ctl = [
        entry(
            {"part": "control_mlp", "n": m["n"], "k": m["k"], "noise": shuffled},
            s,
            mlp_config(m["n"], m["k"], s, m["eval_every"], noise=shuffled),
            m,
            "converge",
            control=True,
        )
        for s in m["seeds"]
    ]
    grok_ctl = [
        entry(
            {"part": "control_grok", "n": q["n"], "k": q["k"], "samples": q["n_train"], "noise": shuffled},
            s,
            grok_config(q, s, shuffled),
            q,
            "grok",
            control=True,
        )
        for s in q["seeds"]
    ]
    seconds = train_until_done(session, [*tfs, *mlps, *cells.values(), *groks, *tf_ctl, *mlp_ctl, *grok_ctl])

    online = {
        "transformer": online_summary(tfs, t, transformer_config(t, 0)),
        "mlp_k4": online_summary(mlps, m, mlp_config(m["n"], m["k"], 0, m["eval_every"])),
    }
    for key, o in online.items():
        print(f"{key}: converged at {o['converged_at']}", file=sys.stderr)
    steps = [[converged_at(cells[i, d]["run"]) for d in g["data"]] for i in g["inits"]]
    for (i, d), r in cells.items():  # the grid is what it says: each cell's stored config has its two seeds
        stored = rundir.read_config(r["run"].path)
        if (stored["model"]["init_seed"], stored["train"]["seed"]) != (i, d):
            raise RuntimeError(
                f"{r['run'].path}: init_seed {stored['model']['init_seed']}, train.seed "
                f"{stored['train']['seed']}, not {i}, {d}"
            )
    grid = {
        "n": g["n"],
        "k": g["k"],
        "inits": g["inits"],
        "data": g["data"],
        "task_seed": g["task_seed"],
        "cap": g["cap"],
        "eval_every": g["eval_every"],
        "steps": steps,
        "stats": RULES.grid_stats(steps, g["cap"], g["eval_every"]),
    }
    print(f"grid: steps {steps}", file=sys.stderr)
    grok_seeds = [{"seed": r["seed"], **grok_measures(r["run"])} for r in groks]
    for s in grok_seeds:
        print(
            f"grok seed {s['seed']}: fit {s['fit_at']} (held-out {s['eval_acc_at_fit']}), generalized "
            f"{s['generalized_at']}",
            file=sys.stderr,
        )
    grokking = {
        "n": q["n"],
        "k": q["k"],
        "n_train": q["n_train"],
        "width": q["width"],
        "weight_decay": q["weight_decay"],
        "cap": q["cap"],
        "eval_every": q["eval_every"],
        "seeds": grok_seeds,
        "summary": {
            k: stats.spread([s[k] for s in grok_seeds])
            for k in ("fit_at", "generalized_at", "ratio", "eval_acc_at_fit")
        },
    }
    controls = {
        "noise": shuffled,
        "online": {
            "transformer": online_summary(tf_ctl, t, transformer_config(t, 0, shuffled), t["control_cap"]),
            "mlp_k4": online_summary(
                mlp_ctl, m, mlp_config(m["n"], m["k"], 0, m["eval_every"], noise=shuffled), m["control_cap"]
            ),
        },
        "grokking": {
            **{k: v for k, v in grokking.items() if k not in ("seeds", "summary", "cap")},
            "cap": q["control_cap"],
            "seeds": [{"seed": r["seed"], **grok_measures(r["run"])} for r in grok_ctl],
        },
    }
    results = {
        "online": online,
        "grid": grid,
        "grokking": grokking,
        "training_rounds_s": seconds,
        # the negative controls of the rules: labels flipped at random (experiments/rules/parity_search.py)
        "controls_labels_shuffled": controls,
    }
    figures = [
        plot_online(online, args.out / f"{NAME}_online.png"),
        plot_grid(grid, args.out / f"{NAME}_grid.png"),
        plot_grokking(grokking, args.out / f"{NAME}_grokking.png"),
    ]
    config = {
        "sizes": size,
        "converged_acc": CONVERGED_ACC,
        "transformer": transformer_config(t, 0),
        "mlp": mlp_config(m["n"], m["k"], 0, m["eval_every"]),
        "grid": {
            **mlp_config(g["n"], g["k"], g["task_seed"], g["eval_every"]),
            "note": "cell (i, d): model.init_seed = i, train.seed = d",
        },
        "grok": grok_config(q, 0),
    }
    session.finish(config, results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
