"""A probe in one file, with its own summary line and report figure: attention from every later
position to the task's `source` position. It applies to any task whose batches carry `source`."""

from __future__ import annotations

from typing import Any, Optional

from mechsynth.probes import ProbeResult, Section, View, attention_hooks, register, render_heads

from mechsynth.util.figures import mark_drop, new_figure, steps_axis


def summary(tl, task: Any) -> list[str]:
    best = max(tl.per_head["toy_source"].items(), key=lambda kv: kv[1][-1])
    return [f"toy_source       {best[0]} attends {best[1][-1]:.2f} to the source at the last checkpoint"]


def figure(tl, task: Any) -> Optional[Any]:
    fig, axes = new_figure(1)
    ax = axes[0, 0]
    for head, series in tl.per_head["toy_source"].items():
        ax.plot(tl.steps, series, label=head)
    mark_drop(ax, tl.loss_drop_step)
    steps_axis(ax)
    ax.set_ylabel("attention to the source")
    ax.legend(fontsize=7)
    return fig


SECTION = Section(
    "toy_source",
    "Attention to the source",
    "Each head's attention from later positions to the position to recall.",
    figure,
)


@register(
    "toy_source", reads={"data": attention_hooks}, truth=("source",), threshold=0.5, summary=summary, section=SECTION
)
def toy_source(view: View) -> ProbeResult:
    pattern = view.patterns("data")  # [layer, batch, head, query_pos, key_pos]
    source = view.batch("data").truth["source"]
    on_source = pattern[..., 1:, :].gather(
        -1, source.view(1, -1, 1, 1, 1).expand(*pattern.shape[:-2], pattern.shape[-2] - 1, 1)
    )
    per_head = on_source.mean(dim=(1, 3, 4))  # [layer, head]
    return ProbeResult(
        "toy_source",
        per_head.cpu(),
        {"max": float(per_head.max())},
        render_heads(view.tokens("data"), pattern, per_head),
    )
