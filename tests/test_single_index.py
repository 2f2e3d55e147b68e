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
from mechsynth.errors import ConfigError
from mechsynth.tasks.base import latent_values, masked_loss
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
        assert y == pytest.approx((z**3 - 3 * z) / math.sqrt(6), rel=1e-4, abs=1e-5)
    assert abs(float(b.tokens.mean())) < 0.1 and abs(float(b.tokens.std()) - 1) < 0.1
    assert torch.equal(task.sample(200, torch.Generator().manual_seed(0)).tokens, b.tokens)
    # a run's data stream starts from its train.seed: with train.seed = task.seed its first x must not be w*
    first = task.sample(1, torch.Generator().manual_seed(4)).tokens[0, 0]
    assert abs(float(first @ w / first.norm())) < 0.99
    same = tasks.make("single_index", {"d": 5, "k_star": 1, "seed": 4})
    assert torch.equal(same.w_star, task.w_star)  # w* is the seed's, whatever the link
    noisy = tasks.make("single_index", {"d": 5, "k_star": 1, "noise": 0.5, "seed": 4}).sample(4000, torch.Generator())
    resid = noisy.targets[:, 0] - noisy.tokens[:, 0] @ w
    assert abs(float(resid.std()) - 0.5) < 0.03


def test_models_that_read_it_and_those_that_refuse():
    task = tasks.make("single_index", {"d": 6})
    mlp = models.build(
        parse_config({"task": {"name": "single_index", "d": 6}, "model": {"kind": "mlp", "width": 7}}).model, task.spec
    )
    b = task.sample(9, torch.Generator())
    out = mlp(b.tokens)
    want = torch.relu(b.tokens[:, 0] @ mlp.W_in + mlp.b_in) @ mlp.W_out + mlp.b_out
    assert out.shape == (9, 1, 1) and torch.allclose(out[:, 0], want, atol=1e-6)
    assert task.metrics(out, b)["explained"] < 1
    with pytest.raises(ConfigError, match="model.kind"):
        parse_config({"task": {"name": "linear_regression"}, "model": {"kind": "mlp"}})  # two vectors a sequence


def test_an_mlp_learns_a_degree_one_link_and_its_units_align(tmp_path, tiny):
    cfg = tiny(
        {"name": "single_index", "d": 16, "k_star": 1},
        {"kind": "mlp", "width": 8},
        {"steps": 300, "batch_size": 64, "lr": 1e-2, "checkpoints": 4, "eval_every": 100},
    )
    run = load_run(train_run(parse_config(cfg), tmp_path / "run", progress=False))
    assert run.metrics[-1]["eval/explained"] > 0.9, run.metrics[-1]
    tl = timeline.probe_run(run, ["single_index_alignment"], batch_size=16)
    a = tl.metrics["single_index_alignment"]["alignment"]
    assert a[0] < 0.7 and a[-1] > 0.95, a


# ---- the neuron kind: Damian et al.'s student --------------------------------------------------------------


def neuron(d: int, degree: int, smoothing: float = 0.0, n_models=None, init_seed: int = 3):
    spec = tasks.make("single_index", {"d": d, "k_star": degree}).spec
    return (
        models.build(
            models.parse({"kind": "neuron", "degree": degree, "smoothing": smoothing, "init_seed": init_seed}), spec
        )
        if n_models is None
        else models.parse({"kind": "neuron", "degree": degree, "smoothing": smoothing, "init_seed": init_seed}).build(
            spec, n_models
        )
    )


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("lam", [0.0, 0.8, 2.5])
def test_the_smoothed_prediction_is_the_average_over_directions_orthogonal_to_w(k, lam):
    """Against its definition, sampled: E_z σ(((ŵ + λz)/‖ŵ + λz‖)·x), z uniform on the unit sphere ⟂ ŵ (in float64,
    200k directions: a Monte Carlo error of ~0.002 on these x)."""
    d = 12
    m = neuron(d, k, lam)
    x = torch.randn(6, 1, d, generator=torch.Generator().manual_seed(1))
    w = (m.W_in[:, 0] / m.W_in[:, 0].norm()).double().detach()
    z = torch.randn(200_000, d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    z = z - (z @ w)[:, None] * w
    u = w + lam * z / z.norm(dim=1, keepdim=True)
    sampled = hermite(x[:, 0].double() @ (u / u.norm(dim=1, keepdim=True)).T, k).mean(1)
    tol = 1e-5 if lam == 0 else 0.01
    torch.testing.assert_close(m(x)[:, 0, 0].double(), sampled, atol=tol, rtol=0)
    if lam == 0:  # unsmoothed: the link of the projection
        torch.testing.assert_close(m(x)[:, 0, 0], hermite(x[:, 0] @ w.float(), k), atol=1e-5, rtol=1e-5)


def test_the_neuron_starts_on_the_sphere_away_from_w_star_and_stays_on_it():
    task = tasks.make("single_index", {"d": 10, "k_star": 3, "loss": "correlation", "seed": 3})
    m = neuron(10, 3, 1.0)  # init_seed 3 = the task's seed: its first direction is not the task's w*
    assert float(m.W_in.norm()) == pytest.approx(1.0) and abs(float(m.W_in[:, 0] @ task.w_star)) < 0.9
    with torch.no_grad():
        m.W_in.mul_(3.0)
    m.project_()
    assert float(m.W_in.norm()) == pytest.approx(1.0)
    b = task.sample(64, torch.Generator().manual_seed(0))
    f = m(b.tokens)
    assert task.loss_kind == "correlation"
    loss = masked_loss(f, b, task.loss_kind)
    assert float(loss) == pytest.approx(float((1 - f[:, 0, 0] * b.targets[:, 0]).mean()), rel=1e-6)
    assert task.metrics(f, b)["loss"] == pytest.approx(float(loss), rel=1e-5)
    assert task.metrics(f, b)["squared_error"] == pytest.approx(
        float((f[:, 0, 0] - b.targets[:, 0]).square().mean()), rel=1e-5
    )


def test_neurons_side_by_side_are_separate_ones():
    stacked = neuron(9, 3, 1.2, n_models=3, init_seed=5)
    singles = [neuron(9, 3, 1.2, init_seed=5 + i) for i in range(3)]
    x = torch.randn(7, 1, 9, generator=torch.Generator().manual_seed(4))
    out = stacked(x)
    for i, s in enumerate(singles):
        assert torch.equal(stacked.W_in[i], s.W_in)
        torch.testing.assert_close(out[i], s(x), atol=1e-6, rtol=1e-6)
    with torch.no_grad():
        stacked.W_in.mul_(torch.tensor([2.0, 3.0, 4.0])[:, None, None])
    stacked.project_()
    assert torch.allclose(stacked.W_in.norm(dim=(1, 2)), torch.ones(3))


def test_the_neuron_refuses_what_it_cannot_read():
    with pytest.raises(ConfigError, match="model.kind: 'neuron' reads one input vector"):
        parse_config({"task": {"name": "sparse_parity"}, "model": {"kind": "neuron"}})
    with pytest.raises(ConfigError, match="model.smoothing"):
        parse_config({"task": {"name": "single_index", "d": 1}, "model": {"kind": "neuron", "smoothing": 1.0}})
    with pytest.raises(ConfigError, match="smoothing"):
        parse_config({"task": {"name": "single_index"}, "model": {"kind": "neuron", "smoothing": -1.0}})


@pytest.mark.slow
def test_spherical_online_sgd_recovers_w_star_and_resumes_bit_exact(tmp_path, tiny):
    """k* = 2 at d = 8: the neuron's direction comes near w* (up to sign; at a constant rate the noise keeps it
    near 0.9); the alignment probe reads it as the one unit's |cos|; a run stopped half-way and resumed ends
    with the weights of one straight through, and seeds side by side with those of separate runs."""

    def train(steps, path, seeds=1, resume=False):
        cfg = tiny(
            {"name": "single_index", "d": 8, "k_star": 2, "loss": "correlation"},
            {"kind": "neuron", "degree": 2, "smoothing": 0.5},
            {
                "steps": steps,
                "seeds": seeds,
                "batch_size": 8,
                "optimizer": "sgd",
                "lr": 0.05,
                "schedule": "constant",
                "grad_clip": 0.0,
                "eval_every": 100,
                "checkpoints": 8,
            },
        )
        return train_run(parse_config(cfg), path, resume=resume, progress=False)

    run = load_run(train(1000, tmp_path / "straight"))
    w = run.model(1000).W_in.detach()[:, 0]
    assert float(w.norm()) == pytest.approx(1.0, abs=1e-5) and abs(float(w @ run.task.w_star)) > 0.85
    tl = timeline.probe_run(run, ["single_index_alignment"])
    assert tl.metrics["single_index_alignment"]["alignment"][-1] == pytest.approx(
        abs(float(w @ run.task.w_star)), abs=1e-5
    )
    half = train(500, tmp_path / "cut")
    train(1000, half, resume=True)
    assert torch.equal(load_run(half).model(1000).W_in, run.model(1000).W_in)
    side = load_run(train(1000, tmp_path / "side", seeds=2) / "seed_0")
    torch.testing.assert_close(side.model(1000).W_in, run.model(1000).W_in, atol=1e-5, rtol=1e-5)


@pytest.mark.reference("single_index")
def test_latents_match_a_slow_reference():
    """The projection w*·x, summed coordinate by coordinate against the task's w*, at the one position."""
    task = tasks.make("single_index", {"d": 6, "k_star": 2, "noise": 0.3, "seed": 1})
    w = task.w_star.tolist()
    batch = task.sample(16, torch.Generator().manual_seed(5), split="eval")
    values, defined = latent_values(task, batch)["projection"]
    assert values.shape == (16, 1) and defined.all()
    for n, x in enumerate(batch.tokens[:, 0].tolist()):
        assert float(values[n, 0]) == pytest.approx(sum(a * c for a, c in zip(x, w)), rel=1e-5, abs=1e-5)
