"""The claims of experiments/dyck_balance.py and the rules that judge them.

Seed 003 ("Process: stack or 2-layer Transformer. [Yao et al.] [WLLR 23]: all 2-layer Transformers solving Dyck need
to satisfy a balanced condition — a Transformer's version of the pumping lemma"), after Wen, Li, Liu & Risteski 2023,
"Transformers are uninterpretable with myopic methods: a case study with bounded Dyck grammars": a layer that reads
(type, depth) must leave its LayerNorm-ed output unchanged when a matched pair is inserted (the balanced condition),
which is what lets a model generalise to longer strings; and the attention patterns of models that solve the task
can be "nearly randomized" — vastly different solutions are reached by standard training, so the stack-like
pattern an interpretability reading looks for is not necessary.

Written before any run of the script (a pilot of one run, seed 0, 600 steps with rotary positions, was seen: in
distribution close_acc 0.95, at 400 brackets 0.82, the last layer's balance violation 2.35, the best head's
attention on the matching open 0.21–0.28). The judge reads `results["runs"]`: one row per (group, seed), with
"group", "seed", "eval" and "long" (Yao et al.'s closing-bracket accuracy at the training length and at the long
length, on the same held-out sequences for every run), "bv" (the dyck_balance probe's last-layer violation at the
last checkpoint), "bv_init" (the same at step 0) and "match_mass" (the best head's attention from positions with a
non-empty stack onto the open on its top, at the last checkpoint), and "eval_init", "match_mass_init" (the
step-0 checkpoint's close_acc at the training length and best-head attention on the matching open).

Rewritten for issue 46 after the runs of seeds 100-105 had been seen (their violations reached 1e6-1e13): each
claim now has a negative control (balance_goes_with_length_generalisation: the step-0 checkpoint's violation in
place of the trained one's; training_balances: the step-0 and final violations swapped;
interpretable_attention_not_necessary: the step-0 checkpoint, which solves nothing), a `scale` and a `kind`; the
violation is shown as log10 in the why-lines. The violation is a ratio whose denominator (the smallest contribution
no pumping removes) can come near 0, so it is unbounded above; the rules read it by rank only (Spearman, a sign
test), which a log does not change.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from experiments import verdicts

SOLVED = 0.99  # close_acc at the training length: the run solves the task in distribution
STACK_HEAD = 0.5  # a head with at least this attention on the matching open is the "interpretable" stack head
SHARE = 1 / 3  # "not necessary": at least this share of the solving runs have no stack head
MIN_RUNS = 6


def log10(x: float) -> float:
    return math.log10(x) if x > 0 else -math.inf


def logspan(xs: list[float]) -> str:
    """The violations' range on a log10 scale ("log10 −0.47–6.1")."""
    return "log10 " + verdicts.span([log10(x) for x in xs], verdicts.f2, median=True)


def solving(results: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in results["runs"] if r["eval"] >= SOLVED and r["bv"] is not None and math.isfinite(r["bv"])]


def judge_balance_generalises(results: Mapping[str, Any]) -> verdicts.Judgement:
    from scipy.stats import spearmanr

    rows = solving(results)
    n = len(rows)
    if n < 3:
        return verdicts.Judgement(
            "inconclusive",
            f"{n}/{len(results['runs'])} runs solve the task in distribution (close_acc ≥ {SOLVED:g})",
            n,
        )
    res = spearmanr([r["bv"] for r in rows], [r["long"] for r in rows], alternative="less")
    rho, p = float(res.statistic), float(res.pvalue)
    verdict = "matches" if rho < 0 and p < verdicts.LEVEL else "partly" if rho < 0 else "does not"
    if not math.isfinite(rho):
        verdict = "inconclusive"
    return verdicts.Judgement(
        verdict,
        f"over {n} runs that solve the task in distribution: Spearman ρ(balance "
        f"violation, close_acc at the long length) = {verdicts.num(rho)} (one-sided "
        f"p {verdicts.num(p)}); violation {logspan([r['bv'] for r in rows])}, "
        f"long-length close_acc {verdicts.span([r['long'] for r in rows], median=True)}",
        n,
    )


def judge_training_balances(results: Mapping[str, Any]) -> verdicts.Judgement:
    rows = [r for r in solving(results) if r["bv_init"] is not None and math.isfinite(r["bv_init"])]
    n = len(rows)
    k = sum(r["bv"] < r["bv_init"] for r in rows)
    if n == 0:
        return verdicts.Judgement("inconclusive", "no run solves the task in distribution", 0)
    p = verdicts.binomial_p(k, n, 0.5)
    verdict = "matches" if p < verdicts.LEVEL else "partly" if k > n / 2 else "does not"
    return verdicts.Judgement(
        verdict,
        f"the last layer's balance violation fell from initialisation in {k}/{n} runs "
        f"that solve the task (sign test p {verdicts.num(p)}): "
        f"{logspan([r['bv_init'] for r in rows])} at step 0, "
        f"{logspan([r['bv'] for r in rows])} at the end",
        n,
    )


def judge_attention_not_necessary(results: Mapping[str, Any]) -> verdicts.Judgement:
    rows = solving(results)
    n = len(rows)
    if n == 0:
        return verdicts.Judgement("inconclusive", "no run solves the task in distribution", 0)
    k = sum(r["match_mass"] < STACK_HEAD for r in rows)
    verdict = "matches" if k >= math.ceil(SHARE * n - 1e-9) else "partly" if k > 0 else "does not"
    return verdicts.Judgement(
        verdict,
        f"{k}/{n} runs that solve the task have no head with ≥ {STACK_HEAD:g} of its "
        f"attention on the matching open (the best head's "
        f"{verdicts.span([r['match_mass'] for r in rows], median=True)})",
        n,
    )


def step0_violation(results: Mapping[str, Any]) -> dict[str, Any]:
    """Control: the trained runs' long-length accuracy against their step-0 violation (no balance learned)."""
    return {**results, "runs": [{**r, "bv": r["bv_init"]} for r in results["runs"]]}


def swapped(results: Mapping[str, Any]) -> dict[str, Any]:
    """Control: the step-0 and final violations swapped."""
    return {**results, "runs": [{**r, "bv": r["bv_init"], "bv_init": r["bv"]} for r in results["runs"]]}


def step0(results: Mapping[str, Any]) -> dict[str, Any]:
    """Control: the step-0 checkpoint (untrained: it solves nothing) in place of the trained one."""
    return {
        **results,
        "runs": [{**r, "eval": r["eval_init"], "match_mass": r["match_mass_init"]} for r in results["runs"]],
    }


def _budget(results: Mapping[str, Any]) -> float:
    return results["steps"] / results["paper_steps"]


PAPER = (
    "Dyck_{2,4}; training prefixes of 28 brackets, loss on the closes, tested at 400–500; a 2-layer, 1-head, "
    "width-50 GPT-2-style transformer with frozen one-hot embeddings, no positional encoding and one LayerNorm "
    "per block (after attention); AdamW lr 3e-3, cosine, batch 100, 40 epochs of 100k tokens; 30–40 seeds"
)

CLAIMS = [
    verdicts.Claim(
        id="balance_goes_with_length_generalisation",
        claim="2-layer transformers that solve bounded Dyck need the balanced condition: the more balanced the "
        "layer that reads depth, the better the model generalises to longer strings",
        paper=PAPER,
        rule=f"over the runs (all groups) whose close_acc at the training length is ≥ {SOLVED:g} (≥ {MIN_RUNS}): "
        f"the Spearman correlation of the last layer's balance violation with close_acc at the long length; "
        f"matches when negative with one-sided p < 0.05, partly when negative, does not otherwise",
        judge=judge_balance_generalises,
        min_n=MIN_RUNS,
        budget=_budget,
        budget_note="training steps against theirs",
        scale=True,
        control=step0_violation,
        control_note="the step-0 checkpoint's violation in place of the trained one's",
    ),
    verdicts.Claim(
        id="training_balances",
        claim="Training drives the layer towards balance (the solutions training finds satisfy the condition)",
        paper=PAPER,
        rule=f"over the runs that solve the task (≥ {MIN_RUNS}): the last layer's balance violation at the end "
        f"below its value at step 0; matches with a one-sided sign test p < 0.05, partly in more than half, "
        f"does not otherwise",
        judge=judge_training_balances,
        min_n=MIN_RUNS,
        budget=_budget,
        budget_note="training steps against theirs",
        scale=True,
        control=swapped,
        control_note="the step-0 and final violations swapped",
    ),
    verdicts.Claim(
        id="interpretable_attention_not_necessary",
        claim="Attention patterns that look interpretable are not necessary: models that solve the task reach "
        "vastly different attention patterns (Wen et al. 2023)",
        paper=PAPER,
        rule=f"over the runs that solve the task (≥ {MIN_RUNS}): those with no head putting ≥ {STACK_HEAD:g} of its "
        f"attention (from positions with a non-empty stack) on the open on top of the stack — the stack head "
        f"an interpretation would look for; matches when ≥ 1/3 of them, partly when at least one, does not "
        f"when every solving run has the stack head",
        judge=judge_attention_not_necessary,
        min_n=MIN_RUNS,
        budget=_budget,
        budget_note="training steps against theirs",
        scale=False,
        control=step0,
        control_note="the step-0 checkpoint, which solves nothing",
    ),
]
