"""Fourier progress measures for modular arithmetic (Nanda et al. 2023, "Progress measures for grokking via
mechanistic interpretability"): a one-layer transformer that groks c = a + b mod p embeds the residues
as cos(w_k x), sin(w_k x) for a few key frequencies k (w_k = 2πk/p), multiplies them in its MLP neurons
and reads off the logits cos(w_k(a + b − c)). Read on every pair (a, b) (the input "all"), per checkpoint:

- `embed_norm_k{k}`: the norm of the residues' embedding W_E[:p] along frequency k (cos and sin rows of
  the Fourier basis together); `gini_embed`: the Gini coefficient of these norms (high: a few
  frequencies carry the embedding; low: spread over all, as at initialisation);
- `neurons_k{k}`: the fraction of MLP neurons (last position, `blocks.{l}.mlp.hook_post`, every layer
  pooled) whose dominant frequency is k, and `neuron_frac_explained`: the mean share of a live neuron's
  variance over the p×p grid that its dominant frequency explains. A neuron's share for k is Nanda et
  al.'s (`calculate_key_freqs`): centre its activations, take the 2-D Fourier transform over (a, b), and
  sum the squared coefficients of the 3×3 block {const, cos k, sin k}_a × {const, cos k, sin k}_b
  (the terms in k of a alone, of b alone, and their products) over all of them;
- key frequencies, from this checkpoint's own neurons: k is key when at least `MIN_SHARE` of the neurons
  (and at least 2) have dominant frequency k and k explains at least `MIN_FRAC` of their variance.
  Nanda et al.'s code calls every frequency that some neuron prefers key (`np.unique` of the dominant
  frequencies); that rule names nearly all frequencies before the circuit forms, so we count only clean
  neurons and ask for a cluster. `n_key_freqs`, and `key_freq_1` .. `key_freq_{MAX_KEY_FREQS}` the key
  frequencies by cluster size (0: no such rank);
- `restricted_loss`: the logits over all p² pairs with only their components along the constant and
  cos(w_k(c_a a + c_b b)), sin(w_k(c_a a + c_b b)) (as functions of (a, b), for every output c) kept, k
  key, cross-entropy over all p² pairs — Nanda et al.'s `calculate_trig_loss` (mode "all", with its bias
  correction, which is the constant kept here); `restricted_test_loss` the same on the held-out pairs only
  (TransformerLens's Grokking demo evaluates it there);
- `excluded_loss`: the logits with those key-frequency components removed (all key frequencies at once, as
  the paper's figure; their trainer logs each frequency alone), cross-entropy on the training pairs;
- `train_loss`, `test_loss`: the full logits' cross-entropy on the training / held-out pairs;
- `weight_norm_sq`: the sum of squares of the weight matrices (W_E, W_Q, W_K, W_V, W_O, W_in, W_out,
  W_U); Nanda et al. sum every parameter, also the positional embedding and biases.

(c_a, c_b) is the task's `linear` truth, c = c_a a + c_b b mod p: (1, 1) for a + b, (1, −1) for a − b. A
neuron's frequency k then means frequency c_a k on a and c_b k on b (folded into 1..(p−1)/2).

Key frequencies are found at every checkpoint from that checkpoint alone, so early checkpoints have their
own (or none), and restricted / excluded loss measure the circuit the checkpoint has, not the final one.
Nanda et al. fix the final model's key frequencies for every checkpoint: `losses(grid, freqs, ...)` does
that for any list of frequencies, and `logits_on_all` gives a model's logits on the grid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

import torch
from jaxtyping import Bool, Float, Int, Shaped
from mechsynth.probes import ProbeError, ProbeResult, Section, View, formation_step, register
from torch import Tensor

from mechsynth import hooks
from mechsynth.util.figures import mark_drop, new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from mechsynth.probes import Timeline

TRUTH = ("a", "b", "modulus", "in_train", "linear")
WEIGHTS = ("W_E", "W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "W_U")  # what `weight_norm_sq` sums
MIN_FRAC = 0.5  # a neuron counts for its dominant frequency when that explains at least this share of its variance
MIN_SHARE = 0.05  # a key frequency has at least this share of the neurons (and at least 2) counting for it
MAX_KEY_FREQS = 8  # key_freq_1 .. key_freq_8
Linear = tuple[int, int]


# ---- the numerical core: pure functions of tensors ---------------------------------------------------


def n_freqs(p: int) -> int:
    """The frequencies k = 1..(p−1)/2 of an odd modulus p."""
    return (p - 1) // 2


def fold(k: int, p: int) -> int:
    """Frequency k mod p as one of 0..(p−1)/2 (cos and sin of −k are those of k, up to sign)."""
    k %= p
    return min(k, p - k)


def fourier_basis(p: int) -> Float[Tensor, "basis residue"]:
    """The constant, then cos(w_k x) and sin(w_k x) for k = 1..(p−1)/2, each of unit norm: an orthonormal
    basis of functions on the residues x = 0..p−1, in Nanda et al.'s order (row 2k−1 cos k, row 2k sin k)."""
    if p < 3 or p % 2 == 0:
        raise ValueError(f"p must be odd and at least 3, got {p}")
    x = torch.arange(p, dtype=torch.float64)
    rows = [torch.ones(p, dtype=torch.float64)]
    for k in range(1, n_freqs(p) + 1):
        phase = 2 * math.pi * ((k * x) % p) / p  # k·x reduced first: exact phases
        rows += [phase.cos(), phase.sin()]
    basis = torch.stack(rows)
    return basis / basis.norm(dim=1, keepdim=True)


def embed_norms(W_E: Float[Tensor, "residue d_model"]) -> Float[Tensor, "freq"]:
    """For k = 1..(p−1)/2 (index k−1): the norm of the embedding's Fourier components cos k and sin k
    together, √(‖(B W_E)[cos k]‖² + ‖(B W_E)[sin k]‖²); W_E holds the p residues' rows only."""
    comps = fourier_basis(W_E.shape[0]).to(W_E.device) @ W_E.double()
    return comps[1:].pow(2).sum(-1).view(-1, 2).sum(-1).sqrt()


def gini(x: Float[Tensor, "n"]) -> float:
    """The Gini coefficient of non-negative values: 0 when all are equal, (n−1)/n when one holds all."""
    x = x.double().sort().values
    n, total = x.numel(), float(x.sum())
    if n == 0 or total <= 0:
        return 0.0
    rank = torch.arange(1, n + 1, dtype=torch.float64, device=x.device)
    return float(((2 * rank - n - 1) * x).sum()) / (n * total)


def neuron_fractions(acts: Float[Tensor, "a b neuron"], linear: Linear = (1, 1)) -> Float[Tensor, "freq neuron"]:
    """For each frequency k (index k−1) and neuron: the share of the neuron's variance over the p×p grid
    in the 3×3 block {const, cos, sin}(c_a k)_a × {const, cos, sin}(c_b k)_b of its 2-D Fourier transform
    (Nanda et al.'s `extract_freq_2d` on centred activations). 0 for a dead (constant) neuron."""
    p = acts.shape[0]
    x = acts.double()
    raw = x.pow(2).sum((0, 1))
    x = x - x.mean((0, 1), keepdim=True)
    basis = fourier_basis(p).to(x.device)
    power = torch.einsum("fa,abn,gb->fgn", basis, x, basis).pow(2)
    total = power.sum((0, 1))
    shares = []
    for k in range(1, n_freqs(p) + 1):
        ka, kb = fold(linear[0] * k, p), fold(linear[1] * k, p)
        rows, cols = torch.tensor([0, 2 * ka - 1, 2 * ka]), torch.tensor([0, 2 * kb - 1, 2 * kb])
        shares.append(power[rows[:, None], cols[None, :]].sum((0, 1)))
    alive = total > 1e-12 * raw.clamp_min(1e-300)  # a constant neuron's rounding is no signal
    return torch.where(alive, torch.stack(shares) / total.clamp_min(1e-300), torch.zeros_like(total))


def dominant_frequencies(
    fractions: Float[Tensor, "freq neuron"],
) -> tuple[Int[Tensor, "neuron"], Float[Tensor, "neuron"]]:
    """Each neuron's dominant frequency (0 for a dead neuron) and the share of its variance that explains."""
    share, index = fractions.max(0)
    return torch.where(share > 0, index + 1, torch.zeros_like(index)), share


def key_frequencies_of(
    fractions: Float[Tensor, "freq neuron"], min_frac: float = MIN_FRAC, min_share: float = MIN_SHARE
) -> list[int]:
    """The key frequencies, largest cluster first (ties: lower k): those that at least max(2, ⌈min_share ·
    neurons⌉) neurons have as their dominant frequency with a share of at least `min_frac`."""
    dominant, share = dominant_frequencies(fractions)
    counts = torch.bincount(dominant[share >= min_frac], minlength=fractions.shape[0] + 1)[1:].tolist()
    need = max(2, math.ceil(min_share * fractions.shape[1]))
    return sorted((k for k in range(1, len(counts) + 1) if counts[k - 1] >= need), key=lambda k: (-counts[k - 1], k))


def key_frequencies(
    acts: Float[Tensor, "a b neuron"], linear: Linear = (1, 1), min_frac: float = MIN_FRAC, min_share: float = MIN_SHARE
) -> list[int]:
    """The key frequencies of MLP activations over the p×p grid (see `key_frequencies_of`)."""
    return key_frequencies_of(neuron_fractions(acts, linear), min_frac, min_share)


def sum_directions(p: int, freqs: Sequence[int], linear: Linear = (1, 1)) -> Float[Tensor, "direction a b"]:
    """cos(w_k(c_a a + c_b b)) and sin(w_k(c_a a + c_b b)) for each k in `freqs`, as functions of (a, b) of
    unit norm over the p×p grid: orthonormal, and orthogonal to the constant."""
    if len(set(freqs)) != len(freqs) or any(not 1 <= k <= n_freqs(p) for k in freqs):
        raise ValueError(f"frequencies must be distinct, in 1..{n_freqs(p)}; got {list(freqs)}")
    if linear[0] % p == 0 and linear[1] % p == 0:
        raise ValueError(f"linear (c_a, c_b) = {linear} is 0 mod {p}")
    grid = linear[0] * torch.arange(p)[:, None] + linear[1] * torch.arange(p)[None, :]
    rows = []
    for k in freqs:
        phase = 2 * math.pi * ((k * grid) % p).double() / p
        rows += [phase.cos(), phase.sin()]
    if not rows:
        return torch.zeros(0, p, p, dtype=torch.float64)
    dirs = torch.stack(rows)
    return dirs / dirs.flatten(1).norm(dim=1)[:, None, None]


def _key_part(
    logits: Float[Tensor, "a b d_vocab_out"], freqs: Sequence[int], linear: Linear
) -> Float[Tensor, "a b d_vocab_out"]:
    """The logits' projection, for every output c, onto the key frequencies' directions in (a, b)."""
    p = logits.shape[0]
    dirs = sum_directions(p, freqs, linear).to(logits.device).flatten(1)  # [direction, a·b]
    flat = logits.double().reshape(p * p, -1)
    return (dirs.T @ (dirs @ flat)).reshape(logits.shape)


def restricted_logits(
    logits: Float[Tensor, "a b d_vocab_out"], freqs: Sequence[int], linear: Linear = (1, 1)
) -> Float[Tensor, "a b d_vocab_out"]:
    """The logits with, for every output c, only their mean over (a, b) and their components along
    cos(w_k(c_a a + c_b b)) and sin(w_k(c_a a + c_b b)), k in `freqs`, kept (float64). The mean is Nanda
    et al.'s bias correction: it adds back whatever the restriction removed that does not depend on the input."""
    return logits.double().mean((0, 1), keepdim=True) + _key_part(logits, freqs, linear)


def excluded_logits(
    logits: Float[Tensor, "a b d_vocab_out"], freqs: Sequence[int], linear: Linear = (1, 1)
) -> Float[Tensor, "a b d_vocab_out"]:
    """The logits with their components along the key frequencies' directions removed (float64)."""
    return logits.double() - _key_part(logits, freqs, linear)


def grid_loss(
    logits: Float[Tensor, "a b d_vocab_out"], linear: Linear = (1, 1), where: Optional[Bool[Tensor, "a b"]] = None
) -> float:
    """Cross-entropy (float64) of the logits at the pairs `where` (default all) against c = c_a a + c_b b mod p."""
    p = logits.shape[0]
    labels = (linear[0] * torch.arange(p)[:, None] + linear[1] * torch.arange(p)[None, :]) % p
    nll = -logits.double().log_softmax(-1).gather(-1, labels.to(logits.device)[..., None])[..., 0]
    return float(nll.mean() if where is None else nll[where].mean())


def losses(
    logits: Float[Tensor, "a b d_vocab_out"], freqs: Sequence[int], linear: Linear, in_train: Bool[Tensor, "a b"]
) -> dict[str, float]:
    """restricted_loss (all pairs), restricted_test_loss (held-out pairs), excluded_loss (training pairs),
    train_loss and test_loss for the key frequencies `freqs`. Pass the final checkpoint's key frequencies
    to every checkpoint for Nanda et al.'s curves."""
    restricted = restricted_logits(logits, freqs, linear)
    return {
        "restricted_loss": grid_loss(restricted, linear),
        "restricted_test_loss": grid_loss(restricted, linear, ~in_train),
        "excluded_loss": grid_loss(excluded_logits(logits, freqs, linear), linear, in_train),
        "train_loss": grid_loss(logits, linear, in_train),
        "test_loss": grid_loss(logits, linear, ~in_train),
    }


def to_grid(
    values: Shaped[Tensor, "batch *rest"], a: Int[Tensor, "batch"], b: Int[Tensor, "batch"], p: int
) -> Shaped[Tensor, "a b *rest"]:
    """Per-pair values as a p×p grid indexed [a, b]; ValueError unless the batch holds every pair once."""
    index = (a * p + b).long()
    if index.numel() != p * p or not bool((torch.bincount(index.clamp(0, p * p - 1), minlength=p * p) == 1).all()):
        raise ValueError(f"the batch does not hold each of the {p * p} pairs (a, b) exactly once")
    out = values.new_empty((p * p, *values.shape[1:]))
    out[index.to(values.device)] = values
    return out.view(p, p, *values.shape[1:])


@torch.no_grad()
def logits_on_all(model: Any, task: Any) -> Float[Tensor, "a b d_vocab_out"]:
    """One model's logits at the answer position on every pair (a, b) of `task`, as a grid (for `losses`)."""
    batch = task.enumerate("all")
    device = next(model.parameters()).device
    logits = model(batch.tokens.to(device))[:, -1]
    return to_grid(logits, batch.truth["a"], batch.truth["b"], int(batch.truth["modulus"]))


# ---- the probe ---------------------------------------------------------------------------------------


def mlp_posts(n_layers: int) -> list[str]:
    """Every layer's MLP activations (at least layer 0's)."""
    return [hooks.mlp_post(layer) for layer in range(max(1, n_layers))]


def has_mlp(model: Any) -> Optional[str]:
    if getattr(getattr(model, "cfg", None), "attn_only", False):
        return f"{type(model).__name__} is attention-only; probe 'fourier' reads the MLP neurons"
    return None


# ---- how it shows itself: summary lines, report section, W&B plots ------------------------------------


def _freqs(m: dict[str, list[float]], prefix: str) -> list[int]:
    return sorted(int(k[len(prefix) :]) for k in m if k.startswith(prefix))


def final_keys(m: dict[str, list[float]], i: int = -1) -> list[int]:
    """The key frequencies the timeline recorded at checkpoint i (up to MAX_KEY_FREQS of them)."""
    return [int(m[f"key_freq_{r}"][i]) for r in range(1, MAX_KEY_FREQS + 1) if m.get(f"key_freq_{r}", [0])[i] > 0]


def summary(tl: "Timeline", task: Any) -> list[str]:
    m = tl.metrics.get("fourier")
    if not m or not tl.steps:
        return []
    p = 2 * len(_freqs(m, "neurons_k")) + 1
    keys, n = final_keys(m), int(m["n_key_freqs"][-1])
    more = f" and {n - len(keys)} more" if n > len(keys) else ""
    half = math.log(p) / 2  # half the loss of a uniform guess
    below = {name: formation_step(tl.steps, [-v for v in m[name]], -half) for name in ("restricted_loss", "test_loss")}
    below = {name: f"from step {s}" if s is not None else "not reached" for name, s in below.items()}
    return [
        f"{'fourier':<16} key frequencies at step {tl.steps[-1]}: {', '.join(map(str, keys)) or 'none'}{more} "
        f"(of {n_freqs(p)}); embedding Gini {m['gini_embed'][-1]:.2f}",
        f"{'fourier':<16} restricted loss {m['restricted_loss'][-1]:.3g} vs test loss {m['test_loss'][-1]:.3g} at the "
        f"end (excluded {m['excluded_loss'][-1]:.3g} on train, chance ln p = {math.log(p):.3g}); below ln p / 2 "
        f"{below['restricted_loss']} (restricted) and {below['test_loss']} (test)",
    ]


LOSSES = {
    "train_loss": ("train", "tab:blue", "-"),
    "test_loss": ("test", "black", "-"),
    "restricted_loss": ("restricted to key freqs", "tab:green", "--"),
    "excluded_loss": ("key freqs excluded (train)", "tab:red", "--"),
}


def figure(tl: "Timeline", task: Any) -> Optional[Figure]:
    """The final checkpoint's neurons and embedding per frequency, the key frequencies marked; the losses
    with the key frequencies kept or removed beside train and test loss; the weight norm and embedding Gini."""
    m = tl.metrics.get("fourier", {})
    ks = _freqs(m, "neurons_k")
    if not ks or not set(LOSSES) <= set(m):
        return None
    fig, axes = new_figure(1, 3, height=3.4, width=14)
    ax_bar, ax_loss, ax_w = axes[0]
    keys = set(final_keys(m))
    embed = [m[f"embed_norm_k{k}"][-1] for k in ks]
    top = max(embed) or 1.0
    ax_bar.bar(
        [k - 0.2 for k in ks],
        [m[f"neurons_k{k}"][-1] for k in ks],
        width=0.4,
        label="share of neurons",
        color=["tab:green" if k in keys else "0.6" for k in ks],
    )
    ax_bar.bar(
        [k + 0.2 for k in ks],
        [e / top for e in embed],
        width=0.4,
        color="tab:purple",
        alpha=0.6,
        label="embedding norm / max",
    )
    ax_bar.set_xlabel("frequency k")
    ax_bar.set_title(
        f"step {tl.steps[-1]}: key frequencies {', '.join(map(str, sorted(keys))) or 'none'} (green)", fontsize=8
    )
    ax_bar.legend(fontsize=7)
    for key, (label, colour, style) in LOSSES.items():
        ax_loss.plot(tl.steps, m[key], color=colour, linestyle=style, label=label)
    ax_loss.axhline(math.log(2 * len(ks) + 1), color="0.5", linewidth=0.8, linestyle="-.", label="chance (ln p)")
    ax_loss.set_yscale("log")
    ax_loss.set_ylabel("loss (nats)")
    ax_loss.legend(fontsize=7)
    ax_w.plot(tl.steps, m["weight_norm_sq"], color="tab:orange", label="Σ W² (weight matrices)")
    ax_w.set_ylabel("sum of squared weights")
    gini_ax = ax_w.twinx()
    gini_ax.plot(tl.steps, m["gini_embed"], color="tab:purple", label="embedding Gini")
    gini_ax.set_ylabel("Gini of embedding norms")
    lines = ax_w.get_legend_handles_labels()[0] + gini_ax.get_legend_handles_labels()[0]
    ax_w.legend(lines, [ln.get_label() for ln in lines], fontsize=7)
    for ax in (ax_loss, ax_w):
        mark_drop(ax, tl.loss_drop_step)
        steps_axis(ax, log=False)  # grokking is late: linear steps, as Nanda et al. plot it
    return fig


def wandb_plots(tl: "Timeline", logger: Any) -> None:
    m = tl.metrics.get("fourier", {})
    if set(LOSSES) <= set(m):
        logger.line_series(
            "plots/fourier_losses",
            tl.steps,
            {label: m[k] for k, (label, _, _) in LOSSES.items()},
            "losses: full, restricted to and excluding the key frequencies",
            "step",
        )
        logger.line_series(
            "plots/fourier_weights",
            tl.steps,
            {"weight_norm_sq": m["weight_norm_sq"], "gini_embed": m["gini_embed"]},
            "sum of squared weights and embedding Gini",
            "step",
        )


SECTION = Section(
    "fourier",
    "Fourier features (modular arithmetic)",
    "Left: at the last checkpoint, the share of MLP neurons whose variance over all pairs (a, b) is "
    "mostly at each frequency k (key frequencies green) and the embedding's norm at k. Middle: the loss "
    "with the logits restricted to the key frequencies' directions cos/sin(w_k(a∘b)) (all pairs) and with "
    "them excluded (training pairs), beside train and test loss. Right: the sum of squared weight "
    "matrices, and the Gini coefficient of the embedding's frequency norms.",
    figure,
)


@register(
    "fourier",
    reads={"all": mlp_posts},
    truth=TRUTH,
    weights=WEIGHTS,
    model_check=has_mlp,
    threshold=float("inf"),
    summary=summary,
    section=SECTION,
    wandb=wandb_plots,
)
def fourier(view: View) -> ProbeResult:
    batch = view.batch("all")
    p, linear = int(batch.truth["modulus"]), tuple(int(c) for c in batch.truth["linear"])
    if p < 3 or p % 2 == 0:
        raise ProbeError(f"probe 'fourier' needs an odd prime modulus, got p = {p}")
    if view.logits("all").shape[-1] != p:
        raise ProbeError(f"probe 'fourier' reads p = {p} logits, the model has {view.logits('all').shape[-1]}")
    a, b = batch.truth["a"], batch.truth["b"]
    try:
        in_train = to_grid(batch.truth["in_train"].bool(), a, b, p)
    except ValueError as e:
        raise ProbeError(f"probe 'fourier' reads every pair: {e}") from None
    logits = to_grid(view.logits("all")[:, -1], a, b, p)
    acts = to_grid(torch.cat([view.cache("all")[h][:, -1] for h in mlp_posts(view.n_layers)], -1), a, b, p)

    embed = embed_norms(view.weight("W_E")[:p])
    fractions = neuron_fractions(acts, linear)
    dominant, share = dominant_frequencies(fractions)
    keys = key_frequencies_of(fractions)
    counts = torch.bincount(dominant, minlength=n_freqs(p) + 1)[1:].double() / dominant.numel()
    live = share[dominant > 0]
    metrics = {f"embed_norm_k{k}": float(embed[k - 1]) for k in range(1, n_freqs(p) + 1)}
    metrics |= {f"neurons_k{k}": float(counts[k - 1]) for k in range(1, n_freqs(p) + 1)}
    metrics |= {
        "n_key_freqs": float(len(keys)),
        "gini_embed": gini(embed),
        "neuron_frac_explained": float(live.mean()) if live.numel() else 0.0,
    }
    metrics |= losses(logits, keys, linear, in_train)
    metrics["weight_norm_sq"] = sum(float(view.weight(w).double().pow(2).sum()) for w in WEIGHTS)
    metrics |= {f"key_freq_{i}": float(keys[i - 1]) if i <= len(keys) else 0.0 for i in range(1, MAX_KEY_FREQS + 1)}
    return ProbeResult(
        "fourier",
        None,
        metrics,
        {"key_freqs": keys, "dominant": dominant.cpu(), "share": share.cpu(), "embed_norms": embed.cpu()},
    )
