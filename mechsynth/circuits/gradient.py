"""Gradient estimates of every edge's effect (what the EAP family of methods shares): (clean_u - source_u) · dm/dx_v
for each edge (u, v), the gradient of the metric with respect to receiver v's input taken at one point or averaged
over several on a path from the source run to the clean one.

Where the points lie is what tells the variants apart (Hanna et al. 2024; MIB, Mueller et al. 2025):
- EAP: the clean run alone;
- EAP-IG on inputs: the input node's output moved from the source's to the clean one, the rest of the model
  computing on from there;
- EAP-IG on activations: one sender group at a time (the input, a layer's heads, an MLP) set on the way from
  its source output to its clean one, everything else clean (the gradient does not flow back through the group
  that is set: MIB's definition, which is therefore not EAP's gradient even at the clean end);
- clean-corrupted: the clean run and the source run (the model on the source's input), the path's two ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.circuits import forward
from mechsynth.circuits.graph import INPUT, Graph
from mechsynth.circuits.patching import BUDGET, Metric, as_patch


def gradients(
    model: Any,
    graph: Graph,
    tokens: Tensor,
    metric: Metric,
    override: Optional[Tensor] = None,
    record: Optional[dict[int, Tensor]] = None,
    patch: Optional[Tensor] = None,
    src: Optional[Tensor] = None,
) -> dict[int, Tensor]:
    """d metric / d (each receiver's input), summed over the copies of `patch` (each copy's own gradient: copies
    do not interact), on `tokens`; `override` replaces the input node's output; `record` gets each sender's
    output on the way."""
    with torch.enable_grad():
        out = forward.run(model, graph, tokens, patch, src, keep_inputs=True, input_override=override, record=record)
        keys = sorted(out.inputs)
        grads = torch.autograd.grad(metric(out.logits).sum(), [out.inputs[k] for k in keys])
    return dict(zip(keys, grads))


def edge_scores(
    graph: Graph, diff: Float[Tensor, "sender batch pos d_model"], grads: dict[int, Float[Tensor, "batch pos d_model"]]
) -> Float[Tensor, "edge"]:
    """(clean_u - source_u) · g_v for each edge (u, v), `grads[v]` receiver v's gradient."""
    return torch.stack([(diff[s] * grads[r]).sum() for s, r in graph.edge_list]).detach()


def attribution(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, steps: int = 1
) -> Float[Tensor, "edge"]:
    """EAP (`steps` = 1): the gradient at the clean input. EAP-IG on inputs (`steps` > 1): the gradient averaged
    over the input node's outputs source + α (clean - source), α = 1/steps ... 1."""
    if steps == 1:  # one forward and one backward: the senders' outputs are recorded on the way
        seen: dict[int, Tensor] = {}
        grads = gradients(model, graph, tokens, metric, None, seen)
        clean = torch.stack([seen[i].detach() for i in range(len(graph.senders))])
        return edge_scores(graph, clean - src, grads)
    return along_inputs(model, graph, tokens, src, metric, [k / steps for k in range(1, steps + 1)])


def along_inputs(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, alphas: Sequence[float]
) -> Float[Tensor, "edge"]:
    """The gradient averaged over the input node's outputs source + α (clean - source), one point per α."""
    clean = forward.sender_outputs(model, graph, tokens)
    total: dict[int, Tensor] = {}
    for a in alphas:
        point = (src[0] + a * (clean[0] - src[0])).detach()
        for r, g in gradients(model, graph, tokens, metric, point).items():
            total[r] = total.get(r, 0) + g / len(alphas)
    return edge_scores(graph, clean - src, total)


def sender_groups(graph: Graph) -> list[list[int]]:
    """The groups EAP-IG on activations moves together: the input, each layer's heads, each MLP."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(graph.senders):
        key = INPUT if name == INPUT else name if name.startswith("MLP") else name.split("H")[0]
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def along_activations(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, steps: int
) -> Float[Tensor, "edge"]:
    """The gradient averaged over (group, α): one sender group's output set to source + α (clean - source),
    α = 1/steps ... 1, everything else clean, as MIB's EAP-IG-activations (Hanna et al.'s
    `get_scores_ig_activations`) computes it: the group's output is set, not computed, so no gradient flows back
    through it in that run. Each group a copy of the batch, several per forward."""
    clean = forward.sender_outputs(model, graph, tokens)
    groups = sender_groups(graph)
    # patching every edge out of a group to `point` sets its output there and cuts the gradient through it
    sets = torch.stack([torch.tensor([s in group for s, _ in graph.edge_list]) for group in groups])
    B, P = tokens.shape
    per_copy = B * P * model.cfg.d_model * 4 * (len(graph.senders) + 3 * graph.n_heads + 2) * 3  # forward + backward
    chunk = max(1, BUDGET // per_copy)
    total: dict[int, Tensor] = {}
    for k in range(1, steps + 1):
        point = (src + k / steps * (clean - src)).detach()
        for start in range(0, len(groups), chunk):
            patch = as_patch(graph, sets[start : start + chunk]).to(src.device)
            for r, g in gradients(model, graph, tokens, metric, None, None, patch, point).items():
                total[r] = total.get(r, 0) + g.unflatten(0, (-1, B)).sum(0) / (len(groups) * steps)
    return edge_scores(graph, clean - src, total)


def at_both_ends(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric
) -> Float[Tensor, "edge"]:
    """The gradient averaged over the clean run and the source run (the model on the source's input: under resample
    ablation, the corrupted run), the two ends of EAP-IG's path."""
    return along_inputs(model, graph, tokens, src, metric, [0.0, 1.0])
