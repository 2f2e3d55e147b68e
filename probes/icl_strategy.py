"""Which in-context strategy the model follows (Edelman et al. 2024): KL from each reference
predictor (uniform, unigram, n-gram, Bayes) to the model's next-token distribution. The nearest
strategy names the stage: uniform -> unigram -> bigram.

It applies to any task whose batches carry the reference predictors as truth (markov_icl); Bayes
joins them where the task provides it (not for every prior)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from matplotlib.figure import Figure

from mechsynth.plots import mark_drop, new_figure, steps_axis
from mechsynth.probes import ProbeResult, Section, View, no_hooks, register

if TYPE_CHECKING:
    from mechsynth.timeline import Timeline

# In this order: `stage` is an index into the ones the task provides, and the metrics keep it.
STRATEGIES = ("uniform", "unigram", "ngram", "bayes")
REQUIRED = STRATEGIES[:3]


def strategy_names(tl: "Timeline") -> list[str]:
    """The reference predictors the timeline measured, in the probe's order (that of its `kl/` metrics)."""
    return [k[3:] for k in tl.metrics.get("icl_strategy", {}) if k.startswith("kl/")]


def _changes(tl: "Timeline") -> list[tuple[int, int]]:
    """(stage index, first step) for each change of the nearest strategy."""
    out: list[tuple[int, int]] = []
    for step, stage in zip(tl.steps, tl.metrics.get("icl_strategy", {}).get("stage", [])):
        if not out or out[-1][0] != int(stage):
            out.append((int(stage), step))
    return out


def stages(tl: "Timeline") -> list[tuple[str, int]]:
    """The nearest strategy as (name, first step) for each change of stage."""
    names = strategy_names(tl)
    return [(names[i] if i < len(names) else str(i), step) for i, step in _changes(tl)]


def summary(tl: "Timeline", task: Any) -> list[str]:
    changes = stages(tl)
    return ["icl_strategy     stages: " + " -> ".join(f"{name} (step {s})" for name, s in changes)] if changes else []


def strategy_kl(tl: "Timeline", task: Any) -> Optional[Figure]:
    """KL from each reference predictor to the model, with the stages shaded."""
    metrics = tl.metrics.get("icl_strategy", {})
    names = strategy_names(tl)
    if not names:
        return None
    fig, axes = new_figure(1, height=3.4)
    ax = axes[0, 0]
    # n-gram last and dashed: with a flat Dirichlet prior it is the Bayes predictor, and both stay visible.
    for i, name in sorted(enumerate(names), key=lambda x: x[1] == "ngram"):
        ax.plot(tl.steps, metrics[f"kl/{name}"], label=name, color=f"C{i}", linestyle="--" if name == "ngram" else "-")
    changes = _changes(tl)
    for j, (index, start) in enumerate(changes):
        end = changes[j + 1][1] if j + 1 < len(changes) else tl.steps[-1]
        ax.axvspan(start, end, color=f"C{index}", alpha=0.08)
    ax.set_title("nearest: " + " → ".join(f"{name} ({s})" for name, s in stages(tl)), fontsize=8)
    mark_drop(ax, tl.loss_drop_step, label=True)
    ax.set_yscale("log")
    ax.set_ylabel("KL(strategy ‖ model)")
    ax.legend(fontsize=7, title="reference predictor", title_fontsize=7)
    steps_axis(ax)
    return fig


def wandb_plots(tl: "Timeline", logger: Any) -> None:
    kl = {k[3:]: v for k, v in tl.metrics.get("icl_strategy", {}).items() if k.startswith("kl/")}
    logger.line_series("plots/icl_strategy_kl", tl.steps, kl, "KL(strategy ‖ model)", "step")


SECTION = Section("strategy_kl", "In-context strategies",
                  "KL from each reference predictor to the model's next-token distribution on held-out sequences; "
                  "the nearest names the stage (shaded).", strategy_kl)


@register("icl_strategy", reads={"data": no_hooks}, truth=REQUIRED, threshold=float("inf"), summary=summary,
          section=SECTION, wandb=wandb_plots)
def icl_strategy(view: View) -> ProbeResult:
    batch = view.batch("data")
    strategies = [s for s in STRATEGIES if s in batch.truth]
    logp = view.logits("data").float().log_softmax(-1)
    metrics, curves = {}, {}
    for name in strategies:
        q = batch.truth[name]
        kl = (q * (q.clamp_min(1e-30).log() - logp)).sum(-1)  # [batch, pos]
        curves[name] = kl.mean(0).cpu()
        metrics[f"kl/{name}"] = float(kl.mean())
    nearest = min(strategies, key=lambda s: metrics[f"kl/{s}"])
    metrics["stage"] = float(strategies.index(nearest))  # index into `strategies`, the order of the kl/ metrics
    return ProbeResult("icl_strategy", None, metrics, {"kl_per_position": curves, "nearest": nearest,
                                                       "strategies": strategies})
