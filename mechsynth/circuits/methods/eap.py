"""Edge attribution patching (Syed et al. 2023): (clean_u - source_u) · dm/dx_v at the clean input, the
first-order term of each edge's effect, from one forward and one backward pass."""

from __future__ import annotations

from typing import Any

from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.circuits.gradient import attribution
from mechsynth.circuits.graph import Graph
from mechsynth.circuits.method import register_method
from mechsynth.circuits.patching import Metric


@register_method("eap", cost="one forward and one backward")
def eap(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, options: None
) -> Float[Tensor, "edge"]:
    return attribution(model, graph, tokens, src, metric)
