"""experiments/sparse_boolean_functions.py: the smoke run end to end, its rules on planted results, and its
measurements (the truth tables, the norms, the convergence step, the stratified test) against slow references."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest
import torch
from experiment_files import loaded
from experiment_files import smoke as smoke_run

from experiments import verdicts
from mechsynth import load_run

NAME = "sparse_boolean_functions"


@pytest.fixture(scope="module")
def exp():
    yield from loaded(NAME)


@pytest.fixture(scope="module")
def rules():
    return verdicts.rules_of(NAME)


# ---- (a) the smoke run ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke(exp, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sbf")
    mp = pytest.MonkeyPatch()
    out = smoke_run(exp, tmp, mp)
    mp.undo()
    return tmp, out


@pytest.mark.smoke
def test_smoke_writes_results_claims_and_figures(exp, smoke):
    tmp, out = smoke
    c = exp.SIZES["smoke"]
    n = len(c["s_values"]) * 2 * c["seeds"]
    assert out["experiment"] == NAME and out["size"] == "smoke" and out["runs_trained"] == n
    assert [cl["id"] for cl in out["claims"]] == ["symmetric_norms", "symmetric_steps"]
    for cl in out["claims"]:
        assert cl["verdict"] in verdicts.REPORTED and "results lack" not in cl["why"] and "None" not in cl["why"], cl
    assert out["figures"] == [f"{NAME}.png"]
    data = (tmp / out["figures"][0]).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    runs = out["results"]["runs"]
    assert len(runs) == n and {(r["kind"], r["s"]) for r in runs} == {(k, s) for k in exp.KINDS for s in c["s_values"]}
    for r in runs:
        table, s = r["table"], r["s"]
        assert len(table) == 2**s and exp.BALANCE[0] <= r["p_one"] <= exp.BALANCE[1]
        assert exp.is_symmetric(table, s) == (r["kind"] == "symmetric") and exp.depends_on_all(table, s)
        assert table == exp.draw_table(r["kind"], s, r["seed"]) and len(r["support"]) == s
        assert r["converged"] == (r["steps_to_99"] is not None)
        assert r["norm"] == pytest.approx(r["norms"]["layer"]) and r["norm"] > 0
        assert (r["norm_at_99"] is None) == (not r["converged"])
    # every seed its own task: its own hidden positions (the task seed is the run's seed)
    assert len({tuple(r["support"]) for r in runs if r["s"] == c["s_values"][-1]}) > 1


@pytest.mark.smoke
def test_norms_match_the_probed_model_weights(exp, smoke):
    """The layer's norms from the checkpoint's state dict against the same weights read through the model
    TransformerLens loads for probing (another path: W_Q [layer, head, d_model, d_head], ...), in float64."""
    tmp, out = smoke
    r = out["results"]["runs"][-1]
    run = load_run(tmp / "runs" / "runs" / f"kind={r['kind']},s={r['s']}" / f"seed_{r['seed']}")
    model = run.model(run.steps[-1])
    mats = {name: getattr(model, name)[0].detach().double() for name in exp.MATRICES}
    ref = {name: math.sqrt(sum(float(x) ** 2 for x in w.flatten())) for name, w in mats.items()}
    for name in exp.MATRICES:
        assert r["norms"][name] == pytest.approx(ref[name], rel=1e-4)
    assert r["norm"] == pytest.approx(math.sqrt(sum(v * v for v in ref.values())), rel=1e-4)
    qk = sum(mats["W_Q"][h] @ mats["W_K"][h].T for h in range(mats["W_Q"].shape[0]))
    assert r["norms"]["qk"] == pytest.approx(float(torch.linalg.matrix_norm(qk)), rel=1e-4)
    assert r["norms"]["mlp"] == pytest.approx(ref["W_in"] * ref["W_out"], rel=1e-4)


# ---- (b) the rules on planted results ----------------------------------------------------------------------


def planted(
    norm,
    steps=None,
    seeds=4,
    s_values=(2, 3, 4, 5),
    budget=1000,
    converged=lambda kind, s, i: True,
    seed=0,
    init=lambda kind, s, i: 15.0,
):
    """runs with norm(kind, s, i), init(kind, s, i) (the step-0 norm) and steps(kind, s, i), a little noise on each."""
    rng, at_init = random.Random(seed), random.Random(seed + 1)
    runs = []
    for s in s_values:
        for kind in ("symmetric", "generic"):
            for i in range(seeds):
                ok = converged(kind, s, i)
                st = (steps(kind, s, i) if steps else 100) * math.exp(rng.gauss(0, 0.05))
                runs.append(
                    {
                        "kind": kind,
                        "s": s,
                        "seed": i,
                        "converged": ok,
                        "steps_to_99": round(st) if ok else None,
                        "norm": norm(kind, s, i) * math.exp(rng.gauss(0, 0.03)),
                        "norm_init": init(kind, s, i) * math.exp(at_init.gauss(0, 0.03)),
                    }
                )
    return {"runs": runs, "steps": budget}


def test_norm_rule(rules):
    claim = next(c for c in rules.CLAIMS if c.id == "symmetric_norms")
    growing = planted(lambda k, s, i: 10 * (math.exp(0.15 * s) if k == "generic" else 1))
    j = verdicts.judged(claim, growing)
    assert j["verdict"] == "matches" and "s=5: 10 vs 20.7" in j["why"] and "p = 0.0002" in j["why"], j
    assert j["control"]["verdict"] == "does not"  # the step-0 checkpoint: no gap
    # a gap already at step 0 (the two kinds built differently) makes the match one by construction
    built = planted(
        lambda k, s, i: 10 * (math.exp(0.15 * s) if k == "generic" else 1),
        init=lambda k, s, i: 10 * (math.exp(0.15 * s) if k == "generic" else 1),
    )
    assert verdicts.judged(claim, built)["verdict"] == "by construction"
    # a constant ratio: smaller for symmetric, not growing
    const = planted(lambda k, s, i: 10 * (1.3 if k == "generic" else 1))
    assert verdicts.judged(claim, const)["verdict"] == "partly"
    same = planted(lambda k, s, i: 10.0)
    assert verdicts.judged(claim, same)["verdict"] == "does not"
    reverse = planted(lambda k, s, i: 10 * (math.exp(0.15 * s) if k == "symmetric" else 1))
    assert verdicts.judged(claim, reverse)["verdict"] == "does not"
    few = planted(lambda k, s, i: 10 * (math.exp(0.15 * s) if k == "generic" else 1), seeds=2)
    j = verdicts.judged(claim, few)
    assert j["verdict"] == "inconclusive" and "0 values of s" in j["why"]
    # generic runs that fail to converge at s ≥ 4 leave two values of s: inconclusive, said why
    failing = planted(
        lambda k, s, i: 10 * (math.exp(0.15 * s) if k == "generic" else 1),
        converged=lambda k, s, i: not (k == "generic" and s >= 4 and i > 0),
    )
    j = verdicts.judged(claim, failing)
    assert j["verdict"] == "inconclusive" and "s=4 4/4, 1/4" in j["why"]


def test_steps_rule(rules):
    claim = next(c for c in rules.CLAIMS if c.id == "symmetric_steps")
    # generic slower, more so at larger s, and at s = 5 never within the budget: counted as slowest
    growing = planted(
        lambda k, s, i: 10.0,
        steps=lambda k, s, i: 100 * (2 ** (s - 2) if k == "generic" else 1),
        converged=lambda k, s, i: not (k == "generic" and s == 5),
    )
    j = verdicts.judged(claim, growing)
    assert j["verdict"] == "matches" and "s=5: 101 vs > 1000" in j["why"], j
    assert j["control"]["verdict"] == "does not"  # the kinds swapped
    same = planted(lambda k, s, i: 10.0, steps=lambda k, s, i: 200)
    assert verdicts.judged(claim, same)["verdict"] == "does not"
    # nothing converges anywhere: no value of s says anything
    none = planted(lambda k, s, i: 10.0, converged=lambda k, s, i: False)
    assert verdicts.judged(claim, none)["verdict"] == "inconclusive"
    few = planted(lambda k, s, i: 10.0, steps=lambda k, s, i: 100 * (2**s if k == "generic" else 1), seeds=2)
    assert verdicts.judged(claim, few)["verdict"] == "inconclusive"


# ---- (c) the measurements against slow references ----------------------------------------------------------


def test_tables_against_brute_force(exp):
    """Symmetry and dependence by brute force over every pair of inputs, and the kinds' draws."""
    for s in (2, 3, 4):
        for seed in range(5):
            for kind in exp.KINDS:
                t = exp.draw_table(kind, s, seed)
                rows = list(itertools.product((0, 1), repeat=s))  # MSB first, as the table's index
                f = {bits: t[int("".join(map(str, bits)), 2)] for bits in rows}
                sym = all(f[a] == f[b] for a in rows for b in rows if sum(a) == sum(b))
                dep = all(any(f[a] != f[a[:i] + (1 - a[i],) + a[i + 1 :]] for a in rows) for i in range(s))
                assert sym == (kind == "symmetric") and dep
    # the task computes the table's label: a symmetric draw's label is g(number of ones among S)
    from mechsynth import tasks

    t = exp.draw_table("symmetric", 4, 7)
    task = tasks.make("sparse_boolean", {"length": 9, "s": 4, "function": "table", "table": tuple(t), "seed": 7})
    batch = task.sample(64, torch.Generator().manual_seed(0))
    bits = batch.tokens[:, :-1]
    for row, y in zip(bits, batch.targets[:, -1]):
        ones = int(row[task.support].sum())
        assert int(y) == t[(1 << ones) - 1]  # the row with `ones` low bits set has that many ones


def test_convergence_step_on_a_hand_made_series(exp):
    class FakeRun:
        metrics = [
            {"step": s, "eval/balanced_acc": a}
            for s, a in [(0, 0.5), (50, 0.995), (100, 0.97), (150, 0.991), (200, 1.0), (250, 0.999)]
        ]

    assert exp.converged_step(FakeRun()) == (150, 0.999)  # the dip at 100 resets it
    FakeRun.metrics[-1]["eval/balanced_acc"] = 0.98
    assert exp.converged_step(FakeRun())[0] is None


def test_stratified_test_against_exact_enumeration(rules):
    """The permutation p against the exact one: every relabelling within each s (C(6,3)² = 400)."""
    cells = {
        2: {"symmetric": [1.0, 1.2, 0.9], "generic": [1.3, 1.1, 1.5]},
        3: {"symmetric": [2.0, 2.1, 1.7], "generic": [2.2, 2.6, 1.9]},
    }

    def stat(c):
        return statistics.fmean(statistics.fmean(v["generic"]) - statistics.fmean(v["symmetric"]) for v in c.values())

    observed = stat(cells)
    splits = []
    for s, v in cells.items():
        pool = v["generic"] + v["symmetric"]
        splits.append(
            [
                {"generic": [pool[i] for i in g], "symmetric": [pool[i] for i in range(6) if i not in g]}
                for g in itertools.combinations(range(6), 3)
            ]
        )
    exact = statistics.fmean(stat(dict(zip(cells, combo))) >= observed - 1e-12 for combo in itertools.product(*splits))
    got = rules.stratified_test(cells, draws=20000)
    assert got["stat"] == pytest.approx(observed)
    assert got["p_greater"] == pytest.approx(exact, abs=0.01)
    # the slope of the gap, and its interval with no spread within cells
    flat = {s: {"symmetric": [0.0] * 3, "generic": [0.1 * s] * 3} for s in (2, 3, 4)}
    assert rules.slope(rules.gaps(flat)) == pytest.approx(0.1)
    lo, hi = rules.slope_interval(flat, draws=200)
    assert lo == pytest.approx(0.1) and hi == pytest.approx(0.1)
