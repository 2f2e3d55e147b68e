"""experiments/shortcut_length.py: the smoke run end to end, its rules on planted results, and its
measurements (read positions, distances to the last write, chance) against slow hand-written references."""

from __future__ import annotations

import random

import pytest
import torch
from experiment_files import claim, loaded, smoke

from experiments import verdicts
from mechsynth import tasks


@pytest.fixture(scope="module")
def exp():
    yield from loaded("shortcut_length")


@pytest.fixture(scope="module")
def rules():
    return verdicts.rules_of("shortcut_length")


# ---- (a) the smoke run ----------------------------------------------------------------------------------


@pytest.mark.smoke
def test_smoke_writes_results_claims_and_figures(exp, tmp_path, monkeypatch):
    out = smoke(exp, tmp_path, monkeypatch)
    assert out["experiment"] == "shortcut_length" and out["size"] == "smoke" and out["runs_trained"] == 8
    assert [c["id"] for c in out["claims"]] == ["car_shortcut", "car_beyond_T", "flipflop_ood"]
    for c in out["claims"]:
        assert c["verdict"] in verdicts.REPORTED and "results lack" not in c["why"] and "None" not in c["why"], c
    assert set(out["figures"]) == {"shortcut_length_car.png", "shortcut_length_flipflop.png"}
    for fig in out["figures"]:
        data = (tmp_path / fig).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, fig
    r = out["results"]
    car, ff = r["car"], r["flipflop"]
    T = car["T"]
    for positional in ("standard", "rotary"):
        rows = car["runs"][positional]
        assert [row["seed"] for row in rows] == [0, 1]
        for row in rows:
            assert len(row["acc_by_position"]) == 2 * T and 0 <= row["within_T"] <= 100 and 0 <= row["beyond_T"] <= 100
            assert abs(row["within_T"] - sum(row["acc_by_position"][:T]) / T) < 0.05
            assert set(row["decoding"]["within_T"]) == {"state", "direction", "position"}
    assert len(car["chance"]["by_position"]) == 2 * T and car["chance"]["by_position"][0] == pytest.approx(50, abs=5)
    assert ff["levels"] == ["0.8", "0.9", "0.98"] and set(ff["chance"]) == {"in_distribution", "0.8", "0.9", "0.98"}
    for row in ff["seeds"]:
        for counts in [row["in_distribution"], *row["ood"].values()]:
            assert 0 <= counts["errors"] <= counts["reads"] > 0
            assert sum(counts["by_distance"]["reads"]) == counts["reads"] and counts["by_distance"]["reads"][0] == 0
            assert sum(counts["by_distance"]["errors"]) == counts["errors"]


# ---- (b) the rules on planted results ----------------------------------------------------------------------


def car_results(standard, rotary=None, chance=(20.0, 12.5), T=16, trained_2T=None, init=25.0):
    """`standard` / `rotary` / `trained_2T` (the control: positions trained to 2T): (within_T, beyond_T) per seed."""

    def rows(pairs):
        return [
            {"seed": 100 + i, "within_T": w, "beyond_T": b, "last_T": w, "init_within_T": init}
            for i, (w, b) in enumerate(pairs)
        ]

    return {
        "car": {
            "T": T,
            "n_layers": 2,
            "chance": {"within_T": chance[0], "beyond_T": chance[1]},
            "runs": {
                "standard": rows(standard),
                "rotary": rows(rotary or [(60.0, 30.0)] * 3),
                "standard_2T": rows(trained_2T or [(99.9, 99.0)] * len(standard)),
            },
        }
    }


def counts(reads, errors, at=1, T=32):
    """Reads and errors, all at distance `at` to the last write."""
    by = {"reads": [0] * T, "errors": [0] * T}
    by["reads"][at], by["errors"][at] = reads, errors
    return {"reads": reads, "errors": errors, "by_distance": by}


def ff_results(pairs, reads=(40_000, 100_000), far=None):
    """`pairs`: (in-distribution errors, errors at ignore 0.9) per seed; `far`: the OOD reads at a distance never
    seen in distribution. The control set: in distribution again."""
    at = 20 if far else 1
    seeds = [
        {
            "seed": 100 + i,
            "in_distribution": counts(reads[0], a),
            "control": counts(reads[0], a),
            "ood": {q: counts(reads[1], b, at) for q in ("0.8", "0.9", "0.98")},
        }
        for i, (a, b) in enumerate(pairs)
    ]
    return {"flipflop": {"seeds": seeds, "chance": {"in_distribution": 50.0, "0.8": 50.0, "0.9": 50.0, "0.98": 50.0}}}


def unfloored(c):
    """The claim at the paper's budget (its own is below the floor): what the rule and its control say."""
    import dataclasses

    return dataclasses.replace(c, budget=1.0)


def test_rule_car_shortcut(rules):
    c = claim(rules, "car_shortcut")
    got = verdicts.judged(c, car_results([(99.8, 12.0)] * 5))
    assert got["verdict"] == "matches" and "5/5 seeds" in got["why"]
    got = verdicts.judged(c, car_results([(99.8, 12.0)] * 2 + [(60.0, 12.0)] * 3))
    assert got["rule_verdict"] == "does not" and got["verdict"] == "inconclusive"  # the budget floor (0.034)
    assert verdicts.judged(c, car_results([(99.8, 12.0)] * 3 + [(97.0, 12.0)] * 2))["rule_verdict"] == "partly"
    few = verdicts.judged(c, car_results([(99.8, 12.0)] * 2))
    assert few["rule_verdict"] == "matches" and few["verdict"] == "inconclusive" and "needs ≥ 3" in few["why"]


def test_rule_car_beyond_T(rules):
    c = claim(rules, "car_beyond_T")
    assert (
        verdicts.judged(unfloored(c), car_results([(99.9, 13.0), (99.5, 15.0), (100.0, 11.0)]))["verdict"] == "matches"
    )
    # dropped 40+ points but far above chance: partly; kept its accuracy: does not (both floored by the budget)
    got = verdicts.judged(c, car_results([(99.9, 55.0)] * 3))
    assert got["rule_verdict"] == "partly" and got["verdict"] == "inconclusive"
    assert verdicts.judged(c, car_results([(99.9, 95.0)] * 3))["rule_verdict"] == "does not"
    # only the runs learned within T are tested: two of them are too few
    few = verdicts.judged(c, car_results([(99.9, 13.0), (99.9, 13.0), (80.0, 13.0)]))
    assert few["rule_verdict"] == "matches" and few["verdict"] == "inconclusive" and few["n"] == 2
    assert verdicts.judged(c, car_results([(80.0, 13.0)] * 3))["verdict"] == "inconclusive"


def test_rule_flipflop(rules):
    c = claim(rules, "flipflop_ood")
    got = verdicts.judged(unfloored(c), ff_results([(0, 8000), (1, 7000), (2, 16000), (0, 9000), (0, 9500)]))
    assert got["verdict"] == "matches" and "5/5" in got["why"] and "p = 0.031" in got["why"]
    # as robust out of distribution as in it: does not (floored by the budget to inconclusive)
    got = verdicts.judged(c, ff_results([(0, 0), (1, 2), (0, 1), (2, 3), (0, 0)]))
    assert got["rule_verdict"] == "does not" and got["verdict"] == "inconclusive"
    # significant in 4 of 5 seeds: the sign test fails, partly
    assert (
        verdicts.judged(c, ff_results([(0, 8000), (0, 8000), (0, 8000), (0, 8000), (0, 1)]))["rule_verdict"] == "partly"
    )
    # reads not learned in distribution (5 % errors): OOD worse still, but only partly
    assert verdicts.judged(c, ff_results([(2000, 20000)] * 5))["rule_verdict"] == "partly"
    few = verdicts.judged(c, ff_results([(0, 8000)] * 3))
    assert few["verdict"] == "inconclusive" and "needs ≥ 5" in few["why"]


def test_controls_of_the_shortcut_claims(rules):
    c = claim(rules, "car_shortcut")  # an existence claim: its "matches" stands below the budget floor
    got = verdicts.judged(c, car_results([(99.8, 12.0)] * 5))
    assert got["verdict"] == "matches" and got["control"]["verdict"] == "does not"  # the untrained checkpoint
    assert verdicts.judged(c, car_results([(99.8, 12.0)] * 5, init=99.9))["verdict"] == "by construction"
    c = unfloored(claim(rules, "car_beyond_T"))
    got = verdicts.judged(c, car_results([(99.9, 13.0)] * 3))
    assert got["verdict"] == "matches" and got["control"]["verdict"] == "does not"  # positions trained to 2T
    # a model trained to 2T that still fails beyond T: the failure is not the training length's
    assert (
        verdicts.judged(c, car_results([(99.9, 13.0)] * 3, trained_2T=[(99.9, 13.0)] * 3))["verdict"]
        == "by construction"
    )
    assert verdicts.judged(claim(rules, "car_beyond_T"), car_results([(99.9, 13.0)] * 3))["verdict"] == "inconclusive"
    c = unfloored(claim(rules, "flipflop_ood"))
    got = verdicts.judged(c, ff_results([(0, 8000), (1, 7000), (2, 16000), (0, 9000), (0, 9500)]))
    assert got["verdict"] == "matches" and got["control"]["verdict"] == "does not"  # another in-distribution set
    # errors only at distances to the last write never seen in distribution: length extrapolation, not counted
    far = verdicts.judged(c, ff_results([(0, 8000)] * 5, far=True))
    assert far["rule_verdict"] == "does not"


def test_rules_primary_level_is_one_the_script_measures(exp, rules):
    assert rules.PRIMARY in [str(q) for q in exp.LEVELS]


# ---- (c) the measurements against slow references -------------------------------------------------------------


def flipflop_reference(symbols: list[str]):
    """A flip-flop read by hand: the state after each symbol, whether each position is a read, and the
    distance back to the last write before it (0: none)."""
    state, last, out = 0, None, []
    for t, s in enumerate(symbols):
        read = s == "ignore" and last is not None
        out.append((state if s == "ignore" else int(s[-1]), read, t - last if last is not None else 0))
        if s != "ignore":
            state, last = int(s[-1]), t
    return out


def test_reads_and_distances_match_a_hand_written_flip_flop(exp):
    task = tasks.make("automata", {"automaton": "flipflop", "length": 12, "eval_length": 12})
    names = list(task.table.symbols)
    seqs = [
        [
            "ignore",
            "ignore",
            "write1",
            "ignore",
            "ignore",
            "write0",
            "ignore",
            "write1",
            "write1",
            "ignore",
            "ignore",
            "ignore",
        ]
    ]
    rng = random.Random(0)
    seqs += [[rng.choice(names) for _ in range(12)] for _ in range(50)]
    x = torch.tensor([[names.index(s) for s in seq] for seq in seqs])
    reads, dist = exp.reads_and_distance(task, x)
    y = task.run(x)
    for i, seq in enumerate(seqs):
        ref = flipflop_reference(seq)
        assert [int(v) for v in y[i]] == [r[0] for r in ref]
        assert reads[i].tolist() == [r[1] for r in ref]
        assert [int(d) for d, r in zip(dist[i], ref) if r[1]] == [r[2] for r in ref if r[1]]
    # the hand-made sequence: reads at 3, 4 (distance 1, 2), 6 (1), 9, 10, 11 (1, 2, 3)
    assert torch.nonzero(reads[0]).flatten().tolist() == [3, 4, 6, 9, 10, 11]
    assert dist[0, [3, 4, 6, 9, 10, 11]].tolist() == [1, 2, 1, 1, 2, 3]
    # counting with a model that always says 0: its errors are exactly the reads whose bit is 1
    counts = exp.read_counts(task, x, torch.zeros_like(x))
    ref = [r for seq in seqs for r in flipflop_reference(seq) if r[1]]
    assert counts["reads"] == len(ref) and counts["errors"] == sum(r[0] == 1 for r in ref)
    assert exp.read_counts(task, x, task.run(x))["errors"] == 0


def test_sparse_sets_start_with_a_write_at_the_asked_density(exp):
    task = tasks.make("automata", {"automaton": "flipflop", "length": 64, "eval_length": 64})
    ig, w0, w1 = exp.symbols(task)
    x = exp.sparse_batch(task, 4000, 0.9, torch.Generator().manual_seed(0))
    assert bool(((x[:, 0] == w0) | (x[:, 0] == w1)).all())
    assert float((x[:, 1:] == ig).float().mean()) == pytest.approx(0.9, abs=0.005)
    assert float((x[:, 1:] == w1).float().mean()) == pytest.approx(0.05, abs=0.003)


def test_car_chance_matches_the_exact_state_distribution(exp):
    """The best constant guess per position from sampled sequences against the exact distribution of the car's
    state after t uniform symbols (pushed forward through the transition table, no sampling)."""
    task = tasks.make("automata", {"automaton": "car", "length": 8, "eval_length": 16})
    c = {"eval_seqs": 2048, "car": {"T": 8}}
    got = exp.car_chance(task, c)
    delta = task.table.delta
    p = [0.0] * len(task.table.states)
    p[task.table.start] = 1.0
    exact = []
    for _ in range(16):
        q = [0.0] * len(p)
        for s, ps in enumerate(p):
            for a in range(len(delta[s])):
                q[delta[s][a]] += ps / len(delta[s])
        p = q
        exact.append(100 * max(p))
    assert exact[:3] == [50.0, 25.0, 25.0]  # DD, DU, UD, UU lead to four different states
    assert got["by_position"] == pytest.approx(exact, abs=2.0)
    assert got["within_T"] == pytest.approx(sum(exact[:8]) / 8, abs=1.0)


def test_best_constant_counts_only_scored_positions(exp):
    targets = torch.tensor([[0, 1, 1], [0, 0, 1], [1, 0, 1], [0, 1, 0]])
    mask = torch.tensor([[True, False, True], [True, True, False], [False, True, True], [True, True, True]])
    hits, counts = exp.best_constant(targets, mask)
    assert hits.tolist() == [3.0, 2.0, 2.0] and counts.tolist() == [3.0, 3.0, 3.0]
