"""Sharpness: the top eigenvalue of the training loss's Hessian at each checkpoint, beside the stability
limit 2/η of gradient descent (Cohen et al. 2021, "Gradient descent on neural networks typically occurs
at the edge of stability"; Damian, Nichani & Lee's self-stabilization in seed 004). Under full-batch GD
with step size η, the loss can only keep decreasing along the top eigenvector while λ_max < 2/η:
progressive sharpening drives λ_max up to 2/η, where it hovers while the loss falls non-monotonically.

λ_max comes from Lanczos iterations on Hessian-vector products (torch.func: forward-over-reverse), on a
fixed batch of the training split (the run's whole training set when it trained on a fixed one)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import torch
from jaxtyping import Float
from mechsynth.probes import ProbeResult, Section, View, no_hooks, register
from mechsynth.probes._landscape import device_of, finite, loss, loss_kind, training_batch
from torch import Tensor, nn
from torch.func import functional_call, grad, jvp
from torch.nn.attention import SDPBackend, sdpa_kernel

from mechsynth.config import check, check_fields, doc, validates_itself
from mechsynth.tasks.base import Batch, LossKind
from mechsynth.util.figures import new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@validates_itself
@dataclass(frozen=True)
class SharpnessOptions:
    batch: int = doc(
        "sequences of the training split the Hessian is taken on (one fixed batch); a run trained on a "
        "fixed set uses the whole set",
        256,
        lo=1,
        hi=2**16,
        why="the batch goes through one forward",
    )
    iterations: int = doc("Lanczos iterations (Hessian-vector products) per checkpoint", 20, lo=2, hi=1000)
    checkpoints: int = doc(
        "checkpoints to measure, log-spaced (first and last included); 0 = every one", 32, lo=0, hi=100_000
    )
    lr: Optional[float] = doc("η of the stability line 2/η; unset = the run's train.lr", None)
    seed: int = doc("seed of the batch and of the Lanczos start vector", 0, lo=0, hi=2**31)

    def __post_init__(self) -> None:
        check_fields(self)
        check(self.lr is None or self.lr > 0, "lr", f"must be a positive number or unset, got {self.lr}")


def loss_at(model: nn.Module, batch: Batch, kind: LossKind = "cross_entropy"):
    """The training loss (of `kind`, the task's) as a function of the trainable parameters (a dict by name), for torch.func."""
    buffers = dict(model.named_buffers())
    frozen = {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}

    def f(params: dict[str, Tensor]) -> Tensor:
        return loss(lambda tokens: functional_call(model, (params, frozen, buffers), (tokens,)), batch, kind)

    return f


def hvp(f, params: dict[str, Tensor], v: dict[str, Tensor]) -> dict[str, Tensor]:
    """H v for the Hessian H of f at params: forward-mode differentiation of the gradient. Attention runs
    as plain matrix products: the fused kernels have no forward-mode derivative."""
    with sdpa_kernel(SDPBackend.MATH):
        return jvp(grad(f), (params,), (v,))[1]


def lanczos(
    matvec, n: int, iterations: int, generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> Float[Tensor, "k"]:
    """Ritz values (ascending) of a symmetric operator on R^n after `iterations` Lanczos steps with full
    reorthogonalization; the largest converges first to the largest eigenvalue."""
    k = min(iterations, n)
    q = torch.randn(n, generator=generator, dtype=dtype)
    basis = [q / q.norm()]
    alpha, beta = [], []
    for j in range(k):
        w = matvec(basis[j]).to(dtype)
        alpha.append(torch.dot(w, basis[j]))
        Q = torch.stack(basis)
        w = w - Q.T @ (Q @ w)
        w = w - Q.T @ (Q @ w)  # twice: one pass loses orthogonality in float32 products
        b = w.norm()
        if j == k - 1 or b < 1e-10 * max(1.0, float(alpha[-1].abs())):
            break
        beta.append(b)
        basis.append(w / b)
    T = torch.diag(torch.stack(alpha))
    if beta:
        off = torch.stack(beta[: len(alpha) - 1])
        T = T + torch.diag(off, 1) + torch.diag(off, -1)
    return torch.linalg.eigvalsh(T)


def top_eigenvalue(
    model: nn.Module, batch: Batch, iterations: int = 20, seed: int = 0, kind: LossKind = "cross_entropy"
) -> tuple[float, float]:
    """(λ_max of the training loss's Hessian on `batch` over the trainable parameters, the loss there)."""
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    names, shapes = list(params), [p.shape for p in params.values()]
    sizes = [p.numel() for p in params.values()]
    dtype = next(iter(params.values())).dtype
    f = loss_at(model, batch, kind)

    def matvec(x: Tensor) -> Tensor:
        v = {n: c.view(s).to(dtype) for n, c, s in zip(names, x.to(device_of(model)).split(sizes), shapes)}
        with torch.enable_grad():
            out = hvp(f, params, v)
        return torch.cat([out[n].reshape(-1) for n in names]).double().cpu()

    ritz = lanczos(matvec, sum(sizes), iterations, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        value = float(f(params))
    return float(ritz[-1]), value


def stability_limit(lr: Optional[float], train: Any) -> float:
    """2/η for gradient descent, (2 + 2μ)/η with heavy-ball momentum μ; NaN for adaptive optimizers
    (their limit is on the preconditioned Hessian) or when η is unknown."""
    if lr is None and train is not None:
        lr = train.lr
    if lr is None or lr <= 0 or (train is not None and train.optimizer != "sgd"):
        return math.nan
    return (2 + 2 * (train.momentum if train is not None else 0.0)) / lr


def summary(tl, task: Any) -> list[str]:
    m = tl.metrics.get("sharpness", {})
    steps, top = finite(tl.steps, m.get("lambda_max", []))
    if not steps:
        return []
    peak = max(range(len(top)), key=top.__getitem__)
    line = f"sharpness        λ_max {top[0]:.3g} at step {steps[0]} → {top[-1]:.3g} at {steps[-1]} (peak {top[peak]:.3g} at {steps[peak]})"
    _, limit = finite(tl.steps, m.get("stability_limit", []))
    if limit:
        above = [s for s, v in zip(steps, top) if v >= 0.9 * limit[0]]
        line += f"; 2/η = {limit[0]:.3g}" + (
            f", reached (≥ 90%) first at step {above[0]}" if above else ", never reached"
        )
    return [line]


def figure(tl, task: Any) -> Optional[Figure]:
    m = tl.metrics.get("sharpness", {})
    steps, top = finite(tl.steps, m.get("lambda_max", []))
    if not steps:
        return None
    fig, axes = new_figure(2, sharex=True)
    ax = axes[0, 0]
    ax.plot(steps, top, "o-", color="tab:red", markersize=3, label="λ_max (Hessian of the training loss)")
    _, limit = finite(tl.steps, m.get("stability_limit", []))
    if limit:
        ax.axhline(limit[0], color="black", linestyle="--", linewidth=1, label=f"2/η = {limit[0]:.3g}")
    ax.set_ylabel("sharpness")
    ax.legend(fontsize=7)
    ax2 = axes[1, 0]
    s2, train_loss = finite(tl.steps, m.get("train_loss", []))
    ax2.plot(s2, train_loss, "o-", color="tab:blue", markersize=3)
    ax2.set_ylabel("training loss\n(on the same batch)")
    for ax_ in (ax, ax2):
        steps_axis(ax_, label=ax_ is ax2)
    return fig


def wandb_plots(tl, logger: Any) -> None:
    m = tl.metrics.get("sharpness", {})
    steps, top = finite(tl.steps, m.get("lambda_max", []))
    if steps:
        _, limit = finite(tl.steps, m.get("stability_limit", []))
        series = {"lambda_max": top} | ({"2/lr": [limit[0]] * len(steps)} if limit else {})
        logger.line_series("plots/sharpness", steps, series, "sharpness: top Hessian eigenvalue", "step")


SECTION = Section(
    "sharpness",
    "Sharpness",
    "The top eigenvalue of the training loss's Hessian (Lanczos on Hessian-vector "
    "products over a fixed training batch) at the measured checkpoints, beside the stability limit 2/η of "
    "gradient descent where the run used plain SGD; below, the loss on the same batch.",
    figure,
)


@register(
    "sharpness",
    reads={"task:train": no_hooks},
    threshold=math.inf,
    costly=True,
    options=SharpnessOptions,
    summary=summary,
    section=SECTION,
    wandb=wandb_plots,
)
def sharpness(view: View) -> ProbeResult:
    o: SharpnessOptions = view.options
    batch = training_batch(view, o.batch, o.seed).to(device_of(view.model))
    top, value = top_eigenvalue(view.model, batch, o.iterations, o.seed, loss_kind(view))
    limit = stability_limit(o.lr, view.train)
    return ProbeResult(
        "sharpness",
        None,
        {
            "lambda_max": top,
            "stability_limit": limit,
            "lambda_over_limit": top / limit if math.isfinite(limit) else math.nan,
            "train_loss": value,
        },
    )
