"""Probes recover planted circuits, agree with TransformerLens's detectors, and are reproducible."""

from __future__ import annotations

import pytest
import torch
from planted import PLANTED, PredictorModel, planted_induction_model

from mechsynth import hooks, models, probes, tasks
from mechsynth.probes import ProbeError


@pytest.fixture(scope="module")
def planted():
    return planted_induction_model(vocab=10, n_ctx=40, n_heads=4, seed=3)


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_probe_recovers_its_planted_circuit(name):
    PLANTED[name]()


def test_every_probe_has_a_planted_known_answer():
    assert set(probes.names()) <= set(PLANTED), f"no planted test for {set(probes.names()) - set(PLANTED)}"


@pytest.mark.parametrize("name", ["sparse_parity", "sparse_boolean", "markov_icl", "automata"])
def test_tasks_declare_the_truth_their_batches_carry(name):
    for params in (
        {},
        {"prior": "doubly_stochastic"}
        if name == "markov_icl"
        else {"automaton": "dihedral", "n": 4}
        if name == "automata"
        else {},
    ):
        task = tasks.make(name, params)
        for split in task.splits:
            batch = task.sample(4, torch.Generator().manual_seed(0), "cpu", split)
            if split != "train":  # training batches may leave out the costly truth
                assert tuple(batch.truth) == tuple(task.truth_keys), (name, params, split)
            assert set(batch.truth) <= set(task.truth_keys), (name, params, split)


def test_probes_apply_by_the_truth_they_need():
    """Applicable exactly where the task provides the truth; asked for anyway, one line naming what is missing."""
    markov = tasks.make("markov_icl", {"k": 3, "length": 13})
    parity = tasks.make("sparse_parity", {"n": 12, "k": 3})
    model = models.hooked(models.build(models.TransformerConfig(n_layers=1, n_heads=2, d_model=16), markov.spec))
    assert probes.can_run("icl_strategy", model, markov) and not probes.can_run("sparse_selection", model, markov)
    why = probes.why_not("sparse_selection", model, markov)
    assert why == (
        "probe 'sparse_selection' needs truth support, readout, which task 'markov_icl' does not provide "
        "(it provides: transition, stationary, uniform, unigram, ngram, bayes)"
    )
    with pytest.raises(ProbeError) as err:
        probes.run("sparse_selection", model, markov)
    assert str(err.value) == why and "\n" not in why
    with pytest.raises(ProbeError, match="needs truth uniform, unigram, ngram, which task 'sparse_parity'"):
        probes.run(
            "icl_strategy", models.hooked(models.build(models.TransformerConfig(n_layers=1), parity.spec)), parity
        )
    with pytest.raises(ProbeError, match="reads the task's ground truth \\(states\\); pass the task"):
        probes.run("automaton_shortcut", model)
    for name in probes.names():
        probe = probes.PROBES.get(name)
        assert probe.needs_task == bool(
            probe.truth or probe.task_check or any(i.startswith("task:") for i in probe.reads)
        )


def test_hidden_progress_reads_the_weights_the_model_names():
    """Not on a rotary transformer (its positions have no weights): not applicable, and a clear error."""
    task = tasks.make("sparse_parity", {"n": 10, "k": 3})
    rotary = models.build(models.TransformerConfig(n_layers=1, n_heads=2, d_model=16, positional="rotary"), task.spec)
    assert probes.input_weights(rotary) is None and not probes.can_run("hidden_progress", rotary, task)
    with pytest.raises(ProbeError, match="input-facing weights"):
        probes.run("hidden_progress", rotary, task, init=rotary)
    mlp = models.build(models.MLPConfig(width=8), task.spec)
    assert probes.input_weights(mlp) == "W_in" and probes.can_run("hidden_progress", mlp, task)


def test_icl_strategy_without_bayes_where_the_task_has_none():
    task = tasks.make("markov_icl", {"k": 3, "length": 16, "prior": "doubly_stochastic"})
    result = probes.run("icl_strategy", PredictorModel(task, "unigram"), task)
    assert [k for k in result.metrics if k.startswith("kl/")] == ["kl/uniform", "kl/unigram", "kl/ngram"]
    assert result.render["nearest"] == "unigram" and result.metrics["stage"] == 1.0


def test_scores_agree_with_transformer_lens_detection_patterns(planted):
    """Our induction score on one sequence = TL's 'mul' similarity score with the first-copy queries
    zeroed (TL averages over every query; ours over the second copy, where a perfect head scores 1)."""
    from transformer_lens.head_detector import (
        compute_head_attention_similarity_score,
        get_induction_head_detection_pattern,
        get_previous_token_head_detection_pattern,
    )

    model, _, _ = planted
    result = probes.run("induction", model, batch_size=1)
    tokens = torch.cat([torch.randint(10, (1, 20), generator=torch.Generator().manual_seed(0))] * 2, 1)
    _, cache = model.run_with_cache(tokens)
    half = 20
    for layer in range(2):
        for head in range(4):
            pattern = cache[hooks.attn_pattern(layer)][0, head].clone()
            pattern[:half] = 0
            tl = compute_head_attention_similarity_score(
                pattern,
                get_induction_head_detection_pattern(tokens.cpu()),
                exclude_bos=False,
                exclude_current_token=False,
                error_measure="mul",
            )
            from mechsynth.probes.duplicate_token import target_mass
            from mechsynth.probes.induction import induction_targets

            second = torch.zeros(1, 40, dtype=torch.bool)
            second[:, half:] = True
            ours = target_mass(
                cache[hooks.attn_pattern(layer)][None, :, head : head + 1],
                induction_targets(tokens) & second[:, :, None],
            )
            assert ours.item() == pytest.approx(tl, abs=1e-5)
            full = cache[hooks.attn_pattern(layer)][0, head]
            tl_prev = compute_head_attention_similarity_score(
                full,
                get_previous_token_head_detection_pattern(tokens.cpu()),
                exclude_bos=False,
                exclude_current_token=False,
                error_measure="mul",
            )
            ours_prev = full.diagonal(-1).sum().item() / 40  # TL averages over all 40 queries
            assert ours_prev == pytest.approx(tl_prev, abs=1e-5)
    assert result.per_head.shape == (2, 4)


def test_random_init_scores_low_and_results_reproducible():
    task = tasks.make("markov_icl", {"k": 3, "length": 32})
    model = models.hooked(
        models.build(models.TransformerConfig(n_layers=2, n_heads=2, d_model=32, attn_only=True), task.spec)
    )
    a = probes.run("induction", model, task, seed=1)
    b = probes.run("induction", model, task, seed=1)
    assert torch.equal(a.per_head, b.per_head) and a.metrics == b.metrics
    # a random head attends near-uniformly: about 1/3 of keys share the previous token (vocabulary 3)
    assert a.per_head.max() < 0.6
    prev = probes.run("previous_token", model, task)
    assert prev.per_head.max() < 0.3 and "icl_score_task" in a.metrics


def test_probe_needs_attention_and_registry():
    assert {"previous_token", "induction", "duplicate_token"} <= set(probes.names())
    task = tasks.make("sparse_parity", {"n": 6, "k": 2})
    mlp = models.hooked(models.build(models.MLPConfig(width=8), task.spec))
    with pytest.raises(ProbeError, match="no attention heads"):
        probes.run("previous_token", mlp)


def test_duplicate_token_probe_on_planted_model(planted):
    model, _, _ = planted
    result = probes.run("duplicate_token", model)
    assert result.per_head.shape == (2, 4) and 0 <= result.per_head.min() and result.per_head.max() <= 1


def test_selection_on_a_random_model_recovers_nothing():
    task = tasks.make("sparse_parity", {"n": 12, "k": 3, "seed": 4})
    random_model = models.hooked(models.build(models.TransformerConfig(n_layers=1, n_heads=2, d_model=16), task.spec))
    assert probes.run("sparse_selection", random_model, task).metrics["support_recovered"] == 0.0


def test_shortcut_probe_parts_on_known_answers():
    from mechsynth.probes.automaton_shortcut import prefix_entropy, ridge_accuracy

    g = torch.Generator().manual_seed(0)
    labels = torch.randint(5, (2000,), generator=g)
    code = torch.nn.functional.one_hot(labels, 5).float() @ torch.randn(5, 16, generator=g)
    assert ridge_accuracy(code + 0.01 * torch.randn(2000, 16, generator=g), labels, 1000) == 1.0
    assert ridge_accuracy(torch.randn(2000, 16, generator=g), labels, 1000) < 0.35  # chance is 0.2

    T = 12
    uniform = torch.ones(T, T).tril()
    uniform = (uniform / uniform.sum(-1, keepdim=True))[None, None]
    previous = torch.eye(T).roll(-1, dims=1).tril()
    previous[0, 0] = 1
    assert prefix_entropy(uniform).item() == pytest.approx(1.0, abs=1e-5)
    assert prefix_entropy(previous[None, None]).item() == pytest.approx(0.0, abs=1e-5)


def test_shortcut_probe_on_a_random_model():
    task = tasks.make("automata", {"automaton": "dihedral", "n": 4, "length": 16})
    model = models.hooked(models.build(models.TransformerConfig(n_layers=2, n_heads=2, d_model=32), task.spec))
    result = probes.run("automaton_shortcut", model, task)
    assert result.per_head.shape == (2, 2)
    assert {
        "linear/state/L1",
        "linear/flip/L0",
        "linear/rotation/embed",
        "acc_long",
        "linear_beyond/state/L1",
        "linear_beyond/flip/embed",
    } <= set(result.metrics)


def test_decoding_beyond_the_training_length_reads_only_those_positions():
    """A planted residual stream: after layer 0 it holds the state exactly at positions ≥ T and noise before;
    the embedding holds noise everywhere. Decoding from position T on must find the state after L0 (1.0)
    and not in the embedding (chance, 1/8), while decoding over all positions is in between."""
    from mechsynth.probes.automaton_shortcut import decode_layers

    g = torch.Generator().manual_seed(0)
    batch, T, length, d_model = 200, 10, 30, 16
    states = torch.randint(8, (batch, length), generator=g)
    code = torch.randn(8, d_model, generator=g)
    after = torch.randn(batch, length, d_model, generator=g)
    after[:, T:] = code[states[:, T:]] + 0.01 * after[:, T:]
    cache = {
        hooks.residual_stream(1)[0]: torch.randn(batch, length, d_model, generator=g),
        hooks.residual_stream(1)[1]: after,
    }
    beyond = decode_layers(cache, 1, {"state": states}, "linear_beyond", start=T)
    assert beyond["linear_beyond/state/L0"] == 1.0 and beyond["linear_beyond/state/embed"] < 0.2
    everywhere = decode_layers(cache, 1, {"state": states}, "linear")["linear/state/L0"]
    assert 0.5 < everywhere < 0.95  # the first T of every 30 positions are noise


def test_hidden_progress_rises_on_the_loss_plateau(tmp_path):
    """Barak et al. 2022's MLP on a sparse parity (n = 20, k = 3): for hundreds of steps the loss stays at
    chance, while the weights of the support bits move away from the rest; then the loss drops."""
    from mechsynth import load_run, parse_config, train_run
    from mechsynth.analysis.timeline import applicable, probe_run

    data = {
        "task": {"name": "sparse_parity", "n": 20, "k": 3},
        "model": {"kind": "mlp", "width": 100},
        "train": {
            "steps": 1500,
            "batch_size": 32,
            "lr": 0.1,
            "optimizer": "sgd",
            "grad_clip": 0,
            "eval_every": 100,
            "checkpoints": 40,
            "device": "cpu",
            "eval_batch_size": 1024,
        },
        "wandb": {"mode": "disabled"},
    }
    run = load_run(train_run(parse_config(data), tmp_path / "run", progress=False))
    assert applicable(run) == ["hidden_progress"]
    tl = probe_run(run, ["hidden_progress"])
    m = tl.metrics["hidden_progress"]
    plateau = [i for i, loss in enumerate(tl.loss) if loss > 0.68]  # chance: ln 2 = 0.693
    end = plateau[-1]
    assert tl.steps[end] >= 200 and plateau == list(range(end + 1)), "a plateau of at least 200 steps from the start"
    assert tl.loss[-1] < 0.1, "then the loss drops"
    assert m["drift_ratio"][end] > 1.5 and m["drift_inf"][end] > 5 * m["drift_inf"][1]
    early = [r for s, r in zip(tl.steps, m["drift_ratio"]) if 0 < s <= tl.steps[end] / 4]
    assert max(early) < m["drift_ratio"][end], "the support's lead grows during the plateau"


def test_attention_probes_refuse_a_one_position_context():
    """associative_memory's sequences are one token: no attention between positions to read (it used to crash
    inside the model); the loss landscape probes still apply."""
    task = tasks.make("associative_memory", {"inputs": 16})
    model = models.build(models.TransformerConfig(n_layers=1, d_model=16), task.spec)
    assert [n for n in probes.names() if probes.can_run(n, model, task)] == ["llc", "sharpness"]
    with pytest.raises(ProbeError, match="reads attention between positions, and this model's context has 1 position"):
        probes.run("induction", model, task)
