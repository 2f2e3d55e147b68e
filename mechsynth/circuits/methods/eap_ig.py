"""EAP with integrated gradients on the inputs (Hanna et al. 2024): the gradient averaged over `ig_steps` points
on the straight path of the embeddings from the source's to the clean input's, the model computing on from each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.circuits.gradient import attribution
from mechsynth.circuits.graph import Graph
from mechsynth.circuits.method import register_method
from mechsynth.circuits.patching import Metric
from mechsynth.config import check_fields, doc, validates_itself


@validates_itself
@dataclass(frozen=True)
class IGOptions:
    ig_steps: int = doc("points on the path from the ablated to the clean input", 8, lo=2, hi=1024)

    def __post_init__(self) -> None:
        check_fields(self)


@register_method("eap_ig", options=IGOptions, cost="ig_steps forwards and backwards")
def eap_ig(model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric,
           options: IGOptions) -> Float[Tensor, "edge"]:
    return attribution(model, graph, tokens, src, metric, steps=options.ig_steps)
