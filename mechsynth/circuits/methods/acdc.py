"""ACDC (Conmy et al. 2023) on the normalized metric: receivers from the logits back, each one's senders from the
latest back, an edge patched for good when patching it (with all edges pruned so far) lowers
(m - m_ablated) / (m_clean - m_ablated) by less than `threshold`. An edge's score is that drop when it was tried;
the edges kept score ≥ threshold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.circuits.graph import Graph
from mechsynth.circuits.method import register_method
from mechsynth.circuits.patching import Metric, ends, metric_of
from mechsynth.config import check, check_fields, doc, validates_itself


@validates_itself
@dataclass(frozen=True)
class ACDCOptions:
    threshold: float = doc("an edge stays when removing it costs at least this share of the gap", 0.02)

    def __post_init__(self) -> None:
        check_fields(self)
        check(0 <= self.threshold < 1, "threshold", f"must be in [0, 1), got {self.threshold}")


def acdc(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, threshold: float
) -> Float[Tensor, "edge"]:
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


@register_method("acdc", options=ACDCOptions, cost="one forward per edge, one after another")
def acdc_method(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, options: ACDCOptions
) -> Float[Tensor, "edge"]:
    return acdc(model, graph, tokens, src, metric, options.threshold)
