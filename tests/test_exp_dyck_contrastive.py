"""experiments/dyck_contrastive.py: the smoke run end to end, and its rules on planted results."""

from __future__ import annotations

import math

import pytest

from experiment_files import judged, loaded, smoke

NAME = "dyck_contrastive"


@pytest.fixture(scope="module")
def exp():
    yield from loaded(NAME)


@pytest.mark.smoke
def test_smoke_trains_both_groups_and_judges_them(exp, tmp_path, monkeypatch):
    out = smoke(exp, tmp_path, monkeypatch)
    assert out["runs_trained"] == 2 * exp.SIZES["smoke"]["seeds"]
    assert [cl["id"] for cl in out["claims"]] == ["regulariser_balances", "regulariser_generalises"]
    assert all(cl["verdict"] == "inconclusive" and "≥ 5 each" in cl["why"] for cl in out["claims"])  # 2 seeds
    assert (tmp_path / out["figures"][0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = out["results"]["runs"]
    assert sorted({r["group"] for r in rows}) == ["baseline", "contrastive"]
    assert all(0 <= r["long"] <= 1 and math.isfinite(r["bv"]) for r in rows)
    configs = out["config"]["runs"]
    assert configs["contrastive"]["task"]["contrastive"] == 0.3 and configs["baseline"]["task"]["contrastive"] == 0


def results(base, reg, steps=360, eval_=0.95):
    rows = [{"group": "baseline", "seed": i, "bv": b, "long": l_, "eval": eval_} for i, (b, l_) in enumerate(base)]
    rows += [{"group": "contrastive", "seed": i, "bv": b, "long": l_, "eval": eval_} for i, (b, l_) in enumerate(reg)]
    return {"runs": rows, "steps": steps, "paper_steps": 360, "long_length": 400}


def test_rules_compare_the_groups_by_rank():
    base = [(1.0 + 0.1 * i, 0.6 + 0.01 * i) for i in range(6)]
    clearly = [(0.2 + 0.01 * i, 0.9 + 0.01 * i) for i in range(6)]
    for claim in ("regulariser_balances", "regulariser_generalises"):
        assert judged(NAME, claim, results(base, clearly))["verdict"] == "matches"
        assert judged(NAME, claim, results(clearly, base))["verdict"] == "does not"
        assert judged(NAME, claim, results(base[:4], clearly[:4]))["verdict"] == "inconclusive"  # < 5 seeds each
        small = judged(NAME, claim, results(clearly, base, steps=20))
        assert small["verdict"] == "inconclusive" and "budget" in small["why"]
    overlapping = [(b - 0.05, l_ + 0.005) for b, l_ in base]  # better medians, not significantly
    assert judged(NAME, "regulariser_balances", results(base, overlapping))["verdict"] == "partly"
    nan = results(base, [(float("nan"), 0.9)] * 6)
    assert judged(NAME, "regulariser_balances", nan)["verdict"] == "inconclusive"


def test_only_runs_that_learn_the_task_count_and_the_swapped_groups_are_rejected():
    base = [(1.0 + 0.1 * i, 0.6 + 0.01 * i) for i in range(6)]
    clearly = [(0.2 + 0.01 * i, 0.9 + 0.01 * i) for i in range(6)]
    for claim in ("regulariser_balances", "regulariser_generalises"):
        out = judged(NAME, claim, results(base, clearly))
        assert out["verdict"] == "matches" and out["control"]["verdict"] == "does not"
        unlearned = judged(NAME, claim, results(base, clearly, eval_=0.63))  # never learn the task
        assert unlearned["verdict"] == "inconclusive" and "learn the task" in unlearned["why"]
