"""Shortcuts and their brittleness: the car on a circle (Liu et al. 2023, "Transformers learn shortcuts to
automata") at and beyond its training length, and the flip-flop language out of distribution (Liu et al.
2023b, "Exposing attention glitches with flip-flop language modeling").

  1. car: the `automata` task's car on a circle (4 cells × 2 directions; D drives one cell in the current
     direction, U turns around: the direction is the parity of the U's, the position a signed count mod 4,
     the seed talk's decomposition) at T = 16 with 2-layer transformers (2 ≪ T sequential steps: only a
     shortcut fits), learned absolute positions against rotary ones. Each final model reads 2048 held-out
     sequences 2T long: accuracy at each position, within T and beyond it (and the untrained checkpoint's), against
     the best constant
     guess per position (chance, from the task's ground truth); and the `automaton_shortcut` probe's
     ridge decoding of the state and of its two factors after each layer, within T and beyond T. The negative
     control of "fails beyond T": learned absolute positions trained on sequences 2T long (1000 steps, the same
     tokens), read at the same positions, so that positions beyond T have trained embeddings.
  2. flip-flop: the `automata` task's flip-flop (ignore / write0 / write1, uniform i.i.d.: ignore runs
     are short) at T = 32. The reads are the ignore positions after some write (the answer is the last
     written bit, however far back). Each final model reads held-out sequences in distribution and with
     the ignore probability raised to 0.8, 0.9 and 0.98 (the first symbol a write, the length unchanged:
     no unseen position, only longer stretches since the last write), the truth from the task's own
     automaton (`task.run`): read errors per seed, and by distance to the last write; and a second in-distribution
     set (another seed), the rules' negative control.

    python -m experiments.shortcut_length           # CPU size: 4 settings × 5 seeds (300-304)
    python -m experiments.shortcut_length --full    # the papers' sizes (T = 100 car; 6-layer flip-flop at T = 512; a GPU)
    python -m experiments.shortcut_length --smoke   # seconds; checks the pipeline only

The runs are the sweep experiments/shortcut_length.toml (_smoke.toml, _full.toml), one job per seed (seeds
not from 0 do not train side by side), on a local process pool (--workers); runs already there are reused.
CPU time, measured one run at a time with one thread on this shared 2-core machine: a car run (2000 steps of
64 at T = 16) 44 s, a flip-flop run (1000 steps of 64 at T = 32) 37 s; 10 car runs + 5 flip-flop runs ≈ 625 s
of CPU, ≈ 5.5 min on 2 idle cores (--workers 2), plus under a minute of analysis (extrapolated; not run at
this size here).

Writes OUT/shortcut_length.json and OUT/shortcut_length_{car,flipflop}.png.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any, Optional

import torch

from experiments import harness, stats
from mechsynth import hooks, probes

NAME = "shortcut_length"
LEVELS = (0.8, 0.9, 0.98)  # ignore probabilities of the out-of-distribution flip-flop sets (training: 1/3)
SIZES: dict[str, dict[str, Any]] = {  # held-out sequences per evaluation set, and the probe's batch
    "smoke": {"eval_seqs": 64, "probe_batch": 32},
    "cpu": {"eval_seqs": 2048, "probe_batch": 256},
    "full": {"eval_seqs": 4096, "probe_batch": 512},
}
EVAL_SEED = 12345  # the held-out sets: the same sequences for every seed
CHUNK = 512


def grid(runs: harness.Runs, size: str) -> dict[str, Any]:
    """What the analysis needs to know of the sweep: its settings, seeds and each setting's configuration."""
    settings = {j.labels["setting"]: j.config for j in runs.plan.jobs}
    car, ff = settings["car_standard"], settings["flipflop"]
    return {
        **SIZES[size],
        "settings": list(settings),
        "seeds": list(runs.plan.seeds),
        "car": {"T": car["task"]["length"], "eval_length": car["task"]["eval_length"], **_model(car), **_train(car)},
        "flipflop": {"T": ff["task"]["length"], **_model(ff), **_train(ff)},
        "levels": list(LEVELS),
    }


def _model(config: dict[str, Any]) -> dict[str, Any]:
    return {k: config["model"][k] for k in ("n_layers", "n_heads", "d_model", "positional")}


def _train(config: dict[str, Any]) -> dict[str, Any]:
    return {k: config["train"][k] for k in ("steps", "batch_size", "lr", "weight_decay", "warmup_steps", "schedule")}


@torch.no_grad()
def predict(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """The model's argmax output at every position, [batch, pos]."""
    return torch.cat([model(tokens[i : i + CHUNK]).argmax(-1) for i in range(0, len(tokens), CHUNK)])


def best_constant(targets: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Per position, the share of the scored targets the most frequent one takes [pos] (NaN where none is
    scored), and the count scored there: the best constant guess, from the ground truth."""
    mask = torch.ones_like(targets, dtype=torch.bool) if mask is None else mask
    k = int(targets.max()) + 1
    hits, counts = [], []
    for t in range(targets.shape[1]):
        y = targets[mask[:, t], t]
        hits.append(float(torch.bincount(y, minlength=k).max()) if len(y) else 0.0)
        counts.append(len(y))
    return torch.tensor(hits), torch.tensor(counts, dtype=torch.float)


# ---- 1. the car on a circle -------------------------------------------------------------------------------


def car_chance(task: Any, c: dict[str, Any]) -> dict[str, Any]:
    """The best constant guess per position over sequences 2T long (8 × the eval sets), pooled within T and beyond."""
    b = task.sample(8 * c["eval_seqs"], torch.Generator().manual_seed(EVAL_SEED + 1), split="eval_long")
    hits, counts = best_constant(b.targets)
    acc = 100 * hits / counts
    T = c["car"]["T"]
    return {
        "within_T": float(acc[:T].mean()),
        "beyond_T": float(acc[T:].mean()),
        "by_position": [round(float(v), 2) for v in acc],
    }


def car_row(run: Any, c: dict[str, Any], positional: str, seed: int) -> dict[str, Any]:
    """One car model: accuracy by position on held-out sequences 2T long, and the probe's decoding per layer."""
    task, model, T = run.task, run.trainable(), c["car"]["T"]
    b = task.sample(c["eval_seqs"], torch.Generator().manual_seed(EVAL_SEED), split="eval_long")
    correct = (predict(model, b.tokens) == b.targets).float().mean(0) * 100
    m = probes.run("automaton_shortcut", model, task, batch_size=c["probe_batch"]).metrics
    row = {
        "positional": positional,
        "seed": seed,
        "within_T": float(correct[:T].mean()),
        "beyond_T": float(correct[T:].mean()),
        "last_T": float(correct[T - 1]),
        "acc_by_position": [round(float(v), 2) for v in correct],
        "init_within_T": float(
            (predict(run.trainable(run.steps[0]), b.tokens) == b.targets).float()[:, :T].mean() * 100
        ),
        "decoding": {
            "within_T": per_layer(m, "linear", c["car"]["n_layers"]),
            "beyond_T": per_layer(m, "linear_beyond", c["car"]["n_layers"]),
        },
        "train_s": round(harness.train_seconds(run), 1),
    }
    harness.log(
        f"car {positional} seed={seed}: within T {row['within_T']:.1f} %, beyond T {row['beyond_T']:.1f} %, "
        f"direction decoded per layer {row['decoding']['within_T'].get('direction')}"
    )
    return row


def per_layer(metrics: dict[str, float], prefix: str, n_layers: int) -> dict[str, list[float]]:
    """The probe's `prefix/<target>/<place>` decoding accuracies (%) as one list per target, embedding first."""
    targets = dict.fromkeys(k.split("/")[1] for k in metrics if k.startswith(prefix + "/"))
    return {t: [round(100 * metrics[f"{prefix}/{t}/{p}"], 1) for p in hooks.residual_places(n_layers)] for t in targets}


def car_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for positional in ("standard", "rotary"):
        here = [r for r in rows if r["positional"] == positional]
        out[positional] = {k: stats.spread([r[k] for r in here]) for k in ("within_T", "beyond_T", "last_T")}
        out[positional]["acc_by_position_mean"] = [
            round(statistics.fmean(v), 2) for v in zip(*(r["acc_by_position"] for r in here))
        ]
        out[positional]["decoding_mean"] = {
            where: {
                t: [round(statistics.fmean(v), 1) for v in zip(*(r["decoding"][where][t] for r in here))]
                for t in here[0]["decoding"][where]
            }
            for where in ("within_T", "beyond_T")
        }
    return out


# ---- 2. the flip-flop -------------------------------------------------------------------------------------


def symbols(task: Any) -> tuple[int, int, int]:
    names = list(task.table.symbols)
    return names.index("ignore"), names.index("write0"), names.index("write1")


def sparse_batch(task: Any, n: int, ignore: float, generator: torch.Generator) -> torch.Tensor:
    """n flip-flop sequences of the task's length: each symbol ignore with probability `ignore`, else write0 or
    write1 alike; the first symbol a write (as every flip-flop string of Liu et al. 2023b begins)."""
    ig, w0, w1 = symbols(task)
    u = torch.rand(n, task.cfg.length, generator=generator)
    x = torch.where(u < ignore, ig, torch.where(u < ignore + (1 - ignore) / 2, w0, w1))
    x[:, 0] = torch.where(torch.rand(n, generator=generator) < 0.5, w0, w1)
    return x


def reads_and_distance(task: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The read positions (an ignore after some write: the answer is the last written bit) [batch, pos] and,
    at each position, the distance back to the last write (0 where none came before)."""
    ig, _, _ = symbols(task)
    write = x != ig
    pos = torch.arange(x.shape[1]).expand_as(x)
    last = torch.where(write, pos, torch.full_like(pos, -1)).cummax(1).values  # the last write at or before t
    before = torch.cat([torch.full_like(last[:, :1], -1), last[:, :-1]], 1)  # ... strictly before t
    reads = ~write & (before >= 0)
    return reads, torch.where(before >= 0, pos - before, torch.zeros_like(pos))


def flipflop_sets(task: Any, c: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The held-out token sets: in distribution (the task's eval split) and one per ignore level in LEVELS."""
    sets = {
        "in_distribution": task.sample(c["eval_seqs"], torch.Generator().manual_seed(EVAL_SEED), split="eval").tokens
    }
    for i, q in enumerate(LEVELS):
        sets[str(q)] = sparse_batch(task, c["eval_seqs"], q, torch.Generator().manual_seed(EVAL_SEED + 10 + i))
    # the negative control: another in-distribution set
    sets["resampled"] = task.sample(c["eval_seqs"], torch.Generator().manual_seed(EVAL_SEED + 99), split="eval").tokens
    return sets


def read_counts(task: Any, x: torch.Tensor, pred: Optional[torch.Tensor]) -> dict[str, Any]:
    """Reads and read errors, in all and per distance to the last write (index d = distance d; 0 unused)."""
    y = task.run(x)
    reads, dist = reads_and_distance(task, x)
    wrong = reads & (pred != y) if pred is not None else torch.zeros_like(reads)
    T = x.shape[1]
    return {
        "reads": int(reads.sum()),
        "errors": int(wrong.sum()),
        "by_distance": {
            "reads": torch.bincount(dist[reads], minlength=T).tolist(),
            "errors": torch.bincount(dist[wrong], minlength=T).tolist(),
        },
    }


def flipflop_chance(task: Any, sets: dict[str, torch.Tensor]) -> dict[str, float]:
    """The best constant guess per position over the read positions, pooled (%), for each set."""
    out = {}
    for name, x in sets.items():
        reads, _ = reads_and_distance(task, x)
        hits, counts = best_constant(task.run(x), reads)
        out[name] = 100 * float(hits.sum() / counts.sum())
    return out


def flipflop_row(run: Any, sets: dict[str, torch.Tensor], seed: int) -> dict[str, Any]:
    task, model = run.task, run.trainable()
    counts = {name: read_counts(task, x, predict(model, x)) for name, x in sets.items()}
    row = {
        "seed": seed,
        "in_distribution": counts.pop("in_distribution"),
        "control": counts.pop("resampled"),
        "ood": counts,
        "train_s": round(harness.train_seconds(run), 1),
    }
    harness.log(
        f"flip-flop seed={seed}: read errors in distribution {row['in_distribution']['errors']}/"
        f"{row['in_distribution']['reads']}, "
        + ", ".join(f"ignore {q}: {v['errors']}/{v['reads']}" for q, v in row["ood"].items())
    )
    return row


def seen_distance(rows: list[dict[str, Any]]) -> int:
    """The longest distance to the last write among the in-distribution reads (the same sets for every seed)."""
    reads = rows[0]["in_distribution"]["by_distance"]["reads"]
    return max(d for d, n in enumerate(reads) if n > 0)


def flipflop_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Error rates (%) over seeds per set, and how the OOD errors split between distances to the last write
    seen in distribution and longer ones."""
    D = seen_distance(rows)
    out: dict[str, Any] = {"longest_distance_in_distribution": D, "sets": {}}
    for name in ["in_distribution"] + [str(q) for q in LEVELS]:
        counts = [r["in_distribution"] if name == "in_distribution" else r["ood"][name] for r in rows]
        rate = [100 * k["errors"] / max(k["reads"], 1) for k in counts]

        def share(lo: int, hi: int) -> list[Optional[float]]:
            e = [sum(k["by_distance"]["errors"][lo:hi]) for k in counts]
            n = [sum(k["by_distance"]["reads"][lo:hi]) for k in counts]
            return [100 * a / b if b else None for a, b in zip(e, n)]

        out["sets"][name] = {
            "error_rate": stats.spread(rate),
            "error_rate_seen_distances": stats.spread(share(1, D + 1)),
            "error_rate_longer_distances": stats.spread(share(D + 1, 10**9)),
            "reads_longer_distances": sum(counts[0]["by_distance"]["reads"][D + 1 :]),
        }
    return out


# ---- figures ----------------------------------------------------------------------------------------------


def plot_car(s: harness.Session, c: dict[str, Any], car: dict[str, Any]) -> Path:
    import matplotlib.pyplot as plt
    import numpy as np

    T = c["car"]["T"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [3, 2]})
    x = np.arange(1, 2 * T + 1)
    for positional, colour, name in (("standard", "tab:blue", "learned absolute"), ("rotary", "tab:red", "rotary")):
        here = [r for r in car["runs"][positional]]
        for r in here:
            ax.plot(x, r["acc_by_position"], color=colour, lw=0.6, alpha=0.35)
        ax.plot(
            x,
            car["summary"][positional]["acc_by_position_mean"],
            color=colour,
            lw=2,
            label=f"{name} (mean of {len(here)} seeds)",
        )
    ax.plot(x, car["chance"]["by_position"], color="gray", ls=":", label="best constant guess")
    ax.axvline(T + 0.5, color="black", ls="--", lw=0.8)
    ax.set_xlabel(f"position (training length T = {T} dashed)")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 102)
    ax.set_title(f"car on a circle, {c['car']['n_layers']}-layer transformers", fontsize=10)
    ax.legend(fontsize=7)
    places = hooks.residual_places(c["car"]["n_layers"])
    dec = car["summary"]["standard"]["decoding_mean"]
    for i, target in enumerate(dec["within_T"]):
        ax2.plot(places, dec["within_T"][target], "o-", color=f"C{i}", label=f"{target}, within T")
        if target in dec["beyond_T"]:
            ax2.plot(places, dec["beyond_T"][target], "o--", color=f"C{i}", alpha=0.6, label=f"{target}, beyond T")
    ax2.set_ylim(0, 102)
    ax2.set_xlabel("residual stream after")
    ax2.set_ylabel("ridge decoding (%)")
    ax2.set_title("learned absolute positions: state and its factors", fontsize=10)
    ax2.legend(fontsize=6)
    return harness.save_figure(fig, s.args.out / f"{NAME}_car.png")


def plot_flipflop(s: harness.Session, ff: dict[str, Any]) -> Path:
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FuncFormatter

    rows = ff["seeds"]
    names = ["in_distribution"] + [str(q) for q in LEVELS]
    labels = ["in distribution\n(ignore 1/3)"] + [f"ignore {q}" for q in LEVELS]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    floor = 0.5 * 100 / max(r["in_distribution"]["reads"] for r in rows)  # a zero shown at half of one error
    for j, r in enumerate(rows):
        vals = [r["in_distribution"]] + [r["ood"][n] for n in names[1:]]
        rates = [max(100 * v["errors"] / max(v["reads"], 1), floor) for v in vals]
        ax.plot(
            np.arange(len(names)) + (j - len(rows) / 2) * 0.04, rates, "o", color=f"C{j}", label=f"seed {r['seed']}"
        )
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xticks(range(len(names)), labels, fontsize=8)
    ax.set_ylabel("read error (%; zero drawn at half an error)")
    ax.set_title("flip-flop: read errors per seed", fontsize=10)
    ax.legend(fontsize=6)
    for i, n in enumerate(names):
        counts = [r["in_distribution"] if n == "in_distribution" else r["ood"][n] for r in rows]
        err = np.sum([np.array(k["by_distance"]["errors"]) for k in counts], 0)
        reads = np.sum([np.array(k["by_distance"]["reads"]) for k in counts], 0)
        d = np.nonzero(reads >= 20)[0]
        d = d[d > 0]
        ax2.plot(
            d,
            100 * err[d] / reads[d],
            "o-",
            ms=3,
            color="black" if i == 0 else f"C{i}",
            label=labels[i].replace("\n", " "),
        )
    ax2.axvline(ff["summary"]["longest_distance_in_distribution"] + 0.5, color="gray", ls="--", lw=0.8)
    ax2.set_xlabel("distance to the last write (longest in distribution dashed)")
    ax2.set_ylabel("read error (%, pooled over seeds)")
    ax2.set_title("errors by distance (points with ≥ 20 reads)", fontsize=10)
    ax2.legend(fontsize=7)
    return harness.save_figure(fig, s.args.out / f"{NAME}_flipflop.png")


@harness.experiment(NAME, __doc__)
def main(s: harness.Session, args: harness.Args) -> int:
    runs = s.sweep()
    c = grid(runs, args.size)
    seeds = c["seeds"]
    car_task = runs.run(seeds[0], setting="car_standard").task
    car_rows = {
        p: [car_row(runs.run(seed, setting=f"car_{p}"), c, p, seed) for seed in seeds]
        for p in ("standard", "rotary", "standard_2T")
    }
    car = {"T": c["car"]["T"], "n_layers": c["car"]["n_layers"], "chance": car_chance(car_task, c), "runs": car_rows}
    car["summary"] = car_summary(car_rows["standard"] + car_rows["rotary"])  # the 2T control: its runs only
    ff_task = runs.run(seeds[0], setting="flipflop").task
    sets = flipflop_sets(ff_task, c)
    ff_rows = [flipflop_row(runs.run(seed, setting="flipflop"), sets, seed) for seed in seeds]
    measured = {k: v for k, v in sets.items() if k != "resampled"}
    ff = {
        "T": c["flipflop"]["T"],
        "levels": [str(q) for q in LEVELS],
        "chance": flipflop_chance(ff_task, measured),
        "seeds": ff_rows,
    }
    ff["summary"] = flipflop_summary(ff_rows)
    results = {
        "car": car,
        "flipflop": ff,
        "train_time_s": {
            p: round(sum(r["train_s"] for r in rows), 1)
            for p, rows in (
                ("car_standard", car_rows["standard"]),
                ("car_rotary", car_rows["rotary"]),
                ("car_standard_2T", car_rows["standard_2T"]),
                ("flipflop", ff_rows),
            )
        },
    }
    figures = [plot_car(s, c, car), plot_flipflop(s, ff)]
    s.finish(c, results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
