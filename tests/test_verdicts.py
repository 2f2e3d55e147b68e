"""The rules framework (experiments/verdicts.py) and the README's generated Results table
(experiments/results_table.py)."""

import json
import math
from pathlib import Path

import pytest
from experiment_files import EXPERIMENTS, rules_repo

from experiments import results_table, verdicts


def claim(verdict: str, n: int, control: str = "does not", **kw):
    """A claim whose rule says `verdict` on {} and `control` on its negative control ({"control": True})."""
    return verdicts.Claim(
        "c",
        "a claim",
        "the paper",
        "the rule",
        lambda r: verdicts.Judgement(control if r.get("control") else verdict, "numbers", n),
        control=lambda r: {"control": True},
        control_note="the step-0 checkpoint",
        **kw,
    )


def test_floors_on_seeds_and_budget_both_ways():
    assert verdicts.judged(claim("matches", 5), {})["verdict"] == "matches"
    few = verdicts.judged(claim("matches", 2), {})
    assert few["verdict"] == "inconclusive" and few["rule_verdict"] == "matches" and "needs ≥ 3" in few["why"]
    # below the floor a claim that depends on scale is inconclusive whichever way it came out
    for said in ("matches", "partly", "does not"):
        small = verdicts.judged(claim(said, 5, budget=0.02), {})
        assert small["verdict"] == "inconclusive" and "0.02 of the paper's" in small["why"] and said in small["why"]
    # an existence claim keeps a match a small run shows, and still cannot say "does not"
    assert verdicts.judged(claim("matches", 5, budget=0.02, scale=False), {})["verdict"] == "matches"
    assert verdicts.judged(claim("does not", 5, budget=0.02, scale=False), {})["verdict"] == "inconclusive"
    assert verdicts.judged(claim("does not", 5, budget=0.5), {})["verdict"] == "does not"
    assert verdicts.judged(claim("matches", 5, budget=0.5), {})["verdict"] == "matches"


def test_a_match_its_control_also_passes_is_by_construction():
    out = verdicts.judged(claim("matches", 5, control="matches"), {})
    assert out["verdict"] == "by construction" and out["rule_verdict"] == "matches"
    assert out["control"] == {"note": "the step-0 checkpoint", "verdict": "matches", "why": "numbers", "n": 5}
    assert "the step-0 checkpoint" in out["why"]
    assert verdicts.judged(claim("partly", 5, control="partly"), {})["verdict"] == "by construction"
    assert verdicts.judged(claim("partly", 5, control="matches"), {})["verdict"] == "by construction"
    # a control the rule rejects (any verdict less favourable) leaves the verdict as it was, and is recorded
    kept = verdicts.judged(claim("matches", 5, control="partly"), {})
    assert kept["verdict"] == "matches" and kept["control"]["verdict"] == "partly"
    assert verdicts.judged(claim("matches", 5, control="inconclusive"), {})["verdict"] == "matches"
    # unfavourable verdicts need no control to stand
    assert verdicts.judged(claim("does not", 5, control="matches"), {})["verdict"] == "does not"


def test_a_match_without_a_control_is_not_a_match():
    bare = verdicts.Claim("c", "a", "b", "r", lambda r: verdicts.Judgement("matches", "numbers", 3))
    out = verdicts.judged(bare, {})
    assert out["verdict"] == "inconclusive" and "no negative control" in out["why"] and out["control"] is None
    # a control the results do not hold (a JSON from before the control was recorded) is no control either
    absent = verdicts.Claim(
        "c",
        "a",
        "b",
        "r",
        lambda r: verdicts.Judgement("matches", "numbers", 3),
        control=lambda r: r["untrained"],
        control_note="the untrained model",
    )
    out = verdicts.judged(absent, {})
    assert (
        out["verdict"] == "inconclusive" and out["control"]["verdict"] is None and "untrained" in out["control"]["why"]
    )
    with pytest.raises(AssertionError):
        verdicts.Claim("c", "a", "b", "r", bare.judge, control=lambda r: r)  # a control needs its note
    with pytest.raises(AssertionError):
        verdicts.Claim("c", "a", "b", "r", bare.judge, kind="other")


def test_counts_in_the_reported_order():
    judged = [{"verdict": v} for v in ("matches", "by construction", "matches", "inconclusive")]
    assert verdicts.counts(judged) == {
        "matches": 2,
        "partly": 0,
        "does not": 0,
        "inconclusive": 1,
        "by construction": 1,
    }


def test_every_claim_declares_a_control_and_its_kind():
    for path in sorted(verdicts.RULES.glob("*.py")):
        for c in verdicts.claims_of(path.stem):
            assert c.control is not None, f"{path.stem}.{c.id}: no negative control"
            assert c.kind in verdicts.KINDS


def test_results_of_another_version_are_inconclusive_not_an_error():
    c = verdicts.Claim("c", "a", "b", "r", lambda r: verdicts.Judgement("matches", str(r["missing"]), 3))
    out = verdicts.judged(c, {})
    assert out["verdict"] == "inconclusive" and "lack" in out["why"] and "missing" in out["why"]


def test_fisher_and_binomial_against_hand_computed_values():
    # 4/12 against 0/12: P = C(12,4) C(12,0) / C(24,4) each tail; two-sided = 2 × one tail here
    one_tail = math.comb(12, 4) * math.comb(12, 0) / math.comb(24, 4)
    assert verdicts.fisher(4, 12, 0, 12) == pytest.approx(2 * one_tail, rel=1e-9)
    assert verdicts.binomial_p(3, 3, 0.5) == pytest.approx(0.125)


def test_coincidence_null_knows_chance():
    steps = [[0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]] * 4
    events = [[100], [200], [300], [400]]
    exact = verdicts.coincidence_null([[100], [200], [300], [400]], events, steps, 2.0)
    assert exact["observed"] == 1.0 and exact["p"] < 0.05
    # boundaries far from every event: observed 0, p = 1
    far = verdicts.coincidence_null([[1], [1], [1], [1]], events, steps, 2.0)
    assert far["observed"] == 0.0 and far["p"] == 1.0
    # the null's mean is the share of a seed's checkpoints within 2× of its event: 64…512 hold 2 of 12 for 100
    one = verdicts.coincidence_null([[1]], [[100]], [steps[0]], 2.0, draws=4000)
    assert one["null_mean"] == pytest.approx(2 / 12, abs=0.02)


def test_numbers_in_why_lines():
    assert [verdicts.num(x) for x in (0, 3, 0.9973, 0.0421, 12.34, 1234.5, None)] == [
        "0",
        "3",
        "0.997",
        "0.042",
        "12",
        "1234",
        "not reached",
    ]
    assert verdicts.span([195, 336, 234, None], median=True) == "195–336 (median 234), not reached in 1/4"
    assert verdicts.span([0.5, 0.5]) == "0.5" and verdicts.span([None]) == "not reached"


def test_interval_covers_the_mean():
    lo, hi = verdicts.interval([1.0, 2.0, 3.0, 4.0, 5.0], lambda xs: sum(xs) / len(xs))
    assert lo < 3.0 < hi and lo >= 1.0 and hi <= 5.0


def test_provenance_says_whether_the_rules_came_before_the_runs(tmp_path, monkeypatch):
    git = rules_repo(tmp_path, "# framework\n")
    (tmp_path / "README.md").write_text("x\n")
    git("add", ".")
    git("commit", "-qm", "framework")
    early = git("rev-parse", "--short=12", "HEAD")
    (tmp_path / "experiments/rules/toy.py").write_text("CLAIMS = []\n")
    git("add", ".")
    git("commit", "-qm", "rules")
    rules = git("rev-parse", "--short=12", "HEAD")
    (tmp_path / "README.md").write_text("y\n")
    git("commit", "-qam", "later")
    late = git("rev-parse", "--short=12", "HEAD")
    monkeypatch.setattr(verdicts, "RULES", tmp_path / "experiments/rules")

    assert verdicts.provenance("toy", [late, rules])["commit"] == rules
    assert verdicts.provenance("toy", [late, rules])["before_runs"]
    assert not verdicts.provenance("toy", [late, early])["before_runs"]  # one run older than the rules
    assert not verdicts.provenance("toy", [late + "-dirty"])["before_runs"]  # a run from an uncommitted tree
    assert not verdicts.provenance("toy", [])["before_runs"]
    (tmp_path / "experiments/rules/toy.py").write_text("CLAIMS = [1]\n")  # rules edited since
    out = verdicts.provenance("toy", [late])
    assert out["changed_since"] and not out["before_runs"]


def write_assets(tmp_path: Path, outs: list[dict]) -> Path:
    assets = tmp_path / "assets"
    assets.mkdir()
    for out in outs:
        (assets / f"{out['experiment']}.json").write_text(json.dumps(out))
    return assets


def fake(name: str, **kw) -> dict:
    return {
        "experiment": name,
        "command": f"python experiments/{name}.py",
        "wall_time_s": 12.3,
        "load_average": 1.0,
        "device": "CPU: test",
        "runs_trained": 3,
        "date": "2026-01-01",
        "commit": "abc",
        "versions": {"torch": "2"},
        "runs": {"count": 3, "train_time_s": 9.0, "commits": {"abc": 3}, "seeds": [100, 101, 102]},
        "results": {},
        **kw,
    }


def test_the_table_is_what_the_jsons_say_and_check_catches_an_edit(tmp_path, monkeypatch):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "toy.py").write_text(
        "from experiments import verdicts\nCLAIMS = [verdicts.Claim('x', 'toys | learn (Toy et al. 2020)', 'paper', 'rule', "
        "lambda r: verdicts.Judgement('matches' if r['ok'] else 'does not', f\"{r['n']}/3 seeds\", 3), budget=0.5, "
        "control=lambda r: {'ok': False, 'n': 0}, control_note='untrained'),\n"
        "verdicts.Claim('y', 'a planted circuit is found', 'ours', 'rule', lambda r: verdicts.Judgement('matches', "
        "'found', 3), kind='tool', control=lambda r: r, control_note='itself')]\n"
    )
    monkeypatch.setattr(verdicts, "RULES", rules)
    judged = verdicts.judge_all("toy", {"ok": True, "n": 3})
    toy = fake("toy", results={"ok": True, "n": 3}, claims=judged, rules={"commit": "r1", "before_runs": True})
    assets = write_assets(tmp_path, [toy, fake("other_without_rules")])
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{results_table.BEGIN['results']}\nold\n{results_table.END['results']}\n\nafter\n")
    assert results_table.main(["--check", "--readme", str(readme), "--assets", str(assets)]) == 1
    assert results_table.main(["--readme", str(readme), "--assets", str(assets)]) == 0
    text = readme.read_text()
    assert "| claim | paper | ours | verdict | budget, n | link |" in text
    row = next(line for line in text.splitlines() if line.startswith("| toys"))
    # claim | paper (the citation, then the setting) | ours | verdict and its control's | budget, n | links
    assert row == (
        "| toys \\| learn (Toy et al. 2020) | Toy et al. 2020: paper | 3/3 seeds | **matches**; control: "
        "does not | 0.5 of the paper's; n = 3 | [`toy`](experiments/toy.py), [JSON](assets/toy.json) |"
    )
    # the papers' claims are counted at the top; the tool's own check is in its own table, by construction here
    assert "**The seed papers' 1 claims.** Judged by rules committed before their runs, 1: matches 1." in text
    assert (
        "**Checks of mechsynth's own methods against known answers, 1.** Judged by rules committed before their "
        "runs, 1: by construction 1."
    ) in text
    assert text.index("| a planted circuit") > text.index("Checks of mechsynth")
    assert "other_without_rules" not in text and text.endswith("\n\nafter\n")
    # the provenance is on the experiment's docs page (docs/hooks.py), no longer in the README
    assert "rules r1, committed before every run" in results_table.made_from(toy)
    assert "seeds [100, 101, 102]" in results_table.made_from(toy) and "r1" not in text
    assert results_table.main(["--check", "--readme", str(readme), "--assets", str(assets)]) == 0
    readme.write_text(text.replace("3/3 seeds", "4/3 seeds"))
    assert results_table.main(["--check", "--readme", str(readme), "--assets", str(assets)]) == 1

    # A JSON from before its rules is judged now, and says so.
    before = fake("toy", results={"ok": False, "n": 3})
    (assets / "toy.json").write_text(json.dumps(before))
    assert results_table.main(["--readme", str(readme), "--assets", str(assets)]) == 0
    assert (
        "| **does not** (post hoc); control: does not |" in readme.read_text()
        and "judged post hoc" in results_table.made_from(before)
    )


def test_the_readme_paper_column_is_cut_from_the_json_not_written():
    long = "n50 (95 % bootstrap over 6 draws; † not bracketed) at T = 16: 80 (48–115); 32: 91 (82–101); 64: 90 (65–121)"
    assert results_table.shortened(long, 70) == "n50 (95 % bootstrap over 6 draws; † not bracketed) at T = 16: 80 …"
    cut = results_table.shortened("one two (three four five six seven) eight", 20)
    assert cut == "one two …"  # never inside brackets
    assert results_table.shortened("short; enough", 120) == "short; enough"
    claim = {"claim": "Grokking (Power et al. 2022)", "paper": "x / y mod 97 (their Figure 1), half the pairs"}
    assert results_table.paper(claim) == "Power et al. 2022: x / y mod 97, half the pairs …"  # an aside left out
    cited = {"claim": "a claim", "paper": "Hoogland et al. 2024: LLC over checkpoints"}
    assert results_table.paper(cited) == "Hoogland et al. 2024: LLC over checkpoints"
    assert results_table.paper({"claim": "a claim", "paper": "their code, k = 2"}) == "their code, k = 2"


def test_the_readme_table_is_generated_from_the_committed_jsons():
    assert results_table.main(["--check"]) == 0, "run python -m experiments.results_table"


def test_every_committed_json_with_rules_is_from_a_clean_commit_and_judged():
    for out in results_table.experiments(EXPERIMENTS.parent / "assets"):
        judged, _ = results_table.claims(out)
        assert judged, out["experiment"]
        for c in judged:
            assert c["verdict"] in verdicts.REPORTED and "None" not in c["why"] and "\n" not in c["why"], (
                out["experiment"],
                c,
            )
        if "rules" in out:  # written under rules: from committed code, rules first
            assert not out["commit"].endswith("-dirty") and out["rules"]["before_runs"], out["experiment"]
