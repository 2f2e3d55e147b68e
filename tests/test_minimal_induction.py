"""The minimal_induction kind (Edelman et al. 2024's simplified transformer) against its definition, one token at a
time, and against the two solutions the paper names (bigram and unigram counts)."""

from __future__ import annotations

import pytest
import torch

from mechsynth import models, tasks
from mechsynth.errors import ConfigError


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def reference(tokens: list[int], W: torch.Tensor, v: torch.Tensor, k: int) -> torch.Tensor:
    """Row i = Σ_{j ≤ i} (e_{x_i}ᵀ W h_j) e_{x_j}, h_j = Σ_{l ≤ j} v[j − l] e_{x_l}: the formula, one pair at a time."""
    E = torch.eye(k)
    out = torch.zeros(len(tokens), k)
    for i in range(len(tokens)):
        for j in range(i + 1):
            h = sum(v[j - l] * E[tokens[l]] for l in range(j + 1))
            out[i] += (E[tokens[i]] @ W @ h) * E[tokens[j]]
    return out


def model_with(task, W: torch.Tensor, v: torch.Tensor, n_models=None):
    model = models.build(models.parse({"kind": "minimal_induction"}), task.spec, n_models)
    with torch.no_grad():
        model.W_k.copy_(W)
        model.u.copy_(v / model.v_scale)
    return model


def test_forward_is_the_formula():
    task = tasks.make("markov_icl", {"k": 3, "length": 10})
    g = gen(1)
    W, v = torch.randn(3, 3, generator=g), torch.randn(10, generator=g)
    model = model_with(task, W, v)
    tokens = task.sample(3, gen(2)).tokens
    with torch.no_grad():
        out = model(tokens)
        for row, seq in enumerate(tokens.tolist()):
            torch.testing.assert_close(out[row], reference(seq, W, v, 3), atol=1e-5, rtol=1e-5)
        stacked = model_with(task, torch.stack([W, 2 * W]), torch.stack([v, -v]), n_models=2)
        torch.testing.assert_close(stacked(tokens)[0], out)
        torch.testing.assert_close(stacked(tokens)[1], model_with(task, 2 * W, -v)(tokens))


def test_the_bigram_and_unigram_solutions_count_tokens():
    """W = I, v = (0, 1, 0, ...): the tokens that followed earlier copies of the current one; W = 11ᵀ, v = (1, 0, ...):
    every token so far (the paper's two solutions)."""
    k, t = 3, 16
    task = tasks.make("markov_icl", {"k": k, "length": t})
    tokens = task.sample(4, gen(3)).tokens
    bigram = model_with(task, torch.eye(k), torch.eye(t)[1])(tokens).detach()
    unigram = model_with(task, torch.ones(k, k), torch.eye(t)[0])(tokens).detach()
    for row, seq in enumerate(tokens.tolist()):
        for i in range(t):
            for y in range(k):
                follows = sum(seq[j - 1] == seq[i] and seq[j] == y for j in range(1, i + 1))
                assert bigram[row, i, y] == follows
                assert unigram[row, i, y] == sum(s == y for s in seq[: i + 1])


def test_one_sgd_step_moves_v_at_its_own_learning_rate():
    task = tasks.make("markov_icl", {"k": 2, "length": 12})
    cfg = models.parse({"kind": "minimal_induction", "init_v": 0.05, "v_lr_ratio": 100.0})
    model = models.build(cfg, task.spec)
    batch = task.sample(16, gen(4))
    W, v = model.W_k.detach().clone().requires_grad_(), model.v.detach().clone().requires_grad_()
    ref = model_with(task, torch.zeros(2, 2), torch.zeros(12))  # a differentiable copy with W, v as leaves
    logits = torch.func.functional_call(ref, {"W_k": W, "u": v / ref.v_scale}, (batch.tokens,))
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten()).backward()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)  # plain SGD, as theirs
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(batch.tokens).flatten(0, 1), batch.targets.flatten()).backward()
    opt.step()
    torch.testing.assert_close(model.W_k.detach(), W.detach() - 0.01 * W.grad)
    torch.testing.assert_close(model.v.detach(), v.detach() - 0.01 * 100.0 * v.grad)


def test_refusals_are_one_line():
    with pytest.raises(ConfigError) as e:
        models.validate(models.parse({"kind": "minimal_induction"}), tasks.make("sparse_parity").spec)
    assert "model.kind" in str(e.value) and "markov_icl" in str(e.value)
    with pytest.raises(ConfigError) as e:
        models.parse({"kind": "minimal_induction", "init_W_scale": 0.0})
    assert "model.init_W_scale" in str(e.value) and "every gradient is 0" in str(e.value)
