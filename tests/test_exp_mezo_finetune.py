"""experiments/mezo_finetune.py: the smoke run end to end, and its rules on planted results."""

from __future__ import annotations

import pytest

from experiment_files import judged, loaded, smoke  # (puts experiments/ on sys.path)

NAME = "mezo_finetune"


@pytest.fixture(scope="module")
def exp():
    yield from loaded(NAME)


@pytest.mark.smoke
def test_smoke_fine_tunes_three_ways_from_the_pretrained_weights(exp, tmp_path, monkeypatch):
    out = smoke(exp, tmp_path, monkeypatch)
    assert [c["id"] for c in out["claims"]] == ["inference_memory", "forward_passes_fine_tune", "comparable_to_backprop"]
    assert all(c["verdict"] == "inconclusive" and "≥ 3" in c["why"] for c in out["claims"])  # 2 seeds
    for s in out["results"]["seeds"]:
        assert all(s[arm]["curve"][0] == [0, s["pretrained"]] for arm in exp.ARMS)  # each starts from the same weights
        assert sum(s["mezo"]["memory"].values()) == 0 and s["adam"]["memory"]["saved"] > 0 and s["adam"]["memory"]["state"] > 0
    assert out["config"]["finetune"]["mezo"]["train"]["optimizer"] == "mezo"
    assert (tmp_path / out["figures"][0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def seed(pre, adam, sgd, mezo, mezo_kept=0):
    memory = lambda kept: {"saved": kept, "grads": 0, "state": 0}  # noqa: E731
    return {"pretrained": pre, "adam": {"final": adam, "memory": memory(100)}, "sgd": {"final": sgd, "memory": memory(90)},
            "mezo": {"final": mezo, "memory": memory(mezo_kept)}}


def results(seeds, mezo_steps=10_000):
    return {"seeds": seeds, "steps": {"adam": 1000, "sgd": 1000, "mezo": mezo_steps}}


def test_rules_on_planted_results():
    close = [seed(1.0, 0.5, 0.6, 0.65) for _ in range(3)]  # MeZO's fall 0.35 of SGD's 0.4: 0.875
    assert judged(NAME, "inference_memory", results(close))["verdict"] == "matches"
    assert judged(NAME, "inference_memory", results(close[:2] + [seed(1.0, 0.5, 0.6, 0.65, mezo_kept=8)]))["verdict"] == "partly"
    assert judged(NAME, "forward_passes_fine_tune", results(close))["verdict"] == "matches"
    assert judged(NAME, "comparable_to_backprop", results(close))["verdict"] == "matches"
    some = [seed(1.0, 0.5, 0.6, 0.85) for _ in range(3)]  # 0.15 / 0.4 = 0.375
    assert judged(NAME, "comparable_to_backprop", results(some))["verdict"] == "partly"
    flat = [seed(1.0, 0.5, 0.6, 1.0) for _ in range(3)]
    assert judged(NAME, "forward_passes_fine_tune", results(flat))["verdict"] == "does not"
    assert judged(NAME, "comparable_to_backprop", results(flat))["verdict"] == "does not"
    short = judged(NAME, "comparable_to_backprop", results(flat, mezo_steps=1000))
    assert short["verdict"] == "inconclusive" and "budget" in short["why"]
