"""markov_icl against a slow reference: plain loops over the same definition."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
import torch

from mechsynth import tasks
from mechsynth.errors import ConfigError


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def reference_predictors(
    tokens: list[int], k: int, order: int, alpha: float, prior: str, start: str
) -> dict[str, list]:
    """Per position t: the distribution of the token after t from tokens[0..t], by counting. Bayes' predictor
    is the conjugate count estimate where the first order-1 tokens say nothing about the chain (drawn
    uniformly), or are iid draws from the one shared row (the unigram prior, stationary start)."""
    out = {"uniform": [], "unigram": [], "ngram": [], "bayes": []}
    for t in range(len(tokens)):
        seen = tokens[: t + 1]
        uni = Counter(seen)
        out["uniform"].append([1 / k] * k)
        out["unigram"].append([(uni[j] + 1) / (t + 1 + k) for j in range(k)])
        if prior == "unigram":
            evidence = Counter(seen[order - 1 :] if start == "uniform" else seen)
            n = sum(evidence.values())
            out["bayes"].append([(evidence[j] + alpha) / (n + k * alpha) for j in range(k)])
        if t < order - 2:  # no full context yet
            out["ngram"].append(out["unigram"][-1])
            if prior == "dirichlet":
                out["bayes"].append([1 / k] * k)
            continue
        ctx = tuple(seen[t - order + 2 :])
        trans = Counter(seen[s] for s in range(order - 1, t + 1) if tuple(seen[s - order + 1 : s]) == ctx)
        total = sum(trans.values())
        out["ngram"].append([(trans[j] + 1) / (total + k) for j in range(k)])
        if prior == "dirichlet":
            out["bayes"].append([(trans[j] + alpha) / (total + k * alpha) for j in range(k)])
    return out


@pytest.mark.parametrize(
    "k, order, prior, alpha, start",
    [
        (3, 2, "dirichlet", 1.0, "uniform"),
        (2, 3, "dirichlet", 0.5, "uniform"),
        (4, 2, "unigram", 2.0, "stationary"),
        (3, 3, "unigram", 1.0, "uniform"),
        (3, 2, "doubly_stochastic", 1.0, "stationary"),
    ],
)
@pytest.mark.reference("markov_icl")
def test_predictors_match_reference(k, order, prior, alpha, start):
    task = tasks.make(
        "markov_icl", {"k": k, "order": order, "length": 24, "prior": prior, "alpha": alpha, "start": start}
    )
    b = task.sample(6, gen(), split="eval")
    assert torch.equal(b.tokens[:, 1:], b.targets[:, :-1]) and b.mask.all()
    for i, row in enumerate(b.tokens.tolist()):
        ref = reference_predictors(row, k, order, alpha, prior, start)
        for name in task.strategies:
            torch.testing.assert_close(b.truth[name][i], torch.tensor(ref[name]), atol=1e-6, rtol=0)
    assert ("bayes" in task.strategies) == (prior != "doubly_stochastic")


@pytest.mark.parametrize("order", [2, 3])
@pytest.mark.reference("markov_icl")
def test_bayes_is_the_generators_own_posterior_predictive(order):
    """With the first context drawn from the stationary distribution, Bayes' predictor is not the count
    estimate: after 0000 the next token is 1 with probability ~0.165, not 0.2. Against the generator
    itself: for every prefix of up to 4 tokens seen ≥ 2000 times in 800k sequences, the frequency of the
    next token equals the importance-weighted predictor (20,000 draws) within 4.5 standard errors."""
    task = tasks.make("markov_icl", {"k": 2, "order": order, "length": 5})
    x = torch.cat(
        [torch.cat([b.tokens, b.targets[:, -1:]], 1) for b in (task.sample(200_000, gen(i)) for i in range(4))]
    )
    for L in range(1, 5):
        prefixes = torch.tensor(list(itertools.product([0, 1], repeat=L)))
        tokens = torch.cat([prefixes, torch.zeros(len(prefixes), 5 - L, dtype=torch.long)], 1)
        ctx = tokens if order == 2 else torch.cat([tokens[:, :1], 2 * tokens[:, :-1] + tokens[:, 1:]], 1)
        bayes = task.importance_bayes(tokens, ctx, samples=20_000)[:, L - 1, 1]
        for prefix, p in zip(prefixes, bayes.tolist()):
            seen = (x[:, :L] == prefix).all(1)
            n = int(seen.sum())
            if n >= 2000:
                freq = x[seen, L].float().mean().item()
                assert abs(freq - p) < 4.5 * (freq * (1 - freq) / n) ** 0.5 + 1e-3, (prefix.tolist(), freq, p, n)
    if order == 2:  # the count estimate is not it
        freq = x[(x[:, :4] == 0).all(1), 4].float().mean().item()
        assert 0.15 < freq < 0.18 and task.predictors(torch.zeros(1, 5, dtype=torch.long))["ngram"][0, 3, 1] == 0.2


@pytest.mark.reference("markov_icl")
def test_chain_follows_its_transition_matrix():
    """Empirical transition counts per sequence, pooled, match the truth matrices (chi-square)."""
    task = tasks.make("markov_icl", {"k": 3, "length": 200})
    b = task.sample(512, gen())
    P, x = b.truth["transition"], torch.cat([b.tokens, b.targets[:, -1:]], 1)
    chi2, dof = 0.0, 0
    for c in range(3):
        n_from = torch.zeros(512)
        observed = torch.zeros(3)
        expected = torch.zeros(3)
        for i in range(512):
            row = x[i].tolist()
            nxt = Counter(row[s + 1] for s in range(len(row) - 1) if row[s] == c)
            n = sum(nxt.values())
            observed += torch.tensor([nxt[j] for j in range(3)], dtype=torch.float)
            expected += n * P[i, c]
            n_from[i] = n
        chi2 += (((observed - expected) ** 2) / expected).sum().item()
        dof += 2
    assert chi2 < dof + 6 * math.sqrt(2 * dof)


def test_first_token_is_stationary_and_matrices_are_stochastic():
    for prior in ("dirichlet", "doubly_stochastic", "unigram"):
        task = tasks.make("markov_icl", {"k": 3, "length": 8, "prior": prior})
        b = task.sample(4000, gen(1))
        P, pi = b.truth["transition"], b.truth["stationary"]
        torch.testing.assert_close(P.sum(-1), torch.ones(4000, 3))
        torch.testing.assert_close(torch.einsum("bc,bck->bk", pi, P), pi, atol=1e-5, rtol=0)
        if prior == "doubly_stochastic":
            torch.testing.assert_close(P.sum(-2), torch.ones(4000, 3), atol=1e-5, rtol=0)
            torch.testing.assert_close(pi, torch.full((4000, 3), 1 / 3))
        if prior == "unigram":
            assert torch.equal(P[:, 0], P[:, 1]) and torch.equal(P[:, 1], P[:, 2])
        # P(first token = j) = E[pi_j]: compare with the mean stationary distribution.
        freq = torch.bincount(b.tokens[:, 0], minlength=3).float() / 4000
        assert (freq - pi.mean(0)).abs().max() < 0.03


def test_strategy_losses_are_ordered():
    task = tasks.make("markov_icl", {"k": 3, "length": 100})
    b = task.sample(96, gen(), split="eval")
    nll = {s: -b.truth[s].gather(-1, b.targets[..., None]).log().mean().item() for s in task.strategies}
    assert nll["bayes"] <= nll["ngram"] < nll["unigram"] < nll["uniform"]


def test_trigram_contexts_and_determinism():
    task = tasks.make("markov_icl", {"k": 3, "order": 3, "length": 30})
    a, b, c = task.sample(16, gen(7)), task.sample(16, gen(7)), task.sample(16, gen(8))
    assert a.truth["transition"].shape == (16, 9, 3)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)


def test_model_kl_metrics():
    task = tasks.make("markov_icl", {"k": 3, "length": 20})
    b = task.sample(32, gen(), split="eval")
    perfect = b.truth["bayes"].log()  # a model that is the Bayes predictor
    m = task.metrics(perfect, b)
    assert m["kl_bayes"] == pytest.approx(0.0, abs=1e-6) and m["kl_uniform"] > 0


@pytest.mark.parametrize(
    "params, field",
    [
        ({"k": 1}, "task.k"),
        ({"order": 1}, "task.order"),
        ({"alpha": 0}, "task.alpha"),
        ({"prior": "doubly_stochastic", "order": 3}, "task.prior"),
        ({"length": 1}, "task.length"),
    ],
)
def test_validation(params, field):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        tasks.make("markov_icl", params)
