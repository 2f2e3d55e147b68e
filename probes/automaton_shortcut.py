"""Automaton shortcuts (Liu et al. 2023): where the state becomes linearly decodable, what the heads
do, and how the solution holds up beyond the training length.

- per-layer linear probes: closed-form ridge regression from the residual stream after each layer to
  the state (and, for decomposable automata, to each factor), fit on half the sequences and scored
  on the other half;
- per head: attention entropy relative to uniform over the prefix, averaged over queries — near 1
  for prefix-averaging ("counting") heads, near 0 for sparse heads;
- accuracy at the training length and at the longer eval length (shortcuts are brittle).
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.probes import ProbeResult, View, head_metrics, no_hooks, register


def resid_hooks(n_layers: int) -> list[str]:
    return ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.hook_resid_post" for layer in range(n_layers)] + \
        [f"blocks.{layer}.attn.hook_pattern" for layer in range(n_layers)]


def ridge_accuracy(features: Float[Tensor, "n d"], labels: Int[Tensor, "n"], n_train: int, lam: float = 1e-2) -> float:
    """Fit one-hot(labels) ~ [features, 1] by ridge on the first n_train rows; accuracy on the rest."""
    x = torch.cat([features.double(), torch.ones(len(features), 1, dtype=torch.double, device=features.device)], 1)
    y = torch.nn.functional.one_hot(labels, int(labels.max()) + 1).double()
    xt, yt = x[:n_train], y[:n_train]
    w = torch.linalg.solve(xt.T @ xt + lam * n_train * torch.eye(x.shape[1], dtype=torch.double, device=x.device), xt.T @ yt)
    return float(((x[n_train:] @ w).argmax(-1) == labels[n_train:]).double().mean())


def prefix_entropy(pattern: Float[Tensor, "batch head query key"]) -> Float[Tensor, "head"]:
    """Entropy of each query's attention divided by log(prefix length), averaged over queries 1.."""
    ent = -(pattern * pattern.clamp_min(1e-12).log()).sum(-1)  # [batch, head, query]
    norm = torch.log(torch.arange(1, pattern.shape[-1] + 1, device=pattern.device, dtype=pattern.dtype))
    return (ent[..., 1:] / norm[1:]).mean(dim=(0, 2))


@register("automaton_shortcut", reads={"data": resid_hooks, "task:eval_long": no_hooks}, truth=("states",),
          needs_task=True, threshold=0.9, tasks=("automata",))
def automaton_shortcut(view: View) -> ProbeResult:
    n_layers, batch, cache = view.n_layers, view.batch("data"), view.cache("data")
    batch_size, T = batch.tokens.shape
    half = batch_size // 2 * T  # fit on the first half of the sequences
    metrics: dict[str, float] = {"acc": float((view.logits("data").argmax(-1) == batch.targets).float().mean())}
    targets = {"state": batch.truth["states"]} | {k.split(":", 1)[1]: v for k, v in batch.truth.items()
                                                   if k.startswith("factor:")}
    for i, hook in enumerate(["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(n_layers)]):
        feats = cache[hook].flatten(0, 1)
        for name, labels in targets.items():
            metrics[f"linear/{name}/{'embed' if i == 0 else f'L{i - 1}'}"] = ridge_accuracy(feats, labels.flatten(), half)
    per_head = torch.stack([prefix_entropy(cache[f"blocks.{l}.attn.hook_pattern"]) for l in range(n_layers)])
    metrics |= head_metrics("entropy/", per_head)
    long = view.batch("task:eval_long")
    correct = (view.logits("task:eval_long").argmax(-1) == long.targets).float().mean(0)
    metrics["acc_long"] = float(correct.mean())
    metrics["acc_beyond_train_length"] = float(correct[T:].mean()) if correct.shape[0] > T else math.nan
    layer, head = divmod(int(per_head.flatten().argmax()), view.n_heads)
    render = {"tokens": batch.tokens[0].cpu(),
              "heads": {f"L{layer}H{head}": cache[f"blocks.{layer}.attn.hook_pattern"][0, head].cpu()}}
    return ProbeResult("automaton_shortcut", per_head.cpu(), metrics, render)
