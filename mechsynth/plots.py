"""Figures of a run and its probe timeline, drawn with matplotlib's object API (Agg canvas, no pyplot
state): they save to PNG for the report and display as they are in a notebook."""

from __future__ import annotations

import base64
import io
import math
from typing import Any, Optional, Sequence

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from mechsynth.timeline import Timeline, formation_step, stages

DROP = dict(color="0.35", linestyle=":", linewidth=1.2)


def _figure(rows: int, cols: int = 1, height: float = 2.6, width: float = 8.0, **kw) -> tuple[Figure, Any]:
    fig = Figure(figsize=(width, height * rows), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False, **kw)


def _steps_axis(ax: Axes, label: bool = True, log: bool = True) -> None:
    # Checkpoints are log-spaced early, where circuits form; symlog keeps step 0 on the axis.
    if log:
        ax.set_xscale("symlog", linthresh=1, linscale=0.3)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.25)
    if label:
        ax.set_xlabel("training step")


def _mark_drop(ax: Axes, step: Optional[int], label: bool = False) -> None:
    if step is not None:
        ax.axvline(step, **DROP, label=f"loss falls fastest (step {step})" if label else None)


def png_base64(fig: Figure, dpi: int = 110) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def curves(records: Sequence[dict[str, Any]], loss_drop_step: Optional[int] = None,
           formed: Sequence[tuple[str, str, int]] = ()) -> Figure:
    """Loss and accuracy against training step, with the loss drop and the first formation of each probe."""
    fig, axes = _figure(2, sharex=True)
    ax_loss, ax_acc = axes[:, 0]
    for key, style in (("train/loss", dict(color="tab:blue", alpha=0.6)), ("eval/loss", dict(color="black"))):
        pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        if pts:
            ax_loss.plot(*zip(*pts), label=key, **style)
    ax_loss.set_ylabel("loss (nats)")
    for key, colour in (("train/acc", "tab:blue"), ("eval/acc", "black"), ("eval_long/acc", "tab:red"),
                        ("eval/acc_last", "tab:purple")):
        pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        if pts:
            ax_acc.plot(*zip(*pts), label=key, color=colour)
    ax_acc.set_ylabel("accuracy")
    first: dict[str, tuple[str, int]] = {}
    for probe, head, step in formed:
        first.setdefault(probe, (head, step))
    for i, (probe, (head, step)) in enumerate(first.items()):
        for ax in (ax_loss, ax_acc):
            ax.axvline(step, color=f"C{i + 2}", linestyle="--", linewidth=1,
                       label=f"{probe} {head} forms (step {step})" if ax is ax_loss else None)
    for ax in (ax_loss, ax_acc):
        _mark_drop(ax, loss_drop_step, label=ax is ax_loss)
        _steps_axis(ax, label=ax is ax_acc)
    ax_loss.legend(fontsize=7, loc="upper right")
    ax_acc.legend(fontsize=7, loc="lower right")
    return fig


def head_timelines(tl: Timeline, thresholds: dict[str, float]) -> Optional[Figure]:
    """The held-out loss, then one panel per head-scoring probe: every head's score against step,
    the probe's threshold, each head's formation step and the loss drop."""
    probes = [p for p, heads in tl.per_head.items() if heads]
    if not probes:
        return None
    fig, axes = _figure(len(probes) + 1, height=2.3, sharex=True)
    ax = axes[0, 0]
    ax.plot(tl.steps, [math.nan if v is None else v for v in tl.loss], color="black")
    ax.set_ylabel("held-out loss")
    _mark_drop(ax, tl.loss_drop_step, label=True)
    if tl.loss_drop_step is not None:  # (a run cut short may have no drop to mark)
        ax.legend(fontsize=7, loc="upper right")
    _steps_axis(ax, label=False)
    for ax, probe in zip(axes[1:, 0], probes):
        heads = tl.per_head[probe]
        for i, (head, series) in enumerate(heads.items()):
            colour = f"C{i % 10}"
            formed = tl.formation.get(probe, {}).get(head)
            ax.plot(tl.steps, series, color=colour, linewidth=1.4 if formed is not None else 0.8,
                    label=f"{head} (forms at {formed})" if formed is not None else head)
            if formed is not None:
                ax.axvline(formed, color=colour, linestyle="--", linewidth=1)
        threshold = thresholds.get(probe)
        if threshold is not None and math.isfinite(threshold):
            ax.axhline(threshold, color="0.5", linewidth=0.8, linestyle="-.")
        _mark_drop(ax, tl.loss_drop_step)
        ax.set_ylabel(probe.replace("_", " "), fontsize=8)
        ax.legend(fontsize=6, loc="upper left", ncol=max(1, len(heads) // 6))
        _steps_axis(ax, label=ax is axes[-1, 0])
    return fig


def strategy_kl(tl: Timeline, strategies: Sequence[str]) -> Optional[Figure]:
    """KL from each reference predictor to the model (icl_strategy), with the stages shaded."""
    metrics = tl.metrics.get("icl_strategy", {})
    names = [s for s in strategies if f"kl/{s}" in metrics] or sorted(k[3:] for k in metrics if k.startswith("kl/"))
    if not names:
        return None
    fig, axes = _figure(1, height=3.4)
    ax = axes[0, 0]
    # n-gram last and dashed: with a flat Dirichlet prior it is the Bayes predictor, and both stay visible.
    for i, name in sorted(enumerate(names), key=lambda x: x[1] == "ngram"):
        ax.plot(tl.steps, metrics[f"kl/{name}"], label=name, color=f"C{i}", linestyle="--" if name == "ngram" else "-")
    changes = stages(tl)
    for j, (index, start) in enumerate(changes):
        end = changes[j + 1][1] if j + 1 < len(changes) else tl.steps[-1]
        ax.axvspan(start, end, color=f"C{index}", alpha=0.08)
    ax.set_title("nearest: " + " → ".join(f"{names[i] if i < len(names) else i} ({s})" for i, s in changes), fontsize=8)
    _mark_drop(ax, tl.loss_drop_step, label=True)
    ax.set_yscale("log")
    ax.set_ylabel("KL(strategy ‖ model)")
    ax.legend(fontsize=7, title="reference predictor", title_fontsize=7)
    _steps_axis(ax)
    return fig


def linear_probes(tl: Timeline) -> Optional[Figure]:
    """automaton_shortcut: linear decoding accuracy per layer (at three checkpoints) and over training,
    beside accuracy at and beyond the training length."""
    metrics = tl.metrics.get("automaton_shortcut", {})
    keys = [k for k in metrics if k.startswith("linear/")]
    if not keys:
        return None
    targets = list(dict.fromkeys(k.split("/")[1] for k in keys))
    depths = list(dict.fromkeys(k.split("/")[2] for k in keys))  # embed, L0, L1, ... in probe order
    fig, axes = _figure(1, 3, height=3.2, width=12)
    ax_depth, ax_time, ax_acc = axes[0]
    picks = sorted({0, tl.steps.index(tl.loss_drop_step) if tl.loss_drop_step in tl.steps else len(tl.steps) // 2,
                    len(tl.steps) - 1})
    for t, target in enumerate(targets):
        for j, i in enumerate(picks):
            ax_depth.plot(depths, [metrics[f"linear/{target}/{d}"][i] for d in depths], marker="o", color=f"C{t}",
                          alpha=0.35 + 0.65 * j / max(1, len(picks) - 1),
                          label=f"{target}, step {tl.steps[i]}")
    ax_depth.set_ylim(0, 1.02)
    ax_depth.set_xlabel("residual stream after")
    ax_depth.set_ylabel("linear decoding accuracy")
    ax_depth.legend(fontsize=6)
    for j, depth in enumerate(depths):
        ax_time.plot(tl.steps, metrics[f"linear/{targets[0]}/{depth}"], color=f"C{j}", label=depth)
    ax_time.set_ylabel(f"{targets[0]} decoding accuracy")
    ax_time.legend(fontsize=6, title="after", title_fontsize=6)
    for key, colour in (("acc", "black"), ("acc_long", "tab:orange"), ("acc_beyond_train_length", "tab:red")):
        if key in metrics:
            ax_acc.plot(tl.steps, metrics[key], color=colour, label=key)
    ax_acc.set_ylabel("model accuracy")
    ax_acc.legend(fontsize=6)
    for ax in (ax_time, ax_acc):
        _mark_drop(ax, tl.loss_drop_step)
        _steps_axis(ax)
    return fig


def hidden_progress(tl: Timeline) -> Optional[Figure]:
    """hidden_progress: how far the weights of the support bits and of the other bits moved, their
    ratio, and the loss: progress hidden under a flat loss (Barak et al. 2022)."""
    m = tl.metrics.get("hidden_progress", {})
    if not {"drift_on_support", "drift_off_support", "drift_ratio"} <= set(m):
        return None
    fig, axes = _figure(1, 2, height=3.2, width=11)
    ax_drift, ax_ratio = axes[0]
    ax_drift.plot(tl.steps, m["drift_on_support"], color="tab:red", label="support bits")
    ax_drift.plot(tl.steps, m["drift_off_support"], color="tab:gray", label="other bits")
    if any(v > 0 for v in m["drift_on_support"] + m["drift_off_support"]):  # (step 0 alone has moved nowhere)
        ax_drift.set_yscale("log")  # the support pulls ahead by a growing factor while the loss is flat
    ax_drift.set_ylabel("weight drift from step 0 (‖ΔW[i]‖∞)")
    ax_drift.legend(fontsize=7)
    ax_ratio.plot(tl.steps, m["drift_ratio"], color="tab:red", label="support / other drift")
    ax_ratio.set_ylabel("drift ratio")
    loss_ax = ax_ratio.twinx()
    loss_ax.plot(tl.steps, [math.nan if v is None else v for v in tl.loss], color="black", alpha=0.6, label="held-out loss")
    loss_ax.set_ylabel("held-out loss")
    recovered = formation_step(tl.steps, m["support_recovered"], 1.0) if "support_recovered" in m else None
    for ax in (ax_drift, ax_ratio):
        if recovered is not None:
            ax.axvline(recovered, color="tab:red", linestyle="--", linewidth=1,
                       label=f"support readable from weights (step {recovered})" if ax is ax_ratio else None)
        _mark_drop(ax, tl.loss_drop_step, label=ax is ax_ratio)
        _steps_axis(ax, log=False)  # the plateau is long, and checkpoints are even there
    lines = ax_ratio.get_legend_handles_labels()[0] + loss_ax.get_legend_handles_labels()[0]
    ax_ratio.legend(lines, [ln.get_label() for ln in lines], fontsize=7, loc="center left")
    return fig
