"""experiments/full_cost.py: the runs it costs are the runs the script trains, and it trains none of them."""

from __future__ import annotations

import json

import pytest
from experiment_files import EXPERIMENTS, script, smoke

from experiments import full_cost, harness


@pytest.mark.smoke
def test_the_costed_runs_are_the_runs_the_script_trains(tmp_path, monkeypatch):
    plan = full_cost.first_round("dyck_balance", "cpu", size="smoke")
    assert harness.PLAN_ONLY is False  # given back, so a script run afterwards trains
    trained = smoke(script("dyck_balance"), tmp_path / "real", monkeypatch)
    assert len(plan.jobs) == trained["runs_trained"] > 0
    assert sorted(j.dir for j in plan.jobs) == sorted(
        str(p.relative_to(tmp_path / "real" / "runs")) for p in (tmp_path / "real" / "runs" / "runs").glob("*/seed_*")
    )

    assert (
        full_cost.main(
            [
                "--size",
                "smoke",
                "--only",
                "dyck_balance",
                "--steps",
                "2",
                "--warmup",
                "1",
                "--out",
                str(tmp_path / "cost"),
            ]
        )
        == 0
    )
    entry = json.loads((tmp_path / "cost" / "full_cost.json").read_text())["cpu"]
    costed = entry["experiments"]["dyck_balance"]
    assert costed["runs"] == len(plan.jobs) and costed["model_steps"] == sum(
        j.config["train"]["steps"] * j.config["train"].get("seeds", 1) for j in plan.jobs
    )
    assert 0 < costed["longest_run_hours"] <= costed["hours"] and entry["size"] == "smoke"
    assert costed["configs_timed"] == costed["configs"] > 0 and costed["peak_gib"] > 0
    assert not list((tmp_path / "cost").glob("runs*"))  # planned, not trained


def test_every_script_with_a_full_size_is_costed():
    names = full_cost.with_full_size()
    assert "grokking" in names and "dyck_balance" in names
    assert all((EXPERIMENTS / "rules" / f"{n}.py").exists() for n in names)
    with pytest.raises(SystemExit):
        full_cost.main(["--only", "no_such_experiment"])


def test_a_run_too_large_for_the_machine_is_reported_not_run(monkeypatch):
    monkeypatch.setattr(full_cost, "memory_limit", lambda: 1)
    monkeypatch.setattr(full_cost, "pace", lambda *a: pytest.fail("a run over the limit was started"))
    costed = full_cost.measure("dyck_balance", "cpu", 1, 1, size="smoke", log=lambda line: None)
    assert costed["hours"] is None and "needs more memory than" in costed["does_not_fit"]
    assert costed["configs_timed"] == 0 and costed["peak_gib"] > 0
