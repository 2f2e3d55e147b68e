"""The minimal induction model's two weights (Edelman et al. 2024's simplified transformer, kind minimal_induction):
how far W_k has moved from uniform towards the identity and which relative position v weighs most.

`diag_bias`: mean diagonal minus mean off-diagonal entry of W_k (0 for the uninformed start c·11ᵀ and the unigram
solution, 1 for the bigram solution W_k = I); `v/{d}`: v at d positions back (0: the token itself, their v_1; 1:
the one before, their v_2), for the first few d; `v_lead`: the d where v is largest (1 for the bigram solution, 0
for the unigram one). The paper's two phases read off these series: W_k's diagonal appears first, then v_2 leads.
"""

from __future__ import annotations

from mechsynth.probes import ProbeResult, View, no_hooks, register

SHOWN = 8  # v at these many offsets back


@register("position_mixing", reads={"data": no_hooks}, weights=("W_k", "v"), threshold=float("inf"))
def position_mixing(view: View) -> ProbeResult:
    W, v = view.weight("W_k").float(), view.weight("v").float()
    k = W.shape[-1]
    diag = W.diagonal().mean()
    off = (W.sum() - W.diagonal().sum()) / max(k * k - k, 1)
    metrics = {
        "diag_bias": float(diag - off),
        "v_lead": float(v.argmax()),
        **{f"v/{d}": float(v[d]) for d in range(min(SHOWN, v.shape[-1]))},
    }
    return ProbeResult("position_mixing", None, metrics)
