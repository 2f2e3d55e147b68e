"""Sparse variable selection (Edelman et al. 2022): how many training samples a 1-layer transformer
needs to learn a 3-sparse AND of T bits, as T grows — the theory says ~log T — and whether the readout
attention concentrates on the hidden support S as it learns.

    python experiments/sparse_selection.py            # CPU size: T = 16..128, 5 seeds, 80 runs (~17 min on 2 shared cores)
    python experiments/sparse_selection.py --full     # T = 16..512, 8 seeds, wider model, finer grid, longer training (a GPU)
    python experiments/sparse_selection.py --smoke    # seconds; for the tests

For each T and seed: a task (its own S and training set), trained on fixed training sets whose sizes
come from a geometric grid. "Generalizes" = held-out accuracy (512 fresh samples) ≥ THRESHOLD at the
end of training. Assuming that larger training sets do not generalize worse, a binary search over the
grid finds n*, the smallest grid size that generalizes, in ~log2(grid) runs. Then n* is fitted
against log2 T and against T. The run at n* is probed at every checkpoint with `sparse_selection`
(attention from the readout onto S, and whether the top-|S| attended positions are exactly S); every
other run is probed at its last checkpoint.

The searches go in rounds: each round trains the next midpoint of every (T, seed) search still open,
all together (`Session.train_runs`: a local process pool, --workers; --backend ray, --device cuda),
then probes them and narrows each search: at most ceil(log2(len(grid) + 1)) rounds (5 at the CPU
size, 6 with --full). The runs go to --runs as a sweep directory, runs/T=<T>,n=<n>/seed_<seed>; runs
already there are reused. (The ~17 min of the CPU size was measured training one run at a time; a
round's runs now share the cores.)

Writes OUT/sparse_selection.json and OUT/sparse_selection_{samples,attention}.png.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

from mechsynth import timeline  # noqa: E402
from mechsynth.run import Run  # noqa: E402

NAME = "sparse_selection"
THRESHOLD = 0.99  # a model that reads exactly S computes AND exactly; 2 of the 3 bits score ~0.87
FITTED = 0.05  # final training loss below this: the model fits its training set (failures are then overfitting)


def grid(lo: int, hi: int, per_octave: int) -> list[int]:
    """Geometric grid lo..hi with `per_octave` sizes per doubling, rounded to integers."""
    out, k = [], 0
    while round(lo * 2 ** (k / per_octave)) <= hi:
        out.append(round(lo * 2 ** (k / per_octave)))
        k += 1
    return sorted(set(out))


SIZES: dict[str, dict[str, Any]] = {
    "smoke": {"lengths": [8, 16], "grid": [8, 32, 128], "seeds": [0], "d_model": 16, "n_heads": 1,
              "steps": 40, "batch_size": 16, "lr": 3e-3, "eval_batch_size": 128, "checkpoints": 4},
    "cpu": {"lengths": [16, 32, 64, 128], "grid": grid(16, 512, 3), "seeds": [0, 1, 2, 3, 4], "d_model": 32, "n_heads": 1,
            "steps": 600, "batch_size": 32, "lr": 1e-3, "eval_batch_size": 512, "checkpoints": 16},
    "full": {"lengths": [16, 32, 64, 128, 256, 512], "grid": grid(8, 2048, 4), "seeds": list(range(8)), "d_model": 64,
             "n_heads": 1, "steps": 4000, "batch_size": 64, "lr": 1e-3, "eval_batch_size": 2048, "checkpoints": 30},
}


def config(c: dict[str, Any], T: int, n: int, seed: int) -> dict[str, Any]:
    return {"task": {"name": "sparse_boolean", "length": T, "s": 3, "function": "and", "n_train": n, "seed": seed},
            "model": {"n_layers": 1, "n_heads": c["n_heads"], "d_model": c["d_model"], "init_seed": seed},
            "train": {"steps": c["steps"], "batch_size": c["batch_size"], "lr": c["lr"], "eval_every": 100,
                      "eval_batch_size": c["eval_batch_size"], "checkpoints": c["checkpoints"], "seed": seed}}


def attempt(run: Run, c: dict[str, Any], T: int, n: int, seed: int) -> dict[str, Any]:
    """Whether one trained run generalized, and where its readout attends at the end."""
    records = [r for r in run.metrics if "eval/acc" in r]
    probe = timeline.probe_run(run, ["sparse_selection"], steps=[run.steps[-1]])
    acc = records[-1]["eval/acc"]
    harness.log(f"T={T:<4} seed={seed} n_train={n:<5} held-out acc {acc:.3f}")
    return {"T": T, "seed": seed, "n_train": n, "acc": acc, "max_acc": max(r["eval/acc"] for r in records),
            "train_loss": records[-1].get("train/loss"), "fits_training_set": records[-1].get("train/loss", 1.0) < FITTED,
            "generalized": acc >= THRESHOLD,
            "attention_on_support": probe.per_head["sparse_selection"]["L0H0"][-1] if c["n_heads"] == 1
            else probe.metrics["sparse_selection"]["max"][-1],
            "support_recovered": bool(probe.metrics["sparse_selection"]["support_recovered"][-1]),
            "train_time_s": round(harness.train_seconds(run), 2), "run": run}


def smallest_generalizing(s: harness.Session, c: dict[str, Any]) -> tuple[dict[tuple[int, int], dict | None], list[dict], list[int]]:
    """Binary search over the grid, for every (T, seed), for the first size that generalizes (None: not
    even the largest). All searches take one step per round, and a round's runs train together. Returns
    the result at n* per (T, seed), every run tried (search by search, in the order tried) and the
    number of runs of each round."""
    sizes = c["grid"]
    # invariant per search: sizes[lo] fails (or lo = -1), sizes[hi] generalizes (or hi = len)
    bounds = {(T, seed): (-1, len(sizes)) for T in c["lengths"] for seed in c["seeds"]}
    found: dict[tuple[int, int], dict | None] = {key: None for key in bounds}
    tried, rounds = [], []
    while mids := {key: (lo + hi) // 2 for key, (lo, hi) in bounds.items() if hi - lo > 1}:
        harness.log(f"round {len(rounds) + 1}: {len(mids)} runs")
        runs = s.train_runs([({"T": T, "n": sizes[m]}, seed, config(c, T, sizes[m], seed)) for (T, seed), m in mids.items()],
                            seed_keys=("task.seed",))  # each seed its own S and training set
        rounds.append(len(mids))
        for (T, seed), mid in mids.items():
            result = attempt(runs.run(seed, T=T, n=sizes[mid]), c, T, sizes[mid], seed)
            tried.append(result)
            lo, hi = bounds[T, seed]
            if result["generalized"]:
                bounds[T, seed], found[T, seed] = (lo, mid), result
            else:
                bounds[T, seed] = (mid, hi)
    order = list(bounds)
    tried.sort(key=lambda r: order.index((r["T"], r["seed"])))  # stable: each search's runs in the order tried
    return found, tried, rounds


def support_timeline(result: dict[str, Any]) -> dict[str, Any]:
    """Attention on S, support recovery and held-out accuracy at every checkpoint of one run."""
    run = result["run"]
    tl = timeline.probe_run(run, ["sparse_selection"])
    acc = {r["step"]: r["eval/acc"] for r in run.metrics if "eval/acc" in r}
    per_head = tl.per_head["sparse_selection"]
    attention = per_head["L0H0"] if len(per_head) == 1 else tl.metrics["sparse_selection"]["max"]
    recovered = tl.metrics["sparse_selection"]["support_recovered"]
    return {"T": result["T"], "seed": result["seed"], "n_train": result["n_train"], "steps": tl.steps,
            "attention_on_support": [round(a, 4) for a in attention], "support_recovered": recovered,
            "acc": [acc.get(step) for step in tl.steps],
            "recovered_from_step": timeline.formation_step(tl.steps, recovered, 1.0),
            "generalized_from_step": timeline.formation_step(tl.steps, [acc.get(x, 0.0) for x in tl.steps], THRESHOLD)}


def summarize(c: dict[str, Any], found: dict[tuple[int, int], dict | None], tried: list[dict]) -> dict[str, Any]:
    per_T = {}
    for T in c["lengths"]:
        values = [found[T, seed]["n_train"] for seed in c["seeds"] if found[T, seed] is not None]
        per_T[str(T)] = {"n_star": {str(seed): found[T, seed]["n_train"] if found[T, seed] else None for seed in c["seeds"]},
                         "median": statistics.median(values) if values else None,
                         "min": min(values, default=None), "max": max(values, default=None),
                         "not_found": [seed for seed in c["seeds"] if found[T, seed] is None]}
    points = [(T, found[T, seed]["n_train"]) for T in c["lengths"] for seed in c["seeds"] if found[T, seed]]
    fits = {"n_star_vs_log2_T": harness.linear_fit([math.log2(T) for T, _ in points], [n for _, n in points]),
            "n_star_vs_T": harness.linear_fit([float(T) for T, _ in points], [n for _, n in points]),
            "points": len(points)}
    gen = [r for r in tried if r["generalized"]]
    not_gen = [r for r in tried if not r["generalized"]]
    support = {"generalized_runs": len(gen), "generalized_with_support_recovered": sum(r["support_recovered"] for r in gen),
               "failed_runs": len(not_gen), "failed_with_support_recovered": sum(r["support_recovered"] for r in not_gen),
               "mean_attention_on_support_generalized": statistics.fmean([r["attention_on_support"] for r in gen]) if gen else None,
               "mean_attention_on_support_failed": statistics.fmean([r["attention_on_support"] for r in not_gen]) if not_gen else None}
    # A failure with the training set fitted is overfitting; one without is an optimization failure.
    support["failed_runs_not_fitting_training_set"] = sum(not r["fits_training_set"] for r in not_gen)
    return {"n_star": per_T, "fits": fits, "support_at_end": support}


def plot(s: harness.Session, c: dict[str, Any], data: dict[str, Any]) -> list[Path]:
    import matplotlib.pyplot as plt

    paths = []
    fig, (ax, ax_acc) = plt.subplots(1, 2, figsize=(11, 4.2))
    lengths = c["lengths"]
    for i, seed in enumerate(c["seeds"]):
        xs = [T * (1 + 0.04 * (i - 1)) for T in lengths if data["n_star"][str(T)]["n_star"][str(seed)]]
        ys = [data["n_star"][str(T)]["n_star"][str(seed)] for T in lengths if data["n_star"][str(T)]["n_star"][str(seed)]]
        ax.scatter(xs, ys, s=18, alpha=0.6, label=f"seed {seed}")
    med = [(T, data["n_star"][str(T)]["median"]) for T in lengths if data["n_star"][str(T)]["median"]]
    ax.plot([T for T, _ in med], [m for _, m in med], "k-o", label="median")
    for key, style, label in (("n_star_vs_log2_T", "g--", "a + b log2 T"), ("n_star_vs_T", "r:", "a + b T")):
        fit = data["fits"][key]
        if fit:
            xs = [lengths[0] * (lengths[-1] / lengths[0]) ** (k / 50) for k in range(51)]
            ys = [fit["intercept"] + fit["slope"] * (math.log2(x) if "log" in key else x) for x in xs]
            ax.plot(xs, ys, style, label=f"{label} (R² {fit['r2']:.2f})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("T (input bits)")
    ax.set_ylabel(f"n*: smallest training set with held-out acc ≥ {THRESHOLD}")
    ax.set_title("samples needed to generalize, 3-sparse AND")
    ax.legend(fontsize=8)
    for k, T in enumerate(lengths):
        rows = [r for r in data["runs"] if r["T"] == T]
        ax_acc.scatter([r["n_train"] * (1 + 0.03 * (k - 1.5)) for r in rows], [r["acc"] for r in rows], s=14,
                       alpha=0.7, label=f"T={T}")
    ax_acc.axhline(THRESHOLD, color="gray", lw=0.8, ls="--")
    ax_acc.set_xscale("log", base=2)
    ax_acc.set_xlabel("training set size n (every run of the binary searches)")
    ax_acc.set_ylabel("held-out accuracy at the end of training")
    ax_acc.legend(fontsize=8)
    paths.append(harness.save_figure(fig, s.args.out / f"{NAME}_samples.png"))

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for tl in data["support_timelines"]:
        steps = [max(step, 1) for step in tl["steps"]]
        colour = f"C{c['lengths'].index(tl['T'])}"
        label = f"T={tl['T']}" if tl["seed"] == c["seeds"][0] else None
        axes[0].plot(steps, tl["attention_on_support"], color=colour, alpha=0.7, label=label)
        axes[1].plot(steps, [a if a is not None else float("nan") for a in tl["acc"]], color=colour, alpha=0.7, label=label)
    axes[0].set_ylabel("readout attention on S (sum over S)")
    axes[1].set_ylabel("held-out accuracy")
    for a in axes:
        a.set_xscale("log")
        a.set_xlabel("training step")
        a.legend(fontsize=8)
    fig.suptitle("runs at n* (one line per seed): attention concentrates on S as the model generalizes")
    paths.append(harness.save_figure(fig, s.args.out / f"{NAME}_attention.png"))
    return paths


def main(argv: list[str] | None = None) -> int:
    args = harness.parse_args(NAME, __doc__, argv)
    s = harness.Session(NAME, args)
    c = SIZES[args.size]
    found, tried, rounds = smallest_generalizing(s, c)
    results = summarize(c, found, tried)
    results["runs"] = [{k: v for k, v in r.items() if k != "run"} for r in tried]
    results["support_timelines"] = [support_timeline(found[T, seed]) for T in c["lengths"] for seed in c["seeds"]
                                    if found[T, seed]]
    results["threshold"] = THRESHOLD
    results["runs_per_round"] = rounds
    results["train_time_s_total"] = round(sum(r["train_time_s"] for r in results["runs"]), 1)
    s.finish(c, results, plot(s, c, results))
    for T in c["lengths"]:
        row = results["n_star"][str(T)]
        print(f"T={T:<4} n* per seed {row['n_star']}  median {row['median']}")
    for key, fit in results["fits"].items():
        if isinstance(fit, dict):
            print(f"{key}: slope {fit['slope']:.2f}, R² {fit['r2']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
