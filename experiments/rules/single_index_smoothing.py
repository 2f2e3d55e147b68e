"""The claims of experiments/single_index_smoothing.py and the rules that judge them.

Damian, Nichani, Ge & Lee 2023, "Smoothing the landscape boosts the signal for SGD" (seed 004): to learn
σ(w*·x) from x ~ N(0, I_d), online SGD needs n ≈ d^{k*−1} samples (Ben Arous et al. 2021), and online SGD on the
smoothed loss L_λ with λ = d^{1/4} needs n ≈ d^{k*/2}, the lower bound for such methods.

First written before the script's runs; a pilot (k* = 3, d = 16 and 32, three learning rates, 4 seeds; not
judged) sized the step caps and the learning-rate grid.

Rewritten for issue 46, after the runs of seeds 0–7 (d = 8–64; assets/single_index_smoothing.json of commit
a14ec216f2b9) had been seen: both exponents came out "does not" (2.96 and 2.04 against 2 and 1.5), driven by
"weak recovery" in 0–20 samples at d = 8 and 16, where a random start or a few large steps reach w·w* ≥ 1/2 by
chance (over d = 32–64 alone the slopes were 2.76 and 1.54). What changed:
- a sample floor: the script also records, for each seed, the samples until w reaches alignment 1/2 with a
  random direction orthogonal to w* (which the labels never depend on). A d is at chance, and left out of the
  fit, when at least CHANCE_SHARE of its seeds reach that random direction within the median samples to weak
  recovery (each arm at its best learning rate); the fit needs ≥ MIN_DIMS dimensions above the floor;
- the learning-rate choice and the fit (slope of log median samples against log d, with a bootstrap interval
  over seeds) moved from the script into these rules, so that the negative controls go through them too;
- negative controls: for the two exponents, the samples to the random direction in place of those to w* (the
  same rule, the same floor, with w* as the chance reference); for smoothing_needs_fewer, the arms swapped;
- every claim depends on scale (exponents and an ordering in the large-d limit); no budget: the paper's claims
  are asymptotic in d, up to log factors, with no sample count of its own to compare ours with.
The runs they judge: d = 16–64 (the script's SIZES), seed indices 0–7 as before (a point's seeds train side by
side only as 0..S−1, and a run's initial direction and data stream are its index), with a fresh truth w*:
task.seed 300 (config.size.task_seed, and each run's config), where the earlier runs had task.seed 0. The problem
is rotation-invariant, so a new w* makes each run a new draw of its samples to weak recovery.

The judge reads `results`: "k_star"; "dims" (the d's); per arm ("vanilla", "smoothed") per d (as a string)
"grid": one entry per learning rate, in the grid's order, {"lr_factor", "samples", "random"} (each seed's samples
to weak recovery, and to alignment 1/2 with its random direction; None where the cap came first).
"""

from __future__ import annotations

import copy
import math
import statistics
from typing import Any, Mapping, Optional, Sequence

from experiments import verdicts

ARMS = ("vanilla", "smoothed")
MIN_SEEDS = 5  # seeds per (arm, d, learning rate)
CLOSE = 0.25  # |slope − predicted| for "matches"
NEAR = 0.5  # ... for "partly"
MIN_R2 = 0.9  # a power law that fits worse than this cannot be read as one
CHANCE_SHARE = 0.25  # a d whose seeds reach a random direction this often, within the median samples to weak
#                      recovery, recovers w* by chance: it is below the sample floor
MIN_DIMS = 3  # dimensions above the floor that a slope needs
DRAWS = 2000  # bootstrap draws of the slope


def predicted(results: Mapping[str, Any], arm: str) -> float:
    k = results["k_star"]
    return k - 1 if arm == "vanilla" else k / 2


def median(xs: Sequence[Optional[float]]) -> Optional[float]:
    """The median counting a seed that did not recover as infinitely many samples (None when that is the median)."""
    m = statistics.median([math.inf if x is None else x for x in xs])
    return None if math.isinf(m) else m


def best(results: Mapping[str, Any], arm: str, d: int) -> dict[str, Any]:
    """The learning rate of the grid with the fewest median samples to weak recovery (the first on a tie): its
    factor, seeds' samples and samples to the random direction, the median, whether it is at the grid's end, and
    the share of seeds that reached the random direction within that median (None when the median is not)."""
    grid = results[arm][str(d)]["grid"]
    i = min(
        range(len(grid)), key=lambda j: math.inf if median(grid[j]["samples"]) is None else median(grid[j]["samples"])
    )
    g, m = grid[i], median(grid[i]["samples"])
    chance = None if m is None else sum(r is not None and r <= m for r in g["random"]) / len(g["random"])
    return {
        "lr_factor": g["lr_factor"],
        "samples": list(g["samples"]),
        "random": list(g["random"]),
        "median": m,
        "edge": i in (0, len(grid) - 1),
        "chance": chance,
    }


def at_chance(b: Mapping[str, Any]) -> bool:
    return b["chance"] is not None and b["chance"] >= CHANCE_SHARE


def seeds_of(results: Mapping[str, Any]) -> int:
    return min(len(g["samples"]) for arm in ARMS for d in results["dims"] for g in results[arm][str(d)]["grid"])


def power_fit(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """Least squares of log y = a + b log x: the slope b, the prefactor e^a, and R²."""
    lx, ly = [math.log(v) for v in x], [math.log(v) for v in y]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    b = sum((a - mx) * (c - my) for a, c in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)
    a = my - b * mx
    ss_res = sum((c - a - b * v) ** 2 for v, c in zip(lx, ly))
    ss_tot = sum((c - my) ** 2 for c in ly)
    return {"slope": b, "prefactor": math.exp(a), "r2": 1 - ss_res / ss_tot if ss_tot > 0 else 1.0}


def fit(
    dims: Sequence[int], samples: Mapping[int, Sequence[Optional[float]]], draws: int = DRAWS
) -> Optional[dict[str, Any]]:
    """Slope of log median samples on log d, R², and a 95% bootstrap interval (seeds resampled within each d); None
    when a median is not reached. A median of 0 (a start at weak recovery) counts as 1 sample in the logarithms."""
    import numpy as np

    medians = [median(samples[d]) for d in dims]
    if any(m is None for m in medians):
        return None
    f = power_fit(dims, [max(m, 1) for m in medians])
    rng, slopes = np.random.default_rng(0), []
    for _ in range(draws):
        ms = [median([samples[d][i] for i in rng.integers(0, len(samples[d]), len(samples[d]))]) for d in dims]
        if all(m is not None for m in ms):
            slopes.append(power_fit(dims, [max(m, 1) for m in ms])["slope"])
    interval = [float(np.quantile(slopes, 0.025)), float(np.quantile(slopes, 0.975))] if slopes else None
    return {**f, "interval": interval, "dims": list(dims)}


def fitted(results: Mapping[str, Any], arm: str) -> dict[str, Any]:
    """The arm's best learning rate per d, the dims above the floor, and the fit over them (None: fewer than
    MIN_DIMS above it, or a median not reached)."""
    bests = {d: best(results, arm, d) for d in results["dims"]}
    above = [d for d, b in bests.items() if not at_chance(b)]
    reached = all(bests[d]["median"] is not None for d in above)
    f = fit(above, {d: bests[d]["samples"] for d in above}) if len(above) >= MIN_DIMS and reached else None
    return {"best": bests, "above_floor": above, "fit": f}


def _floor_line(bests: Mapping[int, Mapping[str, Any]]) -> str:
    below = [(d, b) for d, b in bests.items() if at_chance(b)]
    if not below:
        return "no d below the sample floor"
    return "below the sample floor: " + ", ".join(
        f"d = {d} ({round(b['chance'] * len(b['random']))}/{len(b['random'])} seeds at a random direction within its "
        f"median {verdicts.num(b['median'])})"
        for d, b in below
    )


def judge_exponent(arm: str):
    def judge(results: Mapping[str, Any]) -> verdicts.Judgement:
        n, want, got = seeds_of(results), predicted(results, arm), fitted(results, arm)
        bests, above, f = got["best"], got["above_floor"], got["fit"]
        floor = _floor_line(bests)
        missing = [d for d in above if bests[d]["median"] is None]
        if missing:
            return verdicts.Judgement(
                "inconclusive",
                f"{arm}: the median did not reach weak recovery within its cap at "
                f"d = {', '.join(map(str, missing))}; {floor}",
                n,
            )
        if f is None:
            return verdicts.Judgement(
                "inconclusive", f"{arm}: {len(above)} d above the sample floor, the fit needs {MIN_DIMS}; {floor}", n
            )
        lo, hi = f["interval"]
        line = (
            f"{arm}: samples to weak recovery ∝ d^{f['slope']:.2f} (95% interval {lo:.2f}–{hi:.2f}, R² "
            f"{f['r2']:.2f}) over d = {', '.join(map(str, above))}; predicted d^{want:g}; {floor}"
        )
        edges = [d for d in above if bests[d]["edge"]]
        if f["r2"] < MIN_R2 or edges:
            why = (
                f"R² below {MIN_R2}"
                if f["r2"] < MIN_R2
                else f"the best learning rate at the grid's end for d = {edges}"
            )
            return verdicts.Judgement("inconclusive", f"{line}; {why}", n)
        gap = abs(f["slope"] - want)
        verdict = "matches" if gap <= CLOSE else "partly" if gap <= NEAR or lo <= want <= hi else "does not"
        return verdicts.Judgement(verdict, line, n)

    return judge


def judge_fewer(results: Mapping[str, Any]) -> verdicts.Judgement:
    d = max(results["dims"])
    a, b = best(results, "vanilla", d), best(results, "smoothed", d)
    n = seeds_of(results)
    from scipy.stats import mannwhitneyu

    inf = float("inf")
    p = float(
        mannwhitneyu(
            [inf if x is None else x for x in b["samples"]],
            [inf if x is None else x for x in a["samples"]],
            alternative="less",
        ).pvalue
    )
    line = (
        f"at d = {d}, median samples to weak recovery: smoothed {verdicts.num(b['median'])} against vanilla "
        f"{verdicts.num(a['median'])} (each at its best learning rate; one-sided Mann–Whitney p {verdicts.p_value(p)})"
    )
    if a["median"] is None and b["median"] is None:
        return verdicts.Judgement("inconclusive", line, n)
    chance = [arm for arm, x in (("vanilla", a), ("smoothed", b)) if at_chance(x)]
    if chance:
        return verdicts.Judgement("inconclusive", f"{line}; {' and '.join(chance)} below the sample floor there", n)
    fewer = a["median"] is None or (b["median"] is not None and b["median"] < a["median"])
    verdict = "matches" if fewer and p < verdicts.LEVEL else "partly" if fewer else "does not"
    return verdicts.Judgement(verdict, line, n)


def random_direction(results: Mapping[str, Any]) -> dict[str, Any]:
    """The control of the exponents: each seed's samples to a random direction the labels never depend on in
    place of its samples to w* (and w* as the chance reference)."""
    out = copy.deepcopy(dict(results))
    for arm in ARMS:
        for d in results["dims"]:
            for g in out[arm][str(d)]["grid"]:
                g["samples"], g["random"] = g["random"], g["samples"]
    return out


def arms_swapped(results: Mapping[str, Any]) -> dict[str, Any]:
    return {**results, "vanilla": results["smoothed"], "smoothed": results["vanilla"]}


PAPER = (
    "theory: a single index model with the link's information exponent k*, x ~ N(0, I_d), spherical online "
    "SGD on the correlation loss, smoothing λ = d^{1/4} (their Algorithm 1), n in the large-d limit up to log factors"
)

FLOOR = (
    f"a d is below the sample floor, and left out, when ≥ {CHANCE_SHARE:g} of its seeds reach alignment 1/2 with "
    f"a random direction orthogonal to w* within the median samples to weak recovery"
)

RULE_FIT = (
    f"per arm, for each d the learning rate of the grid with the fewest median samples to weak recovery "
    f"(alignment w·w* ≥ 1/2, signed as the link's parity allows) over ≥ {MIN_SEEDS} seeds; {FLOOR}; the "
    f"slope of log median against log d over the d above the floor (≥ {MIN_DIMS} of them), with a 95% "
    f"bootstrap interval over seeds: matches within {CLOSE} of the predicted exponent, partly within {NEAR} "
    f"or when the interval holds it, does not otherwise; inconclusive when fewer than {MIN_DIMS} d are above "
    f"the floor, a median there is not reached, the fit's R² is below {MIN_R2}, or a best learning rate "
    f"there sits at the grid's end"
)

BUDGET_NOTE = "none: the paper's rates are asymptotic in d, up to log factors, with no sample count of its own"
RANDOM_NOTE = "samples to a random direction orthogonal to w* in place of those to w*"

CLAIMS = [
    verdicts.Claim(
        id="vanilla_exponent",
        claim="Online SGD learns σ(w*·x) from n ≈ d^{k*−1} samples (Ben Arous et al.)",
        paper=PAPER,
        rule=RULE_FIT + "; predicted exponent k* − 1",
        judge=judge_exponent("vanilla"),
        min_n=MIN_SEEDS,
        scale=True,
        budget_note=BUDGET_NOTE,
        control=random_direction,
        control_note=RANDOM_NOTE,
    ),
    verdicts.Claim(
        id="smoothed_exponent",
        claim="Online SGD on the smoothed loss (λ = d^{1/4}) learns it from n ≈ d^{k*/2} samples",
        paper=PAPER,
        rule=RULE_FIT + "; predicted exponent k*/2",
        judge=judge_exponent("smoothed"),
        min_n=MIN_SEEDS,
        scale=True,
        budget_note=BUDGET_NOTE,
        control=random_direction,
        control_note=RANDOM_NOTE,
    ),
    verdicts.Claim(
        id="smoothing_needs_fewer",
        claim="Smoothing the loss lowers the samples online SGD needs",
        paper=PAPER,
        rule=f"at the largest d, each arm at its best learning rate over ≥ {MIN_SEEDS} seeds (a seed that did not "
        f"recover counts as infinitely many samples): matches when the smoothed median is below the vanilla one "
        f"and a one-sided Mann–Whitney test gives p < {verdicts.LEVEL}, partly when only the median is below, "
        f"does not otherwise; inconclusive when that d is below the sample floor in either arm (≥ {CHANCE_SHARE:g} of "
        f"its seeds reach alignment 1/2 with a random direction orthogonal to w* within the median samples to "
        f"weak recovery)",
        judge=judge_fewer,
        min_n=MIN_SEEDS,
        scale=True,
        budget_note=BUDGET_NOTE,
        control=arms_swapped,
        control_note="the arms swapped",
    ),
]
