"""What every circuit-discovery method measures against: the task's patch metric, what a patched edge
carries (`source`), and the metric with any sets of edges patched (`metric_of`), many sets per forward.

A method scores each edge by (an estimate of) m(clean) - m(that edge patched): how far the metric falls when
that one receiver reads that one sender from the source run instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth.circuits import forward
from mechsynth.circuits.graph import Graph
from mechsynth.tasks.base import Batch

Metric = Callable[[Float[Tensor, "copy batch pos d_vocab_out"]], Float[Tensor, "copy"]]
ABLATIONS = ("resample", "mean", "zero")
BUDGET = 2**27  # bytes of residual-stream activations per batched forward


def patch_metric(kind: Literal["logit_diff", "loss"], clean: Batch, corrupted: Batch) -> Metric:
    """The task's metric of a patched model, higher the closer to the clean model's answer: "logit_diff",
    the clean answer's logit minus the corrupted input's answer's, averaged over the scored positions where
    the two differ; "loss", minus the clean targets' cross-entropy over the scored positions."""
    targets, mask = clean.targets, clean.mask
    if kind == "logit_diff":
        where = (mask & (targets != corrupted.targets)).float()
        if not where.any():
            raise ValueError("no scored position where the counterfactual changes the answer")

        def logit_diff(logits: Tensor) -> Tensor:
            right = logits.gather(-1, targets.expand(logits.shape[0], -1, -1)[..., None])[..., 0]
            wrong = logits.gather(-1, corrupted.targets.expand(logits.shape[0], -1, -1)[..., None])[..., 0]
            return ((right - wrong) * where).sum((1, 2)) / where.sum()

        return logit_diff

    def minus_loss(logits: Tensor) -> Tensor:
        ce = F.cross_entropy(
            logits.flatten(0, 2).float(), targets.expand(logits.shape[0], -1, -1).flatten(), reduction="none"
        ).view(logits.shape[:3])
        return -(ce * mask).sum((1, 2)) / mask.sum()

    return minus_loss


def source(
    model: Any, graph: Graph, clean: Int[Tensor, "batch pos"], corrupted: Int[Tensor, "batch pos"], ablation: str
) -> Float[Tensor, "sender batch pos d_model"]:
    """What a patched edge carries instead: each sender's output on the corrupted input ("resample"), its
    mean over the clean batch at each position ("mean"), or nothing ("zero")."""
    if ablation == "resample":
        return forward.sender_outputs(model, graph, corrupted)
    out = forward.sender_outputs(model, graph, clean)
    if ablation == "mean":
        return out.mean(1, keepdim=True).expand_as(out).contiguous()
    if ablation == "zero":
        return torch.zeros_like(out)
    raise ValueError(f"ablation: {ablation!r}; allowed: {', '.join(ABLATIONS)}")


def as_patch(
    graph: Graph, patched: Bool[Tensor, "copy edge"] | Float[Tensor, "copy edge"]
) -> Float[Tensor, "copy sender receiver"]:
    """Edge masks (or weights: 0 not patched ... 1 fully) over `graph.edge_list` as the [copy, sender, receiver]
    patch weights `forward.run` takes."""
    out = torch.zeros(patched.shape[0], len(graph.senders), len(graph.receivers))
    s, r = torch.tensor(graph.edge_list).T
    out[:, s, r] = patched.float()
    return out


def metric_of(
    model: Any,
    graph: Graph,
    tokens: Int[Tensor, "batch pos"],
    src: Tensor,
    metric: Metric,
    patched: Bool[Tensor, "copy edge"],
) -> Float[Tensor, "copy"]:
    """The metric with each copy's edges patched, as many copies per forward as the budget allows."""
    B, P = tokens.shape
    per_copy = B * P * model.cfg.d_model * 4 * (len(graph.senders) + 3 * graph.n_heads + 2)
    chunk = max(1, BUDGET // per_copy)
    out = []
    with torch.no_grad():
        for start in range(0, patched.shape[0], chunk):
            part = as_patch(graph, patched[start : start + chunk]).to(src.device)
            out.append(metric(forward.run(model, graph, tokens, part, src).logits))
    return torch.cat(out)


def ends(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric
) -> tuple[float, float]:
    """(m(nothing patched), m(every edge patched)): the clean model and the fully ablated one."""
    n = len(graph.edge_list)
    both = metric_of(
        model,
        graph,
        tokens,
        src,
        metric,
        torch.stack([torch.zeros(n, dtype=torch.bool), torch.ones(n, dtype=torch.bool)]),
    )
    return float(both[0]), float(both[1])


def position_patching(model: Any, tokens: Int[Tensor, "batch pos"], metric: Metric) -> Float[Tensor, "pos"]:
    """m(clean) - m(the embeddings at one position replaced by their batch mean there), for every position:
    which input positions the answer reads."""
    from mechsynth import hooks

    B, P = tokens.shape
    with torch.no_grad():

        def at_each(t: Tensor, hook: Any) -> Tensor:  # copy p (of P + 1; the last is clean) ablates position p
            t = t.unflatten(0, (P + 1, B)).clone()
            for p in range(P):
                t[p, :, p] = t[p, :, p].mean(0)
            return t.flatten(0, 1)

        logits = model.run_with_hooks(tokens.repeat(P + 1, 1), fwd_hooks=[(hooks.resid_pre(0), at_each)])
        m = metric(logits.unflatten(0, (P + 1, B)))
    return m[-1] - m[:-1]
