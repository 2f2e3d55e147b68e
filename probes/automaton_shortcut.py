"""Automaton shortcuts (Liu et al. 2023): where the state becomes linearly decodable, what the heads
do, and how the solution holds up beyond the training length.

- per-layer linear probes: closed-form ridge regression from the residual stream after each layer to
  the state (and, for decomposable automata, to each factor), fit on half the sequences and scored
  on the other half;
- per head: attention entropy relative to uniform over the prefix, averaged over queries — near 1
  for prefix-averaging ("counting") heads, near 0 for sparse heads;
- accuracy at the training length and at the longer eval length (shortcuts are brittle), and the same
  per-layer decoding at the positions beyond the training length (`linear_beyond/...`): whether the
  state is still there when the output is wrong.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

import torch
from jaxtyping import Float, Int
from mechsynth.probes import ProbeResult, Section, View, head_metrics, register
from torch import Tensor

from mechsynth import hooks
from mechsynth.util.figures import mark_drop, new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from mechsynth.probes import Timeline


def resid_hooks(n_layers: int) -> list[str]:
    return hooks.residual_stream(n_layers) + hooks.attention_patterns(n_layers)


def ridge_accuracy(
    features: Float[Tensor, "example d_model"], labels: Int[Tensor, "example"], n_train: int, lam: float = 1e-2
) -> float:
    """Fit one-hot(labels) ~ [features, 1] by ridge on the first n_train rows; accuracy on the rest."""
    x = torch.cat([features.double(), torch.ones(len(features), 1, dtype=torch.double, device=features.device)], 1)
    y = torch.nn.functional.one_hot(labels, int(labels.max()) + 1).double()
    xt, yt = x[:n_train], y[:n_train]
    w = torch.linalg.solve(
        xt.T @ xt + lam * n_train * torch.eye(x.shape[1], dtype=torch.double, device=x.device), xt.T @ yt
    )
    return float(((x[n_train:] @ w).argmax(-1) == labels[n_train:]).double().mean())


def prefix_entropy(pattern: Float[Tensor, "batch head_index query_pos key_pos"]) -> Float[Tensor, "head_index"]:
    """Entropy of each query's attention divided by log(prefix length), averaged over queries 1.."""
    ent = -(pattern * pattern.clamp_min(1e-12).log()).sum(-1)  # [batch, head_index, query_pos]
    norm = torch.log(torch.arange(1, pattern.shape[-1] + 1, device=pattern.device, dtype=pattern.dtype))
    return (ent[..., 1:] / norm[1:]).mean(dim=(0, 2))


def linear_probes(tl: "Timeline", task: Any) -> Optional[Figure]:
    """Linear decoding accuracy per layer (at three checkpoints) and over training, beside accuracy at
    and beyond the training length."""
    metrics = tl.metrics.get("automaton_shortcut", {})
    keys = [k for k in metrics if k.startswith("linear/")]
    if not keys:
        return None
    targets = list(dict.fromkeys(k.split("/")[1] for k in keys))
    depths = list(dict.fromkeys(k.split("/")[2] for k in keys))  # embed, L0, L1, ... in probe order
    fig, axes = new_figure(1, 3, height=3.2, width=12)
    ax_depth, ax_time, ax_acc = axes[0]
    picks = sorted(
        {
            0,
            tl.steps.index(tl.loss_drop_step) if tl.loss_drop_step in tl.steps else len(tl.steps) // 2,
            len(tl.steps) - 1,
        }
    )
    for t, target in enumerate(targets):
        for j, i in enumerate(picks):
            ax_depth.plot(
                depths,
                [metrics[f"linear/{target}/{d}"][i] for d in depths],
                marker="o",
                color=f"C{t}",
                alpha=0.35 + 0.65 * j / max(1, len(picks) - 1),
                label=f"{target}, step {tl.steps[i]}",
            )
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
        mark_drop(ax, tl.loss_drop_step)
        steps_axis(ax)
    return fig


SECTION = Section(
    "linear_probes",
    "Linear probes per layer",
    "Ridge-regression decoding of the automaton state (and its factors) from the residual stream after "
    "each layer, on held-out sequences; right: the model's accuracy at the training length and beyond it.",
    linear_probes,
)


def decode_layers(
    cache: dict[str, Tensor], n_layers: int, targets: dict[str, Int[Tensor, "batch pos"]], prefix: str, start: int = 0
) -> dict[str, float]:
    """`prefix/<target>/<embed|L0|L1...>`: ridge decoding of each target from the residual stream after each
    layer at positions start.., fit on the first half of the sequences and scored on the rest."""
    out = {}
    for place, hook in zip(hooks.residual_places(n_layers), hooks.residual_stream(n_layers)):
        feats = cache[hook][:, start:]
        for name, labels in targets.items():
            out[f"{prefix}/{name}/{place}"] = ridge_accuracy(
                feats.flatten(0, 1), labels[:, start:].flatten(), feats.shape[0] // 2 * feats.shape[1]
            )
    return out


def decoding_targets(truth: dict[str, Tensor]) -> dict[str, Tensor]:
    return {"state": truth["states"]} | {k.split(":", 1)[1]: v for k, v in truth.items() if k.startswith("factor:")}


@register(
    "automaton_shortcut",
    reads={"data": resid_hooks, "task:eval_long": hooks.residual_stream},
    truth=("states",),
    threshold=0.9,
    section=SECTION,
)
def automaton_shortcut(view: View) -> ProbeResult:
    n_layers, batch, cache = view.n_layers, view.batch("data"), view.cache("data")
    T = batch.tokens.shape[1]
    metrics: dict[str, float] = {"acc": float((view.logits("data").argmax(-1) == batch.targets).float().mean())}
    metrics |= decode_layers(cache, n_layers, decoding_targets(batch.truth), "linear")
    per_head = torch.stack([prefix_entropy(cache[h]) for h in hooks.attention_patterns(n_layers)])
    metrics |= head_metrics("entropy/", per_head)
    long = view.batch("task:eval_long")
    correct = (view.logits("task:eval_long").argmax(-1) == long.targets).float().mean(0)
    metrics["acc_long"] = float(correct.mean())
    metrics["acc_beyond_train_length"] = float(correct[T:].mean()) if correct.shape[0] > T else math.nan
    if correct.shape[0] > T:
        metrics |= decode_layers(
            view.cache("task:eval_long"), n_layers, decoding_targets(long.truth), "linear_beyond", T
        )
    layer, head = divmod(int(per_head.flatten().argmax()), view.n_heads)
    render = {
        "tokens": batch.tokens[0].cpu(),
        "heads": {hooks.head_label(layer, head): cache[hooks.attn_pattern(layer)][0, head].cpu()},
    }
    return ProbeResult("automaton_shortcut", per_head.cpu(), metrics, render)
