"""causal_icl against slow references: a plain loop over the same random draws, the statistics of the graph
and of the sequences, the chain against markov_icl, and Bayes' predictor by hand and against the generator."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter

import pytest
import torch

from mechsynth import tasks
from mechsynth.errors import ConfigError
from mechsynth.tasks.base import latent_values
from mechsynth.tasks.causal_icl import causal_graph, count_bayes, importance_bayes
from mechsynth.tasks.markov_icl import dirichlet


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def make(**params):
    return tasks.make("causal_icl", params)


def reference_sample(task, batch_size: int, seed: int) -> tuple[list[list[int]], list[list[list[float]]]]:
    """Nodes 0..T of each sequence by a plain loop over the nodes in order, from the same draws as the task
    (the kernel's Dirichlet rows, then one uniform per node), and the distribution each node was drawn from."""
    cfg, k, T = task.cfg, task.cfg.k, task.cfg.length
    m = cfg.parents if cfg.graph == "dag" else 1
    g = gen(seed)
    P = dirichlet(cfg.alpha, (batch_size, k**m, k), g, "cpu")
    u = torch.rand(batch_size, T + 1, generator=g)
    root = task.sample(batch_size, gen(seed)).truth["root"]  # checked against the kernel below
    parents = task.graph.parents.tolist()
    xs, dists = [], []
    for b in range(batch_size):
        x: list[int] = []
        d = []
        for i in range(T + 1):
            ps = [p for p in parents[i] if p >= 0]
            if not ps:
                query = cfg.target == "query" and cfg.graph != "dag" and i == T - 1
                uniform = query or cfg.roots == "uniform" or cfg.graph == "dag"
                row = torch.full((k,), 1 / k) if uniform else root[b]
            else:
                row = P[b, sum(x[p] * k ** (len(ps) - 1 - j) for j, p in enumerate(ps))]
            x.append(min(int((row.cumsum(0) < u[b, i]).sum()), k - 1))
            d.append(row.tolist())
        xs.append(x)
        dists.append(d)
    return xs, dists


@pytest.mark.parametrize(
    "params",
    [
        {"graph": "chain", "k": 4},
        {"graph": "tree", "k": 5, "target": "next"},
        {"graph": "tree", "roots": "uniform", "seed": 3},
        {"graph": "dag", "k": 3, "parents": 2, "target": "next"},
        {"graph": "dag", "k": 2, "parents": 3, "length": 12, "seed": 5},
    ],
)
@pytest.mark.reference("causal_icl")
def test_sample_is_a_plain_loop_over_the_same_draws(params):
    task = make(**{"length": 10, **params})
    T = task.cfg.length
    b = task.sample(16, gen(4), split="eval")
    xs, dists = reference_sample(task, 16, 4)
    x = torch.tensor(xs)
    assert torch.equal(b.tokens, x[:, :-1]) and torch.equal(b.targets, x[:, 1:])
    torch.testing.assert_close(b.truth["conditional"], torch.tensor(dists)[:, 1:])
    P, root = b.truth["transition"], b.truth["root"]
    torch.testing.assert_close(P.sum(-1), torch.ones(P.shape[:2]))
    if task.cfg.root_kind == "stationary":
        torch.testing.assert_close(torch.einsum("bc,bck->bk", root, P), root, atol=1e-5, rtol=0)
    else:
        assert torch.equal(root, torch.full_like(root, 1 / task.cfg.k))
    scored = torch.ones(T, dtype=torch.bool) if task.cfg.target == "next" else torch.arange(T) == T - 1
    assert torch.equal(b.mask, scored.expand(16, -1))
    assert torch.equal(b.truth["parents"], task.graph.parents.expand(16, -1, -1))


@pytest.mark.reference("causal_icl")
def test_graph_families_follow_their_code():
    """chain: parent i-1. tree (their single_parent.py 'random'): node i's parent uniform over {none, 0..i-1}.
    dag (their multi_parent.ipynb random DAG): nodes < m roots, the others m distinct parents, uniform over the
    m-subsets of the earlier nodes. Fixed by the seed; in query mode the query token is a root, the answer its child."""
    chain = make(graph="chain", length=8, target="next").graph.parents[:, 0]
    assert chain.tolist() == list(range(-1, 8))
    query = make(graph="chain", length=8).graph.parents[:, 0]
    assert query.tolist() == list(range(-1, 6)) + [-1, 7]  # nodes 0..6 the chain, 7 the query, 8 the answer

    cfg = make(graph="tree", length=8, target="next").cfg
    trees = torch.stack([causal_graph(dataclasses.replace(cfg, seed=s))[:, 0] for s in range(4000)])
    assert torch.equal(trees[7], causal_graph(dataclasses.replace(cfg, seed=7))[:, 0])
    assert len({tuple(t) for t in trees.tolist()}) > 3000
    for i in (0, 1, 3, 8):
        freq = torch.bincount(trees[:, i] + 1, minlength=i + 1).float()
        assert len(freq) == i + 1  # never a later node
        expected = 4000 / (i + 1)
        chi2 = ((freq - expected) ** 2 / expected).sum().item()
        assert chi2 < i + 6 * math.sqrt(2 * max(i, 1)), (i, freq)
    tree_query = make(graph="tree", length=8, seed=2).graph.parents[:, 0]
    assert tree_query[7] == -1 and tree_query[8] == 7 and (tree_query[:7] < torch.arange(7)).all()

    cfg = make(graph="dag", k=3, parents=2, length=6, target="next").cfg
    dags = [causal_graph(dataclasses.replace(cfg, seed=s)).tolist() for s in range(3000)]
    for d in dags[:50]:
        assert d[0] == d[1] == [-1, -1] and all(0 <= a < b < i for i, (a, b) in enumerate(d) if i >= 2)
    subsets = Counter(tuple(d[4]) for d in dags)  # node 4: one of the 6 pairs of nodes 0..3
    assert set(subsets) == set(itertools.combinations(range(4), 2))
    chi2 = sum((n - 500) ** 2 / 500 for n in subsets.values())
    assert chi2 < 5 + 6 * math.sqrt(10), subsets


@pytest.mark.reference("causal_icl")
def test_children_follow_the_kernel_and_roots_their_distribution():
    """Pooled over sequences, the children of each parent token (context) are distributed as the kernels'
    rows, the roots as the root distributions, the query token uniformly (chi-square)."""
    for params in (
        {"graph": "tree", "k": 3, "target": "next", "seed": 1},
        {"graph": "dag", "k": 2, "parents": 2},
        {"graph": "tree", "k": 3},
    ):
        task = make(length=30, **params)
        b = task.sample(3000, gen(2))
        x = torch.cat([b.tokens, b.targets[:, -1:]], 1)
        k, parents = task.cfg.k, task.graph.parents
        P, root = b.truth["transition"], b.truth["root"]
        chi2, dof = 0.0, 0
        nonroot = (parents[:, 0] >= 0).nonzero()[:, 0]
        query = task.graph.uniform_root & (task.cfg.root_kind == "stationary")
        weights = k ** torch.arange(parents.shape[1] - 1, -1, -1)
        ctx = (x[:, parents[nonroot]] * weights).sum(-1)  # [batch, node]
        for c in range(P.shape[1]):
            at = ctx == c
            observed = torch.bincount(x[:, nonroot][at], minlength=k).float()
            expected = (at.sum(1, keepdim=True) * P[:, c]).sum(0)
            chi2 += ((observed - expected) ** 2 / expected).sum().item()
            dof += k - 1
        roots = task.graph.stationary_root | (task.graph.uniform_root & ~query)
        observed = torch.bincount(x[:, roots].flatten(), minlength=k).float()
        expected = roots.sum() * root.sum(0)
        chi2 += ((observed - expected) ** 2 / expected).sum().item()
        dof += k - 1
        assert chi2 < dof + 6 * math.sqrt(2 * dof), (params, chi2, dof)
        if query.any():
            freq = torch.bincount(x[:, query.nonzero()[0, 0]], minlength=k).float() / 3000
            assert (freq - 1 / k).abs().max() < 4.5 * math.sqrt(1 / k * (1 - 1 / k) / 3000)


@pytest.mark.reference("causal_icl")
def test_chain_is_markov_icl():
    """With target = next the chain is markov_icl's bigram chain: the same parents, and the same Bayes
    predictor on the same tokens (closed form with uniform roots; importance-sampled with stationary ones)."""
    tokens = make(graph="chain", k=3, length=12, target="next", alpha=0.5).sample(8, gen(1)).tokens
    ours = make(graph="chain", k=3, length=12, target="next", alpha=0.5, roots="uniform")
    markov = tasks.make("markov_icl", {"k": 3, "length": 12, "alpha": 0.5, "start": "uniform"})
    torch.testing.assert_close(ours.bayes(tokens), markov.predictors(tokens)["bayes"], atol=1e-6, rtol=0)
    ours = make(graph="chain", k=3, length=12, target="next", alpha=0.5)
    markov = tasks.make("markov_icl", {"k": 3, "length": 12, "alpha": 0.5})
    ctx = tokens  # markov_icl's contexts for order 2: the token itself
    theirs = markov.importance_bayes(tokens, ctx, samples=8000)
    torch.testing.assert_close(ours.bayes(tokens, samples=8000), theirs, atol=0.02, rtol=0)


def test_count_bayes_by_hand():
    """A dag with two parents by hand: nodes 0, 1 roots; 2, 4 and the answer 5 children of (0, 1); 3 of (1, 2).
    Tokens 0 1 2 0 2, alpha 0.5, k 3: after t = 4, context (0, 1) has been followed by 2 twice."""
    parents = torch.tensor([[-1, -1], [-1, -1], [0, 1], [1, 2], [0, 1], [0, 1]])
    bayes = count_bayes(torch.tensor([[0, 1, 2, 0, 2]]), parents, 3, 0.5)[0]
    expected = [
        [1 / 3] * 3,
        [1 / 3] * 3,
        [1 / 3] * 3,
        [0.5 / 2.5, 0.5 / 2.5, 1.5 / 2.5],
        [0.5 / 3.5, 0.5 / 3.5, 2.5 / 3.5],
    ]
    torch.testing.assert_close(bayes, torch.tensor(expected))
    # their InContextTree in query mode: the chain 0 1 0 2 0, then the query token 0; its children so far: 1, 2
    task = make(graph="chain", k=3, length=6, roots="uniform")
    bayes = task.bayes(torch.tensor([[0, 1, 0, 2, 0, 0]]))[0, -1]
    torch.testing.assert_close(bayes, torch.tensor([0.1, 1.1, 1.1]) / 2.3)


def test_importance_bayes_by_numerical_integration():
    """k = 2, alpha = 1 (a uniform prior on a = P[0→1], c = P[1→0]), a chain whose first token is drawn from
    π = (c, a) / (a + c): after tokens 0 0 1, p(P | x) ∝ π_0 (1 - a) a, and the next token is 0 with
    probability E[c]. Against a 2000 x 2000 midpoint grid."""
    a, c = torch.meshgrid(*(2 * [(torch.arange(2000, dtype=torch.float64) + 0.5) / 2000]), indexing="ij")
    pi0 = c / (a + c)
    expected = [
        (a * pi0).sum() / pi0.sum(),  # P(x1 = 1 | x0 = 0)
        (a * pi0 * (1 - a)).sum() / (pi0 * (1 - a)).sum(),  # P(x2 = 1 | 0 0)
        1 - (c * pi0 * (1 - a) * a).sum() / (pi0 * (1 - a) * a).sum(),
    ]  # P(x3 = 1 | 0 0 1)
    parents = torch.arange(-1, 3)[:, None]
    bayes = importance_bayes(torch.tensor([[0, 0, 1]]), parents, parents[:, 0] < 0, 2, 1.0, samples=50_000)[0, :, 1]
    torch.testing.assert_close(bayes, torch.tensor(expected, dtype=torch.float), atol=0.006, rtol=0)


@pytest.mark.parametrize(
    "params",
    [
        {"graph": "tree", "seed": 4},
        {"graph": "tree", "roots": "uniform"},
        {"graph": "dag", "parents": 2},
        {"graph": "tree", "seed": 4, "target": "query"},
    ],
)
@pytest.mark.reference("causal_icl")
def test_bayes_is_the_generators_own_posterior_predictive(params):
    """For every prefix seen ≥ 2000 times in 400k sequences (k = 2, T = 4), the frequency of the next token
    equals Bayes' predictor (20,000 importance draws) within 4.5 standard errors; in query mode only the
    answer's. (With seed 4 the tree's nodes 0 and 2 are stationary roots.)"""
    task = make(**{"k": 2, "length": 4, "alpha": 0.5, "target": "next", **params})
    if params.get("seed") == 4:
        assert task.graph.stationary_root.nonzero()[:, 0].tolist()[:2] == [0, 2]
    x = torch.cat(
        [torch.cat([b.tokens, b.targets[:, -1:]], 1) for b in (task.sample(200_000, gen(i)) for i in range(2))]
    )
    for L in range(1, 5) if task.cfg.target == "next" else [4]:
        prefixes = torch.tensor(list(itertools.product([0, 1], repeat=L)))
        tokens = torch.cat([prefixes, torch.zeros(len(prefixes), 4 - L, dtype=torch.long)], 1)
        bayes = task.bayes(tokens, samples=20_000)[:, L - 1, 1]
        checked = 0
        for prefix, p in zip(prefixes, bayes.tolist()):
            seen = (x[:, :L] == prefix).all(1)
            n = int(seen.sum())
            if n >= 2000:
                freq = x[seen, L].float().mean().item()
                assert abs(freq - p) < 4.5 * (freq * (1 - freq) / n) ** 0.5 + 1e-3, (L, prefix.tolist(), freq, p, n)
                checked += 1
        assert checked >= 2


def test_same_generator_state_same_batch():
    for params in ({}, {"graph": "dag", "target": "next"}):
        task = make(**params)
        a, b, c = (task.sample(8, gen(s), split="eval") for s in (7, 7, 8))
        assert (
            torch.equal(a.tokens, b.tokens)
            and torch.equal(a.targets, b.targets)
            and not torch.equal(a.tokens, c.tokens)
        )
        assert all(torch.equal(a.truth[key], b.truth[key]) for key in task.truth_keys)
        assert set(task.sample(4, gen(), split="train").truth) == set(task.truth_keys) - {"bayes"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_sample_on_cuda():
    task = make(target="next")
    a, b = (task.sample(64, torch.Generator("cuda").manual_seed(3), "cuda", "eval") for _ in range(2))
    assert a.tokens.device.type == "cuda" and torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.truth["bayes"], b.truth["bayes"])
    cpu = task.bayes(a.tokens.cpu())
    assert (cpu - a.truth["bayes"].cpu()).abs().max() < 0.1  # other draws, the same predictor


def test_metrics_kl_to_bayes_at_scored_positions():
    for target in ("query", "next"):
        task = make(target=target, roots="uniform")
        b = task.sample(64, gen(), split="eval")
        m = task.metrics(b.truth["bayes"].log(), b)
        assert m["kl_bayes"] == pytest.approx(0.0, abs=1e-6)
        assert task.metrics(torch.zeros(64, 20, 10), b)["kl_bayes"] > 0.05
        # the Bayes predictor loses to the true conditional, and beats ignoring the context
        nll = {
            key: -b.truth[key].gather(-1, b.targets[..., None])[..., 0].log()[b.mask].mean().item()
            for key in ("conditional", "bayes")
        }
        assert nll["conditional"] < nll["bayes"] < math.log(10)


@pytest.mark.parametrize(
    "params, field",
    [
        ({"k": 1}, "task.k"),
        ({"length": 1}, "task.length"),
        ({"alpha": 0}, "task.alpha"),
        ({"graph": "dag", "parents": 4}, "task.parents"),
        ({"graph": "dag", "roots": "stationary"}, "task.roots"),
        ({"graph": "dag", "k": 2, "parents": 3, "length": 2}, "task.length"),
        ({"graph": "forest"}, "task.graph"),
        ({"target": "all"}, "task.target"),
    ],
)
def test_validation(params, field):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        tasks.make("causal_icl", params)


@pytest.mark.reference("causal_icl")
@pytest.mark.parametrize(
    "params",
    [
        {"graph": "tree", "k": 4, "length": 10, "seed": 3},
        {"graph": "chain", "k": 3, "length": 8, "target": "next"},
        {"graph": "dag", "k": 3, "parents": 2, "length": 8},
    ],
)
def test_latents_match_a_slow_reference(params):
    """The tokens of each node's parents in the task's hidden graph, as a base-k number (first parent most
    significant), read position by position; defined where the node has parents."""
    task = make(**params)
    k, T = task.cfg.k, task.cfg.length
    graph = [[q for q in row if q >= 0] for row in task.graph.parents.tolist()]
    batch = task.sample(8, gen(6), split="eval")
    values, defined = latent_values(task, batch)["parent_tokens"]
    assert [latent.n_values for latent in task.latents] == [k ** task.graph.parents.shape[1]]
    for i, row in enumerate(batch.tokens.tolist()):
        assert defined[i].tolist() == [bool(graph[t]) for t in range(T)]
        for t in range(T):
            if graph[t]:
                number = 0
                for q in graph[t]:
                    number = number * k + row[q]
                assert values[i, t].item() == number, (t, graph[t], row)
