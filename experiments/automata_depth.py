"""Automata shortcuts (Liu et al. 2023): accuracy against depth for C2, C3, D6, D8, Q8, A5 and S5,
beside the paper's table at T = 100; where each layer makes the state linearly decodable; and how the
solution holds up beyond the training length.

    python experiments/automata_depth.py           # CPU size: T = 16, depths 1/2/4, 3 seeds (2 shared cores)
    python experiments/automata_depth.py --full    # the paper's T = 100, depths 1/2/3/4/6, 3 seeds (a GPU)
    python experiments/automata_depth.py --smoke   # seconds; for the tests

The runs are the sweep experiments/automata_depth.toml (_smoke.toml, _full.toml for the other sizes),
trained into --runs on a local process pool (--workers; --backend ray, --device cuda), each point's
seeds side by side; runs already there are reused. Each (group, depth, seed) trains a transformer on
fresh sequences to predict the state after every symbol. Accuracy is over all positions of 512 held-out sequences of the training length (as in the
paper's table). Each final model is probed with `automaton_shortcut`: ridge-regression decoding of the
state from the residual stream after each layer, and accuracy on sequences twice as long.

Writes OUT/automata_depth.json and OUT/automata_depth_{accuracy,decoding,length}.png.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

from mechsynth import io, timeline  # noqa: E402

NAME = "automata_depth"

# Liu et al. 2023, accuracy (%) against depth at T = 100, as listed in the seed talk "Guiding machine
# learning design with insights from simple testbeds" (Liu). None: a cell not legible in that text
# (C2 at L=1 and D6 at L=4).
PAPER = {"C2": {1: None, 2: 99.8, 3: 99.9, 4: 100, 5: 100, 6: 99.5},
         "C3": {1: 54.6, 2: 94.6, 3: 96.7, 4: 99.4, 5: 100, 6: 100},
         "D6": {1: 25.4, 2: 27.2, 3: 47.4, 4: None, 5: 100, 6: 100},
         "D8": {1: 45.6, 2: 98.0, 3: 100, 4: 100, 5: 100, 6: 100},
         "Q8": {1: 31.6, 2: 49.2, 3: 59.6, 4: 60.4, 5: 73.5, 6: 99.3},
         "A5": {1: 12.5, 2: 23.1, 3: 32.5, 4: 46.7, 5: 71.2, 6: 98.8},
         "S5": {1: 7.9, 2: 11.8, 3: 14.6, 4: 19.7, 5: 26.0, 6: 28.4}}

# The runs are experiments/automata_depth.toml (CPU size; _smoke.toml, _full.toml): groups × depths ×
# seeds, each point's seeds side by side. What follows is the analysis: its own sizes only.
SIZES: dict[str, dict[str, Any]] = {"smoke": {"probe_batch": 32}, "cpu": {"probe_batch": 256}, "full": {"probe_batch": 256}}


def grid(runs: harness.Runs, size: str) -> dict[str, Any]:
    """What the analysis needs to know of the sweep: groups, depths, seeds and the shared settings."""
    axes = {a.key: a.labels for a in runs.plan.axes}
    one = runs.plan.jobs[0].config
    return {**SIZES[size], "groups": list(axes["group"]), "depths": [int(d) for d in axes["model.n_layers"]],
            "seeds": list(runs.plan.seeds), "length": one["task"]["length"], "d_model": one["model"]["d_model"],
            "n_heads": one["model"]["n_heads"], **{k: one["train"][k] for k in ("steps", "batch_size", "lr", "warmup_steps",
                                                                                  "eval_batch_size")}}


def one(runs: harness.Runs, c: dict[str, Any], group: str, depth: int, seed: int) -> dict[str, Any]:
    run = runs.run(seed, group=group, n_layers=depth)
    last = run.metrics[-1]
    tl = timeline.probe_run(run, ["automaton_shortcut"], steps=[run.steps[-1]], batch_size=c["probe_batch"])
    m = {k: v[-1] for k, v in tl.metrics["automaton_shortcut"].items()}
    T = c["length"]
    by_position = last["eval_long/acc_by_position"]
    batch = run.path.parent / "config.json"  # this seed trained side by side with the point's other seeds
    out = {"group": group, "depth": depth, "seed": seed, "train_time_s": round(harness.train_seconds(run), 2),
           "batch_seeds": io.read_json(batch)["train"]["seeds"] if batch.exists() else 1,
           "acc": last["eval/acc"], "acc_last": last["eval/acc_last"],
           "loss": last["eval/loss"], "acc_long_within_T": statistics.fmean(by_position[:T]),
           "acc_long_beyond_T": statistics.fmean(by_position[T:]), "acc_long_by_position": by_position,
           "linear_state": [m["linear/state/embed"]] + [m[f"linear/state/L{layer}"] for layer in range(depth)],
           "entropy_per_head": {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith("entropy/")},
           "factors": {k.split("/")[1]: [m[f"linear/{k.split('/')[1]}/embed"]] + [m[f"linear/{k.split('/')[1]}/L{layer}"]
                                                                                   for layer in range(depth)]
                       for k in m if k.startswith("linear/") and not k.startswith("linear/state/") and k.endswith("/embed")}}
    harness.log(f"{group} L={depth} seed={seed}: acc {out['acc']:.3f}, beyond T {out['acc_long_beyond_T']:.3f}, "
               f"linear decoding per layer {[round(a, 2) for a in out['linear_state']]}")
    return out


def summarize(c: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    table: dict[str, dict[str, Any]] = {}
    for group in c["groups"]:
        table[group] = {}
        for depth in c["depths"]:
            accs = [r["acc"] for r in rows if r["group"] == group and r["depth"] == depth]
            beyond = [r["acc_long_beyond_T"] for r in rows if r["group"] == group and r["depth"] == depth]
            last = [r["acc_last"] for r in rows if r["group"] == group and r["depth"] == depth]
            table[group][str(depth)] = {"mean": 100 * statistics.fmean(accs), "min": 100 * min(accs), "max": 100 * max(accs),
                                        "per_seed": [round(100 * a, 1) for a in accs],
                                        "last_position_mean": 100 * statistics.fmean(last),
                                        "beyond_T_mean": 100 * statistics.fmean(beyond),
                                        "paper_T100": PAPER[group].get(depth)}
    # The paper's ordering claim, checked on our numbers: the depth at which each group first reaches 90%.
    reach = {g: next((d for d in c["depths"] if table[g][str(d)]["mean"] >= 90), None) for g in c["groups"]}
    return {"table": table, "first_depth_reaching_90pct": reach}


def plot(s: harness.Session, c: dict[str, Any], data: dict[str, Any]) -> list[Path]:
    import matplotlib.pyplot as plt
    import numpy as np

    groups, depths, table = c["groups"], c["depths"], data["table"]
    paper_depths = [1, 2, 3, 4, 5, 6]
    ours = np.array([[table[g][str(d)]["mean"] for d in depths] for g in groups])
    last = np.array([[table[g][str(d)]["last_position_mean"] for d in depths] for g in groups])
    paper = np.array([[np.nan if PAPER[g][d] is None else PAPER[g][d] for d in paper_depths] for g in groups], dtype=float)
    fig, axes = plt.subplots(1, 3, figsize=(13, 0.5 * len(groups) + 1.6), layout="constrained",
                             gridspec_kw={"width_ratios": [len(depths) + 1, len(depths) + 1, len(paper_depths) + 1]})
    seeds = f"mean of {len(c['seeds'])} seed(s)"
    for ax, values, cols, title in ((axes[0], ours, depths, f"ours, T = {c['length']}: all positions\n{seeds}"),
                                    (axes[1], last, depths, f"ours, T = {c['length']}: last position only\n{seeds}"),
                                    (axes[2], paper, paper_depths, "Liu et al. 2023, T = 100\n(the seed talk's table)")):
        im = ax.imshow(values, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        for i in range(len(groups)):
            for j in range(len(cols)):
                v = values[i, j]
                ax.text(j, i, "–" if np.isnan(v) else f"{v:.0f}", ha="center", va="center",
                        color="gray" if np.isnan(v) else "white" if v < 60 else "black", fontsize=8)
        ax.set_xticks(range(len(cols)), [str(d) for d in cols])
        ax.set_yticks(range(len(groups)), groups)
        ax.set_xlabel("layers L")
        ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=axes, fraction=0.03, label="held-out accuracy (%)")
    paths = [harness.save_figure(fig, s.args.out / f"{NAME}_accuracy.png", tight=False)]

    deepest = max(depths)
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, g in enumerate(groups):
        curves = [r["linear_state"] for r in data["runs"] if r["group"] == g and r["depth"] == deepest]
        mean = np.mean(np.array(curves), 0) * 100
        ax.plot(range(deepest + 1), mean, "o-", color=f"C{i}", label=g)
    ax.set_xticks(range(deepest + 1), ["embed"] + [f"L{layer}" for layer in range(deepest)])
    ax.set_xlabel("residual stream after")
    ax.set_ylabel("linear decoding of the state (%)")
    ax.set_title(f"{deepest}-layer models: where the state becomes linearly decodable", fontsize=10)
    ax.legend(fontsize=8)
    paths.append(harness.save_figure(fig, s.args.out / f"{NAME}_decoding.png"))

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, g in enumerate(groups):
        curves = [r["acc_long_by_position"] for r in data["runs"] if r["group"] == g and r["depth"] == deepest]
        ax.plot(range(1, len(curves[0]) + 1), np.mean(np.array(curves), 0) * 100, color=f"C{i}", label=g)
    ax.axvline(c["length"] + 0.5, color="gray", ls="--", lw=0.8)
    ax.text(c["length"] + 0.7, 85, "training length", fontsize=8, color="gray")
    ax.set_xlabel("position")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 102)
    ax.set_title(f"{deepest}-layer models on sequences twice the training length", fontsize=10)
    ax.legend(fontsize=8)
    paths.append(harness.save_figure(fig, s.args.out / f"{NAME}_length.png"))
    return paths


def main(argv: list[str] | None = None) -> int:
    args = harness.parse_args(NAME, __doc__, argv)
    s = harness.Session(NAME, args)
    runs = s.sweep()
    c = grid(runs, args.size)
    rows = [one(runs, c, g, d, seed) for g in c["groups"] for d in c["depths"] for seed in c["seeds"]]
    results = summarize(c, rows)
    results["runs"] = rows
    # Seeds side by side: each seed's time is its batch's, counted once per batch.
    results["train_time_s_total"] = round(sum(r["train_time_s"] / r["batch_seeds"] for r in rows), 1)
    results["paper_T100"] = {g: {str(d): v for d, v in PAPER[g].items()} for g in c["groups"]}
    s.finish(c, results, plot(s, c, results))
    print("accuracy (%), mean over seeds [paper at T=100]")
    print("group " + "".join(f"{'L=' + str(d):>16}" for d in c["depths"]))
    for g in c["groups"]:
        cells = [results["table"][g][str(d)] for d in c["depths"]]
        print(f"{g:<6}" + "".join(f"{x['mean']:>9.1f} [{'–' if x['paper_T100'] is None else x['paper_T100']:>4}]" for x in cells))
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
