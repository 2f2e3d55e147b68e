"""MeZO (mechsynth/optimizers/mezo.py): its step is Malladi et al.'s Algorithm 1 — checked against autograd's
gradient on a quadratic, where the central difference is exact —, it keeps no gradients and no state, couples
weights stacked side by side (so seeds side by side refuse it), resumes bit-exact (tests/test_train.py's
contract) and trains a transformer."""

from __future__ import annotations

import pytest
import torch

from mechsynth import models, optimizers, parse_config, tasks
from mechsynth.errors import ConfigError
from mechsynth.optimizers.mezo import EPS, SEED
from mechsynth.training.train import TrainConfig, Trainer


def quadratic(params, A, b):
    flat = torch.cat([p.reshape(-1) for p in params])
    return 0.5 * flat @ A @ flat + b @ flat


def test_a_step_moves_along_z_by_the_directional_derivative():
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(3, 2, generator=g, dtype=torch.float64), torch.randn(4, generator=g, dtype=torch.float64)]
    M = torch.randn(10, 10, generator=g, dtype=torch.float64)
    A, b = M @ M.T, torch.randn(10, generator=g, dtype=torch.float64)
    before = [p.clone() for p in params]
    cfg = TrainConfig(optimizer="mezo", lr=0.05, weight_decay=0.1)
    opt = optimizers.build("mezo", params, cfg)
    loss = opt.step(lambda: quadratic(params, A, b))
    # Independent truth: z from the documented seed, the gradient from autograd.
    z = torch.Generator().manual_seed(SEED)
    zs = [torch.randn(p.shape, generator=z, dtype=torch.float64) for p in before]
    w = [p.clone().requires_grad_() for p in before]
    quadratic(w, A, b).backward()
    projected = sum(float((zi * wi.grad).sum()) for zi, wi in zip(zs, w))
    for p, p0, zi in zip(params, before, zs):
        torch.testing.assert_close(p, p0 * (1 - 0.05 * 0.1) - 0.05 * projected * zi)
    assert float(loss) == pytest.approx(float(quadratic(before, A, b)), abs=10 * EPS**2 * float(A.norm()))
    assert opt.param_groups[0]["step"] == 1  # the next step draws from SEED + 1


def test_it_needs_the_loss_and_keeps_no_gradients_or_state():
    task = tasks.make("markov_icl", {"k": 3, "length": 12})
    trainer = Trainer(
        models.build(models.TransformerConfig(n_layers=1, d_model=8), task.spec),
        task,
        TrainConfig(optimizer="mezo", lr=1e-3, batch_size=8, device="cpu"),
    )
    for _ in range(3):
        trainer.train_step()
    assert all(p.grad is None for p in trainer.module.parameters())
    assert not trainer.optimizer.state  # nothing per weight: memory stays at inference level
    with pytest.raises(RuntimeError, match="closure"):
        trainer.optimizer.step()


def test_weights_stacked_side_by_side_share_the_projected_gradient():
    """Not elementwise, as declared: two models stacked into one tensor take another step than each alone."""
    assert not optimizers.get("mezo").elementwise
    g = torch.Generator().manual_seed(1)
    init = torch.randn(2, 5, generator=g)
    targets = torch.randn(2, 5, generator=g)
    cfg = TrainConfig(optimizer="mezo", lr=0.1)
    stacked = [init.clone()]
    optimizers.build("mezo", stacked, cfg).step(lambda: ((stacked[0] - targets) ** 2).sum())
    alone = []
    for i in range(2):
        w = [init[i].clone()]
        optimizers.build("mezo", w, cfg).step(lambda: ((w[0] - targets[i]) ** 2).sum())
        alone.append(w[0])
    assert not torch.allclose(stacked[0], torch.stack(alone))
    with pytest.raises(ConfigError, match="not elementwise"):
        TrainConfig(optimizer="mezo", seeds=2)


@pytest.mark.slow
def test_mezo_lowers_a_transformers_loss():
    cfg = parse_config(
        {
            "task": {"name": "markov_icl", "k": 3, "length": 12},
            "model": {"n_layers": 1, "n_heads": 1, "d_model": 8, "attn_only": True},
            "train": {"optimizer": "mezo", "lr": 3e-3, "batch_size": 64, "steps": 300, "device": "cpu"},
        }
    )
    task = cfg.build_task()
    trainer = Trainer(models.build(cfg.model, task.spec), task, cfg.train)
    first = trainer.evaluate()["eval/loss"]
    for _ in range(300):
        trainer.train_step()
    assert trainer.evaluate()["eval/loss"] < first - 0.05, (first, trainer.evaluate())
