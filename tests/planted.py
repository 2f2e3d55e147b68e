"""Hand-set models whose circuits are known exactly: ground truth for probes.

`PLANTED` maps each probe to a known-answer check: it builds a model with the probe's circuit planted
at a known place, runs the probe and asserts the answer (the planted head ranks first with a score near
its maximum, the other heads score low; or the planted quantity is recovered exactly). test_probes runs
every check, and fails for a registered probe that has none.
"""

from __future__ import annotations

import copy
import math
import types
from dataclasses import replace
from typing import Callable

import pytest
import torch
import torch.nn as nn
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from mechsynth import models, probes, tasks
from mechsynth.probes import llc, sharpness
from mechsynth.tasks.base import Batch, masked_loss
from mechsynth.models.tl_compat import hooked_transformer
from planted_features import FEATURES  # what a model represents: latents and dictionaries, in a file of their own
from planted_regression import REGRESSION  # in-context linear regression's probes, in a file of their own


def _layer(n_heads: int, d_model: int, d_head: int, g: torch.Generator) -> dict[str, Tensor]:
    """One attention layer of heads with small random weights (near-uniform attention, small writes)."""
    a = {w: torch.randn(n_heads, d_model, d_head, generator=g) * 0.1 for w in ("W_Q", "W_K", "W_V")}
    a["W_O"] = torch.randn(n_heads, d_head, d_model, generator=g) * 0.1
    return a | {b: torch.zeros(n_heads, d_head) for b in ("b_Q", "b_K", "b_V")} | {"b_O": torch.zeros(d_model)}


def _embeddings(V: int, N: int, d_model: int, d_out: int) -> dict[str, Tensor]:
    """Residual stream = [token one-hot | position one-hot | zeros ...]; the unembedding reads nothing."""
    sd = {
        "embed.W_E": torch.zeros(V, d_model),
        "pos_embed.W_pos": torch.zeros(N, d_model),
        "unembed.W_U": torch.zeros(d_model, d_out),
        "unembed.b_U": torch.zeros(d_out),
    }
    sd["embed.W_E"][:, :V] = torch.eye(V)
    sd["pos_embed.W_pos"][:, V : V + N] = torch.eye(N)
    return sd


def _config(n_layers: int, n_heads: int, d_model: int, d_head: int) -> models.TransformerConfig:
    return models.TransformerConfig(
        n_layers=n_layers, n_heads=n_heads, d_model=d_model, d_head=d_head, attn_only=True, normalization="none"
    )


def _others_below(per_head: Tensor, layer: int, head: int, bound: float) -> bool:
    others = per_head.clone()
    others[layer, head] = -math.inf
    return bool(others.max() < bound)


# ---- previous token and induction -----------------------------------------------------------------


def _plant_previous_token(a: dict[str, Tensor], h: int, V: int, N: int, big: float, offset: int = 1) -> None:
    """Head h of layer weights `a` as an exact previous-token head on the residual stream [token one-hot |
    position one-hot | previous token one-hot]: query position i · key position j = big iff j = i − offset, and it
    writes the key's token into the third block."""
    pos, prev = slice(V, V + N), slice(V + N, 2 * V + N)
    a["W_Q"][h, pos, :N] = torch.eye(N)
    a["W_K"][h, pos, :N] = big * torch.eye(N).roll(offset, dims=1)
    for j in range(N - offset, N):  # the last positions have no successor (roll wraps them round)
        a["W_K"][h, V + j, j + offset - N] = 0
    a["W_V"][h, :V, :V] = torch.eye(V)
    a["W_O"][h, :V, prev] = torch.eye(V)


def planted_induction_model(vocab: int = 10, n_ctx: int = 40, n_heads: int = 4, seed: int = 0, offset: int = 1):
    """2 layers: an exact previous-token head in layer 0 (looking `offset` tokens back) and an induction head in layer 1, at random
    head indices; every other head has small random weights. Returns (hooked model, prev head, induction head).

    Residual stream = [token one-hot | position one-hot | previous token one-hot]. The previous-token
    head matches query position i with key position i-1 and writes the key's token into the third
    block; the induction head matches the query's token against that block and copies the key's token.
    """
    g = torch.Generator().manual_seed(seed)
    V, N = vocab, n_ctx
    d_model, d_head = 2 * V + N, max(V, N)
    tok, prev = slice(0, V), slice(V + N, 2 * V + N)
    big = 60.0 * math.sqrt(d_head)
    sd = _embeddings(V, N, d_model, V)
    sd["unembed.W_U"][tok] = 5 * torch.eye(V)
    heads = torch.randint(n_heads, (2,), generator=g).tolist()
    for layer in range(2):
        a = _layer(n_heads, d_model, d_head, g)
        h = heads[layer]
        for w in ("W_Q", "W_K", "W_V", "W_O"):
            a[w][h] = 0
        if layer == 0:
            _plant_previous_token(a, h, V, N, big, offset)
        else:  # induction: query token · key's previous token, then copy the key's token
            a["W_Q"][h, tok, :V] = big * torch.eye(V)
            a["W_K"][h, prev, :V] = torch.eye(V)
            a["W_V"][h, tok, :V] = torch.eye(V)
            a["W_O"][h, :V, tok] = 3 * torch.eye(V)  # outvotes the direct path's "same token again"
        sd |= {f"blocks.{layer}.attn.{k}": v for k, v in a.items()}
    return hooked_transformer(_config(2, n_heads, d_model, d_head), V, V, N, sd), heads[0], heads[1]


def known_previous_token() -> None:
    model, head, _ = planted_induction_model(vocab=10, n_ctx=40, n_heads=4, seed=3)
    result = probes.run("previous_token", model)
    assert result.top_heads(1)[0][:2] == (0, head) and result.per_head[0, head] >= 0.9, result.per_head
    assert _others_below(result.per_head, 0, head, 0.3), result.per_head
    for offset in (1, 2):  # a head looking further back shows in offset<d>/, and only there
        model, head, _ = planted_induction_model(vocab=10, n_ctx=40, n_heads=3, seed=5, offset=offset)
        result = probes.run("previous_token", model)
        back = result.per_head[0, head] if offset == 1 else result.metrics[f"offset{offset}/L0H{head}"]
        assert back >= 0.9, (offset, back)
        others = [result.per_head[0, head]] + [result.metrics[f"offset{d}/L0H{head}"] for d in (2, 3)]
        assert max(float(v) for i, v in enumerate(others) if i + 1 != offset) < 0.1, (offset, others)


def known_induction() -> None:
    model, _, head = planted_induction_model(vocab=10, n_ctx=40, n_heads=4, seed=3)
    result = probes.run("induction", model)
    assert result.top_heads(1)[0][:2] == (1, head) and result.per_head[1, head] >= 0.9, result.per_head
    assert _others_below(result.per_head, 1, head, 0.3), result.per_head
    assert result.metrics[f"copying/L1H{head}"] > 0.9
    assert result.metrics["icl_score"] < -1.0  # the second copy is predicted, the first is not
    assert set(result.render["heads"]) >= {f"L1H{head}"}


# ---- duplicate token ----------------------------------------------------------------------------


def planted_duplicate_model(vocab: int = 10, n_ctx: int = 40, n_heads: int = 4, seed: int = 0):
    """2 layers: an exact duplicate-token head in layer 1 at a random head index. Returns (hooked model, head).

    Residual stream = [token one-hot | position one-hot]; the layer-0 heads attend at random and write
    nothing, so layer 1 reads the embeddings as they are. The planted head scores a key +big for the
    query's token and -big for the query's own position: all its attention goes to earlier copies of
    the query's token (where there are none, it spreads over the prefix, which the probe does not score).
    """
    g = torch.Generator().manual_seed(seed)
    V, N = vocab, n_ctx
    d_model = d_head = V + N
    big = 60.0 * math.sqrt(d_head)
    sd = _embeddings(V, N, d_model, V)
    head = int(torch.randint(n_heads, (1,), generator=g))
    layers = [_layer(n_heads, d_model, d_head, g) for _ in range(2)]
    layers[0]["W_O"].zero_()
    a = layers[1]
    for w in ("W_Q", "W_K", "W_V", "W_O"):
        a[w][head] = 0
    a["W_Q"][head, :V, :V] = big * torch.eye(V)  # same token: +big
    a["W_K"][head, :V, :V] = torch.eye(V)
    a["W_Q"][head, V:, V:] = big * torch.eye(N)  # same position: -big (a token is no copy of itself)
    a["W_K"][head, V:, V:] = -torch.eye(N)
    for layer, weights in enumerate(layers):
        sd |= {f"blocks.{layer}.attn.{k}": v for k, v in weights.items()}
    return hooked_transformer(_config(2, n_heads, d_model, d_head), V, V, N, sd), head


def known_duplicate_token() -> None:
    model, head = planted_duplicate_model(vocab=10, n_ctx=40, n_heads=4, seed=1)
    result = probes.run("duplicate_token", model)  # random tokens over 10 symbols: plenty of repeats
    assert result.top_heads(1)[0][:2] == (1, head), result.per_head
    assert abs(float(result.per_head[1, head]) - 1.0) < 1e-3, result.per_head
    assert _others_below(result.per_head, 1, head, 0.3), result.per_head


# ---- sparse selection ---------------------------------------------------------------------------


def planted_selection_model(length: int, support: list[int], n_heads: int = 3, seed: int = 0):
    """1 layer: one head attends from the readout position (the last) uniformly onto `support`;
    the others have small random weights. Returns (hooked model, the planted head)."""
    g = torch.Generator().manual_seed(seed)
    V, N = 3, length + 1
    d_model, d_head = V + N, 4
    sd = _embeddings(V, N, d_model, 2)
    sd["unembed.W_U"] = torch.randn(d_model, 2, generator=g)
    a = _layer(n_heads, d_model, d_head, g)
    h = int(torch.randint(n_heads, (1,), generator=g))
    a["W_Q"][h] = 0
    a["W_K"][h] = 0
    a["W_Q"][h, V + N - 1, 0] = 100.0  # the readout position asks...
    for s in support:
        a["W_K"][h, V + s, 0] = 1.0  # ...and only the support answers
    sd |= {f"blocks.0.attn.{k}": v for k, v in a.items()}
    return hooked_transformer(_config(1, n_heads, d_model, d_head), V, 2, N, sd), h


def known_sparse_selection() -> None:
    for name, params in (
        ("sparse_parity", {"n": 12, "k": 3, "seed": 4}),
        ("sparse_boolean", {"length": 12, "s": 3, "seed": 4}),
    ):
        task = tasks.make(name, params)
        model, head = planted_selection_model(12, task.support.tolist())
        result = probes.run("sparse_selection", model, task)
        assert result.top_heads(1)[0][:2] == (0, head) and result.per_head[0, head] >= 0.9, (name, result.per_head)
        assert _others_below(result.per_head, 0, head, 0.5), (name, result.per_head)
        assert result.metrics["support_recovered"] == 1.0, name


def planted_majority_model(task, n_heads: int = 3, seed: int = 0):
    """1 layer computing sparse_boolean's majority of 3 exactly: one head attends from the readout uniformly onto
    the support and copies the bits' one-hots into two dimensions of their own, which alone the unembedding
    reads (logit 1 - logit 0 ∝ ones - zeros); the other heads attend at random and write nothing. Returns the
    model and the planted head; its circuit: input -> head.v (the bits), head -> logits."""
    g = torch.Generator().manual_seed(seed)
    V, N = 3, task.cfg.length + 1
    d_model, d_head = V + N + 2, 4
    sd = _embeddings(V, N, d_model, 2)
    sd["unembed.W_U"][V + N :, :] = 10 * torch.eye(2)
    a = _layer(n_heads, d_model, d_head, g)
    a["W_O"].zero_()
    h = int(torch.randint(n_heads, (1,), generator=g))
    a["W_Q"][h], a["W_K"][h], a["W_V"][h] = 0, 0, 0
    a["W_Q"][h, V + N - 1, 0] = 100.0
    a["W_K"][h, V + task.support, 0] = 1.0
    a["W_V"][h, :2, :2] = torch.eye(2)  # bit 0 -> d0, bit 1 -> d1
    a["W_O"][h, :2, V + N :] = torch.eye(2)
    sd |= {f"blocks.0.attn.{k}": v for k, v in a.items()}
    return hooked_transformer(_config(1, n_heads, d_model, d_head), V, 2, N, sd), h


def known_circuit() -> None:
    task = tasks.make("sparse_boolean", {"length": 12, "s": 3, "function": "majority", "seed": 4})
    model, h = planted_majority_model(task)
    truth = {f"input->L0H{h}.v", f"L0H{h}->logits"}
    for method in ("patching", "eap", "eap_ig", "acdc"):
        r = probes.run("circuit", model, task, option={"method": method})
        kept = {k[3:] for k, v in r.metrics.items() if k.startswith("in/") and v == 1}
        assert kept == truth, (method, kept)
        assert r.metrics["faithfulness"] == pytest.approx(1.0, abs=1e-4), (method, r.metrics["faithfulness"])
        assert r.metrics["auc_positions"] == 1.0 and abs(r.metrics["control"]) < 1e-5, method
        assert r.metrics["gap"] > 1 and r.metrics["final_faithfulness"] == pytest.approx(1.0, abs=1e-4)


# ---- automaton shortcut ---------------------------------------------------------------------------


def planted_counting_model(task, n_heads: int = 3, seed: int = 0):
    """2 layers over `task`'s vocabulary and context: one prefix-averaging ("counting") head in layer 1
    at a random head index, whose queries and keys are zero, so it attends uniformly over the prefix;
    every other head attends to its own position only. Returns (hooked model, the counting head)."""
    g = torch.Generator().manual_seed(seed)
    spec = task.spec
    V, N = spec.d_vocab, spec.n_ctx
    d_model, d_head = V + N, N
    big = 60.0 * math.sqrt(d_head)
    sd = _embeddings(V, N, d_model, spec.d_vocab_out)
    head = int(torch.randint(n_heads, (1,), generator=g))
    for layer in range(2):
        a = {k: v.zero_() for k, v in _layer(n_heads, d_model, d_head, g).items()}  # heads write nothing
        for h in range(n_heads):
            if (layer, h) != (1, head):  # own position: +big
                a["W_Q"][h, V:, :] = big * torch.eye(N)
                a["W_K"][h, V:, :] = torch.eye(N)
        sd |= {f"blocks.{layer}.attn.{k}": v for k, v in a.items()}
    return hooked_transformer(_config(2, n_heads, d_model, d_head), V, spec.d_vocab_out, N, sd), head


def known_automaton_shortcut() -> None:
    task = tasks.make("automata", {"automaton": "dihedral", "n": 4, "length": 12})
    model, head = planted_counting_model(task)
    result = probes.run("automaton_shortcut", model, task, batch_size=16)
    assert result.top_heads(1)[0][:2] == (1, head), result.per_head
    assert abs(float(result.per_head[1, head]) - 1.0) < 1e-4, result.per_head  # uniform over the prefix
    assert _others_below(result.per_head, 1, head, 0.01), result.per_head  # one key each: entropy 0
    assert set(result.render["heads"]) == {f"L1H{head}"}


# ---- hidden progress ------------------------------------------------------------------------------


def known_hidden_progress() -> None:
    """Move the input-facing rows of the support a lot and the others a little: the probe must say so."""
    task = tasks.make("sparse_parity", {"n": 10, "k": 3, "seed": 2})
    for cfg in (models.MLPConfig(width=16), models.TransformerConfig(n_layers=1, n_heads=2, d_model=16)):
        init = models.build(cfg, task.spec)
        model = copy.deepcopy(init)
        with torch.no_grad():
            weights = getattr(model, init.input_weights)
            weights[:10] += 0.01
            weights[task.support, 3] += 0.5
        if isinstance(cfg, models.TransformerConfig):  # probe TransformerLens's model against our step-0 module
            model = models.hooked(model)
        m = probes.run("hidden_progress", model, task, init=init).metrics
        assert abs(m["drift_inf"] - 0.51) < 1e-5 and abs(m["drift_on_support"] - 0.51) < 1e-5, m
        assert abs(m["drift_off_support"] - 0.01) < 1e-5 and abs(m["drift_ratio"] - 51) < 0.051, m
        assert abs(m["topk_drift_ratio"] - 51) < 0.051, m  # the top |S| rows are S here (a decoy: test_parity_models)
        assert m["support_recovered"] == 1.0, m
        assert probes.run("hidden_progress", init, task, init=init).metrics["drift_inf"] == 0


# ---- in-context strategy --------------------------------------------------------------------------


class PredictorModel(nn.Module):
    """A "model" whose next-token distribution is, exactly, one of markov_icl's reference predictors
    (the log of its probabilities as logits): icl_strategy must find it at KL 0 and name it."""

    def __init__(self, task, strategy: str):
        super().__init__()
        self.task, self.strategy = task, strategy
        self.d_vocab, self.n_ctx = task.spec.d_vocab, task.spec.n_ctx
        self.hook_dict: dict[str, nn.Module] = {}  # no hooks: icl_strategy reads the logits only
        self.anchor = nn.Parameter(torch.zeros(()))  # where the probes put their inputs

    def forward(self, tokens: Tensor) -> Tensor:
        return self.task.predictors(tokens)[self.strategy].log()

    def run_with_cache(self, tokens: Tensor, names_filter=None):
        return self(tokens), {}


def known_icl_strategy() -> None:
    # alpha = 0.5: the Bayes predictor is add-0.5, not the n-gram's add-one, so each strategy is distinct.
    task = tasks.make("markov_icl", {"k": 3, "length": 32, "alpha": 0.5})
    for strategy in ("uniform", "unigram", "ngram", "bayes"):
        result = probes.run("icl_strategy", PredictorModel(task, strategy), task)
        kl = {k[3:]: v for k, v in result.metrics.items() if k.startswith("kl/")}
        assert list(kl) == list(task.strategies) and abs(kl[strategy]) < 1e-5, (strategy, kl)
        assert all(v > 1e-3 for s, v in kl.items() if s != strategy), (strategy, kl)
        assert result.render["nearest"] == strategy and result.metrics["stage"] == task.strategies.index(strategy)


# ---- Fourier features (modular arithmetic) ----------------------------------------------------------


class PlantedFourierModel(nn.Module):
    """A "model" of c = c_a·a + c_b·b mod p with Nanda et al.'s algorithm planted exactly at the frequencies K:
    its logits at "=" are 4·Σ_{k∈K} cos(w_k(c_a a + c_b b − c)), w_k = 2πk/p; its MLP neurons there
    (`blocks.0.mlp.hook_post`) are `sizes[i]` neurons ReLU(cos(w_k c_a a + φ) + cos(w_k c_b b + ψ)) for the
    i-th k of K, then `n_noise` neurons of random values and 2 dead ones; the residues' embedding rows vary at
    the frequencies K only. The fourier probe must find K, the logits' loss restricted to K, and chance without K."""

    def __init__(
        self, p: int, K: list[int], sizes: list[int], linear: tuple[int, int], n_noise: int = 12, seed: int = 0
    ):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.p, self.K, self.linear = p, K, linear
        self.d_vocab, self.n_ctx = p + 1, 3
        self.hook_dict: dict[str, nn.Module] = {"blocks.0.mlp.hook_post": nn.Identity()}
        x = torch.arange(p, dtype=torch.float64)[:, None]
        d_model = 8
        residues = sum(
            torch.cos(2 * math.pi * k * x / p) * torch.randn(d_model, generator=g, dtype=torch.float64)
            + torch.sin(2 * math.pi * k * x / p) * torch.randn(d_model, generator=g, dtype=torch.float64)
            for k in K
        )
        self.W_E = nn.Parameter(torch.cat([residues, torch.randn(1, d_model, generator=g, dtype=torch.float64)]))
        n_neurons = sum(sizes) + n_noise
        for name, shape in (
            ("W_Q", (1, 2, d_model, 4)),
            ("W_K", (1, 2, d_model, 4)),
            ("W_V", (1, 2, d_model, 4)),
            ("W_O", (1, 2, 4, d_model)),
            ("W_in", (1, d_model, n_neurons)),
            ("W_out", (1, n_neurons, d_model)),
            ("W_U", (d_model, p)),
        ):
            setattr(self, name, nn.Parameter(torch.randn(*shape, generator=g, dtype=torch.float64)))
        self.freq_of = [k for k, n in zip(K, sizes) for _ in range(n)]  # each planted neuron's frequency
        self.phases = torch.rand(len(self.freq_of), 2, generator=g, dtype=torch.float64) * 2 * math.pi
        self.noise = torch.randn(p, p, n_noise, generator=g, dtype=torch.float64)

    def _answer(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        return tokens[:, 0].double(), tokens[:, 1].double()

    def forward(self, tokens: Tensor) -> Tensor:
        a, b = self._answer(tokens)
        s = self.linear[0] * a + self.linear[1] * b
        c = torch.arange(self.p, dtype=torch.float64)
        logits = torch.zeros(len(tokens), 3, self.p, dtype=torch.float64)
        logits[:, -1] = 4 * sum(torch.cos(2 * math.pi * k * (s[:, None] - c) / self.p) for k in self.K)
        return logits

    def run_with_cache(self, tokens: Tensor, names_filter=None):
        a, b = self._answer(tokens)
        w = 2 * math.pi * torch.tensor(self.freq_of, dtype=torch.float64) / self.p
        planted = torch.relu(
            torch.cos(w * self.linear[0] * a[:, None] + self.phases[:, 0])
            + torch.cos(w * self.linear[1] * b[:, None] + self.phases[:, 1])
        )
        noise = self.noise[tokens[:, 0], tokens[:, 1]]
        acts = torch.zeros(len(tokens), 3, planted.shape[1] + noise.shape[1] + 2, dtype=torch.float64)
        acts[:, -1, : planted.shape[1]] = planted
        acts[:, -1, planted.shape[1] : -2] = noise
        return self(tokens), {"blocks.0.mlp.hook_post": acts}


def known_fourier() -> None:
    for op in ("a+b", "a-b"):
        task = tasks.make("modular_arithmetic", {"p": 31, "op": op, "train_frac": 0.5})
        linear = tuple(task.enumerate("all").truth["linear"])  # (1, 1) or (1, -1)
        model = PlantedFourierModel(31, [3, 7, 12], [10, 14, 8], linear)
        result = probes.run("fourier", model, task)
        m = result.metrics
        assert result.render["key_freqs"] == [7, 3, 12], (op, result.render["key_freqs"])  # largest cluster first
        assert [m[f"key_freq_{i}"] for i in range(1, 5)] == [7, 3, 12, 0] and m["n_key_freqs"] == 3, (op, m)
        n = 10 + 14 + 8 + 12 + 2
        assert result.render["dominant"][:32].tolist() == model.freq_of, (op, result.render["dominant"])
        assert result.render["dominant"][-2:].tolist() == [0, 0], op  # dead neurons prefer no frequency
        assert all(m[f"neurons_k{k}"] >= (size - 0.5) / n for k, size in ((3, 10), (7, 14), (12, 8))), (op, m)
        assert abs(sum(m[f"neurons_k{k}"] for k in range(1, 16)) - 44 / n) < 1e-9, (op, m)  # all but the dead
        full = (task.cfg.n_train * m["train_loss"] + (31**2 - task.cfg.n_train) * m["test_loss"]) / 31**2
        assert abs(m["restricted_loss"] - full) < 1e-9, (op, m)  # the logits are all at K: restricting keeps them
        assert abs(m["restricted_test_loss"] - m["test_loss"]) < 1e-9, (op, m)
        assert abs(m["excluded_loss"] - math.log(31)) < 1e-9, (op, m)  # nothing is left: uniform
        assert all(m[f"embed_norm_k{k}"] > 1 for k in (3, 7, 12)), (op, m)
        assert all(m[f"embed_norm_k{k}"] < 1e-9 for k in range(1, 16) if k not in (3, 7, 12)), (op, m)
        assert m["gini_embed"] > 0.75, (op, m)  # 3 equal norms of 15: 0.8
        squares = sum(
            float(getattr(model, w).detach().pow(2).sum())
            for w in ("W_E", "W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "W_U")
        )
        assert abs(m["weight_norm_sq"] - squares) < 1e-9 * squares, (op, m)


# ---- factual recall ---------------------------------------------------------------------------------

RECALL = {"subjects": 16, "relations": 3, "answers": 4, "noise": 5, "length": 10, "seed": 1}
TYPE_LOGIT, FACT_LOGIT = 2.0, 4.0  # t on the relation's answer set, c on a stored answer


def planted_recall_weights(task, where: str, seed: int = 0) -> tuple[models.TransformerConfig, dict[str, Tensor]]:
    """1 layer, 2 heads, no LayerNorm, over factual_recall's vocabulary, with the facts stored in the MLP
    (`where="mlp"`) or in head 0's value/output map (`"attn"`). Returns (config, weights).

    Residual stream = [subject one-hot (S) | relation one-hot (R) | end token (1) | answer logits (R·D)];
    noise tokens and positions embed to 0. From the end token head 0 attends only to the subject and head 1
    only to the relation (scores ±1000: exactly one-hot patterns); head 1 copies the relation into its
    block, which the unembedding reads as t on that relation's answer set (the type). "mlp": head 0 copies
    the subject into its block and neuron (s, r) = ReLU(subject s + relation r − 1) writes c on answer
    facts[s, r]. "attn": head 0 writes c on every answer of its subject, facts[s, ·] (one per relation),
    and the MLP writes nothing. Either way the end logits are exactly t·[a in r's set] + c·[a = facts[s, r]]
    (+ c on the subject's other answers for "attn", of other types): the fact wins by t."""
    g = torch.Generator().manual_seed(seed)
    S, R, D = task.cfg.subjects, task.cfg.relations, task.cfg.answers
    subj, rel, end, ans = slice(0, S), slice(S, S + R), S + R, slice(S + R + 1, S + R + 1 + R * D)
    d_model, d_head, V = S + R + 1 + R * D, max(S, R), task.spec.d_vocab
    sd = {
        "embed.W_E": torch.zeros(V, d_model),
        "pos_embed.W_pos": torch.zeros(task.spec.n_ctx, d_model),
        "unembed.W_U": torch.zeros(d_model, R * D),
        "unembed.b_U": torch.zeros(R * D),
    }
    sd["embed.W_E"][:S, subj] = torch.eye(S)
    sd["embed.W_E"][S : S + R, rel] = torch.eye(R)
    sd["embed.W_E"][task.end_token, end] = 1
    sd["unembed.W_U"][ans] = torch.eye(R * D)
    for r in range(R):
        sd["unembed.W_U"][S + r, D * r : D * (r + 1)] = TYPE_LOGIT
    a = {k: v.zero_() for k, v in _layer(2, d_model, d_head, g).items()}
    for h, block, n in ((0, subj, S), (1, rel, R)):
        a["W_Q"][h, end, 0] = 1000.0 * math.sqrt(d_head)
        a["W_K"][h, block, 0] = 1.0
        a["W_V"][h, block, :n] = torch.eye(n)
    a["W_O"][1, :R, rel] = torch.eye(R)
    n_mlp = S * R
    mlp = {
        "W_in": torch.zeros(d_model, n_mlp),
        "b_in": torch.zeros(n_mlp),
        "W_out": torch.zeros(n_mlp, d_model),
        "b_out": torch.zeros(d_model),
    }
    facts = task.facts
    if where == "mlp":
        a["W_O"][0, :S, subj] = torch.eye(S)
        for s in range(S):
            for r in range(R):
                mlp["W_in"][s, s * R + r] = mlp["W_in"][S + r, s * R + r] = 1.0
                mlp["W_out"][s * R + r, S + R + 1 + facts[s, r]] = FACT_LOGIT
        mlp["b_in"] -= 1.0
    elif where == "attn":
        for s in range(S):
            a["W_O"][0, s, S + R + 1 + facts[s]] = FACT_LOGIT
        mlp["W_in"] = torch.randn(d_model, n_mlp, generator=g)  # live neurons that write nothing
    else:
        raise ValueError(f"where: 'mlp' or 'attn', got {where!r}")
    sd |= {f"blocks.0.attn.{k}": v for k, v in a.items()} | {f"blocks.0.mlp.{k}": v for k, v in mlp.items()}
    cfg = models.TransformerConfig(
        n_layers=1, n_heads=2, d_model=d_model, d_head=d_head, d_mlp=n_mlp, normalization="none", act_fn="relu"
    )
    return cfg, sd


def recall_reference(batch, task, where: str, ablate: str | None) -> dict[str, float]:
    """acc, type_acc, loss and type_loss of `planted_recall_weights`'s model on `batch`, worked out by hand
    in plain Python: each sequence's end-position attention output (subject and relation one-hots) and MLP
    output, with the ablated one (`ablate`: "mlp", "attn" or None) replaced by its mean over the batch."""
    S, R, D = task.cfg.subjects, task.cfg.relations, task.cfg.answers
    facts = task.facts.tolist()
    subjects, relations = batch.truth["subject"].tolist(), batch.truth["relation"].tolist()
    B = len(subjects)

    def onehot(i: int, n: int) -> list[float]:
        return [float(j == i) for j in range(n)]

    def mean(rows: list[list[float]]) -> list[float]:
        return [sum(col) / len(rows) for col in zip(*rows)]

    attn = [(onehot(s, S), onehot(r, R)) for s, r in zip(subjects, relations)]
    if ablate == "attn":
        attn = [(mean([f for f, _ in attn]), mean([f for _, f in attn]))] * B

    def mlp_out(fs: list[float], fr: list[float]) -> list[float]:
        out = [0.0] * (R * D)
        for s in range(S):
            for r in range(R):
                out[facts[s][r]] += FACT_LOGIT * max(0.0, fs[s] + fr[r] - 1) if where == "mlp" else 0.0
        return out

    mlp = [mlp_out(fs, fr) for fs, fr in attn]
    if ablate == "mlp":  # its mean in the unablated model
        mlp = [mean([mlp_out(onehot(s, S), onehot(r, R)) for s, r in zip(subjects, relations)])] * B
    acc = type_acc = loss = type_loss = 0.0
    for i, (s, r) in enumerate(zip(subjects, relations)):
        fs, fr = attn[i]
        logits = [TYPE_LOGIT * fr[a // D] + mlp[i][a] for a in range(R * D)]
        if where == "attn":  # head 0 writes c on each of the attended subjects' answers
            for s2 in range(S):
                for a in facts[s2]:
                    logits[a] += FACT_LOGIT * fs[s2]
        pred = max(range(R * D), key=lambda a: (logits[a], -a))  # the first of the largest, as torch's argmax
        z = sum(math.exp(v) for v in logits)
        acc += pred == facts[s][r]
        type_acc += pred // D == r
        loss -= math.log(math.exp(logits[facts[s][r]]) / z)
        type_loss -= math.log(sum(math.exp(logits[a]) for a in range(D * r, D * (r + 1))) / z)
    return {"acc": acc / B, "type_acc": type_acc / B, "loss": loss / B, "type_loss": type_loss / B}


def known_fact_storage() -> None:
    task = tasks.make("factual_recall", RECALL)
    for where in ("mlp", "attn"):
        cfg, sd = planted_recall_weights(task, where)
        model = hooked_transformer(cfg, task.spec.d_vocab, task.spec.d_vocab_out, task.spec.n_ctx, sd)
        m = probes.run("fact_storage", model, task).metrics
        batch = probes.draw("data", model, task, 64, 0)
        for ablate, suffix in ((None, ""), ("mlp", "_no_mlp"), ("attn", "_no_attn")):
            ref = recall_reference(batch, task, where, ablate)
            for k, v in ref.items():
                assert abs(m[k + suffix] - v) < 1e-5 * max(1.0, abs(v)), (where, k + suffix, m[k + suffix], v)
        assert m["acc"] == m["type_acc"] == 1.0 and m["type_acc_no_mlp"] == 1.0, (where, m)  # attention brings the type
        targets, relations = batch.targets[:, -1].tolist(), batch.truth["relation"].tolist()
        if where == "attn":  # the facts survive the MLP's ablation...
            assert m["acc_no_mlp"] == 1.0 and abs(m["loss_no_mlp"] - m["loss"]) < 1e-9, m
        else:  # ...or fall to the batch's most common answer of each type, the best guess from the type alone
            common = {
                r: max(sorted(set(targets)), key=[a for a, q in zip(targets, relations) if q == r].count)
                for r in set(relations)
            }
            assert m["acc_no_mlp"] == sum(a == common[r] for a, r in zip(targets, relations)) / 64 < 0.6, m
        assert m["acc_no_attn"] < 0.5 and m["type_acc_no_attn"] < 0.6, (where, m)  # no subject, no relation
        facts = task.facts.tolist()  # the fact table's most common answer of each relation
        table = {r: max(sorted({row[r] for row in facts}), key=[row[r] for row in facts].count) for r in set(relations)}
        assert m["type_only_acc"] == sum(a == table[r] for a, r in zip(targets, relations)) / 64, m


class PlantedTypePredictor(nn.Module):
    """A "model" of factual_recall that answers, at the end position with logit `scale` (0 elsewhere): the
    fact for subjects below `right`, the next answer of the same relation's set for subjects below `typed`,
    and an answer of the next relation's set for the others. So acc and type_acc are the shares of the
    batch's subjects below `right` and below `typed`."""

    def __init__(self, task, right: int, typed: int, scale: float = 3.0):
        super().__init__()
        self.task, self.right, self.typed, self.scale = task, right, typed, scale
        self.d_vocab, self.n_ctx = task.spec.d_vocab, task.spec.n_ctx
        self.hook_dict: dict[str, nn.Module] = {}
        self.anchor = nn.Parameter(torch.zeros(()))

    def forward(self, tokens: Tensor) -> Tensor:
        S, R, D = self.task.cfg.subjects, self.task.cfg.relations, self.task.cfg.answers
        logits = torch.zeros(*tokens.shape, R * D)
        for i, row in enumerate(tokens.tolist()):
            s = next(t for t in row if t < S)
            r = next(t for t in row if S <= t < S + R) - S
            fact = int(self.task.facts[s, r])
            answer = fact if s < self.right else D * r + (fact + 1) % D if s < self.typed else (fact + D) % (R * D)
            logits[i, -1, answer] = self.scale
        return logits

    def run_with_cache(self, tokens: Tensor, names_filter=None):
        return self(tokens), {}


def known_answer_type() -> None:
    task = tasks.make("factual_recall", RECALL)
    S, R, D = task.cfg.subjects, task.cfg.relations, task.cfg.answers
    for right, typed in ((0, S), (S // 4, 3 * S // 4), (S, S), (0, 0)):  # the plateau, midway, learned, neither
        model = PlantedTypePredictor(task, right, typed)
        m = probes.run("answer_type", model, task).metrics
        subjects = probes.draw("data", model, task, 64, 0).truth["subject"].tolist()
        acc, type_acc = sum(s < right for s in subjects) / 64, sum(s < typed for s in subjects) / 64
        z = math.exp(3.0) + R * D - 1
        loss = sum(-math.log((math.exp(3.0) if s < right else 1.0) / z) for s in subjects) / 64
        type_loss = sum(-math.log((math.exp(3.0) + D - 1 if s < typed else D) / z) for s in subjects) / 64
        assert m["acc"] == acc and m["type_acc"] == type_acc and abs(m["type_gap"] - (type_acc - acc)) < 1e-12, m
        assert abs(m["loss"] - loss) < 1e-5 and abs(m["type_loss"] - type_loss) < 1e-5, (m, loss, type_loss)
        assert abs(m["fact_loss"] - (loss - type_loss)) < 1e-5, m
        assert 0 < m["type_only_acc"] < 1, m  # (computed by hand in known_fact_storage)
        assert 0 < acc < type_acc < 1 or right in (0, S), (right, typed, m)  # midway is no corner case


# ---- causal graph (causal_icl) -------------------------------------------------------------------


def planted_causal_graph_model(task, n_heads: int = 3, seed: int = 0):
    """A 2-layer disentangled transformer (mechsynth/models/disentangled.py) over causal_icl's graph, with A set by
    hand: in layer 0 a parent head at a random index attends from each position with a parent to it (positions
    one-hot: A[pos i, pos parent(i)] = big), so it writes its parent's token and position into its slot; in
    layer 1 a graph-induction head matches the query's token against that slot's token (+big) and shuns roots
    (-big), so it attends to the earlier children of the query token. The other heads have random A. Returns
    (model, parent head, graph-induction head)."""
    g = torch.Generator().manual_seed(seed)
    spec, parents = task.spec, task.graph.parents
    V, N = spec.d_vocab, spec.n_ctx
    model = models.build(models.parse({"kind": "disentangled", "n_layers": 2, "n_heads": n_heads}), spec)
    d0, d1 = model.widths[:2]
    big = 60.0
    parent_head, induction_head = torch.randint(n_heads, (2,), generator=g).tolist()
    roots = [j for j in range(N) if parents[j, 0] < 0]
    with torch.no_grad():
        A0, A1 = model.blocks[0].attn.W_A, model.blocks[1].attn.W_A
        A0.copy_(torch.randn(A0.shape, generator=g))
        A1.copy_(torch.randn(A1.shape, generator=g) * 0.3)
        A0[parent_head] = 0
        for i in range(N):
            if parents[i, 0] >= 0:
                A0[parent_head, V + i, V + int(parents[i, 0])] = big
        A1[induction_head] = 0
        slot = d0 * (1 + parent_head)  # where layer 0's parent head wrote: its parent's token first
        A1[induction_head, :V, slot : slot + V] = big * torch.eye(V)
        A1[induction_head, V : V + N, [V + j for j in roots]] = -big  # from every query position (one-hot), shun roots
    assert A1.shape[-1] == d1
    return model, parent_head, induction_head


def known_causal_graph() -> None:
    task = tasks.make("causal_icl", {"k": 5, "length": 32, "graph": "tree", "roots": "uniform", "seed": 3})
    model, parent, induction = planted_causal_graph_model(task, n_heads=3, seed=1)
    result = probes.run("causal_graph", model, task)
    m = result.metrics
    assert result.per_head.shape == (1, 3), result.per_head  # layer 0 only
    assert result.top_heads(1)[0][:2] == (0, parent) and float(result.per_head[0, parent]) == 1.0, result.per_head
    assert m[f"auc/L0H{parent}"] == 1.0, m
    assert _others_below(result.per_head, 0, parent, 0.5), result.per_head  # random heads: near chance
    assert all(abs(m[f"auc/L0H{h}"] - 0.5) < 0.25 for h in range(3) if h != parent), m
    assert m["edges"] == int((task.graph.parents[:32, 0] >= 0).sum()) > 20, m
    assert m[f"graph_induction/L1H{induction}"] > 0.99, m
    chance = m["graph_induction_chance"]
    assert 0 < chance < 0.5 and 0.5 < m["graph_queries"] <= 1, m
    assert all(m[f"graph_induction/L1H{h}"] < 0.5 for h in range(3) if h != induction), m
    assert set(result.render["heads"]) >= {f"L0H{parent}"}


# ---- HMM identifiability (masked prediction) ---------------------------------------------------------


class HMMPredictorModel(nn.Module):
    """A "model" of hmm_masked whose answers are, exactly, the task's optimal predictor (the log of its
    probabilities as logits at the answer positions), or that of another HMM drawn with `other_seed` (a model
    that learned the wrong HMM)."""

    def __init__(self, task, other_seed: int | None = None):
        super().__init__()
        self.task = task if other_seed is None else tasks.make("hmm_masked", {**vars(task.cfg), "seed": other_seed})
        self.d_vocab, self.n_ctx = task.spec.d_vocab, task.spec.n_ctx
        self.hook_dict: dict[str, nn.Module] = {}  # no hooks: the probe reads the answers only
        self.anchor = nn.Parameter(torch.zeros(()))

    def forward(self, tokens: Tensor) -> Tensor:
        q = self.task.optimal(tokens[:, : self.task.cfg.length]).clamp_min(1e-30).log()
        out = torch.zeros(*tokens.shape, self.task.spec.d_vocab_out)
        out[:, -q.shape[1] :] = q
        return out

    def run_with_cache(self, tokens: Tensor, names_filter=None):
        return self(tokens), {}


def known_hmm_identifiability() -> None:
    """The exact triplet predictor (and mlm's, assembled by the chain rule) gives O, T and π back; a model of
    another HMM does not; for pairwise, a rotated HMM far from (O, T) has the same predictor."""
    for params in ({"objective": "triplet"}, {"objective": "mlm"}, {"objective": "triplet", "t1": 2, "t2": 0, "t3": 1}):
        task = tasks.make("hmm_masked", params)
        m = probes.run("hmm_identifiability", HMMPredictorModel(task), task).metrics
        assert max(m["O_err"], m["T_err"], m["pi_err"]) < 1e-3 and m["cp_fit"] < 1e-4, (params, m)
        assert m["kl_joint"] < 1e-6 and m["kruskal_margin"] >= 0 and max(m["floor_O_err"], m["floor_T_err"]) < 1e-3, (
            params,
            m,
        )
        recovered = torch.tensor([[m[f"O_hat/x{x}h{h}"] for h in range(task.cfg.k)] for x in range(task.cfg.d)])
        assert (recovered - task.emission).abs().max() < 1e-3, params
        if params["objective"] == "mlm":
            wrong = probes.run("hmm_identifiability", HMMPredictorModel(task, other_seed=7), task).metrics
            assert wrong["O_err"] > 0.05 and wrong["kl_joint"] > 0.01 and wrong["floor_O_err"] == m["floor_O_err"], (
                wrong
            )
    task = tasks.make("hmm_masked", {"objective": "pairwise", "concentration": 5.0})
    m = probes.run("hmm_identifiability", HMMPredictorModel(task), task).metrics
    assert m["alt_pred_diff"] < 1e-6 and m["alt_O_diff"] > 0.02 and m["alt_T_diff"] > 0.02, m
    assert m["err_true"] < 1e-5 and m["err_alt"] < 1e-5 and "kruskal_margin" not in m, m


def explicit_hessian(model: nn.Module, batch) -> Tensor:
    """The training loss's Hessian over the trainable parameters, row by row with double backward (not the
    forward-over-reverse products the sharpness probe uses)."""
    params = [p for p in model.parameters() if p.requires_grad]
    with sdpa_kernel(SDPBackend.MATH):  # the fused attention kernels cannot be differentiated twice
        loss = masked_loss(model(batch.tokens), batch)
        g = torch.cat([x.reshape(-1) for x in torch.autograd.grad(loss, params, create_graph=True)])
        rows = [
            torch.cat([x.reshape(-1) for x in torch.autograd.grad(g[i], params, retain_graph=True)])
            for i in range(len(g))
        ]
    return torch.stack(rows).double()


def known_sharpness() -> None:
    """λ_max of a small transformer's loss Hessian, and of a 2-parameter quadratic model, against explicit
    Hessians; 2/η from the run's optimizer."""
    task = tasks.make("markov_icl", {"k": 3, "length": 8})
    model = models.build(models.TransformerConfig(n_layers=1, n_heads=2, d_model=8), task.spec).double()
    batch = task.sample(16, torch.Generator().manual_seed(0), "cpu", "train")
    want = float(torch.linalg.eigvalsh(explicit_hessian(model, batch))[-1])
    got = probes.run("sharpness", model, task, option={"batch": 16, "iterations": 60}).metrics
    assert abs(got["lambda_max"] - want) < 1e-6 * max(1.0, want), (got, want)
    assert math.isnan(got["stability_limit"])  # no learning rate known
    sgd = types.SimpleNamespace(lr=0.05, optimizer="sgd", momentum=0.0)
    assert probes.run("sharpness", model, task, option={"batch": 16}, train=sgd).metrics["stability_limit"] == 2 / 0.05
    heavy = types.SimpleNamespace(lr=0.05, optimizer="sgd", momentum=0.9)
    assert (
        abs(
            probes.run("sharpness", model, task, option={"batch": 16}, train=heavy).metrics["stability_limit"]
            - 3.8 / 0.05
        )
        < 1e-9
    )
    adam = types.SimpleNamespace(lr=0.05, optimizer="adam", momentum=0.0)
    assert math.isnan(probes.run("sharpness", model, task, option={"batch": 16}, train=adam).metrics["stability_limit"])
    # Lanczos alone on a known spectrum
    spectrum = torch.tensor([5.0, 3.0, 1.0, -2.0, 0.5] + [0.1] * 45, dtype=torch.float64)
    ritz = sharpness.lanczos(lambda v: spectrum * v, 50, 30, torch.Generator().manual_seed(0))
    assert abs(float(ritz[-1]) - 5.0) < 1e-9 and abs(float(ritz[0]) + 2.0) < 1e-6


class SoftmaxTable(nn.Module):
    """logits = W[token]: a regular model of a conditional distribution. Its learning coefficient is half the
    number of identifiable parameters, V (C - 1) / 2: each row loses one to the softmax's shift invariance."""

    def __init__(self, weights: Tensor):
        super().__init__()
        self.W = nn.Parameter(weights)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.W[tokens]


def known_llc() -> None:
    """devinterp's SGLD through the llc probe's loss on softmax tables at their maximum-likelihood weights:
    λ̂ within 12% of V (C - 1) / 2 for two sizes (4 and 2), and a point off the minimum gives a negative one."""
    for V, C in ((4, 3), (2, 3)):
        g = torch.Generator().manual_seed(V)
        n = 500
        tokens = torch.randint(V, (n, 1), generator=g)
        targets = torch.multinomial(
            torch.softmax(0.5 * torch.randn(V, C, generator=g), -1)[tokens[:, 0]], 1, generator=g
        )
        counts = torch.zeros(V, C).index_put_((tokens[:, 0], targets[:, 0]), torch.ones(n), accumulate=True)
        batch = Batch(tokens, targets, torch.ones_like(tokens, dtype=torch.bool))
        options = llc.LLCOptions(lr=4e-3, n_beta=float(n), localization=0.1, chains=2, draws=600, batch=n, pool=n)
        e = llc.estimate(SoftmaxTable((counts / counts.sum(1, keepdim=True)).log()), batch, options)
        want = V * (C - 1) / 2
        assert abs(e.llc - want) < 0.12 * want and not llc.troubles(e), (V, C, e.llc, e.per_chain, llc.troubles(e))
        assert len(e.traces) == 2 and all(len(t) == llc.TRACE_POINTS for t in e.traces)
    off = llc.estimate(SoftmaxTable(torch.zeros(V, C) + 3 * torch.eye(V, C)), batch, options)
    assert off.llc < 0 and any("negative" in t for t in llc.troubles(off)), off
    # A step size far too large: every chain's loss leaves the finite numbers, and what is left is no estimate.
    blown = llc.estimate(
        SoftmaxTable((counts / counts.sum(1, keepdim=True)).log()), batch, replace(options, lr=1e6, draws=20)
    )
    assert math.isnan(blown.llc) and blown.kept == [] and "diverged" in llc.troubles(blown), blown


# ---- flip-flop reads ------------------------------------------------------------------------------


def planted_flip_flop_model(length: int, n_heads: int = 3, seed: int = 0, recent: bool = True):
    """2 layers that read flip-flop sequences by attention: an exact previous-token head in layer 0 marks each
    written bit (its previous token is `w`); in layer 1 a read head attends from each `r` to the written bits,
    the most recent first (`recent=False`: the earliest, a read that glitches exactly where the first write's bit
    differs from the last's), and copies the bit; every other head attends at random and writes nothing. Returns
    (hooked model, read head).

    Residual stream = [token one-hot | position one-hot | previous token one-hot], as planted_induction_model.
    """
    g = torch.Generator().manual_seed(seed)
    V, N = 5, length - 1
    d_model, d_head = 2 * V + N, max(V, N)
    sd = _embeddings(V, N, d_model, V)
    sd["unembed.W_U"][:V] = 5 * torch.eye(V)
    heads = torch.randint(n_heads, (2,), generator=g).tolist()
    layers = [_layer(n_heads, d_model, d_head, g) for _ in range(2)]
    for a, h in zip(layers, heads):
        for w in ("W_Q", "W_K", "W_V"):
            a[w][h] = 0
        a["W_O"][:] = 0  # the other heads attend at random but write nothing: the position ramp below stays exact
    _plant_previous_token(layers[0], heads[0], V, N, 60.0 * math.sqrt(d_head))
    a, h = layers[1], heads[1]
    c = 8 * math.sqrt(d_head)  # written bits two positions apart: scores 16 apart after the 1/sqrt(d_head) scale
    a["W_Q"][h, 1, 0] = 2 * c * N  # the query `r` (token 1) asks for written bits (previous token `w`, 0)...
    a["W_K"][h, V + N, 0] = 1.0
    a["W_K"][h, V, 0] = -1.0  # ...which position 0 (a `w` that sees only itself as its previous token) is not
    a["W_Q"][h, 1, 1] = c  # ...the latest of them (or the earliest)
    a["W_K"][h, V : V + N, 1] = torch.arange(N, dtype=torch.float) * (1 if recent else -1)
    a["W_V"][h, :V, :V] = torch.eye(V)
    a["W_O"][h, :V, :V] = 3 * torch.eye(V)  # outvotes the `r` the residual stream still holds
    for layer, a in enumerate(layers):
        sd |= {f"blocks.{layer}.attn.{k}": v for k, v in a.items()}
    return hooked_transformer(_config(2, n_heads, d_model, d_head), V, V, N, sd), h


def known_read_attention() -> None:
    task = tasks.make("flip_flop", {"length": 32, "sparse_p_ignore": 0.9, "dense_p_ignore": 0.1})
    model, head = planted_flip_flop_model(32, seed=2)
    result = probes.run("read_attention", model, task, batch_size=256)
    assert result.top_heads(1)[0][:2] == (1, head) and result.per_head[1, head] >= 0.99, result.per_head
    assert _others_below(result.per_head, 1, head, 0.5), result.per_head
    for split in ("eval", "sparse", "dense"):
        assert result.metrics[f"{split}/error"] == 0.0 and result.metrics[f"{split}/source_mass"] >= 0.99, (
            result.metrics
        )
        assert math.isnan(result.metrics[f"{split}/stale"])  # no wrong read to say anything of
    stale, head = planted_flip_flop_model(32, seed=2, recent=False)
    result = probes.run("read_attention", stale, task, batch_size=256)
    for split, input in (("eval", "eval"), ("dense", "eval_dense")):
        batch = probes.draw("data" if split == "eval" else f"task:{input}", stale, task, 256, 0)
        want = reference_first_write_errors(batch)
        assert abs(result.metrics[f"{split}/error"] - want) < 1e-6 and want > 0.05, (
            split,
            result.metrics[f"{split}/error"],
            want,
        )
        assert result.metrics[f"{split}/stale"] == 1.0 and result.metrics[f"{split}/source_mass_wrong"] < 0.01
    assert result.render["failing"]


def reference_first_write_errors(batch: Batch) -> float:
    """The share of reads whose bit differs from the first write's: the reads a first-write reader gets wrong,
    counted one sequence and one token at a time."""
    wrong = reads = 0
    for tokens, targets in zip(batch.tokens.tolist(), batch.targets.tolist()):
        first = tokens[1]  # pair 0 is always a write
        for p, t in enumerate(tokens):
            if t == 1:  # `r`: its target is the read bit
                reads += 1
                wrong += targets[p] != first
    return wrong / reads


# ---- the minimal induction model ----------------------------------------------------------------------------


def known_position_mixing() -> None:
    """The paper's two solutions planted in the minimal model: bigram (W_k = I, v = e_2) and unigram (W_k = 11ᵀ,
    v = e_1); a transformer has neither weight and is refused."""
    task = tasks.make("markov_icl", {"k": 3, "length": 12})
    for W, lead, bias in ((torch.eye(3), 1, 1.0), (torch.ones(3, 3), 0, 0.0)):
        model = models.build(models.parse({"kind": "minimal_induction"}), task.spec)
        with torch.no_grad():
            model.W_k.copy_(W)
            model.u.copy_(torch.eye(12)[lead] / model.v_scale)
        m = probes.run("position_mixing", model, task).metrics
        assert m["diag_bias"] == pytest.approx(bias) and m["v_lead"] == lead and m[f"v/{lead}"] == pytest.approx(1.0), m
    why = probes.why_not("position_mixing", models.build(models.parse({"n_layers": 1, "d_model": 8}), task.spec), task)
    assert why is not None and "W_k" in why


# ---- bounded Dyck: the balanced condition ----------------------------------------------------------------


def planted_dyck_model(task, balanced: bool, n_heads: int = 2, seed: int = 0):
    """1 layer on bounded_dyck sequences, residual stream [token one-hot | position one-hot | value block], at random
    head indices: a token head that reads tokens only, and an exact self-attention head (each position attends to
    itself) that writes nothing; the other heads attend at random and write nothing. Balanced: for every query the
    token head scores each close g below its open (a query-independent offset along one key dimension, on top of
    scores that vary with the query) and gives it −e^g times the open's value, so every matched pair's weighted
    values cancel exactly; START writes a direction of its own. Unbalanced: it attends to the opens, and only opens
    and START write. Returns (hooked model, token head, self head)."""
    g = torch.Generator().manual_seed(seed)
    k, N = task.cfg.k, task.spec.n_ctx
    V = 2 * k + 1
    d_model, d_head = 2 * V + N, max(N, V)
    values = V + N  # the value block: a direction per type, then START's
    sd = _embeddings(V, N, d_model, 2 * k)
    a = _layer(n_heads, d_model, d_head, g)
    token, self_head = torch.randperm(n_heads, generator=g)[:2].tolist()
    a["W_O"][:] = 0
    for h in (token, self_head):
        for w in ("W_Q", "W_K", "W_V"):
            a[w][h] = 0
    _plant_previous_token(a, self_head, V, N, 60.0 * math.sqrt(d_head), offset=0)
    a["W_V"][self_head], a["W_O"][self_head] = 0, 0  # it only attends
    offset = 1.0 if balanced else 12.0  # g: the score of an open over its close (unbalanced: all attention on opens)
    a["b_Q"][token, 0] = offset * math.sqrt(d_head)
    a["W_Q"][token, :V, 1] = torch.rand(V, generator=g) * 2 - 1
    for t in range(k):
        a["W_K"][token, t, 0] = 1.0
        a["W_K"][token, [t, k + t], 1] = float(torch.randn(1, generator=g)) * 3
        a["W_V"][token, t, t] = 1.0
        a["W_V"][token, k + t, t] = -math.exp(offset) if balanced else 0.0
    a["W_V"][token, 2 * k, k] = 1.0
    a["W_O"][token, : k + 1, values : values + k + 1] = torch.eye(k + 1)
    sd |= {f"blocks.0.attn.{key}": v for key, v in a.items()}
    return hooked_transformer(_config(1, n_heads, d_model, d_head), V, 2 * k, N, sd), token, self_head


def known_dyck_balance() -> None:
    task = tasks.make("bounded_dyck", {"k": 2, "depth": 3, "length": 16, "eval_long_length": 16})
    for balanced in (True, False):
        model, token, self_head = planted_dyck_model(task, balanced, n_heads=3, seed=4)
        m = probes.run("dyck_balance", model, task).metrics
        if balanced:
            assert m[f"bv/L0H{token}"] < 1e-4 and m["bv/L0"] < 1e-4 and m["bv"] == m["bv/L0"], m
        else:
            assert m[f"bv/L0H{token}"] > 0.3 and m["bv"] > 0.3, m
        assert math.isnan(m[f"bv/L0H{self_head}"])  # it writes nothing: no balance to speak of
        batch = probes.draw("data", model, task, 64, 0)
        scored = [
            (tok, p == top)
            for tokens, match in zip(batch.tokens.tolist(), batch.truth["match"].tolist())
            for p, (tok, top) in enumerate(zip(tokens, match))
            if top >= 0
        ]
        assert m[f"match_mass/L0H{self_head}"] == pytest.approx(sum(on for _, on in scored) / len(scored), abs=1e-5)
        assert 0.2 < m[f"match_mass/L0H{self_head}"] < 0.8  # only a query that is itself the top open is matched


PLANTED: dict[str, Callable[[], None]] = {
    "previous_token": known_previous_token,
    "induction": known_induction,
    "duplicate_token": known_duplicate_token,
    "sparse_selection": known_sparse_selection,
    "automaton_shortcut": known_automaton_shortcut,
    "hidden_progress": known_hidden_progress,
    "icl_strategy": known_icl_strategy,
    "fourier": known_fourier,
    "causal_graph": known_causal_graph,
    "fact_storage": known_fact_storage,
    "answer_type": known_answer_type,
    "hmm_identifiability": known_hmm_identifiability,
    "sharpness": known_sharpness,
    "llc": known_llc,
    "circuit": known_circuit,
    "read_attention": known_read_attention,
    "position_mixing": known_position_mixing,
    "dyck_balance": known_dyck_balance,
}
PLANTED.update(REGRESSION)
PLANTED.update(FEATURES)
