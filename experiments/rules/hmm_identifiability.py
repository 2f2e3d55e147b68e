"""The claims of experiments/hmm_identifiability.py (Liu, Hsu, Ravikumar & Risteski 2022, "Masked prediction
tasks: a parameter identifiability view", as the seed talk states it) and the rules that judge them.

Two claims, in the README's order: the triplet task identifies the HMM's parameters from the (trained)
predictor and the pairwise task does not; and the talk's question, how much masking a masked-LM objective
needs for the same.

History. The first rules were written after the runs in assets/hmm_identifiability.json with seeds 0–2 had been
seen and judged runs with seeds 100–102. For issue 46 they were rewritten after the seeds-100 runs had been
seen: the pairwise half of triplet_identifies no longer asks whether the trained pairwise model fails to
recover the HMM — the exact pairwise predictor's own read-back is off by more than the recovery threshold
(O error 0.14 against 0.25 × 0.24 = 0.06 in those runs), so that half could not fail. It now asks what the
claim says of the predictor: the pairwise model learned its predictor (its joint KL fell to ≤ LEARNED of its
step-0 value) and a valid HMM with an O at least DISTINCT away has that very predictor, while the triplet
model's read-back lies nearer the true O than that alternative does (the triplet task tells the two apart).
Every claim now has a negative control (the step-0 checkpoints). The script's CPU size now trains seeds
300–302 (--full: 300–304), on the same HMM (task seed 0); the verdicts on the stored JSON are post hoc.

Numbers in the why-lines are per seed, written "min–max (median m)" (one value when all seeds agree). The
errors are the `hmm_identifiability` probe's max-abs entry errors of O and T after the best column matching;
"a random HMM" is the median error of HMMs drawn like the task's (the script's random_guess_error), the
level that "not recovered" sits at: the chance comparison. The judge reads `random_guess_error` and, per
condition, each seed's `final` (O_err, T_err, kl_joint, kl_optimal, floor_O_err; pairwise also alt_O_diff,
alt_pred_diff, err_true, err_alt) and its series of the same names (index 0: the step-0 checkpoint).

Scale. Both claims are scale-dependent (scale=True): whether a trained predictor is close enough to its optimum
to identify the HMM depends on the training budget. Budget: the paper is a theory paper (identifiability of
the optimal predictor); it trains nothing to compare with, so no budget ratio and no floor. For the masking
question, the exact masked-LM predictor identifies the HMM at every ratio; a trained predictor that fails while
it is much further from the optimum than the triplet model is a budget limit, not an answer, and the rule says
"inconclusive".

Negative control (both claims): every seed's step-0 (untrained) checkpoint in place of its final one: an
untrained predictor must neither identify the HMM nor count as a learned pairwise predictor.
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

from experiments import verdicts

RELATIVE = 0.25  # recovered: O's and T's errors both ≤ this fraction of a random HMM's
MAJORITY = 2 / 3  # a condition recovers (or fails to): at least this share of its seeds
SAME_PREDICTOR = 1e-6  # the alternative HMM's pairwise predictor differs from the true one's by at most this
DISTINCT = 0.05  # … while its O differs from the true O by at least this (max abs)
FIT_FACTOR = 2.0  # masking: a ratio's predictor "fit as well" as the triplet model's: joint KL ≤ this × theirs
LEARNED = 0.01  # a predictor was learned: its final joint KL ≤ this × its step-0 joint KL


# ---- readings -------------------------------------------------------------------------------------


def _finals(results: Mapping[str, Any], cond: str) -> list[Mapping[str, float]]:
    return [s["final"] for s in results["conditions"][cond]["seeds"]]


def _recovered(f: Mapping[str, float], guess: Mapping[str, float]) -> bool:
    return f["O_err"] <= RELATIVE * guess["O"] and f["T_err"] <= RELATIVE * guess["T"]


def _errors(fs: Sequence[Mapping[str, float]], guess: Mapping[str, float]) -> str:
    return (
        f"O off by {verdicts.span([f['O_err'] for f in fs], median=True)}, T by {verdicts.span([f['T_err'] for f in fs], median=True)}, "
        f"recovered in {sum(_recovered(f, guess) for f in fs)}/{len(fs)}"
    )


def _ratios(results: Mapping[str, Any]) -> list[tuple[float, str]]:
    return sorted((float(c[len("mlm_") :]), c) for c in results["conditions"] if c.startswith("mlm_"))


# ---- triplet against pairwise ----------------------------------------------------------------------


def _learned(s: Mapping[str, Any]) -> bool:
    return s["final"]["kl_joint"] <= LEARNED * s["kl_joint"][0]


def judge_triplet(results: Mapping[str, Any]) -> verdicts.Judgement:
    guess = results["random_guess_error"]
    tri_seeds, pair_seeds = results["conditions"]["triplet"]["seeds"], results["conditions"]["pairwise"]["seeds"]
    tri, pair = [s["final"] for s in tri_seeds], [s["final"] for s in pair_seeds]
    n = min(len(tri), len(pair))
    alt_dist = statistics.median(f["alt_O_diff"] for f in pair)  # how far the pairwise-equivalent HMM's O lies
    # the triplet half: recovered, and the read-back O nearer the true O than the alternative's is
    apart = [_recovered(f, guess) and f["O_err"] < alt_dist / 2 for f in tri]
    tri_ok = sum(apart) >= MAJORITY * len(tri)
    # the pairwise half: a learned predictor that a distinct valid HMM shares
    learned = [_learned(s) for s in pair_seeds]
    alt = [f["alt_pred_diff"] <= SAME_PREDICTOR and f["alt_O_diff"] >= DISTINCT for f in pair]
    pair_ok = sum(learned) >= MAJORITY * len(pair) and all(alt)
    why = (
        f"triplet: {_errors(tri, guess)} seeds (a random HMM: O {verdicts.num(guess['O'])}, T {verdicts.num(guess['T'])}; the exact "
        f"predictor: {verdicts.span([f['floor_O_err'] for f in tri], median=True)}), nearer O than the pairwise alternative (O error < "
        f"{verdicts.num(alt_dist / 2)}) in {sum(apart)}/{len(tri)}, joint KL {verdicts.span([f['kl_joint'] for f in tri], median=True)}; "
        f"pairwise: predictor learned (joint KL ≤ {LEARNED:g} × step 0's) in {sum(learned)}/{len(pair)}: KL "
        f"{verdicts.span([f['kl_joint'] for f in pair], median=True)} from {verdicts.span([s['kl_joint'][0] for s in pair_seeds], median=True)} at step 0; "
        f"an alternative HMM with O {verdicts.span([f['alt_O_diff'] for f in pair], median=True)} away has the same predictor "
        f"(difference {verdicts.span([f['alt_pred_diff'] for f in pair], median=True)}), the model as close to it as to the truth "
        f"({verdicts.span([f['err_alt'] for f in pair], median=True)} vs {verdicts.span([f['err_true'] for f in pair], median=True)}); "
        f"its read-back O is off by {verdicts.span([f['O_err'] for f in pair], median=True)} (the exact pairwise predictor's: "
        f"{verdicts.span([f['floor_O_err'] for f in pair], median=True)})"
    )
    verdict = "matches" if tri_ok and pair_ok else "partly" if tri_ok or pair_ok else "does not"
    return verdicts.Judgement(verdict, why, n)


def _step0(results: Mapping[str, Any]) -> dict[str, Any]:
    """The negative control: every seed's step-0 checkpoint in place of its final one."""

    def at0(s: Mapping[str, Any]) -> dict[str, Any]:
        final = {k: (s[k][0] if k in s else v) for k, v in s["final"].items()}
        return {**s, "final": final}

    return {
        **results,
        "conditions": {c: {**r, "seeds": [at0(s) for s in r["seeds"]]} for c, r in results["conditions"].items()},
    }


# ---- the masking ratio -----------------------------------------------------------------------------


def judge_masking(results: Mapping[str, Any]) -> verdicts.Judgement:
    guess = results["random_guess_error"]
    ratios = _ratios(results)
    if not ratios:
        return verdicts.Judgement("inconclusive", "no masked-LM ratio was run", 0)
    tri = _finals(results, "triplet")
    tri_kl = statistics.median(f["kl_joint"] for f in tri)
    tri_ok = sum(_recovered(f, guess) for f in tri) >= MAJORITY * len(tri)  # that closeness is enough to identify
    per = {c: _finals(results, c) for _, c in ratios}
    n = min(len(fs) for fs in per.values())
    hits = {c: sum(_recovered(f, guess) for f in fs) for c, fs in per.items()}
    good = [r for r, c in ratios if hits[c] >= MAJORITY * len(per[c])]
    some = [r for r, c in ratios if hits[c] > 0]
    fit = (
        [r for r, c in ratios if statistics.median(f["kl_joint"] for f in per[c]) <= FIT_FACTOR * tri_kl]
        if tri_ok
        else []
    )
    floor = max(f["floor_O_err"] for fs in per.values() for f in fs)
    parts = [
        f"{r:g}: O {verdicts.span([f['O_err'] for f in per[c]], median=True)}, T {verdicts.span([f['T_err'] for f in per[c]], median=True)}, "
        f"{hits[c]}/{len(per[c])} recovered, joint KL {verdicts.span([f['kl_joint'] for f in per[c]], median=True)}"
        for r, c in ratios
    ]
    why = (
        f"masking {'; '.join(parts)} (a random HMM: O {verdicts.num(guess['O'])}, T {verdicts.num(guess['T'])}; the triplet model's joint "
        f"KL {verdicts.num(tri_kl)}; the exact masked-LM predictor's O error ≤ {floor:.1g})"
    )
    if good:
        why = f"recovered from masking {min(good):g} on; " + why
        verdict = "matches"
    elif some:
        verdict = "partly"
    elif fit:
        why = (
            f"not recovered although the predictor fit as well as the triplet model's at {', '.join(f'{r:g}' for r in fit)}; "
            + why
        )
        verdict = "does not"
    elif not tri_ok:
        why = "the triplet model did not recover the HMM either, so no fit level is known to suffice; " + why
        verdict = "inconclusive"
    else:
        why = f"no ratio's predictor came within {FIT_FACTOR:g}× the triplet model's joint KL; " + why
        verdict = "inconclusive"
    return verdicts.Judgement(verdict, why, n)


CLAIMS = [
    verdicts.Claim(
        id="triplet_identifies",
        claim="Predicting x₂ ⊗ x₃ from x₁ (triplet) identifies the HMM's O and T from the predictor (a unique rank-k CP "
        "decomposition, Kruskal); the pairwise predictor does not: (OR, RᵀTR) gives the same one.",
        paper="theory: the optimal predictor of the triplet task determines O and T up to a permutation; the pairwise "
        "one does not",
        rule=(
            f"Triplet half: a seed identifies the HMM if the max-abs errors of the O and T read back from its final "
            f"predictor are both ≤ {RELATIVE} × a random HMM's and its O error is below half the distance of the "
            f"pairwise alternative's O (nearer the truth than the alternative); it holds in ≥ 2/3 of the seeds. "
            f"Pairwise half: the pairwise model learned its predictor (final joint KL ≤ {LEARNED:g} × its step-0 KL) "
            f"in ≥ 2/3 of its seeds, and the probe's alternative HMM has the same pairwise predictor (difference ≤ "
            f"{SAME_PREDICTOR:g}) with an O at least {DISTINCT} away (every seed). matches: both halves; partly: one; "
            f"does not: neither. Fewer than 3 seeds per objective -> inconclusive. Negative control: the step-0 "
            f"checkpoints."
        ),
        judge=judge_triplet,
        min_n=3,
        budget=None,
        scale=True,
        control=_step0,
        control_note="every seed's step-0 (untrained) checkpoint",
        budget_note="the paper trains no models to compare budgets with (a theory paper)",
    ),
    verdicts.Claim(
        id="masking_ratio",
        claim="How much masking a masked-LM objective needs for its predictor to identify the HMM (the talk's "
        "question: 15 %?).",
        paper="masked-LM objectives at a masking ratio; which ratios make the predictor identify the HMM",
        rule=(
            f"Per masking ratio, a seed recovers as above (both errors ≤ {RELATIVE} × a random HMM's). matches: some "
            f"ratio recovers in ≥ 2/3 of its seeds (the answer: the smallest such ratio); partly: some ratio recovers in "
            f"at least one seed; does not: no seed recovers at any ratio although at some ratio the median KL of the "
            f"assembled joint is ≤ {FIT_FACTOR:g}× the triplet model's and the triplet model recovered in ≥ 2/3 of its "
            f"seeds (a predictor as close to its optimum as one that identifies, whose exact form identifies the HMM, "
            f"still does not); inconclusive: no recovery and no ratio's predictor that close, or a triplet model that "
            f"did not recover (the budget, not the objective, failed). Fewer than 3 seeds per ratio -> inconclusive."
        ),
        judge=judge_masking,
        min_n=3,
        budget=None,
        scale=True,
        control=_step0,
        control_note="every seed's step-0 (untrained) checkpoint",
        budget_note="no paper budget (the question is the talk's); the rule's fit check stands in for it",
    ),
]
