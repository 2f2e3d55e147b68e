"""The helpers every figure shares (a probe's own, the report's, the benchmark's), drawn with matplotlib's object
API on an Agg canvas of its own (no pyplot state): they save to PNG and display as they are in a notebook."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

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


def held_out_loss(loss: Sequence[Optional[float]]) -> list[float]:
    """A timeline's held-out loss, NaN where a checkpoint recorded none (a gap in the line)."""
    return [math.nan if v is None else v for v in loss]


def png_base64(fig: Figure, dpi: int = 110) -> str:
    """The figure as a base64 PNG, for a data: URL."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return base64.b64encode(buf.getvalue()).decode("ascii")
