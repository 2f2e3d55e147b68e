"""Which regression algorithm the model runs in context (Garg et al. 2022; Raventós et al. 2023): the model's mean
squared distance from each reference predictor (least squares, ridge, averaging, nearest neighbours, and with a
finite task pool the pool's Bayes predictor dmmse) on held-out prompts, over d (Raventós et al.'s Δ), at every
in-context length and averaged over them. The nearest names the stage; as `icl_strategy` does for Markov chains.

Predictors can coincide: without label noise ridge regression's posterior mean is the least-squares interpolant,
and from d examples on every consistent predictor is exact. `apart/<a>/<b>` records how far apart two
predictors are on the same prompts, and a stage names together those closer to the nearest one than the model is
to it (`least_squares≈ridge`), as the model cannot be said to follow one rather than the other.

It applies to any task whose evaluation batches carry `w` and those predictors (`linear_regression`), whatever
the model: it reads the model's output only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import torch
from mechsynth.probes import ProbeResult, Section, View, no_hooks, register

from mechsynth.util.figures import mark_drop, new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from mechsynth.probes import Timeline

# In this order: `stage` and `nearest/<i>` index the ones the task provides, and the metrics keep it.
STRATEGIES = ("least_squares", "ridge", "averaging", "nearest_neighbours", "dmmse")
REQUIRED = ("w",) + STRATEGIES[:4]


def names_in(metrics: dict[str, list[float]]) -> list[str]:
    """The predictors a timeline measured, in the probe's order."""
    return [k[3:] for k in metrics if k.startswith("to/") and k.count("/") == 1]


def group(metrics: dict[str, list[float]], names: list[str], nearest: int, i: int) -> str:
    """The stage at checkpoint i: the nearest predictor with those the model cannot tell from it (each no farther
    from it than the model is: the same predictor, where both distances are 0), joined by ≈ in the probe's order."""
    first = names[nearest]
    alike = {first} | {
        other
        for other in names
        if other != first
        and metrics[f"apart/{'/'.join(s for s in names if s in (first, other))}"][i] <= metrics[f"to/{first}"][i]
    }
    return "≈".join(s for s in names if s in alike)


def stages(tl: "Timeline") -> list[tuple[str, int]]:
    """(stage, first step) for each change of the nearest predictor (group) over training."""
    metrics = tl.metrics.get("regression_strategy", {})
    names = names_in(metrics)
    out: list[tuple[str, int]] = []
    for i, (step, stage) in enumerate(zip(tl.steps, metrics.get("stage", []))):
        name = group(metrics, names, int(stage), i)
        if not out or out[-1][0] != name:
            out.append((name, step))
    return out


def summary(tl: "Timeline", task: Any) -> list[str]:
    changes = stages(tl)
    if not changes:
        return []
    return ["regression_strategy stages: " + " -> ".join(f"{name} (step {s})" for name, s in changes)]


def figure(tl: "Timeline", task: Any) -> Optional[Figure]:
    """The model's distance from each predictor over training; below, the nearest predictor at each in-context
    length (rows) and checkpoint (columns)."""
    metrics = tl.metrics.get("regression_strategy", {})
    names = names_in(metrics)
    if not names:
        return None
    fig, axes = new_figure(2, height=3.0)
    ax = axes[0, 0]
    for i, name in enumerate(names):
        ax.plot(tl.steps, metrics[f"to/{name}"], label=name, color=f"C{i}", linestyle="--" if name == "ridge" else "-")
    mark_drop(ax, tl.loss_drop_step, label=True)
    ax.set_yscale("log")
    ax.set_ylabel("mean squared distance / d")
    ax.legend(fontsize=7, title="reference predictor", title_fontsize=7)
    steps_axis(ax)
    lengths = sorted(int(k.split("/")[1]) for k in metrics if k.startswith("nearest/"))
    grid = torch.tensor([metrics[f"nearest/{n}"] for n in lengths])  # [in-context length, checkpoint]
    ax2 = axes[1, 0]
    ax2.imshow(grid, aspect="auto", origin="lower", cmap="tab10", vmin=0, vmax=9, interpolation="nearest")
    ax2.set_ylabel("examples in context")
    ticks = list(range(0, len(tl.steps), max(1, len(tl.steps) // 10)))
    ax2.set_xticks(ticks, [str(tl.steps[i]) for i in ticks], fontsize=7)
    ax2.set_xlabel("checkpoint at training step (colour: the nearest predictor, as above)")
    return fig


def wandb_plots(tl: "Timeline", logger: Any) -> None:
    metrics = tl.metrics.get("regression_strategy", {})
    series = {name: metrics[f"to/{name}"] for name in names_in(metrics)}
    logger.line_series("plots/regression_strategy", tl.steps, series, "mean squared distance / d", "step")


SECTION = Section(
    "regression_strategy",
    "In-context regression algorithms",
    "The model's mean squared distance (over d) from each reference predictor's predictions on held-out "
    "prompts; below, which predictor is nearest at each number of examples in context. Predictors "
    "closer to each other than the model is to either share a stage (least_squares≈ridge without "
    "label noise).",
    figure,
)


@register(
    "regression_strategy",
    reads={"data": no_hooks},
    truth=REQUIRED,
    threshold=float("inf"),
    summary=summary,
    section=SECTION,
    wandb=wandb_plots,
)
def regression_strategy(view: View) -> ProbeResult:
    batch = view.batch("data")
    d = batch.truth["w"].shape[1]
    prediction = view.logits("data")[..., 0].float()
    scored = batch.mask[:, -prediction.shape[1] :]  # the x positions, one per in-context length
    strategies = [s for s in STRATEGIES if s in batch.truth]

    def per_length(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Mean over the batch of (a − b)² / d at each in-context length (examples seen: 0, 1, ...)."""
        return ((a - b).square()[scored].view(len(a), -1) / d).mean(0)

    def at_x(name: str) -> torch.Tensor:
        return batch.truth[name][:, -prediction.shape[1] :].float()

    metrics: dict[str, float] = {}
    curves = {name: per_length(prediction, at_x(name)) for name in strategies}
    error = per_length(prediction, batch.targets[:, -prediction.shape[1] :].float())
    metrics["error"] = float(error.mean())  # the normalized loss, Garg et al.'s squared error / d
    for name, curve in curves.items():
        metrics[f"to/{name}"] = float(curve.mean())
    for i, a in enumerate(strategies):  # how far apart the predictors themselves are, on the same prompts
        for b in strategies[i + 1 :]:
            metrics[f"apart/{a}/{b}"] = float(per_length(at_x(a), at_x(b)).mean())
    nearest = torch.stack([curves[s] for s in strategies]).argmin(0)  # [in-context length]
    for n in range(len(error)):
        metrics[f"error/{n}"] = float(error[n])
        metrics[f"nearest/{n}"] = float(nearest[n])
        metrics |= {f"to/{name}/{n}": float(curve[n]) for name, curve in curves.items()}
    best = min(strategies, key=lambda s: metrics[f"to/{s}"])
    metrics["stage"] = float(strategies.index(best))  # an index into `strategies`, the order of the to/ metrics
    return ProbeResult(
        "regression_strategy",
        None,
        metrics,
        {"curves": {k: v.cpu() for k, v in curves.items()}, "nearest": best, "strategies": strategies},
    )
