"""In-context Markov chains (Edelman et al. 2024): each sequence has its own transition matrix.

The model must infer the transitions from the context. Training goes through stages — uniform,
then unigram (token frequencies), then bigram (an induction-like circuit) — visible as which
reference predictor the model is closest to; `truth` carries those predictors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, Optional

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.config import MAX_CTX, check, check_fields, doc, validates_itself
from mechsynth.tasks.base import TASKS, Batch, Convergence, Task, TaskSpec, compose_prefix


MAX_ALPHA = 1e6
BAYES_SAMPLES = (
    512  # posterior draws per position for Bayes' predictor where it has no closed form: ~0.004 error in a probability
)


@validates_itself
@dataclass(frozen=True)
class MarkovICLConfig:
    k: int = doc("number of states (the vocabulary)", 3, lo=2, hi=4096, why="k**(order-1) contexts ≤ 4096")
    order: int = doc(
        "n of the n-gram: 2 = bigram (next token depends on 1 previous), 3 = trigram, ...",
        2,
        lo=2,
        hi=13,
        why="k**(order-1) contexts ≤ 4096",
    )
    length: int = doc("T, tokens per sequence fed to the model", 100, lo=2, hi=MAX_CTX)
    alpha: float = doc(
        "Dirichlet concentration of the transition rows; > 0 and ≤ 10**6 (past float32's range the "
        "Gamma sampler never accepts a draw; at 10**6 the rows are already uniform)",
        1.0,
    )
    prior: Literal["dirichlet", "doubly_stochastic", "unigram"] = doc(
        "rows iid Dirichlet; doubly stochastic (uniform stationary distribution); or one row shared by all contexts",
        "dirichlet",
    )
    start: Literal["stationary", "uniform"] = doc(
        "how the first order-1 tokens are drawn: from the chain's stationary distribution (Edelman et al.'s "
        "generator; they then say something about the chain), or uniformly (they say nothing)",
        "stationary",
    )

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first: k**(order-1) with order = 10**20 would never end
        check(
            self.k ** (self.order - 1) <= 4096,
            "order",
            f"k**(order-1) contexts must be ≤ 4096, got {self.k ** (self.order - 1)}",
        )
        check(self.length >= self.order, "length", f"must be ≥ order={self.order}, got {self.length}")
        check(
            0 < self.alpha <= MAX_ALPHA,
            "alpha",
            f"must be in (0, 10**6], got {self.alpha}; allowed: 0 < alpha ≤ 10**6 "
            "(rows are uniform long before; past float32's range the Gamma sampler never accepts a draw)",
        )
        check(
            self.prior != "doubly_stochastic" or self.order == 2,
            "prior",
            "'doubly_stochastic' is defined for order=2 only; allowed with order>2: 'dirichlet', 'unigram'",
        )

    # For the memory estimate (mechsynth/training/budget.py) before anything is built.
    context_field: ClassVar[str] = "task.length"

    def sample_bytes(self, n_seqs: int, split: str) -> tuple[int, int]:
        """(bytes of `sample(n_seqs, split=split)`'s batch, peak bytes while making it), per sequence:
        the transition rows and their Gamma draws (C x k), the lifted chain and its stationary solve
        (C x C, float64), the walk's draws and maps (steps x C, int64; the comparison steps x C x k), and for
        an evaluation split the reference predictors' transition counts (T x C x k) and Bayes' draws."""
        C, k, T = self.k ** (self.order - 1), self.k, self.length
        steps = T + 2 - self.order
        kept = T * 17 + (C * k + C) * 4 + (0 if split == "train" else 4 * T * k * 4)
        rows = 10 * C * k * 4
        chain = 12 * k**3 + 8 * k * k if self.prior == "doubly_stochastic" else 28 * C * C
        walk = steps * C * (4 + k + 6 * 8)
        predictors = 0 if split == "train" else 20 * T * C * k
        # Bayes' predictor by importance sampling: a chunk of positions at a time (as importance_bayes picks
        # it), its draws' Gamma variables, rows, lifted chains and their float64 stationary solves (~36 bytes
        # per position, draw and context pair)
        importance = 0
        if split != "train" and self.prior == "dirichlet" and self.start == "stationary":
            per_position = n_seqs * BAYES_SAMPLES * C * C
            importance = 36 * per_position * min(T, max(1, 2**22 // per_position))
        return n_seqs * kept, n_seqs * (kept + rows + chain + walk + predictors) + importance


def sample_gamma(alpha: float | Tensor, shape: tuple[int, ...], generator: torch.Generator, device) -> Tensor:
    """Gamma(alpha, 1) by Marsaglia–Tsang, drawing only from `generator` (torch's own gamma sampler
    takes no generator, so it could not be reproduced from the data seed). `alpha`: one shape for all,
    or a tensor of `shape`, one per draw."""
    if not isinstance(alpha, Tensor) and alpha == 1.0:  # Gamma(1) is exponential: no rejection loop, no device sync
        return -torch.log1p(-torch.rand(shape, generator=generator, device=device))
    alpha = torch.as_tensor(alpha, dtype=torch.float, device=device).expand(shape)
    boost = alpha < 1  # Gamma(a) = Gamma(a + 1) * U**(1/a)
    a = torch.where(boost, alpha + 1, alpha)
    d = a - 1 / 3
    c = 1 / (9 * d) ** 0.5
    out = torch.empty(shape, device=device)
    todo = torch.ones(shape, dtype=torch.bool, device=device)
    while bool(todo.any()):  # acceptance is > 95%, so this loops a few times at most
        x = torch.randn(shape, generator=generator, device=device)
        u = torch.rand(shape, generator=generator, device=device)
        v = (1 + c * x) ** 3
        ok = (v > 0) & (torch.log(u) < 0.5 * x**2 + d - d * v + d * torch.log(v.clamp_min(1e-30)))
        take = ok & todo
        out[take] = (d * v)[take]
        todo &= ~ok
    if bool(boost.any()):
        out = torch.where(boost, out * torch.rand(shape, generator=generator, device=device) ** (1 / alpha), out)
    return out


def dirichlet(alpha: float | Tensor, shape: tuple[int, ...], generator: torch.Generator, device) -> Tensor:
    g = sample_gamma(alpha, shape, generator, device).clamp_min(1e-30)
    return g / g.sum(-1, keepdim=True)


def stationary(P: Float[Tensor, "batch state state"]) -> Float[Tensor, "batch state"]:
    """π with π P = π and Σπ = 1, solved in batch: (Pᵀ − I) π = 0 with one row replaced by ones."""
    n = P.shape[-1]
    A = P.transpose(-1, -2) - torch.eye(n, device=P.device, dtype=P.dtype)
    A[:, -1, :] = 1.0
    b = torch.zeros(P.shape[0], n, device=P.device, dtype=P.dtype)
    b[:, -1] = 1.0
    pi = torch.linalg.solve(A.double(), b.double()).clamp_min(0)
    return (pi / pi.sum(-1, keepdim=True)).to(P.dtype)


def markov_truth(
    tokens: Int[Tensor, "batch pos"],
    transition: Float[Tensor, "batch context d_vocab_out"],
    stationary: Float[Tensor, "batch context"],
    uniform: Optional[Float[Tensor, "batch pos d_vocab_out"]] = None,
    unigram: Optional[Float[Tensor, "batch pos d_vocab_out"]] = None,
    ngram: Optional[Float[Tensor, "batch pos d_vocab_out"]] = None,
    bayes: Optional[Float[Tensor, "batch pos d_vocab_out"]] = None,
) -> dict[str, Tensor]:
    """Batch.truth of markov_icl: `transition` [batch, context, d_vocab_out], each sequence's chain (row c:
    the distribution of the token after context c); `stationary` [batch, context], the stationary
    distribution of its contexts; and in evaluation batches each reference predictor (`uniform`,
    `unigram`, `ngram`, `bayes`: MarkovICL.strategies) [batch, pos, d_vocab_out], its distribution of
    the token after each position."""
    predictors = {"uniform": uniform, "unigram": unigram, "ngram": ngram, "bayes": bayes}
    return {"transition": transition, "stationary": stationary} | {k: v for k, v in predictors.items() if v is not None}


@TASKS.register("markov_icl")
class MarkovICL(Task):
    """Contexts are the last order-1 tokens read as a base-k number, the most recent token last
    (least significant): context = Σ x_{t-i} k^i for i = 0..order-2."""

    Config = MarkovICLConfig
    patch_metric = "loss"
    # The next token is random, so accuracy tops out well below 1 (the demo's near 0.58): converged is within 0.02
    # nats of the Bayes-optimal predictor (from ~0.35 at init; the demo gets there soon after its transition).
    convergence = Convergence("kl_bayes", 0.02, below=True)

    @property
    def n_contexts(self) -> int:
        return self.cfg.k ** (self.cfg.order - 1)

    @property
    def spec(self) -> TaskSpec:
        names = tuple(str(i) for i in range(self.cfg.k))
        return TaskSpec(
            d_vocab=self.cfg.k, d_vocab_out=self.cfg.k, n_ctx=self.cfg.length, token_names=names, target_names=names
        )

    @property
    def strategies(self) -> tuple[str, ...]:
        """Reference predictors in `truth` (no closed-form Bayes predictor for the doubly-stochastic prior)."""
        base = ("uniform", "unigram", "ngram")
        return base if self.cfg.prior == "doubly_stochastic" else base + ("bayes",)

    @property
    def truth_keys(self) -> tuple[str, ...]:  # type: ignore[override]
        """Each sequence's chain, and the reference predictors (not in training batches: they cost more
        than the batch and training never reads them); their shapes: `markov_truth`."""
        return ("transition", "stationary") + self.strategies

    def transitions(
        self, batch_size: int, generator: torch.Generator, device
    ) -> Float[Tensor, "batch context d_vocab_out"]:
        cfg, C = self.cfg, self.n_contexts
        if cfg.prior == "dirichlet":
            return dirichlet(cfg.alpha, (batch_size, C, cfg.k), generator, device)
        if cfg.prior == "unigram":
            return (
                dirichlet(cfg.alpha, (batch_size, 1, cfg.k), generator, device)
                .expand(batch_size, C, cfg.k)
                .contiguous()
            )
        # Birkhoff: a convex combination of permutation matrices is doubly stochastic.
        weights = dirichlet(cfg.alpha, (batch_size, cfg.k), generator, device)
        perms = torch.rand(batch_size, cfg.k, cfg.k, generator=generator, device=device).argsort(-1)
        return torch.einsum("bm,bmij->bij", weights, F.one_hot(perms, cfg.k).float())

    def lifted(self, P: Float[Tensor, "batch context d_vocab_out"]) -> Float[Tensor, "batch context context"]:
        """The chain on contexts: context c goes to (c * k + x) mod k**(order-1) with probability P[c, x]."""
        C, k = self.n_contexts, self.cfg.k
        nxt = (torch.arange(C, device=P.device)[:, None] * k + torch.arange(k, device=P.device)) % C
        L = torch.zeros(P.shape[0], C, C, device=P.device, dtype=P.dtype)
        return L.scatter_add_(2, nxt.expand(P.shape[0], C, k), P)

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        self.check_split(split)
        cfg, C, k = self.cfg, self.n_contexts, self.cfg.k
        P = self.transitions(batch_size, generator, device)
        if cfg.prior == "doubly_stochastic":  # uniform is stationary (and the chain may be reducible)
            pi = torch.full((batch_size, C), 1 / C, device=device)
        else:
            pi = stationary(self.lifted(P))
        # The first order-1 tokens are a context drawn from the stationary distribution (or uniformly).
        u0 = torch.rand(batch_size, 1, generator=generator, device=device)
        start = pi if cfg.start == "stationary" else torch.full_like(pi, 1 / C)
        ctx = (start.cumsum(-1) < u0).sum(-1).clamp_max(C - 1)
        first = torch.stack([(ctx // k**i) % k for i in range(cfg.order - 2, -1, -1)], 1)
        # Draw every sequence's successor of every context at every step up front (vectorised
        # inverse-CDF). Step t is then a map on contexts, and the walk is their running composition.
        steps = cfg.length + 2 - cfg.order
        u = torch.rand(batch_size, steps, C, 1, generator=generator, device=device)
        successors = (P.cumsum(-1)[:, None] < u).sum(-1).clamp_max(k - 1)  # [batch, step, context]
        maps = (torch.arange(C, device=device) * k + successors) % C
        contexts = compose_prefix(maps).gather(2, ctx[:, None, None].expand(-1, steps, 1))[..., 0]
        x = torch.cat([first, contexts % k], 1)
        tokens, targets = x[:, :-1], x[:, 1:]
        # The reference predictors cost more than the batch; training never reads them.
        truth = markov_truth(tokens, P, pi, **(self.predictors(tokens) if split != "train" else {}))
        return Batch(tokens, targets, torch.ones_like(tokens, dtype=torch.bool), truth)

    def counterfactual(self, batch, generator, control=False) -> Optional[Batch]:
        """A fresh batch of as many sequences, each a new chain from the prior and a walk on it: every in-context
        statistic the predictions read changes. Drawn on the batch's device with a generator seeded from
        `generator`; an evaluation batch (one with the reference predictors) gets them too. No control: every
        token is evidence about the chain."""
        if control:
            return None
        device = batch.tokens.device
        seeded = torch.Generator(device=device).manual_seed(int(torch.randint(2**62, (), generator=generator)))
        split = "eval" if set(self.strategies) <= set(batch.truth) else "train"
        return self.sample(batch.tokens.shape[0], seeded, device, split)

    def predictors(self, tokens: Int[Tensor, "batch pos"]) -> dict[str, Float[Tensor, "batch pos d_vocab_out"]]:
        """Each reference strategy's distribution for the token after position t, from tokens 0..t.

        n-gram and Bayes count the transitions seen so far out of the current context; before a
        full context exists (t < order-2) they fall back to the unigram-style estimate.
        """
        cfg, C, k = self.cfg, self.n_contexts, self.cfg.k
        B, T = tokens.shape
        onehot = F.one_hot(tokens, k).float()
        counts = onehot.cumsum(1)  # tokens seen in 0..t
        n_seen = torch.arange(1, T + 1, device=tokens.device, dtype=torch.float)[None, :, None]
        out = {"uniform": torch.full((B, T, k), 1 / k, device=tokens.device), "unigram": (counts + 1) / (n_seen + k)}
        # ctx[t] = the context ending at t (valid for t >= order-2).
        o = cfg.order - 1
        ctx = torch.zeros(B, T, dtype=torch.long, device=tokens.device)
        for i in range(o):
            ctx[:, o - 1 :] += tokens[:, o - 1 - i : T - i] * k**i
        # Transition (context at s-1 -> token at s) is complete once s <= t.
        trans = torch.zeros(B, T, C, k, device=tokens.device)
        s = torch.arange(o, T, device=tokens.device)
        trans[:, s] = F.one_hot(ctx[:, s - 1] * k + tokens[:, s], C * k).float().view(B, len(s), C, k)
        seen = trans.cumsum(1)[torch.arange(B)[:, None], torch.arange(T)[None, :], ctx]  # [B, T, k]
        total = seen.sum(-1, keepdim=True)
        full = (torch.arange(T, device=tokens.device) >= o - 1)[None, :, None]
        out["ngram"] = torch.where(full, (seen + 1) / (total + k), out["unigram"])
        if cfg.prior == "unigram":  # every token is an iid draw from the shared row (also the first ones,
            # whose stationary distribution is that row's product); uniformly drawn first tokens say nothing
            if cfg.start == "uniform":
                early = (torch.arange(T, device=tokens.device) < o)[None, :, None]
                counts = counts - (onehot * early).cumsum(1)
                n_seen = n_seen - early.cumsum(1)
            out["bayes"] = torch.where(n_seen > 0, (counts + cfg.alpha) / (n_seen + k * cfg.alpha), 1 / k)
        elif cfg.prior == "dirichlet" and cfg.start == "uniform":  # conjugate: the counts are all the evidence
            out["bayes"] = torch.where(full, (seen + cfg.alpha) / (total + k * cfg.alpha), 1 / k)
        elif cfg.prior == "dirichlet":
            out["bayes"] = self.importance_bayes(tokens, ctx)
        return out

    @torch.no_grad()
    def importance_bayes(
        self, tokens: Int[Tensor, "batch pos"], ctx: Int[Tensor, "batch pos"], samples: int = BAYES_SAMPLES
    ) -> Float[Tensor, "batch pos d_vocab_out"]:
        """The posterior predictive when the first context was drawn from the chain's stationary distribution
        π, which makes it evidence too: p(P | x) ∝ π_P(first context) · Dirichlet posterior(P | counts). Drawn
        by importance sampling: `samples` chains from the Dirichlet posterior of the counts so far, weighted
        by π_P(first context). Before the first full context (order > 2), the next token is still part of
        the first context: its predictive is the ratio of π's marginals over prefixes, under the prior.

        The posterior draws of all positions come from one path per sample: Gamma(a + 1) = Gamma(a) +
        Exp(1), so adding an exponential to the observed transition's Gamma variable turns a draw from
        position t's posterior into one from t + 1's (each position's draws are exact; neighbours are
        correlated, which costs no bias). The draws come from a fixed seed: the same tokens give the same
        predictor."""
        cfg, C, k, o = self.cfg, self.n_contexts, self.cfg.k, self.cfg.order - 1
        B, T = tokens.shape
        dev = tokens.device
        g = torch.Generator(device=dev).manual_seed(0)
        first = sum(tokens[:, j] * k ** (o - 1 - j) for j in range(o))  # [batch]: the first context
        cell = torch.zeros(B, T, dtype=torch.long, device=dev)  # the transition completed at t, as context * k + token
        cell[:, o:] = ctx[:, o - 1 : -1] * k + tokens[:, o:]
        gamma = sample_gamma(cfg.alpha, (B, 1, samples, C * k), g, dev)  # the prior's draws, as Gamma variables
        out = torch.empty(B, T, k, device=dev)
        chunk = max(1, 2**22 // (B * samples * C * C))  # positions at a time: ~16 MB per tensor
        for t0 in range(0, T, chunk):
            ts = torch.arange(t0, min(T, t0 + chunk), device=dev)
            steps = torch.zeros(B, len(ts), samples, C * k, device=dev)
            grow = sample_gamma(1.0, (B, len(ts), samples, 1), g, dev) * (ts >= o)[None, :, None, None]
            steps.scatter_(3, cell[:, ts, None, None].expand(B, len(ts), samples, 1), grow)
            G = gamma + steps.cumsum(1)  # [batch, t, sample, context * d_vocab_out]
            gamma = G[:, -1:]
            P = G.view(B, len(ts), samples, C, k)
            P = P / P.sum(-1, keepdim=True)
            pi = stationary(self.lifted(P.flatten(0, 2))).view(B, len(ts), samples, C)
            weight = pi.gather(-1, first[:, None, None, None].expand(B, len(ts), samples, 1))  # [batch, t, sample, 1]
            rows = P.gather(3, ctx[:, ts, None, None, None].expand(B, len(ts), samples, 1, k))[:, :, :, 0]
            out[:, ts] = (weight * rows).sum(2) / weight.sum(2)
            for i, t in enumerate(ts.tolist()):
                if t < o - 1:  # the next token is digit t + 1 of the first context
                    marginal = pi[:, i].reshape(B, samples, k ** (t + 2), -1).sum(-1)  # of tokens 0..t+1
                    prefix = first // k ** (o - 1 - t)
                    num = marginal.gather(
                        -1, (prefix[:, None, None] * k + torch.arange(k, device=dev)).expand(B, samples, k)
                    )
                    out[:, t] = num.sum(1) / num.sum((1, 2))[:, None]
        return out

    def metrics(self, logits, batch) -> dict[str, float]:
        """Adds kl_<strategy>: KL(strategy ‖ model) averaged over positions, where the batch carries the
        strategies (a fixed training set, drawn from the training split, does not)."""
        out = super().metrics(logits, batch)
        logp = logits.float().log_softmax(-1)
        for name in self.strategies:
            if name not in batch.truth:
                continue
            q = batch.truth[name]
            out[f"kl_{name}"] = (q * (q.clamp_min(1e-30).log() - logp)).sum(-1).mean().item()
        return out
