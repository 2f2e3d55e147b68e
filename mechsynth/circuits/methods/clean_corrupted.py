"""The clean-corrupted variant of EAP-IG (Hanna et al.'s `get_scores_clean_corrupted`): the gradient averaged over
the path's two ends only, the clean run and the source run."""

from __future__ import annotations

from typing import Any

from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.circuits.gradient import at_both_ends
from mechsynth.circuits.graph import Graph
from mechsynth.circuits.method import register_method
from mechsynth.circuits.patching import Metric


@register_method("clean_corrupted", cost="two forwards and backwards")
def clean_corrupted(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, options: None
) -> Float[Tensor, "edge"]:
    return at_both_ends(model, graph, tokens, src, metric)
