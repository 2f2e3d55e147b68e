"""The claims of experiments/attention_glitches.py and the rules that judge them.

Seed 003 ("Is Transformer always better than RNNs? Out-of-distribution"), after Liu, Ash, Goel, Krishnamurthy &
Zhang 2023, "Exposing attention glitches with flip-flop language modeling": transformers trained on FFL(0.8) reach
zero in-distribution error yet make sporadic errors on sparse (FFL(0.98)) and dense (FFL(0.1)) sequences, a long
and irregular tail across seeds and over training; a small LSTM makes none; training on a mixture of the three
distributions removes most of them; and a glitch is the read's attention failing (attention dilution, or a
positional tie-break that picks the wrong write: their Props. 3 and 4).

Written before any run of the script (pilots of single runs, seed 0, chose its CPU size's learning rate; the
script's seeds start at 100). The judge reads `results["groups"]`: "transformer" (the baseline),
"diverse" (the same transformer trained on the equal mixture) and "recurrent" (the LSTM), a list of seeds each,
with, per seed:
  - "final": {"eval" | "sparse" | "dense": {"reads", "wrong"}}, the last checkpoint on the test sequences;
  - "curve": {"steps", "eval", "sparse", "dense"}, the error rate at every evaluation during training (on the
    trainer's held-out batches);
  - "attention" (transformers): the read_attention probe at the last checkpoint, pooled over the test sequences:
    {"wrong", "stale", "elsewhere", "right", "off_correct"}, the out-of-distribution wrong reads and the shares
    the probe gives them (None where there are none);
and `results["tokens"]`, `results["recurrent_tokens"]`: training tokens (steps × batch × T) of a transformer and of
an LSTM.

Rewritten for issue 46 after two judged runs of seeds 100-104 had been seen (the second, from a clean clone, moved
irregular_across_seeds from "matches" to "does not" and diverse_data_reduces from "does not" to "partly"): each
claim now has a negative control, a `scale` and a `kind`; diverse_data_reduces compares only seeds that learned the
task in distribution (converged) in both groups, as a generalisation claim must (in the runs seen, 3/5 mixture seeds
had not); irregular_across_seeds is judged against seeds that err at one common rate (binomial sampling alone).
The next run uses seeds 300-304.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Mapping, Optional, Sequence

from experiments import verdicts

CONVERGED = 1e-3  # in-distribution test error at the end at most this: the seed learned the task
RARE = 0.05  # glitches are rare errors: the median converged seed errs on at most this share of OOD reads
SHARE = 2 / 3  # "matches": at least this share of the seeds that count
SPREAD = 10.0  # an irregular tail across seeds: OOD error rates an order of magnitude apart (partly: ×3)
LATE = 0.5  # over training: the evaluations in the last half of the steps
MIN_WRONG = 5  # a seed's glitches explain themselves by attention only from this many wrong reads
OFF = 0.5  # attention explains the glitches: the read head's peak is off the right write on ≥ half...
OFF_RATIO = 2.0  # ...and at least twice as often as on the reads it gets right
PAPER_TOKENS = 10_000 * 16 * 512  # 10k steps × batch 16 × T = 512 (their App. B.2)
PAPER_LSTM_TOKENS = 500 * 16 * 512


def converged(r: Mapping[str, Any]) -> bool:
    e = r["final"]["eval"]
    return e["wrong"] <= CONVERGED * e["reads"]


def ood(r: Mapping[str, Any]) -> tuple[int, int]:
    """Wrong reads and reads on the two out-of-distribution splits together."""
    return (
        r["final"]["sparse"]["wrong"] + r["final"]["dense"]["wrong"],
        r["final"]["sparse"]["reads"] + r["final"]["dense"]["reads"],
    )


def ood_rate(r: Mapping[str, Any], floor: bool = False) -> float:
    """The OOD error rate; `floor`: a seed with none counts at half an error (the test's resolution)."""
    wrong, reads = ood(r)
    return max(wrong, 0.5 if floor else 0) / reads


def need(n: int) -> int:
    return math.ceil(SHARE * n - 1e-9)


def _rates(rows: Sequence[Mapping[str, Any]]) -> str:
    return verdicts.span([ood_rate(r) for r in rows], verdicts.num, median=True)


def _baseline(results: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], str]:
    rows = results["groups"]["transformer"]
    done = [r for r in rows if converged(r)]
    left = (
        f"; {len(rows) - len(done)}/{len(rows)} seeds did not converge in distribution (not counted)"
        if len(done) < len(rows)
        else ""
    )
    return done, left


def judge_glitches(results: Mapping[str, Any]) -> verdicts.Judgement:
    done, left = _baseline(results)
    n = len(done)
    k = sum(ood(r)[0] > 0 for r in done)
    if n == 0:
        return verdicts.Judgement("inconclusive", f"no transformer seed converged in distribution{left}", 0)
    median = statistics.median(ood_rate(r) for r in done)
    verdict = "matches" if k >= need(n) and median <= RARE else "partly" if k >= need(n) else "does not"
    why = (
        f"{k}/{n} converged transformer seeds err out of distribution (in-distribution error ≤ {CONVERGED:g}); "
        f"OOD error rate {_rates(done)} (sparse {verdicts.span([r['final']['sparse']['wrong'] / r['final']['sparse']['reads'] for r in done])}, "
        f"dense {verdicts.span([r['final']['dense']['wrong'] / r['final']['dense']['reads'] for r in done])})"
    )
    if verdict == "partly":
        why += f"; not rare: the median seed errs on {verdicts.num(median)} of OOD reads (> {RARE:g})"
    return verdicts.Judgement(verdict, why + left, n)


def judge_recurrent(results: Mapping[str, Any]) -> verdicts.Judgement:
    rows = results["groups"]["recurrent"]
    n = len(rows)
    clean = [r for r in rows if all(r["final"][s]["wrong"] == 0 for s in ("eval", "sparse", "dense"))]
    k = len(clean)
    verdict = "matches" if k == n and n > 0 else "partly" if k >= need(n) else "does not"
    reads = sum(r["final"][s]["reads"] for r in rows for s in ("eval", "sparse", "dense"))
    why = f"{k}/{n} LSTM seeds make no error on any split ({reads} test reads in all)"
    if k < n:
        why += "; errors: " + ", ".join(
            f"seed {r['seed']}: "
            + ", ".join(f"{s} {r['final'][s]['wrong']}/{r['final'][s]['reads']}" for s in ("eval", "sparse", "dense"))
            for r in rows
            if r not in clean
        )
    return verdicts.Judgement(verdict, why, n)


def judge_spread(results: Mapping[str, Any]) -> verdicts.Judgement:
    done, left = _baseline(results)
    n = len(done)
    if n == 0:
        return verdicts.Judgement("inconclusive", f"no transformer seed converged in distribution{left}", 0)
    rates = [ood_rate(r, floor=True) for r in done]
    ratio = max(rates) / min(rates)
    verdict = "matches" if ratio >= SPREAD else "partly" if ratio >= 3 else "does not"
    return verdicts.Judgement(
        verdict,
        f"OOD error rates of {n} converged seeds {verdicts.num(min(rates))}–"
        f"{verdicts.num(max(rates))} (×{verdicts.num(ratio)}; a seed without errors "
        f"counts at half an error){left}",
        n,
    )


def late_glitches(r: Mapping[str, Any]) -> Optional[bool]:
    """In the last half of training: in-distribution error 0 at ≥ 90 % of evaluations and OOD errors at ≥ half of
    those. None when in-distribution error is not 0 that often."""
    c = r["curve"]
    last = max(c["steps"])
    late = [i for i, s in enumerate(c["steps"]) if s >= LATE * last]
    perfect = [i for i in late if c["eval"][i] == 0]
    if len(perfect) < 0.9 * len(late) or not perfect:
        return None
    return sum(c["sparse"][i] > 0 or c["dense"][i] > 0 for i in perfect) >= 0.5 * len(perfect)


def judge_over_training(results: Mapping[str, Any]) -> verdicts.Judgement:
    done, left = _baseline(results)
    flags = [late_glitches(r) for r in done]
    counted = [f for f in flags if f is not None]
    n, k = len(counted), sum(counted)
    if n == 0:
        return verdicts.Judgement(
            "inconclusive",
            f"no converged seed keeps in-distribution error at 0 over the last "
            f"half of training ({len(done)} converged){left}",
            0,
        )
    verdict = "matches" if k >= need(n) else "partly" if k >= math.ceil(n / 3 - 1e-9) else "does not"
    return verdicts.Judgement(
        verdict,
        f"{k}/{n} seeds with in-distribution error 0 over the last half of training "
        f"make OOD errors at ≥ half of those evaluations{left}",
        n,
    )


def judge_diverse(results: Mapping[str, Any]) -> verdicts.Judgement:
    from scipy.stats import mannwhitneyu

    groups = results["groups"]
    base = [r for r in groups["transformer"] if converged(r)]
    mixed = [r for r in groups["diverse"] if converged(r)]
    n = min(len(base), len(mixed))
    left = (
        f"; converged in distribution (error ≤ {CONVERGED:g}): {len(mixed)}/{len(groups['diverse'])} mixture, "
        f"{len(base)}/{len(groups['transformer'])} baseline seeds (the others not counted)"
    )
    if n == 0:
        return verdicts.Judgement("inconclusive", f"a group has no seed that learned the task{left}", 0)
    a, b = [ood_rate(r) for r in base], [ood_rate(r) for r in mixed]
    p = float(mannwhitneyu(b, a, alternative="less", method="exact").pvalue)
    lower = statistics.median(b) < statistics.median(a)
    verdict = "matches" if lower and p < verdicts.LEVEL else "partly" if lower else "does not"
    zero = sum(ood(r)[0] == 0 for r in mixed)
    return verdicts.Judgement(
        verdict,
        f"OOD error rate {_rates(mixed)} trained on the mixture against {_rates(base)} "
        f"(one-sided Mann–Whitney p {verdicts.num(p)}); {zero}/{len(mixed)} mixture "
        f"seeds make no OOD error{left}",
        n,
    )


def attention_explains(r: Mapping[str, Any]) -> Optional[bool]:
    a = r.get("attention")
    if not a or a["wrong"] < MIN_WRONG:
        return None
    off = a["stale"] + a["elsewhere"]
    return off >= OFF and off >= OFF_RATIO * a["off_correct"]


def judge_attention(results: Mapping[str, Any]) -> verdicts.Judgement:
    rows = [r for g in ("transformer", "diverse") for r in results["groups"][g] if converged(r)]
    counted = [r for r in rows if attention_explains(r) is not None]
    n, k = len(counted), sum(attention_explains(r) for r in counted)
    if n == 0:
        return verdicts.Judgement(
            "inconclusive",
            f"no converged transformer seed has ≥ {MIN_WRONG} OOD wrong reads to look at ({len(rows)} converged)",
            0,
        )
    verdict = "matches" if k >= need(n) else "partly" if k >= math.ceil(n / 3 - 1e-9) else "does not"
    stale = verdicts.span([r["attention"]["stale"] for r in counted])
    elsewhere = verdicts.span([r["attention"]["elsewhere"] for r in counted])
    correct = verdicts.span([r["attention"]["off_correct"] for r in counted])
    return verdicts.Judgement(
        verdict,
        f"in {k}/{n} converged seeds (≥ {MIN_WRONG} OOD wrong reads) the read head's "
        f"peak misses the write on ≥ {OFF:.0%} of wrong reads and ≥ {OFF_RATIO:g}× as "
        f"often as on right ones; on wrong reads it peaks on another write {stale}, off "
        f"every write {elsewhere}; off the right write on right reads {correct}",
        n,
    )


# ---- negative controls ----------------------------------------------------------------------------------


def _as(results: Mapping[str, Any], **groups: str) -> dict[str, Any]:
    """The results with groups relabelled: _as(r, transformer="recurrent") puts the LSTM in the transformer's place."""
    g = results["groups"]
    return {**results, "groups": {**g, **{k: g[v] for k, v in groups.items()}}}


def lstm_as_transformer(results: Mapping[str, Any]) -> dict[str, Any]:
    return _as(results, transformer="recurrent")


def transformer_as_lstm(results: Mapping[str, Any]) -> dict[str, Any]:
    return _as(results, recurrent="transformer")


def arms_swapped(results: Mapping[str, Any]) -> dict[str, Any]:
    return _as(results, transformer="diverse", diverse="transformer")


def one_rate(results: Mapping[str, Any]) -> dict[str, Any]:
    """The converged baseline seeds' OOD errors redrawn at their pooled rate per split (binomial; a fixed draw):
    seeds that differ by sampling alone, no irregular tail."""
    import numpy as np

    rng = np.random.default_rng(0)
    done = [r for r in results["groups"]["transformer"] if converged(r)]
    rate = {
        s: sum(r["final"][s]["wrong"] for r in done) / max(sum(r["final"][s]["reads"] for r in done), 1)
        for s in ("sparse", "dense")
    }
    redrawn = [
        {
            **r,
            "final": {
                **r["final"],
                **{s: {**r["final"][s], "wrong": int(rng.binomial(r["final"][s]["reads"], rate[s]))} for s in rate},
            },
        }
        for r in done
    ]
    return {**results, "groups": {**results["groups"], "transformer": redrawn}}


def right_as_wrong(results: Mapping[str, Any]) -> dict[str, Any]:
    """The read head on the reads it gets right in place of the wrong ones."""

    def swap(r: Mapping[str, Any]) -> Mapping[str, Any]:
        a = r.get("attention")
        if not a:
            return r
        return {**r, "attention": {**a, "stale": a["off_correct"], "elsewhere": 0.0}}

    g = results["groups"]
    return {**results, "groups": {**g, **{k: [swap(r) for r in g[k]] for k in ("transformer", "diverse")}}}


def _budget(results: Mapping[str, Any]) -> float:
    return results["tokens"] / PAPER_TOKENS


BUDGET_NOTE = (
    "training tokens (steps × batch × T) against the paper's 10,000 × 16 × 512 = 81.9M, in a far smaller "
    "transformer than their 6-layer, d = 512 one (19M parameters)"
)
PAPER = (
    "FFL(0.8) at T = 512, fresh sequences, loss on the read bits; a 6-layer, 8-head, d = 512 GPT-2-style "
    "transformer, AdamW (lr 3e-4, weight decay 0.1, 50 warmup steps, linear decay) for 10,000 steps at batch 16; "
    "a 1-layer LSTM (d = 128) for 500 steps; tests: 10³ FFL(0.8), 10⁵ FFL(0.98), 3000 FFL(0.1) sequences"
)

CLAIMS = [
    verdicts.Claim(
        id="transformer_glitches",
        claim="Transformers trained on flip-flop reach zero in-distribution error, yet make sporadic errors on sparse "
        "and dense sequences: attention glitches (Liu et al. 2023, R1)",
        paper=PAPER,
        rule=f"a transformer seed converged when its in-distribution test error is ≤ {CONVERGED:g}; matches when ≥ 2/3 "
        f"of the converged seeds (≥ 3) make at least one error on the sparse or dense test sequences and the median "
        f"seed's OOD error rate is ≤ {RARE:g} (rare); partly when they err but not rarely; does not when fewer "
        f"than 2/3 err",
        judge=judge_glitches,
        min_n=3,
        budget=_budget,
        budget_note=BUDGET_NOTE,
        scale=True,
        control=lstm_as_transformer,
        control_note="the LSTM (no attention) in the transformer's place",
    ),
    verdicts.Claim(
        id="recurrent_none",
        claim="A small recurrent model (a 1-layer LSTM) makes no error on any split (Liu et al. 2023: 0 errors in "
        "100/100 replicates)",
        paper=PAPER,
        rule="matches when every LSTM seed (≥ 3) makes no error on the in-distribution, sparse and dense test "
        "sequences; partly when ≥ 2/3 make none; does not otherwise",
        judge=judge_recurrent,
        min_n=3,
        budget=lambda r: r["recurrent_tokens"] / PAPER_LSTM_TOKENS,
        budget_note="LSTM training tokens against the paper's 500 × 16 × 512",
        scale=False,
        control=transformer_as_lstm,
        control_note="the transformer in the LSTM's place",
    ),
    verdicts.Claim(
        id="irregular_across_seeds",
        claim="The glitches form a long, irregular tail: their rate differs between seeds by orders of magnitude "
        "(Liu et al. 2023, R1 and their 500 replicates)",
        paper=PAPER,
        rule=f"over the converged transformer seeds (≥ 3), the OOD error rates (a seed without errors at half an "
        f"error of its test) span ≥ ×{SPREAD:g}: matches; ≥ ×3: partly; less: does not",
        judge=judge_spread,
        min_n=3,
        budget=_budget,
        budget_note=BUDGET_NOTE,
        scale=True,
        control=one_rate,
        control_note="the seeds' errors redrawn at one pooled rate",
    ),
    verdicts.Claim(
        id="glitches_over_training",
        claim="The glitches persist over training while in-distribution error stays at zero (Liu et al. 2023, R1: "
        "their training curves)",
        paper=PAPER,
        rule="per converged seed whose in-distribution eval error is 0 at ≥ 90 % of the evaluations in the last half "
        "of training: OOD errors at ≥ half of those evaluations; matches when ≥ 2/3 of such seeds (≥ 3) do, "
        "partly when ≥ 1/3, does not otherwise",
        judge=judge_over_training,
        min_n=3,
        budget=_budget,
        budget_note=BUDGET_NOTE,
        scale=True,
        control=lstm_as_transformer,
        control_note="the LSTM (no attention) in the transformer's place",
    ),
    verdicts.Claim(
        id="diverse_data_reduces",
        claim="Training on more diverse data — an equal mixture of FFL(0.8), FFL(0.98) and FFL(0.1) — reduces the "
        "glitches, by far the most of their remedies, though not always to zero (Liu et al. 2023, R4)",
        paper=PAPER,
        rule=f"over the seeds that learned the task (in-distribution test error ≤ {CONVERGED:g}) in each group, the OOD "
        "error rates of the mixture's seeds against the baseline's: matches when the mixture's median is "
        "lower and a one-sided Mann–Whitney test gives p < 0.05 (≥ 3 seeds each); partly when only the median is "
        "lower; does not otherwise",
        judge=judge_diverse,
        min_n=3,
        budget=_budget,
        budget_note=BUDGET_NOTE,
        scale=True,
        control=arms_swapped,
        control_note="the mixture and the baseline swapped",
    ),
    verdicts.Claim(
        id="glitch_is_attention",
        claim="A glitch is the read's attention failing: it does not single out the most recent write (attention "
        "dilution, or a positional tie-break that picks another write; Liu et al. 2023, Props. 3 and 4 and "
        "their attention maps)",
        paper=PAPER + "; the paper shows attention maps of chosen examples, not a count",
        rule=f"per converged transformer seed (baseline or mixture) with ≥ {MIN_WRONG} OOD wrong reads, the "
        f"read_attention probe at the last checkpoint: its read head (the head with most attention from reads "
        f"to the right write in distribution) peaks off the right write on ≥ {OFF:.0%} of the wrong reads and "
        f"≥ {OFF_RATIO:g}× as often as on right reads; matches when ≥ 2/3 of such seeds (≥ 3) do, partly when "
        f"≥ 1/3, does not otherwise",
        judge=judge_attention,
        min_n=3,
        budget=_budget,
        budget_note=BUDGET_NOTE,
        scale=True,
        control=right_as_wrong,
        control_note="the reads it gets right in place of the wrong ones",
    ),
]
