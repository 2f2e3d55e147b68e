"""Grokking (Power et al. 2022) and its progress measures (Nanda et al. 2023), and grokking on sparse parity.

  1. phases: a 1-layer transformer on c = a + b mod p from a fixed fraction of the pairs, full batch,
     AdamW with weight decay (examples/modular_arithmetic.toml; --full: Nanda et al.'s p = 113,
     train_frac 0.3, d_model 128, d_mlp 512). Per seed, over checkpoints: train and test loss, the
     `fourier` probe's key frequencies, restricted and excluded loss for the final checkpoint's key
     frequencies (as Nanda et al. fix them), and the sum of squared weights; the step where each phase
     begins — memorization, circuit formation, cleanup — under an absolute and a relative definition
     (EVENTS), and whether they come in Nanda et al.'s order with their signatures.
  2. grid: Power et al.'s dependence on the data fraction and weight decay: steps until the held-out
     accuracy reaches 0.99 (and 0.9) for train_frac × weight_decay, seeds side by side per cell (a
     smaller p for the CPU); runs that never get there are censored at the step cap.
  3. parity: sparse parity from a fixed training set (seed 001: "training loss goes to 0, validation loss
     hits 0 much later"): when the training set is fit and when the held-out accuracy follows, and the
     hidden-progress measures across the gap.

    python -m experiments.grokking            # CPU size
    python -m experiments.grokking --full     # Nanda et al.'s size, a finer grid, more seeds (a GPU)
    python -m experiments.grokking --smoke    # seconds; checks the pipeline only

Writes OUT/grokking.json and OUT/grokking_{phases,grid,parity}.png.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Optional

import torch

from experiments import harness, stats
from mechsynth import config as config_io
from mechsynth.analysis.timeline import formation_step, probe_run
from mechsynth.probes import fourier
from mechsynth.runs.run import Run

NAME = "grokking"
BASE = harness.EXAMPLES / "modular_arithmetic.toml"

SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(
        phases=dict(
            seeds=2,
            task={"p": 13, "train_frac": 0.6},
            model={"d_model": 16, "d_mlp": 32, "n_heads": 2},
            train={"steps": 150, "eval_every": 10, "checkpoints": 8},
        ),
        grid=dict(
            p=11,
            fracs=[0.5, 0.7],
            decays=[0.3, 1.0],
            seeds=2,
            steps=80,
            model={"d_model": 16, "d_mlp": 32, "n_heads": 2},
        ),
        parity=dict(n=8, k=2, width=32, n_train=200, seeds=2, steps=200, eval_every=10),
    ),
    # seeds: a count (0, 1, ...) or a list; from 300 at the sizes the rules (experiments/rules/grokking.py) judge,
    # so that their runs are not the ones the rules were written after (seeds 0-2, then 100-102 for issue 46)
    "cpu": dict(
        phases=dict(seeds=[300, 301, 302], task={}, model={}, train={}),
        grid=dict(p=31, fracs=[0.3, 0.5, 0.7], decays=[0.1, 0.3, 1.0], seeds=[300, 301, 302], steps=10000, model={}),
        parity=dict(n=30, k=3, width=100, n_train=3000, seeds=[300, 301, 302], steps=10000, eval_every=50),
    ),
    "full": dict(
        phases=dict(
            seeds=[300, 301, 302, 303, 304],
            task={"p": 113, "train_frac": 0.3},
            model={"d_model": 128, "d_mlp": 512},
            train={"steps": 40000, "eval_every": 100, "checkpoints": 200},
        ),
        grid=dict(
            p=97,
            fracs=[0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8],
            decays=[0.0, 0.1, 0.3, 1.0, 3.0],
            seeds=[300, 301, 302, 303, 304],
            steps=30000,
            model={"d_model": 128, "d_mlp": 512},
        ),
        parity=dict(n=40, k=3, width=1000, n_train=10000, seeds=list(range(300, 308)), steps=80000, eval_every=100),
    ),
}

# When each phase begins, for good (the first step from which the condition holds to the end), under an
# absolute threshold and one relative to the run's own curve ("x% of the way" in log loss).
EVENTS = {
    "memorized": {
        "absolute": "train accuracy ≥ 0.99",
        "loss": "train loss ≤ 0.01 nats",
        "relative": "train loss below 1% of its initial value",
    },
    "circuit": {
        "absolute": "restricted loss (final key frequencies) ≤ 1 nat",
        "loss": "restricted loss ≤ 0.1 nats",
        "relative": "restricted loss 50% of the way (log) from its value when memorized to its final value",
    },
    "grokked": {
        "absolute": "test accuracy ≥ 0.5",
        "loss": "test loss ≤ 1 nat",
        "relative": "test loss 50% of the way (log) from its peak to its final value",
    },
    "clean": {
        "absolute": "test accuracy ≥ 0.99",
        "loss": "test loss ≤ 0.01 nats",
        "relative": "test loss 90% of the way (log) from its peak to its final value",
    },
}
DEFINITIONS = ("absolute", "loss", "relative")


def with_updates(base: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    return {s: {**base.get(s, {}), **sections.get(s, {})} for s in {*base, *sections}}


def phases_config(size: dict[str, Any]) -> dict[str, Any]:
    base = config_io.read_toml(BASE)
    ph = size["phases"]
    return with_updates(base, task=ph["task"], model=ph["model"], train=ph["train"])


def grid_config(size: dict[str, Any], frac: float, decay: float) -> dict[str, Any]:
    g = size["grid"]
    eval_every = max(10, g["steps"] // 100)
    return with_updates(
        config_io.read_toml(BASE),
        task={"p": g["p"], "train_frac": frac},
        model=g["model"],
        train={"weight_decay": decay, "steps": g["steps"], "eval_every": eval_every, "checkpoints": 4},
    )


def parity_config(size: dict[str, Any]) -> dict[str, Any]:
    q = size["parity"]
    return {
        "task": {"name": "sparse_parity", "n": q["n"], "k": q["k"]},
        "model": {"kind": "mlp", "width": q["width"]},
        "train": {
            "steps": q["steps"],
            "data": "fixed",
            "n_train": q["n_train"],
            "batch_size": 32,
            "optimizer": "sgd",
            "lr": 0.1,
            "grad_clip": 0,
            "eval_every": q["eval_every"],
            "eval_batch_size": 1024,
            "checkpoints": 60,
        },
        "wandb": {"project": "mechsynth-grokking"},
    }


# ---- the analysis --------------------------------------------------------------------------------


def first_for_good(steps: list[int], ok: list[bool]) -> Optional[int]:
    return formation_step(steps, [1.0 if o else 0.0 for o in ok], 0.5)


def log_way(values: list[float], start: float, end: float, fraction: float) -> list[bool]:
    """Whether each value has come `fraction` of the way from start to end, in log loss."""
    ls, le = math.log(max(start, 1e-12)), math.log(max(end, 1e-12))
    return [math.log(max(v, 1e-12)) <= ls + fraction * (le - ls) for v in values]


def events(c: dict[str, list[float]], steps: list[int]) -> dict[str, dict[str, Optional[int]]]:
    """The step each phase begins (EVENTS), by each definition, from a run's checkpoint curves."""
    out: dict[str, dict[str, Optional[int]]] = {e: {} for e in EVENTS}
    out["memorized"]["absolute"] = first_for_good(steps, [a >= 0.99 for a in c["train_acc"]])
    out["memorized"]["loss"] = first_for_good(steps, [v <= 0.01 for v in c["train_loss"]])
    out["memorized"]["relative"] = first_for_good(steps, [v <= 0.01 * c["train_loss"][0] for v in c["train_loss"]])
    r = c["restricted_loss"]
    out["circuit"]["absolute"] = first_for_good(steps, [v <= 1.0 for v in r])
    out["circuit"]["loss"] = first_for_good(steps, [v <= 0.1 for v in r])
    i_mem = steps.index(out["memorized"]["relative"]) if out["memorized"]["relative"] is not None else 0
    out["circuit"]["relative"] = first_for_good(steps, log_way(r, r[i_mem], r[-1], 0.5)) if r[i_mem] > r[-1] else None
    peak = max(range(len(steps)), key=lambda i: c["test_loss"][i])
    after = lambda ok: [o and i >= peak for i, o in enumerate(ok)]  # noqa: E731
    out["grokked"]["absolute"] = first_for_good(steps, [a >= 0.5 for a in c["test_acc"]])
    out["grokked"]["loss"] = first_for_good(steps, [v <= 1.0 for v in c["test_loss"]])
    out["grokked"]["relative"] = first_for_good(
        steps, after(log_way(c["test_loss"], c["test_loss"][peak], c["test_loss"][-1], 0.5))
    )
    out["clean"]["absolute"] = first_for_good(steps, [a >= 0.99 for a in c["test_acc"]])
    out["clean"]["loss"] = first_for_good(steps, [v <= 0.01 for v in c["test_loss"]])
    out["clean"]["relative"] = first_for_good(
        steps, after(log_way(c["test_loss"], c["test_loss"][peak], c["test_loss"][-1], 0.9))
    )
    return out


@torch.no_grad()
def curves(run: Run, keys: list[int]) -> dict[str, list[float]]:
    """Per checkpoint, on every pair: train/test loss and accuracy, restricted and excluded loss for the
    key frequencies `keys`, and the sum of squared weights (every parameter, as Nanda et al.)."""
    task = run.task
    batch = task.enumerate("all")
    p, linear = int(batch.truth["modulus"]), tuple(batch.truth["linear"])
    in_train = fourier.to_grid(batch.truth["in_train"], batch.truth["a"], batch.truth["b"], p)
    answer = fourier.to_grid(batch.targets[:, -1], batch.truth["a"], batch.truth["b"], p)
    out: dict[str, list[float]] = {
        k: []
        for k in (
            "train_loss",
            "test_loss",
            "train_acc",
            "test_acc",
            "restricted_loss",
            "restricted_test_loss",
            "excluded_loss",
            "weight_norm_sq",
        )
    }
    for step in run.steps:
        model = run.trainable(step)
        grid = fourier.logits_on_all(model, task)
        for k, v in fourier.losses(grid, keys, linear, in_train).items():
            out[k].append(v)
        right = grid.argmax(-1) == answer
        out["train_acc"].append(float(right[in_train].float().mean()))
        out["test_acc"].append(float(right[~in_train].float().mean()))
        out["weight_norm_sq"].append(float(sum(w.double().pow(2).sum() for w in model.parameters())))
    return out


def analyse_phases(run: Run) -> dict[str, Any]:
    tl = probe_run(run, ["fourier"])
    m = tl.metrics["fourier"]
    keys = fourier.final_keys(m)
    c = curves(run, keys)
    ev = events(c, run.steps)
    at = lambda key, step: c[key][run.steps.index(step)] if step is not None else None  # noqa: E731
    order = {
        d: all(
            ev[a][d] is not None and ev[b][d] is not None and ev[a][d] <= ev[b][d]
            for a, b in (("memorized", "circuit"), ("circuit", "grokked"), ("grokked", "clean"))
        )
        for d in DEFINITIONS
    }
    wn = c["weight_norm_sq"]
    top = max(range(len(wn)), key=wn.__getitem__)
    return {
        "steps": run.steps,
        "curves": c,
        "key_frequencies": keys,
        "n_key_frequencies": len(keys),
        "key_frequencies_over_training": [int(v) for v in m["n_key_freqs"]],
        "gini_embed": m["gini_embed"],
        "events": ev,
        "in_order": order,
        # held-out accuracy when the training set is fit (chance 1/p): grokking has it near chance
        "test_acc_at_memorized": at("test_acc", ev["memorized"]["absolute"]),
        # the signatures of each phase, at the absolute definitions' steps
        "excluded_loss_at": {e: at("excluded_loss", ev[e]["absolute"]) for e in ("memorized", "grokked")},
        "weight_norm_sq_at": {e: at("weight_norm_sq", ev[e]["relative"]) for e in ("memorized", "grokked", "clean")},
        # Nanda et al.: the weights grow while memorizing, then weight decay shrinks them through circuit
        # formation and cleanup
        "weight_norm_peak_step": run.steps[top],
        "weight_norm_end_over_peak": wn[-1] / wn[top],
        "restricted_minus_test_at_grokked": (
            at("restricted_loss", ev["grokked"]["absolute"]) - at("test_loss", ev["grokked"]["absolute"])
            if ev["grokked"]["absolute"] is not None
            else None
        ),
    }


def summarise_phases(seeds: list[dict[str, Any]], p: int) -> dict[str, Any]:
    n = len(seeds)
    spread = lambda xs: stats.spread(xs)  # noqa: E731
    ev = {e: {d: spread([s["events"][e][d] for s in seeds]) for d in DEFINITIONS} for e in EVENTS}
    excluded_rises = [
        s["excluded_loss_at"]["grokked"] is not None
        and s["excluded_loss_at"]["memorized"] is not None
        and s["excluded_loss_at"]["grokked"] > s["excluded_loss_at"]["memorized"]
        for s in seeds
    ]
    # the norm peaks after memorization (relative) and before the test loss is half-way down, then falls
    norm_falls = [
        None not in (s["events"]["memorized"]["relative"], s["events"]["grokked"]["relative"])
        and s["events"]["memorized"]["relative"] <= s["weight_norm_peak_step"] <= s["events"]["grokked"]["relative"]
        and s["weight_norm_end_over_peak"] < 1
        for s in seeds
    ]
    restricted_first = [
        s["restricted_minus_test_at_grokked"] is not None and s["restricted_minus_test_at_grokked"] < 0 for s in seeds
    ]
    return {
        "seeds": n,
        "seed_list": [s.get("seed") for s in seeds],
        "p": p,
        "chance_acc": 1 / p,
        "events": ev,
        "in_order": {d: sum(s["in_order"][d] for s in seeds) for d in DEFINITIONS},
        "excluded_loss_rises_memorized_to_grokked": sum(excluded_rises),
        "weight_norm_peaks_between_memorized_and_grokked_then_falls": sum(norm_falls),
        "weight_norm_peak_step": spread([s["weight_norm_peak_step"] for s in seeds]),
        "weight_norm_end_over_peak": spread([s["weight_norm_end_over_peak"] for s in seeds]),
        "restricted_below_test_when_grokked": sum(restricted_first),
        "n_key_frequencies": spread([s["n_key_frequencies"] for s in seeds]),
        "key_frequencies": [s["key_frequencies"] for s in seeds],
        "final_test_acc": spread([s["curves"]["test_acc"][-1] for s in seeds]),
        "test_acc_at_memorized": spread([s["test_acc_at_memorized"] for s in seeds]),
        "excluded_loss_at_grokked": spread([s["excluded_loss_at"]["grokked"] for s in seeds]),
        "excluded_loss_at_memorized": spread([s["excluded_loss_at"]["memorized"] for s in seeds]),
        "chance_loss": math.log(p),
    }


def generalized_at(run: Run, acc: float) -> Optional[int]:
    steps = [r["step"] for r in run.metrics if "eval/acc" in r]
    return first_for_good(steps, [r["eval/acc"] >= acc for r in run.metrics if "eval/acc" in r])


def analyse_grid(runs: harness.Runs, g: dict[str, Any]) -> dict[str, Any]:
    cells = {}
    for frac in g["fracs"]:
        for decay in g["decays"]:
            rs = [runs.run(s, frac=frac, decay=decay) for s in harness.seeds(g["seeds"])]
            final = [[r["eval/acc"] for r in run.metrics if "eval/acc" in r][-1] for run in rs]
            cells[f"{frac},{decay}"] = {
                "frac": frac,
                "weight_decay": decay,
                "final_test_acc": final,
                "median_final_test_acc": stats.spread(final)["median"],
                **{f"steps_to_{a}": [generalized_at(r, float(a)) for r in rs] for a in ("0.99", "0.9")},
            }
    for c in cells.values():
        for a in ("0.99", "0.9"):
            c[f"median_{a}"] = (
                stats.spread(c[f"steps_to_{a}"])["median"] if all(v is not None for v in c[f"steps_to_{a}"]) else None
            )  # a censored seed: no median below the cap
    out: dict[str, Any] = {
        "cap": g["steps"],
        "p": g["p"],
        "seeds": harness.seeds(g["seeds"]),
        "chance_acc": 1 / g["p"],
        "cells": cells,
    }
    for a in ("0.99", "0.9"):
        t = lambda c: c[f"median_{a}"] if c[f"median_{a}"] is not None else 2 * g["steps"]  # noqa: E731 (censored: last)
        by_frac = [stats.spearman(g["fracs"], [t(cells[f"{f},{d}"]) for f in g["fracs"]]) for d in g["decays"]]
        by_decay = [stats.spearman(g["decays"], [t(cells[f"{f},{d}"]) for d in g["decays"]]) for f in g["fracs"]]
        out[f"spearman_steps_vs_frac_per_decay_{a}"] = by_frac
        out[f"spearman_steps_vs_decay_per_frac_{a}"] = by_decay
        out[f"censored_{a}"] = sum(v is None for c in cells.values() for v in c[f"steps_to_{a}"])
    # where most runs are censored, the held-out accuracy reached by the cap still orders the cells
    acc = lambda f, d: cells[f"{f},{d}"]["median_final_test_acc"]  # noqa: E731
    out["spearman_final_acc_vs_frac_per_decay"] = [
        stats.spearman(g["fracs"], [acc(f, d) for f in g["fracs"]]) for d in g["decays"]
    ]
    out["spearman_final_acc_vs_decay_per_frac"] = [
        stats.spearman(g["decays"], [acc(f, d) for d in g["decays"]]) for f in g["fracs"]
    ]
    return out


def analyse_parity(run: Run) -> dict[str, Any]:
    rs = [r for r in run.metrics if "eval/acc" in r]
    steps = [r["step"] for r in rs]
    fit = first_for_good(steps, [r["train_set/acc"] >= 0.99 for r in rs])
    gen = first_for_good(steps, [r["eval/acc"] >= 0.99 for r in rs])
    tl = probe_run(run, ["hidden_progress"])
    hp = tl.metrics["hidden_progress"]
    near = lambda t: min(range(len(tl.steps)), key=lambda i: abs(tl.steps[i] - t)) if t is not None else None  # noqa: E731
    at = lambda key, t: hp[key][near(t)] if t is not None else None  # noqa: E731
    return {
        "fit_at": fit,
        "generalized_at": gen,
        "gap": (gen - fit) if None not in (fit, gen) else None,
        "ratio": (gen / fit) if None not in (fit, gen) and fit > 0 else None,
        "train_loss_at_fit": rs[steps.index(fit)]["train_set/loss"] if fit is not None else None,
        "eval_acc_at_fit": rs[steps.index(fit)]["eval/acc"] if fit is not None else None,
        **{
            f"{k}_at_{e}": at(k, t)
            for k in ("drift_ratio", "topk_drift_ratio", "support_recovered")
            for e, t in (("fit", fit), ("generalized", gen))
        },
        "curves": {
            "steps": steps,
            "train_set_loss": [r["train_set/loss"] for r in rs],
            "eval_loss": [r["eval/loss"] for r in rs],
            "probe_steps": tl.steps,
            "drift_ratio": hp["drift_ratio"],
            "topk_drift_ratio": hp["topk_drift_ratio"],
        },
    }


# ---- figures -------------------------------------------------------------------------------------


def plot_phases(seeds: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(seeds), figsize=(5 * len(seeds), 7), squeeze=False, sharex=True)
    for j, s in enumerate(seeds):
        c, steps = s["curves"], s["steps"]
        ax = axes[0, j]
        for key, colour in (
            ("train_loss", "tab:blue"),
            ("test_loss", "black"),
            ("restricted_loss", "tab:green"),
            ("excluded_loss", "tab:red"),
        ):
            ax.plot(steps, c[key], color=colour, label=key.replace("_", " "))
        ax.set_yscale("log")
        ax.set_title(f"seed {s.get('seed', j)}: key frequencies {s['key_frequencies']}")
        ax2 = axes[1, j]
        ax2.plot(steps, c["weight_norm_sq"], color="tab:orange", label="Σ θ²")
        ax2.set_xlabel("training step")
        for e, colour in zip(EVENTS, ("tab:blue", "tab:green", "black", "tab:purple")):
            t = s["events"][e]["absolute"]
            if t is not None:
                for a in (ax, ax2):
                    a.axvline(t, color=colour, linestyle=":", linewidth=1, label=e if a is ax2 else None)
    axes[0, 0].set_ylabel("loss (nats)")
    axes[1, 0].set_ylabel("sum of squared weights")
    axes[0, 0].legend(fontsize=7)
    axes[1, 0].legend(fontsize=7, title="phase begins (absolute)")
    fig.suptitle(
        "Grokking a + b mod p: memorization, circuit formation, cleanup (restricted/excluded: final key frequencies)"
    )
    return harness.save_figure(fig, path)


def plot_grid(grid: dict[str, Any], g: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    values = [[grid["cells"][f"{f},{d}"]["median_0.99"] for d in g["decays"]] for f in g["fracs"]]
    shown = [[v if v is not None else float("nan") for v in row] for row in values]
    im = ax.imshow(shown, cmap="viridis_r", aspect="auto")
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            censored = sum(x is None for x in grid["cells"][f"{g['fracs'][i]},{g['decays'][j]}"]["steps_to_0.99"])
            acc = grid["cells"][f"{g['fracs'][i]},{g['decays'][j]}"]["median_final_test_acc"]
            ax.text(
                j,
                i,
                f"{v:.0f}"
                if v is not None
                else f"> cap ({censored}/{len(harness.seeds(g['seeds']))})\ntest acc {acc:.2f}",
                ha="center",
                va="center",
                fontsize=8,
                color="white" if v is not None else "black",
            )
    ax.set_xticks(range(len(g["decays"])), [str(d) for d in g["decays"]])
    ax.set_yticks(range(len(g["fracs"])), [str(f) for f in g["fracs"]])
    ax.set_xlabel("weight decay")
    ax.set_ylabel("training fraction")
    ax.set_title(f"steps until test accuracy ≥ 0.99 (median of {len(harness.seeds(g['seeds']))} seeds), p = {g['p']}")
    fig.colorbar(im, ax=ax)
    return harness.save_figure(fig, path)


def plot_parity(seeds: list[dict[str, Any]], q: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for j, s in enumerate(seeds):
        c = s["curves"]
        a1.plot(c["steps"], c["train_set_loss"], color="tab:blue", alpha=0.7, label="training set" if j == 0 else None)
        a1.plot(c["steps"], c["eval_loss"], color="black", alpha=0.7, label="held out" if j == 0 else None)
        a2.plot(
            c["probe_steps"],
            c["drift_ratio"],
            color="tab:green",
            alpha=0.7,
            label="drift_ratio (oracle)" if j == 0 else None,
        )
        a2.plot(
            c["probe_steps"],
            c["topk_drift_ratio"],
            color="tab:olive",
            linestyle="--",
            alpha=0.7,
            label="topk_drift_ratio (support-free)" if j == 0 else None,
        )
        for t, colour in ((s["fit_at"], "tab:blue"), (s["generalized_at"], "black")):
            if t is not None:
                for a in (a1, a2):
                    a.axvline(t, color=colour, linestyle=":", linewidth=1)
    a1.set_yscale("log")
    a1.set_ylabel("loss")
    a1.legend(fontsize=8)
    a2.set_ylabel("hidden progress")
    a2.set_xlabel("training step")
    a2.legend(fontsize=8)
    fig.suptitle(
        f"Sparse parity n = {q['n']}, k = {q['k']} from {q['n_train']} fixed samples, width-{q['width']} MLP "
        f"(dotted: training set fit, held-out ≥ 0.99)"
    )
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    size = SIZES[args.size]
    g, q = size["grid"], size["parity"]
    seeds = {part: harness.seeds(size[part]["seeds"]) for part in ("phases", "grid", "parity")}
    specs = [({"part": "phases"}, s, phases_config(size)) for s in seeds["phases"]]
    specs += [
        ({"part": "grid", "frac": f, "decay": d}, s, grid_config(size, f, d))
        for f in g["fracs"]
        for d in g["decays"]
        for s in seeds["grid"]
    ]
    specs += [({"part": "parity"}, s, parity_config(size)) for s in seeds["parity"]]
    runs = session.train_runs(specs)  # each point's seeds side by side

    phases = [{"seed": s, **analyse_phases(runs.run(s, part="phases"))} for s in seeds["phases"]]
    p = int(phases_config(size)["task"]["p"])
    grid = analyse_grid(runs, g)
    parity = [{"seed": s, **analyse_parity(runs.run(s, part="parity"))} for s in seeds["parity"]]
    pq = parity_config(size)
    # the setting the rule reads to tell whether it can show grokking at all (the training set's size
    # against n, and against the parameters that would memorize it)
    setting = {
        "n": q["n"],
        "k": q["k"],
        "n_train": q["n_train"],
        "width": q["width"],
        "steps": q["steps"],
        "weight_decay": pq["train"].get("weight_decay", 0.0),
        "seeds": seeds["parity"],
        "n_params": sum(t.numel() for t in runs.run(seeds["parity"][0], part="parity").trainable().parameters()),
    }
    results = {
        "phases": {"summary": summarise_phases(phases, p), "seeds": phases},
        "grid": grid,
        "parity": {
            "summary": {
                k: stats.spread([s[k] for s in parity])
                for k in (
                    "fit_at",
                    "generalized_at",
                    "gap",
                    "ratio",
                    "eval_acc_at_fit",
                    "drift_ratio_at_fit",
                    "drift_ratio_at_generalized",
                    "topk_drift_ratio_at_fit",
                    "topk_drift_ratio_at_generalized",
                )
            },
            "setting": setting,
            "seeds": parity,
        },
    }
    for line in (
        f"phases in order: {results['phases']['summary']['in_order']} of {len(seeds['phases'])}",
        f"events: {results['phases']['summary']['events']}",
        f"grid: { {k: v for k, v in grid.items() if k != 'cells'} }",
        f"parity: {results['parity']['summary']}",
    ):
        print(line)
    figures = [
        plot_phases(phases, args.out / f"{NAME}_phases.png"),
        plot_grid(grid, g, args.out / f"{NAME}_grid.png"),
        plot_parity(parity, q, args.out / f"{NAME}_parity.png"),
    ]
    config = {
        "sizes": size,
        "events": EVENTS,
        "phases": phases_config(size),
        "grid_example": grid_config(size, g["fracs"][0], g["decays"][0]),
        "parity": parity_config(size),
    }
    session.finish(config, results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
