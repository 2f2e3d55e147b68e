"""experiments/single_index_smoothing.py: the smoke run end to end, and its rules on planted results."""

from __future__ import annotations

import pytest

from experiment_files import judged, loaded, smoke  # (puts experiments/ on sys.path)

NAME = "single_index_smoothing"


@pytest.fixture(scope="module")
def exp():
    yield from loaded(NAME)


@pytest.mark.smoke
def test_smoke_measures_samples_to_weak_recovery_per_arm_and_d(exp, tmp_path, monkeypatch):
    out = smoke(exp, tmp_path, monkeypatch)
    res, c = out["results"], exp.SIZES["smoke"]
    assert [x["id"] for x in out["claims"]] == ["vanilla_exponent", "smoothed_exponent", "smoothing_needs_fewer"]
    assert all(x["verdict"] == "inconclusive" for x in out["claims"])  # 2 seeds
    for arm in exp.ARMS:
        for d in c["dims"]:
            cell = res[arm][str(d)]
            assert [g["lr_factor"] for g in cell["grid"]] == c["factors"] and len(cell["best"]["samples"]) == c["seeds"]
            for curve, n in zip(cell["best"]["curves"], cell["best"]["samples"]):
                assert curve[0][0] == 0 and all(-1 <= a <= 1 for _, a in curve)
                # the samples counted are the first checkpoint at weak recovery
                assert n == next((s for s, a in curve if a >= exp.WEAK), None)
    assert out["config"]["runs"]["smoothed, d=16, lr factor 2"]["model"]["smoothing"] == pytest.approx(2.0)
    assert (tmp_path / out["figures"][0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fit_recovers_a_planted_power_law(exp):
    dims = [8, 16, 32, 64]
    f = exp.fit(dims, {d: [3 * d ** 2, 4 * d ** 2, 5 * d ** 2, None, 2 * d ** 2] for d in dims})
    assert f["slope"] == pytest.approx(2.0) and f["r2"] == pytest.approx(1.0)
    assert f["interval"][0] <= 2.0 <= f["interval"][1]
    assert exp.fit(dims, {d: [None, None, 5] for d in dims}) is None  # a median not reached
    assert exp.median([1, None, None]) is None and exp.median([1, 2, None]) == 2
    assert exp.fit(dims, {d: [0, 0, 1] if d == 8 else [d, d, d] for d in dims})["slope"] > 0  # a start at recovery: 1


def cell(median, samples, edge=False, factor=4):
    return {"best": {"lr_factor": factor, "median": median, "samples": samples}, "edge": edge}


def results(vanilla_slope, smoothed_slope, seeds=6, r2=0.99, edge=False, fewer=True):
    dims = [8, 16, 32, 64]
    out = {"k_star": 3, "dims": dims, "fits": {}}
    for arm, slope in (("vanilla", vanilla_slope), ("smoothed", smoothed_slope)):
        out[arm] = {str(d): cell(d ** slope, [d ** slope * (1 + i / 10) for i in range(seeds)], edge=edge and d == 64)
                    for d in dims}
        out["fits"][arm] = {"slope": slope, "interval": [slope - 0.2, slope + 0.2], "r2": r2}
    if not fewer:
        out["smoothed"]["64"] = cell(10 ** 6, [10 ** 6] * seeds)
    return out


def test_rules_on_planted_results():
    assert judged(NAME, "vanilla_exponent", results(2.1, 1.5))["verdict"] == "matches"
    assert judged(NAME, "vanilla_exponent", results(2.4, 1.5))["verdict"] == "partly"
    assert judged(NAME, "vanilla_exponent", results(1.2, 1.5))["verdict"] == "does not"
    assert judged(NAME, "vanilla_exponent", results(2.0, 1.5, r2=0.5))["verdict"] == "inconclusive"
    assert judged(NAME, "vanilla_exponent", results(2.0, 1.5, edge=True))["verdict"] == "inconclusive"
    assert judged(NAME, "smoothed_exponent", results(2.0, 1.6))["verdict"] == "matches"
    assert judged(NAME, "smoothed_exponent", results(2.0, 2.0))["verdict"] == "partly"
    assert judged(NAME, "smoothed_exponent", results(2.0, 1.5, seeds=3))["verdict"] == "inconclusive"
    assert judged(NAME, "smoothing_needs_fewer", results(2.0, 1.5))["verdict"] == "matches"  # 4096 vs 512, 6 seeds
    assert judged(NAME, "smoothing_needs_fewer", results(2.0, 1.5, fewer=False))["verdict"] == "does not"
