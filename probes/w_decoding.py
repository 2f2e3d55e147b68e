"""Is each sequence's weight vector w linearly readable from the residual stream (in-context linear regression)?

Closed-form ridge regression from the residual stream after each layer (`embed`: before the first) to w, fit on the
first half of the held-out sequences and scored on the other half by R² (1 − residual / total sum of squares over
the coordinates of w): ~1 where the stream holds w linearly, ~0 (or below) where it holds nothing of it. Rows are
the positions that have seen at least d examples (the task's truth `w_defined`) — from there on the context
determines w (up to label noise) — at the y tokens (`r2/<place>`: the stream right after an example is read) and at
the x tokens (`r2_x/<place>`: where the model answers the next query); sequences shorter than d give their last y
and x. `r2` is the last layer's, at the y tokens. A model that regresses without forming w (averaging similar x's)
scores low although its predictions may be good; with label noise even the posterior mean of w, and so a perfect
reader, falls short of 1.

The fit has as many distinct targets as training sequences (half the probe's batch): `--batch-size` sets how
firmly a small R² can be told from 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import torch
from jaxtyping import Float
from mechsynth.probes import ProbeResult, Section, View, register
from torch import Tensor

from mechsynth import hooks
from mechsynth.util.figures import mark_drop, new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from mechsynth.probes import Timeline

RIDGE = 1e-3  # λ per training row on standardized features: a guard against collinear features, not a prior


def ridge_r2(
    train_x: Float[Tensor, "row feature"],
    train_y: Float[Tensor, "row d"],
    test_x: Float[Tensor, "row feature"],
    test_y: Float[Tensor, "row d"],
    lam: float = RIDGE,
) -> float:
    """Held-out R² of ridge regression y ~ [x, 1] (features standardized on the training rows), in float64."""
    mean, std = train_x.mean(0), train_x.std(0).clamp_min(1e-8)
    a = torch.cat([(train_x - mean) / std, torch.ones(len(train_x), 1, dtype=train_x.dtype, device=train_x.device)], 1)
    b = torch.cat([(test_x - mean) / std, torch.ones(len(test_x), 1, dtype=test_x.dtype, device=test_x.device)], 1)
    eye = torch.eye(a.shape[1], dtype=a.dtype, device=a.device)
    eye[-1, -1] = 0  # the intercept is not shrunk
    coef = torch.linalg.solve(a.T @ a + lam * len(a) * eye, a.T @ train_y)
    residual = (test_y - b @ coef).square().sum()
    total = (test_y - test_y.mean(0)).square().sum().clamp_min(1e-12)
    return float(1 - residual / total)


def decode(
    cache: dict[str, Tensor], n_layers: int, w: Float[Tensor, "batch d"], positions: list[int]
) -> dict[str, float]:
    """R² of decoding w from the residual stream at `positions`, at each place, fit on the first half of the batch."""
    half = len(w) // 2
    out = {}
    for place, hook in zip(hooks.residual_places(n_layers), hooks.residual_stream(n_layers)):
        feats = cache[hook][:, positions].double()  # [batch, row, d_model]
        target = w.double()[:, None].expand(-1, len(positions), -1)
        out[place] = ridge_r2(
            feats[:half].flatten(0, 1),
            target[:half].flatten(0, 1),
            feats[half:].flatten(0, 1),
            target[half:].flatten(0, 1),
        )
    return out


def figure(tl: "Timeline", task: Any) -> Optional[Figure]:
    metrics = tl.metrics.get("w_decoding", {})
    keys = [k for k in metrics if k.startswith("r2/")]
    if not keys:
        return None
    fig, axes = new_figure(1, height=3.0)
    ax = axes[0, 0]
    for i, key in enumerate(keys):
        ax.plot(tl.steps, metrics[key], color=f"C{i}", label=f"after {key[3:]} (y tokens)")
        x_key = "r2_x/" + key[3:]
        if x_key in metrics:
            ax.plot(tl.steps, metrics[x_key], color=f"C{i}", linestyle=":", alpha=0.7)
    mark_drop(ax, tl.loss_drop_step, label=True)
    ax.set_ylim(min(-0.05, ax.get_ylim()[0]), 1.02)
    ax.set_ylabel("held-out R² of w")
    ax.legend(fontsize=7, title="residual stream (dotted: at x tokens)", title_fontsize=7)
    steps_axis(ax)
    return fig


SECTION = Section(
    "w_decoding",
    "Linear decoding of w",
    "Held-out R² of ridge regression from the residual stream after each layer to the sequence's weight "
    "vector w, at the tokens that have seen at least d examples (solid: y tokens, dotted: x tokens).",
    figure,
)


@register(
    "w_decoding",
    reads={"data": hooks.residual_stream},
    truth=("w", "w_defined"),
    threshold=float("inf"),
    section=SECTION,
)
def w_decoding(view: View) -> ProbeResult:
    batch, cache = view.batch("data"), view.cache("data")
    w = batch.truth["w"].to(cache[hooks.resid_pre(0)].device)
    # the task's own positions from which the context determines w, the same in every sequence: x_1, y_1, ... puts
    # the y tokens at odd positions
    defined = batch.truth["w_defined"][0].nonzero().flatten().tolist()
    metrics: dict[str, float] = {}
    for parity, prefix in ((1, "r2"), (0, "r2_x")):
        positions = [p for p in defined if p % 2 == parity]
        metrics |= {f"{prefix}/{place}": v for place, v in decode(cache, view.n_layers, w, positions).items()}
    metrics["r2"] = metrics[f"r2/{hooks.residual_places(view.n_layers)[-1]}"]
    return ProbeResult("w_decoding", None, metrics)
