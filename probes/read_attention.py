"""Where a read attends (flip-flop, Liu et al. 2023): the attention behind an attention glitch.

A flip-flop read must copy the bit of the most recent write. Per head: the mean attention from each read
(the `r` token, which predicts the read bit) to that write — its `w` and its bit. The best head is the
read head; on every split (in distribution, sparse, dense) the probe records the share of wrong reads
(`<split>/error`), the read head's mass on the right write on all reads and on the wrong ones, how peaked
its attention is there (`max_mass`: attention dilution, the paper's Prop. 3, shows as a low peak), and, for
each wrong read, where the read head's attention peaks: on another write (`stale`: the recency
tie-break failed), off every write (`elsewhere`), or on the right write after all (`right`: the error lies
past the attention); and, to compare, how often its peak is off the right write on a correct read
(`off_correct`). Shares of wrong reads are NaN on a split with none.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth.probes import ProbeResult, View, attention_hooks, register, render_heads

SPLITS = {"eval": "data", "sparse": "task:eval_sparse", "dense": "task:eval_dense"}  # metric prefix -> input


def write_positions(
    source: Int[Tensor, "batch pos"], written: Bool[Tensor, "batch pos"]
) -> tuple[Bool[Tensor, "batch pos pos"], Bool[Tensor, "batch pos pos"]]:
    """For each query and key: whether the key belongs to the write the query's read copies (its bit at
    `source` and the `w` before it), and whether it belongs to any write (a written bit or its `w`)."""
    n = source.shape[1]
    keys = torch.arange(n, device=source.device)
    right = (keys == source[..., None]) | (keys == source[..., None] - 1)
    any_write = written | torch.roll(written, -1, 1)  # the `w` sits just before its bit
    return right & (source[..., None] >= 0), any_write[:, None, :].expand(-1, n, -1)


def read_scores(
    pattern: Float[Tensor, "layer batch head_index query_pos key_pos"],
    source: Int[Tensor, "batch pos"],
    written: Bool[Tensor, "batch pos"],
    head: Optional[tuple[int, int]] = None,
) -> dict[str, Any]:
    """Per head, the mean mass from reads to their write; and per read (batch, query) of the read head (`head`,
    else the best here): its mass there, its peak mass and where its peak lies (0 the right write, 1 another
    write, 2 no write)."""
    right, any_write = write_positions(source, written)
    reads = source >= 0
    mass = (pattern * right[None, :, None]).sum(-1)  # [layer, batch, head, query]
    per_head = (mass * reads[None, :, None]).sum((1, 3)) / reads.sum()
    layer, head = head or divmod(int(per_head.flatten().argmax()), per_head.shape[1])
    best = pattern[layer, :, head]  # [batch, query, key]
    peak = best.argmax(-1, keepdim=True)
    where = torch.where(right.gather(2, peak), 0, torch.where(any_write.gather(2, peak), 1, 2))[..., 0]
    return {
        "per_head": per_head,
        "head": (layer, head),
        "mass": mass[layer, :, head],
        "peak_mass": best.amax(-1),
        "where": where,
    }


def _share(values: Tensor, on: Tensor) -> float:
    return float(values[on].float().mean()) if bool(on.any()) else math.nan


def _percent(x: float) -> str:
    return "0 %" if x == 0 else f"{100 * x:.0f} %" if x >= 0.1 else f"{100 * x:.2g} %"


def summary(tl: Any, task: Any) -> list[str]:
    """At the last checkpoint: the wrong reads on each split, and where the read head looked on the wrong ones."""
    m = {k: v[-1] for k, v in tl.metrics.get("read_attention", {}).items()}
    if not m:
        return []
    errors = ", ".join(f"{name} {_percent(m[f'{name}/error'])} of {m[f'{name}/reads']:.0f}" for name in SPLITS)
    lines = [
        f"read_attention   wrong reads at step {tl.steps[-1]}: {errors}; the read head puts "
        f"{m['eval/source_mass']:.2f} of a read's attention on its write"
    ]
    wrong = [(name, m[f"{name}/wrong_reads"]) for name in SPLITS if m[f"{name}/wrong_reads"]]
    if wrong:
        total = sum(n for _, n in wrong)
        share = {
            key: sum(m[f"{name}/{key}"] * n for name, n in wrong) / total for key in ("stale", "elsewhere", "right")
        }
        lines.append(
            f"                 on the {total:.0f} wrong reads it peaks on another write {_percent(share['stale'])}, "
            f"on no write {_percent(share['elsewhere'])}, on the right write {_percent(share['right'])}"
        )
    return lines


@register(
    "read_attention",
    reads={name: attention_hooks for name in SPLITS.values()},
    truth=("source", "written"),
    summary=summary,
)
def read_attention(view: View) -> ProbeResult:
    per_head, head, metrics, failing = None, None, {}, None
    for prefix, input in SPLITS.items():  # the read head is the best in distribution (the first), on every split
        batch = view.batch(input)
        source, written = batch.truth["source"], batch.truth["written"]
        scores = read_scores(view.patterns(input), source, written, head)
        reads = source >= 0
        wrong = (view.logits(input).argmax(-1) != batch.targets) & reads
        if per_head is None:
            per_head, head = scores["per_head"], scores["head"]
        metrics |= {
            f"{prefix}/error": float(wrong.sum() / reads.sum()),
            f"{prefix}/seq_error": float(wrong.any(1).float().mean()),
            f"{prefix}/source_mass": _share(scores["mass"], reads),
            f"{prefix}/source_mass_wrong": _share(scores["mass"], wrong),
            f"{prefix}/max_mass": _share(scores["peak_mass"], reads),
            f"{prefix}/max_mass_wrong": _share(scores["peak_mass"], wrong),
            f"{prefix}/reads": float(reads.sum()),
            f"{prefix}/wrong_reads": float(wrong.sum()),
            f"{prefix}/off_correct": _share(scores["where"] != 0, reads & ~wrong),
        }
        for code, name in enumerate(("right", "stale", "elsewhere")):
            metrics[f"{prefix}/{name}"] = _share(scores["where"] == code, wrong)
        if failing is None and bool(wrong.any()):
            failing = (input, int(wrong.any(1).nonzero()[0, 0]))
    metrics["max"] = float(per_head.max())
    input, i = failing or ("data", 0)  # render a sequence with a wrong read where there is one
    render = render_heads(view.tokens(input)[i : i + 1], view.patterns(input)[:, i : i + 1], per_head)
    render["failing"] = failing is not None
    return ProbeResult("read_attention", per_head.cpu(), metrics, render)
