"""The fourier probe (Nanda et al. 2023) on known answers: planted logits, neurons and embeddings with Fourier
content at chosen frequencies, a planted model end to end (tests/planted.py), and a tiny transformer
trained to grok modular addition."""

from __future__ import annotations

import math
import re
import time

import pytest
import torch
from planted import PlantedFourierModel

from mechsynth import models, probes, tasks
from mechsynth.probes import ProbeError
from mechsynth.probes import fourier as fo

P, K = 113, [3, 17, 40]


def wave(p: int, k: int, linear: tuple[int, int], phase: float = 0.0) -> torch.Tensor:
    """cos(w_k(c_a a + c_b b) + phase) on the p×p grid, float64."""
    s = linear[0] * torch.arange(p)[:, None] + linear[1] * torch.arange(p)[None, :]
    return torch.cos(2 * math.pi * k * s.double() / p + phase)


def planted_logits(p: int, freqs: list[int], linear: tuple[int, int], scale: float = 4.0) -> torch.Tensor:
    """scale · Σ_k cos(w_k(c_a a + c_b b − c)): [a, b, c], float64."""
    s = (linear[0] * torch.arange(p)[:, None] + linear[1] * torch.arange(p)[None, :]).double()
    c = torch.arange(p, dtype=torch.float64)
    return scale * sum(torch.cos(2 * math.pi * k * (s[..., None] - c) / p) for k in freqs)


def split(p: int, frac: float = 0.3, seed: int = 0) -> torch.Tensor:
    return torch.rand(p, p, generator=torch.Generator().manual_seed(seed)) < frac


def test_fourier_basis_is_orthonormal_in_nandas_order():
    basis = fo.fourier_basis(7)
    torch.testing.assert_close(basis @ basis.T, torch.eye(7, dtype=torch.float64))
    x = torch.arange(7, dtype=torch.float64)
    for k in (1, 2, 3):
        assert torch.allclose(basis[2 * k - 1] * basis[2 * k - 1].norm().reciprocal(), basis[2 * k - 1])
        assert abs(float(basis[2 * k - 1] @ torch.cos(2 * math.pi * k * x / 7)) - math.sqrt(3.5)) < 1e-12
        assert abs(float(basis[2 * k] @ torch.sin(2 * math.pi * k * x / 7)) - math.sqrt(3.5)) < 1e-12
    with pytest.raises(ValueError, match="odd"):
        fo.fourier_basis(2)


@pytest.mark.parametrize("linear", [(1, 1), (1, -1)])
def test_planted_logits_restricted_keep_the_loss_and_excluded_are_uniform(linear):
    """Logits Σ_{k∈K} cos(w_k(a ∘ b − c)): restricted to K they are unchanged (loss equal to float64
    precision); with K excluded nothing is left (ln p); restricted to frequencies they lack, uniform."""
    logits, in_train = planted_logits(P, K, linear), split(P)
    full = fo.grid_loss(logits, linear)
    out = fo.losses(logits, K, linear, in_train)
    assert out["restricted_loss"] == pytest.approx(full, rel=1e-12, abs=1e-12)
    assert out["restricted_test_loss"] == pytest.approx(out["test_loss"], rel=1e-12, abs=1e-12)
    assert out["excluded_loss"] == pytest.approx(math.log(P), rel=1e-12)
    assert out["train_loss"] < 1.0 < math.log(P)  # the planted logits do answer
    other = fo.losses(logits, [5, 41], linear, in_train)
    assert other["restricted_loss"] == pytest.approx(math.log(P), rel=1e-12)
    assert other["excluded_loss"] == pytest.approx(out["train_loss"], rel=1e-12)
    part = fo.losses(logits, [17], linear, in_train)  # one of three: between
    assert full < part["restricted_loss"] < math.log(P) and out["train_loss"] < part["excluded_loss"] < math.log(P)
    # a constant per output survives restriction (Nanda et al.'s bias correction), and only that
    shifted = logits + torch.linspace(-1, 1, P, dtype=torch.float64)
    torch.testing.assert_close(
        fo.restricted_logits(shifted, K, linear) - fo.restricted_logits(logits, K, linear), shifted - logits
    )


def test_the_directions_follow_the_operation():
    """a − b's logits lie along cos/sin(w_k(a − b)), not along those of a + b."""
    logits = planted_logits(P, K, (1, -1))
    assert fo.grid_loss(fo.restricted_logits(logits, K, (1, 1)), (1, -1)) == pytest.approx(math.log(P), rel=1e-12)
    dirs = fo.sum_directions(P, K, (1, -1)).flatten(1)
    torch.testing.assert_close(dirs @ dirs.T, torch.eye(6, dtype=torch.float64))
    assert float(dirs.sum(1).abs().max()) < 1e-9  # orthogonal to the constant
    with pytest.raises(ValueError, match="distinct"):
        fo.sum_directions(P, [3, 3], (1, 1))
    with pytest.raises(ValueError, match="in 1..56"):
        fo.sum_directions(P, [57], (1, 1))


def planted_neurons(
    p: int, sizes: dict[int, int], linear: tuple[int, int], n_noise: int, seed: int = 0
) -> torch.Tensor:
    """[a, b, neuron]: for each frequency k, sizes[k] neurons — half cos(w_k(c_a a + c_b b) + φ), half Nanda et
    al.'s ReLU(cos(w_k c_a a + φ) + cos(w_k c_b b + ψ)) — then noise neurons and 3 dead ones."""
    g = torch.Generator().manual_seed(seed)
    a, b = torch.arange(p, dtype=torch.float64)[:, None], torch.arange(p, dtype=torch.float64)[None, :]
    out = []
    for k, n in sizes.items():
        for i in range(n):
            phi, psi = (torch.rand(2, generator=g, dtype=torch.float64) * 2 * math.pi).tolist()
            w = 2 * math.pi * k / p
            out.append(
                wave(p, k, linear, phi)
                if i % 2
                else torch.relu(torch.cos(w * linear[0] * a + phi) + torch.cos(w * linear[1] * b + psi))
            )
    out += [torch.randn(p, p, generator=g, dtype=torch.float64) for _ in range(n_noise)] + [torch.zeros(p, p)] * 3
    return torch.stack(out, -1)


@pytest.mark.parametrize("linear", [(1, 1), (1, -1), (1, 2)])
def test_key_frequencies_of_planted_neurons(linear):
    """Neurons clustered at K are found (largest cluster first); noise and dead neurons add none. With
    (1, 2) a neuron of frequency k varies at k in a and 2k in b: the frequency is the output's."""
    sizes = {17: 40, 3: 30, 40: 20}
    acts = planted_neurons(P, sizes, linear, n_noise=60)
    assert fo.key_frequencies(acts, linear) == [17, 3, 40]
    dominant, share = fo.dominant_frequencies(fo.neuron_fractions(acts, linear))
    assert dominant[:90].tolist() == [k for k, n in sizes.items() for _ in range(n)]
    assert bool((share[1:90:2] > 1 - 1e-9).all())  # the pure waves are all at their frequency
    assert bool((share[:90:2] > 0.5).all()) and bool((share[90:150] < 0.01).all())  # ReLU neurons: mostly
    assert dominant[-3:].tolist() == [0, 0, 0] and float(share[-3:].abs().max()) == 0
    assert fo.key_frequencies(planted_neurons(P, {}, linear, n_noise=100)) == []  # noise: no cluster
    assert fo.key_frequencies(acts[..., 130:], linear) == []  # the ReLU and pure neurons are gone
    if linear == (1, 2):
        assert fo.key_frequencies(acts, (1, 1)) != [17, 3, 40]


def test_embedding_norms_and_gini():
    g = torch.Generator().manual_seed(0)
    x = torch.arange(P, dtype=torch.float64)[:, None]
    W_E = sum(
        torch.cos(2 * math.pi * k * x / P) * torch.randn(32, generator=g, dtype=torch.float64)
        + torch.sin(2 * math.pi * k * x / P) * torch.randn(32, generator=g, dtype=torch.float64)
        for k in K
    )
    norms = fo.embed_norms(W_E)
    assert norms.shape == (56,) and all(norms[k - 1] > 1 for k in K)
    assert float(norms[[k - 1 for k in range(1, 57) if k not in K]].max()) < 1e-9
    assert fo.gini(norms) > 0.9
    assert fo.gini(fo.embed_norms(torch.randn(P, 32, generator=g, dtype=torch.float64))) < 0.15
    assert fo.gini(torch.ones(10)) == pytest.approx(0) and fo.gini(torch.tensor([0.0] * 9 + [1.0])) == pytest.approx(
        0.9
    )
    assert fo.gini(torch.zeros(4)) == 0.0


def test_to_grid_reorders_by_the_pairs_and_refuses_missing_ones():
    a, b = torch.tensor([1, 0, 1, 0]), torch.tensor([1, 1, 0, 0])
    torch.testing.assert_close(
        fo.to_grid(torch.tensor([3.0, 1.0, 2.0, 0.0]), a, b, 2), torch.tensor([[0.0, 1.0], [2.0, 3.0]])
    )
    with pytest.raises(ValueError, match="exactly once"):
        fo.to_grid(torch.zeros(4), torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0, 1, 1]), 2)


def test_probe_applies_to_linear_modular_tasks_and_models_with_an_mlp():
    add = tasks.make("modular_arithmetic", {"p": 7, "train_frac": 0.5})
    mul = tasks.make("modular_arithmetic", {"p": 7, "op": "a*b", "train_frac": 0.5})
    cfg = models.TransformerConfig(n_layers=1, n_heads=2, d_model=16, normalization="none")
    model = models.build(cfg, add.spec)
    assert probes.can_run("fourier", model, add) and probes.can_run("fourier", models.hooked(model), add)
    why = probes.why_not("fourier", model, mul)
    assert why is not None and "needs truth linear" in why and "\n" not in why
    with pytest.raises(ProbeError, match="needs truth linear"):
        probes.run("fourier", model, mul)
    attn_only = models.build(models.TransformerConfig(n_layers=1, n_heads=2, d_model=16, attn_only=True), add.spec)
    parity = tasks.make("sparse_parity", {"n": 6, "k": 2})
    for m in (attn_only, models.hooked(attn_only)):
        assert re.search("attention-only|mlp.hook_post", probes.why_not("fourier", m, add))
    # an MLP baseline of another task is refused first for its input size, which no MLP can fix
    assert "vocabulary has 3 tokens" in probes.why_not(
        "fourier", models.build(models.MLPConfig(width=8), parity.spec), add
    )
    assert "ground truth" in probes.why_not("fourier", model)
    with pytest.raises(ProbeError, match="cannot .it only samples."):
        probes.draw("all", model, parity, 8, 0)
    batch = probes.draw("all", model, add, 8, 0)
    assert batch.tokens.shape == (49, 3) and batch is probes.draw("all", model, add, 64, 1)  # listed once


def test_probe_on_a_planted_model_of_a_minus_b_without_its_cluster():
    """Only 1 neuron of frequency 12 (a cluster needs 2): 12 is not key, and its part of the logits is
    what the restricted loss misses and the excluded loss keeps."""
    task = tasks.make("modular_arithmetic", {"p": 31, "op": "a-b", "train_frac": 0.5})
    model = PlantedFourierModel(31, [3, 7, 12], [10, 14, 1], (1, -1))
    m = probes.run("fourier", model, task).metrics
    assert m["n_key_freqs"] == 2 and (m["key_freq_1"], m["key_freq_2"], m["key_freq_3"]) == (7, 3, 0)
    assert m["restricted_loss"] > m["train_loss"] + 0.1 and m["excluded_loss"] < math.log(31) - 0.1


def train_grokking(task, steps: list[int], seed: int = 0):
    """A 1-layer transformer trained full-batch with AdamW (wd 1) on the training pairs; its weights at `steps`.
    One thread, and without the run-time shape checks pytest switches on (they make each step 10x slower):
    the training is not under test here, the probe is."""
    import jaxtyping

    cfg = models.TransformerConfig(n_layers=1, n_heads=4, d_model=64, d_mlp=256, normalization="none", init_seed=seed)
    model = models.build(cfg, task.spec)
    train = task.enumerate("train")
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1.0, betas=(0.9, 0.98))
    kept, threads, checking = [], torch.get_num_threads(), jaxtyping.config.jaxtyping_disable
    torch.set_num_threads(1)
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        for step in range(steps[-1] + 1):
            if step in steps:
                kept.append({k: v.detach().clone() for k, v in model.state_dict().items()})
            if step < steps[-1]:
                loss = torch.nn.functional.cross_entropy(model(train.tokens)[:, -1], train.targets[:, -1])
                opt.zero_grad()
                loss.backward()
                opt.step()
    finally:
        jaxtyping.config.update("jaxtyping_disable", checking)
        torch.set_num_threads(threads)
    return cfg, model, kept


@pytest.mark.slow
def test_a_tiny_transformer_groks_with_few_key_frequencies(wandb_plots):
    """p = 31, 60% of the pairs, 2000 full-batch steps (about 15 s on a CPU core): the final model has 1–7
    key frequencies, a concentrated embedding, restricted loss as low as the test loss, and excluded loss
    far above the train loss; with the final key frequencies fixed (Nanda et al.), restricted loss falls
    before the test loss does. The timeline's summary, figure and W&B plots read the probe's metrics."""
    from mechsynth.analysis.timeline import Timeline

    start = time.perf_counter()
    task = tasks.make("modular_arithmetic", {"p": 31, "train_frac": 0.6, "seed": 0})
    steps = [0, 300, 600, 1000, 1500, 2000]
    cfg, model, kept = train_grokking(task, steps)
    stacked = models.build(cfg, task.spec, n_models=len(kept))  # the timeline's way: checkpoints side by side
    stacked.load_state_dict({k: torch.stack([w[k] for w in kept]) for k in kept[0]})
    results = [r["fourier"] for r in probes.run_many(["fourier"], stacked, task)]
    first, last = results[0].metrics, results[-1].metrics
    assert 1 <= last["n_key_freqs"] <= 7 and last["test_loss"] < 0.5, last  # it generalizes (chance: ln 31 = 3.4)
    assert last["restricted_loss"] < 0.1 and last["excluded_loss"] > 1.0 and last["train_loss"] < 0.01, last
    assert first["n_key_freqs"] == 0 and first["restricted_loss"] == pytest.approx(math.log(31), abs=0.05), first
    assert first["gini_embed"] < 0.15 and last["gini_embed"] > 0.3
    hooked = probes.run("fourier", models.hooked(model), task).metrics  # TransformerLens's model agrees
    assert hooked["test_loss"] == pytest.approx(last["test_loss"], rel=1e-3, abs=1e-5)
    assert hooked["key_freq_1"] == last["key_freq_1"] and hooked["n_key_freqs"] == last["n_key_freqs"]

    keys = results[-1].render["key_freqs"]
    batch = task.enumerate("all")
    in_train = fo.to_grid(batch.truth["in_train"], batch.truth["a"], batch.truth["b"], 31)
    fixed = []
    for weights in kept:
        model.load_state_dict(weights)
        fixed.append(fo.losses(fo.logits_on_all(model, task), keys, (1, 1), in_train))
    assert fixed[-1]["restricted_loss"] == pytest.approx(last["restricted_loss"], rel=1e-6, abs=1e-9)
    drop = next(i for i, f in enumerate(fixed) if f["test_loss"] < math.log(31) / 2)
    assert drop >= 1 and fixed[drop - 1]["restricted_loss"] < fixed[drop - 1]["test_loss"] / 2, fixed

    tl = Timeline(
        steps,
        [r.metrics["test_loss"] for r in results],
        {"fourier": {}},
        {"fourier": {k: [r.metrics[k] for r in results] for k in last}},
        {"fourier": {}},
        500,
    )
    tl = Timeline.from_json(tl.to_json())
    probe = probes.PROBES.get("fourier")
    lines = probe.summary(tl, task)
    assert len(lines) == 2 and f"key frequencies at step 2000: {int(last['key_freq_1'])}" in lines[0], lines
    assert "restricted loss" in lines[1] and "below ln p / 2 from step" in lines[1], lines
    assert probe.section.figure(tl, task) is not None

    probe.wandb(tl, wandb_plots)
    assert set(wandb_plots.plots) == {"plots/fourier_losses", "plots/fourier_weights"}
    assert all(len(v) == len(steps) for series in wandb_plots.plots.values() for v in series.values())
    print(f"trained and probed in {time.perf_counter() - start:.1f} s")
