"""Known answers for the probes of what a model represents (registered in planted.PLANTED): a transformer whose
residual stream holds known feature directions in superposition (Elhage et al.'s toy model: more sparse features
than dimensions), where the best linear reading and what a sparse dictionary can recover are known."""

from __future__ import annotations

import pytest
import torch

from mechsynth import models, probes
from mechsynth.tasks.base import Batch, Latent, Task, TaskSpec

POSITIONS = 8


class Planted(Task):
    """n sparse features per position, each active with probability `density` at a uniform magnitude in (0.5, 1),
    fed to the model as an n-wide input vector; its latents are the feature vector and whether feature 0 is on
    (the magnitudes stay clear of 0, so that a least-squares reading of "on" can be exact)."""

    name = "planted"
    loss_kind = "squared_error"
    truth_keys = ("features", "on0")
    latents = (Latent("features", "vector", "features"), Latent("on0", "categorical", "on0", 2))

    def __init__(self, n: int, density: float):
        super().__init__(None)
        self.n, self.density = n, density

    @property
    def spec(self) -> TaskSpec:
        names = tuple(f"f{i}" for i in range(self.n))
        return TaskSpec(self.n, 1, POSITIONS, names, ("y",), d_input=self.n)

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        on = torch.rand(batch_size, POSITIONS, self.n, generator=generator) < self.density
        x = on * (0.5 + 0.5 * torch.rand(batch_size, POSITIONS, self.n, generator=generator))
        blank = torch.zeros(batch_size, POSITIONS)
        return Batch(x, blank, torch.ones_like(blank, dtype=torch.bool), {"features": x, "on0": on[..., 0].long()})


def planted_model(n: int, d_model: int, seed: int = 0) -> torch.nn.Module:
    """A 2-layer transformer whose residual stream is x @ W_E at every place: W_E's rows are n random unit directions
    (the planted features), the positions and every block's outputs zero."""
    task = Planted(n, 0.1)
    model = models.build(models.parse({"n_layers": 2, "d_model": d_model, "n_heads": 2}), task.spec)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("W_O", "b_O", "W_out", "b_out", "W_pos")):
                p.zero_()
        directions = torch.randn(n, d_model, generator=g)
        model.embed.W_E.copy_(directions / directions.norm(dim=1, keepdim=True))
    return models.hooked(model)


def known_latents() -> None:
    """The best linear reading of n iid features from d_model < n random directions explains d_model / n of their
    variance (the residual is the projection onto the n − d_model directions the stream cannot hold); with n ≤
    d_model it explains all of it. Feature 0's on/off is read perfectly without superposition."""
    for n, d_model in ((12, 24), (48, 24)):
        result = probes.run("latents", planted_model(n, d_model), Planted(n, 0.1), batch_size=512)
        expected = min(n, d_model) / n
        for place in ("embed", "L0", "L1"):
            assert result.metrics[f"features/{place}"] == pytest.approx(expected, abs=0.03)
        assert result.metrics["features/chance"] == 0
        assert result.metrics["on0/chance"] == pytest.approx(0.9, abs=0.02)
        if n <= d_model:
            assert result.metrics["on0/L1"] > 0.99
    # a hook the user names is read as a place of its own: the stream between the zeroed attention and MLP is x·W_E
    model, task = planted_model(48, 24), Planted(48, 0.1)
    named = probes.run("latents", model, task, batch_size=512, option={"hooks": ["blocks.1.hook_resid_mid"]}).metrics
    assert named["features/blocks.1.hook_resid_mid"] == pytest.approx(named["features/L1"], abs=1e-6)
    with pytest.raises(probes.ProbeError, match="its options name hook 'blocks.9.hook_resid_mid'"):
        probes.run("latents", model, task, option={"hooks": ["blocks.9.hook_resid_mid"]})


def dictionary_on(n: int, d_model: int, density: float, kind: str) -> dict[str, float]:
    # k a little above the features active per position (1.4 here); these budgets recover them on both seeds
    options = {"kind": kind, "steps": 600 if kind == "topk" else 1500, "k": 3, "l1": 2.0, "lr": 3e-3}
    return probes.run(
        "dictionary", planted_model(n, d_model), Planted(n, density), option=options | {"sequences": 1024}
    ).metrics


def known_dictionary() -> None:
    """48 features in 24 dimensions: sparse (3 % active) a sparse autoencoder of either kind finds each (mean
    correlation after the Hungarian assignment ≥ 0.9); dense (half active), the sparsity it assumes is false, and it
    does not."""
    for kind in ("topk", "relu"):
        sparse, dense = dictionary_on(48, 24, 0.03, kind), dictionary_on(48, 24, 0.5, kind)
        assert sparse["features/mcc"] >= 0.9, (kind, sparse)
        assert dense["features/mcc"] < 0.6, (kind, dense)
        assert sparse["budget/rows"] == 512 * POSITIONS and sparse["budget/d_sae"] == 96


FEATURES = {"latents": known_latents, "dictionary": known_dictionary}
