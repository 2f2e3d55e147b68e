"""The claims of experiments/shortcut_length.py and the rules that judge them.

Three claims: a shallow transformer learns the car on a circle at its training length T with a shortcut
(Liu et al. 2023, "Transformers learn shortcuts to automata"); that shortcut fails at the positions beyond
T (learned absolute positions: near chance; rotary positions: reported beside it); and on the flip-flop
language a small transformer is near perfect on in-distribution reads but errs significantly more when the
writes are sparser than in training (Liu et al. 2023b, "Exposing attention glitches with flip-flop
language modeling").

These rules were written after pilot runs in a scratch directory, to size the CPU configuration: the car at
T = 16, L = 2, seeds 0-2, 1500 steps (learned absolute positions 99.8-99.9 % within T, 11-16 % beyond T;
rotary 51-62 % within T, not learned, hence claim 1 judges the learned absolute runs only) and the flip-flop,
seeds 0-4 (in-distribution read errors 0-2 of 41k; at ignore probability 0.9, 7-16 %). The runs they judge
use fresh seeds (100 and up); seed 100 of the car (learned absolute) and of the flip-flop was trained once
more, after these rules, to time the CPU size.

Chance is the best constant guess from the task's ground truth: per position the most frequent state,
pooled over the positions the claim reads (for the flip-flop, over the read positions only), written by
the script into `results["car"]["chance"]` and `results["flipflop"]["chance"]`.

Budgets, in tokens seen (sequences × their length; our sequences are shorter than the papers'): the car
2,000 steps × 64 sequences × T = 16 = 2.0M against Liu et al.'s fewest, 600k sequences × T = 100 = 60M
(0.034); the flip-flop 1,000 × 64 × 32 = 2.0M against Liu et al. 2023b's 10,000 steps × 16 × 512 = 82M
(0.025). Below 0.1 a claim whose outcome depends on scale (car_beyond_T, flipflop_ood: `scale=True`) is
"inconclusive" whatever its rule says; car_shortcut, an existence claim, keeps a "matches" (verdicts.judged).

Rewritten for issue 46 after the runs of seeds 100-104 had been seen (the next run uses 300-304):
  - car_beyond_T matched by construction: positions beyond T have untrained position embeddings. Its negative
    control is now a run whose positions were trained to 2T (`results["car"]["runs"]["standard_2T"]`, the same
    rows, read at the same positions): the rule must not call it a failure beyond T.
  - flipflop_ood compared the OOD set with reads up to 31 tokens from the last write against in-distribution reads
    never more than ~10 away: length extrapolation, not sporadic glitches. It now counts, in both sets, only the
    reads at distances to the last write that occur in distribution (1..D, D the longest there, from each seed's
    `by_distance` counts). Its control is a second in-distribution set (`row["control"]`) in the OOD set's place.
  - car_shortcut's control is the untrained checkpoint (`run["init_within_T"]`).
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

from experiments import verdicts

SOLVED = 99.0  # accuracy (%) within T that counts as the automaton learned (claim 1), and the reads learned (claim 3)
NEAR_CHANCE = 0.10  # beyond T, at most this fraction of the way from chance to 100 % counts as "near chance"
DROP = 10.0  # points lost beyond T that count as a failure short of chance
PRIMARY = "0.9"  # the flip-flop's out-of-distribution test: ignore probability 0.9 (training: 1/3)

BUDGET_CAR = 2000 * 64 * 16 / (600_000 * 100)
BUDGET_CAR_NOTE = (
    "tokens seen: 2,000 steps × 64 sequences × T = 16 = 2.0M over Liu et al.'s fewest, 600k sequences "
    "× T = 100 = 60M (second-hand, as experiments/automata_depth.py cites it); in sequences 128k / 600k = 0.21"
)
BUDGET_FF = 1000 * 64 * 32 / (10_000 * 16 * 512)
BUDGET_FF_NOTE = (
    "tokens seen: 1,000 steps × 64 sequences × 32 = 2.0M over Liu et al. 2023b's 10,000 steps × 16 × "
    "512 = 82M (6-layer 512-wide GPT-2 against our 2 layers of width 64)"
)


def _pcts(xs: Sequence[float]) -> str:
    """Accuracies or error rates (%) as a range with its unit, "none" for no values."""
    return f"{verdicts.span(xs)} %" if xs else "none"


def from_chance(acc: float, chance: float) -> float:
    """How far an accuracy (%) is from chance (0) to perfect (1)."""
    return (acc - chance) / (100 - chance)


def _runs(results: Mapping[str, Any], positional: str) -> list[Mapping[str, Any]]:
    return list(results["car"]["runs"][positional])


# ---- 1. the car on a circle at the training length --------------------------------------------------------


def judge_shortcut(results: Mapping[str, Any]) -> verdicts.Judgement:
    car = results["car"]
    chance = car["chance"]["within_T"]
    runs = _runs(results, "standard")
    accs = [r["within_T"] for r in runs]
    rot = [r["within_T"] for r in _runs(results, "rotary")]
    n = len(accs)
    solved = sum(a >= SOLVED for a in accs)
    rel = statistics.median(from_chance(a, chance) for a in accs) if accs else 0.0
    why = (
        f"car, T = {car['T']}, L = {car['n_layers']}, learned absolute positions: within T {_pcts(accs)}, at position "
        f"T {_pcts([r['last_T'] for r in runs])}; ≥ {SOLVED:g} % in {solved}/{n} seeds; chance {verdicts.num(chance)} %; "
        f"rotary (not judged) {_pcts(rot)}"
    )
    if n and solved == n:
        return verdicts.Judgement("matches", why, n)
    if 2 * solved >= n or rel >= 0.9:
        return verdicts.Judgement("partly", why, n)
    return verdicts.Judgement("does not", why, n)


# ---- 2. beyond the training length ------------------------------------------------------------------------


def judge_beyond(results: Mapping[str, Any]) -> verdicts.Judgement:
    car = results["car"]
    chance = car["chance"]["beyond_T"]
    runs = _runs(results, "standard")
    learned = [r for r in runs if r["within_T"] >= SOLVED]
    beyond = [r["beyond_T"] for r in learned]
    near = sum(from_chance(b, chance) <= NEAR_CHANCE for b in beyond)
    dropped = sum(r["within_T"] - r["beyond_T"] >= DROP for r in learned)
    rot = [r for r in _runs(results, "rotary") if r["within_T"] >= SOLVED]
    why = (
        f"learned absolute positions, the {len(learned)}/{len(runs)} runs ≥ {SOLVED:g} % within T: beyond T (2T = "
        f"{2 * car['T']}) {_pcts(beyond)}, chance {verdicts.num(chance)} %, near chance (≤ {100 * NEAR_CHANCE:g} % of the way to 100 %) "
        f"in {near}/{len(learned)}; rotary ({len(rot)} learned): beyond T {_pcts([r['beyond_T'] for r in rot])}"
    )
    if not learned:
        return verdicts.Judgement("inconclusive", f"{why}; no run learned the car within T", 0)
    if near == len(learned):
        return verdicts.Judgement("matches", why, len(learned))
    if dropped == len(learned):
        return verdicts.Judgement(
            "partly", f"{why}; every one ≥ {DROP:g} points below its accuracy within T", len(learned)
        )
    return verdicts.Judgement("does not", why, len(learned))


# ---- 3. flip-flop: reads out of distribution --------------------------------------------------------------


def seen(s: Mapping[str, Any]) -> int:
    """The longest distance to the last write among the seed's in-distribution reads."""
    return max(d for d, n in enumerate(s["in_distribution"]["by_distance"]["reads"]) if n > 0)


def at_seen(counts: Mapping[str, Any], D: int) -> tuple[int, int]:
    """Errors and reads at distances 1..D to the last write."""
    by = counts["by_distance"]
    return sum(by["errors"][1 : D + 1]), sum(by["reads"][1 : D + 1])


def seed_test(s: Mapping[str, Any], level: str = PRIMARY) -> dict[str, Any]:
    """One seed: its in-distribution and out-of-distribution read error rates at the distances to the last write
    seen in distribution, and whether the OOD one is higher at Fisher p < LEVEL (two-sided test, direction checked)."""
    D = seen(s)
    (ka, na), (kb, nb) = at_seen(s["in_distribution"], D), at_seen(s["ood"][level], D)
    ea, eb = ka / max(na, 1), kb / max(nb, 1)
    p = verdicts.fisher(kb, nb, ka, na)
    return {"id": ea, "ood": eb, "p": p, "higher": eb > ea and p < verdicts.LEVEL, "D": D, "reads": nb}


def judge_flipflop(results: Mapping[str, Any]) -> verdicts.Judgement:
    ff = results["flipflop"]
    seeds = ff["seeds"]
    n = len(seeds)
    tests = [seed_test(s) for s in seeds]
    learned = sum(100 * (1 - t["id"]) >= SOLVED for t in tests)
    higher = sum(t["higher"] for t in tests)
    p_sign = verdicts.binomial_p(higher, n, 0.5) if n else 1.0
    chance = ff["chance"]
    why = (
        f"reads at distances to the last write seen in distribution (≤ {verdicts.span([t['D'] for t in tests])}): "
        f"error in distribution (ignore p = 1/3) {_pcts([100 * t['id'] for t in tests])}, "
        f"out of distribution (ignore p = {PRIMARY}) {_pcts([100 * t['ood'] for t in tests])} of "
        f"{verdicts.span([t['reads'] for t in tests])} reads; reads ≥ {SOLVED:g} % "
        f"right in distribution in {learned}/{n} seeds; OOD error higher (Fisher p < {verdicts.LEVEL:g}) in "
        f"{higher}/{n}, sign test over seeds p = {p_sign:.2g}; chance {verdicts.num(chance['in_distribution'])} % / "
        f"{verdicts.num(chance[PRIMARY])} %"
    )
    if n == 0:
        return verdicts.Judgement("inconclusive", "no flip-flop seeds", 0)
    significant = p_sign < verdicts.LEVEL
    if learned == n and significant:
        return verdicts.Judgement("matches", why, n)
    if learned == n and higher == 0:
        return verdicts.Judgement("does not", why, n)
    if learned == n or significant:
        return verdicts.Judgement("partly", why, n)
    return verdicts.Judgement("inconclusive", f"{why}; the reads are not learned in distribution in every seed", n)


# ---- negative controls ----------------------------------------------------------------------------------


def untrained(results: Mapping[str, Any]) -> dict[str, Any]:
    """The untrained checkpoint of each learned-absolute run."""
    car = results["car"]
    return {
        **results,
        "car": {
            **car,
            "runs": {
                **car["runs"],
                "standard": [{**r, "within_T": r["init_within_T"]} for r in car["runs"]["standard"]],
            },
        },
    }


def trained_to_2T(results: Mapping[str, Any]) -> dict[str, Any]:
    """Learned absolute positions trained on sequences 2T long in the place of those trained at T."""
    car = results["car"]
    return {**results, "car": {**car, "runs": {**car["runs"], "standard": car["runs"]["standard_2T"]}}}


def resampled(results: Mapping[str, Any]) -> dict[str, Any]:
    """A second in-distribution set in the place of the OOD one."""
    ff = results["flipflop"]
    return {
        **results,
        "flipflop": {**ff, "seeds": [{**s, "ood": {**s["ood"], PRIMARY: s["control"]}} for s in ff["seeds"]]},
    }


CLAIMS = [
    verdicts.Claim(
        id="car_shortcut",
        claim="A shallow transformer (few layers, o(T)) simulates the car on a circle at the training length T: a shortcut "
        "(Liu et al. 2023)",
        paper="car on a circle: 4 cells × 2 directions, inputs D (drive) and U (U-turn); = D8 in Liu et al.'s alphabet, "
        "98.0 % at L = 2 and 100 % from L = 3 at T = 100 (the seed talk's table)",
        rule=f"Each seed with learned absolute positions (GPT-2's, as the paper; L = 2, T = 16): accuracy over the T "
        f"positions of 2048 held-out sequences. matches: every seed ≥ {SOLVED:g} %; partly: at least half, or the "
        f"median ≥ 90 % of the way from chance (best constant guess per position) to 100 %; does not: fewer. The "
        f"rotary runs are reported in the line, not judged (without absolute positions the count of U-turns, and so "
        f"the direction, has no easy shortcut).",
        judge=judge_shortcut,
        min_n=3,
        budget=BUDGET_CAR,
        budget_note=BUDGET_CAR_NOTE,
        scale=False,
        control=untrained,
        control_note="the untrained checkpoint",
    ),
    verdicts.Claim(
        id="car_beyond_T",
        claim="The shortcut fails beyond the training length: at the positions T+1..2T of sequences 2T long, accuracy "
        "falls to near chance with learned absolute positions (rotary: reported beside)",
        paper="Liu et al. 2023: shortcut solutions are brittle out of distribution, e.g. at lengths not trained on",
        rule=f"Learned absolute positions, the runs ≥ {SOLVED:g} % within T (none: inconclusive; n counts them): accuracy "
        f"at positions T+1..2T of 2048 sequences 2T long against chance there (best constant guess per position). "
        f"matches: every run ≤ {100 * NEAR_CHANCE:g} % of the way from chance to 100 %; partly: every run ≥ {DROP:g} "
        f"points below its accuracy within T but not all near chance; does not: some run keeps within {DROP:g} "
        f"points. Rotary positions are reported in the line, not judged.",
        judge=judge_beyond,
        min_n=3,
        budget=BUDGET_CAR,
        budget_note=BUDGET_CAR_NOTE,
        scale=True,
        control=trained_to_2T,
        control_note="positions trained to 2T",
    ),
    verdicts.Claim(
        id="flipflop_ood",
        claim="Flip-flop: a small transformer reads ~100 % right in distribution but errs out of distribution (sparser "
        "writes, longer ignore runs) significantly more often (Liu et al. 2023b, attention glitches)",
        paper="Liu et al. 2023b: 6-layer GPT-2 on FFL(0.8) (T = 512), ~0 in-distribution read errors, sporadic errors on "
        "FFL(0.98) (sparse) and FFL(0.1) (dense)",
        rule=f"Per seed (2 layers, T = 32, trained on ignore/write0/write1 uniform), read positions (an ignore after "
        f"some write; the answer is the last written bit) of held-out sequences in distribution and with ignore "
        f"probability {PRIMARY} (first symbol a write; the same length, so no unseen positions), counting only "
        f"reads whose distance to the last write occurs in distribution (no length extrapolation): the OOD error "
        f"higher at Fisher p < {verdicts.LEVEL:g}. matches: in-distribution reads ≥ {SOLVED:g} % right in every "
        f"seed and a one-sided sign test over seeds (seeds significantly higher against 1/2) p < "
        f"{verdicts.LEVEL:g}; does not: reads learned in every seed and no seed higher; partly: reads learned in "
        f"every seed otherwise, or the sign test passes while some seed has not learned the reads; else "
        f"inconclusive. Needs ≥ 5 seeds (the sign test's smallest p with 4 is 0.0625).",
        judge=judge_flipflop,
        min_n=5,
        budget=BUDGET_FF,
        budget_note=BUDGET_FF_NOTE,
        scale=True,
        control=resampled,
        control_note="a second in-distribution set as the OOD one",
    ),
]
