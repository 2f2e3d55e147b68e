"""What every task provides: a validated config, a spec of its sizes, and batches that carry their ground truth.

Shapes use TransformerLens's names (`batch pos d_vocab d_vocab_out`; `d_input`, the width of the vectors a
continuous task feeds the model instead of token ids) and, for the tasks' own structure,
`bit` (an input bit of the readout tasks), `support` (a bit the label reads), `state` (of an automaton or
a chain) and `context` (the last order-1 tokens of an in-context Markov chain). `out_pos`: the positions a
model predicts, all of `pos` or the last few (the MLP baselines answer at the readout only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, ClassVar, Literal, Optional

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth.registry import Registry

LossKind = Literal["cross_entropy", "squared_error", "correlation"]
LatentKind = Literal["categorical", "real", "vector"]


@dataclass
class Batch:
    """One batch of a task.

    `targets[b, p]` is what the model should output at position p, scored only where `mask` is True.
    A continuous task (`TaskSpec.d_input` set) feeds vectors instead of token ids, `tokens` [batch pos
    d_input], and its targets are real numbers: the same field, so every `model(batch.tokens)` reads them.
    `truth` holds the hidden ground truth probes need (the parity support, each sequence's
    transition matrix, the automaton states, ...), keyed by name; each task builds it with one
    annotated function that says every key's shape (`parity_truth`, `markov_truth`, ...).
    """

    tokens: Int[Tensor, "batch pos"] | Float[Tensor, "batch pos d_input"]
    targets: Int[Tensor, "batch pos"] | Float[Tensor, "batch pos"]
    mask: Bool[Tensor, "batch pos"]
    truth: dict[str, Any] = field(default_factory=dict)

    def to(self, device: torch.device | str) -> "Batch":
        move = lambda v: v.to(device) if isinstance(v, Tensor) else v  # noqa: E731
        return Batch(
            self.tokens.to(device),
            self.targets.to(device),
            self.mask.to(device),
            {k: move(v) for k, v in self.truth.items()},
        )


@dataclass(frozen=True)
class TaskSpec:
    """Sizes a model needs to be built for a task."""

    d_vocab: int  # input token ids are in [0, d_vocab); a continuous task's d_input (the embedding's rows)
    d_vocab_out: int  # targets are in [0, d_vocab_out); a continuous task's output width (1: a real number)
    n_ctx: int  # longest sequence any split produces
    token_names: tuple[str, ...]  # a label per input token (for renders)
    target_names: tuple[str, ...]  # a label per target class
    # Numeric value of each input token for models that read numbers, not embeddings (the MLP
    # baselines); None for tasks where that makes no sense.
    token_values: tuple[float, ...] | None = None
    # Continuous inputs: each position is a vector of this width, read in linearly (x @ W_E, the map a token
    # embedding applies to one-hot vectors, so d_vocab = d_input), not a token id. None: token ids.
    d_input: int | None = None


@dataclass(frozen=True)
class Latent:
    """A variable the task's generator draws or computes, which a model solving the task may come to represent
    (the automaton's state, the HMM's hidden state, each sequence's weight vector w): what the `latents` and
    `dictionary` probes look for in the residual stream.

    Its values are `Batch.truth[truth]` in evaluation batches: [batch pos] for a categorical (ids 0..n_values-1)
    or real latent, [batch pos d] for a vector; or one value per sequence, [batch] / [batch d], the same at
    every position where it is defined. `where`: those positions — "all", "scored" (where `Batch.mask` is True:
    the readout of a readout task), or a truth key holding a Bool[batch pos] mask of its own."""

    name: str
    kind: LatentKind
    truth: str
    n_values: Optional[int] = None  # categorical only: how many values it takes
    where: str = "all"
    about: str = ""  # one line for people: what it is, where the papers say models represent it
    # The latent whose value fixes this one's (a factor of the automaton's state): a hierarchy, where the dictionary
    # probe measures absorption (a parent's feature silent where a child's fires instead).
    of: Optional[str] = None


@dataclass(frozen=True)
class Convergence:
    """When a run of a task counts as converged (`mechsynth sweep-report`): its final `metric` on the task's
    main held-out split is at least `threshold` (at most, with `below`)."""

    metric: str = "acc"
    threshold: float = 0.99
    below: bool = False

    def reached(self, value: float) -> bool:
        return value <= self.threshold if self.below else value >= self.threshold

    def text(self, split: str) -> str:
        return f"{split}/{self.metric} {'≤' if self.below else '≥'} {self.threshold:g}"


class Task:
    """Base class. Subclasses set `Config` (a frozen dataclass) and implement `spec` and `sample`."""

    name: ClassVar[str]  # set by TASKS.register
    Config: ClassVar[type]
    splits: ClassVar[tuple[str, ...]] = ("train", "eval")
    # Which split tells "has it learned?": the headline accuracy in the progress bar and reports.
    main_eval: ClassVar[str] = "eval"
    # The keys of `Batch.truth` in this task's evaluation batches (training batches may leave out the
    # costly ones). Probes declare the truth they read and apply exactly where a task provides it; a
    # subclass whose truth depends on its config makes this a property.
    truth_keys: ClassVar[tuple[str, ...]] = ()
    # The task's latent variables (`Latent`), read from the truth above; a task whose latents depend on its
    # config makes this a property.
    latents: ClassVar[tuple[Latent, ...]] = ()
    # How a causal patch is judged (mechsynth.circuits) on this task's counterfactual pairs:
    # "logit_diff", the clean answer's logit minus the corrupted input's answer's, at the scored positions
    # where the two answers differ; "loss", the clean targets' cross-entropy (answers that are
    # distributions, as a Markov chain's next token). None: the task makes no counterfactuals, and the
    # probes that patch do not apply to it.
    patch_metric: ClassVar[Optional[Literal["logit_diff", "loss"]]] = None
    # What training minimises (`masked_loss`): cross-entropy over the output classes, or the squared error of
    # a real-valued output (the model's one output unit against real targets, for continuous tasks).
    loss_kind: ClassVar[LossKind] = "cross_entropy"
    # When a run has learned the task (sweep-report's "converged"): accuracy near 1, unless the task's truth says
    # otherwise (a task whose answers are random tops out below it, and declares a criterion it can reach).
    convergence: ClassVar[Convergence] = Convergence()

    def __init__(self, cfg: Any):
        self.cfg = cfg

    @property
    def spec(self) -> TaskSpec:
        raise NotImplementedError

    def sample(
        self, batch_size: int, generator: torch.Generator, device: torch.device | str = "cpu", split: str = "train"
    ) -> Batch:
        """A batch drawn with `generator` (which must live on `device`); same generator state -> same batch."""
        raise NotImplementedError

    def enumerate(self, split: str) -> Optional[Batch]:
        """Every input of `split` (or of all splits, "all") in a fixed order, with its truth, where the task's
        inputs are few enough to list (modular arithmetic's p² pairs): held-out metrics are then exact, not
        a sample. None (the default): the task only samples."""
        return None

    def counterfactual(self, batch: Batch, generator: torch.Generator, control: bool = False) -> Optional[Batch]:
        """A corrupted copy of `batch` (drawn from this task's split) for causal patching: tokens of the same
        shape, changed where the answer depends on them, with the targets, mask and truth of the new tokens,
        so that clean and corrupted inputs differ in what the circuit computes. `control=True`: changed only
        where the answer must not depend on them (None where the task has no such place). Tasks that set
        `patch_metric` implement it; same generator state -> same batch."""
        raise NotImplementedError(f"task {self.name!r} makes no counterfactuals")

    # Whether training adds `regulariser`'s term (a task whose config can turn one on makes this a property).
    regularised: ClassVar[bool] = False

    def regulariser(
        self, forward: Callable[[Tensor], Tensor], batch: Batch, logits: Float[Tensor, "batch out_pos d_vocab_out"]
    ) -> Optional[Float[Tensor, ""]]:
        """A term training adds to the loss of a training batch, given the model's `forward` and its `logits` on
        the batch (e.g. a penalty on how the outputs change under a transformation the task's truth says must
        not change them). None (the default): the loss alone."""
        return None

    def metrics(self, logits: Float[Tensor, "batch out_pos d_vocab_out"], batch: Batch) -> dict[str, float]:
        """Loss and accuracy at scored positions. Tasks add their own (e.g. per-position accuracy)."""
        logits, targets, mask = align(logits, batch)
        loss = F.cross_entropy(logits[mask].float(), targets[mask])
        acc = (logits.argmax(-1) == targets)[mask].float().mean()
        return {"loss": loss.item(), "acc": acc.item()}

    def token_labels(self, tokens: Int[Tensor, "pos"]) -> list[str]:
        """A label per position of one sequence, for attention renders: what the token means in the
        task (a bit, a state, a group element). Default: the spec's token names."""
        names = self.spec.token_names
        return [names[t] if 0 <= t < len(names) else str(t) for t in tokens.tolist()]

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise ValueError(f"split: {split!r} is not a split of {self.name}; allowed: {', '.join(self.splits)}")


def latent_values(
    task: Task, batch: Batch
) -> dict[str, tuple[Int[Tensor, "batch pos"] | Float[Tensor, "batch pos *d"], Bool[Tensor, "batch pos"]]]:
    """Each of `task.latents` on `batch`: (its value at every position, where it is defined). A per-sequence
    value is repeated along `pos`; values that stop short of `pos` (a hidden chain under its inputs, not under
    the answer slots after them) are defined at their own positions only."""
    n_batch, n_pos = batch.tokens.shape[:2]
    out = {}
    for latent in task.latents:
        values = batch.truth[latent.truth]
        if values.dim() == (1 if latent.kind != "vector" else 2):  # one value per sequence
            values = values.unsqueeze(1).expand(-1, n_pos, *values.shape[1:])
        n = values.shape[1]
        full = values.new_zeros((n_batch, n_pos, *values.shape[2:]))
        full[:, :n] = values
        defined = torch.zeros(n_batch, n_pos, dtype=torch.bool, device=values.device)
        if latent.where == "all":
            defined[:, :n] = True
        elif latent.where == "scored":
            defined[:, :n] = batch.mask[:, :n]
        else:
            defined[:, :n] = batch.truth[latent.where][:, :n]
        out[latent.name] = (full, defined)
    return out


def align(
    logits: Float[Tensor, "batch out_pos d_vocab_out"], batch: Batch
) -> tuple[
    Float[Tensor, "batch out_pos d_vocab_out"],
    Int[Tensor, "batch out_pos"] | Float[Tensor, "batch out_pos"],
    Bool[Tensor, "batch out_pos"],
]:
    """Match logits to targets. Models that only predict the last P positions (the MLP baselines,
    which read the whole input and answer at the readout) are scored on the last P targets."""
    p = logits.shape[1]
    return logits, batch.targets[:, -p:], batch.mask[:, -p:]


def readout_batch(bits: Int[Tensor, "batch bit"], labels: Int[Tensor, "batch"], truth: dict[str, Any]) -> Batch:
    """Input bits, then a readout token (id 2), with the label scored at the readout only."""
    readout = torch.full_like(bits[:, :1], 2)
    tokens = torch.cat([bits, readout], 1)
    targets = torch.zeros_like(tokens)
    targets[:, -1] = labels
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, -1] = True
    return Batch(tokens, targets, mask, truth)


def masked_loss(
    logits: Float[Tensor, "batch out_pos d_vocab_out"], batch: Batch, kind: LossKind = "cross_entropy"
) -> Float[Tensor, ""]:
    """The task's loss (`Task.loss_kind`) averaged over scored positions. Unscored targets become
    ignore_index rather than being dropped by boolean indexing, which would cost a device->host sync every step."""
    logits, targets, mask = align(logits, batch)
    if kind != "cross_entropy":
        return real_loss(logits, targets, mask, kind).sum() / mask.sum()
    return F.cross_entropy(logits.flatten(0, 1).float(), torch.where(mask, targets, -100).flatten(), ignore_index=-100)


def squared_error(
    logits: Float[Tensor, "*batch out_pos 1"],
    targets: Float[Tensor, "*batch out_pos"],
    mask: Bool[Tensor, "*batch out_pos"],
) -> Float[Tensor, "*batch out_pos"]:
    """(prediction − target)² at scored positions, 0 elsewhere: the prediction is the model's one output."""
    return (logits[..., 0].float() - targets).square() * mask


def real_loss(
    logits: Float[Tensor, "*batch out_pos 1"],
    targets: Float[Tensor, "*batch out_pos"],
    mask: Bool[Tensor, "*batch out_pos"],
    kind: LossKind,
) -> Float[Tensor, "*batch out_pos"]:
    """The loss of a real-valued prediction (the model's one output) at scored positions, 0 elsewhere:
    "squared_error", (f − y)²; "correlation", 1 − f·y (Damian et al.'s for single-index models: the cross term of
    the squared error, whose f² term a unit-variance f makes a constant)."""
    if kind == "squared_error":
        return squared_error(logits, targets, mask)
    return (1 - logits[..., 0].float() * targets) * mask


def readout_labels(names: tuple[str, ...], tokens: Int[Tensor, "pos"], support: Int[Tensor, "support"]) -> list[str]:
    """Labels for a bits-then-readout sequence: the bit values, the hidden support S starred
    ("1*"), the readout token as "?"; the support is what a sparse-selection head should attend to."""
    on = set(support.tolist())
    labels = [names[t] if 0 <= t < len(names) else str(t) for t in tokens.tolist()]
    return [f"{label}*" if i in on and label != "?" else label for i, label in enumerate(labels)]


def task_generator(seed: int) -> torch.Generator:
    """CPU generator for a task's hidden structure (support sets, truth tables): fixed by the task seed,
    independent of the data stream."""
    return torch.Generator().manual_seed(seed)


def compose_prefix(maps: Int[Tensor, "batch step state"]) -> Int[Tensor, "batch step state"]:
    """maps[b, t] sends each state to its successor at step t; out[:, t] = maps[:, t] ∘ ... ∘ maps[:, 0],
    in log2(step) rounds of gathers (Hillis–Steele scan) instead of one Python iteration per step: the
    same parallel-prefix trick that lets shallow transformers simulate automata."""
    out, shift = maps, 1
    while shift < maps.shape[1]:
        out = torch.cat([out[:, :shift], out[:, shift:].gather(2, out[:, :-shift])], 1)
        shift *= 2
    return out


TASKS: Registry[type[Task]] = Registry("task")
