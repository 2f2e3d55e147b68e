"""experiments/rule_logic.py: a JSON's verdicts stand while its rules judge as they did when it was made.
Reformatting, comments, docstrings, import paths and code the rules never reach leave the hash; logic changes it."""

from __future__ import annotations

from experiment_files import rules_repo

from experiments import results_table, rule_logic, verdicts

RULES = '''"""Claims of a toy experiment."""
import verdicts
from verdicts import Claim

THRESHOLD = 0.5


def rule(results):
    """Matches above the threshold."""
    return "matches" if verdicts.strict(results["x"], THRESHOLD) else "does not"
'''
VERDICTS = """def strict(x, bar):
    return x > bar


def provenance(name):
    return {"commit": None}
"""


def test_layout_comments_docstrings_and_import_paths_leave_the_logic():
    base = rule_logic.logic_hash(RULES, VERDICTS)
    reformatted = (
        RULES.replace('"""Claims of a toy experiment."""\n', "# the toy's claims\n")
        .replace("import verdicts\n", "from experiments import verdicts\n")
        .replace('    """Matches above the threshold."""\n', "")
        .replace('"matches" if', '(\n        "matches"  # above it\n        if')
        .replace('else "does not"', 'else "does not"\n    )')
    )
    assert reformatted != RULES and rule_logic.logic_hash(reformatted, VERDICTS) == base
    unreached = VERDICTS.replace('{"commit": None}', '{"commit": "abc", "logic": None}')
    assert rule_logic.logic_hash(RULES, unreached) == base


def test_any_change_of_what_the_rules_do_shows():
    base = rule_logic.logic_hash(RULES, VERDICTS)
    assert rule_logic.logic_hash(RULES.replace("0.5", "0.4"), VERDICTS) != base
    assert rule_logic.logic_hash(RULES, VERDICTS.replace("x > bar", "x >= bar")) != base  # a helper the rules call
    assert (
        rule_logic.logic_hash(
            RULES.replace("from verdicts import Claim", "from verdicts import Claim as Rule"), VERDICTS
        )
        != base
    )


def test_a_json_keeps_its_verdicts_through_a_reformat_but_not_a_new_threshold(tmp_path, monkeypatch):
    git = rules_repo(tmp_path, VERDICTS)
    rules = tmp_path / "experiments/rules/toy.py"
    rules.write_text(RULES)
    git("add", ".")
    git("commit", "-qm", "rules")
    made = git("rev-parse", "--short=12", "HEAD")
    monkeypatch.setattr(verdicts, "RULES", tmp_path / "experiments/rules")
    stored = [{"id": "toy", "verdict": "matches"}]
    out = {"experiment": "toy", "claims": stored, "results": {"x": 1}, "rules": {"commit": made, "before_runs": True}}

    rules.write_text("# reformatted\n" + RULES.replace("THRESHOLD = 0.5", "THRESHOLD = (\n    0.5\n)"))
    git("commit", "-qam", "format")
    assert results_table.claims(out) == (stored, True)

    rules.write_text(RULES.replace("0.5", "0.9"))
    git("commit", "-qam", "a new threshold")
    assert not rule_logic.unchanged_since("toy", made)
    monkeypatch.setattr(verdicts, "judge_all", lambda name, results: [{"id": "toy", "verdict": "judged now"}])
    assert results_table.claims(out) == ([{"id": "toy", "verdict": "judged now"}], False)
