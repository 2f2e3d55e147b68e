"""Hidden progress (Barak et al. 2022): while the loss of a sparse parity sits on its plateau, the
weights are already moving towards the hidden support S. Measured on the input-facing weights —
the first layer of the MLP baseline and of the sin / PolyNet models (one row per input bit), the
positional embedding of a transformer (one row per bit position); the model names them in
`input_weights` — against the weights at step 0, with d_i = ‖W_t[i] − W_0[i]‖∞ the drift of bit i's row:

- `drift_inf`: max_i d_i, ‖W_t − W_0‖∞ over those weights (support-free);
- `topk_drift_ratio` (support-free): the mean d_i of the k rows that moved most over the mean of the
  other rows, with k = |S| (only the count: the parity degree the task's config declares; which bits
  are in S is not used). It equals `drift_ratio` whenever those k rows are S, so it can be watched on a task whose
  support is unknown. Its value without progress is above 1 (the top k of n noisy drifts lead the
  rest by chance; more so where each d_i is one weight, as in a sin neuron, than where it is a
  maximum over many units, as in a width-100 MLP), so compare it with its own early value;
- `drift_on_support` / `drift_off_support`: the mean d_i over bits in / not in S, and their ratio
  `drift_ratio` (1 at the start; it grows as S is singled out);
- `support_recovered`: the |S| bits whose rows moved most are exactly S.

`drift_on_support`, `drift_off_support`, `drift_ratio` and `support_recovered` read the true support
S from the task's truth: they are oracle measures, which show hidden progress to a researcher who knows
S, not a way to detect it without S. `drift_inf` and `topk_drift_ratio` need no S.

No hooks: it reads weights, so it works on the MLP baselines, sin and PolyNet models and transformers;
not on rotary transformers, whose positions have no weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from jaxtyping import Float
from mechsynth.probes import ProbeResult, Section, View, formation_step, input_weights, no_hooks, register
from torch import Tensor

from mechsynth.util.figures import held_out_loss, mark_drop, new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from mechsynth.probes import Timeline


def row_drift(view: View) -> Float[Tensor, "bit"]:
    """‖W_t[i] − W_0[i]‖∞ for each input bit i (the positions before the readout)."""
    assert view.input_weights is not None and view.init_weight is not None  # checked before the probe runs
    now, init = view.weight(view.input_weights), view.init_weight(view.input_weights)
    n_inputs = int(view.batch("data").truth["readout"])  # the readout's position = how many bits precede it
    return (now[:n_inputs] - init[:n_inputs]).abs().amax(-1)


def topk_ratio(drift: Float[Tensor, "bit"], k: int) -> float:
    """Mean drift of the k rows that moved most over the mean of the others (1 when nothing moved):
    `drift_ratio` with the top k rows standing in for the unknown S."""
    if k >= len(drift):
        return 1.0
    ranked = drift.sort(descending=True).values
    rest = float(ranked[k:].mean())
    return float(ranked[:k].mean()) / rest if rest > 0 else 1.0


def has_input_weights(model: Any) -> Optional[str]:
    if input_weights(model) is None:
        return f"probe 'hidden_progress' reads input-facing weights, which {type(model).__name__} lacks (rotary positions?)"
    return None


def summary(tl: "Timeline", task: Any) -> list[str]:
    m = tl.metrics.get("hidden_progress")
    if not m:
        return []
    recovered = formation_step(tl.steps, m["support_recovered"], 1.0)
    at_drop = tl.loss_drop_step in tl.steps
    drop = tl.steps.index(tl.loss_drop_step) if at_drop else -1
    readable = (
        f"is readable from the weights from step {recovered}"
        if recovered is not None
        else "is not readable from the weights at the last checkpoint (not reached)"
    )
    return [
        f"hidden_progress  the support's weights lead the rest {m['drift_ratio'][drop]:.1f}x at the "
        f"{'loss drop' if at_drop else 'last checkpoint (the loss never drops)'}; the support {readable}"
    ]


def figure(tl: "Timeline", task: Any) -> Optional[Figure]:
    """How far the weights of the support bits and of the other bits moved, their ratio, and the loss:
    progress hidden under a flat loss."""
    m = tl.metrics.get("hidden_progress", {})
    if not {"drift_on_support", "drift_off_support", "drift_ratio"} <= set(m):
        return None
    fig, axes = new_figure(1, 2, height=3.2, width=11)
    ax_drift, ax_ratio = axes[0]
    ax_drift.plot(tl.steps, m["drift_on_support"], color="tab:red", label="support bits")
    ax_drift.plot(tl.steps, m["drift_off_support"], color="tab:gray", label="other bits")
    if any(v > 0 for v in m["drift_on_support"] + m["drift_off_support"]):  # (step 0 alone has moved nowhere)
        ax_drift.set_yscale("log")  # the support pulls ahead by a growing factor while the loss is flat
    ax_drift.set_ylabel("weight drift from step 0 (‖ΔW[i]‖∞)")
    ax_drift.legend(fontsize=7)
    ax_ratio.plot(tl.steps, m["drift_ratio"], color="tab:red", label="support / other drift (knows S)")
    if "topk_drift_ratio" in m:  # (runs probed before it existed lack it)
        ax_ratio.plot(tl.steps, m["topk_drift_ratio"], color="tab:blue", label="top-k / other drift (no S)")
    ax_ratio.set_ylabel("drift ratio")
    loss_ax = ax_ratio.twinx()
    loss_ax.plot(tl.steps, held_out_loss(tl.loss), color="black", alpha=0.6, label="held-out loss")
    loss_ax.set_ylabel("held-out loss")
    recovered = formation_step(tl.steps, m["support_recovered"], 1.0) if "support_recovered" in m else None
    for ax in (ax_drift, ax_ratio):
        if recovered is not None:
            ax.axvline(
                recovered,
                color="tab:red",
                linestyle="--",
                linewidth=1,
                label=f"support readable from weights (step {recovered})" if ax is ax_ratio else None,
            )
        mark_drop(ax, tl.loss_drop_step, label=ax is ax_ratio)
        steps_axis(ax, log=False)  # the plateau is long, and checkpoints are even there
    lines = ax_ratio.get_legend_handles_labels()[0] + loss_ax.get_legend_handles_labels()[0]
    ax_ratio.legend(lines, [ln.get_label() for ln in lines], fontsize=7, loc="center left")
    return fig


SECTION = Section(
    "hidden_progress",
    "Hidden progress",
    "How far the input-facing weights of the support bits and of the other bits have moved from step 0.",
    figure,
)


@register(
    "hidden_progress",
    reads={"data": no_hooks},
    truth=("support", "readout"),
    needs_init=True,
    threshold=float("inf"),
    model_check=has_input_weights,
    summary=summary,
    section=SECTION,
)
def hidden_progress(view: View) -> ProbeResult:
    drift = row_drift(view)
    support = view.batch("data").truth["support"].to(drift.device)
    on = drift.new_zeros(drift.shape, dtype=bool)
    on[support] = True
    on_mean, off_mean = float(drift[on].mean()), float(drift[~on].mean()) if bool((~on).any()) else 0.0
    top = set(drift.topk(len(support)).indices.tolist())
    metrics = {
        "drift_inf": float(drift.max()),
        "topk_drift_ratio": topk_ratio(drift, len(support)),
        "drift_on_support": on_mean,
        "drift_off_support": off_mean,
        "drift_ratio": on_mean / off_mean if off_mean > 0 else 1.0,
        "support_recovered": float(top == set(support.tolist())),
    }
    return ProbeResult("hidden_progress", None, metrics, {"drift": drift.cpu(), "support": support.cpu()})
