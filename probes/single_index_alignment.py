"""Alignment with the hidden direction of a single-index model (Ben Arous et al. 2021; Damian, Nichani, Ge & Lee
2023): how far the first layer's units point along w*, the "hidden progress" of learning σ(w*·x) — the loss
sits at Var σ while the alignment escapes from its random level ~1/√d, then the loss falls.

For each unit j of the layer that reads x — the MLP's hidden unit (column W_in[:, j]), or a transformer's residual
dimension (column W_E[:, j] of its linear read-in) — cos_j = ⟨W[:, j], w*⟩ / ‖W[:, j]‖. Metrics:
- `alignment`: max_j |cos_j|, the best unit's (1 when a unit points exactly along ±w*);
- `alignment_mean`: the mean |cos_j| over units;
- `chance`: √(2/(πd)), the mean |cos| of a random direction in d dimensions (≈ `alignment_mean` at init).
No hooks: it reads the weights, on the mlp kind (W_in [d, width]) and on a transformer (W_E [d, d_model]).
"""

from __future__ import annotations

import math
from typing import Any, Optional

from mechsynth.probes import ProbeResult, View, formation_step, no_hooks, register

ALIGNED = 0.9  # the best unit's |cos| from which the summary calls w* found


def first_layer(model: Any) -> Optional[str]:
    """The weight that reads x: the MLP's W_in, else a transformer's read-in W_E; None when there is neither."""
    return "W_in" if getattr(model, "input_weights", None) == "W_in" else "W_E" if hasattr(model, "W_E") else None


def reads_x(model: Any) -> Optional[str]:
    if first_layer(model) is None:
        return (
            f"probe 'single_index_alignment' reads the layer that reads x (an MLP's W_in or a transformer's W_E), "
            f"which {type(model).__name__} lacks"
        )
    return None


def summary(tl: Any, task: Any) -> list[str]:
    m = tl.metrics.get("single_index_alignment")
    if not m:
        return []
    found = formation_step(tl.steps, m["alignment"], ALIGNED)
    when = f"≥ {ALIGNED:g} from step {found}" if found is not None else f"not ≥ {ALIGNED:g} for good (not reached)"
    return [
        f"single_index_alignment  the best unit's |cos| with w*: {m['alignment'][0]:.2f} at step 0 (the best of "
        f"random units; one random direction averages {m['chance'][0]:.2f}), {m['alignment'][-1]:.2f} at the end; {when}"
    ]


@register(
    "single_index_alignment",
    reads={"data": no_hooks},
    truth=("w_star",),
    model_check=reads_x,
    threshold=float("inf"),
    summary=summary,
)
def single_index_alignment(view: View) -> ProbeResult:
    W = view.weight("W_in" if view.input_weights == "W_in" else "W_E").float()  # [d, units]
    w_star = view.batch("data").truth["w_star"][0].to(W.device).float()
    cos = ((w_star @ W) / W.norm(dim=0).clamp_min(1e-30)).abs()
    d = W.shape[0]
    return ProbeResult(
        "single_index_alignment",
        None,
        {"alignment": float(cos.max()), "alignment_mean": float(cos.mean()), "chance": math.sqrt(2 / (math.pi * d))},
    )
