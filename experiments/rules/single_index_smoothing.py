"""The claims of experiments/single_index_smoothing.py and the rules that judge them.

Damian, Nichani, Ge & Lee 2023, "Smoothing the landscape boosts the signal for SGD" (seed 004): to learn
σ(w*·x) from x ~ N(0, I_d), online SGD needs n ≈ d^{k*−1} samples (Ben Arous et al. 2021), and online SGD on the
smoothed loss L_λ with λ = d^{1/4} needs n ≈ d^{k*/2}, the lower bound for such methods.

Written before the script's runs. A pilot (k* = 3, d = 16 and 32, three learning rates, 4 seeds; not judged)
sized the step caps and the learning-rate grid: weak recovery came within a few hundred samples at d = 16.
The judge reads `results`: "k_star"; "dims" (the d's); per arm ("vanilla", "smoothed") per d (as a string)
"best": {"lr_factor", "median", "samples"} (the learning rate of the grid with the smallest median samples to
weak recovery, that median, and each seed's samples there, None where the cap came first), "edge" (whether
the best learning rate is at an end of the grid); and "fits", per arm {"slope", "interval", "r2"} (the slope
of log median samples against log d over the dims, its 95% bootstrap interval over seeds, the fit's R²) or
None where a median was not reached.
"""

from __future__ import annotations

from typing import Any, Mapping

import verdicts

MIN_SEEDS = 5     # seeds per (arm, d, learning rate)
CLOSE = 0.25      # |slope − predicted| for "matches"
NEAR = 0.5        # ... for "partly"
MIN_R2 = 0.9      # a power law that fits worse than this cannot be read as one


def predicted(results: Mapping[str, Any], arm: str) -> float:
    k = results["k_star"]
    return k - 1 if arm == "vanilla" else k / 2


def seeds_of(results: Mapping[str, Any]) -> int:
    return min(len(cell["best"]["samples"]) for arm in ("vanilla", "smoothed") for cell in results[arm].values()
               if isinstance(cell, dict) and "best" in cell)


def judge_exponent(arm: str):
    def judge(results: Mapping[str, Any]) -> verdicts.Judgement:
        n, fit, want = seeds_of(results), results["fits"][arm], predicted(results, arm)
        edges = [d for d in results["dims"] if results[arm][str(d)]["edge"]]
        if fit is None:
            return verdicts.Judgement("inconclusive", f"{arm}: a median did not reach weak recovery within its cap", n)
        lo, hi = fit["interval"]
        line = (f"{arm}: samples to weak recovery ∝ d^{fit['slope']:.2f} (95% interval {lo:.2f}–{hi:.2f}, R² "
                f"{fit['r2']:.2f}) over d = {', '.join(map(str, results['dims']))}; predicted d^{want:g}")
        if fit["r2"] < MIN_R2 or edges:
            why = f"R² below {MIN_R2}" if fit["r2"] < MIN_R2 else f"the best learning rate at the grid's end for d = {edges}"
            return verdicts.Judgement("inconclusive", f"{line}; {why}", n)
        gap = abs(fit["slope"] - want)
        verdict = "matches" if gap <= CLOSE else "partly" if gap <= NEAR or lo <= want <= hi else "does not"
        return verdicts.Judgement(verdict, line, n)
    return judge


def judge_fewer(results: Mapping[str, Any]) -> verdicts.Judgement:
    d = str(max(results["dims"]))
    a, b = results["vanilla"][d]["best"], results["smoothed"][d]["best"]
    n = seeds_of(results)
    from scipy.stats import mannwhitneyu

    inf = float("inf")
    p = float(mannwhitneyu([inf if x is None else x for x in b["samples"]], [inf if x is None else x for x in a["samples"]],
                           alternative="less").pvalue)
    line = (f"at d = {d}, median samples to weak recovery: smoothed {verdicts.num(b['median'])} against vanilla "
            f"{verdicts.num(a['median'])} (each at its best learning rate; one-sided Mann–Whitney p {verdicts.p_value(p)})")
    if a["median"] is None and b["median"] is None:
        return verdicts.Judgement("inconclusive", line, n)
    fewer = a["median"] is None or (b["median"] is not None and b["median"] < a["median"])
    verdict = "matches" if fewer and p < verdicts.LEVEL else "partly" if fewer else "does not"
    return verdicts.Judgement(verdict, line, n)


PAPER = ("theory: a single index model with the link's information exponent k*, x ~ N(0, I_d), spherical online "
         "SGD on the correlation loss, smoothing λ = d^{1/4} (their Algorithm 1), n in the large-d limit up to log factors")

RULE_FIT = (f"per arm, for each d the learning rate of the grid with the fewest median samples to weak recovery "
            f"(alignment w·w* ≥ 1/2, signed as the link's parity allows) over ≥ {MIN_SEEDS} seeds; the slope of log "
            f"median against log d, with a 95% bootstrap interval over seeds: matches within {CLOSE} of the predicted "
            f"exponent, partly within {NEAR} or when the interval holds it, does not otherwise; inconclusive when a "
            f"median is not reached, the fit's R² is below {MIN_R2}, or a best learning rate sits at the grid's end")

CLAIMS = [
    verdicts.Claim(
        id="vanilla_exponent",
        claim="Online SGD learns σ(w*·x) from n ≈ d^{k*−1} samples (Ben Arous et al.)",
        paper=PAPER, rule=RULE_FIT + "; predicted exponent k* − 1",
        judge=judge_exponent("vanilla"), min_n=MIN_SEEDS),
    verdicts.Claim(
        id="smoothed_exponent",
        claim="Online SGD on the smoothed loss (λ = d^{1/4}) learns it from n ≈ d^{k*/2} samples",
        paper=PAPER, rule=RULE_FIT + "; predicted exponent k*/2",
        judge=judge_exponent("smoothed"), min_n=MIN_SEEDS),
    verdicts.Claim(
        id="smoothing_needs_fewer",
        claim="Smoothing the loss lowers the samples online SGD needs",
        paper=PAPER,
        rule=f"at the largest d, each arm at its best learning rate over ≥ {MIN_SEEDS} seeds (a seed that did not "
             f"recover counts as infinitely many samples): matches when the smoothed median is below the vanilla one "
             f"and a one-sided Mann–Whitney test gives p < {verdicts.LEVEL}, partly when only the median is below, "
             f"does not otherwise",
        judge=judge_fewer, min_n=MIN_SEEDS),
]
