"""Automata shortcuts (Liu et al. 2023) in the paper's setup: accuracy against depth for the ten rows of
its table (Dyck, Grid9, C2, C3, C2³, D6, D8, Q8, A5, S5) at T = 100 in Liu et al.'s input alphabets,
beside the paper's numbers; how much the alphabet alone changes Q8, A5 and S5; and length
generalization that means something (rotary positions against learned absolute ones, at 2T and 4T).

    python -m experiments.automata_depth           # CPU size: width 32, 1200 steps, depths 1/2/3/4/6/8, 3 seeds
    python -m experiments.automata_depth --full    # the paper's training setup, depths 1-8, 12, 16 (a GPU)
    python -m experiments.automata_depth --smoke   # seconds; for the tests

The depth table is the sweep experiments/automata_depth.toml (_smoke.toml, _full.toml for the other
sizes); the alphabet and length runs are built from its configurations here. All train into --runs on
a local process pool (--workers; --backend ray, --device cuda), each point's seeds side by side; runs
already there are reused. Every (row, depth, seed) trains a transformer on fresh sequences to predict
the state after every symbol, scored on 512 held-out sequences at every position ("all positions", the
paper's table) and at the last position alone (where a shortcut has the most to compose). Each final
model is probed with `automaton_shortcut` (ridge decoding of the state, and of its factors, from the
residual stream after each layer).

Writes OUT/automata_depth.json and OUT/automata_depth_{accuracy,positions,decoding,length}.png.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from pathlib import Path
from typing import Any, Optional

import torch

from experiments import harness, stats, verdicts
from mechsynth import hooks, probes, tasks
from mechsynth.errors import ConfigError

NAME = "automata_depth"

# Liu et al. 2023, accuracy (%) against depth at T = 100, as listed in the seed talk "Guiding machine
# learning design with insights from simple testbeds" (Liu); None: a cell not legible in that text. Kept
# with the rules that compare with it (experiments/rules/automata_depth.py: PAPER_TABLE, and `tables`, which
# prints it beside ours cell by cell).
RULES = verdicts.rules_of(NAME)
PAPER_DEPTHS: tuple[int, ...] = RULES.PAPER_DEPTHS
PAPER: dict[str, dict[int, Optional[float]]] = RULES.PAPER_TABLE

# A cell "solves" the task under each of these definitions: absolute accuracy thresholds, and a relative
# one that discounts chance (the best constant guess per position: 50% for C2, ~0.8% for S5).
DEFINITIONS = ("abs90", "abs99", "rel90")

# The analysis' own sizes; the alphabet and length runs reuse the depth table's configuration of their row.
# Length generalization means something only where the model is right within T: at the CPU size that is
# Dyck and Grid9; C2 (the audit's example) and D8 (which has factors to decode) are there for comparison.
# control_seeds: the alphabet audit's negative control, Liu et al.'s alphabet against itself with these seeds
# (as many as the sweep's, none of them its).
SIZES: dict[str, dict[str, Any]] = {
    "smoke": {
        "probe_batch": 32,
        "alphabet_groups": ["S5"],
        "alphabet_depths": [1],
        "length_groups": ["C2", "D8"],
        "length_depth": 1,
        "control_seeds": [10, 11],
    },
    "cpu": {
        "probe_batch": 256,
        "alphabet_groups": ["Q8", "A5", "S5"],
        "alphabet_depths": [1, 2],
        "length_groups": ["Dyck", "Grid9", "C2", "D8"],
        "length_depth": 4,
        "control_seeds": [303, 304, 305],
    },
    "full": {
        "probe_batch": 512,
        "alphabet_groups": ["Q8", "A5", "S5"],
        "alphabet_depths": [1, 2],
        "length_groups": ["Dyck", "Grid9", "C2", "D8"],
        "length_depth": 4,
        "control_seeds": [303, 304, 305],
    },
}
PAPER_SEQUENCES = (600_000, 5_000_000)  # the fewest and most sequences Liu et al. trained on
LENGTH_FACTORS = (2, 4)  # evaluated at 2T and 4T


def grid(runs: harness.Runs, size: str) -> dict[str, Any]:
    """What the analysis needs to know of the sweep: rows, depths, seeds and the shared settings."""
    axes = {a.key: a.labels for a in runs.plan.axes}
    one = runs.plan.jobs[0].config
    c = {
        **SIZES[size],
        "groups": list(axes["group"]),
        "depths": [int(d) for d in axes["model.n_layers"]],
        "seeds": list(runs.plan.seeds),
        "length": one["task"]["length"],
        "alphabet": one["task"]["alphabet"],
        "positional": one["model"]["positional"],
        "d_model": one["model"]["d_model"],
        "n_heads": one["model"]["n_heads"],
        **{
            k: one["train"][k] for k in ("steps", "batch_size", "lr", "weight_decay", "warmup_steps", "eval_batch_size")
        },
    }
    for key in ("alphabet_groups", "length_groups"):
        missing = [g for g in c[key] if g not in c["groups"]]
        if missing:
            raise ConfigError(key, f"{missing} are not rows of the sweep {runs.plan.name}: {c['groups']}")
    return c


def chance(runs: harness.Runs, group: str, n_seqs: int = 2048) -> dict[str, float]:
    """Accuracy (%) of the best constant guess at each position (its most frequent state), over all positions
    and at the last: the floor every cell is read against."""
    task = runs.load(runs.jobs(group=group)[0]).task
    targets = task.sample(n_seqs, torch.Generator().manual_seed(99), split="eval").targets
    freq = torch.stack(
        [torch.bincount(targets[:, t], minlength=task.spec.d_vocab_out) for t in range(targets.shape[1])]
    )
    best = freq.max(-1).values.double() / n_seqs
    return {"all": 100 * float(best.mean()), "last": 100 * float(best[-1])}


def one(runs: harness.Runs, c: dict[str, Any], group: str, depth: int, seed: int) -> dict[str, Any]:
    run = runs.run(seed, group=group, n_layers=depth)
    last = run.metrics[-1]
    m = probes.run("automaton_shortcut", run.trainable(), run.task, batch_size=c["probe_batch"]).metrics
    # the deepest models' decoding from their untrained weights: linear_decoding's negative control
    init = (
        per_layer(
            probes.run("automaton_shortcut", run.trainable(0), run.task, batch_size=c["probe_batch"]).metrics,
            "linear",
            depth,
        )
        if depth == max(c["depths"])
        else None
    )
    out = {
        "group": group,
        "depth": depth,
        "seed": seed,
        "acc": last["eval/acc"],
        "acc_last": last["eval/acc_last"],
        "loss": last["eval/loss"],
        "acc_by_position": last["eval/acc_by_position"],
        "linear": per_layer(m, "linear", depth),
        **({"linear_init": init} if init is not None else {}),
        "entropy_per_head": {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith("entropy/")},
    }
    harness.log(
        f"{group} L={depth} seed={seed}: acc {out['acc']:.3f}, last {out['acc_last']:.3f}, "
        f"state decoding per layer {[round(a, 2) for a in out['linear']['state']]}"
    )
    return out


def per_layer(metrics: dict[str, float], prefix: str, n_layers: int) -> dict[str, list[float]]:
    """The probe's `prefix/<target>/<place>` decoding accuracies as one list per target, embed first."""
    targets = dict.fromkeys(k.split("/")[1] for k in metrics if k.startswith(prefix + "/"))
    return {t: [metrics[f"{prefix}/{t}/{place}"] for place in hooks.residual_places(n_layers)] for t in targets}


def mean_per_layer(decodings: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Per target and place, the mean (%) over seeds of `per_layer` results."""
    return {t: [round(100 * statistics.fmean(v), 1) for v in zip(*(d[t] for d in decodings))] for t in decodings[0]}


def cell(values: list[float]) -> dict[str, Any]:
    """Mean, min and max (%) over seeds, and each seed's value."""
    pct = [100 * v for v in values]
    return {"mean": statistics.fmean(pct), "min": min(pct), "max": max(pct), "per_seed": [round(v, 1) for v in pct]}


def solved(acc: Optional[float], floor: float, definition: str) -> bool:
    """Whether an accuracy (%) counts as solving the task under `definition` (see DEFINITIONS)."""
    if acc is None:
        return False
    if definition == "abs90":
        return acc >= 90
    if definition == "abs99":
        return acc >= 99
    return from_chance(acc, floor) >= 0.9  # rel90


def from_chance(acc: float, floor: float) -> float:
    """How far an accuracy (%) is from chance (0) to perfect (1)."""
    return (acc - floor) / (100 - floor)


def first_depths(values: dict[int, Optional[float]], floor: float) -> dict[str, dict[str, Any]]:
    """The first depth solving the task under each definition, and the depths before it whose cell is missing
    (an illegible cell of the paper's table: the first depth could be one of those)."""
    out = {}
    for d in DEFINITIONS:
        first = next((k for k in sorted(values) if solved(values[k], floor, d)), None)
        unknown = [k for k in sorted(values) if values[k] is None and (first is None or k < first)]
        out[d] = {"depth": first, "missing_before": unknown}
    return out


def summarize(runs: harness.Runs, c: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    table, floors, first, paper_first = {}, {}, {}, {}
    for g in c["groups"]:
        floors[g] = chance(runs, g)
        table[g] = {}
        for d in c["depths"]:
            here = [r for r in rows if r["group"] == g and r["depth"] == d]
            by_position = [statistics.fmean(v) for v in zip(*(r["acc_by_position"] for r in here))]
            table[g][str(d)] = {
                "all": cell([r["acc"] for r in here]),
                "last": cell([r["acc_last"] for r in here]),
                "by_position_mean": [round(100 * v, 2) for v in by_position],
                "paper_T100": PAPER[g].get(d),
            }
        first[g] = {
            measure: first_depths({d: table[g][str(d)][measure]["mean"] for d in c["depths"]}, floors[g][measure])
            for measure in ("all", "last")
        }
        # the paper at our depths, so that the two are read on the same grid; and at all of its depths
        paper_first[g] = {
            "our_depths": first_depths({d: PAPER[g][d] for d in c["depths"] if d in PAPER[g]}, floors[g]["all"]),
            "all_depths": first_depths(PAPER[g], floors[g]["all"]),
        }
    agreement = {}
    for d in DEFINITIONS:  # rank agreement of the rows' first solving depth (never solved = after the deepest)
        never = max(c["depths"]) + 1
        ours = [first[g]["all"][d]["depth"] or never for g in c["groups"]]
        paper = [paper_first[g]["our_depths"][d]["depth"] or never for g in c["groups"]]
        agreement[d] = {
            "spearman": stats.spearman(ours, paper),
            "same_first_depth": [g for g, a, b in zip(c["groups"], ours, paper) if a == b],
        }
    # Where few cells reach any threshold, the ordering is still there to compare: at each depth, the rank
    # correlation over rows of our accuracy with the paper's, raw and as the fraction of the way from chance.
    by_depth = {}
    for d in c["depths"]:
        known = [g for g in c["groups"] if PAPER[g].get(d) is not None]
        ours = [table[g][str(d)]["all"]["mean"] for g in known]
        paper = [PAPER[g][d] for g in known]
        rel = [from_chance(a, floors[g]["all"]) for a, g in zip(ours, known)]
        rel_paper = [from_chance(a, floors[g]["all"]) for a, g in zip(paper, known)]
        by_depth[str(d)] = {
            "rows": known,
            "spearman": stats.spearman(ours, paper),
            "spearman_above_chance": stats.spearman(rel, rel_paper),
        }
    return {
        "table": table,
        "chance": floors,
        "first_depth": first,
        "paper_first_depth": paper_first,
        "ordering_agreement": agreement,
        "rank_agreement_by_depth": by_depth,
    }


def alphabet_runs(s: harness.Session, runs: harness.Runs, c: dict[str, Any]) -> harness.Runs:
    """Q8, A5 and S5 at L = 1, 2 in mechsynth's generating sets, in the depth table's configuration otherwise;
    and in Liu et al.'s alphabet with other seeds (the control: the alphabet unchanged)."""
    specs = []
    for g in c["alphabet_groups"]:
        for d in c["alphabet_depths"]:
            base = runs.jobs(group=g, n_layers=d)[0].config
            config = _with(base, {"task": {"alphabet": "generators"}})
            specs += [({"alphabet": "generators", "group": g, "n_layers": d}, seed, config) for seed in c["seeds"]]
            specs += [({"alphabet": "liu", "group": g, "n_layers": d}, seed, base) for seed in c["control_seeds"]]
    return s.train_runs(specs)


def alphabet_table(runs: harness.Runs, extra: harness.Runs, c: dict[str, Any]) -> dict[str, Any]:
    """Each cell in both alphabets, with each alphabet's chance (it differs: Q8 read as {i, j} reaches only
    half of its states at any one position)."""
    out: dict[str, Any] = {}
    for g in c["alphabet_groups"]:
        out[g] = {}
        for d in c["alphabet_depths"]:
            liu = [runs.run(seed, group=g, n_layers=d).metrics[-1] for seed in c["seeds"]]
            gen = [extra.run(seed, alphabet="generators", group=g, n_layers=d).metrics[-1] for seed in c["seeds"]]
            other = [extra.run(seed, alphabet="liu", group=g, n_layers=d).metrics[-1] for seed in c["control_seeds"]]
            task = extra.run(c["seeds"][0], alphabet="generators", group=g, n_layers=d).task
            out[g][str(d)] = {
                "liu": {
                    "all": cell([m["eval/acc"] for m in liu]),
                    "last": cell([m["eval/acc_last"] for m in liu]),
                    "chance": chance(runs, g),
                },
                "generators": {
                    "all": cell([m["eval/acc"] for m in gen]),
                    "last": cell([m["eval/acc_last"] for m in gen]),
                    "chance": chance(extra, g),
                    "symbols": list(task.spec.token_names),
                },
                "liu_other_seeds": {
                    "all": cell([m["eval/acc"] for m in other]),
                    "last": cell([m["eval/acc_last"] for m in other]),
                    "chance": chance(runs, g),
                    "seeds": c["control_seeds"],
                },
            }
    return out


# the length runs' arms: (label, positional encoding, training length in T)
LENGTH_ARMS = (
    ("standard", "standard", 1),
    ("rotary", "rotary", 1),
    # the control: rotary trained to 2T, where the positions T..2T are not beyond the training length
    ("rotary_2T", "rotary", 2),
)


def length_runs(s: harness.Session, runs: harness.Runs, c: dict[str, Any]) -> harness.Runs:
    """The length rows at one depth, with rotary and with learned absolute positions, able to read 4T tokens,
    and rotary ones trained on 2T (the control); evaluated only at the end (an evaluation at 4T costs many
    training steps)."""
    specs = []
    for arm, positional, trained in LENGTH_ARMS:
        for g in c["length_groups"]:
            base = runs.jobs(group=g, n_layers=c["length_depth"])[0].config
            config = _with(
                base,
                {
                    "model": {"positional": positional},
                    "task": {"length": trained * c["length"], "eval_length": max(LENGTH_FACTORS) * c["length"]},
                    "train": {"eval_every": base["train"]["steps"]},
                },
            )
            specs += [
                ({"positional": arm, "group": g, "n_layers": c["length_depth"]}, seed, config) for seed in c["seeds"]
            ]
    return s.train_runs(specs)


def length_table(extra: harness.Runs, c: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """For each row and positional encoding: accuracy within T, at 2T and 4T beyond T, and the per-layer
    decoding of the state and its factors at the positions beyond T, over seeds."""
    T, rows = c["length"], []
    for positional, _, _ in LENGTH_ARMS:
        for g in c["length_groups"]:
            for seed in c["seeds"]:
                run = extra.run(seed, positional=positional, group=g, n_layers=c["length_depth"])
                model, cfg = run.trainable(), run.task.cfg
                row = {
                    "positional": positional,
                    "group": g,
                    "seed": seed,
                    "acc_by_position_4T": run.metrics[-1]["eval_long/acc_by_position"],
                }
                for f in LENGTH_FACTORS:
                    # read within T and beyond T (whatever length the model was trained on)
                    task = tasks.make("automata", {**dataclasses.asdict(cfg), "length": T, "eval_length": f * T})
                    m = probes.run("automaton_shortcut", model, task, batch_size=c["probe_batch"]).metrics
                    row[f"{f}T"] = {
                        "acc_within_T": m["acc"],
                        "acc_beyond_T": m["acc_beyond_train_length"],
                        "linear_beyond_T": per_layer(m, "linear_beyond", c["length_depth"]),
                    }
                row["linear_within_T"] = per_layer(m, "linear", c["length_depth"])  # the same at either length
                harness.log(
                    f"length: {g} {positional} seed={seed}: within T {row['2T']['acc_within_T']:.3f}, "
                    f"beyond T at 2T {row['2T']['acc_beyond_T']:.3f}, at 4T {row['4T']['acc_beyond_T']:.3f}"
                )
                rows.append(row)
    table: dict[str, Any] = {}
    for g in c["length_groups"]:
        table[g] = {}
        for positional, _, _ in LENGTH_ARMS:
            here = [r for r in rows if r["group"] == g and r["positional"] == positional]
            entry = {"within_T": cell([r["2T"]["acc_within_T"] for r in here])}
            for f in LENGTH_FACTORS:
                entry[f"beyond_T_at_{f}T"] = cell([r[f"{f}T"]["acc_beyond_T"] for r in here])
                entry[f"decoding_beyond_T_at_{f}T"] = mean_per_layer([r[f"{f}T"]["linear_beyond_T"] for r in here])
            entry["decoding_within_T"] = mean_per_layer([r["linear_within_T"] for r in here])
            table[g][positional] = entry
    return table, rows


def _with(config: dict[str, Any], changes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {**config, **{section: {**config[section], **values} for section, values in changes.items()}}


def plot(s: harness.Session, c: dict[str, Any], data: dict[str, Any]) -> list[Path]:
    import matplotlib.pyplot as plt
    import numpy as np

    groups, depths, table = c["groups"], c["depths"], data["table"]
    ours = np.array([[table[g][str(d)]["all"]["mean"] for d in depths] for g in groups])
    last = np.array([[table[g][str(d)]["last"]["mean"] for d in depths] for g in groups])
    paper = np.array(
        [[np.nan if PAPER[g][d] is None else PAPER[g][d] for d in PAPER_DEPTHS] for g in groups], dtype=float
    )
    fig, axes = plt.subplots(
        1,
        3,
        figsize=(15, 0.45 * len(groups) + 1.8),
        layout="constrained",
        gridspec_kw={"width_ratios": [len(depths) + 1, len(depths) + 1, len(PAPER_DEPTHS) + 1]},
    )
    seeds = f"mean of {len(c['seeds'])} seeds"
    for ax, values, cols, title in (
        (axes[0], ours, depths, f"ours, T = {c['length']}: all positions\n{seeds}"),
        (axes[1], last, depths, f"ours, T = {c['length']}: last position\n{seeds}"),
        (axes[2], paper, PAPER_DEPTHS, "Liu et al. 2023, T = 100\n(the seed talk's table)"),
    ):
        im = ax.imshow(values, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        for i in range(len(groups)):
            for j in range(len(cols)):
                v = values[i, j]
                ax.text(
                    j,
                    i,
                    "–" if np.isnan(v) else f"{v:.0f}",
                    ha="center",
                    va="center",
                    color="gray" if np.isnan(v) else "white" if v < 60 else "black",
                    fontsize=8,
                )
        ax.set_xticks(range(len(cols)), [str(d) for d in cols])
        ax.set_yticks(range(len(groups)), groups)
        ax.set_xlabel("layers L")
        ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=axes, fraction=0.03, label="held-out accuracy (%)")
    paths = [harness.save_figure(fig, s.args.out / f"{NAME}_accuracy.png", tight=False)]

    cols = min(5, len(groups))
    rows_ = -(-len(groups) // cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(3 * cols, 2.4 * rows_), sharex=True, sharey=True, squeeze=False)
    for ax, g in zip(axes.flat, groups):
        for j, d in enumerate(depths):
            curve = table[g][str(d)]["by_position_mean"]
            ax.plot(range(1, len(curve) + 1), curve, color=plt.cm.viridis(j / max(1, len(depths) - 1)), label=f"L={d}")
        ax.axhline(data["chance"][g]["all"], color="gray", ls=":", lw=0.8)
        ax.set_title(g, fontsize=9)
        ax.set_ylim(0, 102)
    for ax in axes.flat[len(groups) :]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=6)
    fig.supxlabel("position t (accuracy of the state after t symbols; dotted: best constant guess)", fontsize=9)
    fig.supylabel("accuracy (%)", fontsize=9)
    paths.append(harness.save_figure(fig, s.args.out / f"{NAME}_positions.png"))

    deepest = max(depths)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, g in enumerate(groups):
        curves = [r["linear"]["state"] for r in data["runs"] if r["group"] == g and r["depth"] == deepest]
        ax.plot(range(deepest + 1), np.mean(np.array(curves), 0) * 100, "o-", color=f"C{i}", label=g)
    ax.set_xticks(range(deepest + 1), hooks.residual_places(deepest))
    ax.set_xlabel("residual stream after")
    ax.set_ylabel("linear decoding of the state (%)")
    ax.set_title(f"{deepest}-layer models: where the state becomes linearly decodable", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    paths.append(harness.save_figure(fig, s.args.out / f"{NAME}_decoding.png"))

    groups_l = c["length_groups"]
    fig, axes = plt.subplots(1, len(groups_l), figsize=(4 * len(groups_l), 3.2), sharey=True, squeeze=False)
    for ax, g in zip(axes[0], groups_l):
        for positional, colour in (("standard", "tab:blue"), ("rotary", "tab:red")):
            curves = [
                r["acc_by_position_4T"]
                for r in data["length_runs"]
                if r["group"] == g and r["positional"] == positional
            ]
            ax.plot(
                range(1, len(curves[0]) + 1),
                np.mean(np.array(curves), 0) * 100,
                color=colour,
                label="learned absolute" if positional == "standard" else "rotary",
            )
        for f in (1,) + LENGTH_FACTORS[:-1]:
            ax.axvline(f * c["length"] + 0.5, color="gray", ls="--", lw=0.8)
        ax.set_title(f"{g}, L = {c['length_depth']}", fontsize=9)
        ax.set_xlabel("position (training length T dashed)")
        ax.set_ylim(0, 102)
    axes[0, 0].set_ylabel("accuracy (%)")
    axes[0, 0].legend(fontsize=7)
    paths.append(harness.save_figure(fig, s.args.out / f"{NAME}_length.png"))
    return paths


def markdown(c: dict[str, Any], results: dict[str, Any]) -> str:
    """The depth table as the docs show it: each cell ours (all positions, mean and seed range / last
    position mean) beside the paper's (the rules' `tables`, which the docs' experiment page prints)."""
    return RULES.tables(results)


@harness.experiment(NAME, __doc__)
def main(s: harness.Session, args: harness.Args) -> int:
    runs = s.sweep()
    c = grid(runs, args.size)
    by_alphabet, by_length = alphabet_runs(s, runs, c), length_runs(s, runs, c)
    rows = [one(runs, c, g, d, seed) for g in c["groups"] for d in c["depths"] for seed in c["seeds"]]
    results = summarize(runs, c, rows)
    results["runs"] = rows
    results["alphabets"] = alphabet_table(runs, by_alphabet, c)
    length, results["length_runs"] = length_table(by_length, c)
    # the rotary models trained to 2T, in the shape of `length` (beyond_training_length's negative control)
    results["length"] = {g: {k: v for k, v in e.items() if k != "rotary_2T"} for g, e in length.items()}
    results["length_control"] = {g: {"rotary": e["rotary_2T"]} for g, e in length.items()}
    sequences = c["steps"] * c["batch_size"]
    results["budget"] = {
        "sequences": sequences,
        "paper_sequences": list(PAPER_SEQUENCES),
        "of_paper": [sequences / p for p in PAPER_SEQUENCES],
    }
    results["train_time_s"] = {
        part: harness.provenance(r.all())["train_time_s"]
        for part, r in (("depth_table", runs), ("alphabets", by_alphabet), ("length", by_length))
    }
    results["paper_T100"] = {g: {str(d): v for d, v in PAPER[g].items()} for g in c["groups"]}
    s.finish(c, results, plot(s, c, results))
    print("paper · ours all positions, mean (min–max over seeds) / last position mean")
    print(markdown(c, results))
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
