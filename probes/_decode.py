"""Held-out linear decoding, shared by the probes that ask what a layer holds (latents, feature_span): ridge
regression fitted on one part of the rows with its penalty picked on that part alone (closed-form leave-one-out),
scored on rows it never saw."""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor

# Ridge penalties tried, relative to the fit's size (the units are standardised, so XᵀX/n has unit diagonal).
PENALTIES = tuple(10.0**k for k in range(-6, 3))


def ridge_predict(
    X_fit: Float[Tensor, "row unit"],
    Y_fit: Float[Tensor, "row target"],
    X_test: Float[Tensor, "test unit"],
    per_target: bool = True,
) -> tuple[Float[Tensor, "test target"], list[float]]:
    """Ridge regression from X to Y fitted on the fit rows (units standardised there, an intercept), predicting the
    test rows; with the penalty (relative to the fit's size) that minimises the leave-one-out error on the fit rows,
    per target or, `per_target=False`, one for all targets together (a one-hot code, a vector). One SVD serves every
    target and penalty. Returns the predictions and the penalties picked."""
    mu, sd = X_fit.mean(0), X_fit.std(0, unbiased=False)
    keep = sd > 1e-12 * sd.max().clamp_min(1e-300)  # dead units carry nothing (and would divide by 0)
    Xf, Xt = (X_fit[:, keep] - mu[keep]) / sd[keep], (X_test[:, keep] - mu[keep]) / sd[keep]
    ym = Y_fit.mean(0)
    Yf = Y_fit - ym
    if Xf.shape[1] == 0:
        return ym.expand(len(X_test), -1).clone(), [0.0] * (Y_fit.shape[1] if per_target else 1)
    U, S, Vh = torch.linalg.svd(Xf, full_matrices=False)
    UY = U.T @ Yf
    n = len(Xf)
    if per_target:
        lams = [
            min(PENALTIES, key=lambda lam: loo_error(U, S, Yf[:, [j]], UY[:, [j]], lam * n)) for j in range(Yf.shape[1])
        ]
    else:
        lams = [min(PENALTIES, key=lambda lam: loo_error(U, S, Yf, UY, lam * n))] * Yf.shape[1]
    shrink = torch.stack([S / (S**2 + lam * n) for lam in lams], 1)  # [k, target]
    pred = Xt @ (Vh.T @ (shrink * UY)) + ym
    return pred, lams if per_target else lams[:1]


def loo_error(
    U: Float[Tensor, "row k"],
    S: Float[Tensor, "k"],
    Y: Float[Tensor, "row target"],
    UY: Float[Tensor, "k target"],
    lam: float,
) -> float:
    """The mean squared leave-one-out residual of ridge regression with penalty `lam` (summed over targets), from
    the SVD X = U S Vᵀ: (y − ŷ)_i / (1 − H_ii), H = U diag(S²/(S² + lam)) Uᵀ."""
    shrink = S**2 / (S**2 + lam)
    leverage = (1 - (U**2) @ shrink).clamp_min(1e-12)
    return float(((Y - U @ (shrink[:, None] * UY)) / leverage[:, None]).square().sum(1).mean())


def r2(y: Float[Tensor, "row *target"], pred: Float[Tensor, "row *target"]) -> float:
    """1 − residual / total sum of squares, summed over the targets (0 where y does not vary)."""
    total = (y - y.mean(0)).square().sum()
    return float(1 - (y - pred).square().sum() / total) if total > 0 else 0.0


def decode_categorical(
    X_fit: Float[Tensor, "row unit"],
    y_fit: Int[Tensor, "row"],
    X_test: Float[Tensor, "test unit"],
    y_test: Int[Tensor, "test"],
    n_values: int,
) -> tuple[float, float, float]:
    """(held-out accuracy of ridge on the one-hot code, chance, penalty): chance is what always answering the fit
    rows' most common value scores on the test rows."""
    pred, (lam,) = ridge_predict(X_fit, torch.nn.functional.one_hot(y_fit, n_values).to(X_fit.dtype), X_test, False)
    chance = float((y_test == torch.bincount(y_fit, minlength=n_values).argmax()).double().mean())
    return float((pred.argmax(-1) == y_test).double().mean()), chance, lam


def decode_real(
    X_fit: Float[Tensor, "row unit"],
    y_fit: Float[Tensor, "row target"],
    X_test: Float[Tensor, "test unit"],
    y_test: Float[Tensor, "test target"],
) -> tuple[float, float, float]:
    """(held-out R² over the targets, chance 0, penalty): a real latent is one target, a vector its coordinates."""
    pred, (lam,) = ridge_predict(X_fit, y_fit, X_test, False)
    return r2(y_test, pred), 0.0, lam
