"""Which of the task's latent variables the residual stream holds, linearly, after each layer (the automaton's state,
the HMM's hidden state, each sequence's w, ...: `Task.latents`).

On a held-out batch split by sequence into halves, for each latent and each place of the residual stream (`embed`,
then after each layer `L0`, `L1`, ...), at the positions where the latent is defined: ridge regression from the
stream to the latent (its one-hot code when categorical), fitted on the first half with its penalty picked there by
leave-one-out, scored on the second half — accuracy for a categorical latent (chance: always answering the fit half's
commonest value), R² for a real or vector one (chance 0). Positions within a sequence share its values, so the halves
split sequences, never positions of one sequence.

Metrics: `<latent>/<place>`, the score; `<latent>/chance`; `<latent>/<place>/penalty`. A latent is read at a place
from the first checkpoint after which its score stays at least `threshold` of the way from chance to perfect (the
summary and W&B's `formation/latents/...`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import torch
from jaxtyping import Bool, Float
from mechsynth.probes import OptionHooks, ProbeError, ProbeResult, Section, View, formation_step, register
from mechsynth.probes._decode import decode_categorical, decode_real
from torch import Tensor

from mechsynth import hooks
from mechsynth.config import check, check_fields, doc, validates_itself
from mechsynth.tasks.base import Latent, latent_values
from mechsynth.util.figures import mark_drop, new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from mechsynth.probes import Timeline


@validates_itself
@dataclass(frozen=True)
class LatentsOptions:
    threshold: float = doc(
        "a latent is read at a place once its held-out score stays at least this far from chance to perfect "
        "[(score − chance) / (1 − chance), 0 to 1]",
        0.9,
    )
    max_rows: int = doc(
        "at most this many (sequence, position) rows per half and latent, evenly spaced: the fit's cost", 4096, lo=16
    )
    hooks: tuple[str, ...] = doc(
        "more hooks to read, beside the residual stream: any of the model's with a value per position (e.g. "
        "blocks.0.mlp.hook_post, blocks.1.attn.hook_z; trailing axes are flattened), each its own place",
        (),
    )

    def __post_init__(self) -> None:
        check_fields(self)
        check(0 < self.threshold <= 1, "threshold", f"must be in (0, 1], got {self.threshold}; allowed: (0, 1]")
        pairs = [h for h in self.hooks if h.endswith(("hook_pattern", "hook_attn_scores"))]
        check(
            not pairs,
            "hooks",
            f"{pairs[0] if pairs else ''} holds attention between positions [batch head query key], not a value per "
            "position; allowed: hooks with one (resid, mlp, attn.hook_z/q/k/v/result, ...)",
        )


def read_hooks(options: Optional[LatentsOptions], model: Any, n_layers: int) -> list[str]:
    """The residual stream, then the hooks the options name."""
    return hooks.residual_stream(n_layers) + list(options.hooks if options is not None else ())


def has_latents(task: Any) -> Optional[str]:
    return None if task.latents else f"task {task.name!r} declares no latent variables (Task.latents)"


def rows(defined: Bool[Tensor, "batch pos"], limit: int) -> tuple[Tensor, Tensor]:
    """(sequence, position) indices of the defined positions, at most `limit` of them, evenly spaced."""
    seq, pos = defined.nonzero(as_tuple=True)
    if len(seq) > limit:
        pick = torch.linspace(0, len(seq) - 1, limit, device=seq.device).round().long()
        seq, pos = seq[pick], pos[pick]
    return seq, pos


def decode(
    stream: Float[Tensor, "batch pos d_model"], latent: Latent, values: Tensor, defined: Tensor, max_rows: int
) -> Optional[tuple[float, float, float]]:
    """(score, chance, penalty) of `latent` read from `stream`, fitted on the first half of the sequences and scored
    on the second; None where either half has no defined position."""
    half = len(stream) // 2
    fit, test = rows(defined[:half], max_rows), rows(defined[half:], max_rows)
    if len(fit[0]) < 2 or len(test[0]) == 0:
        return None
    x_fit, x_test = stream[:half][fit].double(), stream[half:][test].double()
    y_fit, y_test = values[:half][fit], values[half:][test]
    if latent.kind == "categorical":
        return decode_categorical(x_fit, y_fit.long(), x_test, y_test.long(), latent.n_values)
    shape = (-1, 1) if latent.kind == "real" else (len(y_fit), -1)
    return decode_real(x_fit, y_fit.double().reshape(shape), x_test, y_test.double().reshape(len(y_test), -1))


def formed(tl: "Timeline") -> dict[str, dict[str, Optional[int]]]:
    """latent -> place -> the step from which it is read (None: never settles there)."""
    m, opts = tl.metrics.get("latents", {}), tl.options.get("latents", {})
    threshold = opts.get("threshold", LatentsOptions().threshold)
    out: dict[str, dict[str, Optional[int]]] = {}
    for key in m:
        name, _, place = key.rpartition("/")
        if not name or "/" in name or f"{name}/chance" not in m or place in ("chance", "penalty"):
            continue
        norm = [normalised(s, c) for s, c in zip(m[key], m[f"{name}/chance"])]
        out.setdefault(name, {})[place] = formation_step(tl.steps, norm, threshold)
    return out


def normalised(score: float, chance: float) -> float:
    """How far from chance to perfect: (score − chance) / (1 − chance)."""
    return (score - chance) / (1 - chance) if chance < 1 and math.isfinite(score) else math.nan


def summary(tl: "Timeline", task: Any) -> list[str]:
    m, lines = tl.metrics.get("latents", {}), []
    for name, by_place in formed(tl).items():
        chance = m[f"{name}/chance"][-1]
        final = {p: m[f"{name}/{p}"][-1] for p in by_place}
        best = max(final, key=lambda p: final[p] if math.isfinite(final[p]) else -math.inf)
        read = [f"after {p} from step {s}" for p, s in by_place.items() if s is not None]
        kind = "R²" if chance == 0 else "accuracy"
        lines.append(
            f"latents       {name}: "
            + (f"read {', '.join(read)}" if read else "not read linearly at any place")
            + f"; at the end {kind} {final[best]:.2f} after {best} (chance {chance:.2f})"
        )
    return lines


def figure(tl: "Timeline", task: Any) -> Optional["Figure"]:
    m, found = tl.metrics.get("latents", {}), formed(tl)
    if not found:
        return None
    names = list(found)[:6]
    fig, axes = new_figure(1, len(names), height=3.0, width=min(4.0 * len(names), 16))
    for ax, name in zip(axes[0], names):
        chance = m[f"{name}/chance"]
        for i, place in enumerate(found[name]):
            ax.plot(
                tl.steps, [normalised(s, c) for s, c in zip(m[f"{name}/{place}"], chance)], color=f"C{i}", label=place
            )
        mark_drop(ax, tl.loss_drop_step)
        ax.set_ylim(min(-0.05, ax.get_ylim()[0]), 1.02)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("held-out decoding, chance 0 to perfect 1")
        ax.legend(fontsize=6, title="after", title_fontsize=6)
        steps_axis(ax)
    return fig


def to_wandb(tl: "Timeline", logger: Any) -> None:
    logger.summary(
        {f"formation/latents/{name}@{place}": s for name, by in formed(tl).items() for place, s in by.items()}
    )


SECTION = Section(
    "latents",
    "Latent variables in the residual stream",
    "Held-out linear decoding of each of the task's latent variables from the residual stream after each layer, "
    "scaled from chance (0) to perfect (1); the dashed line is the loss drop.",
    figure,
)


@register(
    "latents",
    reads={"data": OptionHooks(read_hooks)},
    task_check=has_latents,
    threshold=float("inf"),
    options=LatentsOptions,
    summary=summary,
    section=SECTION,
    wandb=to_wandb,
)
def latents(view: View) -> ProbeResult:
    batch, cache, opts = view.batch("data"), view.cache("data"), view.options or LatentsOptions()
    metrics: dict[str, float] = {}
    truth = latent_values(view.task, batch)
    for latent in view.task.latents:
        values, defined = truth[latent.name]
        for place, hook in [
            *zip(hooks.residual_places(view.n_layers), hooks.residual_stream(view.n_layers)),
            *((h, h) for h in opts.hooks),
        ]:
            stream = cache[hook]
            if stream.dim() < 3 or stream.shape[:2] != values.shape[:2]:
                raise ProbeError(
                    f"latents.hooks: {hook} is {list(stream.shape)}, not a value per position [batch pos ...]"
                )
            stream = stream.flatten(2)
            got = decode(stream, latent, values.to(stream.device), defined.to(stream.device), opts.max_rows)
            score, chance, penalty = got if got is not None else (math.nan, math.nan, math.nan)
            metrics[f"{latent.name}/{place}"], metrics[f"{latent.name}/{place}/penalty"] = score, penalty
            metrics[f"{latent.name}/chance"] = chance
    return ProbeResult("latents", None, metrics)
