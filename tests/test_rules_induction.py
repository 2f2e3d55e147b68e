"""The rules of experiments/rules/statistical_induction.py and experiments/rules/llc_stages.py on planted
results: hand-made results dicts, shaped as the scripts write them, whose right verdict is known."""

from __future__ import annotations

import pytest
from experiment_files import claim

from experiments import verdicts

SI = verdicts.rules_of("statistical_induction")
LLC = verdicts.rules_of("llc_stages")


def verdict(module, cid: str, results) -> str:
    return verdicts.judged(claim(module, cid), results)["verdict"]


def test_claims_are_complete_and_in_the_readmes_order():
    assert [c.id for c in SI.CLAIMS] == ["phases", "heads_at_transition", "doubly_stochastic_prior", "trigram_heads"]
    assert [c.id for c in LLC.CLAIMS] == ["llc_finds_stages"]
    for c in [*SI.CLAIMS, *LLC.CLAIMS]:
        assert c.min_n >= 3 and c.rule and c.claim and c.paper and c.budget_note


# ---- statistical induction: planted seeds ---------------------------------------------------------

STEPS = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
CONDS = ("k3", "k2", "paper_k2")


def seed(n: int, *, stages=("uniform", "unigram", "bigram"), min_kl=0.01, switch=128, prev_at=128, ind_at=128):
    """A seed whose heads jump from chance to formed at prev_at / ind_at (None: never)."""

    def series(chance, formed, at):
        return [formed if at is not None and s >= at else chance for s in STEPS]

    return {
        "seed": n,
        "steps": STEPS,
        "stages": list(stages),
        "transition_step": switch,
        "unigram_plateau": {"min_kl": min_kl} if min_kl is not None else None,
        "heads": {
            "previous_token": {"head": "L0H0", "start": 0.04, "chance": 0.04},
            "induction": {"head": "L1H0", "start": 0.34, "chance": 0.34},
        },
        "series": {
            "previous_token": {"L0H0": series(0.04, 0.5, prev_at), "L1H0": [0.0] * len(STEPS)},
            "induction": {"L1H0": series(0.34, 0.9, ind_at), "L0H0": [0.3] * len(STEPS)},
        },
    }


def conditions(per_cond: dict[str, list[dict]]) -> dict:
    return {"conditions": {c: {"seeds": s} for c, s in per_cond.items()}}


def one_layer(i: int) -> dict:
    """A seed of the 1-layer control: it stays on unigram, its heads never form."""
    return seed(i, stages=("uniform", "unigram"), min_kl=0.01, switch=None, prev_at=None, ind_at=None)


def same(n: int = 5, control=one_layer, **kw) -> dict:
    return conditions(
        {**{c: [seed(i, **kw) for i in range(n)] for c in CONDS}, "k3_1layer": [control(i) for i in range(n)]}
    )


def test_phases():
    assert verdict(SI, "phases", same()) == "matches"
    # no plateau: the model only passes the unigram predictor (KL 0.04 at its closest) in every seed
    assert verdict(SI, "phases", same(min_kl=0.04)) == "does not"
    # one condition never reaches bigrams: 10 of 15 seeds
    mixed = same()
    mixed["conditions"]["k2"]["seeds"] = [seed(i, stages=("uniform", "unigram"), switch=None) for i in range(5)]
    assert verdict(SI, "phases", mixed) == "partly"
    assert verdict(SI, "phases", same(n=2)) == "inconclusive"


def test_phases_and_heads_controls_are_the_one_layer_runs():
    for cid in ("phases", "heads_at_transition"):
        out = verdicts.judged(claim(SI, cid), same())
        assert out["verdict"] == "matches" and out["control"]["verdict"] == "does not", out
        # a control that passes as well: by construction
        assert verdict(SI, cid, same(control=lambda i: seed(i))) == "by construction"
    # results without the 1-layer runs: no control, so no match
    bare = same()
    del bare["conditions"]["k3_1layer"]
    assert verdict(SI, "phases", bare) == "inconclusive"


def test_heads_at_the_transition_count_every_seed_and_beat_a_random_switch():
    assert verdict(SI, "heads_at_transition", same()) == "matches"
    # the audit's counterexample: one seed reaches bigrams with the previous-token head at ~0, induction at chance
    one_off = same()
    one_off["conditions"]["paper_k2"]["seeds"][1] = seed(1, switch=1024, prev_at=None, ind_at=None)
    out = verdicts.judged(claim(SI, "heads_at_transition"), one_off)
    assert out["verdict"] == "partly" and "not both formed: seed 1" in out["why"]
    # heads that form long before the switch: not at the transition
    assert verdict(SI, "heads_at_transition", same(switch=1024, prev_at=8, ind_at=8)) == "does not"
    assert verdict(SI, "heads_at_transition", same(prev_at=None, ind_at=None)) == "does not"
    assert verdict(SI, "heads_at_transition", same(n=2)) == "inconclusive"


def test_heads_without_a_recorded_chance_use_the_score_at_step_0():
    old = same()
    for cond in old["conditions"].values():
        for r in cond["seeds"]:
            for h in r["heads"].values():
                del h["chance"]
    assert verdict(SI, "heads_at_transition", old) == "matches"


def prior(n: int = 5, ds_kl=0.04, di_kl=0.01, ds_step=64, di_step=256, nearest=None) -> dict:
    """Planted prior pairs: converged (on the Dirichlet chains) at ds_step / di_step; bigram nearest at `nearest`
    (the same steps when None); KL(bigram) ≤ 0.05 later for the doubly-stochastic runs, as their floor is higher."""
    effect = {
        "min_kl_unigram_doubly_stochastic": [ds_kl] * n,
        "min_kl_unigram_dirichlet": [di_kl] * n,
        "converged": {
            "paired_steps": [[di_step, ds_step]] * n,
            "final_kl_bayes_dirichlet": [0.01] * n,
            "final_kl_bayes_doubly_stochastic": [0.03] * n,
        },
        "nearest": {"paired_steps": [list(nearest or (di_step, ds_step))] * n},
        "kl<=0.05": {"paired_steps": [[di_step, 2 * di_step]] * n},
    }
    return {"claims": {"doubly_stochastic": {"ours": effect, "paper": effect}}}


def test_doubly_stochastic_prior():
    assert verdict(SI, "doubly_stochastic_prior", prior()) == "matches"
    # sooner, but the doubly-stochastic runs still sit on a unigram plateau
    assert verdict(SI, "doubly_stochastic_prior", prior(ds_kl=0.01)) == "partly"
    # a plateau and later: neither half of the claim
    assert verdict(SI, "doubly_stochastic_prior", prior(ds_kl=0.01, ds_step=512)) == "does not"
    # no plateau ever (never the nearest strategy) counts as no plateau
    assert verdict(SI, "doubly_stochastic_prior", prior(ds_kl=None)) == "matches"
    # 3 pairs: a sign test cannot reach p < 0.05
    assert verdict(SI, "doubly_stochastic_prior", prior(n=3)) == "inconclusive"


def test_doubly_stochastic_prior_judges_convergence_not_the_nearest_strategy():
    # the audit's case: bigram nearest sooner (no unigram stage to leave), but converged later on the Dirichlet chains
    out = verdicts.judged(claim(SI, "doubly_stochastic_prior"), prior(ds_step=512, nearest=(256, 64)))
    # no plateau but later: partly, and the swapped priors (Dirichlet sooner) are partly as well
    assert out["rule_verdict"] == "partly" and out["verdict"] == "by construction"
    assert "converged sooner on the Dirichlet chains in 0/5 pairs, later in 5" in out["why"]
    assert (
        "bigram nearest sooner in 5/5" in out["why"]
        and "≤ 0.05 on its own chains sooner in 0/5, later in 5" in out["why"]
    )


def test_doubly_stochastic_prior_control_swaps_the_priors():
    out = verdicts.judged(claim(SI, "doubly_stochastic_prior"), prior())
    assert out["verdict"] == "matches" and out["control"]["verdict"] == "does not", out
    # no difference between the priors (neither has a plateau, they converge together): the swapped arms do as well
    assert verdict(SI, "doubly_stochastic_prior", prior(ds_kl=0.04, di_kl=0.04, di_step=64)) == "by construction"


def trigram(n: int = 5, bad: int = 0, back2: float = 0.8, at_step0: float = 0.04) -> dict:
    rows = [
        {
            "seed": i,
            "stages": ["uniform", "unigram", "bigram", "trigram"],
            "transition": 700,
            "back1": {"head": "L0H0", "final": 0.9},
            "back2": {"head": "L0H1", "final": 0.05 if i < bad else back2},
        }
        for i in range(n)
    ]
    runs = [
        {
            "seed": i,
            "segments": [{"strategy": "uniform", "from": 0, "to": 8}],
            "heads": {"back1": {"head": "L0H0"}, "back2": {"head": "L0H1"}},
            "series": {"previous_token": {"L0H0": [at_step0, 0.9]}, "offset2": {"L0H1": [at_step0, 0.8]}},
        }
        for i in range(n)
    ]
    return {"claims": {"trigram": rows}, "conditions": {"trigram": {"seeds": runs}}}


def test_trigram_heads():
    assert verdict(SI, "trigram_heads", trigram()) == "matches"
    assert verdict(SI, "trigram_heads", trigram(bad=1)) == "partly"
    assert verdict(SI, "trigram_heads", trigram(back2=0.1)) == "does not"
    skipped = trigram()
    skipped["claims"]["trigram"][0]["stages"] = ["uniform", "unigram", "trigram"]  # no bigram stage on the way
    assert verdict(SI, "trigram_heads", skipped) == "partly"
    assert verdict(SI, "trigram_heads", trigram(n=2)) == "inconclusive"
    out = verdicts.judged(claim(SI, "trigram_heads"), trigram())
    assert out["control"]["verdict"] == "does not" and "0/5 seeds" in out["control"]["why"]


# ---- LLC stages -------------------------------------------------------------------------------------

CANDIDATES = [4, 8, 16, 32, 64, 128, 256, 512, 1024]


def llc_seed(change_points, events=None, turns=(), shuffled=(1024,)):
    events = events or {
        "unigram_starts": 8,
        "bigram_nearest": 256,
        "induction_rise50": 256,
        "previous_token_rise50": 256,
    }
    return {
        "seed": 0,
        "llc_boundaries": {"change_points": list(change_points), "turns": list(turns)},
        "control": {"llc_boundaries": {"change_points": list(shuffled), "turns": []}},
        "boundary_candidates": {"change_points": CANDIDATES, "turns": CANDIDATES},
        "events": {**events, "bigram_kl<=0.1": 200, "loss_drop": 250},
    }


def test_llc_beats_random_placement_for_matches_and_partly():
    out = verdicts.judged(LLC.CLAIMS[0], {"seeds": [llc_seed([8, 256]) for _ in range(5)]})
    assert out["verdict"] == "matches" and "20/20 events" in out["why"] and "chance" in out["why"]
    # the unigram stage's start has no boundary in any seed: significant, but a stage is missed
    assert verdict(LLC, "llc_finds_stages", {"seeds": [llc_seed([256]) for _ in range(5)]}) == "partly"
    # boundaries far from every event: no better than random
    far = {"unigram_starts": 8, "bigram_nearest": 32, "induction_rise50": 32, "previous_token_rise50": 32}
    assert verdict(LLC, "llc_finds_stages", {"seeds": [llc_seed([1024], far) for _ in range(5)]}) == "does not"
    assert verdict(LLC, "llc_finds_stages", {"seeds": [llc_seed([8, 256]) for _ in range(2)]}) == "inconclusive"


def test_llc_control_is_the_shuffled_llc():
    out = verdicts.judged(LLC.CLAIMS[0], {"seeds": [llc_seed([8, 256]) for _ in range(5)]})
    assert out["verdict"] == "matches" and out["control"]["verdict"] == "does not", out
    # boundaries that land at the events whatever the LLC's order: by construction
    same_anyway = {"seeds": [llc_seed([8, 256], shuffled=(8, 256)) for _ in range(5)]}
    assert verdict(LLC, "llc_finds_stages", same_anyway) == "by construction"
    no_control = {"seeds": [{k: v for k, v in llc_seed([8, 256]).items() if k != "control"} for _ in range(5)]}
    assert verdict(LLC, "llc_finds_stages", no_control) == "inconclusive"


def test_llc_candidates_of_runs_without_them_are_the_valid_checkpoints_less_the_margins():
    r = {"llc": {"steps": [0, 1, 2, 3, 5, 9, 13, 18, 26, 38, 62, 92]}, "diagnostics": {"negative": [0, 1]}}
    assert LLC.candidates(r, "change_points") == [9, 13, 18, 26, 38]  # 10 valid: indices 3..7
    assert LLC.candidates(r, "turns") == [3, 5, 9, 13, 18, 26, 38, 62]


@pytest.mark.parametrize("module", [SI, LLC])
def test_why_lines_are_one_line(module):
    planted = {SI: same(), LLC: {"seeds": [llc_seed([8, 256]) for _ in range(3)]}}[module]
    for c in module.CLAIMS:
        try:
            out = verdicts.judged(c, planted)
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"{c.id}: {e}")
        if "lack" not in out["why"]:
            assert "\n" not in out["why"] and "None" not in out["why"]
