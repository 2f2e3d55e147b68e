"""Hand-set models whose circuits are known exactly: ground truth for probes.

`PLANTED` maps each probe to a known-answer check: it builds a model with the probe's circuit planted
at a known place, runs the probe and asserts the answer (the planted head ranks first with a score near
its maximum, the other heads score low; or the planted quantity is recovered exactly). test_probes runs
every check, and fails for a registered probe that has none.
"""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch
import torch.nn as nn
from torch import Tensor

from mechsynth import models, probes, tasks
from mechsynth.models.tl_compat import hooked_transformer


def _layer(n_heads: int, d_model: int, d_head: int, g: torch.Generator) -> dict[str, Tensor]:
    """One attention layer of heads with small random weights (near-uniform attention, small writes)."""
    a = {w: torch.randn(n_heads, d_model, d_head, generator=g) * 0.1 for w in ("W_Q", "W_K", "W_V")}
    a["W_O"] = torch.randn(n_heads, d_head, d_model, generator=g) * 0.1
    return a | {b: torch.zeros(n_heads, d_head) for b in ("b_Q", "b_K", "b_V")} | {"b_O": torch.zeros(d_model)}


def _embeddings(V: int, N: int, d_model: int, d_out: int) -> dict[str, Tensor]:
    """Residual stream = [token one-hot | position one-hot | zeros ...]; the unembedding reads nothing."""
    sd = {"embed.W_E": torch.zeros(V, d_model), "pos_embed.W_pos": torch.zeros(N, d_model),
          "unembed.W_U": torch.zeros(d_model, d_out), "unembed.b_U": torch.zeros(d_out)}
    sd["embed.W_E"][:, :V] = torch.eye(V)
    sd["pos_embed.W_pos"][:, V:V + N] = torch.eye(N)
    return sd


def _config(n_layers: int, n_heads: int, d_model: int, d_head: int) -> models.TransformerConfig:
    return models.TransformerConfig(n_layers=n_layers, n_heads=n_heads, d_model=d_model, d_head=d_head, attn_only=True,
                                    normalization="none")


def _others_below(per_head: Tensor, layer: int, head: int, bound: float) -> bool:
    others = per_head.clone()
    others[layer, head] = -math.inf
    return bool(others.max() < bound)


# ---- previous token and induction -----------------------------------------------------------------


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
    tok, pos, prev = slice(0, V), slice(V, V + N), slice(V + N, 2 * V + N)
    big = 60.0 * math.sqrt(d_head)
    sd = _embeddings(V, N, d_model, V)
    sd["unembed.W_U"][tok] = 5 * torch.eye(V)
    heads = torch.randint(n_heads, (2,), generator=g).tolist()
    for layer in range(2):
        a = _layer(n_heads, d_model, d_head, g)
        h = heads[layer]
        for w in ("W_Q", "W_K", "W_V", "W_O"):
            a[w][h] = 0
        if layer == 0:  # previous token: query position i · key position j = big iff j = i - offset
            a["W_Q"][h, pos, :N] = torch.eye(N)
            a["W_K"][h, pos, :N] = big * torch.eye(N).roll(offset, dims=1)
            for j in range(N - offset, N):  # the last positions have no successor (roll wraps them round)
                a["W_K"][h, V + j, j + offset - N] = 0
            a["W_V"][h, tok, :V] = torch.eye(V)
            a["W_O"][h, :V, prev] = torch.eye(V)
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
    for name, params in (("sparse_parity", {"n": 12, "k": 3, "seed": 4}), ("sparse_boolean", {"length": 12, "s": 3, "seed": 4})):
        task = tasks.make(name, params)
        model, head = planted_selection_model(12, task.support.tolist())
        result = probes.run("sparse_selection", model, task)
        assert result.top_heads(1)[0][:2] == (0, head) and result.per_head[0, head] >= 0.9, (name, result.per_head)
        assert _others_below(result.per_head, 0, head, 0.5), (name, result.per_head)
        assert result.metrics["support_recovered"] == 1.0, name


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

    def __init__(self, p: int, K: list[int], sizes: list[int], linear: tuple[int, int], n_noise: int = 12, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.p, self.K, self.linear = p, K, linear
        self.d_vocab, self.n_ctx = p + 1, 3
        self.hook_dict: dict[str, nn.Module] = {"blocks.0.mlp.hook_post": nn.Identity()}
        x = torch.arange(p, dtype=torch.float64)[:, None]
        d_model = 8
        residues = sum(torch.cos(2 * math.pi * k * x / p) * torch.randn(d_model, generator=g, dtype=torch.float64)
                       + torch.sin(2 * math.pi * k * x / p) * torch.randn(d_model, generator=g, dtype=torch.float64)
                       for k in K)
        self.W_E = nn.Parameter(torch.cat([residues, torch.randn(1, d_model, generator=g, dtype=torch.float64)]))
        n_neurons = sum(sizes) + n_noise
        for name, shape in (("W_Q", (1, 2, d_model, 4)), ("W_K", (1, 2, d_model, 4)), ("W_V", (1, 2, d_model, 4)),
                            ("W_O", (1, 2, 4, d_model)), ("W_in", (1, d_model, n_neurons)), ("W_out", (1, n_neurons, d_model)),
                            ("W_U", (d_model, p))):
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
        planted = torch.relu(torch.cos(w * self.linear[0] * a[:, None] + self.phases[:, 0])
                             + torch.cos(w * self.linear[1] * b[:, None] + self.phases[:, 1]))
        noise = self.noise[tokens[:, 0], tokens[:, 1]]
        acts = torch.zeros(len(tokens), 3, planted.shape[1] + noise.shape[1] + 2, dtype=torch.float64)
        acts[:, -1, :planted.shape[1]] = planted
        acts[:, -1, planted.shape[1]:-2] = noise
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
        squares = sum(float(getattr(model, w).detach().pow(2).sum())
                      for w in ("W_E", "W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "W_U"))
        assert abs(m["weight_norm_sq"] - squares) < 1e-9 * squares, (op, m)


PLANTED: dict[str, Callable[[], None]] = {
    "previous_token": known_previous_token,
    "induction": known_induction,
    "duplicate_token": known_duplicate_token,
    "sparse_selection": known_sparse_selection,
    "automaton_shortcut": known_automaton_shortcut,
    "hidden_progress": known_hidden_progress,
    "icl_strategy": known_icl_strategy,
    "fourier": known_fourier,
}
