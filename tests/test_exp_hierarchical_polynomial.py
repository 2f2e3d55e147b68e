"""experiments/hierarchical_polynomial.py: the smoke run end to end (its stages chained as layerwise training says), and
its rules on planted results."""

from __future__ import annotations

import pytest
import torch

from experiment_files import judged, loaded, smoke

from mechsynth import load_run
from mechsynth.runs import io
from mechsynth.runs.rundir import ckpt_dir

NAME = "hierarchical_polynomial"


@pytest.fixture(scope="module")
def exp():
    yield from loaded(NAME)


def weights(run_dir, step) -> dict[str, torch.Tensor]:
    return io.read_tensors(ckpt_dir(run_dir, step) / "model.safetensors")


@pytest.mark.smoke
def test_smoke_chains_the_stages_and_measures_recovery_and_the_last_layer(exp, tmp_path, monkeypatch):
    out = smoke(exp, tmp_path, monkeypatch)
    res = out["results"]
    assert [c["id"] for c in out["claims"]] == ["feature_recovery_d2", "random_features_miss_g"]
    assert all(c["verdict"] == "inconclusive" for c in out["claims"])  # 2 seeds
    assert res["dims"] == [6, 8] and res["seeds"] == [0, 1]
    for d in res["dims"]:
        r = res["recovery"][str(d)]
        assert r["ns"] == [64, 256, 1024] and len(r["top"]) == len(r["n_star"]) == 2
        assert all(-0.5 < x <= 1 for row in r["top"] + r["span"] for x in row)
        assert [exp.crossing(r["ns"], row) for row in r["top"]] == r["n_star"]
        # x**2 units span every quadratic of x: the random layer already decodes p, its top component does not
        assert min(r["init_span"]) > 0.7 and max(r["init_top"]) < 0.3, r  # (the smoke probe fits 128 samples)
    runs = tmp_path / "runs" / "runs"
    zero, first = runs / "dim=8,n=1024/seed_1", runs / "stage=1,dim=8,n=1024/seed_1"
    z0, z1, f1 = weights(zero, 0), weights(zero, 1), weights(first, 1)
    assert [k for k in z0 if not torch.equal(z0[k], z1[k])] == ["b_out"]  # stage 0: the output bias only
    assert [k for k in z1 if not torch.equal(z1[k], f1[k])] == ["W_hidden"]  # stage 1: the hidden layer only
    cfg = load_run(first).config.train
    assert cfg.lr * cfg.weight_decay == pytest.approx(1) and cfg.init_from == str(zero)
    assert load_run(zero).config.train.set_seed == 1
    cell = res["features"]["8"]
    assert cell["n"] == 1024 and 0 < cell["quadratic_share"] < 1
    second = runs / "stage=2,arm=layerwise,dim=8,lr=0.1/seed_1"
    s2 = weights(second, 10)
    assert torch.equal(s2["W_hidden"], f1["W_hidden"]) and not torch.equal(s2["W_out"], f1["W_out"])
    features = weights(runs / "stage=2,arm=random_features,dim=8,lr=0.1/seed_1", 0)
    assert not torch.equal(features["W_hidden"], z0["W_hidden"])  # a default initialisation, not the small one
    assert (
        load_run(second).config.train.set_seed
        == load_run(second.parent.parent / "stage=2,arm=random_features,dim=8,lr=0.1/seed_1").config.train.set_seed
        == 10_001
    )
    assert (tmp_path / out["figures"][0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_crossing_and_fit(exp):
    ns = [64, 128, 256, 512]
    assert exp.crossing(ns, [0.1, 0.3, 0.7, 0.9]) == pytest.approx(128 * 2**0.5)  # halfway between in log n
    assert exp.crossing(ns, [0.6, 0.7, 0.8, 0.9]) == 64 and exp.crossing(ns, [0.1, 0.2, 0.3, 0.4]) is None
    dims = [8, 12, 16, 24]
    f = exp.fit(dims, {d: [3 * d**2, 4 * d**2, 5 * d**2, None, 2 * d**2] for d in dims})
    assert (
        f["slope"] == pytest.approx(2.0) and f["r2"] == pytest.approx(1.0) and f["interval"][0] <= 2 <= f["interval"][1]
    )
    assert exp.fit(dims, {d: [None, None, 5.0] for d in dims}) is None


def results(slope=2.0, seeds=5, r2=0.99, init=0.0, censored=False, ours=0.7, theirs=0.35, share=0.4, spread=0.02):
    dims = [8, 12, 16, 24]
    rec = {
        str(d): {
            "n_star": [d**slope * (1 + i / 10) for i in range(seeds)],
            "censored": [censored] * seeds,
            "median": d**slope,
            "init_top": [init] * seeds,
            "ns": [64, 128, 256],
        }
        for d in dims
    }
    cell = {
        "n": 16384,
        "quadratic_share": share,
        "layerwise": {
            "explained": [ours + spread * i for i in range(seeds)],
            "median": ours + spread * (seeds - 1) / 2,
        },
        "random_features": {
            "explained": [theirs + spread * i / 2 for i in range(seeds)],
            "median": theirs + spread * (seeds - 1) / 4,
        },
    }
    return {
        "threshold": 0.5,
        "dims": dims,
        "recovery": rec,
        "fit": {"slope": slope, "interval": [slope - 0.3, slope + 0.3], "r2": r2},
        "features": {"dims": [8, 12, 16], "16": cell},
        "budget": {"recovery": 17.0, "features": 23.0},
    }


def test_rules_on_planted_results():
    claim = "feature_recovery_d2"
    assert judged(NAME, claim, results(2.3))["verdict"] == "matches"
    assert judged(NAME, claim, results(1.2))["verdict"] == "partly"
    assert judged(NAME, claim, results(0.6))["verdict"] == "does not"
    assert judged(NAME, claim, results(2.0, r2=0.5))["verdict"] == "inconclusive"
    assert judged(NAME, claim, results(2.0, init=0.6))["verdict"] == "inconclusive"  # nothing to learn
    assert judged(NAME, claim, results(2.0, censored=True))["verdict"] == "inconclusive"
    assert judged(NAME, claim, results(2.0, seeds=3))["verdict"] == "inconclusive"
    unreached = results(2.0)
    unreached["fit"], unreached["recovery"]["24"]["median"] = None, None
    assert judged(NAME, claim, unreached)["verdict"] == "inconclusive"
    far = results(0.6)
    far["budget"]["recovery"] = 0.05  # a grid far below the theory's samples cannot say "does not"
    assert judged(NAME, claim, far)["verdict"] == "inconclusive"

    claim = "random_features_miss_g"
    assert judged(NAME, claim, results())["verdict"] == "matches"
    assert judged(NAME, claim, results(ours=0.6, theirs=0.52))["verdict"] == "partly"  # better, not by 0.15
    assert judged(NAME, claim, results(ours=0.8, theirs=0.6))["verdict"] == "partly"  # random features beyond p's part
    assert judged(NAME, claim, results(ours=0.6, theirs=0.65))["verdict"] == "does not"
    assert judged(NAME, claim, results(ours=0.45, theirs=0.3))["verdict"] == "inconclusive"  # neither beyond p's part
    assert judged(NAME, claim, results(seeds=3))["verdict"] == "inconclusive"
    no_interval = results(2.0)
    no_interval["fit"]["interval"] = None
    assert judged(NAME, "feature_recovery_d2", no_interval)["verdict"] == "inconclusive"


def test_controls_the_untrained_layer_and_the_arms_swapped():
    out = judged(NAME, "feature_recovery_d2", results(2.3))
    assert out["verdict"] == "matches" and out["control"]["verdict"] == "inconclusive"  # the initial layer: no n*
    out = judged(NAME, "random_features_miss_g", results())
    assert out["verdict"] == "matches" and out["control"]["verdict"] in ("does not", "inconclusive")
