"""In-context linear regression: the sampler against its definition (the layout, x and w ~ N(0, I), the pool, sparsity,
the noise), every reference predictor against a slow per-sequence NumPy computation, the squared-error loss and
metrics, and the model kinds that cannot read vectors refusing it in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mechsynth import models, tasks
from mechsynth.errors import ConfigError
from mechsynth.tasks.base import latent_values, masked_loss
from mechsynth.training.seeds import per_model_loss


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def unpack(batch, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x [batch, example, d], y [batch, example]) read back from the tokens."""
    return batch.tokens[:, 0::2, 1:], batch.tokens[:, 1::2, 0]


def reference_predictions(x: np.ndarray, y: np.ndarray, noise: float, pool: np.ndarray | None) -> dict[str, np.ndarray]:
    """Each predictor at each example i of one sequence, from examples 0..i-1, written out from the definitions."""
    k, d = x.shape
    out = {name: np.zeros(k) for name in ("least_squares", "ridge", "averaging", "nearest_neighbours", "dmmse")}
    for i in range(k):
        X, Y, q = x[:i], y[:i], x[i]
        if i:
            w_ls = np.linalg.lstsq(X, Y, rcond=None)[0]  # minimum norm below d examples
            out["least_squares"][i] = q @ w_ls
            out["ridge"][i] = q @ (np.linalg.solve(X.T @ X + noise**2 * np.eye(d), X.T @ Y) if noise > 0 else w_ls)
            out["averaging"][i] = q @ np.mean(Y[:, None] * X, 0)
            nearest = np.argsort([np.sum((q - xj) ** 2) for xj in X])[:3]
            out["nearest_neighbours"][i] = np.mean(Y[nearest])
        if pool is not None:
            sse = np.array([np.sum((Y - X @ w) ** 2) for w in pool])
            weight = np.exp(-(sse - sse.min()) / (2 * max(noise**2, 1e-8)))
            out["dmmse"][i] = q @ (weight @ pool) / weight.sum()
    return out


@pytest.mark.reference("linear_regression")
@pytest.mark.parametrize(
    "params",
    [
        {"d": 3, "k": 8},
        {"d": 4, "k": 10, "noise": 0.5, "n_tasks": 5},
        {"d": 5, "k": 7, "sparsity": 2, "n_tasks": 3},
        {"d": 2, "k": 6, "noise": 0.2},
    ],
)
def test_predictors_match_a_per_sequence_reference(params):
    task = tasks.make("linear_regression", params)
    pool = None if task.pool is None else task.pool.double().numpy()
    for split in task.splits[1:]:
        batch = task.sample(24, gen(3), split=split)
        x, y = unpack(batch, task.cfg.d)
        for b in range(len(x)):
            want = reference_predictions(x[b].double().numpy(), y[b].double().numpy(), task.cfg.noise, pool)
            for name in task.strategies:
                got = batch.truth[name][b, 0::2].double().numpy()
                assert np.allclose(got, want[name], rtol=1e-3, atol=1e-4), (params, split, b, name, got, want[name])
                assert not batch.truth[name][b, 1::2].any()  # 0 at the y positions, which are not scored


def test_the_layout_and_the_noise():
    """x tokens (0, x), y tokens (y, 0, ...), y = w·x + σε, targets y at the x positions only."""
    for noise in (0.0, 0.5):
        task = tasks.make("linear_regression", {"d": 3, "k": 5, "noise": noise})
        batch = task.sample(4096, gen(0))
        x, y = unpack(batch, 3)
        assert batch.tokens.shape == (4096, 10, 4) and task.spec.d_input == task.spec.d_vocab == 4
        assert not batch.tokens[:, 0::2, 0].any() and not batch.tokens[:, 1::2, 1:].any()
        assert torch.equal(batch.targets[:, 0::2], y) and not batch.targets[:, 1::2].any()
        assert batch.mask[:, 0::2].all() and not batch.mask[:, 1::2].any()
        residual = y - (x @ batch.truth["w"][:, :, None])[..., 0]
        assert abs(float(residual.std()) - noise) < 0.01 + 1e-6, float(residual.std())
        assert batch.targets.dtype == batch.tokens.dtype == torch.float32
    again = task.sample(4096, gen(0))
    assert torch.equal(again.tokens, batch.tokens) and torch.equal(again.truth["w"], batch.truth["w"])


def test_x_and_w_are_standard_normal():
    task = tasks.make("linear_regression", {"d": 4, "k": 16})
    batch = task.sample(8192, gen(1))
    x, _ = unpack(batch, 4)
    for sample in (x.flatten(0, 1), batch.truth["w"]):
        assert sample.mean(0).abs().max() < 0.05
        assert (torch.cov(sample.T) - torch.eye(4)).abs().max() < 0.06
        assert abs(float(((sample / sample.std(0)) ** 4).mean()) - 3) < 0.2  # Gaussian tails, not uniform or heavier
    assert batch.truth.keys() == {"w"}  # a training batch carries no predictors


def test_sparse_weights():
    task = tasks.make("linear_regression", {"d": 6, "k": 4, "sparsity": 2})
    w = task.sample(6000, gen(2)).truth["w"]
    assert ((w != 0).sum(1) == 2).all()
    share = (w != 0).float().mean(0)
    assert (share - 2 / 6).abs().max() < 0.03  # every coordinate equally likely to be kept
    kept = w[w != 0]
    assert abs(float(kept.mean())) < 0.05 and abs(float(kept.std()) - 1) < 0.05


def test_the_task_pool():
    """A pool of M w's fixed by the task seed alone; training and eval_pool draw from it uniformly (pool_index
    names each sequence's), eval from the prior (pool_index −1, never a pool member)."""
    task = tasks.make("linear_regression", {"d": 3, "k": 4, "n_tasks": 5, "seed": 9})
    assert task.splits == ("train", "eval", "eval_pool") and task.pool.shape == (5, 3)
    assert torch.equal(task.pool, tasks.make("linear_regression", {"d": 3, "k": 4, "n_tasks": 5, "seed": 9}).pool)
    assert not torch.equal(task.pool, tasks.make("linear_regression", {"d": 3, "k": 4, "n_tasks": 5, "seed": 8}).pool)
    for split in ("train", "eval_pool"):
        batch = task.sample(5000, gen(4), split=split)
        index = batch.truth["pool_index"]
        assert torch.equal(batch.truth["w"], task.pool[index])
        counts = torch.bincount(index, minlength=5).float()
        assert (counts / 5000 - 0.2).abs().max() < 0.03, counts
    fresh = task.sample(500, gen(4), split="eval")
    assert (fresh.truth["pool_index"] == -1).all()
    assert not (fresh.truth["w"][:, None] == task.pool[None]).all(-1).any()
    # dmmse knows the pool: from one example on it predicts a pool task's y exactly
    pooled = task.sample(256, gen(5), split="eval_pool")
    err = (pooled.truth["dmmse"] - pooled.targets)[:, 2::2].abs().max()
    assert err < 1e-4, err


def test_predictors_at_known_points():
    """No examples: every predictor says 0 but dmmse (the pool's mean); from d noiseless examples on least squares
    and ridge are exact; averaging is not."""
    task = tasks.make("linear_regression", {"d": 3, "k": 8, "n_tasks": 4})
    batch = task.sample(128, gen(6), split="eval")
    x, y = unpack(batch, 3)
    for name in ("least_squares", "ridge", "averaging", "nearest_neighbours"):
        assert not batch.truth[name][:, 0].any(), name
    torch.testing.assert_close(batch.truth["dmmse"][:, 0], x[:, 0] @ task.pool.mean(0))
    exact = batch.targets[:, 2 * 3 :: 2]
    for name in ("least_squares", "ridge"):
        assert (batch.truth[name][:, 2 * 3 :: 2] - exact).abs().max() < 1e-3, name
    assert (batch.truth["averaging"][:, 2 * 3 :: 2] - exact).abs().mean() > 0.1


def test_squared_error_loss_and_metrics():
    task = tasks.make("linear_regression", {"d": 4, "k": 6, "noise": 0.3})
    batch = task.sample(64, gen(7), split="eval")
    assert task.loss_kind == "squared_error"
    ridge = batch.truth["ridge"][..., None]
    m = task.metrics(ridge, batch)
    want = float(((batch.truth["ridge"] - batch.targets)[:, 0::2] ** 2).mean())
    assert m["loss"] == pytest.approx(want, rel=1e-5) and m["normalized_loss"] == pytest.approx(want / 4, rel=1e-5)
    assert m["to_ridge"] == 0 and m["to_averaging"] > 0.01
    assert float(masked_loss(ridge, batch, task.loss_kind)) == pytest.approx(want, rel=1e-5)
    assert task.metrics(batch.targets[..., None], batch)["loss"] == 0
    # side by side: each model's own loss on its own batch, as masked_loss gives it
    other = task.sample(64, gen(8), split="eval")
    stacked = per_model_loss(
        torch.stack([ridge, torch.zeros_like(ridge)]),
        torch.stack([batch.targets, other.targets]),
        torch.stack([batch.mask, other.mask]),
        "squared_error",
    )
    assert float(stacked[0]) == pytest.approx(want, rel=1e-5)
    assert float(stacked[1]) == pytest.approx(
        float(masked_loss(torch.zeros_like(ridge), other, "squared_error")), rel=1e-6
    )


@pytest.mark.parametrize("kind", [k for k in models.names() if not models.MODEL_KINDS.get(k).reads_vectors])
def test_kinds_that_read_token_ids_refuse_vectors_in_one_line(kind):
    spec = tasks.make("linear_regression").spec
    with pytest.raises(ConfigError) as err:
        models.validate(models.parse({"kind": kind}), spec)
    assert err.value.field == "model.kind" and "vectors" in str(err.value) and "'transformer'" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "params, field",
    [
        ({"sparsity": 5, "d": 4}, "task.sparsity"),
        ({"noise": -1.0}, "task.noise"),
        ({"n_tasks": 0}, "task.n_tasks"),
        ({"k": 0}, "task.k"),
    ],
)
def test_bad_parameters_name_their_field(params, field):
    with pytest.raises(ConfigError) as err:
        tasks.make("linear_regression", params)
    assert err.value.field == field and "\n" not in str(err.value)


@pytest.mark.reference("linear_regression")
@pytest.mark.parametrize("d, k", [(3, 8), (4, 4), (5, 2)])
def test_latents_match_a_slow_reference(d, k):
    """w is the least-squares fit to the sequence's own (x, y) tokens, defined at the tokens that have seen d
    examples (counted token by token), or the last token of a kind none of which has."""
    task = tasks.make("linear_regression", {"d": d, "k": k})
    batch = task.sample(8, gen(3), split="eval")
    values, defined = latent_values(task, batch)["w"]
    for i, row in enumerate(batch.tokens.tolist()):
        seen, want = 0, []
        for p in range(2 * k):
            seen += p % 2  # a y token: its example is seen
            want.append(seen >= d)
        for kind in (0, 1):  # x tokens, y tokens
            if not any(want[p] for p in range(kind, 2 * k, 2)):
                want[2 * k - 2 + kind] = True
        assert defined[i].tolist() == want
        if k >= d:  # d examples determine w
            x = np.array([row[p][1:] for p in range(0, 2 * k, 2)])
            y = np.array([row[p][0] for p in range(1, 2 * k, 2)])
            w = np.linalg.lstsq(x, y, rcond=None)[0]
            for p in range(2 * k):
                if want[p]:
                    assert np.allclose(values[i, p].numpy(), w, atol=1e-3), (p, values[i, p], w)
