"""The claims of experiments/circuit_discovery.py and the rules that judge them.

Four claims, in the README's order: every discovery method recovers circuits known exactly (planted and
tracr-compiled models); the causal circuit of in-context bigrams is the induction circuit through the heads
the pattern probes name (one claim per method: exact patching, EAP, EAP-IG, ACDC); that circuit forms when the
pattern probes say the induction head does (against the chance that a log-uniform step lands within 2×);
a sparse Boolean function's model reads exactly S and a causal chain's model reads the query's parent.

These rules were written after the runs of seeds 0-2 (assets/circuit_discovery.json of commit 9cafeb2f318f)
had been seen, from the inline rules that script had then; they judge runs of fresh seeds (100 on). The
judges read the script's results: `results["results"][task]` (one entry per seed) and `results["planted"]`
(the planted models' cases; the runs before this file kept them under `results["claims"]["planted"]["cases"]`).

Rewritten for issue 46, after the runs of seeds 100-102 had been seen: the planted circuits and the four
per-method induction claims check mechsynth's own discovery methods (kind "tool"); the timing and positions
claims are the papers' (kind "paper"). None has a paper budget to compare (the circuits are set by hand, or
read off our own trained models); all are existence claims (scale=False). Each has a negative control its
rule must reject: every method on the planted models with their weights shuffled (`results["planted_control"]`,
the shape of `results["planted"]`); on each run's untrained, step-0 model (`methods_init`, the shape of
`methods`, per run), scored against the same known edges and positions (the seeds counted still those whose
trained model formed the heads or learned the task); and, for the timing, each seed's circuit against
another seed's induction pattern (the pattern steps rotated among seeds). The runs they judge use fresh
seeds (300 and up).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Mapping, Optional, Sequence

from experiments import verdicts

METHODS = ("patching", "eap", "eap_ig", "acdc")
NAMES = {"patching": "exact patching", "eap": "EAP", "eap_ig": "EAP-IG", "acdc": "ACDC"}
FACTOR = 2.0  # "within 2×" of the induction pattern's formation step


# ---- formatting (private helpers) ---------------------------------------------------------------------------


def _seeds(rs: Sequence[Mapping[str, Any]]) -> str:
    seeds = [r.get("seed") for r in rs]
    if (
        all(isinstance(s, int) for s in seeds)
        and seeds == list(range(seeds[0], seeds[0] + len(seeds)))
        and len(seeds) > 1
    ):
        return f"seeds {seeds[0]}–{seeds[-1]}"
    return "seeds " + ", ".join(str(s) for s in seeds)


# ---- planted and compiled circuits ---------------------------------------------------------------------------


def _planted_cases(results: Mapping[str, Any]) -> Mapping[str, Any]:
    if "planted" in results:
        return results["planted"]
    return results["claims"]["planted"]["cases"]  # the script's layout before this rules file


def judge_planted(results: Mapping[str, Any]) -> verdicts.Judgement:
    cases = _planted_cases(results)
    rows = [(case, method, v) for case, per in cases.items() for method, v in per.items()]
    models = sorted({case.split("/")[0] for case in cases})
    good = [(c, m) for c, m, v in rows if v["auc"] == 1.0 and v["exact"]]
    min_auc = min(v["auc"] for _, _, v in rows)
    verdict = "matches" if len(good) == len(rows) else "partly" if min_auc >= 0.9 else "does not"
    ablations = {m: sorted(c.split("/")[1] for c in cases if c.split("/")[0] == m) for m in models}
    why = (
        f"edge AUC 1.00 and exactly the known circuit in {len(good)}/{len(rows)} (model, ablation, method) cases"
        + ("" if min_auc == 1.0 else f" (lowest AUC {verdicts.num(min_auc)})")
        + "; models: "
        + ", ".join(f"{m} ({'/'.join(a)})" for m, a in ablations.items())
        + f"; known circuits of {verdicts.span([v['truth'] for _, _, v in rows])} of "
        f"{verdicts.span([v['edges'] for _, _, v in rows])} edges"
    )
    missed = [
        f"{c} {NAMES.get(m, m)} (AUC {verdicts.num(v['auc'])})"
        for c, m, v in rows
        if not (v["auc"] == 1.0 and v["exact"])
    ]
    if missed:
        why += "; missed: " + ", ".join(missed[:4]) + (f" and {len(missed) - 4} more" if len(missed) > 4 else "")
    return verdicts.Judgement(verdict, why, len(models))


def shuffled_planted(results: Mapping[str, Any]) -> Mapping[str, Any]:
    """The control: the same methods on the planted models with their weights shuffled."""
    out = copy.deepcopy(dict(results))
    out["planted"] = results["planted_control"]
    return out


def untrained(results: Mapping[str, Any]) -> Mapping[str, Any]:
    """The control: every run's methods read from its untrained (step-0) model (`methods_init`), the runs
    counted (heads formed, task learned) still those of the trained models."""
    out = copy.deepcopy(dict(results))
    for rs in out["results"].values():
        for r in rs:
            r["methods"] = r["methods_init"]
    return out


def rotated_patterns(results: Mapping[str, Any]) -> Mapping[str, Any]:
    """The control: each seed's circuit against the next seed's induction pattern (the pattern formation
    steps rotated among seeds: no seed's own head)."""
    out = copy.deepcopy(dict(results))
    rs = out["results"]["markov_icl"]
    if len(rs) < 2:
        raise IndexError("the timing control needs ≥ 2 markov_icl seeds")
    moved = [copy.deepcopy(r["pattern_formation"]) for r in rs]
    heads = [_heads(r) for r in rs]
    for j, r in enumerate(rs):
        k = (j + 1) % len(rs)
        # the other seed's induction (and previous-token) step under this seed's head names
        pf = {probe: dict(steps) for probe, steps in r["pattern_formation"].items()}
        pf.setdefault("induction", {})[heads[j][1]] = moved[k].get("induction", {}).get(heads[k][1])
        pf.setdefault("previous_token", {})[heads[j][0]] = moved[k].get("previous_token", {}).get(heads[k][0])
        r["pattern_formation"] = pf
    return out


# ---- the induction circuit, per method ----------------------------------------------------------------------


def _markov(results: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(results["results"]["markov_icl"])


def _formed_heads(r: Mapping[str, Any]) -> bool:
    """Both patterns of the known circuit's heads formed (the pattern probes name a previous-token and an
    induction head): the regime where the model has the mechanism the circuit is checked against."""
    p, i = _heads(r)
    return (
        r["pattern_formation"].get("previous_token", {}).get(p) is not None
        and r["pattern_formation"].get("induction", {}).get(i) is not None
    )


def judge_induction(method: str):
    def judge(results: Mapping[str, Any]) -> verdicts.Judgement:
        every = _markov(results)
        rs = [r for r in every if _formed_heads(r)]
        skipped = [str(r.get("seed")) for r in every if not _formed_heads(r)]
        note = (
            f"; seed(s) {', '.join(skipped)} not counted: no previous-token or induction pattern formed"
            if skipped
            else ""
        )
        aucs = [r["methods"][method]["auc_known"] for r in rs]
        n = len(aucs)
        if not n:
            return verdicts.Judgement(
                "inconclusive", f"no seed of {len(every)} formed both a previous-token and an induction pattern", 0
            )
        verdict = (
            "matches"
            if all(a >= 0.9 for a in aucs)
            else "partly"
            if sum(a >= 0.75 for a in aucs) >= 2 / 3 * n
            else "does not"
        )
        exact = sum(set(r["methods"][method]["circuit"]) == set(r["known_edges"]) for r in rs)
        sizes = [len(r["methods"][method]["circuit"]) for r in rs]
        total = [len(r["methods"][method]["scores"]) for r in rs]
        faith = [r["methods"][method]["faithfulness"] for r in rs]
        why = (
            f"edge AUC {'/'.join(f'{a:.2f}' for a in aucs)} ({_seeds(rs)}; chance 0.5) against the "
            f"{len(rs[0]['known_edges'])} known edges; exactly those in {exact}/{n} seeds; circuits of "
            f"{verdicts.span(sizes)} of {verdicts.span(total)} edges, faithfulness {verdicts.span(faith)}"
        )
        if method != "patching":
            jac = []
            for r in rs:
                a, b = set(r["methods"]["patching"]["circuit"]), set(r["methods"][method]["circuit"])
                jac.append(len(a & b) / len(a | b) if a | b else 1.0)
            why += f"; Jaccard with exact patching's circuit {verdicts.span(jac)}"
        return verdicts.Judgement(verdict, why + note, n)

    return judge


# ---- timing: the causal circuit against the induction pattern ------------------------------------------------


def _chance_within(event: float, first: float, last: float, factor: float = FACTOR) -> float:
    """P(a step drawn log-uniformly from [first, last] lies within `factor` of `event`) (as the script's
    chance_within)."""
    lo, hi = math.log(max(first, 1)), math.log(max(last, 2))
    a, b = max(lo, math.log(max(event, 1) / factor)), min(hi, math.log(max(event, 1) * factor))
    return max(0.0, b - a) / (hi - lo) if hi > lo else 1.0


def _at_least(hits: int, chances: Sequence[float]) -> float:
    """P(≥ hits successes) when trial i succeeds with chances[i] (Poisson binomial), one-sided."""
    dist = [1.0]
    for p in chances:
        dist = [
            (dist[k] if k < len(dist) else 0.0) * (1 - p) + (dist[k - 1] * p if k > 0 else 0.0)
            for k in range(len(dist) + 1)
        ]
    return float(sum(dist[hits:]))


def _heads(r: Mapping[str, Any]) -> tuple[str, str]:
    """The previous-token head p and the induction head i of the known circuit's "p->i.k"."""
    p, rest = r["known_edges"][1].split("->")
    return p, rest.split(".")[0]


def _classify(causal: Optional[float], event: Optional[float], steps: Sequence[float]) -> str:
    """ "hit": the circuit's formation step is within 2× of the pattern's; "miss": the whole interval it may have
    formed in (after the probed checkpoint before it, up to it) lies more than 2× from the pattern's step;
    "unresolved": that interval reaches into the 2× window; "not formed": either never formed."""
    if causal is None or event is None:
        return "not formed"
    if verdicts.within(causal, event, FACTOR):
        return "hit"
    before = max((s for s in steps if s < causal), default=0)
    lo, hi = max(event, 1) / FACTOR, max(event, 1) * FACTOR
    return "miss" if max(causal, 1) < lo or max(before, 1) >= hi else "unresolved"


def timing_rows(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for r in _markov(results):
        p, i = _heads(r)
        event = r["pattern_formation"].get("induction", {}).get(i)
        causal = r["methods"]["patching"]["formed"]
        rows.append(
            {
                "seed": r.get("seed"),
                "causal": causal,
                "event": event,
                "previous": r["pattern_formation"].get("previous_token", {}).get(p),
                "loss_drop": r["loss_drop"],
                "outcome": _classify(causal, event, r["steps"]),
                "chance": _chance_within(event, r["steps"][1], r["steps"][-1]) if event is not None else None,
                "steps": r["steps"],
            }
        )
    return rows


def judge_timing(results: Mapping[str, Any]) -> verdicts.Judgement:
    rows = timing_rows(results)
    if not rows:
        return verdicts.Judgement("inconclusive", "no markov_icl run", 0)
    used = [t for t in rows if t["outcome"] in ("hit", "miss")]
    n, k = len(used), sum(t["outcome"] == "hit" for t in used)
    p = _at_least(k, [t["chance"] for t in used])
    verdict = (
        "matches"
        if n and k >= 2 / 3 * n and p < verdicts.LEVEL
        else "partly"
        if k >= 1
        else "does not"
        if n
        else "inconclusive"
    )
    formed = [t for t in rows if t["outcome"] != "not formed"]
    later = sum(t["causal"] > t["event"] for t in formed)
    chance = [t["chance"] for t in formed]
    if not formed:
        return verdicts.Judgement(
            "inconclusive",
            (
                f"the induction pattern formed in no seed of {len(rows)} (circuit from step "
                f"{'/'.join(verdicts.num(t['causal']) for t in rows)}; probed at {', '.join(str(s) for s in rows[0]['steps'])})"
            ),
            0,
        )
    why = (
        f"exact patching's final circuit holds from step {'/'.join(verdicts.num(t['causal']) for t in rows)}, the "
        f"induction pattern forms at {'/'.join(verdicts.num(t['event']) for t in rows)} (previous-token pattern "
        f"{'/'.join(verdicts.num(t['previous']) for t in rows)}; loss drop {'/'.join(verdicts.num(t['loss_drop']) for t in rows)}); "
        f"the circuit's checkpoint after the pattern's step in {later}/{len(formed)}; within 2× in {k}, "
        f"more than 2× apart in {n - k}, "
        f"unresolved between probed checkpoints in {sum(t['outcome'] == 'unresolved' for t in rows)} of "
        f"{len(rows)} seeds; a log-uniform step is within 2× with probability {verdicts.span(chance)} per seed"
        + (f" (P(≥ {k} of {n}) = {verdicts.num(p)})" if k else "")
        + f"; probed at {', '.join(str(s) for s in rows[0]['steps'])}"
    )
    return verdicts.Judgement(verdict, why, n)


# ---- positions: S and the query's parent --------------------------------------------------------------------


POSITION_TASKS = {
    "sparse_boolean": ("sparse_boolean (S, 3 of 16 bits)", "held-out accuracy ≥ 0.9", "a bit outside S"),
    "causal_icl": ("causal chain (the query's parent)", "KL to Bayes ≤ 0.1", "a non-parent token"),
}


def _position_task(results: Mapping[str, Any], task: str) -> tuple[str, int, str]:
    rs = list(results["results"][task])
    learned = [r for r in rs if r["learned"]]
    aucs = [r["methods"]["patching"]["auc_positions"] for r in learned]
    good = sum(a is not None and a >= 0.9 for a in aucs)
    n = len(learned)
    label, learned_means, control = POSITION_TASKS[task]
    if not n:
        return "inconclusive", 0, f"{label}: no seed learned ({learned_means}) of {len(rs)}"
    ctl = [abs(r["methods"]["patching"]["control"]) for r in learned if r["methods"]["patching"]["control"] is not None]
    why = (
        f"{label}: position AUC {'/'.join('n/a' if a is None else f'{a:.2f}' for a in aucs)}, ≥ 0.9 in {good}/{n} "
        f"learned seeds (of {len(rs)}; {learned_means})"
        + (f", {control} moves the metric {verdicts.span(ctl)} of the gap" if ctl else "")
    )
    return ("matches" if good == n else "partly" if good >= 2 / 3 * n else "does not"), n, why


def judge_positions(results: Mapping[str, Any]) -> verdicts.Judgement:
    parts = [_position_task(results, task) for task in POSITION_TASKS]
    vs = {v for v, _, _ in parts}
    verdict = (
        "inconclusive"
        if "inconclusive" in vs
        else "matches"
        if vs == {"matches"}
        else "does not"
        if vs == {"does not"}
        else "partly"
    )
    return verdicts.Judgement(verdict, "; ".join(w for _, _, w in parts), min(n for _, n, _ in parts))


# ---- the claims ---------------------------------------------------------------------------------------------


INDUCTION = (
    "The causal circuit of in-context bigrams is the induction circuit through the heads the pattern probes "
    "name (Edelman et al. 2024's two-layer mechanism)"
)
INDUCTION_PAPER = (
    "layer-0 previous-token head p, layer-1 induction head i: input → p.v, p → i.k (K-composition), "
    "input → i.q/.v, i → logits; here markov_icl (the demo setup, 2000 steps), final checkpoint"
)

CLAIMS = [
    verdicts.Claim(
        id="planted_circuits_recovered",
        claim="Every discovery method recovers circuits known exactly (the benchmark idea of InterpBench and tracr)",
        paper="a method that finds a circuit should find a planted or compiled one: hand-set induction and majority "
        "circuits (resample ablation), tracr-compiled frac_prevs and detect_pattern 'ab' (zero and resample)",
        rule="over every (planted model, ablation, method) case: edge AUC exactly 1.0 and the 0.9-faithfulness circuit "
        "exactly the known one in every case → matches; else every edge AUC ≥ 0.9 → partly; else does not; "
        "n = the planted models (needs all 4)",
        judge=judge_planted,
        min_n=4,
        budget_note="no paper budget: the circuits are set by hand or compiled, not trained",
        scale=False,
        kind="tool",
        control=shuffled_planted,
        control_note="the planted models' weights shuffled",
    ),
    *[
        verdicts.Claim(
            id=f"induction_circuit_{method}",
            claim=f"{INDUCTION}, found by {NAMES[method]}",
            paper=INDUCTION_PAPER,
            rule=f"{NAMES[method]}'s edge AUC against those 5 known edges (chance 0.5), one per seed, over the seeds "
            "whose previous-token and induction patterns formed (the pattern probes' formation steps; the others "
            "lack the mechanism and are not counted): ≥ 0.9 in every such seed → matches; ≥ 0.75 in at least 2/3 → "
            "partly; else does not; fewer than 3 such seeds → inconclusive",
            judge=judge_induction(method),
            min_n=3,
            budget_note="not compared: the claim is about the trained model's circuit, not the paper's training run",
            scale=False,
            kind="tool",
            control=untrained,
            control_note="the untrained (step-0) model",
        )
        for method in METHODS
    ],
    verdicts.Claim(
        id="induction_circuit_timing",
        claim="The causal circuit forms when the pattern probes say the induction head does",
        paper="the cross-check the rule asks for: the step the causal circuit forms against the induction head's "
        "pattern formation step, markov_icl, 8 log-spaced probed checkpoints",
        rule="per seed, the causal circuit's formation step (exact patching: the first probed checkpoint from which "
        "the final circuit keeps ≥ 0.9 of a gap at least half its final value) against the induction head's "
        "pattern formation step: within 2× → hit; the whole interval it may have formed in (after the probed "
        "checkpoint before it, up to it) more than 2× away → miss; else unresolved at this checkpoint resolution "
        "(not counted, nor seeds where either never formed); chance per seed = P(a step log-uniform over [first "
        "nonzero, last] probed step lies within 2× of the pattern's step), p = P(≥ hits) under those chances "
        "(Poisson binomial); hits in ≥ 2/3 of the counted seeds and p < 0.05 → matches; ≥ 1 hit → partly; none "
        "→ does not; fewer than 3 counted seeds → inconclusive",
        judge=judge_timing,
        min_n=3,
        budget_note="not compared: a timing cross-check within our own runs",
        scale=False,
        control=rotated_patterns,
        control_note="another seed's induction pattern (rotated among seeds)",
    ),
    verdicts.Claim(
        id="positions_read",
        claim="A model of a sparse Boolean function reads exactly S; one of a causal chain reads the query's parent",
        paper="the truth names the positions (S; the parent): sparse_boolean majority of 3 of 16 bits (1 layer), "
        "causal_icl chain k = 10, T = 20 (2 layers, attention only)",
        rule="per task, over the seeds whose model learned (sparse_boolean: held-out accuracy ≥ 0.9; causal_icl: KL to "
        "Bayes ≤ 0.1), the AUC of each input position's effect (exact patching) against the known positions: "
        "≥ 0.9 in every learned seed → the task matches; in ≥ 2/3 → partly; else does not; both tasks match → "
        "matches; both do not → does not; else partly; n = the fewer learned seeds of the two tasks, fewer "
        "than 3 → inconclusive",
        judge=judge_positions,
        min_n=3,
        budget_note="not compared: only seeds whose model learned the task count",
        scale=False,
        control=untrained,
        control_note="the untrained (step-0) model",
    ),
]
