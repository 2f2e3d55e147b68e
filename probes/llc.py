"""The local learning coefficient (LLC) of each checkpoint, estimated with devinterp's SGLD sampler on the
task's own training loss: λ̂ = nβ · (E_w[L(w)] − L(w*)), the expectation over a tempered posterior
localized at the checkpoint's weights w* (Lau et al. 2023). Developmental interpretability (Hoogland et
al. 2024, "The developmental landscape of in-context learning", cited in seed 001) reads stages of
training off its plateaus and turns, with no circuit in mind; here it sits on the same time axis as
the circuits the other probes find.

devinterp is an optional extra (`pip install 'mechsynth[devinterp]'`); this file is the one place that
imports it. SGLD costs chains × draws forward and backward passes per checkpoint, so the probe visits a
log-spaced subset of them (`checkpoints`). Diagnostics a reader needs to trust the number: each chain's
loss trace (in tenths of its draws), the spread across chains, and a warning where a chain diverged, has
not settled, or the estimate is negative (the checkpoint is not near a local minimum, or ε is too big)."""

from __future__ import annotations

import functools
import math
import tempfile
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional
from unittest import mock

import torch
import tqdm
from mechsynth.probes import ProbeResult, Section, View, no_hooks, register
from mechsynth.probes._landscape import device_of, finite, loss, loss_kind, training_batch
from torch import Tensor, nn

from mechsynth.config import check, check_fields, doc, validates_itself
from mechsynth.tasks.base import Batch, LossKind
from mechsynth.util.figures import new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TRACE_POINTS = 10  # each chain's loss trace is kept as the means of this many equal spans of its draws


@validates_itself
@dataclass(frozen=True)
class LLCOptions:
    lr: float = doc("SGLD step size ε", 1e-3)
    n_beta: float = doc("inverse temperature nβ: the loss is scaled by it in the tempered posterior", 100.0)
    localization: float = doc("γ, the strength of the pull back to the checkpoint's weights", 100.0)
    chains: int = doc("independent SGLD chains (their spread is the estimate's uncertainty)", 4, lo=1, hi=1024)
    draws: int = doc(
        "SGLD steps per chain (devinterp averages the loss over all of them)", 200, lo=TRACE_POINTS, hi=10**6
    )
    batch: int = doc("sequences per SGLD step", 32, lo=1, hi=2**16)
    pool: int = doc(
        "training sequences the SGLD batches are drawn from (a fixed pool; a run trained on a fixed set "
        "uses the whole set)",
        1024,
        lo=1,
        hi=2**20,
        why="the pool is held in memory",
    )
    checkpoints: int = doc(
        "checkpoints to estimate at, log-spaced (first and last included); 0 = every one", 16, lo=0, hi=100_000
    )
    seed: int = doc("seed of the pool and of the chains", 0, lo=0, hi=2**31)

    def __post_init__(self) -> None:
        check_fields(self)
        for name in ("lr", "n_beta"):
            check(getattr(self, name) > 0, name, f"must be a positive number, got {getattr(self, name)}")
        check(self.localization >= 0, "localization", f"must be ≥ 0, got {self.localization}")


@dataclass
class Estimate:
    per_chain: list[float]
    init_loss: float  # L(w*) on the pool
    traces: list[list[float]]  # per chain: the mean loss over each tenth of its draws
    failed: int  # chains devinterp stopped (a non-finite loss)

    @property
    def kept(self) -> list[float]:
        """The estimates of the chains whose loss stayed finite (devinterp returns a huge number for the others)."""
        return [v for v, t in zip(self.per_chain, self.traces) if all(map(math.isfinite, t))]

    @property
    def llc(self) -> float:
        """The mean over the chains that did not diverge; NaN when none is left."""
        return sum(self.kept) / len(self.kept) if self.kept else math.nan


def available() -> Optional[str]:
    """None when devinterp can be imported; else why the llc probe cannot run."""
    try:
        import devinterp.slt.llc  # noqa: F401
    except ImportError as e:
        return f"probe 'llc' needs devinterp ({e}); install it with pip install 'mechsynth[devinterp]'"
    return None


class _Sampled(nn.Module):
    """The model as devinterp's sampler should see it: devinterp takes anything with `cfg.n_heads` for a
    TransformerLens HookedTransformer and calls its `.to(..., print_details=...)`, which ours lack."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor) -> Tensor:
        return self.model(tokens)


def pack(data: Batch) -> Tensor:
    """One row per sequence, as devinterp's `input_ids`: its tokens, then its targets (-1 where unscored); for
    continuous inputs (float vectors) its flattened vectors, its real targets, then its mask as 0/1."""
    if data.tokens.is_floating_point():
        return torch.cat([data.tokens.flatten(1), data.targets, data.mask.to(data.tokens.dtype)], 1).cpu()
    return torch.cat([data.tokens, torch.where(data.mask, data.targets, -1)], 1).cpu()


def unpack(rows: Tensor, like: Batch) -> Batch:
    """The batch `pack` made `rows` of (`like`: a batch of the same layout, for the shapes)."""
    pos = like.tokens.shape[1]
    if like.tokens.is_floating_point():
        width = like.tokens[0].numel()
        return Batch(
            rows[:, :width].reshape(-1, *like.tokens.shape[1:]),
            rows[:, width : width + pos],
            rows[:, width + pos :] > 0.5,
        )
    tokens, targets = rows[:, :pos], rows[:, pos:]
    return Batch(tokens, targets.clamp(min=0), targets >= 0)


def estimate(model: nn.Module, data: Batch, o: LLCOptions, kind: LossKind = "cross_entropy") -> Estimate:
    """The LLC of `model` at its current weights on the training loss (of `kind`, the task's) over `data`
    (tokens, targets, mask), through devinterp. devinterp's loss is per token of an `input_ids` row: each row
    here is a sequence (`pack`), and the loss function returns the batch's masked loss at every position, so
    devinterp's mean is the trainer's loss and so is its gradient."""
    from datasets import Dataset
    from devinterp.slt import sampler
    from devinterp.slt.llc import llc

    rows = pack(data)

    def loss_fn(sampled: nn.Module, ids: Tensor) -> Tensor:
        value = loss(sampled, unpack(ids, data), kind)
        return value.expand(ids.shape[0], ids.shape[1] - 1)

    batch = min(o.batch, len(rows))
    dataset = Dataset.from_dict({"input_ids": rows.numpy()}).with_format("torch")
    # devinterp draws a progress bar per chain; a run has chains × checkpoints of them.
    quiet = mock.patch.object(sampler, "trange", functools.partial(tqdm.trange, disable=True))
    with (
        tempfile.TemporaryDirectory(prefix="mechsynth-llc-") as tmp,
        warnings.catch_warnings(record=True) as caught,
        quiet,
    ):
        warnings.simplefilter("always")
        out = llc(
            _Sampled(model),
            dataset,
            {},
            lr=o.lr,
            n_beta=o.n_beta,
            localization=o.localization,
            num_chains=o.chains,
            num_draws=o.draws,
            batch_size=batch,
            num_init_loss_batches=max(1, len(rows) // batch),
            init_seed=o.seed,
            output_path=f"{tmp}/samples.zarr",
            loss_fn=loss_fn,
            device=str(device_of(model)),
        )
        per_chain = [float(v) for v in out.llc_per_chain.values]
        trace = torch.as_tensor(out.loss_trace.values, dtype=torch.float64)  # [chain, step]
        init_loss = float(out.init_loss)
    failed = sum("Chain failed" in str(w.message) for w in caught)
    spans = trace[:, : trace.shape[1] // TRACE_POINTS * TRACE_POINTS].unflatten(1, (TRACE_POINTS, -1)).mean(-1)
    return Estimate(per_chain, init_loss, spans.tolist(), failed)


def troubles(e: Estimate) -> dict[str, str]:
    """What makes an estimate suspect: {flag (diverged, rising, negative): what, in words}; empty: nothing seen."""
    out = {}
    bad = [c for c, t in enumerate(e.traces) if not all(map(math.isfinite, t))]
    if e.failed or bad:
        out["diverged"] = f"{max(e.failed, len(bad))} of {len(e.traces)} chains diverged"
    rising = [c for c, t in enumerate(e.traces) if all(map(math.isfinite, t)) and _rising(t, e.init_loss)]
    if rising:
        out["rising"] = (
            f"the loss of {len(rising)} of {len(e.traces)} chains was still rising at the end (more draws, larger ε)"
        )
    if e.llc < 0:
        out["negative"] = "the estimate is negative: the checkpoint is not at a local minimum of the loss SGLD samples"
    return out


def _rising(trace: list[float], init_loss: float) -> bool:
    """The last three tenths of the draws sit above the three before them, by more than the noise between
    tenths and by a quarter of the excess over L(w*): the chain had not reached its plateau."""
    late, middle = trace[-3:], trace[-6:-3]
    rise = sum(late) / 3 - sum(middle) / 3
    noise = float(torch.tensor(trace[-6:]).std())
    return rise > max(2 * noise, 0.25 * (sum(late) / 3 - init_loss))


def summary(tl: Any, task: Any) -> list[str]:
    m = tl.metrics.get("llc", {})
    steps, values = finite(tl.steps, m.get("llc", []))
    if not steps:
        return []
    peak = max(range(len(values)), key=values.__getitem__)
    lines = [
        f"llc              {values[0]:.3g} at step {steps[0]} → {values[-1]:.3g} at {steps[-1]} "
        f"(peak {values[peak]:.3g} at {steps[peak]}; {len(steps)} checkpoints)"
    ]
    for key, what in (
        ("diverged", "a chain diverged"),
        ("rising", "chains still rising"),
        ("negative", "negative estimate"),
    ):
        flagged = [s for s, v in zip(tl.steps, m.get(key, [])) if v == v and v > 0]
        if flagged:
            lines.append(f"llc              warning: {what} at steps {', '.join(map(str, flagged))}")
    return lines


def figure(tl: Any, task: Any) -> Optional[Figure]:
    m = tl.metrics.get("llc", {})
    steps, values = finite(tl.steps, m.get("llc", []))
    if not steps:
        return None
    fig, axes = new_figure(2, height=2.8)
    ax = axes[0, 0]
    chains = sorted(k for k in m if k.startswith("chain"))
    for k in chains:
        ax.plot(*finite(tl.steps, m[k]), ".", color="tab:purple", alpha=0.35, markersize=4)
    ax.plot(
        steps, values, "o-", color="tab:purple", markersize=3, label=f"LLC (mean of {len(chains)} chains; dots: each)"
    )
    ax.set_ylabel("local learning coefficient")
    ax.legend(fontsize=7)
    steps_axis(ax)
    last = steps[-1]
    i = tl.steps.index(last)
    ax2 = axes[1, 0]
    traces = sorted({k.split("/")[1] for k in m if k.startswith("trace/")})
    for c in traces:
        ax2.plot(
            range(1, TRACE_POINTS + 1),
            [m[f"trace/{c}/{q}"][i] for q in range(TRACE_POINTS)],
            "o-",
            markersize=3,
            label=c,
        )
    ax2.axhline(m["init_loss"][i], color="black", linestyle="--", linewidth=1, label="L(w*)")
    ax2.set_xlabel(f"tenth of the SGLD draws (checkpoint at step {last})")
    ax2.set_ylabel("sampled loss")
    ax2.legend(fontsize=7, ncol=3)
    return fig


def wandb_plots(tl: Any, logger: Any) -> None:
    m = tl.metrics.get("llc", {})
    steps, values = finite(tl.steps, m.get("llc", []))
    if steps:
        chains = {k: finite(tl.steps, m[k])[1] for k in m if k.startswith("chain")}
        logger.line_series("plots/llc", steps, {"llc": values} | chains, "local learning coefficient", "step")


SECTION = Section(
    "llc",
    "Local learning coefficient",
    "The LLC estimated by SGLD (devinterp) at the measured checkpoints: the mean over chains and each "
    "chain (dots). Below, each chain's sampled loss at the last of them, against L(w*): a trace that "
    "levels off above L(w*) is a healthy estimate; one still rising wants more draws, one falling "
    "below L(w*) says the checkpoint is not at a minimum.",
    figure,
)


@register(
    "llc",
    reads={"task:train": no_hooks},
    threshold=math.inf,
    costly=True,
    options=LLCOptions,
    model_check=lambda model: available(),
    summary=summary,
    section=SECTION,
    wandb=wandb_plots,
)
def llc_probe(view: View) -> ProbeResult:
    o: LLCOptions = view.options
    data = training_batch(view, o.pool, o.seed)
    with torch.enable_grad():
        e = estimate(view.model, data, o, loss_kind(view))
    issues = troubles(e)
    metrics = {
        "llc": e.llc,
        "llc_std": float(torch.tensor(e.kept).std()) if len(e.kept) > 1 else 0.0,
        "init_loss": e.init_loss,
    } | {flag: float(flag in issues) for flag in ("diverged", "rising", "negative")}
    metrics |= {f"chain{c}": v for c, v in enumerate(e.per_chain)}
    metrics |= {f"trace/chain{c}/{q}": v for c, t in enumerate(e.traces) for q, v in enumerate(t)}
    for issue in issues.values():
        warnings.warn(f"llc: {issue}", stacklevel=2)
    return ProbeResult("llc", None, metrics)
