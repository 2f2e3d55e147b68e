"""Scoring every edge (or node) of a model's graph by how much the patch metric depends on it.

Each method estimates, per edge, m(clean) - m(edge patched): how far the metric falls when that one
receiver reads that one sender from the source run instead. Exact activation patching runs it; EAP
(attribution patching) takes its first-order estimate from one forward and one backward pass;
EAP-IG averages the gradients along a straight path of inputs from the source to the clean input; ACDC
prunes greedily, keeping an edge when removing it from what is left costs at least `threshold` of the
clean-vs-ablated metric gap.
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
METHODS = ("patching", "eap", "eap_ig", "acdc")
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
        ce = F.cross_entropy(logits.flatten(0, 2).float(), targets.expand(logits.shape[0], -1, -1).flatten(),
                             reduction="none").view(logits.shape[:3])
        return -(ce * mask).sum((1, 2)) / mask.sum()
    return minus_loss


def source(model: Any, graph: Graph, clean: Int[Tensor, "batch pos"], corrupted: Int[Tensor, "batch pos"],
           ablation: str) -> Float[Tensor, "sender batch pos d_model"]:
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


def as_patch(graph: Graph, patched: Bool[Tensor, "copy edge"]) -> Float[Tensor, "copy sender receiver"]:
    """Edge masks over `graph.edge_list` as the [copy, sender, receiver] patch weights `forward.run` takes."""
    out = torch.zeros(patched.shape[0], len(graph.senders), len(graph.receivers))
    s, r = torch.tensor(graph.edge_list).T
    out[:, s, r] = patched.float()
    return out


def metric_of(model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric,
              patched: Bool[Tensor, "copy edge"]) -> Float[Tensor, "copy"]:
    """The metric with each copy's edges patched, as many copies per forward as the budget allows."""
    B, P = tokens.shape
    per_copy = B * P * model.cfg.d_model * 4 * (len(graph.senders) + 3 * graph.n_heads + 2)
    chunk = max(1, BUDGET // per_copy)
    out = []
    with torch.no_grad():
        for start in range(0, patched.shape[0], chunk):
            part = as_patch(graph, patched[start:start + chunk]).to(src.device)
            out.append(metric(forward.run(model, graph, tokens, part, src).logits))
    return torch.cat(out)


def ends(model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric) -> tuple[float, float]:
    """(m(nothing patched), m(every edge patched)): the clean model and the fully ablated one."""
    n = len(graph.edge_list)
    both = metric_of(model, graph, tokens, src, metric, torch.stack([torch.zeros(n, dtype=torch.bool),
                                                                     torch.ones(n, dtype=torch.bool)]))
    return float(both[0]), float(both[1])


def activation_patching(model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric,
                        level: Literal["edge", "node"] = "edge") -> Float[Tensor, "item"]:
    """Exact: m(clean) - m(one edge patched) for every edge, or m(clean) - m(every edge out of a sender
    patched) for every sender (`level="node"`)."""
    n = len(graph.edge_list)
    sets = torch.eye(n, dtype=torch.bool) if level == "edge" else torch.stack([graph.node_edges(s) for s in graph.senders])
    clean = metric_of(model, graph, tokens, src, metric, torch.zeros(1, n, dtype=torch.bool))
    return clean - metric_of(model, graph, tokens, src, metric, sets)


def _gradients(model: Any, graph: Graph, tokens: Tensor, metric: Metric, override: Tensor | None,
               record: dict[int, Tensor] | None = None) -> dict[int, Tensor]:
    """d metric / d (each receiver's input) at the unpatched model, on `tokens` (the input node's output
    replaced by `override`); `record` gets each sender's output on the way."""
    with torch.enable_grad():
        out = forward.run(model, graph, tokens, None, None, keep_inputs=True, input_override=override, record=record)
        keys = sorted(out.inputs)
        grads = torch.autograd.grad(metric(out.logits).sum(), [out.inputs[k] for k in keys])
    return dict(zip(keys, grads))


def attribution(model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric,
                steps: int = 1) -> Float[Tensor, "edge"]:
    """EAP (`steps` = 1): (clean_u - source_u) · dm/dx_v at the clean input, for each edge (u, v). EAP-IG
    (`steps` > 1): the gradient averaged over the inputs source + α (clean - source), α = 1/steps ... 1, the
    input node's output moved along that line (Hanna et al. 2024's integrated gradients on the inputs)."""
    if steps == 1:  # one forward and one backward: the senders' outputs are recorded on the way
        seen: dict[int, Tensor] = {}
        grads = _gradients(model, graph, tokens, metric, None, seen)
        clean = torch.stack([seen[i].detach() for i in range(len(graph.senders))])
    else:
        clean = forward.sender_outputs(model, graph, tokens)
        grads = {}
        for k in range(1, steps + 1):
            point = (src[0] + k / steps * (clean[0] - src[0])).detach()
            for r, g in _gradients(model, graph, tokens, metric, point).items():
                grads[r] = grads.get(r, 0) + g / steps
    diff = clean - src  # [sender, batch, pos, d_model]
    return torch.stack([(diff[s] * grads[r]).sum() for s, r in graph.edge_list]).detach()


def acdc(model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric,
         threshold: float) -> Float[Tensor, "edge"]:
    """Conmy et al.'s ACDC on the normalized metric: receivers from the logits back, each one's senders from
    the latest back, an edge patched for good when patching it (with all edges pruned so far) lowers
    (m - m_ablated) / (m_clean - m_ablated) by less than `threshold`. The score of an edge is that drop
    when it was tried; the edges kept score ≥ threshold."""
    n = len(graph.edge_list)
    clean, ablated = ends(model, graph, tokens, src, metric)
    if clean == ablated:
        return torch.zeros(n)
    order = sorted(range(n), key=lambda i: (-graph.edge_list[i][1], -graph.edge_list[i][0]))
    patched = torch.zeros(n, dtype=torch.bool)
    scores = torch.zeros(n)
    now = 1.0
    for i in order:
        trial = patched.clone()
        trial[i] = True
        f = (float(metric_of(model, graph, tokens, src, metric, trial[None])[0]) - ablated) / (clean - ablated)
        scores[i] = now - f
        if now - f < threshold:
            patched, now = trial, f
    return scores


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
