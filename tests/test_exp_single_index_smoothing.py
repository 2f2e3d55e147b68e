"""experiments/single_index_smoothing.py: the smoke run end to end, and its rules on planted results."""

from __future__ import annotations

import pytest
import torch
from experiment_files import judged, loaded, smoke

from experiments import verdicts

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
            assert all(len(g["random"]) == c["seeds"] for g in cell["grid"]) and cell["edge"] in (True, False)
    assert out["config"]["runs"]["vanilla, d=8, lr factor 2"]["task"]["seed"] == c["task_seed"] == res["task_seed"]
    assert all(x["control"]["verdict"] is not None for x in out["claims"])  # the controls' data is there
    u = exp.random_direction(torch.nn.functional.normalize(torch.ones(8), dim=0), 0, 3)
    assert abs(float(u @ torch.ones(8))) < 1e-5 and float(u.norm()) == pytest.approx(1.0)
    assert out["config"]["runs"]["smoothed, d=16, lr factor 2"]["model"]["smoothing"] == pytest.approx(2.0)
    assert (tmp_path / out["figures"][0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def rules():
    return verdicts.rules_of(NAME)


def test_fit_recovers_a_planted_power_law():
    r = rules()
    dims = [8, 16, 32, 64]
    f = r.fit(dims, {d: [3 * d**2, 4 * d**2, 5 * d**2, None, 2 * d**2] for d in dims})
    assert f["slope"] == pytest.approx(2.0) and f["r2"] == pytest.approx(1.0)
    assert f["interval"][0] <= 2.0 <= f["interval"][1]
    assert r.fit(dims, {d: [None, None, 5] for d in dims}) is None  # a median not reached
    assert r.median([1, None, None]) is None and r.median([1, 2, None]) == 2
    assert r.fit(dims, {d: [0, 0, 1] if d == 8 else [d, d, d] for d in dims})["slope"] > 0  # a start at recovery: 1


DIMS = [8, 16, 32, 64]


def grid(samples, random, best_at=1, factors=(1, 4, 16)):
    """A learning-rate grid whose entry `best_at` has `samples` and the others 10× as many."""
    return {
        "grid": [
            {"lr_factor": f, "samples": [x if i == best_at else 10 * x for x in samples], "random": random}
            for i, f in enumerate(factors)
        ]
    }


def results(vanilla_slope, smoothed_slope, seeds=6, zigzag=1, edge=False, fewer=True, chance_at=(), random=None):
    """Planted results: samples ∝ d^slope (seed i at (1 + i/10)× the median's scale; × `zigzag` at d = 16 and
    64), no seed at its random direction within the cap, except at the d of `chance_at`, whose seeds
    recover w* within 2 samples and reach the random direction as soon (`random`: every d's random samples)."""
    out = {"k_star": 3, "dims": DIMS}
    for arm, slope in (("vanilla", vanilla_slope), ("smoothed", smoothed_slope)):
        out[arm] = {}
        for d in DIMS:
            xs = [round(d**slope * (1 + i / 10) * (zigzag if d in (16, 64) else 1)) for i in range(seeds)]
            rs = [None] * seeds if random is None else random(d, seeds)
            if d in chance_at:
                xs, rs = [1 + i % 2 for i in range(seeds)], [1 + i % 3 for i in range(seeds)]
            out[arm][str(d)] = grid(xs, rs, best_at=0 if edge and d == 64 else 1)
    if not fewer:
        out["smoothed"]["64"] = grid([10**6] * seeds, [None] * seeds)
    return out


def test_rules_on_planted_results():
    assert judged(NAME, "vanilla_exponent", results(2.1, 1.5))["verdict"] == "matches"
    assert judged(NAME, "vanilla_exponent", results(2.4, 1.5))["verdict"] == "partly"
    assert judged(NAME, "vanilla_exponent", results(1.2, 1.5))["verdict"] == "does not"
    assert judged(NAME, "vanilla_exponent", results(2.0, 1.5, zigzag=30))["verdict"] == "inconclusive"  # R² low
    assert judged(NAME, "vanilla_exponent", results(2.0, 1.5, edge=True))["verdict"] == "inconclusive"
    assert judged(NAME, "smoothed_exponent", results(2.0, 1.6))["verdict"] == "matches"
    assert judged(NAME, "smoothed_exponent", results(2.0, 1.9))["verdict"] == "partly"
    assert judged(NAME, "smoothed_exponent", results(2.0, 1.5, seeds=3))["verdict"] == "inconclusive"
    assert judged(NAME, "smoothing_needs_fewer", results(2.0, 1.5))["verdict"] == "matches"  # 4096 vs 512, 6 seeds
    assert judged(NAME, "smoothing_needs_fewer", results(2.0, 1.5, fewer=False))["verdict"] == "does not"


def test_the_sample_floor_leaves_out_chance_recovery():
    # d = 8 recovers in 1–2 samples as its seeds reach a random direction: without the floor the slope would be off
    out = judged(NAME, "vanilla_exponent", results(2.0, 1.5, chance_at=(8,)))
    assert out["verdict"] == "matches" and "over d = 16, 32, 64" in out["why"] and "d = 8 (" in out["why"]
    assert "below the sample floor" in out["why"]
    # two d at chance leave two for the fit: too few
    out = judged(NAME, "smoothed_exponent", results(2.0, 1.5, chance_at=(8, 16)))
    assert out["verdict"] == "inconclusive" and "the fit needs 3" in out["why"]
    # the largest d at chance: no ordering to read there
    assert judged(NAME, "smoothing_needs_fewer", results(2.0, 1.5, chance_at=(64,)))["verdict"] == "inconclusive"
    # a seed at the random direction only after its median, or one in eight before it: above the floor
    late = results(2.0, 1.5, random=lambda d, n: [d**3] * n)
    assert judged(NAME, "vanilla_exponent", late)["verdict"] == "matches"
    one = results(2.0, 1.5, seeds=8, random=lambda d, n: [1] + [None] * (n - 1))
    assert judged(NAME, "vanilla_exponent", one)["verdict"] == "matches"


def test_negative_controls():
    r = rules()
    for cid in ("vanilla_exponent", "smoothed_exponent", "smoothing_needs_fewer"):
        out = judged(NAME, cid, results(2.0, 1.5))
        assert out["verdict"] == "matches" and out["control"]["verdict"] not in ("matches", "partly"), out["control"]
    # the random directions are never reached: their medians are not, and the rule cannot fit them
    assert judged(NAME, "vanilla_exponent", results(2.0, 1.5))["control"]["verdict"] == "inconclusive"
    # arms swapped: the smoothed arm is then the slower one
    assert judged(NAME, "smoothing_needs_fewer", results(2.0, 1.5))["control"]["verdict"] == "does not"
    # the control is the rule's own reading: samples to the random direction in place of those to w*
    c = r.random_direction(results(2.0, 1.5, random=lambda d, n: [7] * n))
    assert c["vanilla"]["8"]["grid"][1]["samples"] == [7] * 6 and c["vanilla"]["8"]["grid"][1]["random"][0] == 64
    # a run where a random direction is reached exactly as w* is: every d below the floor, nothing to fit
    same = results(2.0, 1.5)
    for arm in r.ARMS:
        for d in DIMS:
            for g in same[arm][str(d)]["grid"]:
                g["random"] = list(g["samples"])
    assert judged(NAME, "vanilla_exponent", same)["verdict"] == "inconclusive"
    # stored results of the script before the floor lack the random directions: no verdict
    old = results(2.0, 1.5)
    for d in DIMS:
        for g in old["vanilla"][str(d)]["grid"]:
            del g["random"]
    assert verdicts.judged(r.CLAIMS[0], old)["verdict"] == "inconclusive"
