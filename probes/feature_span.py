"""How much of a task's hidden features a network's last hidden layer holds (Nichani, Damian & Lee 2023; Wang,
Nichani & Lee 2023; Fu et al. 2024): the first stage of layerwise training should leave the features p_i(x) in
the layer, so that the last layer only has to fit g*(p).

It reads the task's truth `features` [batch, feature] (hierarchical_polynomial's p_1 … p_r) on a held-out batch split
in two halves: every fit is made on the first half and scored on the second, so a layer that holds nothing of the
feature scores ≈ 0 (a little below, by the fit's noise). Per feature i:

- `span/p{i}`: the held-out R² of a ridge regression from the layer's units (standardised on the fit half) to p_i,
  its penalty chosen by leave-one-out on the fit half; `span_mean` over the features; `span/target`: the same for
  the target before noise (truth `f_star`, else the targets);
- `top/p{i}`: the held-out R² of p_i from the layer's top r principal components (r: the number of features; of the
  centred activations of the fit half): the share of p_i in what the layer mostly holds; `top_mean`. A random layer
  wide enough to span every quadratic of x (random features) already scores a high `span`: p is linearly decodable
  from it. It scores a low `top`; a layer whose units have become functions of p scores a high one;
- `units`: the layer's width.

The layer: an MLP's last hidden layer (`hook_post` with one hidden layer, `hook_hidden.{depth − 2}` deeper), or a
transformer's last residual stream at the answer's position.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Optional

import torch
from jaxtyping import Float
from torch import Tensor

from mechsynth import hooks
from mechsynth.probes import ModelHooks, ProbeResult, View, register
from mechsynth.probes._decode import r2, ridge_predict


def deepest(names: Collection[str]) -> Optional[str]:
    """The last hidden layer among hook names: the deepest `hook_hidden.N`, else `hook_post`, else the last
    `blocks.N.hook_resid_post`; None when there is none of them."""
    deep = [n for n in names if n.startswith("hook_hidden.")]
    if deep:
        return max(deep, key=lambda n: int(n.rsplit(".", 1)[1]))
    if "hook_post" in names:
        return "hook_post"
    resid = [n for n in names if n.startswith("blocks.") and n.endswith(".hook_resid_post")]
    return max(resid, key=lambda n: int(n.split(".")[1])) if resid else None


def last_hidden(model: Any) -> Optional[str]:
    """The hook of the model's last hidden layer: the deepest `hook_hidden.N` of an MLP, its `hook_post` with one
    hidden layer, or a transformer's last residual stream; None when it has none of them."""
    names = set(getattr(model, "hook_dict", {}))
    if "hook_post" in names and not hasattr(model, "W_out"):  # the prediction (the neuron's), not a hidden layer
        names.discard("hook_post")
    layers = hooks.attention_layers(model)  # a transformer: its last residual stream, not an earlier one
    last = {hooks.resid_post(layers - 1)} if layers else set()
    return deepest({n for n in names if not n.endswith(".hook_resid_post")} | last)


def has_hidden(model: Any) -> Optional[str]:
    if last_hidden(model) is None:
        return (
            f"probe 'feature_span' reads a last hidden layer (an MLP's hook_post or hook_hidden.N, a transformer's "
            f"last residual stream), which {type(model).__name__} lacks"
        )
    return None


def ridge_r2(X: Float[Tensor, "batch unit"], Y: Float[Tensor, "batch target"], fit: int) -> list[float]:
    """Held-out R² of ridge regression from X to each column of Y: fitted on the first `fit` rows, its penalty picked
    per target on them by leave-one-out (`_decode.ridge_predict`), scored on the rest."""
    pred, _ = ridge_predict(X[:fit], Y[:fit], X[fit:])
    return [r2(Y[fit:, j], pred[:, j]) for j in range(Y.shape[1])]


def top_r2(X: Float[Tensor, "batch unit"], Y: Float[Tensor, "batch target"], fit: int, k: int) -> list[float]:
    """Held-out R² of each column of Y from the top k principal components of X (of the fit half's centred rows), by
    least squares on the fit half."""
    mu = X[:fit].mean(0)
    Xc = X - mu
    V = torch.linalg.svd(Xc[:fit], full_matrices=False)[2][:k].T  # [unit, k]
    Z = torch.cat([Xc @ V, torch.ones(len(X), 1, dtype=X.dtype)], 1)
    w = torch.linalg.lstsq(Z[:fit], Y[:fit]).solution
    pred = Z[fit:] @ w
    return [r2(Y[fit:, j], pred[:, j]) for j in range(Y.shape[1])]


def summary(tl: Any, task: Any) -> list[str]:
    m = tl.metrics.get("feature_span")
    if not m:
        return []
    first, last = (lambda k: m[k][0]), (lambda k: m[k][-1])
    return [
        f"feature_span  held-out R² of the features from the last hidden layer (fit and scored on separate halves; "
        f"chance ≈ 0): ridge over all units {first('span_mean'):.2f} at step 0, {last('span_mean'):.2f} at the end; "
        f"top principal components {first('top_mean'):.2f} -> {last('top_mean'):.2f}; the target (ridge) "
        f"{first('span/target'):.2f} -> {last('span/target'):.2f}"
    ]


@register(
    "feature_span",
    reads={"data": ModelHooks(lambda model: [h] if (h := last_hidden(model)) else [])},
    truth=("features",),
    model_check=has_hidden,
    threshold=float("inf"),
    summary=summary,
)
def feature_span(view: View) -> ProbeResult:
    batch, cache = view.batch("data"), view.cache("data")
    X = cache[deepest(cache)].double()  # (the cache holds the hooks every probe read on "data": ours is the deepest)
    if X.ndim == 3:  # a residual stream [batch, pos, d_model]: the answer's position
        X = X[:, -1]
    X = X.cpu()
    features = batch.truth["features"].double().cpu()  # [batch, feature]
    target = batch.truth["f_star"] if "f_star" in batch.truth else batch.targets[:, -1]
    fit = len(X) // 2
    r = features.shape[1]
    span = ridge_r2(X, torch.cat([features, target.double().cpu()[:, None]], 1), fit)
    top = top_r2(X, features, fit, r)
    out: dict[str, float] = {}
    for i in range(r):
        out[f"span/p{i + 1}"], out[f"top/p{i + 1}"] = span[i], top[i]
    out["span_mean"], out["top_mean"] = sum(span[:r]) / r, sum(top) / r
    out["span/target"] = span[r]
    out["units"] = float(X.shape[1])
    return ProbeResult("feature_span", None, out)
