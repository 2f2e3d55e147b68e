"""Exact activation patching: m(clean) - m(one edge patched) for every edge, as many edges per forward as the
memory budget allows. The reference every approximate method is scored against."""

from __future__ import annotations

from typing import Any, Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.circuits.graph import Graph
from mechsynth.circuits.method import register_method
from mechsynth.circuits.patching import Metric, metric_of


def activation_patching(
    model: Any,
    graph: Graph,
    tokens: Int[Tensor, "batch pos"],
    src: Tensor,
    metric: Metric,
    level: Literal["edge", "node"] = "edge",
) -> Float[Tensor, "item"]:
    """Exact: m(clean) - m(one edge patched) for every edge, or m(clean) - m(every edge out of a sender
    patched) for every sender (`level="node"`)."""
    n = len(graph.edge_list)
    sets = (
        torch.eye(n, dtype=torch.bool) if level == "edge" else torch.stack([graph.node_edges(s) for s in graph.senders])
    )
    clean = metric_of(model, graph, tokens, src, metric, torch.zeros(1, n, dtype=torch.bool))
    return clean - metric_of(model, graph, tokens, src, metric, sets)


@register_method("patching", cost="one forward per edge (batched)", exact=True)
def patching(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, options: None
) -> Float[Tensor, "edge"]:
    return activation_patching(model, graph, tokens, src, metric)
