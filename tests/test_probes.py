"""Probes recover planted circuits, agree with TransformerLens's detectors, and are reproducible."""

from __future__ import annotations

import pytest
import torch
from planted import planted_induction_model

from mechsynth import models, probes, tasks
from mechsynth.probes import ProbeError


@pytest.fixture(scope="module")
def planted():
    return planted_induction_model(vocab=10, n_ctx=40, n_heads=4, seed=3)


def test_planted_previous_token_and_induction_heads_rank_first(planted):
    model, prev_head, ind_head = planted
    prev = probes.run("previous_token", model)
    assert prev.top_heads(1)[0][:2] == (0, prev_head) and prev.per_head[0, prev_head] >= 0.9
    others = prev.per_head.clone()
    others[0, prev_head] = 0
    assert others.max() < 0.3

    ind = probes.run("induction", model)
    assert ind.top_heads(1)[0][:2] == (1, ind_head) and ind.per_head[1, ind_head] >= 0.9
    others = ind.per_head.clone()
    others[1, ind_head] = 0
    assert others.max() < 0.3
    assert ind.metrics[f"copying/L1H{ind_head}"] > 0.9
    assert ind.metrics["icl_score"] < -1.0  # the second copy is predicted, the first is not
    assert set(ind.render["heads"]) >= {f"L1H{ind_head}"}


def test_scores_agree_with_transformer_lens_detection_patterns(planted):
    """Our induction score on one sequence = TL's 'mul' similarity score with the first-copy queries
    zeroed (TL averages over every query; ours over the second copy, where a perfect head scores 1)."""
    from transformer_lens.head_detector import (compute_head_attention_similarity_score,
                                                get_induction_head_detection_pattern,
                                                get_previous_token_head_detection_pattern)

    model, _, _ = planted
    result = probes.run("induction", model, batch_size=1)
    tokens = torch.cat([torch.randint(10, (1, 20), generator=torch.Generator().manual_seed(0))] * 2, 1)
    _, cache = model.run_with_cache(tokens)
    half = 20
    for layer in range(2):
        for head in range(4):
            pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0, head].clone()
            pattern[:half] = 0
            tl = compute_head_attention_similarity_score(pattern, get_induction_head_detection_pattern(tokens.cpu()),
                                                         exclude_bos=False, exclude_current_token=False, error_measure="mul")
            from mechsynth.probes.duplicate_token import target_mass
            from mechsynth.probes.induction import induction_targets

            second = torch.zeros(1, 40, dtype=torch.bool)
            second[:, half:] = True
            ours = target_mass(cache[f"blocks.{layer}.attn.hook_pattern"][None, :, head:head + 1],
                               induction_targets(tokens) & second[:, :, None])
            assert ours.item() == pytest.approx(tl, abs=1e-5)
            full = cache[f"blocks.{layer}.attn.hook_pattern"][0, head]
            tl_prev = compute_head_attention_similarity_score(full, get_previous_token_head_detection_pattern(tokens.cpu()),
                                                              exclude_bos=False, exclude_current_token=False,
                                                              error_measure="mul")
            ours_prev = full.diagonal(-1).sum().item() / 40  # TL averages over all 40 queries
            assert ours_prev == pytest.approx(tl_prev, abs=1e-5)
    assert result.per_head.shape == (2, 4)


def test_random_init_scores_low_and_results_reproducible():
    task = tasks.make("markov_icl", {"k": 3, "length": 32})
    model = models.hooked(models.build(models.ModelConfig(n_layers=2, n_heads=2, d_model=32, attn_only=True), task.spec))
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
    mlp = models.hooked(models.build(models.ModelConfig(kind="mlp", width=8), task.spec))
    with pytest.raises(ProbeError, match="no attention heads"):
        probes.run("previous_token", mlp)


def test_duplicate_token_probe_on_planted_model(planted):
    model, _, _ = planted
    result = probes.run("duplicate_token", model)
    assert result.per_head.shape == (2, 4) and 0 <= result.per_head.min() and result.per_head.max() <= 1


@pytest.mark.parametrize("task_name", ["sparse_parity", "sparse_boolean"])
def test_planted_readout_head_selects_the_support(task_name):
    from planted import planted_selection_model

    params = {"n": 12, "k": 3, "seed": 4} if task_name == "sparse_parity" else {"length": 12, "s": 3, "seed": 4}
    task = tasks.make(task_name, params)
    model, head = planted_selection_model(12, task.support.tolist())
    result = probes.run("sparse_selection", model, task)
    assert result.top_heads(1)[0][:2] == (0, head) and result.per_head[0, head] >= 0.9
    others = result.per_head.clone()
    others[0, head] = 0
    assert others.max() < 0.5
    assert result.metrics["support_recovered"] == 1.0

    random_model = models.hooked(models.build(models.ModelConfig(n_layers=1, n_heads=2, d_model=16), task.spec))
    assert probes.run("sparse_selection", random_model, task).metrics["support_recovered"] == 0.0
    with pytest.raises(ProbeError, match="applies to"):
        probes.run("sparse_selection", random_model, tasks.make("markov_icl", {"k": 3, "length": 13}))


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
    model = models.hooked(models.build(models.ModelConfig(n_layers=2, n_heads=2, d_model=32), task.spec))
    result = probes.run("automaton_shortcut", model, task)
    assert result.per_head.shape == (2, 2)
    assert {"linear/state/L1", "linear/flip/L0", "linear/rotation/embed", "acc_long"} <= set(result.metrics)


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_hidden_progress_on_planted_weight_movement(kind):
    """Move the input-facing rows of the support a lot and the others a little: the probe must say so."""
    import copy

    task = tasks.make("sparse_parity", {"n": 10, "k": 3, "seed": 2})
    cfg = models.ModelConfig(kind=kind, width=16, n_layers=1, n_heads=2, d_model=16)
    init = models.build(cfg, task.spec)
    model = copy.deepcopy(init)
    weights = model.W_in if kind == "mlp" else model.pos_embed.W_pos
    with torch.no_grad():
        weights[:10] += 0.01
        weights[task.support, 3] += 0.5
    if kind == "transformer":  # probe TransformerLens's model, comparing with our step-0 module
        model = models.hooked(model)
    m = probes.run("hidden_progress", model, task, init=init).metrics
    assert m["drift_inf"] == pytest.approx(0.51, abs=1e-5)
    assert m["drift_on_support"] == pytest.approx(0.51, abs=1e-5) and m["drift_off_support"] == pytest.approx(0.01, abs=1e-5)
    assert m["support_recovered"] == 1.0 and m["drift_ratio"] == pytest.approx(51, rel=1e-3)
    assert probes.run("hidden_progress", init, task, init=init).metrics["drift_inf"] == 0
    with pytest.raises(ProbeError, match="init="):
        probes.run("hidden_progress", init, task)


def test_hidden_progress_rises_on_the_loss_plateau(tmp_path):
    """Barak et al. 2022's MLP on a sparse parity (n = 20, k = 3): for hundreds of steps the loss stays at
    chance, while the weights of the support bits move away from the rest; then the loss drops."""
    from mechsynth import load_run, parse_config, train_run
    from mechsynth.timeline import applicable, probe_run

    data = {"task": {"name": "sparse_parity", "n": 20, "k": 3}, "model": {"kind": "mlp", "width": 100},
            "train": {"steps": 1500, "batch_size": 32, "lr": 0.1, "optimizer": "sgd", "grad_clip": 0, "eval_every": 100,
                      "checkpoints": 40, "device": "cpu", "eval_batch_size": 1024}, "wandb": {"mode": "disabled"}}
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


@pytest.mark.parametrize("offset", [1, 2])
def test_previous_token_probe_reports_heads_looking_further_back(offset):
    model, head, _ = planted_induction_model(vocab=10, n_ctx=40, n_heads=3, seed=5, offset=offset)
    result = probes.run("previous_token", model)
    back = result.per_head[0, head] if offset == 1 else result.metrics[f"offset{offset}/L0H{head}"]
    assert back >= 0.9
    others = [result.per_head[0, head]] + [result.metrics[f"offset{d}/L0H{head}"] for d in (2, 3)]
    assert max(float(v) for i, v in enumerate(others) if i + 1 != offset) < 0.1
