"""The claim of experiments/factual_sequential.py and the rule that judges it.

One claim (seed 004, the first abstract: Nichani, Lee & Bietti 2024, "Understanding factual recall in transformers
via associative memories"): trained on factual recall, the model "exhibits sequential learning behavior" — it
first learns the answer's type (which relation's answer set; the loss plateaus at the type-level loss log D, the
model naming an answer of the right type but not the fact) and only later the facts themselves.

Written before any run of the script; for issue 46, after the runs with seeds 100–104 had been seen, the claim
gained its scale flag and a negative control (the judging itself is unchanged), and the script's CPU size now
trains seeds 300–304 (--full: 300–307); the verdict on the stored JSON is post hoc.

Scale: an existence claim ("the transformer exhibits sequential learning"): a small run that learns the type
first, then the facts after a plateau at log D, shows the behaviour (scale=False); with no paper budget to
compare, no floor applies either way.

Negative control: each seed's type and fact curves swapped (acc read as type_acc and type_acc as acc, the two
steps and the plateau window recomputed from the stored series with the script's definitions): a run whose
"type" came after its "fact", which the rule must reject. Built from the series every JSON holds.

The judge reads `results["seeds"]`, one entry per seed with the
`answer_type` probe's numbers at its checkpoints, as the script computes them:
  - "type_step": the first checkpoint after which type_acc stays ≥ THRESHOLD (None: never);
  - "fact_step": the same for acc, the fact (None: not within the budget);
  - "plateau_dwell": how long (in ln steps, the loss interpolated linearly in ln step between checkpoints) the
    loss lies within BAND·log D of log D, after type_acc first reaches 0.9 and before fact_step;
  - "control_dwell": the same for an equally wide band around CONTROL·log D, a level the loss passes on its way
    from log D to 0: the null. A loss falling smoothly (no plateau) spends about as long in each band of the
    same width; a plateau at log D spends far longer there.
and `results["log_D"]`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

from experiments import verdicts

THRESHOLD = 0.99  # type_acc / acc "learned": stays at or above this from a checkpoint on
ORDER = 0.5  # the type is learned "clearly before" the fact: type_step ≤ ORDER · fact_step
BAND = 0.1  # the plateau: loss within ±10 % of log D
CONTROL = 0.5  # the null band: loss within ±BAND·log D of CONTROL·log D
MIN_DWELL = math.log(2)  # a plateau lasts at least a doubling of the step count...
DWELL_RATIO = 2.0  # ...and at least twice as long as the loss takes to cross the control band
SHARE = 2 / 3  # "matches": at least this share of the seeds that learned the facts are sequential


def ordered(r: Mapping[str, Any]) -> bool:
    """Type learned clearly before the fact (both learned)."""
    t, f = r["type_step"], r["fact_step"]
    return t is not None and f is not None and t <= ORDER * max(f, 1)


def plateau(r: Mapping[str, Any]) -> bool:
    """A loss plateau at log D between the type and the fact, against the control band."""
    d, c = r["plateau_dwell"], r["control_dwell"]
    return d >= MIN_DWELL and d >= DWELL_RATIO * c


def _why_not(r: Mapping[str, Any]) -> Optional[str]:
    if not ordered(r):
        return f"type at {r['type_step']}, fact at {r['fact_step']} (together)"
    if not plateau(r):
        return (
            f"no plateau (×{math.exp(r['plateau_dwell']):.2g} of steps at log D, ×{math.exp(r['control_dwell']):.2g} "
            f"in the control band)"
        )
    return None


def _dwell(steps: list, loss: list, lo: float, hi: float, start: float, stop: float) -> float:
    """The script's dwell: ln steps the loss (linear in ln step between checkpoints, step 0 left out) lies in
    [lo, hi] between start and stop."""
    pts = [(math.log(s), v) for s, v in zip(steps, loss) if s > 0 and v is not None]
    a, b, total = math.log(start), math.log(stop), 0.0
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        u0, u1 = max(x0, a), min(x1, b)
        if u1 <= u0:
            continue
        v0, v1 = (y0 + (y1 - y0) * (u - x0) / (x1 - x0) for u in (u0, u1))
        if v0 == v1:
            total += (u1 - u0) if lo <= v0 <= hi else 0.0
            continue
        t_lo, t_hi = sorted(((lo - v0) / (v1 - v0), (hi - v0) / (v1 - v0)))
        total += max(0.0, min(1.0, t_hi) - max(0.0, t_lo)) * (u1 - u0)
    return total


def _learned(steps: list, scores: list) -> Optional[int]:
    """The first checkpoint after which the score stays ≥ THRESHOLD (the script's learned_step)."""
    tail = [s for i, s in enumerate(steps) if all(v >= THRESHOLD for v in scores[i:])]
    return tail[0] if tail else None


def _swapped(results: Mapping[str, Any]) -> dict[str, Any]:
    """The negative control: each seed's type and fact curves swapped, its steps and dwells recomputed."""
    log_d, known = results["log_D"], results.get("known", 0.9)

    def swap(r: Mapping[str, Any]) -> dict[str, Any]:
        steps, loss, typ, fact = r["steps"], r["loss"], r["acc"], r["type_acc"]
        t, f = _learned(steps, typ), _learned(steps, fact)
        first = next((s for s, v in zip(steps, typ) if v >= known), None)
        stop = f if f is not None else steps[-1]
        start = max(first if first is not None else stop, 1)
        dw = lambda c: _dwell(steps, loss, (c - BAND) * log_d, (c + BAND) * log_d, start, max(stop, 1))  # noqa: E731
        return {
            **r,
            "type_acc": typ,
            "acc": fact,
            "type_step": t,
            "fact_step": f,
            "plateau_dwell": dw(1.0),
            "control_dwell": dw(CONTROL),
        }

    return {**results, "seeds": [swap(r) for r in results["seeds"]]}


def judge(results: Mapping[str, Any]) -> verdicts.Judgement:
    seeds = results["seeds"]
    done = [r for r in seeds if r["fact_step"] is not None and r["type_step"] is not None]
    n = len(done)
    k_order = sum(ordered(r) for r in done)
    k_seq = sum(ordered(r) and plateau(r) for r in done)
    if n == 0:
        return verdicts.Judgement(
            "inconclusive", f"no seed learned the facts (acc ≥ {THRESHOLD}) within the budget ({len(seeds)} seeds)", 0
        )
    need = math.ceil(SHARE * n - 1e-9)
    verdict = "matches" if k_seq >= need else "partly" if k_order >= need else "does not"
    ratio = [r["type_step"] / max(r["fact_step"], 1) for r in done]
    parts = [
        f"{k_seq}/{n} seeds sequential (type ≤ ½ fact step and a plateau at log D = {results['log_D']:.3g}); "
        f"type at step {verdicts.span([r['type_step'] for r in done])}, fact at "
        f"{verdicts.span([r['fact_step'] for r in done])} (ratio {verdicts.span(ratio, verdicts.f2)}); the loss stays "
        f"within 10 % of log D for ×{verdicts.span([math.exp(r['plateau_dwell']) for r in done], verdicts.f2)} of the "
        f"steps against ×{verdicts.span([math.exp(r['control_dwell']) for r in done], verdicts.f2)} in the control band "
        f"at {CONTROL:g}·log D"
    ]
    failed = [f"seed {r.get('seed')}: {_why_not(r)}" for r in done if _why_not(r)]
    if failed:
        parts.append("; ".join(failed))
    if len(seeds) > n:
        parts.append(f"{len(seeds) - n}/{len(seeds)} seeds did not learn the facts within the budget (not counted)")
    return verdicts.Judgement(verdict, "; ".join(parts), n)


CLAIMS = [
    verdicts.Claim(
        id="sequential_learning",
        claim="Trained on factual recall, the transformer exhibits sequential learning behavior: it first learns the "
        "answer's type (the relation's answer set; the loss plateaus at the type-level loss log D) and only "
        "later the facts (Nichani, Lee & Bietti 2024)",
        paper="gradient flow of a simplified linear-attention model on their synthetic factual recall task (S subjects "
        "× R relations, each relation's answers a disjoint set of D); here the factual_recall task in a 1-layer "
        "transformer with an MLP over frozen random embeddings (experiments/factual_capacity.py's setup), Adam",
        rule=f"per seed, from the answer_type probe at every checkpoint: the type step and the fact step (type_acc, acc "
        f"stay ≥ {THRESHOLD} from then on); sequential when the type step ≤ {ORDER} × the fact step and the loss "
        f"dwells within ±{BAND:.0%} of log D (after type_acc ≥ 0.9, before the fact step) for at least a doubling "
        f"of steps and ≥ {DWELL_RATIO:g}× as long as in an equally wide control band at {CONTROL}·log D (the "
        f"null: a smooth fall spends about as long in each); matches when ≥ 2/3 of the seeds that learned the "
        f"facts (≥ 3) are sequential; partly when ≥ 2/3 learn the type clearly first without that plateau; does "
        f"not otherwise (seeds learning both together are the counterexamples); seeds not learning the facts "
        f"within the budget are not counted",
        judge=judge,
        min_n=3,
        scale=False,
        control=_swapped,
        control_note="each seed's type and fact curves swapped",
        budget=None,
        budget_note="the paper's sequential-learning result is a gradient-flow analysis (with a notebook run whose size "
        "the seed text does not give): no budget to compare",
    ),
]
