"""experiments/factual_sequential.py: the smoke run end to end, its rule on planted results, and its
measurements (the learned steps, the dwell in a loss band) against slow references."""

from __future__ import annotations

import math

import pytest
from experiment_files import loaded, smoke

from experiments import verdicts

NAME = "factual_sequential"


@pytest.fixture(scope="module")
def exp():
    yield from loaded(NAME)


@pytest.fixture(scope="module")
def claim():
    return verdicts.rules_of(NAME).CLAIMS[0]


# ---- (a) the smoke run ----------------------------------------------------------------------------------


@pytest.mark.smoke
def test_smoke_writes_results_claims_and_figures(exp, tmp_path, monkeypatch):
    out = smoke(exp, tmp_path, monkeypatch)
    c = exp.SIZES["smoke"]
    assert out["experiment"] == NAME and out["size"] == "smoke" and out["runs_trained"] == c["seeds"]
    assert [cl["id"] for cl in out["claims"]] == ["sequential_learning"]
    for cl in out["claims"]:
        assert cl["verdict"] in verdicts.REPORTED and "results lack" not in cl["why"] and "None" not in cl["why"], cl
    assert out["figures"] == [f"{NAME}.png"]
    data = (tmp_path / out["figures"][0]).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    res = out["results"]
    assert res["log_D"] == pytest.approx(math.log(c["answers"]), rel=1e-4)
    assert [r["seed"] for r in res["seeds"]] == list(range(c["seeds"]))
    for r in res["seeds"]:
        n = len(r["steps"])
        assert r["steps"][0] == 0 and n >= 5 and all(len(r[k]) == n for k in ("loss", "type_acc", "acc", "fact_loss"))
        assert all(t >= a - 1e-9 for t, a in zip(r["type_acc"], r["acc"]))  # the fact is of its type
        # the steps recomputed from the probe's series: the first checkpoint from which it stays ≥ 0.99
        for key, step in (("type_acc", r["type_step"]), ("acc", r["fact_step"])):
            tail = [s for i, s in enumerate(r["steps"]) if all(v >= 0.99 for v in r[key][i:])]
            assert step == (tail[0] if tail else None)
        assert 0 <= r["control_dwell"] and 0 <= r["plateau_dwell"] <= math.log(r["steps"][-1])
        # at init the loss is about log(R·D): nowhere near the plateau band
        assert r["loss"][0] > 1.1 * res["log_D"]


# ---- (b) the rule on planted results ----------------------------------------------------------------------


STEPS = [0, 1, 3, 10, 20, 30, 50, 100, 200, 300, 600, 700, 900, 1000, 2000, 3000]


def seed_row(seed, type_step, fact_step, plateau=3.6, control=1.3):
    """Planted numbers, with series that agree with them (the negative control reads the series)."""
    log_d = math.log(8)
    late = fact_step if fact_step is not None else math.inf
    return {
        "seed": seed,
        "type_step": type_step,
        "fact_step": fact_step,
        "plateau_dwell": math.log(plateau),
        "control_dwell": math.log(control),
        "steps": STEPS,
        "type_acc": [1.0 if s >= type_step else 0.5 for s in STEPS],
        "acc": [1.0 if s >= late else 0.2 for s in STEPS],
        "loss": [0.01 if s >= late else log_d if s >= type_step else math.log(16) for s in STEPS],
    }


def test_rule_on_planted_results(claim):
    log_d = math.log(8)
    seq = {"log_D": log_d, "seeds": [seed_row(i, 20, 1000) for i in range(5)]}
    j = verdicts.judged(claim, seq)
    assert j["verdict"] == "matches" and j["why"].startswith("5/5 seeds sequential") and j["n"] == 5, j
    # its negative control, the type and fact curves swapped: the "type" now comes last, which the rule rejects
    assert j["control"]["verdict"] == "does not" and not claim.scale, j["control"]
    # 2 of 3 is enough; the third, learning both together, is named
    two = {"log_D": log_d, "seeds": [seed_row(0, 20, 1000), seed_row(1, 30, 900), seed_row(2, 700, 900)]}
    j = verdicts.judged(claim, two)
    assert j["verdict"] == "matches" and "seed 2: type at 700, fact at 900 (together)" in j["why"], j
    # type first, but the loss does not linger at log D longer than it takes to cross the control band
    smooth = {"log_D": log_d, "seeds": [seed_row(i, 20, 1000, plateau=1.5, control=1.4) for i in range(4)]}
    j = verdicts.judged(claim, smooth)
    assert j["verdict"] == "partly" and "no plateau" in j["why"], j
    # long enough but no longer than the control band: no plateau either
    assert (
        verdicts.judged(claim, {"log_D": log_d, "seeds": [seed_row(i, 20, 1000, 2.5, 2.4) for i in range(4)]})[
            "verdict"
        ]
        == "partly"
    )
    together = {"log_D": log_d, "seeds": [seed_row(i, 600, 1000) for i in range(4)]}
    assert verdicts.judged(claim, together)["verdict"] == "does not"
    # too few seeds learned the facts: inconclusive, and those that did not are said
    few = {"log_D": log_d, "seeds": [seed_row(0, 20, 1000), seed_row(1, 20, 1000), seed_row(2, 20, None)]}
    j = verdicts.judged(claim, few)
    assert j["verdict"] == "inconclusive" and "1/3 seeds did not learn the facts" in j["why"], j
    j = verdicts.judged(claim, {"log_D": log_d, "seeds": [seed_row(i, 20, None) for i in range(3)]})
    assert j["verdict"] == "inconclusive" and "no seed learned the facts" in j["why"]


# ---- (c) the measurements against slow references ----------------------------------------------------------


def slow_dwell(steps, loss, lo, hi, start, stop, n=200_000):
    """The same dwell by brute force: n points evenly in ln step from start to stop, the loss interpolated
    linearly in ln step, the share of points in the band times the length."""
    xs = [math.log(s) for s in steps]
    a, b = math.log(start), math.log(stop)
    inside = 0
    for i in range(n):
        x = a + (b - a) * (i + 0.5) / n
        k = max(j for j in range(len(xs) - 1) if xs[j] <= x)
        y = loss[k] + (loss[k + 1] - loss[k]) * (x - xs[k]) / (xs[k + 1] - xs[k])
        inside += lo <= y <= hi
    return inside / n * (b - a)


def test_dwell_against_brute_force(exp):
    steps = [0, 1, 10, 30, 100, 300, 1000, 3000]
    loss = [2.8, 2.77, 2.3, 2.05, 2.0, 1.6, 0.6, 0.01]
    log_d = math.log(8)
    for (lo, hi), (start, stop) in [
        ((0.9 * log_d, 1.1 * log_d), (10, 1000)),
        ((0.4 * log_d, 0.6 * log_d), (10, 1000)),
        ((0.9 * log_d, 1.1 * log_d), (20, 3000)),
        ((1.0, 3.0), (1, 3000)),
    ]:
        got = exp.dwell(steps, loss, lo, hi, start, stop)
        assert got == pytest.approx(slow_dwell(steps[1:], loss[1:], lo, hi, start, stop), abs=2e-4)
    # a flat stretch inside the band counts whole; step 0 is left out
    assert exp.dwell([0, 10, 100], [5.0, 2.0, 2.0], 1.9, 2.1) == pytest.approx(math.log(10))


def test_rules_recompute_the_scripts_measurements(exp):
    """The negative control recomputes the steps and dwells with the rules' copies of the script's functions."""
    rules = verdicts.rules_of(NAME)
    steps = [0, 1, 10, 30, 100, 300, 1000, 3000]
    loss = [2.8, 2.77, 2.3, 2.05, 2.0, 1.6, 0.6, 0.01]
    for lo, hi, start, stop in [(1.8, 2.3, 10, 1000), (0.8, 1.3, 1, 3000)]:
        assert rules._dwell(steps, loss, lo, hi, start, stop) == pytest.approx(
            exp.dwell(steps, loss, lo, hi, start, stop)
        )
    for scores in ([0.1, 0.995, 0.98, 0.99, 1.0, 1.0, 1.0, 1.0], [0.1, 0.5, 0.9, 0.99, 1.0, 0.95, 1.0, 0.9]):
        assert rules._learned(steps, scores) == exp.learned_step(steps, scores)


def test_learned_step_on_hand_made_series(exp):
    steps = [0, 10, 20, 40, 80, 160]
    assert exp.learned_step(steps, [0.1, 0.995, 0.98, 0.99, 1.0, 1.0]) == 40  # the dip at 20 resets it
    assert exp.learned_step(steps, [0.1, 0.5, 0.9, 0.99, 1.0, 0.95]) is None
