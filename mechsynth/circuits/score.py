"""From edge scores to a circuit, and how good it is: its faithfulness, and the scores' ROC AUC against a
circuit known to be right."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from scipy.stats import mannwhitneyu
from torch import Tensor

from mechsynth.circuits.graph import Graph
from mechsynth.circuits.methods import Metric, ends, metric_of


@dataclass
class Circuit:
    edges: Bool[Tensor, "edge"]  # over graph.edge_list
    faithfulness: float  # of these edges alone, everything else patched
    curve: list[float]  # faithfulness of the top k edges, k = 1 ... every edge


def faithfulness(model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric,
                 circuits: Bool[Tensor, "copy edge"]) -> Float[Tensor, "copy"]:
    """(m(C) - m(∅)) / (m(all) - m(∅)) for each circuit C: the share of the clean-vs-ablated metric gap it
    keeps with every edge outside it patched (1: as the whole model, 0: as nothing). NaN when the gap is 0
    (the counterfactual changes nothing the metric sees)."""
    clean, ablated = ends(model, graph, tokens, src, metric)
    if clean == ablated:
        return torch.full((circuits.shape[0],), math.nan)
    return ((metric_of(model, graph, tokens, src, metric, ~circuits).cpu() - ablated) / (clean - ablated))


def top_edges(scores: Float[Tensor, "edge"], k: int) -> Bool[Tensor, "edge"]:
    """The k edges of largest |score| (ties broken by edge order)."""
    out = torch.zeros(len(scores), dtype=torch.bool)
    out[scores.abs().argsort(descending=True, stable=True)[:k]] = True
    return out


def circuit(model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric,
            scores: Float[Tensor, "edge"], level: float) -> Circuit:
    """The smallest set of top-scoring edges whose faithfulness reaches `level` (every edge if none does)."""
    n = len(scores)
    sets = torch.stack([top_edges(scores, k) for k in range(1, n + 1)])
    curve = faithfulness(model, graph, tokens, src, metric, sets)
    reached = (curve >= level).nonzero()
    k = int(reached[0]) + 1 if len(reached) else n
    return Circuit(sets[k - 1], float(curve[k - 1]), [float(f) for f in curve])


def auc(scores: Float[Tensor, "edge"], truth: Bool[Tensor, "edge"]) -> float:
    """ROC AUC of |score| separating the true circuit's edges from the others: P(true > other) + ½ P(tie),
    from the Mann–Whitney U statistic; NaN when either side is empty."""
    a, b = scores.abs()[truth], scores.abs()[~truth]
    if len(a) == 0 or len(b) == 0:
        return math.nan
    return float(mannwhitneyu(a.double().numpy(), b.double().numpy()).statistic / (len(a) * len(b)))
