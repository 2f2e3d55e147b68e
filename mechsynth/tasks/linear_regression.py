"""In-context linear regression (Garg et al. 2022; the finite task pool of Raventós et al. 2023; the stages and
LLC of Hoogland et al. 2024): each sequence has its own weight vector w, and the model predicts y = w·x for
each new x from the (x, y) pairs before it.

The first continuous task: a sequence is 2k vectors, not token ids (`TaskSpec.d_input`), read in linearly
by the transformer, and its targets are real numbers scored by squared error (`loss_kind`). Layout
(Raventós et al.'s and Hoogland et al.'s, d_input = d + 1): an x token is (0, x) and a y token (y, 0, …, 0),
x₁, y₁, …, x_k, y_k; the first coordinate tells the two apart whatever the positional embedding (Garg et
al. drop it and leave that to the learned positions). The model's one output at x_i is its prediction of
y_i, from the i − 1 pairs before it, as in all three papers: every x position is scored, y positions are not
(the last token, y_k, is fed but nothing reads its output).

x ~ N(0, I_d); w ~ N(0, I_d), fresh per sequence, or (`n_tasks` = M) drawn uniformly from a pool of M
vectors fixed by the task seed: Raventós et al.'s task diversity, below which a model learns the pool and
above which it learns ridge regression; `sparsity` s keeps s coordinates of w (at random places; Garg et
al.'s sparse regression, no rescaling). y = w·x + σε. Splits: `eval` draws w from the prior N(0, I_d) even
when M is finite (Raventós et al.'s "true" distribution, where generalization shows), `eval_pool` from the
pool.

`truth`: `w`; in evaluation batches `w_defined` (the tokens that have seen at least d examples, from which the
context determines w: where the latent `w` is read) and at every x position the prediction of each reference
predictor from the same pairs the model sees: `least_squares` (the minimum-norm interpolant below d examples),
`ridge` (the posterior mean under w ~ N(0, I_d) and the noise: the Bayes predictor of the dense Gaussian prior;
with σ = 0 the posterior mean is the minimum-norm interpolant, so ridge = least_squares), `averaging` (w ≈ mean of
y_j x_j), `nearest_neighbours` (the mean y of the 3 nearest earlier x's, Garg et al.'s baseline), and with a finite
pool `dmmse` (the posterior mean over the pool, Raventós et al.'s discrete MMSE: the Bayes predictor of the
training distribution). All predict 0 from no examples but dmmse, which predicts with the pool's mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth.config import MAX_CTX, MAX_SEED, check, check_fields, doc, validates_itself
from mechsynth.tasks.base import TASKS, Batch, Latent, Task, TaskSpec, align, squared_error, task_generator

NEIGHBOURS = 3  # Garg et al.'s nearest-neighbour baseline averages the 3 nearest earlier x's
# σ² below this counts as this much in dmmse's weights: y is float32, and its rounding (~1e-7 |y|) would
# otherwise count as evidence against the true task of a noiseless pool.
MIN_VARIANCE = 1e-8
PIVOT = 1e-10  # eigenvalues of X^T X below this times the largest are rank deficiency (the pseudo-inverse's cut)


@validates_itself
@dataclass(frozen=True)
class LinearRegressionConfig:
    d: int = doc(
        "dimension of x and w", 4, lo=1, hi=1024, why="x·w costs d per token and ridge a d x d solve per position"
    )
    k: int = doc(
        "examples per sequence, the query included: the 2k tokens x_1, y_1, ..., x_k, y_k, a prediction at every x",
        16,
        lo=1,
        hi=MAX_CTX // 2,
    )
    noise: float = doc("σ, the std of the label noise: y = w·x + σ ε", 0.0)
    n_tasks: Optional[int] = doc(
        "M: unset = a fresh w ~ N(0, I_d) per sequence; M = a pool of M w's drawn once from "
        "`seed`, one picked uniformly per training sequence (Raventós et al.'s task diversity)",
        None,
        lo=1,
        hi=2**22,
        why="the pool is held in memory, and dmmse weighs every task",
    )
    sparsity: Optional[int] = doc(
        "s: unset = dense w; s = only s coordinates of w (at random places) are nonzero: sparse linear regression",
        None,
        lo=1,
        hi=1024,
    )
    seed: int = doc("seed of the task pool (n_tasks)", 0, lo=0, hi=MAX_SEED)

    def __post_init__(self):
        check_fields(self)
        check(self.noise >= 0, "noise", f"must be ≥ 0, got {self.noise}")
        check(
            self.sparsity is None or self.sparsity <= self.d,
            "sparsity",
            f"must be ≤ d={self.d} or unset, got {self.sparsity}",
        )

    context_field: ClassVar[str] = "task.k"  # for the memory estimate (mechsynth/training/budget.py)

    def sample_bytes(self, n_seqs: int, split: str) -> tuple[int, int]:
        """(bytes of a batch, peak bytes while making it): float32 tokens, targets and mask, w; an evaluation
        split's predictors (float64 while made), each position's Gram matrix and its pseudo-inverse, the
        nearest-neighbour distances, dmmse's chunk of the pool."""
        d, k = self.d, self.k
        kept = n_seqs * (2 * k * (4 * (d + 1) + 5) + 4 * d + 8)
        if split == "train":
            return kept, 2 * kept
        predictors = n_seqs * 6 * 2 * k * 4
        work = n_seqs * k * (8 * 4 * d * d + 16 * k) + 8 * 2**22 * 4 * (self.n_tasks is not None)
        return kept + predictors, kept + predictors + work + self.pool_bytes

    @property
    def pool_bytes(self) -> int:
        return 4 * self.d * (self.n_tasks or 0)


def regression_truth(
    w: Float[Tensor, "batch d"],
    w_defined: Optional[Bool[Tensor, "batch pos"]] = None,
    pool_index: Optional[Int[Tensor, "batch"]] = None,
    **predictions: Float[Tensor, "batch pos"],
) -> dict[str, Tensor]:
    """Batch.truth of linear_regression: `w` [batch, d], each sequence's weights; with a finite pool `pool_index`
    [batch] (its place in the pool, −1 for a w drawn from the prior); in evaluation batches `w_defined` [batch,
    pos], the tokens from which the context determines w (`determined`), and each reference predictor's
    prediction [batch, pos] at the x positions (0 at the y positions, which are not scored)."""
    out = {"w": w} | ({} if w_defined is None else {"w_defined": w_defined})
    return out | ({} if pool_index is None else {"pool_index": pool_index}) | predictions


def determined(k: int, d: int) -> Bool[Tensor, "pos"]:
    """The tokens of x_1, y_1, …, x_k, y_k that have seen at least d examples (y_i at 2i − 1 has seen i, x_{i+1}
    at 2i has seen i): from there on, without noise, the context determines w. Of a kind (x or y tokens) none of
    which has, its last token: the most the sequence shows. The positions the probe w_decoding reads."""
    p = torch.arange(2 * k)
    seen, is_y = (p + 1) // 2, p % 2 == 1
    out = torch.zeros(2 * k, dtype=torch.bool)
    for kind, last in ((is_y, 2 * k - 1), (~is_y, 2 * k - 2)):
        enough = kind & (seen >= d)
        out |= enough if bool(enough.any()) else p == last
    return out


@TASKS.register("linear_regression")
class LinearRegression(Task):
    Config = LinearRegressionConfig
    loss_kind = "squared_error"

    def __init__(self, cfg: LinearRegressionConfig):
        super().__init__(cfg)
        # The pool is drawn from the prior once, on the CPU, from the task seed alone (a task generator):
        # every run and seed of the task sees the same M tasks.
        self.pool: Optional[Float[Tensor, "task d"]] = (
            None if cfg.n_tasks is None else self.prior(cfg.n_tasks, task_generator(cfg.seed), "cpu")
        )
        self._pools: dict[str, Tensor] = {}

    @property
    def splits(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("train", "eval") + (("eval_pool",) if self.pool is not None else ())

    @property
    def strategies(self) -> tuple[str, ...]:
        """The reference predictors in evaluation batches' truth."""
        return ("least_squares", "ridge", "averaging", "nearest_neighbours") + (
            ("dmmse",) if self.pool is not None else ()
        )

    @property
    def truth_keys(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("w", "w_defined") + (("pool_index",) if self.pool is not None else ()) + self.strategies

    latents = (
        Latent(
            "w",
            "vector",
            "w",
            where="w_defined",
            about="the sequence's weight vector, from where the context has shown d examples (the probe w_decoding)",
        ),
    )

    @property
    def spec(self) -> TaskSpec:
        d_input = self.cfg.d + 1
        return TaskSpec(
            d_vocab=d_input,
            d_vocab_out=1,
            n_ctx=2 * self.cfg.k,
            token_names=("x", "y"),
            target_names=("y",),
            d_input=d_input,
        )

    def prior(self, n: int, generator: torch.Generator, device) -> Float[Tensor, "n d"]:
        """n weight vectors from the prior: N(0, I_d), with all but `sparsity` coordinates (at random places) zeroed."""
        d, s = self.cfg.d, self.cfg.sparsity
        w = torch.randn(n, d, generator=generator, device=device)
        if s is not None and s < d:
            keep = torch.rand(n, d, generator=generator, device=device).argsort(-1)[:, :s]
            w = w * torch.zeros_like(w).scatter_(1, keep, 1.0)
        return w

    def pool_on(self, device) -> Float[Tensor, "task d"]:
        """The pool on `device`, moved there once (a task with a finite pool only)."""
        key = str(device)
        if key not in self._pools:
            self._pools[key] = self.pool.to(device)
        return self._pools[key]

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        self.check_split(split)
        cfg, B, k, d = self.cfg, batch_size, self.cfg.k, self.cfg.d
        index = None
        if self.pool is not None and split != "eval":  # eval: the prior itself, as Raventós et al.'s true distribution
            index = torch.randint(cfg.n_tasks, (B,), generator=generator, device=device)
            w = self.pool_on(device)[index]
        else:
            w = self.prior(B, generator, device)
            index = None if self.pool is None else torch.full((B,), -1, dtype=torch.long, device=device)
        x = torch.randn(B, k, d, generator=generator, device=device)
        y = (x @ w[:, :, None])[..., 0]
        if cfg.noise > 0:
            y = y + cfg.noise * torch.randn(B, k, generator=generator, device=device)
        tokens = torch.zeros(B, k, 2, d + 1, device=device)
        tokens[:, :, 0, 1:] = x
        tokens[:, :, 1, 0] = y
        targets = torch.zeros(B, k, 2, device=device)
        targets[:, :, 0] = y
        mask = torch.zeros(B, k, 2, dtype=torch.bool, device=device)
        mask[:, :, 0] = True
        # The reference predictors cost more than the batch; training never reads them (nor where w is defined).
        predictions = {} if split == "train" else {name: at_x(p) for name, p in self.predictors(x, y).items()}
        defined = None if split == "train" else determined(k, d).to(device).expand(B, -1)
        return Batch(
            tokens.flatten(1, 2),
            targets.flatten(1, 2),
            mask.flatten(1, 2),
            regression_truth(w, defined, index, **predictions),
        )

    @torch.no_grad()
    def predictors(
        self, x: Float[Tensor, "batch example d"], y: Float[Tensor, "batch example"]
    ) -> dict[str, Float[Tensor, "batch example"]]:
        """Each reference predictor's prediction of y_i from the pairs (x_j, y_j), j < i, at every i, in float64."""
        x, y = x.double(), y.double()
        B, k, d = x.shape
        # Gram matrices and moments of the examples before each i: exclusive running sums
        outer = x[..., :, None] * x[..., None, :]
        G = torch.cumsum(outer, 1) - outer  # [batch, example, d, d]
        xy = x * y[..., None]
        b = torch.cumsum(xy, 1) - xy  # [batch, example, d]
        seen = torch.arange(k, device=x.device, dtype=x.dtype)[None, :, None]

        def predict(w_hat: Tensor) -> Tensor:
            return (x * w_hat).sum(-1)

        # (X^T X)^+ X^T y = X^+ y: the minimum-norm least-squares solution (interpolant below d examples)
        least = predict((torch.linalg.pinv(G, rtol=PIVOT, hermitian=True) @ b[..., None])[..., 0])
        var = self.cfg.noise**2
        ridge = (
            least
            if var == 0
            else predict(
                torch.linalg.solve(G + var * torch.eye(d, dtype=x.dtype, device=x.device), b[..., None])[..., 0]
            )
        )
        out = {
            "least_squares": least,
            "ridge": ridge,
            "averaging": predict(b / seen.clamp_min(1)),
            "nearest_neighbours": nearest_neighbours(x, y),
        }
        if self.pool is not None:
            out["dmmse"] = discrete_mmse(x, y, self.pool_on(x.device).double(), max(var, MIN_VARIANCE))
        return {name: p.float() for name, p in out.items()}

    def metrics(self, logits: Float[Tensor, "batch out_pos 1"], batch: Batch) -> dict[str, float]:
        """`loss`, the mean squared error at the x positions (what training minimises); `normalized_loss`, it over
        d (Garg et al.'s "squared error / d", Raventós et al.'s normalized loss: 1 for predicting 0 from the
        prior); and where the batch carries the reference predictors, `to_<predictor>`: the model's mean squared
        distance from each, over d (Raventós et al.'s Δ)."""
        logits, targets, mask = align(logits, batch)
        n = mask.sum()
        loss = float(squared_error(logits, targets, mask).sum() / n)
        out = {"loss": loss, "normalized_loss": loss / self.cfg.d}
        for name in self.strategies:
            if name in batch.truth:
                out[f"to_{name}"] = (
                    float(squared_error(logits, batch.truth[name][:, -logits.shape[1] :], mask).sum() / n) / self.cfg.d
                )
        return out

    def token_labels(self, tokens: Float[Tensor, "pos d_input"]) -> list[str]:
        """x1, y1, x2, y2, ...: which example each position holds (the y tokens' flag, their first coordinate, is
        the label itself, so the layout is read from the positions)."""
        return [f"{'xy'[p % 2]}{p // 2 + 1}" for p in range(tokens.shape[0])]


def at_x(values: Float[Tensor, "batch example"]) -> Float[Tensor, "batch pos"]:
    """Per-example values at the x positions of the 2k-token sequence, 0 at the y positions."""
    return torch.stack([values, torch.zeros_like(values)], -1).flatten(1)


def nearest_neighbours(
    x: Float[Tensor, "batch example d"], y: Float[Tensor, "batch example"], n: int = NEIGHBOURS
) -> Float[Tensor, "batch example"]:
    """The mean y of the (up to) n earlier examples whose x is nearest x_i (0 with none before), uniform weights."""
    B, k, _ = x.shape
    dist = torch.cdist(x, x).square()  # [batch, example i, example j]
    later = torch.ones(k, k, dtype=torch.bool, device=x.device).triu()  # j ≥ i is not before i
    dist = dist.masked_fill(later, float("inf"))
    m = min(n, k)
    near, which = dist.topk(m, dim=-1, largest=False)  # [batch, example, m]
    valid = near.isfinite()
    ys = y[:, None, :].expand(B, k, k).gather(-1, which)
    return (ys * valid).sum(-1) / valid.sum(-1).clamp_min(1)


def discrete_mmse(
    x: Float[Tensor, "batch example d"], y: Float[Tensor, "batch example"], pool: Float[Tensor, "task d"], var: float
) -> Float[Tensor, "batch example"]:
    """The posterior-mean prediction when w is uniform over the pool and y = w·x + N(0, var): task m weighs
    exp(−Σ_{j<i} (y_j − w_m·x_j)² / 2 var), and the prediction is the weighted mean of w_m·x_i. Chunks of the
    pool at a time, with a running maximum of the log weights (a streamed softmax), so memory stays bounded."""
    B, k, _ = x.shape
    chunk = max(1, 2**22 // (B * k))
    top = torch.full((B, k), -torch.inf, dtype=x.dtype, device=x.device)
    num = torch.zeros(B, k, dtype=x.dtype, device=x.device)
    den = torch.zeros(B, k, dtype=x.dtype, device=x.device)
    for start in range(0, len(pool), chunk):
        guess = x @ pool[start : start + chunk].T  # [batch, example, task]: each task's prediction of each y
        residual = (y[..., None] - guess).square()
        logw = -(torch.cumsum(residual, 1) - residual) / (2 * var)  # the evidence of the examples before i
        new_top = torch.maximum(top, logw.max(-1).values)
        scale = torch.exp(top - new_top)
        weight = torch.exp(logw - new_top[..., None])
        num = num * scale + (weight * guess).sum(-1)
        den = den * scale + weight.sum(-1)
        top = new_top
    return num / den
