"""Causal circuit discovery on a hooked transformer: its graph of senders and receivers along the residual
stream (`graph`), a forward pass with any set of edges patched (`forward`), what patching measures (`patching`),
a registry of methods that score every edge (`method`; the built-in ones in `methods/`: exact patching, EAP,
EAP-IG on inputs and on activations, clean-corrupted, ACDC), the circuit those scores give, its faithfulness,
its AUC against a known circuit and MIB's faithfulness-curve areas (`score`), and circuits to and from the
EAP-IG / MIB graph format (`exchange`).

    graph = circuits.Graph.of(model)
    metric = circuits.patch_metric(task.patch_metric, clean, corrupted)
    src = circuits.source(model, graph, clean.tokens, corrupted.tokens, "resample")
    scores = circuits.discover("eap_ig", model, graph, clean.tokens, src, metric, ig_steps=8)
    found = circuits.circuit(model, graph, clean.tokens, src, metric, scores, level=0.9)

Written here rather than taken from a library: TransformerLens's own patching utilities patch nodes, not
edges, and its path patching needs per-head inputs that TL 4's bridge does not have; auto-circuit imports
TL 3's HookedTransformer; nnsight and pyvene would each be a second way to hook the same model. This
package uses only hooks that behave alike on TL 3.9 and 4.x (see `forward`).
"""

from __future__ import annotations

from mechsynth.circuits import exchange
from mechsynth.circuits import methods as _builtin  # noqa: F401  (registers the built-in methods)
from mechsynth.circuits.gradient import attribution
from mechsynth.circuits.exchange import from_eap_json, from_eap_pt, to_eap_json, to_eap_pt
from mechsynth.circuits.graph import Graph, why_not
from mechsynth.circuits.method import METHODS, Method, discover, method_options, register_method, declared
from mechsynth.circuits.methods.acdc import acdc
from mechsynth.circuits.methods.patching import activation_patching
from mechsynth.circuits.patching import ABLATIONS, Metric, ends, metric_of, patch_metric, position_patching, source
from mechsynth.circuits.score import (
    BUDGETS,
    Circuit,
    Curve,
    auc,
    circuit,
    curve_areas,
    faithfulness,
    mib_curve,
    top_edges,
)

__all__ = [
    "ABLATIONS",
    "BUDGETS",
    "Circuit",
    "Curve",
    "Graph",
    "METHODS",
    "Method",
    "Metric",
    "activation_patching",
    "acdc",
    "attribution",
    "auc",
    "circuit",
    "curve_areas",
    "declared",
    "discover",
    "ends",
    "exchange",
    "from_eap_json",
    "from_eap_pt",
    "faithfulness",
    "method_options",
    "metric_of",
    "mib_curve",
    "patch_metric",
    "position_patching",
    "register_method",
    "source",
    "to_eap_json",
    "to_eap_pt",
    "top_edges",
    "why_not",
]
