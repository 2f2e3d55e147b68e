"""Claims and the rules that judge them, committed before the runs they judge.

An experiment's claims live in experiments/rules/<name>.py, one `Claim` each: the paper's claim, its setting,
the rule in words and the rule in code (`judge`: the script's results -> a `Judgement`). The rules sit apart
from the scripts so that a later fix to a script's plotting or wording does not make its rules look newer
than its runs. `judged()` applies
what every rule shares:

- fewer seeds (or cells) than the claim's `min_n` -> "inconclusive";
- a budget below `BUDGET_FLOOR` of the paper's (samples × steps, as the claim states it), both ways: a claim whose
  outcome depends on scale (`scale=True`: orderings, exponents, thresholds, comparisons between arms, "fails
  beyond T") is "inconclusive" whatever its rule said; an existence claim (`scale=False`: "a small transformer
  can learn X") keeps a "matches", since a small run can show it, but cannot say "does not";
- a negative control (`control`: the same results with the claimed cause removed, in the shape `judge` reads)
  judged by the same rule: a "matches" or "partly" whose control does as well is "by construction", not a
  match; a "matches" or "partly" without a control in its results is "inconclusive": nothing showed the rule
  could have failed.

A claim is a seed paper's (`kind="paper"`) or a check of mechsynth's own methods (`kind="tool"`: circuit
discovery on planted circuits, an audit of a generator); the README counts and tables them apart.
"""

from __future__ import annotations

import importlib.util
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping, Optional, Sequence, Union

VERDICTS = ("matches", "partly", "does not", "inconclusive")  # what a rule says
REPORTED = ("matches", "partly", "does not", "inconclusive", "by construction")  # what the table says
KINDS = ("paper", "tool")
BUDGET_FLOOR = 0.1
RULES = Path(__file__).resolve().parent / "rules"
LEVEL = 0.05  # the significance level of every test a rule makes


@dataclass(frozen=True)
class Judgement:
    verdict: str
    why: str  # one line: the numbers that decided
    n: int  # the seeds (or cells) it rests on


@dataclass(frozen=True)
class Claim:
    id: str
    claim: str  # the paper's claim, as the seed states it
    paper: str  # the paper's setting
    rule: str  # the rule in words: what `judge` does
    judge: Callable[[Mapping[str, Any]], Judgement]
    min_n: int = 3
    # our budget / the paper's where both are known; a function of the results where the size run decides it
    budget: Union[None, float, Callable[[Mapping[str, Any]], Optional[float]]] = None
    budget_note: str = ""  # what the ratio compares
    # True: the outcome depends on scale, so below the budget floor it is inconclusive whichever way it came out;
    # False: an existence claim that a smaller run can show (only its "matches" stands below the floor)
    scale: bool = True
    # the negative control: results -> the results of a run that lacks the claimed cause (the untrained
    # checkpoint, shuffled labels, the arms swapped, ...), which `judge` must not call a match
    control: Optional[Callable[[Mapping[str, Any]], Mapping[str, Any]]] = None
    control_note: str = ""  # what the control removes, in a few words
    kind: str = "paper"  # "paper": a seed paper's claim; "tool": a check of mechsynth's own methods

    def __post_init__(self) -> None:
        assert self.kind in KINDS, f"{self.id}: kind {self.kind!r}"
        assert (self.control is None) == (not self.control_note), (
            f"{self.id}: a control needs its note, and a note its control"
        )


def rules_of(name: str) -> Optional[ModuleType]:
    """experiments/rules/<name>.py (None when the experiment has none): its CLAIMS, and optionally
    `tables(results) -> str`, markdown the Results section prints below the table."""
    path = RULES / f"{name}.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"rules_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def claims_of(name: str) -> list[Claim]:
    module = rules_of(name)
    return list(module.CLAIMS) if module else []


MISSING = (KeyError, IndexError, TypeError)  # what results of another version of a script raise in a rule


def rank(verdict: str) -> int:
    """How favourable a rule's verdict is to the claim."""
    return {"matches": 3, "partly": 2, "does not": 1, "inconclusive": 0}[verdict]


def judged(claim: Claim, results: Mapping[str, Any]) -> dict[str, Any]:
    """The claim's verdict on `results`, after the floors on seeds and budget and its negative control, as the
    JSON records it."""
    try:
        j = claim.judge(results)
    except MISSING as e:
        j = Judgement("inconclusive", f"the results lack what the rule reads ({type(e).__name__}: {e})", 0)
    assert j.verdict in VERDICTS, f"{claim.id}: verdict {j.verdict!r}"
    verdict, why = j.verdict, j.why
    try:
        budget = claim.budget(results) if callable(claim.budget) else claim.budget
    except MISSING:
        budget = None
    small = budget is not None and budget < BUDGET_FLOOR
    if j.n < claim.min_n and verdict != "inconclusive":
        verdict, why = "inconclusive", f"{why}; {j.n} seeds or cells, the rule needs ≥ {claim.min_n}"
    elif small and verdict != "inconclusive" and (claim.scale or verdict != "matches"):
        kind = "whose outcome depends on scale" if claim.scale else "that it cannot refute"
        verdict, why = (
            "inconclusive",
            (
                f"{why}; would be '{j.verdict}', but the budget is {num(budget)} of the "
                f"paper's, below {BUDGET_FLOOR:g}, for a claim {kind}"
            ),
        )
    control = controlled(claim, results)
    if verdict in ("matches", "partly"):
        if control is None or control["verdict"] is None:
            verdict, why = (
                "inconclusive",
                (
                    f"{why}; would be '{verdict}', but no negative control in these results "
                    f"showed that the rule could fail"
                ),
            )
        elif rank(control["verdict"]) >= rank(verdict):
            verdict, why = (
                "by construction",
                (
                    f"{why}; its negative control ({claim.control_note}) is judged "
                    f"'{control['verdict']}' by the same rule: {control['why']}"
                ),
            )
    return {
        "id": claim.id,
        "claim": claim.claim,
        "paper": claim.paper,
        "rule": claim.rule,
        "min_n": claim.min_n,
        "budget": budget,
        "budget_note": claim.budget_note,
        "scale": claim.scale,
        "kind": claim.kind,
        "n": j.n,
        "rule_verdict": j.verdict,
        "control": control,
        "verdict": verdict,
        "why": why,
    }


def controlled(claim: Claim, results: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The rule's own verdict on the claim's negative control (None: the claim has none; a verdict of None: these
    results do not hold it)."""
    if claim.control is None:
        return None
    try:
        c = claim.judge(claim.control(results))
    except MISSING as e:
        return {
            "note": claim.control_note,
            "verdict": None,
            "why": f"the results lack the control ({type(e).__name__}: {e})",
        }
    return {"note": claim.control_note, "verdict": c.verdict, "why": c.why, "n": c.n}


def counts(claims: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many claims have each reported verdict, in REPORTED's order."""
    return {v: sum(c["verdict"] == v for c in claims) for v in REPORTED}


def judge_all(name: str, results: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [judged(c, results) for c in claims_of(name)]


# ---- provenance ---------------------------------------------------------------------------------


def _git(*args: str) -> Optional[str]:
    try:
        out = subprocess.run(["git", *args], cwd=RULES.parent, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def rule_files(name: str) -> list[str]:
    return [f"experiments/rules/{name}.py", "experiments/verdicts.py"]


def rules_commit(name: str) -> Optional[str]:
    """The last commit of the experiment's rules, "uncommitted" when they differ from it (None: git cannot say)."""
    files = [f":(top){f}" for f in rule_files(name)]
    commit = _git("log", "-1", "--format=%h", "--abbrev=12", "--", *files)
    if not commit:
        return None
    return "uncommitted" if _git("status", "--porcelain", "--", *files) else commit


def provenance(name: str, run_commits: Sequence[str]) -> dict[str, Any]:
    """The rules' commit and whether the runs came after it: every run's commit (clean) contains the
    rules' commit, and the rules are unchanged since."""
    files = [f":(top){f}" for f in rule_files(name)]
    commit = _git("log", "-1", "--format=%h", "--abbrev=12", "--", *files) or None
    changed = bool(_git("status", "--porcelain", "--", *files))
    after = [c for c in run_commits if c and not c.endswith("-dirty") and c != "not recorded"]
    before = (
        commit is not None
        and not changed
        and len(after) == len(run_commits) > 0
        and all(_git("merge-base", "--is-ancestor", commit, c) is not None for c in set(after))
    )
    return {"files": rule_files(name), "commit": commit, "changed_since": changed, "before_runs": before}


# ---- statistics the rules share -------------------------------------------------------------------


def fisher(a_hits: int, a_of: int, b_hits: int, b_of: int) -> float:
    """Two-sided Fisher exact p of a_hits/a_of against b_hits/b_of."""
    from scipy.stats import fisher_exact

    return float(fisher_exact([[a_hits, a_of - a_hits], [b_hits, b_of - b_hits]])[1])


def binomial_p(hits: int, of: int, chance: float) -> float:
    """One-sided p of ≥ hits successes in `of` trials at rate `chance`."""
    from scipy.stats import binomtest

    return float(binomtest(hits, of, chance, alternative="greater").pvalue)


def within(a: Optional[float], b: Optional[float], factor: float) -> bool:
    """Two steps within `factor` of each other (steps are log-spaced; 0 counts as 1)."""
    if a is None or b is None:
        return False
    return max(a, b, 1) / max(min(a, b), 1) <= factor


def coincidence_null(
    boundaries: Sequence[Sequence[float]],
    events: Sequence[Sequence[Optional[float]]],
    steps: Sequence[Sequence[float]],
    factor: float,
    draws: int = 2000,
    seed: int = 0,
) -> dict[str, float]:
    """How often an event lies within `factor` of one of its seed's boundaries, against the same count of
    boundaries placed at random among that seed's checkpoints: the observed fraction, the null's mean,
    and the one-sided permutation p (the share of draws at least as high)."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def hits(bs: Sequence[Sequence[float]]) -> float:
        pairs = [(e, b) for es, b in zip(events, bs) for e in es if e is not None]
        return sum(any(within(e, x, factor) for x in b) for e, b in pairs) / max(len(pairs), 1)

    observed = hits(boundaries)
    null = [
        hits([rng.choice(s, size=len(b), replace=False) if len(b) else [] for s, b in zip(steps, boundaries)])
        for _ in range(draws)
    ]
    p = (1 + sum(v >= observed for v in null)) / (draws + 1)
    return {"observed": observed, "null_mean": float(np.mean(null)), "p": p}


def interval(
    values: Sequence[float], stat: Callable[[Sequence[float]], float], draws: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """The 95 % percentile bootstrap interval of `stat` over resamples of `values`."""
    import numpy as np

    rng = np.random.default_rng(seed)
    xs = list(values)
    reps = sorted(stat([xs[i] for i in rng.integers(0, len(xs), len(xs))]) for _ in range(draws))
    return reps[int(0.025 * draws)], reps[min(int(math.ceil(0.975 * draws)), draws - 1)]


# ---- the numbers in a `why` line ---------------------------------------------------------------------


def num(x: Optional[float], missing: str = "not reached") -> str:
    """Whole numbers, and numbers from 10 up, to the unit; 3 significant digits from 0.9 (0.997, not 1;
    a ratio 1.05, not 1); 2 below."""
    if x is None:
        return missing
    if x == 0:
        return "0"
    if float(x).is_integer() or abs(x) >= 9.95 or not math.isfinite(x):
        return f"{x:.0f}"
    return f"{x:.3g}" if abs(x) >= 0.9 else f"{x:.2g}"


def span(
    xs: Sequence[Optional[float]], fmt: Callable[[float], str] = num, median: bool = False, missing: str = "not reached"
) -> str:
    """The values that exist as "195–336" ("195–336 (median 234)"), or one value when they agree; how many
    are missing is said ("…, not reached in 1/5")."""
    have = [x for x in xs if x is not None]
    if not have:
        return missing
    lo, hi = fmt(min(have)), fmt(max(have))
    out = lo if lo == hi else f"{lo}–{hi}"
    if median and lo != hi and len(have) > 2:
        import statistics

        out += f" (median {fmt(statistics.median(have))})"
    gone = len(xs) - len(have)
    return out + (f", {missing} in {gone}/{len(xs)}" if gone else "")


def p_value(p: float) -> str:
    """A p-value to 2 significant digits: 0.031, 4e-23."""
    return f"{p:.2g}"


def f2(x: float) -> str:
    """Two decimals, with a true minus sign (so that a range still reads "a–b")."""
    return f"{x:.2f}".replace("-", "−")
