"""hierarchical_polynomial (mechsynth/tasks/hierarchical_polynomial.py): its samples against their definition, one at
a time; the features' moments by Monte Carlo; the link's exact mean against quadrature; and the feature_span probe
against an independent ridge fit and principal components in numpy (its planted known answer is in
planted_regression.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from mechsynth.probes import _decode, feature_span
from planted_regression import feature_layer

from mechsynth import models, parse_config, probes, tasks
from mechsynth.errors import ConfigError
from mechsynth.tasks.base import latent_values
from mechsynth.tasks.hierarchical_polynomial import link_mean


def hermite_np(z: float, q: int) -> float:
    return float(np.polynomial.hermite_e.hermeval(z, [0] * q + [1])) / math.sqrt(math.factorial(q))


@pytest.mark.reference("hierarchical_polynomial")
@pytest.mark.parametrize(
    "params",
    [
        {"d": 5, "degree": 3, "linear": 0.7, "seed": 2},
        {"d": 6, "features": 3, "rank": 3, "degree": 2, "noise": 0.0, "seed": 1},
    ],
)
def test_samples_are_the_link_of_the_quadratic_features(params):
    """Slow reference: p_i and f* from their definition, in plain Python loops over the truth's matrices A_i, the link's
    mean from the features' moments sampled here."""
    task = tasks.make("hierarchical_polynomial", params)
    d, r, q, c = task.cfg.d, task.cfg.features, task.cfg.degree, task.cfg.linear
    b = task.sample(300, torch.Generator().manual_seed(0))
    assert b.tokens.shape == (300, 1, d) and b.targets.shape == (300, 1) and b.mask.all()
    A = b.truth["A"].double().tolist()
    for i in range(r):  # symmetric, rank and spectrum as configured: eigenvalues +1, −1, … over `rank` directions
        a = np.array(A[i])
        assert np.allclose(a, a.T, atol=1e-6)
        eig = sorted(np.linalg.eigvalsh(a).round(5).tolist())
        k = task.cfg.rank or d
        assert eig == sorted([1.0 if j % 2 == 0 else -1.0 for j in range(k)] + [0.0] * (d - k))
    big = task.sample(200_000, torch.Generator().manual_seed(1))
    coef = [0] * q + [1]
    means = [
        float(np.polynomial.hermite_e.hermeval(big.truth["features"][:, i].double().numpy(), coef).mean())
        / math.sqrt(math.factorial(q))
        for i in range(r)
    ]
    for n, (x, y) in enumerate(zip(b.tokens[:12, 0].tolist(), b.targets[:12, 0].tolist())):
        total = 0.0
        for i in range(r):
            quad = sum(x[j] * A[i][j][l] * x[l] for j in range(d) for l in range(d))
            trace = sum(A[i][j][j] for j in range(d))
            frob = sum(A[i][j][l] ** 2 for j in range(d) for l in range(d))
            p = (quad - trace) / math.sqrt(2 * frob)
            assert float(b.truth["features"][n, i]) == pytest.approx(p, rel=1e-4, abs=1e-4)
            total += c * p + hermite_np(p, q) - means[i]
        want = total / math.sqrt(r * (1 + c * c))
        assert y == pytest.approx(want, rel=1e-3, abs=0.02)  # (the sampled means: a Monte Carlo error ≤ 0.005)
        assert float(b.truth["f_star"][n]) == pytest.approx(y, abs=1e-6)  # no noise
    p = big.truth["features"].double()
    assert torch.allclose(p.mean(0), torch.zeros(r, dtype=torch.float64), atol=0.01)
    assert torch.allclose(p.var(0), torch.ones(r, dtype=torch.float64), atol=0.02)
    assert abs(float(big.targets.mean())) < 0.02 * float(big.targets.std())  # the link's mean is subtracted
    assert torch.equal(task.sample(300, torch.Generator().manual_seed(0)).tokens, b.tokens)


def test_the_links_mean_is_exact():
    """E[h_q(p)] from p's cumulants against Gauss–Hermite quadrature: rank 1, p = He_2(z)/√2; rank 2, (z₁² − z₂²)/2."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(40)
    weights = weights / weights.sum()
    for q in range(1, 7):
        one = sum(w * hermite_np((z * z - 1) / math.sqrt(2), q) for z, w in zip(nodes, weights))
        two = sum(
            w1 * w2 * hermite_np((z1 * z1 - z2 * z2) / 2, q)
            for z1, w1 in zip(nodes, weights)
            for z2, w2 in zip(nodes, weights)
        )
        assert link_mean([1.0], q) == pytest.approx(one, abs=1e-9)
        assert link_mean([1.0, -1.0], q) == pytest.approx(two, abs=1e-9)
    assert link_mean([1.0], 3) == pytest.approx(8 / math.sqrt(8) / math.sqrt(6))  # E[p³] = E[(z² − 1)³]/2^{3/2}


def test_the_matrices_are_the_seeds_and_not_the_data_streams():
    task = tasks.make("hierarchical_polynomial", {"d": 6, "seed": 4})
    assert torch.equal(tasks.make("hierarchical_polynomial", {"d": 6, "seed": 4, "degree": 1}).A, task.A)
    assert not torch.equal(tasks.make("hierarchical_polynomial", {"d": 6, "seed": 5}).A, task.A)
    # a run's data stream starts from its train.seed: with train.seed = task.seed its first x is no direction of A
    first = task.sample(1, torch.Generator().manual_seed(4)).tokens[0, 0]
    assert float((task.U[0].T @ (first / first.norm())).abs().max()) < 0.99


def test_metrics_and_mistakes():
    task = tasks.make("hierarchical_polynomial", {"d": 6, "linear": 1.0})
    b = task.sample(512, torch.Generator().manual_seed(0))
    exact = task.metrics(b.targets[:, :, None], b)
    assert exact["loss"] == 0 and exact["explained"] == 1
    mean = task.metrics(torch.full_like(b.targets, float(b.targets.mean()))[:, :, None], b)
    assert mean["explained"] == pytest.approx(0, abs=1e-6) and mean["loss"] == pytest.approx(
        float(b.targets.var(unbiased=False)), rel=1e-5
    )
    for bad, field in (({"d": 4, "rank": 5}, "task.rank"), ({"noise": -1.0}, "task.noise")):
        with pytest.raises(ConfigError, match=f"^{field}:"):
            parse_config({"task": {"name": "hierarchical_polynomial", **bad}})


def test_a_three_layer_mlp_reads_it_with_an_even_first_layer():
    task = tasks.make("hierarchical_polynomial", {"d": 6})
    cfg = models.parse({"kind": "mlp", "width": 7, "depth": 2, "first_act_fn": "poly"})
    mlp = models.build(cfg, task.spec)
    x = task.sample(9, torch.Generator()).tokens
    h = torch.relu((x[:, 0] @ mlp.W_in + mlp.b_in) ** 2 @ mlp.W_hidden[0] + mlp.b_hidden[0])
    torch.testing.assert_close(mlp(x)[:, 0], h @ mlp.W_out + mlp.b_out)
    assert cfg.describe() == "MLP, width 7, 2 hidden layers, first layer x**2, then ReLU"


# ---- feature_span against numpy ----------------------------------------------------------------------------


def ridge_np(X: np.ndarray, y: np.ndarray, fit: int) -> float:
    """Held-out R² of ridge regression, the penalty picked by explicit leave-one-out refits on the fit half."""
    Xf, Xt, yf, yt = X[:fit], X[fit:], y[:fit], y[fit:]
    mu, sd = Xf.mean(0), Xf.std(0)
    keep = sd > 1e-12 * sd.max()
    Xf, Xt = (Xf[:, keep] - mu[keep]) / sd[keep], (Xt[:, keep] - mu[keep]) / sd[keep]
    ym = yf.mean()

    def solve(X: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
        return np.linalg.solve(X.T @ X + lam * fit * np.eye(X.shape[1]), X.T @ y)

    def loo(lam: float) -> float:
        errs = [(yf[i] - ym - Xf[i] @ solve(np.delete(Xf, i, 0), np.delete(yf, i) - ym, lam)) ** 2 for i in range(fit)]
        return float(np.mean(errs))

    lam = min(_decode.PENALTIES, key=loo)
    pred = Xt @ solve(Xf, yf - ym, lam) + ym
    return 1 - float(np.mean((yt - pred) ** 2) / np.var(yt))


def top_np(X: np.ndarray, y: np.ndarray, fit: int, k: int) -> float:
    mu = X[:fit].mean(0)
    V = np.linalg.svd(X[:fit] - mu, full_matrices=False)[2][:k].T
    Z = np.hstack([(X - mu) @ V, np.ones((len(X), 1))])
    w = np.linalg.lstsq(Z[:fit], y[:fit], rcond=None)[0]
    return 1 - float(np.mean((y[fit:] - Z[fit:] @ w) ** 2) / np.var(y[fit:]))


@pytest.mark.parametrize("width, depth, features", [(6, 2, 1), (5, 1, 2), (12, 3, 2)])
def test_the_probe_is_numpys_ridge_and_principal_components(width, depth, features):
    task = tasks.make("hierarchical_polynomial", {"d": 4, "features": features, "linear": 1.0})
    model = models.build(
        models.parse({"kind": "mlp", "width": width, "depth": depth, "first_act_fn": "poly"}), task.spec
    )
    batch = probes.draw("data", model, task, 160, 0)
    _, cache = model.run_with_cache(batch.tokens)
    X = cache["hook_post" if depth == 1 else f"hook_hidden.{depth - 2}"].double().numpy()
    m = probes.run("feature_span", model, task, batch_size=160).metrics
    p = batch.truth["features"].double().numpy()
    for i in range(features):
        assert m[f"span/p{i + 1}"] == pytest.approx(ridge_np(X, p[:, i], 80), abs=1e-6)
        assert m[f"top/p{i + 1}"] == pytest.approx(top_np(X, p[:, i], 80, features), abs=1e-6)
    assert m["span/target"] == pytest.approx(ridge_np(X, batch.truth["f_star"].double().numpy(), 80), abs=1e-6)
    assert m["span_mean"] == pytest.approx(np.mean([m[f"span/p{i + 1}"] for i in range(features)]))


def test_the_probe_reads_a_transformers_last_residual_stream_and_side_by_side_models():
    task = tasks.make("hierarchical_polynomial", {"d": 6})
    small = models.parse({"n_layers": 2, "d_model": 8})
    hooked = small.hooked(models.build(small, task.spec), "cpu")  # TransformerLens's model, as probes see a run's
    assert feature_span.last_hidden(hooked) == "blocks.1.hook_resid_post"
    assert probes.run("feature_span", hooked, task, batch_size=64).metrics["units"] == 8
    cfg = models.parse({"kind": "mlp", "width": 9, "depth": 2, "first_act_fn": "poly", "init_seed": 2})
    stacked = cfg.build(task.spec, n_models=2)
    both = probes.run_many(["feature_span"], stacked, task, batch_size=64)
    alone = probes.run("feature_span", models.build(cfg, task.spec), task, batch_size=64).metrics
    assert both[0]["feature_span"].metrics == pytest.approx(alone, abs=1e-6)
    assert probes.run("feature_span", feature_layer(task), task, batch_size=64).metrics["span/p1"] > 0.99


def test_the_summary_line_says_chance_and_reads_start_and_end():
    import types

    m = {"span_mean": [0.9, 0.95], "top_mean": [0.02, 0.8], "span/target": [0.3, 0.6]}
    [line] = feature_span.summary(types.SimpleNamespace(metrics={"feature_span": m}), None)
    assert "chance ≈ 0" in line and "0.02 -> 0.80" in line and "0.90 at step 0, 0.95 at the end" in line
    assert feature_span.summary(types.SimpleNamespace(metrics={}), None) == []


@pytest.mark.reference("hierarchical_polynomial")
def test_latents_match_a_slow_reference():
    """The features p_i = (xᵀA_i x − tr A_i)/√(2‖A_i‖_F²), in plain loops over the task's matrices, at the one
    position."""
    task = tasks.make("hierarchical_polynomial", {"d": 5, "features": 2, "rank": 4, "seed": 3})
    d, A = task.cfg.d, task.A.double().tolist()
    batch = task.sample(16, torch.Generator().manual_seed(2), split="eval")
    values, defined = latent_values(task, batch)["features"]
    assert values.shape == (16, 1, 2) and defined.all()
    for n, x in enumerate(batch.tokens[:, 0].tolist()):
        for i, a in enumerate(A):
            quad = sum(x[j] * a[j][l] * x[l] for j in range(d) for l in range(d))
            trace = sum(a[j][j] for j in range(d))
            frob = sum(a[j][l] ** 2 for j in range(d) for l in range(d))
            assert float(values[n, 0, i]) == pytest.approx((quad - trace) / math.sqrt(2 * frob), rel=1e-4, abs=1e-4)
