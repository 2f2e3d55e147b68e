"""The claims of experiments/simplified_induction.py and the rules that judge them.

Seed 001 ("What is happening under the hood?"), after Edelman, Edelman, Goel, Malach & Tsilivis 2024: in their
simplified transformer f(E) = mask(E W_k (M E)ᵀ) E (model kind minimal_induction), learning has two phases: "W_k
gets a diagonal component after first step, and v gets a quadratic decay"; "once the diagonal bias exists, v_2
gets higher gradient than all other positions"; and "the first step gradient for diagonal bias is O(t) larger than
the gradient bias for step 2, which could explain why step 2 takes a lot longer". The talk shows the simplified
model beside the full transformer, both going uniform → unigram → bigram.

Written before any run of the script at its seeds (100-). Pilots at seeds 0 and 1 were seen, after every threshold
below was set and not changed since: the script on seed 0 (R² of the quadratic 1.0 against 0.87 linear; diagonal
bias 0.012 after step 2; v_2's update largest at 81 % of steps 2–27; the diagonal half-way at step 10, v_2 at 28;
both models uniform → unigram → bigram; r(t) slope 0.89, 0.86 after a small step) and a numpy check of the
gradients (slope ≈ 0.88 at seed 1). The acceptance region of the slope is the project's for "linear"
(factual_capacity's 1 ± 0.2), not chosen from the pilot.

Rewritten for issue 46 after the runs at seeds 100–109 (transformer 100–104) had been seen: the thresholds and
judges are unchanged; each claim now declares its scale dependence, budget and a negative control — the same
simplified model, seeds and SGD on chains without bigram structure (markov_icl's prior "unigram": iid tokens,
the previous token says nothing about the next), and r(t) on those chains. The next runs use seeds 300– (the
script's SIZES); verdicts on older JSONs are post hoc.

v is indexed from 0 as the model stores it: v[0] is their v_1 (the token itself), v[1] their v_2 (the one
before). The judge reads `results`:
  - "minimal": per seed {"seed", "first_step": {"r2_quadratic", "r2_linear", "a", "w_moved_step1",
    "diag_bias_step2"}, "state_c": {"argmax"}, "window": {"from", "to", "share_v2"}, "phase": {"diag_half",
    "v2_half"}, "stages"}: from the run's checkpoints (every step) and gradients at set states (the script says how);
  - "transformer": per seed {"seed", "stages"}: the full 2-layer transformer on the same task;
  - "ratio": {"t": [...], "per_seed": [{"seed", "slope"}]}: the slope of log r(t) against log t;
  - "control": {"prior", "minimal": rows as "minimal", "ratio": as "ratio"}: the negative control, on iid chains.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Mapping, Sequence

from experiments import verdicts

R2 = 0.95  # the first update's profile over d fits a·(1 − d/t)² at least this well...
SHARE = 2 / 3  # "matches": at least this share of the seeds
LEADS = 0.8  # v_2 gets the largest update at ≥ this share of the steps in the window
REGION = (0.8, 1.2)  # the slope of log r against log t: linear (the project's region; factual_capacity)
LONGER = 2.0  # "a lot longer": v_2's half-way step at least this many times the diagonal's
STAGES = ("uniform", "unigram", "bigram")


def need(n: int) -> int:
    return math.ceil(SHARE * n - 1e-9)


def ordered(stages: Sequence[str], want: Sequence[str] = STAGES) -> bool:
    """`want` in order (not necessarily adjacent) in `stages`, the last stage being want[-1]."""
    it = iter(stages)
    return bool(stages) and all(w in it for w in want) and stages[-1] == want[-1]


def _quadratic(r: Mapping[str, Any]) -> bool:
    f = r["first_step"]
    return f["a"] > 0 and f["r2_quadratic"] >= R2 and f["r2_quadratic"] > f["r2_linear"]


def _diagonal(r: Mapping[str, Any]) -> bool:
    f = r["first_step"]
    return not f["w_moved_step1"] and f["diag_bias_step2"] > 0


def judge_first_step(results: Mapping[str, Any]) -> verdicts.Judgement:
    rows = results["minimal"]
    n = len(rows)
    quad, diag = sum(map(_quadratic, rows)), sum(map(_diagonal, rows))
    p = verdicts.binomial_p(sum(r["first_step"]["diag_bias_step2"] > 0 for r in rows), n, 0.5)
    a, b = quad >= need(n), diag >= need(n) and p < verdicts.LEVEL
    verdict = "matches" if a and b else "partly" if a or b else "does not"
    r2 = verdicts.span([r["first_step"]["r2_quadratic"] for r in rows])
    r2l = verdicts.span([r["first_step"]["r2_linear"] for r in rows])
    d2 = verdicts.span([r["first_step"]["diag_bias_step2"] for r in rows])
    return verdicts.Judgement(
        verdict,
        f"v's first update fits a·(1 − d/t)² in {quad}/{n} seeds (R² {r2}; linear "
        f"(1 − d/t): {r2l}); W_k unmoved by the first step and with a diagonal "
        f"bias after the second in {diag}/{n} (bias {d2}; sign test p {verdicts.num(p)})",
        n,
    )


def judge_v2_leads(results: Mapping[str, Any]) -> verdicts.Judgement:
    rows = results["minimal"]
    n = len(rows)
    c = sum(r["state_c"]["argmax"] == 1 for r in rows)
    w = sum(r["window"]["share_v2"] >= LEADS for r in rows)
    a, b = c >= need(n), w >= need(n)
    verdict = "matches" if a and b else "partly" if a or b else "does not"
    shares = verdicts.span([r["window"]["share_v2"] for r in rows])
    ends = verdicts.span([r["window"]["to"] for r in rows])
    return verdicts.Judgement(
        verdict,
        f"with a diagonal bias set by hand (W_k = 0.01·(11ᵀ + I), v = 0) v_2's gradient "
        f"is the largest in {c}/{n} seeds; in training, from the first step with a "
        f"diagonal bias until v_2 is half its final value (step {ends}), v_2 gets the "
        f"largest update at ≥ {LEADS:.0%} of steps in {w}/{n} seeds (share {shares})",
        n,
    )


def judge_ratio(results: Mapping[str, Any]) -> verdicts.Judgement:
    from scipy import stats

    slopes = [r["slope"] for r in results["ratio"]["per_seed"] if r["slope"] is not None]  # None: an r(t) ≤ 0
    n = len(slopes)
    if n < 2:
        return verdicts.Judgement("inconclusive", f"{n} seed(s) with r(t) > 0 at every t", n)
    mean = statistics.fmean(slopes)
    half = stats.t.ppf(0.975, n - 1) * statistics.stdev(slopes) / math.sqrt(n)
    lo, hi = mean - half, mean + half
    verdict = "matches" if REGION[0] <= lo and hi <= REGION[1] else "partly" if mean > 0 else "does not"
    ts = results["ratio"]["t"]
    return verdicts.Judgement(
        verdict,
        f"r(t) ∝ t^{mean:.2f} (95 % interval {lo:.2f}–{hi:.2f} over {n} seeds; "
        f"t = {ts[0]}…{ts[-1]}); linear: the interval inside "
        f"[{REGION[0]:g}, {REGION[1]:g}]",
        n,
    )


def judge_two_phases(results: Mapping[str, Any]) -> verdicts.Judgement:
    rows = [r for r in results["minimal"] if r["phase"]["diag_half"] is not None and r["phase"]["v2_half"] is not None]
    n = len(rows)
    if n == 0:
        return verdicts.Judgement("inconclusive", "no seed has both half-way steps", 0)
    first = sum(r["phase"]["diag_half"] < r["phase"]["v2_half"] for r in rows)
    ratios = [r["phase"]["v2_half"] / max(r["phase"]["diag_half"], 1) for r in rows]
    p = verdicts.binomial_p(first, n, 0.5)
    a = first >= need(n) and p < verdicts.LEVEL
    verdict = "matches" if a and statistics.median(ratios) >= LONGER else "partly" if a else "does not"
    return verdicts.Judgement(
        verdict,
        f"W_k's diagonal bias half-way to its peak before v_2 half-way to its final "
        f"value in {first}/{n} seeds (sign test p {verdicts.num(p)}); steps "
        f"{verdicts.span([r['phase']['diag_half'] for r in rows])} against "
        f"{verdicts.span([r['phase']['v2_half'] for r in rows])} (v_2 later by "
        f"×{verdicts.span(ratios, median=True)})",
        n,
    )


def judge_stages(results: Mapping[str, Any]) -> verdicts.Judgement:
    mini, full = results["minimal"], results["transformer"]
    a, b = sum(ordered(r["stages"]) for r in mini), sum(ordered(r["stages"]) for r in full)
    ok_a, ok_b = a >= need(len(mini)), b >= need(len(full))
    verdict = "matches" if ok_a and ok_b else "partly" if ok_a or ok_b else "does not"
    return verdicts.Judgement(
        verdict,
        f"uniform → unigram → bigram (nearest strategy over checkpoints) in {a}/"
        f"{len(mini)} simplified-model seeds and {b}/{len(full)} transformer seeds",
        min(len(mini), len(full)),
    )


def no_bigrams(results: Mapping[str, Any]) -> dict[str, Any]:
    """The negative control: the simplified model's runs (and r(t)) on chains without bigram structure."""
    return {**results, "minimal": results["control"]["minimal"], "ratio": results["control"]["ratio"]}


CONTROL_NOTE = "the same model and seeds on iid chains (no bigram structure)"
BUDGET_NOTE = "steps × batch over their 200 steps × 128 sequences"

PAPER = (
    "their code (EzraEdelman/Evolution-of-Statistical-Induction-Heads, min_model.py in its first, linear form): "
    "k = 2, t = 100, Dirichlet(1) rows, the first token from the stationary distribution; W_k = 0.01·11ᵀ, v = 0; "
    "plain SGD, W_k at lr 1e-2 and v at lr 1, batch 128, 200 steps"
)

CLAIMS = [
    verdicts.Claim(
        id="first_step",
        claim="W_k gets a diagonal component after the first step, and v gets a quadratic decay",
        paper=PAPER,
        rule=f"per seed, from checkpoints at every step: v after the first update (= lr · its first gradient) fits "
        f"a·(1 − d/t)² with a > 0, R² ≥ {R2:g} and better than a·(1 − d/t); W_k is unmoved by the first update "
        f"(v = 0 gives it no gradient) and has a diagonal bias (mean diagonal − mean off-diagonal) > 0 after the "
        f"second; matches when both hold in ≥ 2/3 of the seeds (≥ 3; the diagonal with a one-sided sign test "
        f"p < 0.05), partly when one does, does not otherwise",
        judge=judge_first_step,
        min_n=3,
        budget=1.0,
        budget_note=BUDGET_NOTE,
        scale=False,
        control=no_bigrams,
        control_note=CONTROL_NOTE,
    ),
    verdicts.Claim(
        id="v2_gets_largest_gradient",
        claim="Once the diagonal bias exists, v_2 gets higher gradient than all other positions",
        paper=PAPER,
        rule=f"per seed: (a) at W_k = 0.01·11ᵀ + 0.01·I, v = 0, v's mean gradient over 64 batches of 128 is largest at "
        f"v_2; (b) in training, from the first step with a diagonal bias > 0 until v_2 first reaches half its "
        f"final value, v's update (plain SGD: −lr · the batch's gradient) is largest at v_2 at ≥ {LEADS:.0%} of "
        f"the steps; matches when (a) and (b) each hold in ≥ 2/3 of the seeds (≥ 3), partly when one does",
        judge=judge_v2_leads,
        min_n=3,
        budget=1.0,
        budget_note=BUDGET_NOTE,
        scale=False,
        control=no_bigrams,
        control_note=CONTROL_NOTE,
    ),
    verdicts.Claim(
        id="ratio_grows_with_t",
        claim="The first step gradient for the diagonal bias is O(t) larger than the gradient for step 2 (v_2)",
        paper=PAPER + "; the talk gives no definition of the two gradients: ours below",
        rule="r(t) = (−∂L/∂W_k's mean diagonal − mean off-diagonal) / (−∂L/∂v_2), both at the uninformed near-init "
        "state W_k = c·11ᵀ, v = c·1 (c = 1e-3: the first step's linearization, every gradient non-zero), mean "
        "gradients over 64 batches of 128 sequences, at t = 25, 50, 100, 200, 400; per seed the least-squares "
        f"slope of log r against log t; matches when the 95 % t-interval of the mean slope (≥ 3 seeds) lies in "
        f"[{REGION[0]:g}, {REGION[1]:g}], partly when the mean slope is > 0 but the interval is not inside, "
        f"does not when ≤ 0",
        judge=judge_ratio,
        min_n=3,
        scale=True,
        control=no_bigrams,
        control_note=CONTROL_NOTE,
        budget_note="no training budget: gradients at set states (64 batches of 128 per t); the talk's theory "
        "states no t range",
    ),
    verdicts.Claim(
        id="two_phases",
        claim="Two-phase learning: W_k's diagonal first, then v_2, which takes a lot longer",
        paper=PAPER,
        rule=f"per seed: the first step where W_k's diagonal bias reaches half its peak over training, and the first "
        f"where v_2 reaches half its final value; matches when the diagonal comes first in ≥ 2/3 of the seeds "
        f"(≥ 3; one-sided sign test p < 0.05) and the median ratio of the two steps is ≥ {LONGER:g}; partly "
        f"when first but not {LONGER:g}× longer; does not otherwise",
        judge=judge_two_phases,
        min_n=3,
        budget=1.0,
        budget_note=BUDGET_NOTE,
        scale=True,
        control=no_bigrams,
        control_note=CONTROL_NOTE,
    ),
    verdicts.Claim(
        id="stages_as_full_transformer",
        claim="The simplified model goes through the full transformer's stages, uniform → unigram → bigram (the talk "
        "shows the two side by side)",
        paper=PAPER + "; the full transformer: their 2-layer attention-only transformer with learned relative "
        "positions (experiments/statistical_induction.py's paper_k2)",
        rule="the nearest reference strategy (KL(strategy ‖ model) on 512 held-out sequences) at every checkpoint; a "
        "seed passes when uniform, unigram and bigram appear in that order and bigram is the last; matches when "
        "≥ 2/3 of the seeds (≥ 3) of both models pass, partly when those of one do, does not otherwise",
        judge=judge_stages,
        min_n=3,
        budget=1.0,
        scale=False,
        control=no_bigrams,
        control_note=CONTROL_NOTE,
        budget_note="the simplified model: their 200 steps × 128; the transformer: their 6000 steps × 64 "
        "(experiments/statistical_induction.toml's paper_k2)",
    ),
]
