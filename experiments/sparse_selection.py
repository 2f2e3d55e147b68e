"""Sparse variable creation (Edelman et al. 2022): how many training samples a 1-layer transformer needs to
learn a 3-sparse AND of T bits as T grows (the theory bounds it by ~log T; the seed talk's figure is
"consistent with log(T) dependence"), and whether the readout attention lands on the hidden support S.

    python -m experiments.sparse_selection            # CPU size: T = 16..512, 2 settings, 6 draws per size (~1 h on 2 shared cores)
    python -m experiments.sparse_selection --full     # 10 draws x 4 seeds side by side, a finer ladder, longer training (a GPU)
    python -m experiments.sparse_selection --smoke    # seconds; for the tests

Two settings: "uniform", the seed's (fair bits, so the AND is 1 for one input in 8), and "balanced" (each
bit 1 with probability 2**(-1/3) = 0.794, so the AND is 1 half the time: the task's default). A run
*succeeds* when its held-out balanced accuracy (the mean of its accuracies on label-0 and on label-1
examples, eval_batch_size fresh samples) is ≥ SUCCESS at the end of training: always answering 0 scores
0.5, reading 2 of the 3 bits of S about 0.93 (uniform) or 0.87 (balanced). A run *fits* when it gets every
one of its training examples right at the end (its loss on the whole training set is reported too). A run
that does not fit after `steps` continues, doubling its steps up to `max_steps` (at the CPU size 400 steps
fit most runs, but a first pass found 48 of 462 runs stuck on a plateau at training loss 0.05-0.56, most of
them at large n and T); one that still does not fit failed to optimize, which says nothing about sample
complexity: such runs are counted and left out of the fits (n50 counting them as failures is reported beside).

Per setting and T, success is measured on a grid of training-set sizes n (from a half-octave ladder) ×
draws. A draw is the task seed: its own S and training set (a draw's training sets are nested: a larger
one starts with the smaller). With one seed per draw (the CPU size: seeds side by side measured no faster
than separate runs on this CPU: 8.6 s against 9.8 s a run, 100 steps at T = 512) the draw also seeds the init and the
data order; with several (--full) a draw's seeds, differing in init and data order, train side by side.
The grid starts at a few sizes and grows outward a round at a time, every new size with every draw and
seed, until it brackets the transition (success ≤ LOW at its smallest size, ≥ HIGH at its largest) or
meets the ladder's end or the last round. Then per setting and T a logistic fit of success against log2 n
gives n50 and n90, the sizes at 50% and 90% success, with bootstrap intervals (resampling draws, each with
all its runs); n50(T) and n90(T) are fitted by a + b log2 T, a + b T and c T^alpha, with intervals from the
same bootstrap, and the rules (experiments/rules/sparse_selection.py, which `verdict()` calls) turn that into
the verdict. Every run is probed at its last checkpoint with
`sparse_selection` (attention from the readout onto S; whether the top-|S| attended positions are S), and
one run per setting and T at every checkpoint.

Runs go to --runs as one sweep directory (runs/setting=<s>,T=<T>,n=<n>/seed_<draw>, or with several seeds
per draw runs/setting=<s>,T=<T>,n=<n>,draw=<d>/seed_<i>) through `Session.train_runs` (--workers, --backend
ray, --device cuda); runs already there are reused, so an interrupted run resumes.

Writes OUT/sparse_selection.json and OUT/sparse_selection_{samples,attention}.png.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
import torch.nn.functional as F

from experiments import harness, stats, verdicts
from mechsynth.analysis import timeline
from mechsynth.runs.run import Run

NAME = "sparse_selection"


RULES = verdicts.rules_of(NAME)  # the claims' rules, and the thresholds this script shares with them
SUCCESS = 0.99  # held-out balanced accuracy: reading exactly S computes AND exactly; 2 of the 3 bits score ≤ 0.93
LOW, HIGH = (
    RULES.LOW,
    RULES.HIGH,
)  # the grid brackets the transition: success ≤ LOW at its smallest size, ≥ HIGH at its largest
SETTINGS = {"uniform": 0.5, "balanced": None}  # P(bit = 1); None: the task's default, 2**(-1/3) for AND of 3
RIDGE = 0.01  # on the logistic slope: keeps the fit finite when success and failure separate perfectly
# The verdict's thresholds (the rules' own; see `verdict`):
MAX_NOT_FITTED = RULES.MAX_NOT_FITTED  # at most this fraction of a T's runs may fail to fit their training set
EXPONENT_SPLIT = (
    RULES.EXPONENT_SPLIT
)  # alpha of c T^alpha: clearly below = sub-polynomial-like growth; above = polynomial
LOG_FIT_RMS = RULES.LOG_FIT_RMS  # a + b log2 T must predict every n50 within ~15% (relative rms) to "match"
CI = (2.5, 97.5)  # percentile bootstrap interval


def grid(lo: int, hi: int, per_octave: int) -> list[int]:
    """Geometric grid lo..hi with `per_octave` sizes per doubling, rounded to integers."""
    out, k = [], 0
    while round(lo * 2 ** (k / per_octave)) <= hi:
        out.append(round(lo * 2 ** (k / per_octave)))
        k += 1
    return sorted(set(out))


# "draws": the task seeds (each its own S and training set): a list, or a count n meaning 0..n-1 (smoke).
# The CPU and --full draws start at 300: the runs the rules judge use draws no earlier run used (0..5, 100..109).
SIZES: dict[str, dict[str, Any]] = {
    "smoke": {
        "settings": ["uniform", "balanced"],
        "lengths": [8, 16],
        "ladder": grid(8, 64, 1),
        "start": {"uniform": [16], "balanced": [16]},
        "draws": 2,
        "seeds": 1,
        "rounds": 2,
        "d_model": 16,
        "n_heads": 1,
        "steps": 40,
        "max_steps": 80,
        "batch_size": 16,
        "lr": 3e-3,
        "eval_batch_size": 128,
        "checkpoints": 3,
        "bootstrap": 50,
    },
    # 400 steps: most runs fit their training sets by step ~300 at T = 512, and held-out accuracy then stays
    # put (measured to 1500 steps); a run that has not fitted by 400 continues to 800, then 1600 steps.
    "cpu": {
        "settings": ["uniform", "balanced"],
        "lengths": [16, 32, 64, 128, 256, 512],
        "ladder": grid(8, 2048, 2),
        "start": {"uniform": [64, 91, 128], "balanced": [32, 45, 64]},
        "draws": list(range(300, 306)),
        "seeds": 1,
        "rounds": 6,
        "d_model": 32,
        "n_heads": 1,
        "steps": 400,
        "max_steps": 1600,
        "batch_size": 32,
        "lr": 1e-3,
        "eval_batch_size": 512,
        "checkpoints": 8,
        "bootstrap": 1000,
    },
    "full": {
        "settings": ["uniform", "balanced"],
        "lengths": [16, 32, 64, 128, 256, 512],
        "ladder": grid(8, 4096, 3),
        "start": {"uniform": [64, 81, 102, 128], "balanced": [32, 40, 51, 64]},
        "draws": list(range(300, 310)),
        "seeds": 4,
        "rounds": 10,
        "d_model": 32,
        "n_heads": 1,
        "steps": 1500,
        "max_steps": 6000,
        "batch_size": 32,
        "lr": 1e-3,
        "eval_batch_size": 4096,
        "checkpoints": 16,
        "bootstrap": 2000,
    },
}


# ---- the runs --------------------------------------------------------------------------------------


def config(c: dict[str, Any], setting: str, T: int, n: int, draw: int, steps: Optional[int] = None) -> dict[str, Any]:
    steps = steps or c["steps"]
    task = {"name": "sparse_boolean", "length": T, "s": 3, "function": "and", "n_train": n, "seed": draw}
    if SETTINGS[setting] is not None:
        task["bias"] = SETTINGS[setting]
    # eval_every = steps: held-out metrics only at the checkpoints (at T = 512 an evaluation costs ~10 steps)
    return {
        "task": task,
        "model": {"n_layers": 1, "n_heads": c["n_heads"], "d_model": c["d_model"], "init_seed": 0},
        "train": {
            "steps": steps,
            "batch_size": c["batch_size"],
            "lr": c["lr"],
            "eval_every": steps,
            "eval_batch_size": c["eval_batch_size"],
            "checkpoints": c["checkpoints"],
            "seed": 0,
        },
    }


def specs(
    c: dict[str, Any], setting: str, T: int, n: int, draws: Optional[Sequence[int]] = None, steps: Optional[int] = None
) -> list[harness.RunSpec]:
    """Every seed of the draws (default: all) of one setting, T and size. One seed per draw: the draw is the
    run's seed (task, init and data seeds). Several: point draw=<d> holds the draw's seeds, side by side."""
    point, draws = {"setting": setting, "T": T, "n": n}, harness.seeds(c["draws"]) if draws is None else draws
    if c["seeds"] == 1:
        return [(point, d, config(c, setting, T, n, d, steps)) for d in draws]
    return [({**point, "draw": d}, i, config(c, setting, T, n, d, steps)) for d in draws for i in range(c["seeds"])]


def seed_keys(c: dict[str, Any]) -> tuple[str, ...]:
    return ("task.seed",) if c["seeds"] == 1 else ()


def load(runs: harness.Runs, c: dict[str, Any], setting: str, T: int, n: int, draw: int, seed: int) -> Run:
    if c["seeds"] == 1:
        return runs.run(draw, setting=setting, T=T, n=n)
    return runs.run(seed, setting=setting, T=T, n=n, draw=draw)


@torch.no_grad()
def training_fit(run: Run, chunk: int = 256) -> tuple[float, int]:
    """Mean loss and number of errors of the final model on its whole training set."""
    batch = run.task.training_set()
    model = run.trainable()
    logits = torch.cat([model(batch.tokens[i : i + chunk])[:, -1] for i in range(0, len(batch.tokens), chunk)])
    targets = batch.targets[:, -1]
    return F.cross_entropy(logits.float(), targets).item(), int((logits.argmax(-1) != targets).sum())


def outcome(run: Run, c: dict[str, Any], setting: str, T: int, n: int, draw: int, seed: int) -> dict[str, Any]:
    """Whether one trained run generalized and fitted its training set, and where its readout attends at the end."""
    evals = [r for r in run.metrics if "eval/balanced_acc" in r]
    last = evals[-1]
    loss, errors = training_fit(run)
    # the last checkpoint, and step 0: the negative control of the attention rule (an untrained readout)
    probe = timeline.probe_run(run, ["sparse_selection"], steps=[run.steps[0], run.steps[-1]])
    return {
        "setting": setting,
        "T": T,
        "n_train": n,
        "draw": draw,
        "seed": seed,
        "steps": run.steps[-1],
        "balanced_acc": last["eval/balanced_acc"],
        "acc": last["eval/acc"],
        "success": last["eval/balanced_acc"] >= SUCCESS,
        "train_loss": loss,
        "train_errors": errors,
        "fits": errors == 0,
        # the budget: had it stopped at the previous checkpoint, would the outcome differ?
        "previous_step": evals[-2]["step"],
        "success_at_previous_step": evals[-2]["eval/balanced_acc"] >= SUCCESS,
        "attention_on_support": probe.per_head["sparse_selection"]["L0H0"][-1]
        if c["n_heads"] == 1
        else probe.metrics["sparse_selection"]["max"][-1],
        "support_recovered": bool(probe.metrics["sparse_selection"]["support_recovered"][-1]),
        "attention_on_support_at_init": probe.per_head["sparse_selection"]["L0H0"][0]
        if c["n_heads"] == 1
        else probe.metrics["sparse_selection"]["max"][0],
        "support_recovered_at_init": bool(probe.metrics["sparse_selection"]["support_recovered"][0]),
        "train_time_s": round(harness.train_seconds(run), 2),
        "run": run,
    }


def success_rate(rows: Sequence[dict[str, Any]]) -> float:
    return sum(r["success"] for r in rows) / len(rows)


def measure(
    s: harness.Session, c: dict[str, Any]
) -> tuple[dict[tuple[str, int], dict[int, list[dict]]], list[int], list[dict]]:
    """Train the grids, round by round, until each (setting, T) brackets its transition; after each round
    the runs that do not fit their training set train longer (`extend_unfitted`). Returns the outcomes per
    (setting, T) and size, the number of runs of each round, and the runs continued at each longer budget."""
    ladder = c["ladder"]
    window = {
        (st, T): (ladder.index(min(c["start"][st])), ladder.index(max(c["start"][st])))
        for st in c["settings"]
        for T in c["lengths"]
    }
    todo = {key: list(range(lo, hi + 1)) for key, (lo, hi) in window.items()}
    found: dict[tuple[str, int], dict[int, list[dict]]] = {key: {} for key in window}
    rounds: list[int] = []
    extended: list[dict[str, int]] = []
    while todo and len(rounds) < c["rounds"]:
        new = [(st, T, ladder[i]) for (st, T), idxs in todo.items() for i in idxs]
        batch = [spec for st, T, n in new for spec in specs(c, st, T, n)]
        harness.log(f"round {len(rounds) + 1}: {len(new)} sizes, {len(batch)} runs")
        runs = s.train_runs(batch, seed_keys=seed_keys(c))
        rounds.append(len(batch))
        for st, T, n in new:
            found[st, T][n] = [
                outcome(load(runs, c, st, T, n, d, i), c, st, T, n, d, i)
                for d in harness.seeds(c["draws"])
                for i in range(c["seeds"])
            ]
        extended += extend_unfitted(s, c, found, new)
        for st, T, n in new:
            harness.log(f"{st:<8} T={T:<4} n={n:<5} success {success_rate(found[st, T][n]):.2f}")
        todo = {}
        for key, (lo, hi) in window.items():
            add = []
            low, high = success_rate(found[key][ladder[lo]]), success_rate(found[key][ladder[hi]])
            if low > LOW and lo > 0:  # all succeed at the smallest size: two ladder steps down, else one
                new_lo = max(0, lo - (2 if low == 1 else 1))
                add, lo = add + list(range(new_lo, lo)), new_lo
            if high < HIGH and hi < len(ladder) - 1:  # none succeed at the largest: two steps up, else one
                new_hi = min(len(ladder) - 1, hi + (2 if high == 0 else 1))
                add, hi = add + list(range(hi + 1, new_hi + 1)), new_hi
            window[key] = (lo, hi)
            if add:
                todo[key] = add
    return found, rounds, extended


def extend_unfitted(
    s: harness.Session,
    c: dict[str, Any],
    found: dict[tuple[str, int], dict[int, list[dict]]],
    new: Sequence[tuple[str, int, int]],
) -> list[dict[str, int]]:
    """Continue the runs of `new` that do not fit their training set, doubling their steps up to max_steps:
    a run stuck on a plateau has not yet answered how many samples it needs. With seeds side by side a
    draw's seeds continue together. Returns the runs continued at each budget."""
    out, steps = [], c["steps"]
    while steps < c["max_steps"]:
        steps = min(2 * steps, c["max_steps"])
        unfit = sorted(
            {(st, T, n, r["draw"]) for st, T, n in new for r in found[st, T][n] if not r["fits"] and r["steps"] < steps}
        )  # (reused from disk: may have trained this long)
        if not unfit:
            continue
        harness.log(f"{len(unfit)} draws do not fit their training sets: continuing them to {steps} steps")
        runs = s.train_runs(
            [spec for st, T, n, d in unfit for spec in specs(c, st, T, n, [d], steps)], seed_keys=seed_keys(c)
        )
        for st, T, n, d in unfit:
            found[st, T][n] = [
                outcome(load(runs, c, st, T, n, d, r["seed"]), c, st, T, n, d, r["seed"]) if r["draw"] == d else r
                for r in found[st, T][n]
            ]
        out.append({"steps": steps, "runs": len(unfit) * c["seeds"]})
    return out


# ---- statistics ------------------------------------------------------------------------------------


def logistic(x: Sequence[float], y: Sequence[int], ridge: float = RIDGE) -> Optional[dict[str, float]]:
    """Maximum likelihood of P(y = 1) = sigmoid(a + b (x - mean x)) with a ridge penalty ridge/2 b² (Newton's
    method). None when y is all 0 or all 1 (no transition to place)."""
    if len(set(y)) < 2:
        return None
    xm = statistics.fmean(x)
    u = [v - xm for v in x]
    a, b = 0.0, 0.0
    for _ in range(200):
        p = [1 / (1 + math.exp(-max(-50.0, min(50.0, a + b * ui)))) for ui in u]
        w = [pi * (1 - pi) + 1e-12 for pi in p]
        ga = sum(pi - yi for pi, yi in zip(p, y))
        gb = sum((pi - yi) * ui for pi, yi, ui in zip(p, y, u)) + ridge * b
        haa, hab, hbb = sum(w), sum(wi * ui for wi, ui in zip(w, u)), sum(wi * ui * ui for wi, ui in zip(w, u)) + ridge
        det = haa * hbb - hab * hab
        da, db = (hbb * ga - hab * gb) / det, (haa * gb - hab * ga) / det
        a, b = a - da, b - db
        if abs(da) + abs(db) < 1e-10:
            break
    return {"intercept": a, "slope": b, "x_mean": xm}


def size_at(fit: Optional[dict[str, float]], q: float) -> Optional[float]:
    """The n with P(success) = q on a logistic fit in log2 n; None without a rising fit."""
    if fit is None or fit["slope"] <= 0:
        return None
    return 2 ** (fit["x_mean"] + (math.log(q / (1 - q)) - fit["intercept"]) / fit["slope"])


def sizes_of(rows: Sequence[dict[str, Any]], count_unfitted: bool = False) -> dict[str, Optional[float]]:
    """n50 and n90 of runs: from those that fit their training set, or from all with the others as failures."""
    use = [r for r in rows if r["fits"] or count_unfitted]
    fit = (
        logistic([math.log2(r["n_train"]) for r in use], [int(r["success"] and r["fits"]) for r in use])
        if use
        else None
    )
    return {"n50": size_at(fit, 0.5), "n90": size_at(fit, 0.9), "fit": fit}


def percentile(xs: Sequence[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100
    i = math.floor(k)
    return xs[i] if i + 1 >= len(xs) else xs[i] + (xs[i + 1] - xs[i]) * (k - i)


def interval(xs: Sequence[Optional[float]]) -> Optional[list[float]]:
    """Percentile bootstrap interval of the replicates that exist."""
    xs = [x for x in xs if x is not None]
    return [percentile(xs, CI[0]), percentile(xs, CI[1])] if xs else None


def bootstrap(
    rows: Sequence[dict[str, Any]], draws: int | Sequence[int], replicates: int, seed: int
) -> list[dict[str, Optional[float]]]:
    """n50 and n90 of `replicates` resamples of the draws (a list, or a count n: 0..n-1), each with all its
    runs, at every size and seed."""
    ds = harness.seeds(draws)
    by_draw = [[r for r in rows if r["draw"] == d] for d in ds]
    rng = random.Random(seed)
    out = []
    for _ in range(replicates):
        sample = [r for _ in range(len(ds)) for r in by_draw[rng.randrange(len(ds))]]
        out.append({k: v for k, v in sizes_of(sample).items() if k != "fit"})
    return out


def rel_rms(pred: Sequence[float], obs: Sequence[float]) -> float:
    return math.sqrt(statistics.fmean([(p / o - 1) ** 2 for p, o in zip(pred, obs)]))


def scaling_fits(lengths: Sequence[int], ns: Sequence[float]) -> dict[str, Any]:
    """n(T) fitted by a + b log2 T, a + b T and c T^alpha, with each fit's relative rms error."""
    log_fit = stats.linear_fit([math.log2(T) for T in lengths], list(ns))
    lin_fit = stats.linear_fit([float(T) for T in lengths], list(ns))
    power = stats.power_fit([float(T) for T in lengths], list(ns))
    log_fit["rel_rms"] = rel_rms([log_fit["intercept"] + log_fit["slope"] * math.log2(T) for T in lengths], ns)
    lin_fit["rel_rms"] = rel_rms([lin_fit["intercept"] + lin_fit["slope"] * T for T in lengths], ns)
    power["rel_rms"] = rel_rms([power["prefactor"] * T ** power["exponent"] for T in lengths], ns)
    # n(T_last) / n(T_first) beside what n ∝ log2 T and n ∝ T would give
    return {
        "log2_T": log_fit,
        "T": lin_fit,
        "power": power,
        "ratio_last_first": ns[-1] / ns[0],
        "ratio_if_proportional_to_log2_T": math.log2(lengths[-1]) / math.log2(lengths[0]),
        "ratio_if_proportional_to_T": lengths[-1] / lengths[0],
    }


def fits_with_intervals(lengths: Sequence[int], ns: Sequence[float], reps: Sequence[Sequence[float]]) -> dict[str, Any]:
    """`scaling_fits` of n(T), with 95 % intervals from the same fits of the bootstrap replicates `reps`."""
    s = scaling_fits(lengths, ns)
    fits = [scaling_fits(lengths, r) for r in reps]
    s["log2_T"]["slope_ci"] = interval([r["log2_T"]["slope"] for r in fits])
    s["T"]["slope_ci"] = interval([r["T"]["slope"] for r in fits])
    s["power"]["exponent_ci"] = interval([r["power"]["exponent"] for r in fits])
    s["ratio_last_first_ci"] = interval([r["ratio_last_first"] for r in fits])
    s["bootstrap_replicates"] = len(fits)
    return s


def verdict(s: dict[str, Any], problems: Sequence[str]) -> str:
    """The data's verdict on "n grows like log T" from `scaling`'s fits of one quantile: the rule lives in
    experiments/rules/sparse_selection.py (`scaling_verdict`, with its thresholds), committed apart from
    this script; the claims in the JSON apply it from there."""
    return RULES.scaling_verdict(s, problems)


def summarize(c: dict[str, Any], found: dict[tuple[str, int], dict[int, list[dict]]]) -> dict[str, Any]:
    per_setting = {}
    for si, st in enumerate(c["settings"]):
        per_T, boots, problems = {}, {}, []
        for ti, T in enumerate(c["lengths"]):
            cells = found[st, T]
            rows = [r for n in sorted(cells) for r in cells[n]]
            est = sizes_of(rows)
            boots[T] = bootstrap(rows, harness.seeds(c["draws"]), c["bootstrap"], seed=1000 * si + ti)
            sizes = sorted(cells)
            lowest, highest = success_rate(cells[sizes[0]]), success_rate(cells[sizes[-1]])
            not_fitted = sum(not r["fits"] for r in rows)
            per_T[str(T)] = {
                "sizes": {
                    str(n): {
                        "runs": len(cells[n]),
                        "success": success_rate(cells[n]),
                        "not_fitted": sum(not r["fits"] for r in cells[n]),
                        "success_of_fitted": success_rate([r for r in cells[n] if r["fits"]])
                        if any(r["fits"] for r in cells[n])
                        else None,
                        "balanced_acc": stats.spread([r["balanced_acc"] for r in cells[n]]),
                    }
                    for n in sizes
                },
                "n50": est["n50"],
                "n50_ci": interval([b["n50"] for b in boots[T]]),
                # a quantile outside the sizes trained is an extrapolation of the logistic curve
                "n50_within_grid": est["n50"] is not None and sizes[0] <= est["n50"] <= sizes[-1],
                "n90_within_grid": est["n90"] is not None and sizes[0] <= est["n90"] <= sizes[-1],
                "n90": est["n90"],
                "n90_ci": interval([b["n90"] for b in boots[T]]),
                "n50_counting_unfitted_as_failures": sizes_of(rows, count_unfitted=True)["n50"],
                "logistic": est["fit"],
                "bootstrap_without_n50": sum(b["n50"] is None for b in boots[T]),
                "grid": [sizes[0], sizes[-1]],
                "bracketed": lowest <= LOW and highest >= HIGH,
                "runs": len(rows),
                "not_fitted": not_fitted,
                "continued": sum(r["steps"] > c["steps"] for r in rows),
                "steps": stats.spread([r["steps"] for r in rows]),
                "train_loss": stats.spread([r["train_loss"] for r in rows]),
                "train_loss_of_fitted_max": max((r["train_loss"] for r in rows if r["fits"]), default=None),
                "outcome_changed_after_previous_step": sum(r["success"] != r["success_at_previous_step"] for r in rows),
            }
            if not per_T[str(T)]["bracketed"]:
                problems.append(
                    f"T={T}: the grid {sizes[0]}..{sizes[-1]} does not bracket the transition "
                    f"(success {lowest:.2f} at its smallest size, {highest:.2f} at its largest)"
                )
            if not_fitted > MAX_NOT_FITTED * len(rows):
                problems.append(f"T={T}: {not_fitted} of {len(rows)} runs did not fit their training set")
            if est["n50"] is None:
                problems.append(f"T={T}: no rising logistic fit")
        scaling, reversed_T = {}, {}
        for q in ("n50", "n90"):
            ns = [per_T[str(T)][q] for T in c["lengths"]]
            if any(n is None for n in ns) or len(c["lengths"]) < 2:
                scaling[q] = reversed_T[q] = None
                continue
            reps = [[boots[T][b][q] for T in c["lengths"]] for b in range(c["bootstrap"])]
            reps = [r for r in reps if all(v is not None for v in r)]
            scaling[q] = fits_with_intervals(c["lengths"], ns, reps)
            scaling[q]["verdict"] = verdict(scaling[q], problems)
            # the negative control of the rules: the same sizes with the lengths in reverse order (n falls as T grows)
            reversed_T[q] = fits_with_intervals(c["lengths"], ns[::-1], [r[::-1] for r in reps])
        rows = [r for T in c["lengths"] for n in found[st, T] for r in found[st, T][n]]
        budget = {
            "runs": len(rows),
            "not_fitted": sum(not r["fits"] for r in rows),
            "continued": sum(r["steps"] > c["steps"] for r in rows),
            "fitted_after_continuing": sum(r["fits"] and r["steps"] > c["steps"] for r in rows),
            "train_loss_of_fitted_max": max((r["train_loss"] for r in rows if r["fits"]), default=None),
            "outcome_changed_after_previous_step": sum(r["success"] != r["success_at_previous_step"] for r in rows),
        }
        per_setting[st] = {
            "per_T": per_T,
            "scaling": scaling,
            "scaling_T_reversed": reversed_T,
            "problems": problems,
            "budget": budget,
            "p_one": SETTINGS[st] if SETTINGS[st] is not None else 0.5 ** (1 / 3),
        }
    return per_setting


def support_summary(rows: Sequence[dict[str, Any]], at: str = "") -> dict[str, Any]:
    """Support recovery in runs that succeed and that fail, at the end (at = "") or at step 0 (at = "_at_init")."""
    gen, failed = [r for r in rows if r["success"]], [r for r in rows if not r["success"]]
    return {
        "succeeded_runs": len(gen),
        "succeeded_with_support_recovered": sum(r["support_recovered" + at] for r in gen),
        "failed_runs": len(failed),
        "failed_with_support_recovered": sum(r["support_recovered" + at] for r in failed),
        "attention_on_support_succeeded": stats.spread([r["attention_on_support" + at] for r in gen]),
        "attention_on_support_failed": stats.spread([r["attention_on_support" + at] for r in failed]),
    }


def support_timeline(result: dict[str, Any]) -> dict[str, Any]:
    """Attention on S, support recovery and held-out balanced accuracy at every checkpoint of one run."""
    run = result["run"]
    tl = timeline.probe_run(run, ["sparse_selection"])
    acc = {r["step"]: r["eval/balanced_acc"] for r in run.metrics if "eval/balanced_acc" in r}
    per_head = tl.per_head["sparse_selection"]
    attention = per_head["L0H0"] if len(per_head) == 1 else tl.metrics["sparse_selection"]["max"]
    recovered = tl.metrics["sparse_selection"]["support_recovered"]
    return {k: result[k] for k in ("setting", "T", "n_train", "draw", "seed")} | {
        "steps": tl.steps,
        "attention_on_support": [round(a, 4) for a in attention],
        "support_recovered": recovered,
        "balanced_acc": [acc.get(step) for step in tl.steps],
        "recovered_from_step": timeline.formation_step(tl.steps, recovered, 1.0),
        "succeeded_from_step": timeline.formation_step(tl.steps, [acc.get(x, 0.0) for x in tl.steps], SUCCESS),
    }


def timeline_runs(c: dict[str, Any], found: dict[tuple[str, int], dict[int, list[dict]]]) -> list[dict[str, Any]]:
    """Per setting and T, the first draw's seed 0 at the smallest size where it succeeded (none if it never did)."""
    out, draw = [], harness.seeds(c["draws"])[0]
    for cells in found.values():
        first = [r for n in sorted(cells) for r in cells[n] if r["draw"] == draw and r["seed"] == 0 and r["success"]]
        if first:
            out.append(first[0])
    return out


# ---- figures ---------------------------------------------------------------------------------------


def plot(s: harness.Session, c: dict[str, Any], data: dict[str, Any]) -> list[Path]:
    import matplotlib.pyplot as plt

    paths = []
    settings = c["settings"]
    fig, axes = plt.subplots(2, len(settings), figsize=(5.5 * len(settings), 8.4), squeeze=False)
    for j, st in enumerate(settings):
        ax, ax_n = axes[0, j], axes[1, j]
        result = data["settings"][st]
        for k, T in enumerate(c["lengths"]):
            row = result["per_T"][str(T)]
            ns = [int(n) for n in row["sizes"]]
            ax.plot(
                ns,
                [
                    row["sizes"][str(n)]["success_of_fitted"]
                    if row["sizes"][str(n)]["success_of_fitted"] is not None
                    else math.nan
                    for n in ns
                ],
                "o",
                color=f"C{k}",
                ms=4,
                label=f"T={T}",
            )
            fit = row["logistic"]
            if fit:
                xs = [ns[0] * (ns[-1] / ns[0]) ** (i / 60) for i in range(61)]
                ax.plot(
                    xs,
                    [
                        1 / (1 + math.exp(-(fit["intercept"] + fit["slope"] * (math.log2(x) - fit["x_mean"]))))
                        for x in xs
                    ],
                    "-",
                    color=f"C{k}",
                    lw=1,
                )
        ax.axhline(0.5, color="gray", lw=0.6, ls=":")
        ax.axhline(0.9, color="gray", lw=0.6, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training set size n")
        ax.set_ylabel(f"P(held-out balanced acc ≥ {SUCCESS}), runs that fit")
        ax.set_title(f"{st} bits (P(1) = {result['p_one']:.3f}): success vs n")
        ax.legend(fontsize=7)
        for q, marker in (("n50", "o"), ("n90", "s")):
            pts = [(T, result["per_T"][str(T)][q], result["per_T"][str(T)][f"{q}_ci"]) for T in c["lengths"]]
            pts = [(T, v, ci) for T, v, ci in pts if v is not None]
            if pts:
                ax_n.errorbar(
                    [T for T, _, _ in pts],
                    [v for _, v, _ in pts],
                    yerr=[[v - ci[0] if ci else 0 for _, v, ci in pts], [ci[1] - v if ci else 0 for _, v, ci in pts]],
                    fmt=marker,
                    capsize=3,
                    label=f"{q} (95% bootstrap)",
                )
            fits = result["scaling"][q]
            if fits and q == "n50":
                xs = [c["lengths"][0] * (c["lengths"][-1] / c["lengths"][0]) ** (i / 60) for i in range(61)]
                lf, tf, pf = fits["log2_T"], fits["T"], fits["power"]
                ax_n.plot(
                    xs,
                    [lf["intercept"] + lf["slope"] * math.log2(x) for x in xs],
                    "g--",
                    lw=1,
                    label=f"n50 ~ a + b log2 T (rel rms {lf['rel_rms']:.2f})",
                )
                ax_n.plot(
                    xs,
                    [tf["intercept"] + tf["slope"] * x for x in xs],
                    "r:",
                    lw=1,
                    label=f"n50 ~ a + b T (rel rms {tf['rel_rms']:.2f})",
                )
                ax_n.plot(
                    xs,
                    [pf["prefactor"] * x ** pf["exponent"] for x in xs],
                    "k-.",
                    lw=1,
                    label=f"n50 ~ c T^{pf['exponent']:.2f} (rel rms {pf['rel_rms']:.2f})",
                )
        ax_n.set_xscale("log", base=2)
        ax_n.set_yscale("log", base=2)
        ax_n.set_xlabel("T (input bits)")
        ax_n.set_ylabel("training set size at 50% / 90% success")
        if ax_n.get_legend_handles_labels()[0]:
            ax_n.legend(fontsize=7)
    paths.append(harness.save_figure(fig, s.args.out / f"{NAME}_samples.png"))

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for tl in data["support_timelines"]:
        steps = [max(step, 1) for step in tl["steps"]]
        style = "-" if tl["setting"] == settings[0] else "--"
        colour = f"C{c['lengths'].index(tl['T'])}"
        label = f"{tl['setting']} T={tl['T']} n={tl['n_train']}"
        axes[0].plot(steps, tl["attention_on_support"], style, color=colour, alpha=0.8, label=label)
        axes[1].plot(
            steps, [a if a is not None else float("nan") for a in tl["balanced_acc"]], style, color=colour, alpha=0.8
        )
    axes[0].set_ylabel("readout attention on S (sum over S)")
    axes[1].set_ylabel("held-out balanced accuracy")
    for a in axes:
        a.set_xscale("log")
        a.set_xlabel("training step")
    axes[0].legend(fontsize=6, ncol=2)
    fig.suptitle("the first draw at its smallest successful size: attention concentrates on S as the model generalizes")
    paths.append(harness.save_figure(fig, s.args.out / f"{NAME}_attention.png"))
    return paths


@harness.experiment(NAME, __doc__)
def main(s: harness.Session, args: harness.Args) -> int:
    c = SIZES[args.size]
    found, rounds, extended = measure(s, c)
    every = [r for cells in found.values() for n in sorted(cells) for r in cells[n]]
    results: dict[str, Any] = {"settings": summarize(c, found)}
    results["support_at_end"] = {st: support_summary([r for r in every if r["setting"] == st]) for st in c["settings"]}
    results["support_timelines"] = [support_timeline(r) for r in timeline_runs(c, found)]
    timelines = [tl for tl in results["support_timelines"] if tl["succeeded_from_step"] is not None]
    results["support_recovered_no_later_than_success"] = {
        "count": sum(
            tl["recovered_from_step"] is not None and tl["recovered_from_step"] <= tl["succeeded_from_step"]
            for tl in timelines
        ),
        "of": len(timelines),
    }
    # the negative control of the attention rule: the same runs at step 0, split by their final success
    results["support_at_init"] = {
        st: support_summary([r for r in every if r["setting"] == st], "_at_init") for st in c["settings"]
    }
    results["support_recovered_at_first_checkpoint"] = {
        "count": sum(bool(tl["support_recovered"][0]) for tl in timelines),
        "of": len(timelines),
    }
    results["runs"] = [{k: v for k, v in r.items() if k != "run"} for r in every]
    results["runs_per_round"] = rounds
    results["runs_continued"] = extended
    results["success_threshold"] = SUCCESS
    results["draws"] = harness.seeds(c["draws"])
    results["rules"] = {
        "bracket": [LOW, HIGH],
        "max_not_fitted": MAX_NOT_FITTED,
        "exponent_split": EXPONENT_SPLIT,
        "log_fit_rel_rms": LOG_FIT_RMS,
        "ci_percentiles": list(CI),
        "logistic_ridge": RIDGE,
    }
    results["train_time_s_total"] = round(sum(r["train_time_s"] for r in results["runs"]), 1)
    s.finish(c, results, plot(s, c, results))
    size = lambda v: f"{v:7.1f}" if v is not None else "not fit"  # noqa: E731 (no logistic fit: no size)
    ci = lambda v: v if v is not None else "(no interval)"  # noqa: E731
    for st, res in results["settings"].items():
        for T, row in res["per_T"].items():
            print(
                f"{st:<8} T={T:<4} n50 {size(row['n50'])} {ci(row['n50_ci'])}  n90 {size(row['n90'])} {ci(row['n90_ci'])}"
                f"  not fitted {row['not_fitted']}/{row['runs']}  grid {row['grid']} bracketed {row['bracketed']}"
            )
        for q, fit in res["scaling"].items():
            if fit:
                print(
                    f"{st} {q}: alpha {fit['power']['exponent']:.2f} {fit['power']['exponent_ci']}, rel rms log "
                    f"{fit['log2_T']['rel_rms']:.2f} linear {fit['T']['rel_rms']:.2f}: {fit['verdict']}"
                )
        for p in res["problems"]:
            print(f"{st}: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
