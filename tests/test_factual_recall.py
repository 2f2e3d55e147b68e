"""factual_recall against a slow reference: plain Python loops over sampled sequences and the fact table."""

from __future__ import annotations

import math

import pytest
import torch

from mechsynth import load_run, parse_config, tasks, train_run
from mechsynth.errors import ConfigError
from mechsynth.tasks.base import Batch, latent_values

SMALL = {"subjects": 7, "relations": 3, "answers": 4, "noise": 5, "length": 10, "seed": 3}


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.reference("factual_recall")
def test_sequences_match_reference():
    S, R, D, N, T = 7, 3, 4, 5, 10
    task = tasks.make("factual_recall", SMALL)
    b = task.sample(2000, gen(1), split="eval")
    facts = task.facts.tolist()
    t = b.truth
    assert t["facts"].tolist() == facts and t["answer_set"].tolist() == [
        [D * r + d for d in range(D)] for r in range(R)
    ]
    seen_pairs, seen_pos = set(), set()
    for i, (row, target, mask) in enumerate(zip(b.tokens.tolist(), b.targets.tolist(), b.mask.tolist())):
        s, r = t["subject"][i].item(), t["relation"][i].item()
        sp, rp = t["subject_pos"][i].item(), t["relation_pos"][i].item()
        assert len(row) == T and row[-1] == S + R + N  # the end token last
        assert 0 <= sp < T - 1 and 0 <= rp < T - 1 and sp != rp
        assert [p for p, x in enumerate(row) if x < S] == [sp] and row[sp] == s  # the subject, exactly once
        assert [p for p, x in enumerate(row) if S <= x < S + R] == [rp] and row[rp] == S + r  # the relation, once
        assert all(S + R <= x < S + R + N for p, x in enumerate(row[:-1]) if p not in (sp, rp))  # noise elsewhere
        assert target[-1] == facts[s][r] and mask == [False] * (T - 1) + [True]
        seen_pairs.add((s, r))
        seen_pos.add((sp, rp))
    # 2000 draws cover every (subject, relation) pair and every ordered pair of distinct positions (72 of them).
    assert seen_pairs == {(s, r) for s in range(S) for r in range(R)}
    assert seen_pos == {(p, q) for p in range(T - 1) for q in range(T - 1) if p != q}
    noise = [x for row in b.tokens[:, :-1].tolist() for x in row if x >= S + R]
    assert set(noise) == set(range(S + R, S + R + N))


@pytest.mark.reference("factual_recall")
def test_fact_table_is_fixed_by_the_seed_and_typed():
    S, R, D = 100, 5, 6
    params = {"subjects": S, "relations": R, "answers": D}
    task = tasks.make("factual_recall", {**params, "seed": 2})
    facts = task.facts.tolist()
    assert len(facts) == S and all(len(row) == R for row in facts)
    for s in range(S):
        for r in range(R):
            assert D * r <= facts[s][r] < D * (r + 1)  # in relation r's answer set
    for r in range(R):  # 100 uniform draws from 6 answers: every answer of the set is used
        assert {facts[s][r] for s in range(S)} == set(range(D * r, D * (r + 1)))
    # The stated definition: D·r + a uniform draw from the task seed's generator.
    g = torch.Generator().manual_seed(2)
    assert facts == (D * torch.arange(R) + torch.randint(D, (S, R), generator=g)).tolist()
    assert tasks.make("factual_recall", {**params, "seed": 2}).facts.tolist() == facts
    assert tasks.make("factual_recall", {**params, "seed": 3}).facts.tolist() != facts
    # The data seed changes the sequences, never the facts.
    one, two = task.sample(300, gen(1)), task.sample(300, gen(2))
    assert not torch.equal(one.tokens, two.tokens) and torch.equal(one.truth["facts"], two.truth["facts"])


def batch_of(task, relations: list[int], answers: list[int]) -> Batch:
    """A hand-made batch: sequence i has relation relations[i] and target answers[i] at its end token."""
    n, T = len(relations), task.cfg.length
    tokens = torch.zeros(n, T, dtype=torch.long)
    targets = torch.zeros_like(tokens)
    targets[:, -1] = torch.tensor(answers)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, -1] = True
    truth = {"relation": torch.tensor(relations), "answer_set": torch.arange(12).view(3, 4)}
    return Batch(tokens, targets, mask, truth)


@pytest.mark.reference("factual_recall")
def test_type_acc_and_acc_on_hand_made_logits():
    """R = 3 relations of D = 4 answers (relation r: classes 4r..4r+3). Predictions: right; another answer of
    the right relation; an answer of another relation; right -> acc 2/4, type_acc 3/4."""
    task = tasks.make("factual_recall", SMALL)
    batch = batch_of(task, [0, 1, 2, 1], [2, 5, 9, 7])
    predicted = [2, 6, 3, 7]
    logits = torch.zeros(4, 10, 12)
    for i, p in enumerate(predicted):
        logits[i, -1, p] = 3.0
    m = task.metrics(logits, batch)
    assert m["acc"] == pytest.approx(0.5) and m["type_acc"] == pytest.approx(0.75)
    # type_loss: -log of the probability on the right set, by hand: logit 3 on one class, 0 on 11 others.
    z = math.exp(3) + 11
    in_set = [(math.exp(3) + 3) / z, (math.exp(3) + 3) / z, 4 / z, (math.exp(3) + 3) / z]
    assert m["type_loss"] == pytest.approx(sum(-math.log(p) for p in in_set) / 4, rel=1e-5)
    assert m["loss"] == pytest.approx((-2 * math.log(math.exp(3) / z) - 2 * math.log(1 / z)) / 4, rel=1e-5)
    # Only the end position counts: the other positions' logits are noise.
    noisy = logits.clone()
    noisy[:, :-1] = torch.randn(4, 9, 12, generator=gen())
    assert task.metrics(noisy, batch) == m
    # A model that predicts only the last position (out_pos = 1) is scored the same.
    assert task.metrics(logits[:, -1:], batch) == m


def test_uniform_logits_are_log_answers_and_type_matches_relation_only():
    """Uniform over the answers: loss log(R·D), type_loss log R. A model that knows the relation's type only
    (uniform inside the set): type_acc 1, loss log D, type_loss 0, on sampled batches."""
    task = tasks.make("factual_recall", SMALL)
    b = task.sample(256, gen(4))
    m = task.metrics(torch.zeros(256, 10, 12), b)
    assert m["loss"] == pytest.approx(math.log(12), rel=1e-5) and m["type_loss"] == pytest.approx(math.log(3), rel=1e-5)
    logits = torch.full((256, 10, 12), -30.0)
    for i, r in enumerate(b.truth["relation"].tolist()):
        logits[i, -1, 4 * r : 4 * r + 4] = 0.0
    m = task.metrics(logits, b)
    assert m["type_acc"] == 1.0 and m["type_loss"] == pytest.approx(0.0, abs=1e-5)
    assert m["loss"] == pytest.approx(math.log(4), rel=1e-4)


def test_sample_is_reproducible_and_splits_share_the_distribution():
    task = tasks.make("factual_recall", SMALL)
    g = gen(5)
    state = g.get_state()
    a = task.sample(64, g)
    g.set_state(state)
    again = task.sample(64, g)
    assert torch.equal(a.tokens, again.tokens) and torch.equal(a.targets, again.targets)
    assert all(torch.equal(a.truth[k], again.truth[k]) for k in a.truth)
    assert set(a.truth) == set(task.truth_keys)
    # "train" and "eval" are one distribution: the same generator state gives the same batch.
    assert torch.equal(task.sample(64, gen(5), split="eval").tokens, a.tokens)
    with pytest.raises(ValueError, match="'test'.*allowed: train, eval"):
        task.sample(4, gen(), split="test")
    assert task.enumerate("all") is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_sample_lives_on_the_generators_device():
    task = tasks.make("factual_recall", SMALL)
    b = task.sample(32, torch.Generator(device="cuda").manual_seed(0), device="cuda")
    assert b.tokens.is_cuda and b.truth["facts"].is_cuda and b.truth["answer_set"].is_cuda
    assert torch.equal(b.targets[:, -1], b.truth["facts"][b.truth["subject"], b.truth["relation"]])


def test_spec_and_labels():
    task = tasks.make("factual_recall", SMALL)  # S=7, R=3, D=4, N=5, T=10
    spec = task.spec
    assert (spec.d_vocab, spec.d_vocab_out, spec.n_ctx) == (7 + 3 + 5 + 1, 12, 10)
    assert spec.token_names[:8] == ("s0", "s1", "s2", "s3", "s4", "s5", "s6", "r0") and spec.token_names[-1] == "EOS"
    assert spec.token_names[10] == "n0" and spec.target_names[:5] == ("a0.0", "a0.1", "a0.2", "a0.3", "a1.0")
    b = task.sample(1, gen())
    labels = task.token_labels(b.tokens[0])
    t = b.truth
    assert (
        labels[t["subject_pos"][0]] == f"s{t['subject'][0]}" and labels[t["relation_pos"][0]] == f"r{t['relation'][0]}"
    )
    # noise unset: S + R types, as the paper's code.
    default = tasks.make("factual_recall", {"subjects": 10, "relations": 2})
    assert default.cfg.n_noise == 12 and default.spec.d_vocab == 10 + 2 + 12 + 1 and default.spec.n_ctx == 32


@pytest.mark.parametrize(
    "params, field, match",
    [
        ({"subjects": 0}, "task.subjects", "≥ 1"),
        ({"relations": 0}, "task.relations", "≥ 1"),
        ({"answers": 0}, "task.answers", "≥ 1"),
        ({"noise": 0}, "task.noise", "≥ 1"),
        ({"length": 2}, "task.length", "≥ 3"),
        ({"subjects": 2**20, "relations": 32}, "task.subjects", "2\\*\\*24"),
        ({"relations": 2**11, "answers": 2**10}, "task.answers", "2\\*\\*20"),
        ({"facts": 3}, "task.facts", "unknown key"),
    ],
)
def test_config_errors_name_the_field(params, field, match):
    with pytest.raises(ConfigError, match=f"^{field}: .*{match}"):
        tasks.make("factual_recall", params)


def test_config_errors_in_python_too():
    cls = tasks.TASKS.get("factual_recall").Config
    for kw, field in (
        ({"subjects": -1}, "subjects"),
        ({"length": 1}, "length"),
        ({"noise": 0}, "noise"),
        ({"relations": 2**17, "answers": 16}, "answers"),
    ):
        with pytest.raises(ConfigError, match=f"^{field}:"):
            cls(**kw)


def test_a_tiny_run_trains_and_evaluates(tmp_path, tiny):
    cfg = parse_config(
        tiny(
            {"name": "factual_recall", "subjects": 8, "relations": 2, "answers": 3, "length": 8},
            {"n_layers": 1, "n_heads": 2, "d_model": 32},
            {"steps": 20, "lr": 1e-3},
        )
    )
    run = load_run(train_run(cfg, tmp_path / "run", progress=False))
    assert run.steps[-1] == 20
    last = run.metrics[-1]
    assert 0.0 <= last["eval/acc"] <= last["eval/type_acc"] <= 1.0 and last["eval/loss"] > 0


@pytest.mark.reference("factual_recall")
def test_latents_match_a_slow_reference():
    """The subject and the relation, found among the tokens, defined from where each stands on."""
    S, R = SMALL["subjects"], SMALL["relations"]
    task = tasks.make("factual_recall", SMALL)
    batch = task.sample(32, gen(2), split="eval")
    got = latent_values(task, batch)
    assert {latent.name: latent.n_values for latent in task.latents} == {"subject": S, "relation": R}
    for i, row in enumerate(batch.tokens.tolist()):
        for name, lo, hi in (("subject", 0, S), ("relation", S, S + R)):
            values, defined = got[name]
            value, since = None, []
            for x in row:
                if lo <= x < hi:
                    value = x - lo
                since.append(value is not None)
            assert defined[i].tolist() == since, name
            assert set(values[i][defined[i]].tolist()) == {value}, name
