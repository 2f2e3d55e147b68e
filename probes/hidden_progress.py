"""Hidden progress (Barak et al. 2022): while the loss of a sparse parity sits on its plateau, the
weights are already moving towards the hidden support S. Measured on the input-facing weights —
the first layer of the MLP baseline (one row per input bit), the positional embedding of a
transformer (one row per bit position) — against the weights at step 0:

- `drift_inf`: ‖W_t − W_0‖∞ over those weights;
- `drift_on_support` / `drift_off_support`: the mean over bits in / not in S of each bit's row drift
  ‖ΔW[i]‖∞, and their ratio `drift_ratio` (1 at the start; it grows as S is singled out);
- `support_recovered`: the |S| bits whose rows moved most are exactly S.

No hooks: it reads weights, so it works on the MLP baselines as well as transformers.
"""

from __future__ import annotations

from jaxtyping import Float
from torch import Tensor

from mechsynth.probes import ProbeError, ProbeResult, View, no_hooks, register


def row_drift(view: View) -> Float[Tensor, "n_inputs"]:
    """‖W_t[i] − W_0[i]‖∞ for each input bit i."""
    name = "W_pos" if view.n_layers else "W_in"  # transformer: positions; MLP baseline: its first layer
    try:
        now, init = view.weight(name), view.init_weight(name)
    except AttributeError:
        raise ProbeError(f"hidden_progress reads {name}, which this model does not have (rotary positions?)") from None
    n_inputs = view.tokens("data").shape[1] - 1  # every position but the readout
    return (now[:n_inputs] - init[:n_inputs]).abs().amax(-1)


@register("hidden_progress", reads={"data": no_hooks}, truth=("support",), needs_task=True, needs_init=True,
          threshold=float("inf"), tasks=("sparse_parity", "sparse_boolean"))
def hidden_progress(view: View) -> ProbeResult:
    drift = row_drift(view)
    support = view.batch("data").truth["support"].to(drift.device)
    on = drift.new_zeros(drift.shape, dtype=bool)
    on[support] = True
    on_mean, off_mean = float(drift[on].mean()), float(drift[~on].mean()) if bool((~on).any()) else 0.0
    top = set(drift.topk(len(support)).indices.tolist())
    metrics = {"drift_inf": float(drift.max()), "drift_on_support": on_mean, "drift_off_support": off_mean,
               "drift_ratio": on_mean / off_mean if off_mean > 0 else 1.0,
               "support_recovered": float(top == set(support.tolist()))}
    return ProbeResult("hidden_progress", None, metrics, {"drift": drift.cpu(), "support": support.cpu()})
