"""Known answers for the probes of in-context linear regression (registered in planted.PLANTED): "models" whose
prediction is exactly one reference predictor, and a hooked model whose residual stream holds w linearly after
its layer and nothing of it before."""

from __future__ import annotations

import types

import torch
import torch.nn as nn
from torch import Tensor

from mechsynth import probes, tasks
from mechsynth.models.tl_compat import HookedRootModule, HookPoint
from mechsynth.probes import regression_strategy
from mechsynth.tasks.linear_regression import at_x


def examples(tokens: Tensor) -> tuple[Tensor, Tensor]:
    """(x [batch, example, d], y [batch, example]) of linear_regression's tokens."""
    return tokens[:, 0::2, 1:], tokens[:, 1::2, 0]


class RegressionPredictor(nn.Module):
    """A "model" whose prediction at each x is, exactly, one of linear_regression's reference predictors."""

    def __init__(self, task, strategy: str):
        super().__init__()
        self.task, self.strategy = task, strategy
        spec = task.spec
        self.d_vocab, self.d_vocab_out, self.n_ctx, self.d_input = (
            spec.d_vocab,
            spec.d_vocab_out,
            spec.n_ctx,
            spec.d_input,
        )
        self.hook_dict: dict[str, nn.Module] = {}  # no hooks: regression_strategy reads the output only
        self.anchor = nn.Parameter(torch.zeros(()))  # where the probes put their inputs

    def forward(self, tokens: Tensor) -> Tensor:
        return at_x(self.task.predictors(*examples(tokens))[self.strategy])[..., None]

    def run_with_cache(self, tokens: Tensor, names_filter=None):
        return self(tokens), {}


def known_regression_strategy() -> None:
    """Each predictor as the model is at distance 0 from itself, clearly away from the others, and nearest at
    every in-context length with an example; without noise least squares and ridge coincide and are one stage."""
    task = tasks.make("linear_regression", {"d": 3, "k": 10, "noise": 0.3, "n_tasks": 8})
    for strategy in task.strategies:
        m = probes.run("regression_strategy", RegressionPredictor(task, strategy), task).metrics
        to = {s: m[f"to/{s}"] for s in task.strategies}
        assert to[strategy] == 0 and all(v > 1e-3 for s, v in to.items() if s != strategy), (strategy, to)
        assert m["stage"] == task.strategies.index(strategy)
        assert all(m[f"nearest/{n}"] == task.strategies.index(strategy) for n in range(1, 10)), (strategy, m)
    noiseless = tasks.make("linear_regression", {"d": 3, "k": 10})
    m = probes.run("regression_strategy", RegressionPredictor(noiseless, "ridge"), noiseless).metrics
    assert m["apart/least_squares/ridge"] == 0 and m["to/least_squares"] == 0
    tl = types.SimpleNamespace(steps=[0], metrics={"regression_strategy": {k: [v] for k, v in m.items()}})
    assert regression_strategy.stages(tl) == [("least_squares≈ridge", 0)]


class PlantedW(HookedRootModule):
    """One "layer" over linear_regression's tokens: the residual stream before it is the tokens times a random
    matrix (nothing of w), after it the least-squares estimate of w from the examples so far times a random
    matrix (exactly w from d noiseless examples on), or (`hold_w=False`) random numbers. The output is 0."""

    def __init__(self, task, d_model: int = 16, hold_w: bool = True, seed: int = 0):
        super().__init__()
        spec = task.spec
        self.d_vocab, self.d_vocab_out, self.n_ctx, self.d_input = spec.d_vocab, 1, spec.n_ctx, spec.d_input
        self.cfg = types.SimpleNamespace(n_heads=1)  # one layer of one (uniform) head, as probes count them
        g = torch.Generator().manual_seed(seed)
        self.read = nn.Parameter(torch.randn(spec.d_input, d_model, generator=g))
        self.write = nn.Parameter(torch.randn(task.cfg.d, d_model, generator=g))
        self.hold_w, self.seed = hold_w, seed
        block = nn.Module()
        block.hook_resid_pre, block.hook_resid_post = HookPoint(), HookPoint()
        block.attn = nn.Module()
        block.attn.hook_pattern = HookPoint()
        self.blocks = nn.ModuleList([block])
        self.setup()

    def forward(self, tokens: Tensor) -> Tensor:
        block = self.blocks[0]
        B, T, _ = tokens.shape
        block.hook_resid_pre(tokens @ self.read)
        block.attn.hook_pattern(torch.ones(B, 1, T, T).tril() / torch.arange(1, T + 1)[:, None])
        x, y = examples(tokens.double())
        G, b = torch.cumsum(x[..., :, None] * x[..., None, :], 1), torch.cumsum(x * y[..., None], 1)  # examples 1..i
        w_hat = (torch.linalg.pinv(G, rtol=1e-10, hermitian=True) @ b[..., None])[..., 0].float()
        seen = torch.zeros(B, T, w_hat.shape[-1])
        seen[:, 1::2] = w_hat  # y_i has seen examples 1..i
        seen[:, 2::2] = w_hat[:, :-1]  # x_{i+1} too
        if not self.hold_w:
            seen = torch.randn(seen.shape, generator=torch.Generator().manual_seed(self.seed + 1))
        block.hook_resid_post(seen @ self.write)
        return torch.zeros(B, T, 1)


def known_w_decoding() -> None:
    task = tasks.make("linear_regression", {"d": 3, "k": 12})
    m = probes.run("w_decoding", PlantedW(task), task, batch_size=128).metrics
    assert m["r2"] == m["r2/L0"] and m["r2/L0"] > 0.99 and m["r2_x/L0"] > 0.99, m
    assert abs(m["r2/embed"]) < 0.1 and abs(m["r2_x/embed"]) < 0.1, m
    blind = probes.run("w_decoding", PlantedW(task, hold_w=False), task, batch_size=128).metrics
    assert abs(blind["r2/L0"]) < 0.1, blind
    markov = tasks.make("markov_icl", {"k": 3, "length": 12})
    assert "needs truth w" in probes.why_not("w_decoding", PlantedW(task), markov)


def known_single_index_alignment() -> None:
    """An MLP with one unit planted along w* (the rest random) has alignment 1; with all units random, near
    chance √(2/(πd)) on average; a unit along −w* counts as aligned."""
    from mechsynth import models, parse_config

    d, width = 64, 32
    task = tasks.make("single_index", {"d": d, "k_star": 2})
    cfg = parse_config({"task": {"name": "single_index", "d": d}, "model": {"kind": "mlp", "width": width}})
    model = models.build(cfg.model, task.spec)
    random = probes.run("single_index_alignment", model, task, batch_size=8).metrics
    assert (
        random["alignment_mean"] == random["alignment_mean"] and abs(random["alignment_mean"] - random["chance"]) < 0.05
    )
    assert random["alignment"] < 0.6, random
    with torch.no_grad():
        model.W_in[:, 5] = -3.0 * task.w_star
    planted = probes.run("single_index_alignment", model, task, batch_size=8).metrics
    assert abs(planted["alignment"] - 1) < 1e-6, planted
    transformer = models.build(
        parse_config({"task": {"name": "single_index", "d": d}, "model": {"n_layers": 1}}).model, task.spec
    )
    with torch.no_grad():  # a transformer's read-in: residual dimension 3 reads x along w*
        transformer.W_E[:, 3] = 0.5 * task.w_star
    assert abs(probes.run("single_index_alignment", transformer, task, batch_size=8).metrics["alignment"] - 1) < 1e-6
    assert "reads the layer that reads x" in probes.why_not("single_index_alignment", PlantedW(task), task)


def feature_layer(task, depth: int = 2):
    """A hand-set MLP whose last hidden layer computes the task's feature p exactly: the first layer reads x along
    A's eigen-directions u_j and squares (x**2, no bias), so it holds (u_j·x)²; with depth 2 the ReLU layer sums
    them with the eigenvalues into relu(p) (unit 0) and relu(−p) (unit 1), p = unit 0 − unit 1 (other units dead)."""
    from mechsynth import models

    k, width = task.U.shape[-1], task.U.shape[-1] + 3
    cfg = models.parse({"kind": "mlp", "width": width, "depth": depth, "act_fn": "relu", "first_act_fn": "poly"})
    model = models.build(cfg, task.spec)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.W_in[:, :k] = task.U[0]
        if depth == 2:
            w = task.s / (2 * k) ** 0.5  # p = Σ_j s_j ((u_j·x)² − 1)/√(2k)
            model.W_hidden[0, :k, 0], model.b_hidden[0, 0] = w, -w.sum()
            model.W_hidden[0, :k, 1], model.b_hidden[0, 1] = -w, w.sum()
    return model


def known_feature_span() -> None:
    """A layer that computes p holds it entirely (ridge and top component R² 1); a random narrow one holds
    nearly nothing of it (R² near 0, the chance level of a held-out fit); a model without a hidden layer is refused."""
    from mechsynth import models

    task = tasks.make("hierarchical_polynomial", {"d": 6, "linear": 1.0})
    m = probes.run("feature_span", feature_layer(task), task, batch_size=512).metrics
    assert m["span/p1"] > 0.999 and m["top/p1"] > 0.98 and m["units"] == 9, m  # (top: the sample tilts the component)
    assert probes.run("feature_span", feature_layer(task, depth=1), task, batch_size=512).metrics["span/p1"] > 0.999
    random = models.build(models.parse({"kind": "mlp", "width": 2, "depth": 2}), task.spec)
    r = probes.run("feature_span", random, task, batch_size=2048).metrics
    assert abs(r["span/p1"]) < 0.1 and abs(r["top/p1"]) < 0.1, r
    neuron = models.build(models.parse({"kind": "neuron"}), task.spec)
    assert "reads a last hidden layer" in probes.why_not("feature_span", neuron, task)
    assert "needs truth features" in probes.why_not(
        "feature_span", feature_layer(task), tasks.make("single_index", {"d": 6})
    )


REGRESSION = {
    "regression_strategy": known_regression_strategy,
    "w_decoding": known_w_decoding,
    "single_index_alignment": known_single_index_alignment,
    "feature_span": known_feature_span,
}
