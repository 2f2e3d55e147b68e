"""experiments/depth_risk.py: the smoke run end to end, and its rule on planted curves."""

from __future__ import annotations

import pytest

from experiment_files import judged, loaded, smoke

NAME = "depth_risk"


@pytest.fixture(scope="module")
def exp():
    yield from loaded(NAME)


@pytest.mark.smoke
def test_smoke_trains_every_width_and_depth_on_one_fixed_set(exp, tmp_path, monkeypatch):
    out = smoke(exp, tmp_path, monkeypatch)
    res, c = out["results"], exp.SIZES["smoke"]
    assert [x["id"] for x in out["claims"]] == ["u_shaped_in_depth"] and out["claims"][0]["verdict"] == "inconclusive"
    for w in c["widths"]:
        for d in c["depths"]:
            cell = res[str(w)][str(d)]
            assert len(cell["risk"]) == len(cell["fit"]) == c["seeds"] and all(r > 0 for r in cell["risk"])
            # the last point of each curve is the number the rule reads
            assert [cv["risk"][-1][1] for cv in cell["curves"]] == cell["risk"]
            assert cell["params"] == w * c["d"] + w + (d - 1) * (w + 1) * w + w + 1
    runs = out["config"]["runs"]
    assert {r["train"]["n_train"] for r in runs.values()} == {c["n_train"]} and runs["width 16, depth 3"]["model"][
        "depth"
    ] == 3
    assert (tmp_path / out["figures"][0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def results(curves, fit=1e-3, seeds=3, depths=(1, 2, 4, 8)):
    depths = list(depths)
    return {
        "widths": list(curves),
        "depths": depths,
        **{
            str(w): {str(d): {"risk": [r] * seeds, "fit": [fit] * seeds} for d, r in zip(depths, rs)}
            for w, rs in curves.items()
        },
    }


@pytest.mark.parametrize(
    "curves, fit, seeds, verdict",
    [
        ({64: [0.5, 0.3, 0.4, 0.6], 256: [0.4, 0.2, 0.3, 0.5]}, 1e-3, 3, "matches"),  # U at both widths
        ({64: [0.5, 0.3, 0.4, 0.6], 256: [0.2, 0.3, 0.4, 0.5]}, 1e-3, 3, "partly"),  # U at one, rising at the other
        ({64: [0.2, 0.3, 0.4, 0.6], 256: [0.6, 0.5, 0.4, 0.3]}, 1e-3, 3, "partly"),  # rising from the start at one
        ({64: [0.6, 0.5, 0.4, 0.3], 256: [0.5, 0.5, 0.5, 0.52]}, 1e-3, 3, "does not"),  # falling; flat within 10 %
        ({64: [0.5, 0.3, 0.4, 0.6], 256: [0.4, 0.2, 0.3, 0.5]}, 0.2, 3, "inconclusive"),  # not fitted: not the regime
        ({64: [0.5, 0.3, 0.4, 0.6], 256: [0.4, 0.2, 0.3, 0.5]}, 1e-3, 2, "inconclusive"),  # too few seeds
    ],
)
def test_rule_on_planted_curves(curves, fit, seeds, verdict):
    out = judged(NAME, "u_shaped_in_depth", results(curves, fit, seeds))
    assert (out["verdict"] if verdict == "inconclusive" else out["rule_verdict"]) == verdict


def test_judged_per_seed_not_on_the_median():
    """One U-shaped seed of three, the others lowest at the deepest: the median may be U-shaped, the seeds are not."""
    depths = [1, 2, 4, 8]
    seeds = {32: [[0.45, 0.42, 0.39, 0.37], [0.60, 0.40, 0.29, 0.22], [0.42, 0.32, 0.38, 0.36]]}
    res = {
        "widths": [32],
        "depths": depths,
        "32": {str(d): {"risk": [s[i] for s in seeds[32]], "fit": [1e-3] * 3} for i, d in enumerate(depths)},
    }
    out = judged(NAME, "u_shaped_in_depth", res)
    assert out["rule_verdict"] == "does not" and "U-shaped in 1/3 seeds" in out["why"]


def test_a_planted_u_matches_and_its_permuted_control_does_not():
    depths = (1, 2, 3, 4, 6, 8)
    u = [0.6, 0.4, 0.3, 0.31, 0.45, 0.7]
    out = judged(NAME, "u_shaped_in_depth", results({32: u, 128: u}, depths=depths))
    assert out["verdict"] == "matches" and out["control"]["verdict"] != "matches", out


def test_noise_the_permutation_keeps_is_by_construction():
    """Curves that rise and fall at random: a permutation of them rises as often, so a 'partly' is by construction."""
    depths = (1, 2, 3, 4, 6, 8)
    res = {
        "widths": [32],
        "depths": list(depths),
        "32": {str(d): {"risk": [r] * 3, "fit": [1e-3] * 3} for d, r in zip(depths, [0.3, 0.6, 0.3, 0.6, 0.3, 0.6])},
    }
    out = judged(NAME, "u_shaped_in_depth", res)
    assert out["rule_verdict"] in ("matches", "partly") and out["verdict"] in ("by construction", "matches"), out
