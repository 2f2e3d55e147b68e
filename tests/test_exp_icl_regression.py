"""experiments/icl_regression.py: the smoke run end to end, and its rules on planted results."""

from __future__ import annotations

import pytest
from experiment_files import judged, loaded, smoke

from experiments import verdicts

NAME = "icl_regression"
CLAIMS = ["least_squares", "task_diversity_threshold", "llc_stages"]


@pytest.fixture(scope="module")
def exp():
    yield from loaded(NAME)


@pytest.mark.smoke
def test_smoke_writes_results_claims_and_figures(exp, tmp_path, monkeypatch):
    out = smoke(exp, tmp_path, monkeypatch)
    c = exp.SIZES["smoke"]
    assert out["runs_trained"] == c["seeds"] * (2 + len(c["diversity"]["M"]))
    assert [cl["id"] for cl in out["claims"]] == CLAIMS
    for cl in out["claims"]:
        assert cl["verdict"] in verdicts.REPORTED and "results lack" not in cl["why"] and "None" not in cl["why"], cl
    data = (tmp_path / out["figures"][0]).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    res = out["results"]
    k = 2 * c["garg"]["d"] + 1
    for r in res["garg"]:
        assert len(r["error"]) == len(r["least_squares_error"]) == k
        assert r["least_squares_error"][-1] < 1e-6  # noiseless: from d examples on least squares is exact
        assert {"least_squares", "averaging", "nearest_neighbours"} <= set(r["to"])
    assert {r["M"] for r in res["diversity"]["rows"]} == set(c["diversity"]["M"])
    for r in res["stages"]:
        assert len(r["steps"]) == len(r["error_last"]) and r["llc"]["steps"]


# ---- the rules on planted results ------------------------------------------------------------------------


def garg(i, nearest="least_squares", gap=0.01):
    to = {"least_squares": 0.5, "ridge": 0.5, "averaging": 0.8, "nearest_neighbours": 0.9}
    to[nearest] = 0.01
    init = {"to": {"least_squares": 0.9, "ridge": 0.9, "averaging": 0.5, "nearest_neighbours": 0.9}, "gap": 0.8}
    return {"seed": i, "to": to, "gap": gap, "init": init}


def results(g=None, shares=None, stage_rows=None, budget=1.0, apart=0.5):
    rows = []
    for M, share in (shares or {1: 0.0, 16: 0.5, 256: 1.0}).items():
        for s in range(4):
            near_ridge = s < round(share * 4)
            rows.append({"M": M, "seed": s, "to_ridge": 0.1 if near_ridge else 0.3, "to_dmmse": 0.2, "apart": apart})
    return {
        "d": 5,
        "garg": g or [garg(i) for i in range(3)],
        "diversity": {"M": sorted({r["M"] for r in rows}), "rows": rows},
        "stages": stage_rows or [],
        "budget": {"garg": budget, "diversity": budget, "stages": budget},
    }


def test_least_squares_needs_the_nearest_and_the_error():
    assert judged(NAME, "least_squares", results())["verdict"] == "matches"
    assert judged(NAME, "least_squares", results([garg(i, gap=0.3) for i in range(3)]))["verdict"] == "partly"
    j = judged(NAME, "least_squares", results([garg(i, "averaging") for i in range(3)]))
    assert j["verdict"] == "does not" and "averaging" in j["why"]
    small = judged(NAME, "least_squares", results([garg(i, "averaging") for i in range(3)], budget=1e-4))
    assert small["verdict"] == "inconclusive" and "budget" in small["why"]


def test_diversity_threshold_reads_both_ends_and_monotonicity():
    assert judged(NAME, "task_diversity_threshold", results())["verdict"] == "matches"
    bumpy = {1: 0.0, 16: 0.75, 64: 0.5, 256: 1.0}
    assert judged(NAME, "task_diversity_threshold", results(shares=bumpy))["verdict"] == "partly"
    flat = {1: 0.0, 16: 0.0, 256: 0.25}
    assert judged(NAME, "task_diversity_threshold", results(shares=flat))["verdict"] == "does not"


def test_diversity_needs_ridge_and_dmmse_told_apart_and_its_control():
    j = judged(NAME, "task_diversity_threshold", results())
    assert j["verdict"] == "matches" and j["control"]["verdict"] == "does not"  # M reversed
    # ridge and dMMSE closer to each other than the model is to either: nobody follows either
    close = judged(NAME, "task_diversity_threshold", results(apart=0.05))
    assert close["verdict"] == "does not" and "0/0/4" in close["why"]
    two = {
        "d": 5,
        "diversity": {"M": [1, 16, 256], "rows": [r for r in results()["diversity"]["rows"] if r["seed"] < 2]},
        "budget": {"diversity": 1.0},
    }
    assert judged(NAME, "task_diversity_threshold", two)["verdict"] == "inconclusive"  # 2 seeds per M < 3
    small = judged(NAME, "task_diversity_threshold", results(budget=0.004))
    assert small["verdict"] == "inconclusive" and "budget" in small["why"]


def test_least_squares_control_is_the_untrained_checkpoint():
    j = judged(NAME, "least_squares", results())
    assert j["verdict"] == "matches" and j["control"]["verdict"] == "does not"
    trained_like_init = [{**garg(i), "init": {"to": garg(i)["to"], "gap": 0.01}} for i in range(3)]
    assert judged(NAME, "least_squares", results(trained_like_init))["verdict"] == "by construction"


def stage(i, bounds, events):
    steps = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
    return {
        "seed": i,
        "llc_boundaries": {"change_points": bounds, "turns": bounds},
        "boundary_candidates": {"change_points": steps, "turns": steps},
        "events": events,
    }


def test_llc_stages_against_chance():
    hit = [stage(i, [16, 512], {"icl_onset": 16, "ls_nearest": 500, "loss_drop": 17}) for i in range(4)]
    assert judged(NAME, "llc_stages", results(stage_rows=hit))["verdict"] == "matches"
    miss = [stage(i, [2, 2048], {"icl_onset": 64, "ls_nearest": 128, "loss_drop": 200}) for i in range(4)]
    assert judged(NAME, "llc_stages", results(stage_rows=miss))["verdict"] == "does not"


def test_llc_stages_control_mirrors_the_boundaries():
    hit = [stage(i, [16, 512], {"icl_onset": 16, "ls_nearest": 500, "loss_drop": 17}) for i in range(4)]
    j = judged(NAME, "llc_stages", results(stage_rows=hit))
    assert j["verdict"] == "matches" and j["control"]["verdict"] != "matches"
