"""EAP with integrated gradients on the inputs (Hanna et al. 2024): the gradient averaged over `ig_steps` points
on the straight path of the embeddings from the source's to the clean input's, the model computing on from each.

Which points: α = 1/m ... 1 ("right", the default: the paper's 2024 code) or α = 0 ... (m - 1)/m ("left": the
authors' `get_scores_eap_ig` since February 2025, the version MIB pins). tests/test_circuit_peers.py checks both
against auto-circuit's attribution on TransformerLens 3."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.circuits.gradient import along_inputs
from mechsynth.circuits.graph import Graph
from mechsynth.circuits.method import register_method
from mechsynth.circuits.patching import Metric
from mechsynth.config import check, check_fields, doc, validates_itself


@validates_itself
@dataclass(frozen=True)
class IGOptions:
    ig_steps: int = doc("points on the path from the ablated to the clean input", 8, lo=2, hi=1024)

    def __post_init__(self) -> None:
        check_fields(self)


@validates_itself
@dataclass(frozen=True)
class InputIGOptions(IGOptions):
    ig_points: str = doc(
        "where on the path: right (α = 1/m ... 1) or left (α = 0 ... (m-1)/m, as MIB's pinned code)", "right"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.ig_points in ("right", "left"), "ig_points", f"{self.ig_points!r}; allowed: right, left")


@register_method("eap_ig", options=InputIGOptions, cost="ig_steps forwards and backwards")
def eap_ig(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, options: InputIGOptions
) -> Float[Tensor, "edge"]:
    m = options.ig_steps
    alphas = [k / m for k in range(1, m + 1)] if options.ig_points == "right" else [k / m for k in range(m)]
    return along_inputs(model, graph, tokens, src, metric, alphas)
