"""The claim of experiments/llc_stages.py (Hoogland et al. 2024, "The developmental landscape of in-context
learning", read on Edelman et al. 2024's in-context Markov chains) and the rule that judges it.

One claim: the LLC, read with no circuit in mind, has stage boundaries where the statistical-induction
stages change. It is a timing coincidence, so the rule compares with a null: the same number of LLC stage
boundaries placed at random among the checkpoints where that seed's reading could have put them
(verdicts.coincidence_null), and reports the chance rate beside the observed one.

This rule was written after the runs in assets/llc_stages.json (seeds 0–2) had been seen, and given its negative
control for issue 46 after the runs at seeds 100–102 had been seen (the judge itself is unchanged), so it judges
fresh runs: llc_stages.py now trains seeds 300–302 (full: 300–304). Verdicts on older JSONs are post hoc.

The negative control: each seed's LLC estimates in a shuffled order over the same checkpoints (the script's
`control.llc_boundaries`, the two readings of the shuffled series): the same values, no tie to training time.
The judge reads `results["seeds"]`: per seed llc_boundaries, boundary_candidates (or llc and diagnostics), events,
and for the control control.llc_boundaries.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from experiments import verdicts

FACTOR = 2.0  # an LLC boundary "at" an event: within this factor of its step
ALPHA = verdicts.LEVEL / 2  # two readings of the LLC tested: Bonferroni
EVENTS = {
    "unigram_starts": "unigram start",
    "bigram_nearest": "bigram switch",
    "induction_rise50": "induction rise",
    "previous_token_rise50": "previous-token rise",
}
READINGS = {"change_points": "change points", "turns": "turns"}
MARGIN = {"change_points": 3, "turns": 1}  # stages.change_points' min_size; turns: not the first or last point


def candidates(r: Mapping[str, Any], reading: str) -> list[int]:
    """The checkpoints where `reading` could have placed a boundary in this seed: the script's record, or (runs
    from before it was recorded) the LLC's valid checkpoints (measured, not flagged negative) less the first
    and last MARGIN of them."""
    recorded = r.get("boundary_candidates", {}).get(reading)
    if recorded is not None:
        return list(recorded)
    negative = set(r["diagnostics"]["negative"])
    valid = [s for s in r["llc"]["steps"] if s not in negative]
    m = MARGIN[reading]
    return valid[m : len(valid) - m + 1] if reading == "change_points" else valid[m : len(valid) - m]


def _near(event: Optional[int], boundaries: Sequence[int]) -> bool:
    return event is not None and any(verdicts.within(event, b, FACTOR) for b in boundaries)


def judge(results: Mapping[str, Any]) -> verdicts.Judgement:
    seeds = results["seeds"]
    tested: dict[str, dict[str, Any]] = {}
    for reading in READINGS:
        bounds = [list(r["llc_boundaries"][reading]) for r in seeds]
        events = [[r["events"][e] for e in EVENTS] for r in seeds]
        steps = [candidates(r, reading) for r in seeds]
        null = verdicts.coincidence_null(bounds, events, steps, FACTOR)
        per_event = {e: sum(_near(r["events"][e], b) for r, b in zip(seeds, bounds)) for e in EVENTS}
        pairs = sum(1 for es in events for e in es if e is not None)
        tested[reading] = {
            **null,
            "per_event": per_event,
            "pairs": pairs,
            "hits": round(null["observed"] * pairs),
            "bounds": [len(b) for b in bounds],
            "cands": [len(s) for s in steps],
        }
    best = min(tested, key=lambda k: (tested[k]["p"], -tested[k]["observed"]))
    t = tested[best]
    if t["p"] < ALPHA:
        found_each = all(2 * k > len(seeds) for k in t["per_event"].values())
        verdict = "matches" if found_each else "partly"
    elif all(x["observed"] <= x["null_mean"] for x in tested.values()):
        verdict = "does not"
    else:
        verdict = "inconclusive"
    parts = []
    for reading, x in tested.items():
        each = ", ".join(f"{EVENTS[e]} {k}/{len(seeds)}" for e, k in x["per_event"].items())
        parts.append(
            f"{READINGS[reading]} ({verdicts.span(x['bounds'])} per seed) within {FACTOR:g}× of "
            f"{x['hits']}/{x['pairs']} events ({each}); chance {x['null_mean']:.2f} (as many placed at random "
            f"among each seed's {verdicts.span(x['cands'])} possible checkpoints), p = {verdicts.p_value(x['p'])}"
        )
    return verdicts.Judgement(verdict, "; ".join(parts), len(seeds))


def shuffled(results: Mapping[str, Any]) -> dict[str, Any]:
    """The negative control: every seed's boundaries read from its LLC estimates in a shuffled order."""
    return {**results, "seeds": [{**r, "llc_boundaries": r["control"]["llc_boundaries"]} for r in results["seeds"]]}


CLAIMS = [
    verdicts.Claim(
        id="llc_finds_stages",
        claim="The local learning coefficient, read with no circuit in mind, has stage boundaries (plateaus and "
        "turns) where the developmental stages of in-context learning change.",
        paper="Hoogland et al. 2024: LLC over checkpoints (SGLD) bounds the stages of in-context linear regression "
        "and language modelling; here on Edelman et al.'s in-context Markov chains, k = 3",
        rule=f"Per seed: four events, the start of the unigram stage, the bigram switch (bigram the nearest "
        f"strategy for good), the L1 induction and L0 previous-token heads' half-way rises; two readings of "
        f"the LLC, its change points (piecewise-linear in log-step) and its turns. Per reading: the share "
        f"of (seed, event) pairs with a boundary within {FACTOR:g}× of the event, against the same count of "
        f"boundaries per seed placed at random among the checkpoints the reading could have used "
        f"(verdicts.coincidence_null, 2000 draws, one-sided p). A reading beats chance at p < {ALPHA:g} "
        f"(0.05 over the two readings). matches: the reading with the lower p beats chance "
        f"and has a boundary at every event in more than half of the seeds; partly: it beats chance, but "
        f"some event has a boundary in half of the seeds or fewer; does not: neither beats chance and both are at or "
        f"below their null's mean; inconclusive: neither beats chance but one is above its null's mean.",
        judge=judge,
        min_n=3,
        budget=None,
        scale=True,
        control=shuffled,
        control_note="each seed's LLC estimates in a shuffled order",
        budget_note="no comparable budget: Hoogland et al. study other tasks; our runs are statistical_induction's "
        "k3 (1200 steps × 32, 0.3 of Edelman et al.'s code default of 2000 × 64)",
    ),
]
