"""Figures of a run and its probe timeline: the loss curves, every probe's per-head timelines, the stages. A probe's
own figure (strategy KL, linear probes, hidden progress) lives in the probe's file; the helpers every figure shares
are in mechsynth/util/figures.py."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from mechsynth.util.figures import held_out_loss, mark_drop, new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from mechsynth.probes import Timeline


def curves(
    records: Sequence[dict[str, Any]], loss_drop_step: Optional[int] = None, formed: Sequence[tuple[str, str, int]] = ()
) -> Figure:
    """Loss and accuracy against training step, with the loss drop and the first formation of each probe."""
    fig, axes = new_figure(2, sharex=True)
    ax_loss, ax_acc = axes[:, 0]
    for key, style in (
        ("train/loss", dict(color="tab:blue", alpha=0.6)),
        ("train_set/loss", dict(color="tab:green")),
        ("eval/loss", dict(color="black")),
    ):
        pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        if pts:
            ax_loss.plot(*zip(*pts), label=key, **style)
    ax_loss.set_ylabel("loss (nats)")
    for key, colour in (
        ("train/acc", "tab:blue"),
        ("train_set/acc", "tab:green"),
        ("eval/acc", "black"),
        ("eval_long/acc", "tab:red"),
        ("eval/acc_last", "tab:purple"),
    ):
        pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        if pts:
            ax_acc.plot(*zip(*pts), label=key, color=colour)
    ax_acc.set_ylabel("accuracy")
    first: dict[str, tuple[str, int]] = {}
    for probe, head, step in formed:
        first.setdefault(probe, (head, step))
    for i, (probe, (head, step)) in enumerate(first.items()):
        for ax in (ax_loss, ax_acc):
            ax.axvline(
                step,
                color=f"C{i + 2}",
                linestyle="--",
                linewidth=1,
                label=f"{probe} {head} forms (step {step})" if ax is ax_loss else None,
            )
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
    ax.plot(tl.steps, held_out_loss(tl.loss), color="black")
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
            ax.plot(
                tl.steps,
                series,
                color=colour,
                linewidth=1.4 if formed is not None else 0.8,
                label=f"{head} (forms at {formed})" if formed is not None else head,
            )
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
            ax.axvline(
                s, color="tab:red", linewidth=1.2, alpha=0.8, label="change point" if s == found[name][0] else None
            )
        for s in found.get("llc turns", []):
            ax.axvline(
                s,
                color="tab:purple",
                linewidth=1,
                linestyle="-.",
                label="LLC turns" if row == 0 and s == found["llc turns"][0] else None,
            )
        for i, (probe, s) in enumerate(first.items()):
            ax.axvline(
                s, color=f"C{i + 2}", linestyle="--", linewidth=1, label=f"{probe} forms ({s})" if row == 0 else None
            )
        ax.set_ylabel(name.replace("_", " "), fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="best")
        steps_axis(ax, label=row == len(series) - 1)
    return fig
