"""Does a sparse dictionary trained on the residual stream find the task's latent variables, and from which
checkpoint? The unsupervised half of the question the `latents` probe asks with supervision.

At each checkpoint it visits (log-spaced, `checkpoints`), on `sequences` held-out sequences of the task split by
sequence into halves: `seeds` sparse autoencoders (`kind`: TopK, through EleutherAI's sparsify, or ReLU-L1; `_sae`)
are trained on the residual stream after layer `layer` at every position of the first half (or `kind=transcoder`:
sparsify's TopK transcoders from the stream before that layer's MLP to the MLP's output), and their latents are
matched to each of the task's latents (`Task.latents`) on the second half, at the positions where it is defined
(`_match`):

- `<latent>/auroc` (categorical): for each value, the best AUROC of any dictionary latent as a detector of
  "the latent has this value", averaged over the values; `<latent>/found`, the share of values some dictionary
  latent detects with AUROC ≥ `found`; `<latent>/split`, how many dictionary latents do, per value found (> 1: the
  value is split across several);
- `<latent>/mcc`: the mean |correlation| after the one-to-one (Hungarian) assignment of dictionary latents to the
  values (categorical: their indicators) or coordinates (vector);
- `<latent>/absorption`, where the task declares the latent a function of another (`Latent.of`: a factor of the
  automaton's state): the share of each value's rows where its best detector is silent and a detector of one of its
  child values fires instead (Chanin et al. 2024's feature absorption);
- `explained` (1 − FVU), `l0` (active latents per row), `dead` (share never active on the held-out rows), `dense`
  (active on over half of them); each the mean over the seeds, with the seeds' spread in `<metric>/spread`;
- its budget: `budget/steps`, `budget/rows`, `budget/d_sae`, `budget/seeds`.

An SAE finds a latent from the first visited checkpoint after which its AUROC (categorical) or matched correlation
stays at or above `found`; the summary sets that beside the checkpoint from which the `latents` probe reads it at
the same place, where both ran: the gap is what the dictionary misses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Optional

import numpy as np
import torch
from jaxtyping import Float
from mechsynth.probes import ProbeError, ProbeResult, Section, View, formation_step, register
from mechsynth.probes import _match, _sae, latents
from mechsynth.probes._inputs import draw
from torch import Tensor

from mechsynth import hooks
from mechsynth.config import check, check_fields, doc, validates_itself
from mechsynth.tasks.base import latent_values
from mechsynth.util.figures import mark_drop, new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from mechsynth.probes import Timeline


@validates_itself
@dataclass(frozen=True)
class DictionaryOptions:
    kind: Literal["topk", "relu", "transcoder"] = doc(
        "topk: TopK SAE (sparsify); relu: ReLU SAE with an L1 penalty; transcoder: a TopK transcoder (sparsify) from "
        "the layer's residual stream before its MLP (hook_resid_mid) to the MLP's output",
        "topk",
    )
    layer: int = doc(
        "the residual stream after this layer (transcoder: across its MLP); -1: the last", -1, lo=-1, hi=1023
    )
    expansion: int = doc(
        "dictionary latents per residual-stream dimension (d_sae = expansion × d_model)", 4, lo=1, hi=256
    )
    k: int = doc("topk: active latents per position", 4, lo=1, hi=4096)
    l1: float = doc("relu: the L1 penalty's coefficient (inputs scaled to mean squared norm d_model)", 2.0)
    steps: int = doc("Adam steps per dictionary", 1000, lo=1, hi=10**6)
    batch: int = doc("positions per step", 512, lo=1, hi=2**20)
    lr: float = doc("Adam's learning rate", 3e-3)
    seeds: int = doc("dictionaries trained per checkpoint, from different seeds", 2, lo=1, hi=64)
    sequences: int = doc(
        "held-out sequences drawn: half to train the dictionaries, half to match them", 256, lo=4, hi=2**16
    )
    found: float = doc("an SAE finds a value once some latent detects it with AUROC (or correlation) ≥ this", 0.9)
    max_rows: int = doc("at most this many held-out positions per latent are matched, evenly spaced", 8192, lo=16)
    checkpoints: int = doc(
        "checkpoints to train dictionaries at, log-spaced (first and last included); 0 = every one", 8, lo=0, hi=100_000
    )
    seed: int = doc("seed of the dictionaries' initialisation and minibatches", 0, lo=0, hi=2**31)

    def __post_init__(self) -> None:
        check_fields(self)
        check(self.l1 >= 0, "l1", f"must be ≥ 0, got {self.l1}")
        check(self.lr > 0, "lr", f"must be a positive number, got {self.lr}")
        check(0.5 < self.found <= 1, "found", f"must be in (0.5, 1], got {self.found}; allowed: (0.5, 1]")


def score(acts: np.ndarray, latent: Any, values: np.ndarray, found: float) -> dict[str, float]:
    """One dictionary's match to one latent on held-out rows (`acts` [row d_sae], `values` [row] or [row d])."""
    if latent.kind == "categorical":
        present = np.unique(values)
        hit = _match.one_hot(values, latent.n_values)[:, present]
        area = _match.auroc(acts, hit)  # [d_sae, value]
        best = np.nanmax(area, 0)
        detected = area >= found
        split = detected.sum(0)[best >= found]
        return {
            "auroc": float(best.mean()),
            "found": float((best >= found).mean()),
            "split": float(split.mean()) if len(split) else math.nan,
            "mcc": _match.matched_correlation(_match.correlation(acts, hit)),
        }
    target = values.reshape(len(values), -1)
    return {"mcc": _match.matched_correlation(_match.correlation(acts, target))}


def main_score(name: str, metrics: dict[str, Any]) -> str:
    """The series that says whether an SAE found latent `name`: its AUROC where categorical, else its correlation."""
    return f"{name}/auroc" if f"{name}/auroc" in metrics else f"{name}/mcc"


def found_at(tl: "Timeline") -> dict[str, Optional[int]]:
    """latent -> the visited checkpoint from which an SAE finds it (None: never settles)."""
    m = tl.metrics.get("dictionary", {})
    threshold = tl.options.get("dictionary", {}).get("found", DictionaryOptions().found)
    out = {}
    for key in m:
        if key.endswith("/mcc") and key.count("/") == 1:
            name = key.split("/")[0]
            pairs = [(s, v) for s, v in zip(tl.steps, m[main_score(name, m)]) if math.isfinite(v)]
            out[name] = formation_step([s for s, _ in pairs], [v for _, v in pairs], threshold)
    return out


def place_of(tl: "Timeline") -> Optional[str]:
    """Where the dictionary read, as the latents probe names places ("L1"), when that probe ran too."""
    layer = tl.options.get("dictionary", {}).get("layer", -1)
    if layer >= 0:
        return f"L{layer}"
    places = [k.rpartition("/")[2] for k in tl.metrics.get("latents", {}) if k.count("/") == 1]
    layers = [p for p in places if p.startswith("L")]
    return max(layers, key=lambda p: int(p[1:])) if layers else None


def summary(tl: "Timeline", task: Any) -> list[str]:
    m, opts = tl.metrics.get("dictionary", {}), tl.options.get("dictionary", {})
    if not m:
        return []
    read = latents.formed(tl) if "latents" in tl.metrics else {}
    place = place_of(tl)
    kind = opts.get("kind", "topk")
    noun = "transcoder" if kind == "transcoder" else "SAE"
    what = f"{kind if noun == 'SAE' else 'TopK'} {noun}, {opts.get('expansion', 4)}× wide, {opts.get('seeds', 2)} seeds"
    lines = []
    for name, step in found_at(tl).items():
        key = main_score(name, m)
        final = [v for v in m[key] if math.isfinite(v)][-1]
        measure = "best AUROC per value" if key.endswith("auroc") else "matched correlation"
        line = f"dictionary    {name}: " + (
            f"{'a' if noun == 'transcoder' else 'an'} {noun} finds it from step {step}"
            if step is not None
            else f"no {noun} finds it"
        )
        line += f" ({what}; {measure} {final:.2f} at the end"
        absorbed = [v for v in m.get(f"{name}/absorption", []) if math.isfinite(v)]
        if absorbed:  # a factor of another latent: how much of it that latent's features took
            line += f"; absorbed by its parent's features on {absorbed[-1]:.0%} of its rows"
        line += ")"
        if name in read and place in read[name]:
            probe_step = read[name][place]
            line += (
                "; a linear probe reads it "
                + (f"from step {probe_step}" if probe_step is not None else "at no checkpoint")
                + f" after {place}"
            )
        lines.append(line)
    return lines


def figure(tl: "Timeline", task: Any) -> Optional["Figure"]:
    m = tl.metrics.get("dictionary", {})
    names = list(found_at(tl))[:6]
    if not names:
        return None
    read, place = tl.metrics.get("latents", {}), place_of(tl)
    fig, axes = new_figure(1, len(names), height=3.0, width=min(4.0 * len(names), 16))
    for ax, name in zip(axes[0], names):
        key = main_score(name, m)
        auroc = key.endswith("auroc")  # on the linear probe's scale: chance (an AUROC of 0.5) 0, perfect 1
        pairs = [(s, (v - 0.5) / 0.5 if auroc else v) for s, v in zip(tl.steps, m[key]) if math.isfinite(v)]
        label = "dictionary: best AUROC per value (0.5 → 0, 1 → 1)" if auroc else "dictionary: matched correlation"
        ax.plot([s for s, _ in pairs], [v for _, v in pairs], marker="o", color="C0", label=label)
        if place is not None and f"{name}/{place}" in read:
            chance = read[f"{name}/chance"]
            ax.plot(
                tl.steps,
                [latents.normalised(s, c) for s, c in zip(read[f"{name}/{place}"], chance)],
                color="C1",
                label=f"linear probe after {place} (chance 0 → 1)",
            )
        mark_drop(ax, tl.loss_drop_step)
        ax.set_ylim(min(-0.05, ax.get_ylim()[0]), 1.02)
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=6)
        steps_axis(ax)
    return fig


def to_wandb(tl: "Timeline", logger: Any) -> None:
    logger.summary({f"formation/dictionary/{name}": s for name, s in found_at(tl).items()})


SECTION = Section(
    "dictionary",
    "Sparse dictionaries against the latent variables",
    "At each visited checkpoint, sparse autoencoders trained on the residual stream: how well their best latent "
    "detects each value of each task latent (AUROC, or matched correlation), beside the linear probe's reading at "
    "the same place where the latents probe ran.",
    figure,
)


def activations(model: Any, tokens: Any, names: list[str]) -> list[Float[Tensor, "batch pos d_model"]]:
    """The activations at `names` on `tokens`, 64 sequences at a time, on the CPU."""
    device = next(model.parameters()).device
    chunks = [
        model.run_with_cache(tokens[i : i + 64].to(device), names_filter=lambda n: n in names)[1]
        for i in range(0, len(tokens), 64)
    ]
    return [torch.cat([c[n].cpu() for c in chunks]).float() for n in names]


@register(
    "dictionary",
    reads={"data": hooks.residual_stream},
    task_check=latents.has_latents,
    threshold=math.inf,
    costly=True,
    hooked=True,
    options=DictionaryOptions,
    summary=summary,
    section=SECTION,
    wandb=to_wandb,
)
def dictionary(view: View) -> ProbeResult:
    o: DictionaryOptions = view.options
    model, task = view.model, view.task
    layer = view.n_layers - 1 if o.layer == -1 else o.layer
    if layer >= view.n_layers:
        raise ProbeError(
            f"dictionary.layer: the model has {view.n_layers} layers (0 to {view.n_layers - 1}), got {o.layer}"
        )
    transcoder = o.kind == "transcoder"
    read = [f"blocks.{layer}.hook_resid_mid", hooks.mlp_out(layer)] if transcoder else [hooks.resid_post(layer)]
    if transcoder and any(h not in model.hook_dict for h in read):  # (TL 3's attention-only blocks name no resid_mid)
        raise ProbeError(
            f"dictionary.kind=transcoder reads an MLP's input and output ({', '.join(read)}), which this model lacks"
        )
    batch = draw("data", model, task, o.sequences, o.seed)
    acts = activations(model, batch.tokens, read)  # each [batch pos d_model]
    half = len(acts[0]) // 2
    fit = [a[:half].flatten(0, 1) for a in acts]
    d_sae = o.expansion * acts[0].shape[-1]
    sae = _sae.train(
        fit[0],
        o.kind,
        d_sae,
        k=min(o.k, d_sae),
        l1=o.l1,
        seeds=o.seeds,
        seed=o.seed,
        steps=o.steps,
        batch=o.batch,
        lr=o.lr,
        targets=fit[1] if transcoder else None,
    )
    held = [a[half:].flatten(0, 1) for a in acts]
    per_seed: list[dict[str, float]] = [{} for _ in range(o.seeds)]
    codes = sae.encode(held[0]).numpy()  # [seed row d_sae]
    active = codes > 0
    for s, stats in enumerate(per_seed):
        stats["dead"] = float((~active[s].any(0)).mean())
        stats["dense"] = float((active[s].mean(0) > 0.5).mean())
        stats["l0"] = float(active[s].sum(1).mean())
    for s, value in enumerate(sae.explained(*held).tolist()):
        per_seed[s]["explained"] = value
    n_pos = acts[0].shape[1]
    truth = latent_values(task, batch)
    for latent in task.latents:
        values, defined = truth[latent.name]
        seq, pos = latents.rows(defined[half:], o.max_rows)
        if len(seq) == 0:
            continue
        rows = (seq * n_pos + pos).numpy()
        held_values = values[half:][seq, pos].numpy()
        # a function of another latent (`of`): the other's values here, to ask whether its features absorb this one
        child = truth[latent.of][0][half:][seq, pos].numpy() if latent.of in truth else None
        for s, stats in enumerate(per_seed):
            found = score(codes[s][rows], latent, held_values, o.found)
            stats |= {f"{latent.name}/{k}": v for k, v in found.items()}
            if child is not None:
                stats[f"{latent.name}/absorption"] = _match.absorption(codes[s][rows], held_values, child)
    metrics: dict[str, float] = {}
    for key in per_seed[0]:
        got = [stats[key] for stats in per_seed]
        metrics[key] = float(np.mean(got))
        metrics[f"{key}/spread"] = float(np.max(got) - np.min(got))
    metrics |= {"budget/steps": o.steps, "budget/rows": len(fit[0]), "budget/d_sae": d_sae, "budget/seeds": o.seeds}
    return ProbeResult("dictionary", None, {k: float(v) for k, v in metrics.items()})
