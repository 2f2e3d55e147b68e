"""What a probe is: its declaration (inputs, hooks, truth, threshold, and how it shows itself in a
summary, the report and W&B), the registry, the View it reads and the result it returns.

Shapes use TransformerLens's names: `layer batch head_index query_pos key_pos pos d_vocab_out`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import torch
from jaxtyping import Float, Int
from mechsynth.probes._formation import FormationOptions
from torch import Tensor

from mechsynth import hooks
from mechsynth.registry import Registry
from mechsynth.tasks.base import Batch

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# A mechsynth.probes.Timeline (_timeline.py, which imports this module through _run).
Timeline = Any


class ProbeError(ValueError):
    """A probe cannot run on this model or task; the message says why, in one line."""


@dataclass
class ProbeResult:
    probe: str
    per_head: Optional[Float[Tensor, "layer head_index"]]  # the probe's score for every head, where it scores heads
    metrics: dict[str, float] = field(default_factory=dict)  # named scalars
    # For views: "tokens" [pos], the example sequence; "heads", {"L1H0": [query_pos, key_pos]} the attention of
    # the top heads on it (`render_heads`); a probe may add its own entries.
    render: dict[str, Any] = field(default_factory=dict)

    def top_heads(self, n: int = 3) -> list[tuple[int, int, float]]:
        """(layer, head, score) of the n highest-scoring heads."""
        if self.per_head is None:
            return []
        flat = self.per_head.flatten()
        idx = flat.argsort(descending=True)[:n]
        n_heads = self.per_head.shape[1]
        return [(int(i) // n_heads, int(i) % n_heads, float(flat[i])) for i in idx]


Hooks = Callable[[int], list[str]]  # n_layers -> hook names


@dataclass(frozen=True)
class ModelHooks:
    """A `reads` entry whose hooks the model itself names, where its count of attention layers cannot: `pick(model)`
    -> hook names (an MLP's last hidden layer is `hook_post` or `hook_hidden.{depth − 2}`, by its depth). A hook it
    names that the model lacks refuses the probe, as any declared hook does."""

    pick: Callable[[Any], list[str]]


@dataclass(frozen=True)
class OptionHooks:
    """A `reads` entry whose hooks the probe's options add to (`latents` reads the residual stream and any hook the
    user names): `pick(options, model, n_layers)` -> hook names, options None meaning the defaults. A hook its
    options name that the model lacks refuses the probe, naming the hook."""

    pick: Callable[[Any, Any, int], list[str]]


def hook_names(of: "Hooks | ModelHooks | OptionHooks", model: Any, n_layers: int, options: Any = None) -> list[str]:
    """The hooks a `reads` or ablation entry names on `model` (with `n_layers` attention layers; `options`: the
    probe's, for an OptionHooks entry)."""
    if isinstance(of, OptionHooks):
        return of.pick(options, model, n_layers)
    return of.pick(model) if isinstance(of, ModelHooks) else of(n_layers)


# input -> {ablation name: the hooks it mean-ablates}; see `View.ablated_logits`
Ablations = dict[str, dict[str, Hooks]]
ModelCheck = Callable[[Any], Optional[str]]  # model -> why the probe cannot read it, or None


@dataclass(frozen=True)
class Section:
    """A probe's own section of the run report: a figure drawn from the probe timeline, under a heading,
    with a caption saying how to read it."""

    name: str  # the figure's key in Report.figures and the section's anchor
    title: str
    note: str  # plain text; the report escapes it
    figure: Callable[[Timeline, Any], Optional["Figure"]]  # (timeline, task) -> figure, None: nothing to draw


@dataclass(frozen=True)
class Probe:
    name: str
    fn: Callable[["View"], ProbeResult]
    reads: dict[str, Hooks | ModelHooks | OptionHooks]  # input -> the hooks it caches on that input (none: logits only)
    truth: tuple[str, ...]  # keys of Batch.truth it reads: it applies to exactly the tasks that provide them
    needs_init: bool  # reads the step-0 weights (hidden progress)
    threshold: float  # a head "has" the circuit once its score stays at or above this
    model_check: Optional[ModelCheck] = None  # what the model must have beyond the hooks (e.g. input-facing weights)
    weights: tuple[str, ...] = ()  # the weights it reads, by TransformerLens name (W_E, W_V, W_O, W_U, ...)
    summary: Optional[Callable[[Timeline, Any], list[str]]] = None  # (timeline, task) -> its lines of the summary
    section: Optional[Section] = None  # its section of the run report
    wandb: Optional[Callable[[Timeline, Any], None]] = None  # (timeline, WandbLogger): its own W&B plots
    ablations: Ablations = field(default_factory=dict)  # forwards with activations mean-ablated, per input
    # Reads the model itself (`View.model`), one model at a time: differentiates the training loss around the
    # weights (LLC, sharpness) or patches the model's activations (circuit). It costs many forward and backward
    # passes, and so runs only when named, on the checkpoints its options pick (`checkpoints`, log-spaced).
    costly: bool = False
    options: Optional[type] = None  # the probe's options: a config dataclass, every field with a documented default
    hooked: bool = False  # a costly probe's View.model is the hooked TransformerLens model, not the model as trained
    task_check: Optional[Callable[[Any], Optional[str]]] = None  # task -> why the probe cannot read it, or None
    token_ids: bool = False  # compares input token ids (which a continuous task's vectors are not)

    @property
    def needs_task(self) -> bool:
        """Reads the task's truth or one of its splits; the others run on random tokens when task is None."""
        return bool(self.truth) or self.task_check is not None or any(i.startswith("task:") for i in self.reads)


PROBES: Registry[Probe] = Registry("probe")


def register(
    name: str,
    *,
    reads: dict[str, Hooks | ModelHooks | OptionHooks],
    truth: tuple[str, ...] = (),
    needs_init: bool = False,
    threshold: Optional[float] = None,
    model_check: Optional[ModelCheck] = None,
    weights: Sequence[str] = (),
    summary: Optional[Callable[[Timeline, Any], list[str]]] = None,
    section: Optional[Section] = None,
    wandb: Optional[Callable[[Timeline, Any], None]] = None,
    ablations: Optional[Ablations] = None,
    costly: bool = False,
    options: Optional[type] = None,
    hooked: bool = False,
    task_check: Optional[Callable[[Any], Optional[str]]] = None,
    token_ids: bool = False,
):
    """Decorator: `@register("induction", reads={"repeated": attention_hooks})` on fn(view) -> ProbeResult.
    `summary`, `section` and `wandb` are how the probe shows itself beyond its per-head scores, which the
    timeline, report and W&B draw for every probe alike. `ablations={"data": {"no_mlp": mlp_outs}}`: the
    logits on input "data" with the hooks `mlp_outs` names mean-ablated (`View.ablated_logits`).
    `costly=True`: the probe reads `View.model` itself, one model at a time, and runs only when named (see
    Probe and `hooked`; a run's last checkpoint is probed first, the others see that result as `View.last`);
    `options`: its config dataclass, set with `mechsynth probe --set <probe>.<field>=VALUE`; `task_check`:
    why a task does not fit, beyond the truth it lacks; `token_ids=True`: it compares input token ids, so it is
    refused where the inputs are vectors (continuous tasks). `threshold`: when a head forms (0.5 unset); options that
    subclass FormationOptions hold it instead (settable, and raised where chance is high: `_formation`)."""

    if not set(ablations or {}) <= set(reads):
        raise ValueError(
            f"probe {name!r} ablates on inputs {sorted(set(ablations or {}) - set(reads))} it does not read"
        )
    settable = options is not None and issubclass(options, FormationOptions)
    if settable and threshold is not None:  # one place says it: the options' default
        raise ValueError(f"probe {name!r}: its threshold is its options' default; do not pass threshold= too")
    threshold = options().threshold if settable else 0.5 if threshold is None else threshold

    def deco(fn):
        PROBES.register(name)(
            Probe(
                name,
                fn,
                reads,
                tuple(truth),
                needs_init,
                threshold,
                model_check,
                tuple(weights),
                summary,
                section,
                wandb,
                dict(ablations or {}),
                costly,
                options,
                hooked,
                task_check,
                token_ids,
            )
        )
        return fn

    return deco


def attention_hooks(n_layers: int) -> list[str]:
    return hooks.attention_patterns(n_layers)


def no_hooks(n_layers: int) -> list[str]:
    return []


def input_weights(model: Any) -> Optional[str]:
    """The weight whose first rows face the input positions, as the model's kind declares it: "W_pos"
    (a transformer's positional embedding), "W_in" (the MLP baseline's first layer), or None (rotary
    positions, or a model mechsynth did not build: no such rows known)."""
    return getattr(model, "input_weights", None)


def resolve(input: str, task: Any) -> str:
    """The input a probe gets: `data` is `random` when there is no task."""
    return "random" if input == "data" and task is None else input


@dataclass
class View:
    """What a probe sees of one model: its inputs, the logits and cached activations on each, and its
    weights (TransformerLens names: W_E, W_pos, W_V, ...; W_in for the MLP baseline)."""

    task: Any
    n_layers: int
    n_heads: int
    outputs: dict[str, tuple[Batch, Tensor, dict[str, Tensor]]]  # input -> (batch, logits, cache)
    weight: Callable[[str], Tensor]
    init_weight: Optional[Callable[[str], Tensor]] = None  # the same weights at step 0
    input_weights: Optional[str] = None  # the weight facing the input positions (see `input_weights`)
    ablated: dict[tuple[str, str], Tensor] = field(default_factory=dict)  # (input, ablation) -> logits
    model: Any = None  # the model itself, for costly probes (one model, never several side by side)
    train_set: Optional[Batch] = None  # the run's fixed training set where it trained on one (train.data = fixed)
    train: Any = None  # what the run trained with (its TrainConfig: lr, optimizer, ...), where probed as a run
    options: Any = None  # the probe's options (an instance of its `options` class)
    last: Optional["ProbeResult"] = None  # a costly probe's own result at the run's last checkpoint (the final circuit)

    def batch(self, input: str) -> Batch:
        return self.outputs[resolve(input, self.task)][0]

    def tokens(self, input: str) -> Int[Tensor, "batch pos"] | Float[Tensor, "batch pos d_input"]:
        """The input's token ids, or a continuous task's vectors."""
        return self.batch(input).tokens

    def logits(self, input: str) -> Float[Tensor, "batch out_pos d_vocab_out"]:
        """The model's logits on `input` (the MLP baselines answer at the last position only: out_pos = 1)."""
        return self.outputs[resolve(input, self.task)][1]

    def cache(self, input: str) -> dict[str, Tensor]:
        """The declared hooks' activations on `input`, in TransformerLens's shapes (`hooks`)."""
        return self.outputs[resolve(input, self.task)][2]

    def ablated_logits(self, input: str, ablation: str) -> Float[Tensor, "batch out_pos d_vocab_out"]:
        """The logits on `input` with the probe's declared `ablation` applied: each hook it names replaced by
        that hook's mean over the input's batch in the unablated forward, per position (and per model side
        by side); all of them in one forward."""
        return self.ablated[(resolve(input, self.task), ablation)]

    def patterns(self, input: str) -> Float[Tensor, "layer batch head_index query_pos key_pos"]:
        return torch.stack([self.cache(input)[h] for h in hooks.attention_patterns(self.n_layers)])


def formation_step(steps: Sequence[int], scores: Sequence[float], threshold: float) -> Optional[int]:
    """The first step after which the score stays at or above `threshold` (None if it never settles there):
    when a head "has" a probe's circuit."""
    formed = None
    for step, score in zip(steps, scores):
        if score >= threshold:
            formed = step if formed is None else formed
        else:
            formed = None
    return formed


# ---- helpers for probe files --------------------------------------------------------------------


def head_metrics(prefix: str, per_head: Float[Tensor, "layer head_index"]) -> dict[str, float]:
    return {
        f"{prefix}{hooks.head_label(layer, head)}": float(per_head[layer, head])
        for layer in range(per_head.shape[0])
        for head in range(per_head.shape[1])
    }


def render_heads(
    tokens: Int[Tensor, "batch pos"] | Float[Tensor, "batch pos d_input"],
    pattern: Float[Tensor, "layer batch head_index pos pos"],
    per_head: Float[Tensor, "layer head_index"],
    n: int = 3,
) -> dict[str, Any]:
    """What a view needs: the first sequence's tokens and the attention of the n top heads on it."""
    flat = per_head.flatten().argsort(descending=True)[:n]
    heads = {}
    for i in flat.tolist():
        layer, head = divmod(i, per_head.shape[1])
        heads[hooks.head_label(layer, head)] = pattern[layer, 0, head].cpu()
    return {"tokens": tokens[0].cpu(), "heads": heads}
