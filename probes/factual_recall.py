"""Factual recall (Nichani, Lee, Bietti 2024, "Understanding factual recall in transformers via associative
memories"): where a model keeps its facts, and whether it learns the answer's type before the facts.
Both read the held-out batch ("data") of a task whose truth names each sequence's relation and the answer
sets (`factual_recall`), scored at its answer position.

`fact_storage` — where the facts live. The task's metrics at the answer position (`acc`, `loss`,
`type_acc`, `type_loss`) of the model as it is, then with every MLP layer's output mean-ablated
(`_no_mlp`: `blocks.{l}.hook_mlp_out`) and with every attention layer's output mean-ablated
(`_no_attn`: `blocks.{l}.hook_attn_out`, the heads' OV writes through W_O, b_O included). Mean-ablated: the
activation is replaced by its mean over the probe's held-out batch, at each position separately (the
subject and relation stand at random positions, the answer position is always the last), as computed in
the unablated forward; all layers at once. Reading it on the paper's one-layer model:

- `acc_no_mlp` ≈ `acc`: the facts are in attention (the value/output maps send a subject to its answers;
  the relation, through its own heads, picks the right type) — the paper's attention associative memory;
- `acc_no_mlp` down to about `type_only_acc` while `type_acc_no_mlp` stays near 1: attention carries the
  relation's type, the MLP stores the facts (the paper's MLP associative memory). `type_only_acc` is the
  accuracy of the best guess from the relation alone, its most common answer in the fact table: about
  what a mean-ablated memory leaves (its mean favours the batch's most common answers);
- `acc_no_attn`: the subject and relation reach the answer position only through attention, so this
  falls in both cases; it says whether anything else reads the input, not where the facts are.

The summary calls the facts "in the MLP" when ablating it loses more than half of `acc` above
`type_only_acc`, else "in attention" (at the last checkpoint; "so far" while acc < `KNOWN`).

`answer_type` — "sequential learning". `type_acc` (the prediction is one of the right relation's D
answers) and `acc` (it is the fact), `type_loss` (-log of the probability on the right answer set), `loss`,
`fact_loss` = loss - type_loss (the mean of -log p(answer | its type): log D for a model that knows the
type and guesses the fact uniformly) and `type_gap` = type_acc - acc, high on the paper's plateau where
the model names an answer of the right type, not the fact ("hallucination"); `type_only_acc` as above,
where acc sits on that plateau. Its summary says when each was learned: the first checkpoint after which
the accuracy stays at or above `KNOWN`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

import torch
from jaxtyping import Float
from mechsynth.probes import ProbeResult, Section, View, formation_step, no_hooks, register
from torch import Tensor

from mechsynth.tasks.base import Batch, align
from mechsynth.util.figures import mark_drop, new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from mechsynth.probes import Timeline

TRUTH = ("relation", "answer_set", "facts")
KNOWN = 0.9  # the type (or the facts) count as learned once type_acc (acc) stays at or above this


# ---- the numerical core -------------------------------------------------------------------------------


def answer_metrics(logits: Float[Tensor, "batch out_pos d_vocab_out"], batch: Batch) -> dict[str, float]:
    """At the scored positions (float64): acc, loss, type_acc (the argmax is in the sequence's relation's
    answer set), type_loss (-log of the probability on that set), fact_loss = loss - type_loss, type_gap =
    type_acc - acc. Ties in the argmax go to the lowest class, as torch's argmax."""
    logits, targets, mask = align(logits, batch)
    rows = mask.nonzero()[:, 0]
    allowed = batch.truth["answer_set"][batch.truth["relation"][rows]]  # [scored, answer]
    logp = logits[mask].double().log_softmax(-1)
    pred, target = logp.argmax(-1), targets[mask]
    loss = -logp.gather(1, target[:, None])[:, 0]
    type_loss = -logp.gather(1, allowed).logsumexp(-1)
    acc, type_acc = float((pred == target).double().mean()), float((allowed == pred[:, None]).any(-1).double().mean())
    return {
        "acc": acc,
        "loss": float(loss.mean()),
        "type_acc": type_acc,
        "type_loss": float(type_loss.mean()),
        "fact_loss": float((loss - type_loss).mean()),
        "type_gap": type_acc - acc,
    }


def type_only_acc(batch: Batch) -> float:
    """The accuracy of the best guess from the relation alone: relation r's most common answer over the
    fact table (the lowest on ties). Subjects are uniform, so a model that knows only the relation does no
    better in expectation; a fact memory that is mean-ablated away leaves about this much."""
    facts, R = batch.truth["facts"], batch.truth["answer_set"].shape[0]
    counts = torch.zeros(R, batch.truth["answer_set"].numel(), device=facts.device)
    counts.scatter_add_(1, facts.T, torch.ones_like(facts.T, dtype=counts.dtype))  # [relation, d_vocab_out]
    rows = batch.mask.nonzero()[:, 0]
    guess = counts.argmax(-1)[batch.truth["relation"][rows]]
    return float((guess == batch.targets[batch.mask]).double().mean())


def mlp_outs(n_layers: int) -> list[str]:
    """Every layer's MLP output, [batch, pos, d_model] (TransformerLens's names)."""
    return [f"blocks.{layer}.hook_mlp_out" for layer in range(max(1, n_layers))]


def attn_outs(n_layers: int) -> list[str]:
    """Every layer's attention output (all heads through W_O, and b_O), [batch, pos, d_model]."""
    return [f"blocks.{layer}.hook_attn_out" for layer in range(max(1, n_layers))]


# Metric suffix -> the hooks mean-ablated, all layers at once.
ABLATIONS = {"no_mlp": mlp_outs, "no_attn": attn_outs}


def has_mlp(model: Any) -> Optional[str]:
    if getattr(getattr(model, "cfg", None), "attn_only", False):
        return f"{type(model).__name__} is attention-only; probe 'fact_storage' compares ablating its MLP and its attention"
    return None


def answers_per_type(task: Any) -> Optional[int]:
    """D, the answers of each relation, of a factual_recall task (None for a task without that field)."""
    return getattr(getattr(task, "cfg", None), "answers", None)


# ---- fact_storage -----------------------------------------------------------------------------------


def storage_summary(tl: "Timeline", task: Any) -> list[str]:
    m = tl.metrics.get("fact_storage")
    if not m or not tl.steps:
        return []
    acc, no_mlp, no_attn, guess = (m[k][-1] for k in ("acc", "acc_no_mlp", "acc_no_attn", "type_only_acc"))
    if acc <= guess:
        where = "no facts beyond the guess from the relation"
    else:  # the MLP holds them when ablating it loses more than half the accuracy above the type-only guess
        where = "facts in the MLP" if no_mlp < (acc + guess) / 2 else "facts in attention (OV)"
        where += f" (so far: acc < {KNOWN})" if acc < KNOWN else ""
    return [
        f"{'fact_storage':<16} step {tl.steps[-1]}: acc {acc:.3g}; MLP mean-ablated {no_mlp:.3g} (type "
        f"{m['type_acc_no_mlp'][-1]:.3g}), attention mean-ablated {no_attn:.3g} (type "
        f"{m['type_acc_no_attn'][-1]:.3g}); best guess from the relation alone {guess:.3g}: {where}"
    ]


STORAGE_LINES = {
    "acc": ("as trained", "black", "-"),
    "acc_no_mlp": ("MLP mean-ablated", "tab:red", "-"),
    "acc_no_attn": ("attention mean-ablated", "tab:blue", "-"),
    "type_acc_no_mlp": ("type, MLP mean-ablated", "tab:red", "--"),
    "type_acc_no_attn": ("type, attention mean-ablated", "tab:blue", "--"),
}


def storage_figure(tl: "Timeline", task: Any) -> Optional[Figure]:
    m = tl.metrics.get("fact_storage", {})
    if not set(STORAGE_LINES) <= set(m):
        return None
    fig, axes = new_figure(1, 1, height=3.2)
    ax = axes[0, 0]
    for key, (label, colour, style) in STORAGE_LINES.items():
        ax.plot(tl.steps, m[key], color=colour, linestyle=style, label=label)
    if "type_only_acc" in m:
        ax.axhline(
            m["type_only_acc"][-1],
            color="0.5",
            linewidth=0.8,
            linestyle="-.",
            label="best guess from the relation alone",
        )
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(-0.02, 1.02)
    mark_drop(ax, tl.loss_drop_step)
    steps_axis(ax)
    ax.legend(fontsize=7)
    return fig


def storage_wandb(tl: "Timeline", logger: Any) -> None:
    m = tl.metrics.get("fact_storage", {})
    if set(STORAGE_LINES) <= set(m):
        logger.line_series(
            "plots/fact_storage",
            tl.steps,
            {label: m[k] for k, (label, _, _) in STORAGE_LINES.items()},
            "accuracy with the MLP or attention mean-ablated",
            "step",
        )


STORAGE_SECTION = Section(
    "fact_storage",
    "Where the facts are stored (factual recall)",
    "Held-out accuracy at each checkpoint as trained, with every MLP output mean-ablated and with every attention "
    "output mean-ablated (each replaced by its mean over the held-out batch at each position); dashed: the share of "
    "predictions still of the right type. Accuracy that survives the MLP's ablation is stored in attention (the "
    "heads' value/output maps); accuracy that falls to chance within the type while the type survives is stored in "
    "the MLP. Ablating attention removes the subject and relation from the answer position, so it falls either way.",
    storage_figure,
)


@register(
    "fact_storage",
    reads={"data": no_hooks},
    ablations={"data": ABLATIONS},
    truth=TRUTH,
    model_check=has_mlp,
    threshold=float("inf"),
    summary=storage_summary,
    section=STORAGE_SECTION,
    wandb=storage_wandb,
)
def fact_storage(view: View) -> ProbeResult:
    """Where a model stores its facts (Nichani, Lee, Bietti 2024): held-out answer accuracy as trained, with
    every MLP output mean-ablated and with every attention output mean-ablated; facts that survive the MLP's
    ablation live in attention, facts that fall to the guess from the relation alone live in the MLP."""
    batch = view.batch("data")
    keep = ("acc", "loss", "type_acc", "type_loss")
    metrics = {k: v for k, v in answer_metrics(view.logits("data"), batch).items() if k in keep}
    for name in ABLATIONS:
        ablated = answer_metrics(view.ablated_logits("data", name), batch)
        metrics |= {f"{k}_{name}": ablated[k] for k in keep}
    metrics["type_only_acc"] = type_only_acc(batch)
    return ProbeResult("fact_storage", None, metrics)


# ---- answer_type ---------------------------------------------------------------------------------------


def type_summary(tl: "Timeline", task: Any) -> list[str]:
    m = tl.metrics.get("answer_type")
    if not m or not tl.steps:
        return []
    typed, facts = formation_step(tl.steps, m["type_acc"], KNOWN), formation_step(tl.steps, m["acc"], KNOWN)
    widest = max(range(len(tl.steps)), key=lambda i: m["type_gap"][i])
    when = lambda what, step: f"{what} at step {step}" if step is not None else f"{what}: not reached"  # noqa: E731
    return [
        f"{'answer_type':<16} {when('type known', typed)}, {when('facts', facts)} (type_acc, acc ≥ {KNOWN} from "
        f"then on); widest gap type_acc - acc {m['type_gap'][widest]:.3g} at step {tl.steps[widest]} (fact loss "
        f"{m['fact_loss'][widest]:.3g} nats)"
    ]


def type_figure(tl: "Timeline", task: Any) -> Optional[Figure]:
    m = tl.metrics.get("answer_type", {})
    if not {"type_acc", "acc", "loss", "type_loss", "fact_loss"} <= set(m):
        return None
    fig, axes = new_figure(1, 2, height=3.2, width=11)
    ax_acc, ax_loss = axes[0]
    ax_acc.plot(tl.steps, m["type_acc"], color="tab:green", label="type_acc (right answer set)")
    ax_acc.plot(tl.steps, m["acc"], color="black", label="acc (the fact)")
    ax_acc.fill_between(tl.steps, m["acc"], m["type_acc"], color="tab:green", alpha=0.15, label="type known, fact not")
    if "type_only_acc" in m:
        ax_acc.axhline(
            m["type_only_acc"][-1],
            color="0.5",
            linewidth=0.8,
            linestyle="-.",
            label="best guess from the relation alone",
        )
    ax_acc.set_ylabel("held-out accuracy")
    ax_acc.set_ylim(-0.02, 1.02)
    ax_loss.plot(tl.steps, m["loss"], color="black", label="loss")
    ax_loss.plot(tl.steps, m["type_loss"], color="tab:green", label="type loss (-log p(answer set))")
    ax_loss.plot(
        tl.steps, m["fact_loss"], color="tab:orange", linestyle="--", label="fact loss (-log p(answer | type))"
    )
    D = answers_per_type(task)
    if D and D > 1:
        ax_loss.axhline(math.log(D), color="0.5", linewidth=0.8, linestyle="-.", label=f"log D = {math.log(D):.3g}")
    ax_loss.set_ylabel("loss (nats)")
    for ax in (ax_acc, ax_loss):
        mark_drop(ax, tl.loss_drop_step)
        steps_axis(ax)
        ax.legend(fontsize=7)
    return fig


def type_wandb(tl: "Timeline", logger: Any) -> None:
    m = tl.metrics.get("answer_type", {})
    if {"type_acc", "acc", "type_gap"} <= set(m):
        logger.line_series(
            "plots/answer_type",
            tl.steps,
            {k: m[k] for k in ("type_acc", "acc", "type_gap")},
            "the answer's type before the fact",
            "step",
        )
        logger.line_series(
            "plots/answer_type_loss",
            tl.steps,
            {k: m[k] for k in ("loss", "type_loss", "fact_loss")},
            "loss, type loss and fact loss",
            "step",
        )


TYPE_SECTION = Section(
    "answer_type",
    "The answer's type before the fact (factual recall)",
    "Left: held-out accuracy (the prediction is the fact) and type accuracy (it is one of the right relation's "
    "answers) at each checkpoint; shaded: the gap, where the model names an answer of the right type but not the "
    "fact (Nichani et al.'s plateau). Right: the loss split into the type loss, -log of the probability on the right "
    "answer set, and the fact loss, -log p(answer | its type), which sits at log D while the model knows only the type.",
    type_figure,
)


@register(
    "answer_type",
    reads={"data": no_hooks},
    truth=TRUTH,
    threshold=float("inf"),
    summary=type_summary,
    section=TYPE_SECTION,
    wandb=type_wandb,
)
def answer_type(view: View) -> ProbeResult:
    """Whether a model learns the answer's type before the fact (Nichani, Lee, Bietti 2024): type accuracy (the
    prediction is one of the relation's answers) beside fact accuracy, and the loss split into a type loss and
    a fact loss; the gap between them is the plateau where it names an answer of the right type, not the fact."""
    batch = view.batch("data")
    metrics = answer_metrics(view.logits("data"), batch) | {"type_only_acc": type_only_acc(batch)}
    return ProbeResult("answer_type", None, metrics)
