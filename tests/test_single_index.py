"""single_index (mechsynth/tasks/single_index.py): its Hermite links against numpy's, its samples against their
definition, the MLP reading its vectors, and a run whose first layer aligns with w* (its probe's planted answer
is in planted_regression.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mechsynth import load_run, models, parse_config, tasks, train_run
from mechsynth.analysis import timeline
from mechsynth.config import ConfigError
from mechsynth.tasks.single_index import hermite


@pytest.mark.parametrize("k", range(0, 9))
def test_hermite_links_are_numpys_normalised_probabilists_polynomials(k):
    z = np.linspace(-4, 4, 101)
    want = np.polynomial.hermite_e.hermeval(z, [0] * k + [1]) / math.sqrt(math.factorial(k))
    np.testing.assert_allclose(hermite(torch.tensor(z), k).numpy(), want, rtol=1e-10, atol=1e-10)
    # unit variance and orthogonal to lower degrees under N(0, 1), by Gauss–Hermite quadrature
    nodes, weights = np.polynomial.hermite_e.hermegauss(30)
    weights = weights / weights.sum()
    h = hermite(torch.tensor(nodes), k).numpy()
    assert (weights * h * h).sum() == pytest.approx(1.0, abs=1e-9)
    assert all(abs((weights * h * hermite(torch.tensor(nodes), j).numpy()).sum()) < 1e-9 for j in range(k))


@pytest.mark.reference("single_index")
def test_samples_are_the_link_of_the_projection():
    task = tasks.make("single_index", {"d": 5, "k_star": 3, "noise": 0.0, "seed": 4})
    g = torch.Generator().manual_seed(0)
    b = task.sample(200, g)
    assert b.tokens.shape == (200, 1, 5) and b.targets.shape == (200, 1) and b.mask.all()
    w = b.truth["w_star"][0]
    assert torch.allclose(w.norm(), torch.tensor(1.0)) and torch.equal(b.truth["w_star"][7], w)
    for x, y in zip(b.tokens[:20, 0].tolist(), b.targets[:20, 0].tolist()):  # slow reference, one sample at a time
        z = sum(a * c for a, c in zip(x, w.tolist()))
        assert y == pytest.approx((z ** 3 - 3 * z) / math.sqrt(6), rel=1e-4, abs=1e-5)
    assert abs(float(b.tokens.mean())) < 0.1 and abs(float(b.tokens.std()) - 1) < 0.1
    assert torch.equal(task.sample(200, torch.Generator().manual_seed(0)).tokens, b.tokens)
    same = tasks.make("single_index", {"d": 5, "k_star": 1, "seed": 4})
    assert torch.equal(same.w_star, task.w_star)  # w* is the seed's, whatever the link
    noisy = tasks.make("single_index", {"d": 5, "k_star": 1, "noise": 0.5, "seed": 4}).sample(4000, torch.Generator())
    resid = noisy.targets[:, 0] - noisy.tokens[:, 0] @ w
    assert abs(float(resid.std()) - 0.5) < 0.03


def test_models_that_read_it_and_those_that_refuse():
    task = tasks.make("single_index", {"d": 6})
    mlp = models.build(parse_config({"task": {"name": "single_index", "d": 6}, "model": {"kind": "mlp", "width": 7}}).model,
                       task.spec)
    b = task.sample(9, torch.Generator())
    out = mlp(b.tokens)
    want = torch.relu(b.tokens[:, 0] @ mlp.W_in + mlp.b_in) @ mlp.W_out + mlp.b_out
    assert out.shape == (9, 1, 1) and torch.allclose(out[:, 0], want, atol=1e-6)
    assert task.metrics(out, b)["explained"] < 1
    with pytest.raises(ConfigError, match="model.kind"):
        parse_config({"task": {"name": "linear_regression"}, "model": {"kind": "mlp"}})  # two vectors a sequence


def test_an_mlp_learns_a_degree_one_link_and_its_units_align(tmp_path, tiny):
    cfg = tiny({"name": "single_index", "d": 16, "k_star": 1}, {"kind": "mlp", "width": 8},
               {"steps": 300, "batch_size": 64, "lr": 1e-2, "checkpoints": 4, "eval_every": 100})
    run = load_run(train_run(parse_config(cfg), tmp_path / "run", progress=False))
    assert run.metrics[-1]["eval/explained"] > 0.9, run.metrics[-1]
    tl = timeline.probe_run(run, ["single_index_alignment"], batch_size=16)
    a = tl.metrics["single_index_alignment"]["alignment"]
    assert a[0] < 0.7 and a[-1] > 0.95, a
