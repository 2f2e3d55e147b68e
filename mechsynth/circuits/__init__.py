"""Causal circuit discovery on a hooked transformer: its graph of senders and receivers along the residual
stream (`graph`), a forward pass with any set of edges patched (`forward`), methods that score every edge
(`methods`: activation patching, EAP, EAP-IG, ACDC) and the circuit those scores give, its faithfulness
and its AUC against a known circuit (`score`).

    graph = circuits.Graph.of(model)
    metric = circuits.patch_metric(task.patch_metric, clean, corrupted)
    src = circuits.source(model, graph, clean.tokens, corrupted.tokens, "resample")
    scores = circuits.discover("eap_ig", model, graph, clean.tokens, src, metric)
    found = circuits.circuit(model, graph, clean.tokens, src, metric, scores, level=0.9)

Written here rather than taken from a library: TransformerLens's own patching utilities patch nodes, not
edges, and its path patching needs per-head inputs that TL 4's bridge does not have; auto-circuit imports
TL 3's HookedTransformer; nnsight and pyvene would each be a second way to hook the same model. This
package uses only hooks that behave alike on TL 3.9 and 4.x (see `forward`).
"""

from __future__ import annotations

from typing import Any

from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.circuits.graph import Graph, why_not
from mechsynth.circuits.methods import (ABLATIONS, METHODS, Metric, acdc, activation_patching, attribution, ends,
                                        metric_of, patch_metric, position_patching, source)
from mechsynth.circuits.score import Circuit, auc, circuit, faithfulness, top_edges


def discover(method: str, model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric,
             *, ig_steps: int = 8, threshold: float = 0.02) -> Float[Tensor, "edge"]:
    """Every edge's score by `method` (METHODS): "patching" (exact), "eap", "eap_ig" (`ig_steps`), "acdc"
    (`threshold`, a share of the clean-vs-ablated metric gap)."""
    if method == "patching":
        return activation_patching(model, graph, tokens, src, metric)
    if method == "eap":
        return attribution(model, graph, tokens, src, metric)
    if method == "eap_ig":
        return attribution(model, graph, tokens, src, metric, steps=ig_steps)
    if method == "acdc":
        return acdc(model, graph, tokens, src, metric, threshold)
    raise ValueError(f"method: {method!r}; allowed: {', '.join(METHODS)}")


__all__ = ["ABLATIONS", "Circuit", "Graph", "METHODS", "Metric", "activation_patching", "acdc", "attribution", "auc",
           "circuit", "discover", "ends", "faithfulness", "metric_of", "patch_metric", "position_patching", "source", "top_edges", "why_not"]
