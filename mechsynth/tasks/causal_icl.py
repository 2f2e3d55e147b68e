"""In-context causal structure (Nichani, Damian, Lee 2024): sequences drawn along a hidden causal graph.

The graph is fixed by the task seed and never shown: a model learns it in its weights (a first-layer head
attending from each position to its parent), while each sequence has its own transition kernel, drawn from a
Dirichlet prior, which it must read from the context (a second-layer head attending to earlier children of
the same parent token: an induction head along the graph's edges).

Nodes 0..T (T = `length`): the tokens are nodes 0..T-1 and node T is the answer, the last target; position t's
target is node t+1. A root (a node without parents) is drawn from the kernel's stationary distribution or
uniformly (`roots`); any other node from the kernel's row for its parents' tokens (a base-k number, the first
parent most significant, as markov_icl's contexts). `target`: "next" scores every position; "query" only the
last. In query mode chain and tree end as their InContextTree does: the graph family spans nodes 0..T-2, node
T-1 is a query token drawn uniformly and the answer is its child, so the last target is a draw from the kernel
row of the query token. The dag has no query token: its answer node has parents in the graph like any other.

From their reference code (github eshnich/transformers-learn-causal-structure, JAX):
- problems.py InContextTree: one k x k kernel per sequence, rows iid Dirichlet(alpha); roots from its
  stationary distribution; the query token uniform, its label the kernel row (`conditional` here); their
  `bayes` is the add-alpha count of children of earlier occurrences of the query token.
- single_parent.py: S = 10 tokens, T = 20, alpha = 0.1; "chain" (parent i-1) and "random" (our "tree": node i's
  parent is uniform over {no parent, 0, ..., i-1}, so node i is a root with probability 1/(i+1)).
- problems.py InContextDAG and multi_parent.ipynb: multi-parent kernels (a row per parent-token tuple), uniform
  roots, and a random DAG (commented out there) whose nodes i >= 2 have 2 distinct parents drawn uniformly
  from nodes < i, the earlier ones roots; our "dag" takes `parents` of them instead of 2 (with parents = 1:
  a tree whose every node but the first has a parent, uniform among the earlier ones: many_graphs.ipynb's
  random graph with no extra roots).
Our default graph is "tree" (their script's is "chain", which markov_icl already covers).
Not theirs: their `bayes` leaves out what stationary roots say about the kernel (it is exact for uniform roots
only); ours is the posterior predictive given everything seen, importance-sampled where roots are stationary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, NamedTuple, Optional

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth.config import MAX_CTX, MAX_SEED, check, check_fields, doc, validates_itself
from mechsynth.tasks.base import TASKS, Batch, Latent, Task, TaskSpec, align, task_generator
from mechsynth.tasks.markov_icl import BAYES_SAMPLES, MAX_ALPHA, dirichlet, sample_gamma, stationary

MAX_ROWS = 4096  # kernel rows per sequence, k**parents (as markov_icl's contexts)
CHUNK = 2**22  # elements per tensor in Bayes' importance sampler: ~16 MB


@validates_itself
@dataclass(frozen=True)
class CausalICLConfig:
    k: int = doc("vocabulary size S (theirs: 10)", 10, lo=2, hi=MAX_ROWS, why="k**parents kernel rows ≤ 4096")
    length: int = doc("T, tokens per sequence fed to the model (theirs: 20)", 20, lo=2, hi=MAX_CTX)
    graph: Literal["chain", "tree", "dag"] = doc(
        "the hidden causal graph: chain (the parent of i is i-1: an in-context Markov chain); tree (their 'random' "
        "graph: node i's parent is uniform over {none, 0, ..., i-1}, so some nodes are roots); dag (nodes i ≥ parents "
        "have `parents` distinct parents drawn uniformly from nodes < i, the others are roots)",
        "tree",
    )
    parents: int = doc(
        "parents of each non-root node of the dag (graph = 'dag' only)",
        2,
        lo=1,
        hi=12,
        why="k**parents kernel rows ≤ 4096",
    )
    alpha: float = doc("Dirichlet concentration of the kernel's rows (theirs: 0.1); > 0 and ≤ 10**6", 0.1)
    roots: Literal["auto", "stationary", "uniform"] = doc(
        "how roots are drawn: from the kernel's stationary distribution, or uniformly; auto = as their code: "
        "stationary for chain and tree, uniform for the dag (a multi-parent kernel has no stationary distribution)",
        "auto",
    )
    target: Literal["query", "next"] = doc(
        "query: only the last position is scored, its target a draw from the kernel given its parents (chain and "
        "tree: the row of a uniformly drawn query token, their setup); next: the next token at every position",
        "query",
    )
    seed: int = doc(
        "seed of the graph (tree and dag; the chain has none)", 0, lo=0, hi=MAX_SEED, why="torch seeds are 64-bit"
    )

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first: k**parents with parents = 10**20 would never end
        check(
            0 < self.alpha <= MAX_ALPHA,
            "alpha",
            f"must be in (0, 10**6], got {self.alpha}; allowed: 0 < alpha ≤ 10**6 "
            "(rows are uniform long before; past float32's range the Gamma sampler never accepts a draw)",
        )
        if self.graph == "dag":
            check(
                self.k**self.parents <= MAX_ROWS,
                "parents",
                f"k**parents kernel rows must be ≤ 4096, got {self.k}**{self.parents} = {self.k**self.parents}",
            )
            check(
                self.length >= self.parents,
                "length",
                f"must be ≥ parents={self.parents} (the answer needs its parents among the tokens), got {self.length}",
            )
            check(
                self.roots != "stationary",
                "roots",
                "'stationary' is defined for chain and tree only (one parent); "
                "allowed with graph = 'dag': 'auto', 'uniform'",
            )

    @property
    def root_kind(self) -> str:
        return "uniform" if self.roots == "uniform" or self.graph == "dag" else "stationary"

    # For the memory estimate (mechsynth/training/budget.py) before anything is built.
    context_field: ClassVar[str] = "task.length"

    def sample_bytes(self, n_seqs: int, split: str) -> tuple[int, int]:
        """(bytes of `sample(n_seqs, split=split)`'s batch, peak bytes while making it), per sequence: the
        kernel and its Gamma draws (rows x k), its stationary solve (k x k, float64), the nodes' draws and each
        level's gathered rows, `conditional` (T x k), `parent_tokens` and `has_parents`; for an evaluation split
        Bayes' predictor: the counts' matches (T x T) or, with stationary roots, the importance sampler's draws and
        solves (~40 bytes per draw and kernel entry, CHUNK of them at a time)."""
        k, T = self.k, self.length
        m = self.parents if self.graph == "dag" else 1
        rows = k**m
        evaluating = split != "train"
        kept = T * 26 + rows * k * 4 + k * 4 + (T + 1) * m * 8 + T * k * 4 * (2 if evaluating else 1)
        kernel = 12 * rows * k * 4 + (28 * k * k if self.root_kind == "stationary" else 0)
        draw = (T + 1) * (12 + m * 8 + 5 * k)
        predictors = T * T * 5 + T * k * 12 if evaluating else 0
        importance = 0
        if evaluating and self.root_kind == "stationary":
            per_seq = BAYES_SAMPLES * k * k
            importance = 40 * per_seq * min(n_seqs, max(1, CHUNK // per_seq))
        return n_seqs * kept, n_seqs * (kept + kernel + draw + predictors) + importance


class Graph(NamedTuple):
    """The fixed graph on one device: `parents` [node, parent] (-1 pads; a root's row is all -1), the nodes of
    each level (a node's level is one more than its parents' highest; roots are level 0), and which roots are
    drawn uniformly (the query token, or every root with roots = 'uniform') or from the stationary distribution."""

    parents: Int[Tensor, "node parent"]
    levels: list[Int[Tensor, "level_node"]]
    uniform_root: Bool[Tensor, "node"]
    stationary_root: Bool[Tensor, "node"]


def causal_graph(cfg: CausalICLConfig) -> Int[Tensor, "node parent"]:
    """Parents of nodes 0..T as [T + 1, parents] (1 column for chain and tree), -1 padded; drawn from the task
    seed. Query mode (chain, tree): nodes 0..T-2 by the family, node T-1 the query (a root), node T its child."""
    g, N = task_generator(cfg.seed), cfg.length + 1
    if cfg.graph == "dag":
        return random_dag(N, cfg.parents, g)
    n = N - 2 if cfg.target == "query" else N
    i = torch.arange(n)
    if cfg.graph == "chain":
        parent = i - 1
    else:  # uniform over {-1, 0, ..., i-1}: their rng.randint(minval=-1, maxval=arange(n)); float64 keeps u * (i+1) < i+1
        parent = torch.minimum((torch.rand(n, generator=g, dtype=torch.float64) * (i + 1)).long(), i) - 1
    if cfg.target == "query":
        parent = torch.cat([parent, torch.tensor([-1, cfg.length - 1])])
    return parent[:, None]


def random_dag(n: int, m: int, g: torch.Generator) -> Int[Tensor, "node parent"]:
    """Nodes < m are roots; node i ≥ m gets m distinct parents uniform among nodes < i (sorted), drawn for every
    node at once by Floyd's algorithm: for j = i-m, ..., i-1 take t uniform in 0..j, or j itself if t is taken."""
    i = torch.arange(m, n)
    chosen = torch.empty(len(i), m, dtype=torch.long)
    for c in range(m):
        j = i - m + c
        t = torch.minimum((torch.rand(len(i), generator=g, dtype=torch.float64) * (j + 1)).long(), j)
        chosen[:, c] = torch.where((chosen[:, :c] == t[:, None]).any(1), j, t)
    out = torch.full((n, m), -1, dtype=torch.long)
    out[m:] = chosen.sort(1).values
    return out


def graph_levels(parents: Int[Tensor, "node parent"]) -> list[Int[Tensor, "level_node"]]:
    """The nodes of each level, in order: a level's nodes depend only on earlier levels, so sampling takes one
    step per level (the graph's depth: every node for the chain, about e·ln(T) for a random tree)."""
    level: list[int] = []
    for row in parents.tolist():
        level.append(1 + max(level[p] for p in row if p >= 0) if max(row) >= 0 else 0)
    at = torch.tensor(level)
    return [torch.nonzero(at == d)[:, 0] for d in range(max(level) + 1)]


def contexts(
    tokens: Int[Tensor, "batch pos"], parents: Int[Tensor, "node parent"], k: int
) -> Int[Tensor, "batch node"]:
    """Each node's parents' tokens as one base-k number, the first parent most significant (0 for roots).
    Every node's parents are tokens: the answer node's lie before it."""
    weights = k ** torch.arange(parents.shape[1] - 1, -1, -1, device=tokens.device)
    ctx = (tokens[:, parents.clamp_min(0)] * weights).sum(-1)
    return torch.where(parents[:, 0] >= 0, ctx, 0)


def count_bayes(
    tokens: Int[Tensor, "batch pos"], parents: Int[Tensor, "node parent"], k: int, alpha: float
) -> Float[Tensor, "batch pos d_vocab_out"]:
    """The posterior predictive of node t+1 given tokens 0..t, where roots are uniform (so say nothing of the
    kernel; the dag's, their InContextDAG): the add-alpha count of the tokens at earlier non-root nodes whose
    parents' tokens equal node t+1's, (n_j + alpha) / (n + k alpha); uniform where node t+1 is a root."""
    T = tokens.shape[1]
    ctx = contexts(tokens, parents, k)
    evidence = (parents[:T, 0] >= 0) & torch.ones(
        T, T, dtype=torch.bool, device=tokens.device
    ).tril()  # [t, node j ≤ t]
    match = (ctx[:, None, :T] == ctx[:, 1:, None]) & evidence  # [batch, t, j]
    counts = match.float() @ F.one_hot(tokens, k).float()
    bayes = (counts + alpha) / (counts.sum(-1, keepdim=True) + k * alpha)
    return torch.where((parents[1:, 0] >= 0)[:, None], bayes, 1 / k)


@torch.no_grad()
def importance_bayes(
    tokens: Int[Tensor, "batch pos"],
    parents: Int[Tensor, "node parent"],
    stationary_root: Bool[Tensor, "node"],
    k: int,
    alpha: float,
    samples: int = BAYES_SAMPLES,
) -> Float[Tensor, "batch pos d_vocab_out"]:
    """The posterior predictive of node t+1 given tokens 0..t for one-parent graphs whose roots (those marked)
    are drawn from the kernel's stationary distribution π, which makes them evidence too: p(P | x) ∝
    ∏_roots π_P(x_r) · Dirichlet posterior(P | edge counts). By importance sampling: `samples` kernels from the
    posterior of the counts, weights w ∝ ∏ π_P(x_r). Where node t+1 has a parent, the estimate of its row's
    mean is the counts' exact posterior mean plus Σ (w_i - 1/samples) P_i (the unweighted mean as a control
    variate: half the error of the plain weighted mean at the default size); where it is such a root, the
    weighted mean of π; uniform for any other root (the query token).

    As in markov_icl.importance_bayes, every position's draws come from one path per sample (Gamma(a + 1) =
    Gamma(a) + Exp(1): adding an exponential to the Gamma variable of the transition seen at node t turns a
    draw from t-1's posterior into one from t's). The prior's draws and the exponentials come from a fixed
    seed and are shared by the sequences: a sequence's predictor depends on its tokens only."""
    B, T = tokens.shape
    dev = tokens.device
    parent, root = parents[:, 0].tolist(), stationary_root.tolist()
    g = torch.Generator(device=dev).manual_seed(0)
    prior = sample_gamma(alpha, (samples, k * k), g, dev)  # the prior's draws, as Gamma variables
    grow = sample_gamma(1.0, (T, samples), g, dev)
    mean = count_bayes(tokens, parents, k, alpha)  # the counts' posterior mean of node t+1's row
    out = torch.empty(B, T, k, device=dev)
    chunk = max(1, CHUNK // (samples * k * k))  # sequences at a time
    for b0 in range(0, B, chunk):
        x = tokens[b0 : b0 + chunk]
        n = len(x)
        G = prior.expand(n, -1, -1).clone()
        seen: list[int] = []  # the stationary roots so far
        for t in range(T):
            if parent[t] >= 0:
                cell = (x[:, parent[t]] * k + x[:, t])[:, None, None].expand(n, samples, 1)
                G.scatter_add_(2, cell, grow[t][None, :, None].expand(n, samples, 1))
            elif root[t]:
                seen.append(t)
            P = G.clamp_min(1e-30).view(n, samples, k, k)
            P = P / P.sum(-1, keepdim=True)
            pi = stationary(P.flatten(0, 1)).view(n, samples, k)
            at = x[:, seen][:, None, :].expand(n, samples, len(seen))
            w = pi.gather(2, at).clamp_min(1e-30).log().sum(-1).softmax(1)[..., None]  # [n, sample, 1]
            if parent[t + 1] >= 0:
                row = P.gather(2, x[:, parent[t + 1]][:, None, None, None].expand(n, samples, 1, k))[:, :, 0]
                est = (mean[b0 : b0 + n, t] + ((w - 1 / samples) * row).sum(1)).clamp_min(1e-9)
                out[b0 : b0 + n, t] = est / est.sum(-1, keepdim=True)
            else:
                out[b0 : b0 + n, t] = (w * pi).sum(1) if root[t + 1] else 1 / k
    return out


def causal_truth(
    parents: Int[Tensor, "batch node parent"],
    transition: Float[Tensor, "batch row d_vocab_out"],
    root: Float[Tensor, "batch d_vocab_out"],
    conditional: Float[Tensor, "batch pos d_vocab_out"],
    parent_tokens: Int[Tensor, "batch pos"],
    bayes: Optional[Float[Tensor, "batch pos d_vocab_out"]] = None,
) -> dict[str, Tensor]:
    """Batch.truth of causal_icl: `parents` [batch, node = pos + 1, parent], the graph (the same for every
    sequence), node i's parents, -1 padded (1 column for chain and tree, `parents` for the dag; node T is the
    answer); `transition` [batch, row, d_vocab_out], each sequence's kernel (row: the parents' tokens as a base-k
    number, first parent most significant; k rows for one parent); `root` [batch, d_vocab_out], the distribution
    its roots are drawn from (stationary or uniform; the query token is uniform regardless); `conditional`
    [batch, pos, d_vocab_out], the true distribution of node t+1 given its parents (at the last position of
    query mode, the kernel row of the query token: their soft label); `parent_tokens` [batch, pos], the tokens of
    the parents of node t (the position's own token) as a base-k number (`contexts`; 0 for a root), and
    `has_parents` [batch, pos], where node t has parents; and in evaluation batches `bayes` [batch, pos,
    d_vocab_out], the posterior predictive of node t+1 given tokens 0..t and the graph, under the Dirichlet prior
    (`count_bayes`, `importance_bayes`)."""
    out = {"parents": parents, "transition": transition, "root": root, "conditional": conditional}
    out |= {"parent_tokens": parent_tokens, "has_parents": parents[:, : parent_tokens.shape[1], 0] >= 0}
    return out if bayes is None else out | {"bayes": bayes}


@TASKS.register("causal_icl")
class CausalICL(Task):
    Config = CausalICLConfig
    truth_keys = (  # shapes: causal_truth
        "parents",
        "transition",
        "root",
        "conditional",
        "parent_tokens",
        "has_parents",
        "bayes",
    )
    patch_metric = "loss"

    def __init__(self, cfg: CausalICLConfig):
        super().__init__(cfg)
        parents = causal_graph(cfg)
        is_root = parents[:, 0] < 0
        query = torch.zeros_like(is_root)
        if cfg.target == "query" and cfg.graph != "dag":
            query[cfg.length - 1] = True
        uniform = is_root & (query | (cfg.root_kind == "uniform"))
        self.graph = Graph(parents, graph_levels(parents), uniform, is_root & ~uniform)
        self._on: dict[str, Graph] = {}

    @property
    def n_rows(self) -> int:
        return self.cfg.k ** self.graph.parents.shape[1]

    @property
    def latents(self) -> tuple[Latent, ...]:  # type: ignore[override]
        """The parents' tokens of each position's node, where it has parents."""
        return (
            Latent(
                "parent_tokens",
                "categorical",
                "parent_tokens",
                self.n_rows,
                where="has_parents",
                about="the tokens of the node's parents (one base-k number): what Nichani et al.'s first-layer head "
                "copies from the parents, for the second layer's induction along the graph",
            ),
        )

    @property
    def spec(self) -> TaskSpec:
        names = tuple(str(i) for i in range(self.cfg.k))
        return TaskSpec(
            d_vocab=self.cfg.k, d_vocab_out=self.cfg.k, n_ctx=self.cfg.length, token_names=names, target_names=names
        )

    def graph_on(self, device) -> Graph:
        key = str(torch.device(device))
        if key not in self._on:
            g = self.graph
            self._on[key] = Graph(
                g.parents.to(device),
                [lv.to(device) for lv in g.levels],
                g.uniform_root.to(device),
                g.stationary_root.to(device),
            )
        return self._on[key]

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        """The kernel (rows ~ Dirichlet(alpha)), then one uniform u per node: a node's token is the inverse CDF
        of its distribution (root or kernel row) at u, drawn a level of the graph at a time."""
        self.check_split(split)
        cfg, k, T = self.cfg, self.cfg.k, self.cfg.length
        graph = self.graph_on(device)
        P = dirichlet(cfg.alpha, (batch_size, self.n_rows, k), generator, device)
        root = stationary(P) if cfg.root_kind == "stationary" else torch.full((batch_size, k), 1 / k, device=device)
        u = torch.rand(batch_size, T + 1, generator=generator, device=device)
        x = torch.zeros(batch_size, T + 1, dtype=torch.long, device=device)
        cum, weights = P.cumsum(-1), k ** torch.arange(graph.parents.shape[1] - 1, -1, -1, device=device)
        for depth, nodes in enumerate(graph.levels):
            if depth == 0:  # the roots
                flat = torch.arange(1, k + 1, device=device) / k
                rows = torch.where(graph.uniform_root[nodes, None], flat, root.cumsum(-1)[:, None, :])
            else:
                ctx = (x[:, graph.parents[nodes]] * weights).sum(-1)  # [batch, level_node]
                rows = cum.gather(1, ctx[..., None].expand(-1, -1, k))
            x[:, nodes] = (rows < u[:, nodes, None]).sum(-1).clamp_max(k - 1)
        tokens = x[:, :T]
        ctx = contexts(tokens, graph.parents, k)  # each node's parents' tokens: the conditionals and the latent
        conditional = self.conditional(tokens, P, root, ctx)
        mask = torch.ones_like(tokens, dtype=torch.bool)
        if cfg.target == "query":
            mask[:, :-1] = False
        # Bayes' predictor costs more than the batch; training never reads it.
        bayes = self.bayes(tokens) if split != "train" else None
        truth = causal_truth(graph.parents.expand(batch_size, -1, -1), P, root, conditional, ctx[:, :T], bayes)
        return Batch(tokens, x[:, 1:], mask, truth)

    def conditional(
        self,
        tokens: Int[Tensor, "batch pos"],
        transition: Float[Tensor, "batch row d_vocab_out"],
        root: Float[Tensor, "batch d_vocab_out"],
        ctx: Optional[Int[Tensor, "batch node"]] = None,
    ) -> Float[Tensor, "batch pos d_vocab_out"]:
        """The true distribution of node t+1 given its parents' tokens (truth `conditional`); `ctx`: every node's
        parents' tokens (`contexts`), where the caller has them already."""
        graph, k = self.graph_on(tokens.device), self.cfg.k
        ctx = contexts(tokens, graph.parents, k) if ctx is None else ctx
        at_root = torch.where(graph.uniform_root[1:, None], 1 / k, root[:, None, :])
        rows = transition.gather(1, ctx[:, 1:, None].expand(-1, -1, k))
        return torch.where(graph.parents[1:, :1] >= 0, rows, at_root)

    def counterfactual(self, batch, generator, control=False) -> Optional[Batch]:
        """Tokens changed, each to a uniform other value, with the kernel kept: in query mode every parent of the
        answer (so its kernel row changes), or for `control` one uniform position that is none (None where every
        token is); in next mode, where every position is scored, one uniform position that has children (any
        position if none has), and no control. The conditionals (and Bayes' predictor) follow the new tokens, and
        the answer node, not a token, is redrawn from its new conditional where its parents changed."""
        cfg, device = self.cfg, batch.tokens.device
        (B, T), parents = batch.tokens.shape, self.graph.parents
        reads = torch.zeros(T, dtype=torch.bool)
        reads[parents[T][parents[T] >= 0]] = True
        if cfg.target == "next":
            if control:
                return None
            where = torch.zeros(T, dtype=torch.bool)
            where[parents[parents >= 0]] = True
            where = where if where.any() else torch.ones(T, dtype=torch.bool)
        else:
            where = ~reads if control else reads
            if not where.any():
                return None
        if control or cfg.target == "next":
            one = (torch.rand(B, T, generator=generator) + where).argmax(-1)
            where = F.one_hot(one, T).bool()
        shift = torch.randint(1, cfg.k, (B, T), generator=generator).to(device)
        u = torch.rand(B, 1, generator=generator).to(device)
        change = where.to(device).expand(B, T)
        tokens = torch.where(change, (batch.tokens + shift) % cfg.k, batch.tokens)
        P, root = batch.truth["transition"], batch.truth["root"]
        ctx = contexts(tokens, self.graph_on(device).parents, cfg.k)
        conditional = self.conditional(tokens, P, root, ctx)
        draw = (conditional[:, -1].cumsum(-1) < u).sum(-1).clamp_max(cfg.k - 1)
        answer = torch.where(change[:, reads.to(device)].any(-1), draw, batch.targets[:, -1])
        bayes = self.bayes(tokens) if "bayes" in batch.truth else None
        truth = causal_truth(batch.truth["parents"], P, root, conditional, ctx[:, :T], bayes)
        return Batch(tokens, torch.cat([tokens[:, 1:], answer[:, None]], 1), batch.mask.clone(), truth)

    def bayes(
        self, tokens: Int[Tensor, "batch pos"], samples: int = BAYES_SAMPLES
    ) -> Float[Tensor, "batch pos d_vocab_out"]:
        """The posterior predictive of node t+1 from tokens 0..t: `count_bayes` where no root is drawn from the
        stationary distribution, else `importance_bayes` (`samples` draws)."""
        graph = self.graph_on(tokens.device)
        if self.cfg.root_kind == "uniform":
            return count_bayes(tokens, graph.parents, self.cfg.k, self.cfg.alpha)
        return importance_bayes(tokens, graph.parents, graph.stationary_root, self.cfg.k, self.cfg.alpha, samples)

    def metrics(self, logits, batch) -> dict[str, float]:
        """Adds kl_bayes: KL(bayes ‖ model) averaged over the scored positions."""
        out = super().metrics(logits, batch)
        if "bayes" in batch.truth:
            logits, _, mask = align(logits, batch)
            q = batch.truth["bayes"][:, -logits.shape[1] :]
            kl = (q * (q.clamp_min(1e-30).log() - logits.float().log_softmax(-1))).sum(-1)
            out["kl_bayes"] = kl[mask].mean().item()
        return out
