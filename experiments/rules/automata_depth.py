"""The claims of experiments/automata_depth.py and the rules that judge them; the paper's depth table.

Four claims, in the README's order: accuracy against depth orders the rows by solvability (Liu et al.
2023); the input alphabet alone changes how hard a group is (our audit of the earlier T = 16 table); the
state becomes linearly decodable layer by layer; shortcuts are brittle beyond the training length.

These rules were written after the earlier runs (seeds 0-2, assets/automata_depth.json of commit 1c318fb)
had been seen, and after an audit found that run's budget (19,200 sequences at width 32, against the
paper's 600k-5M) too small to test the depth claim: parity (C2) itself was learned at no depth. The runs
they judge use fresh seeds (100 and up). Below a budget of 0.1 of the paper's, what is not a clear
"matches" is "inconclusive" (verdicts.judged); the depth rule also says "inconclusive" where C2, which the
paper solves from L = 2, is learned at no depth.

Rewritten for issue 46, after the runs of seeds 100-102 had been seen (beyond_training_length "matched" at
0.032 of the paper's budget; the alphabet audit was counted among the paper's claims): the budget is
computed from the run (`results["budget"]["sequences"]`, sequences seen, over the paper's fewest, 600k; the
runs before it recorded none and were all 19,200); depth_ordering, linear_decoding and beyond_training_length
depend on scale, so below the floor they are inconclusive whichever way they come out; the alphabet audit is a
tool check (kind "tool"). Each claim has a negative control its rule must reject: the rows reversed (each
row given the accuracies of its mirror row: the easiest the hardest's; depth_ordering); Liu et al.'s alphabet
against itself, with other seeds (`results["alphabets"][g][d]["liu_other_seeds"]`; alphabet); the
untrained (step-0) models' decoding (`linear_init` of each deepest run; linear_decoding); rotary models
trained to 2T, read within and beyond the same T (`results["length_control"]`, the shape of
`results["length"]`; beyond_training_length). The runs they judge use fresh seeds (300 and up).

The judges read `results["table"]`, `results["runs"]` ("group", "depth", "linear", "linear_init"),
`results["alphabets"]`, `results["length"]`, `results["length_control"]` and `results["budget"]`.

PAPER_TABLE is Liu et al.'s table (accuracy % at T = 100) as the seed talk lists it, a cell not legible
there None; `tables(results)` prints it beside ours, cell by cell, for the README.
"""

from __future__ import annotations

import copy
import statistics
from typing import Any, Mapping, Optional, Sequence

from experiments import verdicts

PAPER_DEPTHS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)
_ROWS = {
    "Dyck": (99.3, 100, 100, 100, 100, 100, 100, 100, 100, 100),
    "Grid9": (92.2, 100, 100, 100, 100, 100, 100, 100, 100, 100),
    "C2": (None, 99.8, 99.9, 100, 100, 99.5, 100, 99.7, 100, 100),
    "C3": (54.6, 94.6, 96.7, 99.4, 100, 100, 99.8, 100, 100, 100),
    "C2^3": (65.0, None, 99.9, 97.9, 100, 99.8, 98.2, 99.9, 95.9, 80.6),
    "D6": (25.4, 27.2, 47.4, None, 100, 100, 100, 100, 100, 100),
    "D8": (45.6, 98.0, 100, 100, 100, 100, 100, 100, 100, 100),
    "Q8": (31.6, 49.2, 59.6, 60.4, 73.5, 99.3, 100, 100, 100, 100),
    "A5": (12.5, 23.1, 32.5, 46.7, 71.2, 98.8, 100, 100, 100, 100),
    "S5": (7.9, 11.8, 14.6, 19.7, 26.0, 28.4, 32.8, 51.8, 97.2, 99.9),
}
# Liu et al. 2023, accuracy (%) against depth L at T = 100, as listed in the seed talk "Guiding machine learning
# design with insights from simple testbeds"; None: a cell not legible there ("?").
PAPER_TABLE: dict[str, dict[int, Optional[float]]] = {g: dict(zip(PAPER_DEPTHS, row)) for g, row in _ROWS.items()}

SOLVED = 90.0  # a cell solves its row when the mean accuracy over seeds (all positions, %) is at least this
PAPER_SEQUENCES = 600_000  # the fewest sequences Liu et al. trained on (600k-5M)
EARLIER_SEQUENCES = 19_200  # what the runs before issue 46 saw (1200 steps of 16); they did not record it


def budget(results: Mapping[str, Any]) -> float:
    """Sequences seen over the paper's fewest (the runs before issue 46 recorded none: all saw 19,200)."""
    seen = results["budget"]["sequences"] if "budget" in results else EARLIER_SEQUENCES
    return seen / PAPER_SEQUENCES


BUDGET_NOTE = (
    "sequences seen (steps × batch; CPU size 1200 × 16) over the fewest the paper trained on, 600k (it "
    "trained on up to 5M); width 32 against 512; --full: 20 000 × 64, above the floor"
)


# ---- reading (private to this file) -----------------------------------------------------------------


def _depths(results: Mapping[str, Any]) -> list[int]:
    first = next(iter(results["table"].values()))
    return sorted(int(d) for d in first)


def _seeds(results: Mapping[str, Any]) -> int:
    return min(len(c["all"]["per_seed"]) for row in results["table"].values() for c in row.values())


def _mean(results: Mapping[str, Any], g: str, d: int) -> float:
    return results["table"][g][str(d)]["all"]["mean"]


def _spearman(a: Sequence[float], b: Sequence[float]) -> Optional[float]:
    from scipy.stats import spearmanr

    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return float(spearmanr(a, b)[0])


# ---- 1. accuracy against depth ---------------------------------------------------------------------------


def first_solved(values: Mapping[int, Optional[float]]) -> tuple[Optional[int], list[int]]:
    """The first depth whose accuracy is ≥ SOLVED (None: never), and the illegible depths before it (it could
    be one of those)."""
    first = next((d for d in sorted(values) if values[d] is not None and values[d] >= SOLVED), None)
    unknown = [d for d in sorted(values) if values[d] is None and (first is None or d < first)]
    return first, unknown


def judge_depth(results: Mapping[str, Any]) -> verdicts.Judgement:
    depths, n = _depths(results), _seeds(results)
    rows = list(results["table"])
    agree, parts, ours_first, paper_first = 0, [], [], []
    never = max(depths) + 1
    for g in rows:
        ours, _ = first_solved({d: _mean(results, g, d) for d in depths})
        theirs, unknown = first_solved({d: PAPER_TABLE[g].get(d) for d in depths})
        ok = ours == theirs or ours in unknown
        agree += ok
        parts.append(f"{g} {ours or 'never'} · {theirs or 'never'}")
        ours_first.append(ours or never)
        paper_first.append(theirs or never)
    rho = [
        r
        for d in depths
        if (
            r := _spearman(
                [_mean(results, g, d) for g in rows if PAPER_TABLE[g].get(d) is not None],
                [PAPER_TABLE[g][d] for g in rows if PAPER_TABLE[g].get(d) is not None],
            )
        )
        is not None
    ]
    why = (
        f"first depth ≥ {SOLVED:g} % (ours · paper, at L = {'/'.join(map(str, depths))}) agrees in {agree}/{len(rows)} rows: "
        + ", ".join(parts)
        + (
            f"; rank correlation over rows with the paper's accuracy, per depth, {verdicts.span(rho, median=True)}"
            if rho
            else ""
        )
    )
    if "C2" in rows and (best := max(_mean(results, "C2", d) for d in depths)) < SOLVED:
        paper = sorted({f"{v:g}" for d, v in PAPER_TABLE["C2"].items() if d in depths and v is not None}, key=float)
        said = paper[0] if len(paper) == 1 else f"{paper[0]}–{paper[-1]}"
        return verdicts.Judgement(
            "inconclusive",
            f"C2 (parity) at most {verdicts.num(best)} % at any depth (the paper {said} from L = 2): a budget "
            f"that does not learn parity cannot test the ordering; {why}",
            n,
        )
    if agree >= 0.8 * len(rows):
        return verdicts.Judgement("matches", why, n)
    return verdicts.Judgement("partly" if agree >= 0.5 * len(rows) else "does not", why, n)


def rows_reversed(results: Mapping[str, Any]) -> Mapping[str, Any]:
    """The control: each row given the accuracies of its mirror row in the paper's order (Dyck gets S5's, C2
    gets Q8's, ...): the link between a group and its solvability removed, the accuracies kept."""
    out = copy.deepcopy(dict(results))
    rows = list(results["table"])
    out["table"] = {g: copy.deepcopy(results["table"][m]) for g, m in zip(rows, reversed(rows))}
    return out


# ---- 2. the input alphabet -------------------------------------------------------------------------------


def _from_chance(acc: float, floor: float) -> float:
    return (acc - floor) / (100 - floor)


def judge_alphabet(results: Mapping[str, Any]) -> verdicts.Judgement:
    cells = [(g, d, c) for g, row in results["alphabets"].items() for d, c in row.items()]
    if not cells:
        return verdicts.Judgement("inconclusive", "no alphabet cells were run", 0)
    n = min(len(c[a]["all"]["per_seed"]) for _, _, c in cells for a in ("liu", "generators"))
    apart, easier, parts = 0, {"generators": 0, "liu": 0}, []
    for g, d, c in cells:
        rel = {
            a: [_from_chance(v, c[a]["chance"]["all"]) for v in c[a]["all"]["per_seed"]] for a in ("liu", "generators")
        }
        if min(rel["generators"]) > max(rel["liu"]):
            apart += 1
            easier["generators"] += 1
        elif min(rel["liu"]) > max(rel["generators"]):
            apart += 1
            easier["liu"] += 1
        parts.append(f"{g} L = {d} {statistics.fmean(rel['generators']):.2f} vs {statistics.fmean(rel['liu']):.2f}")
    same_way = max(easier.values())
    why = (
        f"fraction of the way from each alphabet's chance to 100 %, mechsynth's generators vs Liu et al.'s (mean over "
        f"{n} seeds, all positions): "
        + ", ".join(parts)
        + f"; seed ranges apart in {apart}/{len(cells)} cells, the generators easier in {easier['generators']}"
    )
    if same_way == len(cells):
        return verdicts.Judgement("matches", why, n)
    return verdicts.Judgement("partly" if 2 * apart >= len(cells) else "does not", why, n)


def same_alphabet(results: Mapping[str, Any]) -> Mapping[str, Any]:
    """The control: Liu et al.'s alphabet against itself, its other seeds in the generators' place."""
    out = copy.deepcopy(dict(results))
    for row in out["alphabets"].values():
        for c in row.values():
            c["generators"] = c["liu_other_seeds"]
    return out


# ---- 3. linear decoding layer by layer --------------------------------------------------------------------

RISE = 20.0  # the state's decoding after the last layer is at least this many points above the embedding's
DIP = 2.0  # and never falls by more than this from one place to the next
ONE_JUMP = 0.75  # the largest single-layer gain is below this share of the whole rise (layer by layer, not at once)


def judge_decoding(results: Mapping[str, Any]) -> verdicts.Judgement:
    deepest = max(_depths(results))
    runs = [r for r in results["runs"] if r["depth"] == deepest]
    n = min(sum(r["group"] == g for r in runs) for g in results["table"])
    learned = [g for g in results["table"] if _mean(results, g, deepest) >= SOLVED]
    others = [g for g in results["table"] if g not in learned]
    parts, shows = [], 0
    for g in learned:
        curve = [100 * statistics.fmean(v) for v in zip(*(r["linear"]["state"] for r in runs if r["group"] == g))]
        gains = [b - a for a, b in zip(curve, curve[1:])]
        rise = curve[-1] - curve[0]
        ok = curve[-1] >= SOLVED and rise >= RISE and min(gains) >= -DIP and max(gains) < ONE_JUMP * rise
        shows += ok
        parts.append(f"{g} " + " → ".join(verdicts.num(v) for v in curve))
    end = [100 * statistics.fmean(r["linear"]["state"][-1] for r in runs if r["group"] == g) for g in others]
    why = (
        f"state decoding in the {deepest}-layer models, embedding → after each layer (mean of {n} seeds), rows learned "
        f"(≥ {SOLVED:g} %): "
        + ("; ".join(parts) if parts else "none")
        + f"; layer by layer in {shows}/{len(learned)}"
        + (f"; the {len(others)} rows not learned end at {verdicts.span(end)} %" if others else "")
    )
    if len(learned) < 2:
        return verdicts.Judgement("inconclusive", f"{why}; the rule needs ≥ 2 rows learned", n)
    if shows == len(learned):
        return verdicts.Judgement("matches", why, n)
    return verdicts.Judgement("partly" if 2 * shows >= len(learned) else "does not", why, n)


def untrained_decoding(results: Mapping[str, Any]) -> Mapping[str, Any]:
    """The control: the deepest models' decoding read from their untrained (step-0) weights, the rows learned
    still those the trained models learned."""
    out = copy.deepcopy(dict(results))
    deepest = max(_depths(results))
    for r in out["runs"]:
        if r["depth"] == deepest:
            r["linear"] = r["linear_init"]
    return out


# ---- 4. beyond the training length ------------------------------------------------------------------------

DROP = 10.0  # points of accuracy lost beyond T (at 2T) that count as brittle


def judge_length(results: Mapping[str, Any]) -> verdicts.Judgement:
    table = results["length"]
    n = min(len(e["within_T"]["per_seed"]) for row in table.values() for e in row.values())
    learned = [g for g in table if table[g]["rotary"]["within_T"]["mean"] >= SOLVED]
    drops, parts = 0, []
    for g in learned:
        e = table[g]["rotary"]
        within, beyond = e["within_T"]["per_seed"], e["beyond_T_at_2T"]["per_seed"]
        drops += sum(w - b >= DROP for w, b in zip(within, beyond))
        parts.append(
            f"{g} {verdicts.span(within)} → {verdicts.span(beyond)} at 2T ({verdicts.span(e['beyond_T_at_4T']['per_seed'])} at 4T)"
        )
    pairs = n * len(learned)
    control = [v for g in learned if "standard" in table[g] for v in table[g]["standard"]["beyond_T_at_2T"]["per_seed"]]
    why = (
        f"rotary positions, rows learned within T (≥ {SOLVED:g} %), accuracy within T → beyond T: "
        + ("; ".join(parts) if parts else "none")
        + f"; a drop ≥ {DROP:g} points at 2T in {drops}/{pairs} row-seeds"
        + (f"; learned absolute positions (untrained beyond T) {verdicts.span(control)} at 2T" if control else "")
    )
    if not learned:
        return verdicts.Judgement("inconclusive", f"{why}; no row is learned within T", n)
    if drops == pairs:
        return verdicts.Judgement("matches", why, n)
    return verdicts.Judgement("partly" if 2 * drops >= pairs else "does not", why, n)


def trained_to_2T(results: Mapping[str, Any]) -> Mapping[str, Any]:
    """The control: rotary models trained on sequences 2T long, read at the same positions (within T, and T to
    2T, T to 4T beyond it): nothing beyond T at 2T is beyond their training length."""
    out = copy.deepcopy(dict(results))
    out["length"] = out["length_control"]
    return out


CLAIMS = [
    verdicts.Claim(
        id="depth_ordering",
        claim="Accuracy against depth at T = 100 orders the rows by solvability: abelian rows at L = 1–2, D8 by 2, D6 "
        "and Q8 later, A5 at ~6, S5 last (Liu et al. 2023)",
        paper="the seed talk's table: 10 rows × L = 1–8, 12, 16 at T = 100, trained on 600k–5M sequences",
        rule=f"If C2 (parity; the paper ≥ 99.5 % from L = 2) reaches a mean of {SOLVED:g} % at no depth, inconclusive: "
        f"the budget cannot learn the easiest group. Otherwise per row, the first of our depths whose mean over "
        f"seeds (all positions) is ≥ {SOLVED:g} % against the paper's first at the same depths (never = never; an "
        f"illegible paper cell before its first counts as a match); matches: ≥ 80 % of rows agree; partly: ≥ 50 %; "
        f"does not: fewer. n is the seeds per cell.",
        judge=judge_depth,
        min_n=3,
        budget=budget,
        budget_note=BUDGET_NOTE,
        scale=True,
        control=rows_reversed,
        control_note="the rows reversed (each given its mirror row's accuracies)",
    ),
    verdicts.Claim(
        id="alphabet",
        claim="The input alphabet alone changes how hard a group is (our audit of the earlier T = 16 table, which "
        "read Q8 as {i, j})",
        paper="Liu et al.'s alphabets: Q8 {1, i, j, k}, A5 the identity and the 3-cycles (1 2 x), S5 {identity, "
        "shift, swap}; mechsynth's generating sets otherwise",
        rule="Per cell (group × depth, same models and budget), each seed's accuracy (all positions) as the fraction of "
        "the way from its alphabet's chance (best constant guess per position) to 100 %; a cell differs when every "
        "seed of one alphabet is above every seed of the other. matches: every cell differs, the same alphabet "
        "easier in all; partly: at least half the cells differ; does not: fewer.",
        judge=judge_alphabet,
        min_n=3,
        budget_note="a comparison of two alphabets at the same budget, not with the paper",
        scale=True,
        kind="tool",
        control=same_alphabet,
        control_note="Liu et al.'s alphabet against itself, other seeds",
    ),
    verdicts.Claim(
        id="linear_decoding",
        claim="The state becomes linearly decodable layer by layer (shortcuts compute it across layers)",
        paper="Liu et al.'s shortcut solutions compose the state over the layers",
        rule=f"In the deepest models of the table, for every row learned (mean accuracy ≥ {SOLVED:g} %; at least 2 such "
        f"rows, else inconclusive): the ridge decoding of the state (mean over seeds) after the last layer ≥ "
        f"{SOLVED:g} %, ≥ {RISE:g} points above the embedding's, never falling by more than {DIP:g} points from one "
        f"place to the next, and no single layer giving ≥ {ONE_JUMP:.0%} of the rise. matches: every learned row; "
        f"partly: at least half; does not: fewer.",
        judge=judge_decoding,
        min_n=3,
        budget=budget,
        budget_note=BUDGET_NOTE,
        scale=True,
        control=untrained_decoding,
        control_note="the untrained (step-0) models' decoding",
    ),
    verdicts.Claim(
        id="beyond_training_length",
        claim="Shortcuts are brittle beyond the training length (with rotary positions, where the test means something)",
        paper="Liu et al.: shortcut solutions fail out of distribution, e.g. on longer sequences",
        rule=f"With rotary positions, for every row learned within T (mean ≥ {SOLVED:g} %; none: inconclusive), each "
        f"seed's accuracy at the positions beyond T of sequences 2T long against its accuracy within T: brittle "
        f"when ≥ {DROP:g} points lower. matches: every row-seed brittle; partly: at least half; does not: fewer "
        f"(learned absolute positions, never trained beyond T, are shown and not judged).",
        judge=judge_length,
        min_n=3,
        budget=budget,
        budget_note=BUDGET_NOTE,
        scale=True,
        control=trained_to_2T,
        control_note="rotary models trained to 2T, read at the same positions",
    ),
]


def tables(results: Mapping[str, Any]) -> str:
    """The depth table cell by cell, **paper · ours**: ours the mean over seeds over all positions (min–max over
    seeds) / the mean at the last position; "?" a cell not legible in the seed text; a depth we did not run shows
    the paper's cell alone."""
    seeds = _seeds(results)
    lines = [
        f"Automata, accuracy (%) against depth at T = 100, each cell **paper · ours** — ours the mean over "
        f'{seeds} seeds over all positions (min–max over seeds) / the mean at the last position; "?" a cell not '
        f"legible in the seed text:",
        "",
        "| row | " + " | ".join(f"L={d}" for d in PAPER_DEPTHS) + " |",
        "|" + "---|" * (len(PAPER_DEPTHS) + 1),
    ]
    for g, row in results["table"].items():
        cells = []
        for d in PAPER_DEPTHS:
            p = PAPER_TABLE.get(g, {}).get(d)
            paper = "?" if p is None else f"{p:g}"
            x = row.get(str(d))
            cells.append(
                paper
                if x is None
                else f"{paper} · **{x['all']['mean']:.0f}** ({x['all']['min']:.0f}–{x['all']['max']:.0f}) / {x['last']['mean']:.0f}"
            )
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
