"""experiments/attention_glitches.py: the smoke run end to end, and its rules on planted results."""

from __future__ import annotations

import pytest
from experiment_files import judged, loaded, smoke

from experiments import verdicts

NAME = "attention_glitches"
CLAIMS = [
    "transformer_glitches",
    "recurrent_none",
    "irregular_across_seeds",
    "glitches_over_training",
    "diverse_data_reduces",
    "glitch_is_attention",
]


@pytest.fixture(scope="module")
def exp():
    yield from loaded(NAME)


@pytest.mark.smoke
def test_smoke_writes_results_claims_and_figures(exp, tmp_path, monkeypatch):
    out = smoke(exp, tmp_path, monkeypatch)
    c = exp.SIZES["smoke"]
    assert out["experiment"] == NAME and out["runs_trained"] == 3 * c["seeds"]
    assert [cl["id"] for cl in out["claims"]] == CLAIMS
    for cl in out["claims"]:
        assert cl["verdict"] in verdicts.REPORTED and "results lack" not in cl["why"] and "None" not in cl["why"], cl
    data = (tmp_path / out["figures"][0]).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    groups = out["results"]["groups"]
    assert set(groups) == {"transformer", "diverse", "recurrent"}
    for group, rows in groups.items():
        assert [r["seed"] for r in rows] == list(range(c["seeds"]))
        for r in rows:
            # every seed reads the same test sequences: the same reads
            assert {s: r["final"][s]["reads"] for s in r["final"]} == out["results"]["reads_per_test"]
            assert all(0 <= r["final"][s]["wrong"] <= r["final"][s]["reads"] for s in r["final"])
            assert len(r["curve"]["steps"]) == len(r["curve"]["sparse"]) >= 3
            assert ("attention" in r) == (group != "recurrent")


# ---- the rules on planted results ------------------------------------------------------------------------


def seed(wrong=(0, 3, 1), reads=(1000, 500, 5000), curve=None, attention=None, i=0):
    row = {
        "seed": i,
        "final": {s: {"reads": n, "wrong": w} for s, w, n in zip(("eval", "sparse", "dense"), wrong, reads)},
        "curve": curve
        or {"steps": [0, 50, 100], "eval": [0.5, 0, 0], "sparse": [0.5, 0.01, 0.01], "dense": [0.5, 0, 0.01]},
    }
    if attention is not None:
        row["attention"] = attention
    return row


def results(transformer, diverse=None, recurrent=None, tokens=10_000 * 16 * 128):
    return {
        "groups": {"transformer": transformer, "diverse": diverse or transformer, "recurrent": recurrent or []},
        "tokens": tokens,
        "recurrent_tokens": 500 * 16 * 128,
    }


def test_glitches_need_converged_seeds_that_err_rarely():
    rare = [seed(wrong=(0, k, 0), i=k) for k in (1, 3, 5, 0)]
    assert judged(NAME, "transformer_glitches", results(rare))["verdict"] == "matches"  # 3/4 err
    gross = [seed(wrong=(0, 400, 0), i=k) for k in range(3)]
    assert judged(NAME, "transformer_glitches", results(gross))["verdict"] == "partly"  # errs, but 400/5500: not rare
    clean = [seed(wrong=(0, 0, 0), i=k) for k in range(3)] + [seed(wrong=(0, 2, 0), i=9)]
    assert judged(NAME, "transformer_glitches", results(clean))["verdict"] == "does not"
    unlearned = [seed(wrong=(50, 3, 1), i=k) for k in range(3)] + [seed(i=7)]
    j = judged(NAME, "transformer_glitches", results(unlearned))
    assert j["verdict"] == "inconclusive" and "did not converge" in j["why"]  # one converged seed: below min_n
    small = judged(NAME, "transformer_glitches", results(clean, tokens=1000))
    assert small["verdict"] == "inconclusive" and "budget" in small["why"]  # a 'does not' on a tiny budget says nothing


def test_recurrent_models_make_no_error_at_all():
    lstm = [seed(wrong=(0, 0, 0), i=k) for k in range(3)]
    assert judged(NAME, "recurrent_none", results([seed()], recurrent=lstm))["verdict"] == "matches"
    one = lstm + [seed(wrong=(0, 1, 0), i=5)]
    j = judged(NAME, "recurrent_none", results([seed()], recurrent=one))
    assert j["verdict"] == "partly" and "seed 5: eval 0/1000, sparse 1/500" in j["why"]


def test_spread_across_seeds_counts_a_seed_without_errors_at_half_an_error():
    rows = [seed(wrong=(0, w, 0), i=w) for w in (0, 2, 6)]  # half an error against 6: ×12
    assert judged(NAME, "irregular_across_seeds", results(rows))["verdict"] == "matches"
    rows = [seed(wrong=(0, w, 0), i=w) for w in (2, 3, 4)]
    assert judged(NAME, "irregular_across_seeds", results(rows))["verdict"] == "does not"


def test_over_training_reads_the_last_half_where_in_distribution_is_perfect():
    persist = {
        "steps": [0, 100, 200, 300, 400],
        "eval": [0.5, 0.1, 0, 0, 0],
        "sparse": [0.5, 0.1, 0.01, 0, 0.02],
        "dense": [0.5, 0, 0, 0, 0],
    }
    fades = {**persist, "sparse": [0.5, 0.1, 0.01, 0, 0]}
    noisy = {**persist, "eval": [0.5, 0.1, 0.01, 0.01, 0]}  # in distribution not settled: not counted
    rows = [seed(curve=persist, i=0), seed(curve=persist, i=1), seed(curve=fades, i=2), seed(curve=noisy, i=3)]
    j = judged(NAME, "glitches_over_training", results(rows))
    assert j["verdict"] == "matches" and j["why"].startswith("2/3 seeds"), j  # the noisy seed is not counted
    rows = [seed(curve=fades, i=k) for k in range(3)] + [seed(curve=persist, i=3)]
    assert judged(NAME, "glitches_over_training", results(rows))["verdict"] == "does not"  # 1/4


def test_diverse_data_by_a_one_sided_rank_test():
    base = [seed(wrong=(0, w, 0), i=w) for w in (20, 30, 40, 50)]
    better = [seed(wrong=(0, w, 0), i=w) for w in (0, 1, 2, 3)]
    j = judged(NAME, "diverse_data_reduces", results(base, diverse=better))
    assert j["verdict"] == "matches" and "1/4 mixture seeds make no OOD error" in j["why"]
    close = [seed(wrong=(0, w, 0), i=w) for w in (19, 29, 41, 51)]
    assert judged(NAME, "diverse_data_reduces", results(base, diverse=close))["verdict"] == "partly"
    assert judged(NAME, "diverse_data_reduces", results(better, diverse=base))["verdict"] == "does not"


def test_attention_explains_a_seed_only_with_enough_wrong_reads_and_against_right_reads():
    def att(wrong, stale, elsewhere, off_correct):
        return {
            "wrong": wrong,
            "stale": stale,
            "elsewhere": elsewhere,
            "right": 1 - stale - elsewhere,
            "off_correct": off_correct,
            "head_score": 0.9,
        }

    explained = [seed(i=k, attention=att(12, 0.6, 0.2, 0.05)) for k in range(3)]
    assert judged(NAME, "glitch_is_attention", results(explained))["verdict"] == "matches"
    always_off = [seed(i=k, attention=att(12, 0.6, 0.2, 0.5)) for k in range(3)]  # off as often on right reads
    assert judged(NAME, "glitch_is_attention", results(always_off))["verdict"] == "does not"
    few = [seed(i=k, attention=att(3, 1.0, 0.0, 0.0)) for k in range(3)]
    assert judged(NAME, "glitch_is_attention", results(few))["verdict"] == "inconclusive"


def test_controls_and_generalisation_only_on_seeds_that_learned():
    clean = [seed(wrong=(0, 0, 0), i=k) for k in range(4)]
    rare = [seed(wrong=(0, k, 0), i=k) for k in (1, 3, 5, 2)]
    j = judged(NAME, "transformer_glitches", results(rare, recurrent=clean))
    assert j["verdict"] == "matches" and j["control"]["verdict"] == "does not"  # the LSTM in its place
    j = judged(NAME, "recurrent_none", results(rare, recurrent=clean))
    assert j["verdict"] == "matches" and j["control"]["verdict"] == "does not"  # the transformer in its place
    # an LSTM that glitches too: the claim shows nothing about attention
    assert judged(NAME, "transformer_glitches", results(rare, recurrent=rare))["verdict"] == "by construction"
    base = [seed(wrong=(0, w, 0), i=w) for w in (20, 30, 40, 50)]
    better = [seed(wrong=(0, w, 0), i=w) for w in (0, 1, 2, 3)]
    j = judged(NAME, "diverse_data_reduces", results(base, diverse=better))
    assert j["verdict"] == "matches" and j["control"]["verdict"] == "does not"  # arms swapped
    # mixture seeds that never learned the task in distribution are not counted: too few left
    unlearned = better[:2] + [seed(wrong=(500, 0, 0), i=k) for k in (7, 8)]
    assert judged(NAME, "diverse_data_reduces", results(base, diverse=unlearned))["verdict"] == "inconclusive"
    # rates an order of magnitude apart from a few errors each: sampling alone can spread them so
    spread = [seed(wrong=(0, w, 0), reads=(1000, 100_000, 5000), i=w) for w in (1, 2, 15, 30)]
    j = judged(NAME, "irregular_across_seeds", results(spread))
    assert j["rule_verdict"] == "matches" and j["control"]["verdict"] in ("does not", "partly")
