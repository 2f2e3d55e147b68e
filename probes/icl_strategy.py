"""Which in-context strategy the model follows (Edelman et al. 2024): KL from each reference
predictor (uniform, unigram, n-gram, Bayes) to the model's next-token distribution. The nearest
strategy names the stage: uniform -> unigram -> bigram.

It applies to any task whose batches carry the reference predictors as truth (markov_icl); Bayes
joins them where the task provides it (not for every prior).

Two predictors can be too alike for the model to choose between: the Bayes predictor is the bigram
count estimate smoothed by the prior, and in the demo the two are 0.0017 nats apart (symmetric KL on
the probe's batch) while the model stays 0.011 nats or more from either. Which of them is nearer then
flips with the noise of each checkpoint. `apart/<a>/<b>` records each pair's distance, and a stage
names every predictor closer to the nearest one than the model is (`ngram≈bayes`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from mechsynth.probes import ProbeResult, Section, View, no_hooks, register

from mechsynth.util.figures import mark_drop, new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from mechsynth.probes import Timeline

# In this order: `stage` is an index into the ones the task provides, and the metrics keep it.
STRATEGIES = ("uniform", "unigram", "ngram", "bayes")
REQUIRED = STRATEGIES[:3]


def strategy_names(tl: "Timeline") -> list[str]:
    """The reference predictors the timeline measured, in the probe's order (that of its `kl/` metrics)."""
    return [k[3:] for k in tl.metrics.get("icl_strategy", {}) if k.startswith("kl/")]


def alike(metrics: dict[str, list[float]], names: list[str], nearest: int, i: int) -> list[str]:
    """The strategies at checkpoint i that the model cannot tell from the nearest one, `names[nearest]`
    first: each whose distance to it (`apart/`) is below the model's distance to it. (The model's distance
    to the nearest is the smaller of its distances to the two, so this is "below the model's to either".)
    A timeline probed before `apart/` was recorded has the nearest alone."""
    first = names[nearest]
    out = [first]
    for other in names:
        pair = [s for s in names if s in (first, other)]  # the probe's order, as the metric's key has it
        gap = metrics.get(f"apart/{pair[0]}/{pair[-1]}") if other != first else None
        if gap is not None and gap[i] < metrics[f"kl/{first}"][i]:
            out.append(other)
    return out


def _changes(tl: "Timeline") -> list[tuple[str, int, int]]:
    """(stage name, index of the nearest strategy, first step) for each change of stage; a stage of
    strategies the model cannot tell apart is named by all of them (`ngram≈bayes`), in the probe's order."""
    metrics, names = tl.metrics.get("icl_strategy", {}), strategy_names(tl)
    out: list[tuple[str, int, int]] = []
    for i, (step, stage) in enumerate(zip(tl.steps, metrics.get("stage", []))):
        index = int(stage)
        group = alike(metrics, names, index, i) if index < len(names) else [str(index)]
        name = "≈".join(s for s in names if s in group) or group[0]
        if not out or out[-1][0] != name:
            out.append((name, index, step))
    return out


def stages(tl: "Timeline") -> list[tuple[str, int]]:
    """The nearest strategy (or strategies, as `ngram≈bayes`) as (name, first step) for each change of stage."""
    return [(name, step) for name, _, step in _changes(tl)]


def summary(tl: "Timeline", task: Any) -> list[str]:
    changes = stages(tl)
    if not changes:
        return []
    merged = next((name for name, _ in changes if "≈" in name), None)
    why = f"; {merged}: closer to each other than the model is to either" if merged else ""
    return ["icl_strategy     stages: " + " -> ".join(f"{name} (step {s})" for name, s in changes) + why]


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
    for j, (_, index, start) in enumerate(changes):
        end = changes[j + 1][2] if j + 1 < len(changes) else tl.steps[-1]
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


SECTION = Section(
    "strategy_kl",
    "In-context strategies",
    "KL from each reference predictor to the model's next-token distribution on held-out sequences; "
    "the nearest names the stage (shaded). Predictors closer to each other than the model is to "
    "either share a stage (ngram≈bayes): which of them is nearer is noise.",
    strategy_kl,
)


@register(
    "icl_strategy",
    reads={"data": no_hooks},
    truth=REQUIRED,
    threshold=float("inf"),
    summary=summary,
    section=SECTION,
    wandb=wandb_plots,
)
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
    for i, a in enumerate(strategies):  # how far apart the predictors are, on the same positions (symmetric KL)
        for b in strategies[i + 1 :]:
            p, q = batch.truth[a].clamp_min(1e-30), batch.truth[b].clamp_min(1e-30)
            metrics[f"apart/{a}/{b}"] = float(((p - q) * (p.log() - q.log())).sum(-1).mean() / 2)
    nearest = min(strategies, key=lambda s: metrics[f"kl/{s}"])
    metrics["stage"] = float(strategies.index(nearest))  # index into `strategies`, the order of the kl/ metrics
    return ProbeResult(
        "icl_strategy", None, metrics, {"kl_per_position": curves, "nearest": nearest, "strategies": strategies}
    )
