"""Figures of a run and its probe timeline, drawn with matplotlib's object API (Agg canvas, no pyplot
state): they save to PNG for the report and display as they are in a notebook.

Here: the loss curves, every probe's per-head timelines, and the helpers every figure shares. A probe's
own figure (strategy KL, linear probes, hidden progress) lives in the probe's file and uses these helpers."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # annotations only: probe files import these helpers, and the timeline imports the probes
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from mechsynth.analysis.timeline import Timeline

DROP = dict(color="0.35", linestyle=":", linewidth=1.2)


def new_figure(rows: int, cols: int = 1, height: float = 2.6, width: float = 8.0, **kw) -> tuple[Figure, Any]:
    """A figure of rows x cols axes (always a 2-D array), on an Agg canvas of its own."""
    # matplotlib is imported by the first figure: `mechsynth probes` lists the probes (which import these helpers)
    # without it
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height * rows), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False, **kw)


def steps_axis(ax: Axes, label: bool = True, log: bool = True) -> None:
    """Training step on the x axis."""
    # Checkpoints are log-spaced early, where circuits form; symlog keeps step 0 on the axis.
    if log:
        ax.set_xscale("symlog", linthresh=1, linscale=0.3)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.25)
    if label:
        ax.set_xlabel("training step")


def mark_drop(ax: Axes, step: Optional[int], label: bool = False) -> None:
    """The step where the held-out loss falls fastest, dotted."""
    if step is not None:
        ax.axvline(step, **DROP, label=f"loss falls fastest (step {step})" if label else None)


def held_out_loss(tl: "Timeline") -> list[float]:
    """The timeline's held-out loss, NaN where a checkpoint recorded none (a gap in the line)."""
    return [math.nan if v is None else v for v in tl.loss]


def png_base64(fig: Figure, dpi: int = 110) -> str:
    """The figure as a base64 PNG, for a data: URL."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def curves(records: Sequence[dict[str, Any]], loss_drop_step: Optional[int] = None,
           formed: Sequence[tuple[str, str, int]] = ()) -> Figure:
    """Loss and accuracy against training step, with the loss drop and the first formation of each probe."""
    fig, axes = new_figure(2, sharex=True)
    ax_loss, ax_acc = axes[:, 0]
    for key, style in (("train/loss", dict(color="tab:blue", alpha=0.6)), ("train_set/loss", dict(color="tab:green")),
                       ("eval/loss", dict(color="black"))):
        pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        if pts:
            ax_loss.plot(*zip(*pts), label=key, **style)
    ax_loss.set_ylabel("loss (nats)")
    for key, colour in (("train/acc", "tab:blue"), ("train_set/acc", "tab:green"), ("eval/acc", "black"), ("eval_long/acc", "tab:red"),
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
        mark_drop(ax, loss_drop_step, label=ax is ax_loss)
        steps_axis(ax, label=ax is ax_acc)
    ax_loss.legend(fontsize=7, loc="upper right")
    ax_acc.legend(fontsize=7, loc="lower right")
    return fig


def head_timelines(tl: "Timeline", thresholds: dict[str, float]) -> Optional[Figure]:
    """The held-out loss, then one panel per head-scoring probe: every head's score against step,
    the probe's threshold, each head's formation step and the loss drop."""
    probes = [p for p, heads in tl.per_head.items() if heads]
    if not probes:
        return None
    fig, axes = new_figure(len(probes) + 1, height=2.3, sharex=True)
    ax = axes[0, 0]
    ax.plot(tl.steps, held_out_loss(tl), color="black")
    ax.set_ylabel("held-out loss")
    mark_drop(ax, tl.loss_drop_step, label=True)
    if tl.loss_drop_step is not None:  # (a run cut short may have no drop to mark)
        ax.legend(fontsize=7, loc="upper right")
    steps_axis(ax, label=False)
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
        mark_drop(ax, tl.loss_drop_step)
        ax.set_ylabel(probe, fontsize=8)  # the registered name, as `--probes` and `--set` spell it
        ax.legend(fontsize=6, loc="upper left", ncol=max(1, len(heads) // 6))
        steps_axis(ax, label=ax is axes[-1, 0])
    return fig


def stages(tl: "Timeline", series: dict[str, list[Optional[float]]], found: dict[str, list[int]]) -> Optional[Figure]:
    """One panel per timeline stages are read from (held-out loss, LLC, sharpness, each probe's best head) on
    one step axis: its own change points solid, the LLC's turns dash-dotted in every panel, and the first
    formation of each probe dashed."""
    if not series:
        return None
    fig, axes = new_figure(len(series), height=1.9, sharex=True)
    first: dict[str, int] = {}
    for probe, head, step in tl.formed():
        first.setdefault(probe, step)
    for row, (ax, (name, values)) in enumerate(zip(axes[:, 0], series.items())):
        pts = [(s, v) for s, v in zip(tl.steps, values) if v is not None and math.isfinite(v)]
        if pts:
            ax.plot(*zip(*pts), "o-" if len(pts) < len(tl.steps) else "-", color="black", markersize=3, linewidth=1.2)
        for s in found.get(name, []):
            ax.axvline(s, color="tab:red", linewidth=1.2, alpha=0.8, label="change point" if s == found[name][0] else None)
        for s in found.get("llc turns", []):
            ax.axvline(s, color="tab:purple", linewidth=1, linestyle="-.", label="LLC turns" if row == 0 and s == found["llc turns"][0] else None)
        for i, (probe, s) in enumerate(first.items()):
            ax.axvline(s, color=f"C{i + 2}", linestyle="--", linewidth=1, label=f"{probe} forms ({s})" if row == 0 else None)
        ax.set_ylabel(name.replace("_", " "), fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="best")
        steps_axis(ax, label=row == len(series) - 1)
    return fig
