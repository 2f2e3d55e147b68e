"""Sparse parity and hidden progress (Barak et al. 2022), side by side with the paper.

  1. n = 50, k = 3 with the width-100 ReLU MLP (SGD, batch 32, lr 0.1), over several seeds, and with
     a 1-layer transformer: the loss sits at chance, then drops suddenly, while the hidden-progress
     measures (the `hidden_progress` probe: how far the input-facing weights moved since step 0, on
     the support S against off it) rise through the plateau; how well they predict the steps left;
  2. the step of convergence against n for k = 2 and k = 3 (median and spread over seeds, fitted
     exponent of n);
  3. noisy labels (a fraction of training labels flipped) still converge.

    python experiments/sparse_parity_hidden_progress.py            # the CPU configuration (5-10 min on 2 shared cores)
    python experiments/sparse_parity_hidden_progress.py --full     # larger n, more seeds, n = 50 transformer
    python experiments/sparse_parity_hidden_progress.py --smoke    # seconds; checks the pipeline only

A run converges at the first evaluation with held-out accuracy ≥ 0.99 (on clean labels). Runs train
in doubling budgets, each continuing the last, until they converge or reach a cap; a run that never
converges counts as censored. The budgets go in rounds: each round trains every run not yet converged
(or capped) to its next budget, all together (`Session.train_runs`: a local process pool, --workers;
--backend ray, --device cuda): ⌈log2(cap / first budget)⌉ + 1 rounds at most (8 at the CPU size). The
runs go to --runs as a sweep directory, runs/<point>/seed_<seed> with points
model=mlp,k=<k>,n=<n>,noise=<noise> and model=transformer,k=3,n=<n>; runs already there are reused,
and continued when a longer budget asks for more steps. (The CPU size's time was measured training one
run at a time; a round's runs now share the cores.)

Writes OUT/sparse_parity_hidden_progress.json and
OUT/sparse_parity_hidden_progress_{curves,prediction,scaling}.png.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

from mechsynth.run import Run  # noqa: E402
from mechsynth.timeline import formation_step, probe_run  # noqa: E402

NAME = "sparse_parity_hidden_progress"
CONVERGED_ACC = 0.99
LEFT_PLATEAU_LOSS = 0.65  # chance is ln 2 = 0.693
RATIO_THRESHOLDS = (1.5, 2.0)

SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(scaling={2: [6, 10], 3: [8]}, seeds=2, hp_n=8, first_budget=64, cap=256, checkpoints=20,
                  eval_every=8, eval_batch_size=256, transformer=dict(n=8, seeds=1, first_budget=32, cap=64),
                  noise=0.1, noise_seeds=1),
    "cpu": dict(scaling={2: [10, 20, 30, 40, 50], 3: [10, 20, 30, 40, 50]}, seeds=8, hp_n=50, first_budget=500,
                cap=64000, checkpoints=100, eval_every=10, eval_batch_size=1024,
                transformer=dict(n=30, seeds=1, first_budget=1000, cap=8000), noise=0.1, noise_seeds=3),
    "full": dict(scaling={2: [25, 50, 75, 100, 150, 200], 3: [20, 30, 40, 50, 70, 100]}, seeds=16, hp_n=50,
                 first_budget=1000, cap=1_000_000, checkpoints=200, eval_every=10, eval_batch_size=2048,
                 transformer=dict(n=50, seeds=3, first_budget=4000, cap=128000), noise=0.1, noise_seeds=8),
}


def mlp_config(n: int, k: int, seed: int, size: dict[str, Any], noise: float = 0.0, checkpoints: int = 4) -> dict[str, Any]:
    """Barak et al.'s MLP: width 100, ReLU, plain SGD (no clipping), batch 32, lr 0.1. The seed sets the
    support S, the initial weights and the data stream. Few checkpoints unless the run is probed:
    with these tiny models, writing checkpoints (fsync) costs more than training."""
    return {"task": {"name": "sparse_parity", "n": n, "k": k, "noise": noise, "seed": seed},
            "model": {"kind": "mlp", "width": 100, "act_fn": "relu", "init_seed": seed},
            "train": {"batch_size": 32, "lr": 0.1, "optimizer": "sgd", "grad_clip": 0, "seed": seed,
                      "eval_every": size["eval_every"], "eval_batch_size": size["eval_batch_size"],
                      "checkpoints": checkpoints}}


def transformer_config(n: int, k: int, seed: int, size: dict[str, Any]) -> dict[str, Any]:
    """A 1-layer transformer (4 heads, d_model 32, with its MLP), AdamW lr 1e-3, batch 32."""
    return {"task": {"name": "sparse_parity", "n": n, "k": k, "seed": seed},
            "model": {"n_layers": 1, "n_heads": 4, "d_model": 32, "init_seed": seed},
            "train": {"batch_size": 32, "lr": 1e-3, "seed": seed, "eval_every": 2 * size["eval_every"],
                      "eval_batch_size": min(512, size["eval_batch_size"]), "checkpoints": size["checkpoints"]}}


def probed(size: dict[str, Any], k: int, n: int) -> bool:
    """The MLP runs whose hidden progress is probed (at every one of their many checkpoints)."""
    return k == 3 and n == size["hp_n"]


def converged_at(run: Run) -> Optional[int]:
    return next((r["step"] for r in run.metrics if r.get("eval/acc", 0) >= CONVERGED_ACC), None)


def adaptive(labels: dict[str, Any], seed: int, cfg: dict[str, Any], first: int, cap: int) -> dict[str, Any]:
    """One run to train until it converges: its point (`labels`), seed, config (without steps) and budgets."""
    return {"labels": labels, "seed": seed, "config": cfg, "first": first, "cap": cap, "budget": None,
            "run": None, "converged_at": None}


def train_until_converged(session: harness.Session, todo: list[dict[str, Any]]) -> tuple[list[int], list[float]]:
    """Train each run of `todo` (see `adaptive`) in budgets first, 2·first, 4·first, ... (each continuing
    the last) until it converges or reaches its cap; sets its "run" and "converged_at". One round per
    budget: every open run's next budget trains in one `train_runs`. Returns the runs and seconds of each
    round."""
    rounds, seconds = [], []
    while todo:
        for r in todo:
            r["budget"] = r["first"] if r["budget"] is None else min(2 * r["budget"], r["cap"])
        harness.log(f"round {len(rounds) + 1}: {len(todo)} runs")
        t = time.perf_counter()
        runs = session.train_runs([(r["labels"], r["seed"], {**r["config"], "train": {**r["config"]["train"], "steps": r["budget"]}})
                                   for r in todo], seed_keys=("task.seed",))  # the seed also draws S: separate runs
        rounds.append(len(todo))
        seconds.append(round(time.perf_counter() - t, 1))
        for r in todo:
            r["run"] = runs.run(r["seed"], **r["labels"])
            r["converged_at"] = converged_at(r["run"])
        todo = [r for r in todo if r["converged_at"] is None and r["budget"] < r["cap"]]
    return rounds, seconds


# ---- hidden progress ----------------------------------------------------------------------------


def progress(run: Run, t_conv: Optional[int]) -> dict[str, Any]:
    """The loss plateau and the hidden-progress series of one run."""
    evals = [r for r in run.metrics if "eval/loss" in r]
    t_leave = next((r["step"] for r in evals if r["eval/loss"] < LEFT_PLATEAU_LOSS), None)
    plateau = [r["eval/loss"] for r in evals if t_leave and 0.1 * t_leave <= r["step"] < t_leave]
    tl = probe_run(run, ["hidden_progress"])
    hp = tl.metrics["hidden_progress"]
    steps = tl.steps
    on = [i for i, s in enumerate(steps) if t_leave and 0 < s < t_leave]  # checkpoints on the plateau
    out: dict[str, Any] = {
        "converged_at": t_conv, "left_plateau_at": t_leave,
        "plateau_loss": statistics.fmean(plateau) if plateau else None,
        # how much of training the drop takes: from leaving the plateau to converged
        "drop_fraction": (t_conv - t_leave) / t_conv if t_conv and t_leave is not None else None,
        "steps": steps, "loss": tl.loss, **{m: hp[m] for m in ("drift_inf", "drift_ratio", "drift_on_support",
                                                               "drift_off_support", "support_recovered")},
        "rank_corr_with_step_on_plateau": {m: harness.spearman([steps[i] for i in on], [hp[m][i] for i in on])
                                           for m in ("drift_inf", "drift_ratio")} if len(on) >= 3 else None,
        "support_recovered_at": formation_step(steps, hp["support_recovered"], 1.0),
    }
    for th in RATIO_THRESHOLDS:
        t = formation_step(steps, hp["drift_ratio"], th)
        out[f"ratio_{th}_at"] = t
        out[f"loss_at_ratio_{th}"] = tl.loss[steps.index(t)] if t is not None else None
    return out


def at_step(r: dict[str, Any], key: str, step: int) -> float:
    """The series `key` at the last checkpoint at or before `step`."""
    i = max(i for i, s in enumerate(r["steps"]) if s <= step)
    return r[key][i]


def prediction(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """How well the hidden-progress measures predict when a run converges, across seeds."""
    done = [r for r in runs if r["converged_at"]]
    out: dict[str, Any] = {"seeds": len(done)}
    if len(done) < 3:
        return out
    t_conv = [r["converged_at"] for r in done]
    naive = _loo_errors(t_conv, lambda others, i: statistics.median(others))
    out["naive_median_error_factor"] = harness.spread(naive)
    for th in RATIO_THRESHOLDS:
        pairs = [(r[f"ratio_{th}_at"], r["converged_at"]) for r in done if r[f"ratio_{th}_at"]]
        entry: dict[str, Any] = {"seeds_crossing": len(pairs),
                                 "fraction_of_training": harness.spread([a / b for a, b in pairs]),
                                 "loss_when_crossed": harness.spread([r[f"loss_at_ratio_{th}"] for r in done if r[f"ratio_{th}_at"]])}
        if len(pairs) >= 3:
            cross, conv = [max(1, a) for a, _ in pairs], [b for _, b in pairs]
            entry["pearson_log"] = harness.pearson([math.log(a) for a in cross], [math.log(b) for b in conv])
            # Leave one seed out: predict its convergence step as crossing step x the others' median ratio.
            errs = _loo_errors(conv, lambda others, i: cross[i] * statistics.median(
                [c / x for j, (x, c) in enumerate(zip(cross, conv)) if j != i]))
            entry["predicted_error_factor"] = harness.spread(errs)
            remaining = [c - x for x, c in zip(cross, conv)]
            entry["remaining_steps"] = harness.spread(remaining)
        out[f"drift_ratio_{th}"] = entry
    # At one early step, the same for every seed: does more hidden progress mean sooner convergence?
    t0 = max(s for s in done[0]["steps"] if s <= 0.5 * min(t_conv))
    out["fixed_step"] = {"step": t0, **{f"spearman_{m}_vs_steps_left": harness.spearman(
        [at_step(r, m, t0) for r in done], [r["converged_at"] - t0 for r in done]) for m in ("drift_inf", "drift_ratio", "loss")}}
    return out


def _loo_errors(actual: list[float], predict) -> list[float]:
    """Error factors exp|log(predicted / actual)| of leave-one-out predictions."""
    return [math.exp(abs(math.log(predict([a for j, a in enumerate(actual) if j != i], i) / actual[i])))
            for i in range(len(actual))]


# ---- scaling ------------------------------------------------------------------------------------


def scaling_summary(table: dict[int, dict[int, list[Optional[int]]]], seed: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rng = random.Random(seed)
    for k, by_n in table.items():
        rows = {n: harness.spread(v) for n, v in by_n.items()}
        fit_ns = [n for n, v in by_n.items() if all(x is not None for x in v)]
        entry: dict[str, Any] = {"by_n": {str(n): {**rows[n], "steps": v} for n, v in by_n.items()},
                                 "censored": sum(x is None for v in by_n.values() for x in v), "fitted_on_n": fit_ns}
        if len(fit_ns) >= 2:
            entry["fit_medians"] = harness.power_fit(fit_ns, [rows[n]["median"] for n in fit_ns])
            xs = [n for n in fit_ns for _ in by_n[n]]
            entry["fit_all_runs"] = harness.power_fit(xs, [t for n in fit_ns for t in by_n[n]])
            boot = []
            for _ in range(1000):  # resample seeds within each n
                meds = [statistics.median(rng.choices(by_n[n], k=len(by_n[n]))) for n in fit_ns]
                boot.append(harness.power_fit(fit_ns, meds)["exponent"])
            boot.sort()
            entry["exponent_bootstrap_90"] = [boot[50], boot[949]]
        out[str(k)] = entry
    return out


# ---- figures ------------------------------------------------------------------------------------


def plot_curves(hp: list[dict[str, Any]], tf: list[dict[str, Any]], n: int, tf_n: int, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(12, 8), sharex="col")
    for col, (runs, title) in enumerate(((hp, f"width-100 ReLU MLP, n = {n}, k = 3, {len(hp)} seeds"),
                                         (tf, f"1-layer transformer, n = {tf_n}, k = 3"))):
        for j, r in enumerate(runs):
            if not r["converged_at"]:
                continue
            x = [s / r["converged_at"] for s in r["steps"]]
            style = dict(color=f"C{j % 10}", linewidth=1)
            axes[0, col].plot(x, r["loss"], **style)
            axes[1, col].plot(x, r["drift_ratio"], **style)
            axes[2, col].plot(x, r["drift_inf"], **style)
        axes[0, col].set_title(title)
        axes[0, col].axhline(math.log(2), color="gray", linestyle=":", linewidth=1)
        axes[0, col].set_ylabel("held-out loss")
        axes[1, col].set_ylabel("drift on S / off S")
        axes[1, col].set_yscale("log")
        axes[2, col].set_ylabel("‖W_t − W_0‖∞")
        axes[2, col].set_yscale("log")  # the slow rise on the plateau is invisible on a linear axis
        axes[2, col].set_xlabel("step / step of convergence")
        for ax in axes[:, col]:
            ax.set_xlim(0, 1.3)
            ax.axvline(1.0, color="black", linestyle=":", linewidth=1)
    fig.suptitle("Sparse parity: a flat loss while the weights on the support pull ahead (hidden progress)")
    return harness.save_figure(fig, path)


def plot_prediction(hp: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    for th, marker in zip(RATIO_THRESHOLDS, "os"):
        pts = [(r[f"ratio_{th}_at"], r["converged_at"]) for r in hp if r["converged_at"] and r[f"ratio_{th}_at"]]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, label=f"drift ratio stays ≥ {th}")
    lims = [min([1] + [r["converged_at"] for r in hp if r["converged_at"]]), max([2] + [r["converged_at"] for r in hp if r["converged_at"]])]
    ax.plot(lims, lims, color="gray", linestyle=":", linewidth=1, label="y = x")
    ax.set_xlabel("step at which the hidden-progress measure crosses")
    ax.set_ylabel("step of convergence")
    ax.legend(fontsize=8)
    ax.set_title("Each point: one seed (MLP, k = 3)")
    return harness.save_figure(fig, path)


def plot_scaling(table: dict[int, dict[int, list[Optional[int]]]], summary: dict[str, Any], noisy: list[dict[str, Any]],
                 hp_n: int, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for k, by_n in table.items():
        colour = {2: "tab:blue", 3: "tab:red"}.get(k, "black")
        for n, v in by_n.items():
            ax.scatter([n] * sum(x is not None for x in v), [x for x in v if x is not None], color=colour, alpha=0.3, s=12)
        meds = [(n, summary[str(k)]["by_n"][str(n)]["median"]) for n in by_n if summary[str(k)]["by_n"][str(n)]["median"]]
        ax.plot(*zip(*meds), marker="o", color=colour, label=f"k = {k}: median")
        fit = summary[str(k)].get("fit_medians")
        if fit:
            ns = [min(by_n), max(by_n)]
            ax.plot(ns, [fit["prefactor"] * n ** fit["exponent"] for n in ns], color=colour, linestyle="--",
                    label=f"k = {k}: ∝ n^{fit['exponent']:.2f}")
    pts = [(hp_n, r["converged_at"]) for r in noisy if r["converged_at"]]
    if pts:
        ax.scatter(*zip(*pts), marker="x", color="black", label="k = 3, 10% of labels flipped")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n (input bits)")
    ax.set_ylabel("SGD steps to 99% held-out accuracy")
    ax.legend(fontsize=8)
    ax.set_title("width-100 ReLU MLP, batch 32, lr 0.1")
    return harness.save_figure(fig, path)


def main(argv: Optional[list[str]] = None) -> int:
    args = harness.parse_args(NAME, __doc__, argv)
    session = harness.Session(NAME, args)
    size, tf_size = SIZES[args.size], SIZES[args.size]["transformer"]
    mlps = {(k, n, seed): adaptive({"model": "mlp", "k": k, "n": n, "noise": 0.0}, seed,
                                   mlp_config(n, k, seed, size, checkpoints=size["checkpoints"] if probed(size, k, n) else 4),
                                   size["first_budget"], size["cap"])
            for k, ns in size["scaling"].items() for n in ns for seed in range(size["seeds"])}
    tfs = [adaptive({"model": "transformer", "k": 3, "n": tf_size["n"]}, seed, transformer_config(tf_size["n"], 3, seed, size),
                    tf_size["first_budget"], tf_size["cap"]) for seed in range(tf_size["seeds"])]
    noisy_runs = [adaptive({"model": "mlp", "k": 3, "n": size["hp_n"], "noise": size["noise"]}, seed,
                           mlp_config(size["hp_n"], 3, seed, size, noise=size["noise"]), size["first_budget"], size["cap"])
                  for seed in range(size["noise_seeds"])]
    rounds, seconds = train_until_converged(session, [*mlps.values(), *tfs, *noisy_runs])

    t = time.perf_counter()
    table: dict[int, dict[int, list[Optional[int]]]] = {}
    hp_runs = []
    for k, ns in size["scaling"].items():
        table[k] = {}
        for n in ns:
            table[k][n] = [mlps[k, n, seed]["converged_at"] for seed in range(size["seeds"])]
            if probed(size, k, n):
                hp_runs += [{"seed": seed, **progress(mlps[k, n, seed]["run"], mlps[k, n, seed]["converged_at"])}
                            for seed in range(size["seeds"])]
            print(f"MLP k={k} n={n}: converged at {table[k][n]}", file=sys.stderr)
    tf_runs = [{"seed": r["seed"], **progress(r["run"], r["converged_at"])} for r in tfs]
    print(f"transformer n={tf_size['n']}: converged at {[r['converged_at'] for r in tf_runs]}", file=sys.stderr)
    noisy = [{"seed": r["seed"], "converged_at": r["converged_at"], "clean_converged_at": table[3][size["hp_n"]][r["seed"]],
              "final_eval_acc": r["run"].metrics[-1]["eval/acc"]} for r in noisy_runs]
    print(f"noisy labels: converged at {[r['converged_at'] for r in noisy]}", file=sys.stderr)
    timings = {"training_rounds": seconds, "probes": round(time.perf_counter() - t, 1)}

    summary = scaling_summary(table)
    ratios = [r["converged_at"] / r["clean_converged_at"] for r in noisy if r["converged_at"] and r["clean_converged_at"]]
    results = {
        "hidden_progress_mlp": {"n": size["hp_n"], "k": 3, "runs": hp_runs, "prediction": prediction(hp_runs),
                                "converged_at": harness.spread([r["converged_at"] for r in hp_runs]),
                                "drop_fraction": harness.spread([r["drop_fraction"] for r in hp_runs]),
                                "support_recovered_fraction": harness.spread([r["support_recovered_at"] / r["converged_at"] for r in hp_runs
                                                                              if r["support_recovered_at"] and r["converged_at"]]),
                                "plateau_loss": harness.spread([r["plateau_loss"] for r in hp_runs]),
                                "rank_corr_drift_inf": harness.spread([(r["rank_corr_with_step_on_plateau"] or {}).get("drift_inf") for r in hp_runs]),
                                "rank_corr_drift_ratio": harness.spread([(r["rank_corr_with_step_on_plateau"] or {}).get("drift_ratio") for r in hp_runs])},
        "hidden_progress_transformer": {"n": tf_size["n"], "k": 3, "runs": tf_runs},
        "scaling": summary,
        "noisy_labels": {"noise": size["noise"], "n": size["hp_n"], "k": 3, "runs": noisy,
                         "converged": sum(r["converged_at"] is not None for r in noisy),
                         "slowdown_vs_clean_same_seed": harness.spread(ratios)},
        "runs_per_round": rounds,
        "timings_s": timings,
    }
    figures = [plot_curves(hp_runs, tf_runs, size["hp_n"], tf_size["n"], args.out / f"{NAME}_curves.png"),
               plot_prediction(hp_runs, args.out / f"{NAME}_prediction.png"),
               plot_scaling(table, summary, noisy, size["hp_n"], args.out / f"{NAME}_scaling.png")]
    config = {"sizes": {**size, "scaling": {str(k): v for k, v in size["scaling"].items()}},
              "converged_acc": CONVERGED_ACC, "left_plateau_loss": LEFT_PLATEAU_LOSS,
              "mlp": mlp_config(size["hp_n"], 3, 0, size, checkpoints=size["checkpoints"]), "transformer": transformer_config(tf_size["n"], 3, 0, size)}
    session.finish(config, results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
