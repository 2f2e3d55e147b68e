"""The rules of circuit_discovery and edge_of_stability (experiments/rules/) on planted results with known
answers: one that matches, one that does not (or partly), one with too few seeds (or cells); the floors that
keep a regime that cannot show the effect (no induction pattern yet, checkpoints too coarse for a 2× window,
λ_max timelines too short) from saying "does not"; and each claim's negative control (issue 46), which the
rule must not call a match where the claim is one, and which makes a match "by construction" where it does."""

from __future__ import annotations

import pytest
from experiment_files import EXPERIMENTS, judged

from experiments import verdicts


def test_claims_are_complete():
    ids = [c.id for c in verdicts.rules_of("circuit_discovery").CLAIMS]
    assert ids == [
        "planted_circuits_recovered",
        "induction_circuit_patching",
        "induction_circuit_eap",
        "induction_circuit_eap_ig",
        "induction_circuit_acdc",
        "induction_circuit_timing",
        "positions_read",
    ]
    assert [c.id for c in verdicts.rules_of("edge_of_stability").CLAIMS] == ["edge_of_stability"]
    for c in verdicts.rules_of("circuit_discovery").CLAIMS + verdicts.rules_of("edge_of_stability").CLAIMS:
        assert c.min_n >= 3 and c.rule and c.claim and c.paper and c.control and c.control_note
        assert not c.scale and c.budget is None  # existence claims without a paper budget to compare
    kinds = {c.id: c.kind for c in verdicts.rules_of("circuit_discovery").CLAIMS}
    assert [i for i, k in kinds.items() if k == "tool"] == ids[:5]
    assert kinds["induction_circuit_timing"] == kinds["positions_read"] == "paper"


# ---- circuit_discovery: planted ------------------------------------------------------------------------------

METHODS = ("patching", "eap", "eap_ig", "acdc")
CASES = (
    "majority/resample",
    "induction/resample",
    "tracr_frac_prevs/zero",
    "tracr_frac_prevs/resample",
    "tracr_detect_pattern/zero",
    "tracr_detect_pattern/resample",
)


def planted(auc: float = 1.0, exact: bool = True, cases=CASES, control_auc: float = 0.5) -> dict:
    out = {c: {m: {"auc": 1.0, "exact": True, "edges": 23, "truth": 5} for m in METHODS} for c in cases}
    out[cases[0]]["eap"] = {"auc": auc, "exact": exact, "edges": 13, "truth": 2}
    # the control: the planted models with their weights shuffled
    ctl = {
        c: {m: {"auc": control_auc, "exact": control_auc == 1.0, "edges": 23, "truth": 5} for m in METHODS}
        for c in cases
    }
    return {"planted": out, "planted_control": ctl}


def test_planted():
    out = judged("circuit_discovery", "planted_circuits_recovered", planted())
    assert out["verdict"] == "matches" and out["control"]["verdict"] == "does not"
    # discovery that "finds" the planted circuit in shuffled weights too: by construction
    assert (
        judged("circuit_discovery", "planted_circuits_recovered", planted(control_auc=1.0))["verdict"]
        == "by construction"
    )
    # no control in the results: a match is not shown
    bare = {"planted": planted()["planted"]}
    assert judged("circuit_discovery", "planted_circuits_recovered", bare)["verdict"] == "inconclusive"
    assert judged("circuit_discovery", "planted_circuits_recovered", planted(0.95, False))["verdict"] == "partly"
    out = judged("circuit_discovery", "planted_circuits_recovered", planted(0.6, False))
    assert out["verdict"] == "does not" and "missed: majority/resample EAP" in out["why"]
    # three planted models where the rule asks for all four
    few = planted(cases=CASES[:4])
    assert judged("circuit_discovery", "planted_circuits_recovered", few)["verdict"] == "inconclusive"
    # the layout of the runs before the rules file
    old = {"claims": {"planted": {"cases": planted()["planted"]}}, "planted_control": planted()["planted_control"]}
    assert judged("circuit_discovery", "planted_circuits_recovered", old)["verdict"] == "matches"


# ---- circuit_discovery: the induction circuit and its timing ------------------------------------------------

KNOWN = ["input->L0H0.v", "L0H0->L1H0.k", "input->L1H0.q", "input->L1H0.v", "L1H0->logits"]
EDGES = KNOWN + [
    "input->L0H0.q",
    "input->L0H0.k",
    "input->L1H0.k",
    "input->logits",
    "L0H0->L1H0.q",
    "L0H0->L1H0.v",
    "L0H0->logits",
]
FINE = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2000]
COARSE = [0, 2, 8, 26, 77, 228, 675, 2000]


def markov_seed(
    seed: int, auc: float = 1.0, formed: int = 128, induction=100, previous=150, steps=FINE, init_auc: float = 0.5
) -> dict:
    circuit = KNOWN if auc == 1.0 else KNOWN + ["input->logits"]
    method = {
        "auc_known": auc,
        "circuit": circuit,
        "scores": {e: 0.1 for e in EDGES},
        "faithfulness": 0.93,
        "formed": formed,
    }
    # the control: the untrained model's circuit and AUC against the same known edges
    init = {
        "auc_known": init_auc,
        "circuit": EDGES[5:],
        "scores": {e: 0.0 for e in EDGES},
        "faithfulness": 0.9,
        "formed": None,
    }
    return {
        "seed": seed,
        "known_edges": KNOWN,
        "steps": steps,
        "loss_drop": 120,
        "pattern_formation": {
            "induction": {"L0H0": None, "L1H0": induction},
            "previous_token": {"L0H0": previous, "L1H0": None},
        },
        "methods": {m: dict(method) for m in METHODS},
        "methods_init": {m: dict(init) for m in METHODS},
    }


def markov(*seeds: dict) -> dict:
    return {"results": {"markov_icl": list(seeds)}}


@pytest.mark.parametrize("method", METHODS)
def test_induction_circuit(method):
    cid = f"induction_circuit_{method}"
    good = markov(*(markov_seed(s) for s in (100, 101, 102)))
    out = judged("circuit_discovery", cid, good)
    assert out["verdict"] == "matches" and "1.00/1.00/1.00 (seeds 100–102" in out["why"]
    assert out["control"]["verdict"] == "does not" and "0.50/0.50/0.50" in out["control"]["why"]
    # the untrained model scores the known edges as high: by construction
    same = markov(*(markov_seed(s, init_auc=0.95) for s in (100, 101, 102)))
    assert judged("circuit_discovery", cid, same)["verdict"] == "by construction"
    assert (
        judged("circuit_discovery", cid, markov(markov_seed(0), markov_seed(1, 0.8), markov_seed(2, 0.7)))["verdict"]
        == "partly"
    )
    assert (
        judged("circuit_discovery", cid, markov(markov_seed(0, 0.6), markov_seed(1, 0.5), markov_seed(2, 0.9)))[
            "verdict"
        ]
        == "does not"
    )
    assert judged("circuit_discovery", cid, markov(markov_seed(0), markov_seed(1)))["verdict"] == "inconclusive"
    # a seed with no induction pattern yet lacks the mechanism: not counted, whatever its AUC
    early = markov(markov_seed(0, 0.4, induction=None), markov_seed(1, 0.4, previous=None), markov_seed(2))
    out = judged("circuit_discovery", cid, early)
    assert out["verdict"] == "inconclusive" and out["n"] == 1 and "not counted" in out["why"]


def test_timing():
    cid = "induction_circuit_timing"
    # each seed's circuit within 2× of its own pattern (16 · 10, 128 · 100, 1024 · 1000): 3/3 hits, chance ~0.18
    # each; another seed's pattern (the control) is more than 2× away from every circuit
    own = markov(
        markov_seed(0, formed=16, induction=10),
        markov_seed(1, formed=128, induction=100),
        markov_seed(2, formed=1024, induction=1000),
    )
    out = judged("circuit_discovery", cid, own)
    assert out["verdict"] == "matches" and "within 2× in 3" in out["why"] and out["control"]["verdict"] == "does not"
    # the circuit at 128, the pattern at 100, in every seed: the rule hits with any seed's pattern, by construction
    out = judged("circuit_discovery", cid, markov(*(markov_seed(s) for s in range(3))))
    assert out["rule_verdict"] == "matches" and out["verdict"] == "by construction"
    # the circuit at 512 when the pattern formed at 10: (256, 512] lies far outside [5, 20]
    late = [markov_seed(s, formed=512, induction=10) for s in range(3)]
    assert judged("circuit_discovery", cid, markov(*late))["verdict"] == "does not"
    assert judged("circuit_discovery", cid, markov(markov_seed(0), *late[1:]))["verdict"] == "partly"
    # two of three seeds hit: not beyond chance (P ≈ 0.09) -> partly; but the two alike seeds hit with each
    # other's pattern as well (the control: partly too) -> by construction
    two = judged("circuit_discovery", cid, markov(markov_seed(0), markov_seed(1), late[2]))
    assert two["rule_verdict"] == "partly" and two["verdict"] == "by construction"
    assert judged("circuit_discovery", cid, markov(markov_seed(0), markov_seed(1)))["verdict"] == "inconclusive"
    # 8 coarse checkpoints: a circuit first seen at 675 may have formed anywhere in (228, 675], which reaches
    # into [83, 334] around a pattern at 167: unresolved, not a miss (the earlier runs' case)
    coarse = markov(*(markov_seed(s, formed=675, induction=167, steps=COARSE) for s in range(3)))
    out = judged("circuit_discovery", cid, coarse)
    assert (
        out["verdict"] == "inconclusive"
        and out["n"] == 0
        and "unresolved between probed checkpoints in 3" in out["why"]
    )
    none = markov(*(markov_seed(s, induction=None) for s in range(3)))
    assert judged("circuit_discovery", cid, none)["verdict"] == "inconclusive"


def test_chance_and_poisson_binomial():
    rules = verdicts.rules_of("circuit_discovery")
    # a log-uniform step over [1, 2000] within 2× of 100: log(4) / log(2000)
    assert rules._chance_within(100, 1, 2000) == pytest.approx(0.18239, abs=1e-4)
    assert rules._at_least(0, [0.2, 0.3]) == pytest.approx(1.0)
    assert rules._at_least(2, [0.2, 0.3]) == pytest.approx(0.06)
    assert rules._at_least(1, [0.2, 0.3]) == pytest.approx(1 - 0.8 * 0.7)


# ---- circuit_discovery: positions -----------------------------------------------------------------------------


def position_seed(auc: float = 1.0, learned: bool = True, control: float = 1e-5, init_auc: float = 0.5) -> dict:
    return {
        "seed": 100,
        "learned": learned,
        "methods": {"patching": {"auc_positions": auc, "control": control}},
        "methods_init": {"patching": {"auc_positions": init_auc, "control": 0.3}},
    }


def positions(boolean, causal) -> dict:
    return {"results": {"sparse_boolean": boolean, "causal_icl": causal}}


def test_positions():
    cid = "positions_read"
    good = [position_seed() for _ in range(3)]
    out = judged("circuit_discovery", cid, positions(good, good))
    assert out["verdict"] == "matches" and out["n"] == 3 and out["control"]["verdict"] == "does not"
    untrained_reads = [position_seed(init_auc=0.95) for _ in range(3)]
    assert judged("circuit_discovery", cid, positions(untrained_reads, untrained_reads))["verdict"] == "by construction"
    bad = [position_seed(0.6) for _ in range(3)]
    assert judged("circuit_discovery", cid, positions(bad, bad))["verdict"] == "does not"
    assert judged("circuit_discovery", cid, positions(good, bad))["verdict"] == "partly"
    # two causal seeds learned: too few for the rule, whatever their AUC
    few = [position_seed(0.6), position_seed(0.6), position_seed(0.6, learned=False)]
    out = judged("circuit_discovery", cid, positions(good, few))
    assert out["verdict"] == "inconclusive" and out["n"] == 2
    out = judged("circuit_discovery", cid, positions(good, [position_seed(learned=False)] * 3))
    assert out["verdict"] == "inconclusive" and "no seed learned" in out["why"]


# ---- edge_of_stability --------------------------------------------------------------------------------------


def eos_run(
    lr: float,
    seed: int,
    *,
    approach: str = "below",
    reached: int | None = 400,
    within: float = 0.9,
    rises_after: int = 15,
    rises_before: int = 0,
    low: float = 25.0,
    checkpoints: int = 56,
) -> dict:
    limit = 2 / lr
    steps = list(range(0, 25 * checkpoints, 25))
    start = 0.8 * limit if approach == "below" else 1.8 * limit
    lam = [start] + [low] * (checkpoints // 4) + [limit] * (checkpoints - 1 - checkpoints // 4)
    if reached is not None:
        reached = steps[1 + checkpoints // 4]
    else:
        lam = [start] + [low] * (checkpoints - 1)
    near = {
        "reached_step": reached,
        "median_ratio_after": 1.0 if reached else None,
        "fraction_within_after": within if reached else None,
        "max_ratio_after": 1.1 if reached else None,
        "loss_increases_before": rises_before,
        "evals_before": 100,
        "loss_increases_after": rises_after if reached else 0,
        "evals_after": 200 if reached else 0,
    }
    low_at = min(range(len(lam)), key=lam.__getitem__)
    # the full-batch loss at every checkpoint: falling, and (from the edge on) rising at every other step
    at = steps.index(reached) if reached is not None else len(steps)
    loss = [1.0 - 0.001 * i if i < at else 0.5 + 0.01 * ((i - at) % 2) for i in range(len(steps))]
    return {
        "seed": seed,
        "steps": steps,
        "lambda_max": lam,
        "limit": limit,
        "loss": loss,
        "loss_steps": list(steps),
        "initial": start,
        "min": lam[low_at],
        "min_step": steps[low_at],
        "max_after_min": max(lam[low_at:]),
        "sharpening": max(lam[low_at:]) / lam[low_at],
        "approach": approach,
        "near0.1": dict(near),
        "near0.2": dict(near, fraction_within_after=1.0 if reached else None),
    }


def control(seed: int, rises: int = 0, checkpoints: int = 56) -> dict:
    return eos_run(0.02, seed, reached=None, rises_before=rises, checkpoints=checkpoints)


def eos(edge: list, ctl: list, edge_lr: str = "0.05") -> dict:
    return {"step_sizes": {"0.02": ctl, edge_lr: edge}}


def test_edge_of_stability():
    cid = "edge_of_stability"
    edge = [eos_run(0.05, 100), eos_run(0.05, 101, approach="above"), eos_run(0.05, 102)]
    ctl = [control(s) for s in (100, 101, 102)]
    out = judged("edge_of_stability", cid, eos(edge, ctl))
    assert out["verdict"] == "matches" and out["n"] == 3
    assert "3/3 seeds at the edge" in out["why"] and "56 checkpoints per run (336 in all)" in out["why"]
    # the control: read against the other step size's 2/η, no run is at the edge
    assert out["control"]["verdict"] == "does not" and "0/3 seeds at the edge" in out["control"]["why"]
    # two step sizes whose 2/η are 2 % apart: λ_max at one is as near the other's, so the rule cannot tell
    # which η set it: by construction
    close = {"step_sizes": {"0.05": edge, "0.051": [eos_run(0.051, s) for s in (100, 101, 102)]}}
    out = judged("edge_of_stability", cid, close)
    assert out["rule_verdict"] == "matches" and out["verdict"] == "by construction"
    # hovering in fewer than half the checkpoints after reaching 2/η, in two of three runs
    loose = [eos_run(0.05, 100, within=0.3), eos_run(0.05, 101, within=0.3), eos_run(0.05, 102)]
    out = judged("edge_of_stability", cid, eos(loose, ctl))
    assert out["verdict"] == "does not" and "within ±10 % at 30 %" in out["why"]
    # one run's loss never rises at the edge (2/3 at the edge), or the control's loss rises -> partly
    mono = [eos_run(0.05, 100, rises_after=0), eos_run(0.05, 101), eos_run(0.05, 102)]
    assert judged("edge_of_stability", cid, eos(mono, ctl))["verdict"] == "partly"
    assert judged("edge_of_stability", cid, eos(edge, [control(100, rises=3)] + ctl[1:]))["verdict"] == "partly"
    # every run from above: self-stabilization only, progressive sharpening untested -> partly
    above = [eos_run(0.05, s, approach="above") for s in (100, 101, 102)]
    assert judged("edge_of_stability", cid, eos(above, ctl))["verdict"] == "partly"
    # two runs at an edge step size: too few
    assert judged("edge_of_stability", cid, eos(edge[:2], ctl))["verdict"] == "inconclusive"
    # no step size reaches 2/η: nothing to judge
    assert judged("edge_of_stability", cid, {"step_sizes": {"0.02": ctl}})["verdict"] == "inconclusive"
    # smoke-sized timelines (6 λ_max checkpoints) cannot show hovering: not counted
    short = [eos_run(0.05, s, within=0.2, checkpoints=6) for s in (0, 1, 2)]
    out = judged("edge_of_stability", cid, eos(short, [control(s, checkpoints=6) for s in (0, 1, 2)]))
    assert out["verdict"] == "inconclusive" and "not counted" in out["why"]


def test_old_results_judge_without_fallback():
    """The earlier runs' JSONs (assets/) are read by the rules (post hoc), without the 'results lack' fallback."""
    import json

    root = EXPERIMENTS.parent / "assets"
    for name in ("circuit_discovery", "edge_of_stability"):
        path = root / f"{name}.json"
        if not path.exists():
            pytest.skip(f"{path} not there")
        for out in verdicts.judge_all(name, json.loads(path.read_text())["results"]):
            assert "lack" not in out["why"] and "None" not in out["why"] and out["n"] >= 0, out
