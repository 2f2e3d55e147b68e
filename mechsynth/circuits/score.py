"""From edge scores to a circuit, and how good it is: its faithfulness, the scores' ROC AUC against a circuit
known to be right, and MIB's faithfulness curve over edge budgets with its two areas (CPR, CMD)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth.circuits.graph import Graph
from mechsynth.circuits.patching import Metric, ends, metric_of


@dataclass
class Circuit:
    edges: Bool[Tensor, "edge"]  # over graph.edge_list
    faithfulness: float  # of these edges alone, everything else patched
    curve: list[float]  # faithfulness of the top k edges, k = 1 ... every edge


def faithfulness(
    model: Any,
    graph: Graph,
    tokens: Int[Tensor, "batch pos"],
    src: Tensor,
    metric: Metric,
    circuits: Bool[Tensor, "copy edge"],
) -> Float[Tensor, "copy"]:
    """(m(C) - m(∅)) / (m(all) - m(∅)) for each circuit C: the share of the clean-vs-ablated metric gap it
    keeps with every edge outside it patched (1: as the whole model, 0: as nothing). NaN when the gap is 0
    (the counterfactual changes nothing the metric sees)."""
    clean, ablated = ends(model, graph, tokens, src, metric)
    if clean == ablated:
        return torch.full((circuits.shape[0],), math.nan)
    return (metric_of(model, graph, tokens, src, metric, ~circuits).cpu() - ablated) / (clean - ablated)


def top_edges(scores: Float[Tensor, "edge"], k: int, absolute: bool = True) -> Bool[Tensor, "edge"]:
    """The k edges of largest |score| (`absolute`), or of largest signed score: an edge whose patching raises the
    metric scores below zero and comes last (MIB's signed top-k); ties broken by edge order."""
    out = torch.zeros(len(scores), dtype=torch.bool)
    out[(scores.abs() if absolute else scores).argsort(descending=True, stable=True)[:k]] = True
    return out


def circuit(
    model: Any,
    graph: Graph,
    tokens: Int[Tensor, "batch pos"],
    src: Tensor,
    metric: Metric,
    scores: Float[Tensor, "edge"],
    level: float,
    absolute: bool = True,
) -> Circuit:
    """The smallest set of top-scoring edges (`top_edges`) whose faithfulness reaches `level` (every edge if none
    does)."""
    n = len(scores)
    sets = torch.stack([top_edges(scores, k, absolute) for k in range(1, n + 1)])
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
    from scipy.stats import mannwhitneyu  # (here: importing scipy.stats costs `mechsynth probes` 0.6 s)

    return float(mannwhitneyu(a.double().numpy(), b.double().numpy()).statistic / (len(a) * len(b)))


# MIB's edge budgets (Mueller et al. 2025, circuit localization track, `evaluate_area_under_curve`): the share of the
# graph's edges a circuit may keep, k = int(share * edges).
BUDGETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass
class Curve:
    budgets: list[float]  # shares of the graph's edges
    edges: list[int]  # the edges kept at each: int(share * edges), as MIB counts them
    faithfulness: list[float]  # (m(C) - m(∅)) / (m(all) - m(∅)) of the top edges at each budget
    cpr: float  # area under the curve (higher is better)
    cmd: float  # area between the curve and 1 (lower is better)


def curve_areas(budgets: Sequence[float], faithfulness: Sequence[float]) -> tuple[float, float]:
    """(CPR, CMD): the trapezoidal areas over the budgets (on a linear axis, MIB's default) under the faithfulness
    curve and between it and 1."""
    cpr = cmd = 0.0
    for (x1, f1), (x2, f2) in zip(zip(budgets, faithfulness), zip(budgets[1:], faithfulness[1:])):
        cpr += (x2 - x1) * (f1 + f2) / 2
        cmd += (x2 - x1) * (abs(1 - f1) + abs(1 - f2)) / 2
    return cpr, cmd


def mib_curve(
    model: Any,
    graph: Graph,
    tokens: Int[Tensor, "batch pos"],
    src: Tensor,
    metric: Metric,
    scores: Float[Tensor, "edge"],
    absolute: bool = True,
    budgets: Sequence[float] = BUDGETS,
) -> Curve:
    """The faithfulness of the top-scoring edges at each of MIB's edge budgets, and its areas. MIB also prunes
    edges that no longer connect the input to the logits; under resample ablation that changes nothing (a sender
    whose inputs are all patched computes its output on the source already), so no edge is pruned here."""
    n = len(scores)
    counts = [int(b * n) for b in budgets]
    curve = faithfulness(
        model, graph, tokens, src, metric, torch.stack([top_edges(scores, k, absolute) for k in counts])
    )
    f = [float(x) for x in curve]
    cpr, cmd = curve_areas(budgets, f)
    return Curve(list(budgets), counts, f, cpr, cmd)
