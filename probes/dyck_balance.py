"""The balanced condition on bounded Dyck (Wen, Li, Liu & Risteski 2023, "Transformers are uninterpretable with
myopic methods"): whether each attention layer ignores a matched pair of brackets, as a model that generalises
to longer strings must, whatever its attention pattern looks like.

Inserting a matched pair "(_t )_t" at depth d leaves the stack as it was, so the prediction must not change. A
layer whose output is LayerNorm-ed (only its direction counts) is unchanged when, for every query q,

    exp(s(q, o_{t,d})) P u(o_{t,d}) + exp(s(q, c_{t,d})) P u(c_{t,d}) = 0,

with o_{t,d} the open of type t that brings the depth to d, c_{t,d} its close, s the attention score, u a key's
value through W_V and W_O, and P the centring LayerNorm applies. Their theorem is about the layer that reads
(type, depth): in a 2-layer model whose first layer counts depth, the second (`bv`, the last layer's). In a
transformer with a residual stream the next LayerNorm sees the layer's output plus the stream, so the condition
is theirs, not a guarantee of invariance. The balance violation of a query (their code's
`balance_variation`, with open and close paired at the same depth, which their released indexing does not) is

    BV(q) = max_{t,d} ‖A(q, o_{t,d}) P u(o_{t,d}) + A(q, c_{t,d}) P u(c_{t,d})‖ / den(q),
    den(q) = min_τ ‖A(q, START) P u(START) + A(q, o_{t',d'}) P u(o_{t',d'}) + A(q, c_{t',d'}) P u(c_{t',d'})
                    + Σ_{j<d'} A(q, o_{τ_j,j}) P u(o_{τ_j,j})‖

for the close query q = c_{t',d'} (den: the smallest contribution that no pumping removes: START, the stack
below of any types τ, and the query's own pair), averaged over the close queries. A is the softmax over the
2kD + 1 classes (START, o_{t,d}, c_{t,d}) with no causal mask, as in their code; its normalisation cancels in
the ratio.

Data-driven, so it reads any transformer trained on bounded_dyck: each class's query, key and value are the
means of `hook_q`, `hook_k`, `hook_v` over the positions of that (token, depth) class in the held-out batch —
exactly what the layer's W_Q, W_K, W_V give the class's mean input, as they are affine — so a layer's classes
differ by depth only as far as its input encodes depth (the first layer of a model without positions sees
tokens only). Positions enter only as averaged into the input (rotary and relative scores leave them out).
Metrics:

- `bv/L{l}H{h}`: each head on its own (its softmax, its values through its W_O), the paper's quantity;
- `bv/L{l}`: the layer, its heads' weighted values summed, each head's attention normalised over the classes
  (for one head, the same number); `bv`: the last layer's;
- per head (`per_head`, threshold 0.5) and `match_mass/L{l}H{h}`: the attention from every position whose stack
  is non-empty onto the open on its top, which the next close must match: the "interpretable" stack head;
  `match_mass`: the best head's. Wen et al.'s point is that a balanced layer need not look like that.

A query's ratio is NaN where its den is 0 (a head writing nothing), and left out of the mean. When the stacks
below a query are more than MAX_STACKS, den's minimum is over MAX_STACKS random ones (an upper bound on it).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth import hooks
from mechsynth.probes import ProbeResult, View, attention_hooks, head_metrics, register, render_heads

MAX_STACKS = 4096  # den's minimum runs over every stack below the query up to this many


def classes(
    tokens: Int[Tensor, "batch pos"], depth: Int[Tensor, "batch pos"], k: int, D: int
) -> Int[Tensor, "batch pos"]:
    """The (token, depth) class of each position: 0 START, 1 + t·D + d − 1 the open of type t reaching depth d,
    1 + k·D + t·D + d − 1 its close (a close's d is the depth before it, its open's)."""
    close = tokens >= k
    t = torch.where(close, tokens - k, tokens)
    d = torch.where(close, depth + 1, depth)
    return torch.where(tokens == 2 * k, 0, 1 + close.long() * k * D + t * D + d - 1)


def class_means(
    x: Float[Tensor, "batch pos ..."], cls: Int[Tensor, "batch pos"], n: int
) -> tuple[Float[Tensor, "dyck_class ..."], Bool[Tensor, "dyck_class"]]:
    """Each class's mean of `x` over its positions, and whether it occurs at all (unseen classes: zeros)."""
    flat = x.flatten(0, 1).double()  # sums over thousands of positions
    sums = torch.zeros(n, *flat.shape[1:], dtype=flat.dtype, device=x.device).index_add_(0, cls.flatten(), flat)
    counts = torch.bincount(cls.flatten(), minlength=n)
    return sums / counts.clamp_min(1).view(-1, *[1] * (flat.ndim - 1)), counts > 0


def weighted_values(
    q: Float[Tensor, "dyck_class head_index d_head"],
    key: Float[Tensor, "dyck_class head_index d_head"],
    v: Float[Tensor, "dyck_class head_index d_head"],
    W_O: Float[Tensor, "head_index d_head d_model"],
    seen: Bool[Tensor, "dyck_class"],
) -> Float[Tensor, "head_index dyck_class dyck_class d_model"]:
    """[h, query, key]: A_h(query, key) P u_h(key), with A the softmax over the seen classes (no causal mask) and P
    the centring over d_model."""
    scores = torch.einsum("qhd,khd->hqk", q, key) / math.sqrt(q.shape[-1])
    att = scores.masked_fill(~seen, -math.inf).softmax(-1)
    u = torch.einsum("khd,hdm->hkm", v, W_O.to(v.dtype))
    u = u - u.mean(-1, keepdim=True)
    return att[..., None] * u[:, None]


def violation(
    w: Float[Tensor, "dyck_class dyck_class d_model"],
    seen: Bool[Tensor, "dyck_class"],
    k: int,
    D: int,
    generator: torch.Generator,
) -> float:
    """BV (module docstring) of one head's or a layer's weighted values w[query, key]: the mean over the seen close
    queries of the largest matched pair's norm over the smallest essential contribution's."""
    o = lambda t, d: 1 + t * D + d - 1  # noqa: E731
    c = lambda t, d: 1 + k * D + t * D + d - 1  # noqa: E731
    pairs = [(o(t, d), c(t, d)) for t in range(k) for d in range(1, D + 1) if seen[o(t, d)] and seen[c(t, d)]]
    if not pairs:
        return math.nan
    po, pc = torch.tensor(pairs, device=w.device).T
    ratios = []
    for t, d in itertools.product(range(k), range(1, D + 1)):
        q = c(t, d)
        if not seen[q]:
            continue
        num = (w[q, po] + w[q, pc]).norm(dim=-1).max()
        base = w[q, 0] + w[q, o(t, d)] + w[q, q]
        if d == 1:
            den = base.norm()
        else:
            if k ** (d - 1) <= MAX_STACKS:
                stacks = torch.tensor(list(itertools.product(range(k), repeat=d - 1)), device=w.device)
            else:
                stacks = torch.randint(k, (MAX_STACKS, d - 1), generator=generator).to(w.device)
            below = 1 + stacks * D + torch.arange(d - 1, device=w.device)  # o(τ_j, j + 1)
            den = (base + w[q, below].sum(1)).norm(dim=-1).min()
        if den > 0:
            ratios.append(float(num / den))
    return sum(ratios) / len(ratios) if ratios else math.nan


def match_mass(
    pattern: Float[Tensor, "layer batch head_index query_pos key_pos"], match: Int[Tensor, "batch pos"]
) -> Float[Tensor, "layer head_index"]:
    """Per head, the mean attention from each position with a non-empty stack onto the open on its top."""
    on = match >= 0
    mass = pattern.gather(-1, match.clamp_min(0)[None, :, None, :, None].expand(*pattern.shape[:-1], 1))[..., 0]
    return (mass * on[None, :, None]).sum((1, 3)) / on.sum()


def dyck_hooks(n_layers: int) -> list[str]:
    return attention_hooks(n_layers) + [hooks.head_input(layer, c) for layer in range(n_layers) for c in "qkv"]


def summary(tl: Any, task: Any) -> list[str]:
    """At the last checkpoint: each layer's balance violation and the stack head's attention on the matching open."""
    m = {key: v[-1] for key, v in tl.metrics.get("dyck_balance", {}).items()}
    if not m:
        return []
    shown = lambda v: f"{v:.3g}" if math.isfinite(v) else "undefined (it writes nothing)"  # noqa: E731
    layers = [key for key in m if key.startswith("bv/") and "H" not in key]
    return [
        f"dyck_balance     balance violation at step {tl.steps[-1]}: "
        + ", ".join(f"{key[3:]} {shown(m[key])}" for key in layers)
        + f"; the best stack head puts {m['match_mass']:.2f} of its attention on the matching open"
    ]


@register(
    "dyck_balance",
    reads={"data": dyck_hooks},
    truth=("depth", "match"),
    weights=("W_O",),
    threshold=0.5,
    summary=summary,
)
def dyck_balance(view: View) -> ProbeResult:
    """Wen et al. 2023's balance violation of each attention layer on bounded Dyck, and its attention on the
    matching open."""
    batch, cache = view.batch("data"), view.cache("data")
    k, D = view.task.cfg.k, view.task.cfg.depth
    n = 1 + 2 * k * D
    cls = classes(batch.tokens, batch.truth["depth"], k, D)
    g = torch.Generator().manual_seed(0)
    metrics: dict[str, float] = {}
    for layer in range(view.n_layers):
        (q, seen), (key, _), (v, _) = (class_means(cache[hooks.head_input(layer, c)], cls, n) for c in "qkv")
        w = weighted_values(q, key, v, view.weight("W_O")[layer], seen)
        for head in range(view.n_heads):
            metrics[f"bv/{hooks.head_label(layer, head)}"] = violation(w[head], seen, k, D, g)
        metrics[f"bv/L{layer}"] = violation(w.sum(0), seen, k, D, g)
    metrics["bv"] = metrics[f"bv/L{view.n_layers - 1}"]
    pattern = view.patterns("data")
    per_head = match_mass(pattern, batch.truth["match"])
    metrics |= head_metrics("match_mass/", per_head) | {"match_mass": float(per_head.max())}
    return ProbeResult("dyck_balance", per_head.cpu(), metrics, render_heads(batch.tokens, pattern, per_head))
