"""EAP-IG on activations (MIB's best method on average, Mueller et al. 2025): the gradient averaged over every
sender group (the input, each layer's heads, each MLP) moved alone along `ig_steps` points from its source output to
its clean one, everything else clean."""

from __future__ import annotations

from typing import Any

from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.circuits.gradient import along_activations
from mechsynth.circuits.graph import Graph
from mechsynth.circuits.method import register_method
from mechsynth.circuits.methods.eap_ig import IGOptions
from mechsynth.circuits.patching import Metric


@register_method(
    "eap_ig_activations",
    options=IGOptions,
    cost="ig_steps × (2 n_layers + 1) forwards and backwards, batched as copies",
)
def eap_ig_activations(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, options: IGOptions
) -> Float[Tensor, "edge"]:
    return along_activations(model, graph, tokens, src, metric, options.ig_steps)
