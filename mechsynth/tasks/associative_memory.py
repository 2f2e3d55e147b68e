"""Associative memory (Nichani, Lee, Bietti 2024): store N input -> output associations x -> f*(x) in the weights.

The first result of "Understanding factual recall in transformers via associative memories".

Their memories read a fixed random embedding e_x of the input and score each output y by a fixed random
output embedding u_y: linear, F(x) = argmax_y u_yᵀ W e_x, or MLP, argmax_y u_yᵀ V σ(W e_x) (the
`linear_memory` and `mlp_memory` kinds, mechsynth/models/memory.py). The number of associations they
store to 99% accuracy grows with their parameter count (d² and md, up to log factors).

Sequence: the single input token x (ids 0..N-1), the target f*(x) (a class 0..M-1) scored at that one
position; no readout token, so a memory that reads the whole sequence reads exactly e_x.

The map (their mlp_sweep.py: f*(i) = ⌊i·M/N⌋, every output used ⌊N/M⌋ or ⌈N/M⌉ times, M = N unless fixed):
`mapping = "balanced"` assigns those outputs to the inputs in an order shuffled by the task seed (with random
embeddings theirs and ours are the same in distribution; with M = N it is a random permutation);
`"random"` draws each f*(x) uniformly from the M outputs. Inputs are drawn with p(x) ∝ (x + 1)^(−zipf) in
training (their linear_AM.ipynb weights the loss by such `probs`; all their runs use uniform, zipf = 0).

Splits: "train" (x ~ p) and "eval" (x uniform). Every input is trained on: the question is how many are
stored, not generalization, so "eval" is all N inputs, listed (`enumerate`) and evaluated exactly: eval/acc
is the fraction stored (their "stored": accuracy ≥ 0.99, in full-batch training with Adam). The training
split is listed too where inputs are uniform (`train.data = "fixed"` then trains on all N, full batch when
batch_size ≥ N: their setup); under Zipf it only samples, since a listed set is trained on uniformly.

Metrics: loss and acc; with zipf > 0 also `p_acc`, the accuracy weighted by p(x) (their accuracy in
linear_AM.ipynb): exact on the listed eval split, where each input appears once.

Shape names beyond base.py's: `input` (N, the inputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Literal, Optional

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.config import MAX_SEED, check, check_fields, doc, validates_itself
from mechsynth.tasks.base import TASKS, Batch, Task, TaskSpec, align, task_generator

# Inputs and outputs are vocabulary sizes; every input is listed for evaluation. Far beyond the paper's
# sweeps (N up to ~10**4).
MAX_TOKENS = 2**20


@validates_itself
@dataclass(frozen=True)
class AssociativeMemoryConfig:
    inputs: int = doc(
        "N, the number of input tokens (associations to store)",
        256,
        lo=1,
        hi=MAX_TOKENS,
        why="every input is listed for evaluation",
    )
    outputs: Optional[int] = doc(
        "M, the number of output classes; unset = N (their runs)", None, lo=1, hi=MAX_TOKENS, why="a vocabulary"
    )
    mapping: Literal["balanced", "random"] = doc(
        "f*: 'balanced' (theirs: f*(i) = floor(i·M/N) on inputs shuffled by the seed, a permutation when M = N) "
        "or 'random' (each f*(x) uniform on the M outputs)",
        "balanced",
    )
    zipf: float = doc("training inputs are drawn with p(x) ∝ (x + 1)**-zipf; 0 = uniform (all their runs)", 0.0)
    seed: int = doc("seed of f*", 0, lo=0, hi=MAX_SEED, why="torch seeds are 64-bit")

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first
        check(self.zipf >= 0, "zipf", f"must be ≥ 0, got {self.zipf}; allowed: 0 (uniform) or more")

    @property
    def n_outputs(self) -> int:
        """M: `outputs`, or N where unset."""
        return self.outputs if self.outputs is not None else self.inputs

    # For the memory estimate (mechsynth/training/budget.py). The sequence is always one token: N sizes the task.
    context_field: ClassVar[str] = "task.inputs"

    @property
    def fixed_bytes(self) -> int:
        """f* (int64) and p(x) (float32) for every input."""
        return self.inputs * 12

    def sample_bytes(self, n_seqs: int, split: str) -> tuple[int, int]:
        """(bytes of `sample(n_seqs, split=split)`'s batch, peak bytes while making it)."""
        batch = n_seqs * (17 + 8)  # int64 token and target, bool mask; the input as truth (int64)
        return batch, batch + n_seqs * 8 + self.inputs * 8  # the draws; multinomial's cumulative p(x)


def balanced_map(n_inputs: int, n_outputs: int, g: torch.Generator) -> Int[Tensor, "input"]:
    """Their f*(i) = ⌊i·M/N⌋ (each output ⌊N/M⌋ or ⌈N/M⌉ times), given to the inputs in a random order."""
    outputs = torch.arange(n_inputs) * n_outputs // n_inputs
    return outputs[torch.randperm(n_inputs, generator=g)]


def input_probs(n_inputs: int, zipf: float) -> Float[Tensor, "input"]:
    """p(x) ∝ (x + 1)^(−zipf), normalized (uniform for zipf = 0)."""
    p = torch.arange(1, n_inputs + 1, dtype=torch.float64) ** -zipf
    return (p / p.sum()).float()


def memory_truth(
    x: Int[Tensor, "batch"], mapping: Int[Tensor, "input"], probs: Float[Tensor, "input"]
) -> dict[str, Any]:
    """Batch.truth of associative_memory: `input` [batch], each sequence's input x (its only token);
    `mapping` [input], f* for every input (target = mapping[input]); `probs` [input], the training
    distribution p(x) of every input."""
    return {"input": x, "mapping": mapping, "probs": probs}


@TASKS.register("associative_memory")
class AssociativeMemory(Task):
    Config = AssociativeMemoryConfig
    truth_keys = ("input", "mapping", "probs")  # memory_truth

    def __init__(self, cfg: AssociativeMemoryConfig):
        super().__init__(cfg)
        N, M, g = cfg.inputs, cfg.n_outputs, task_generator(cfg.seed)
        mapping = balanced_map(N, M, g) if cfg.mapping == "balanced" else torch.randint(M, (N,), generator=g)
        self._tables: dict[torch.device, tuple[Tensor, Tensor]] = {
            torch.device("cpu"): (mapping, input_probs(N, cfg.zipf))
        }

    @property
    def mapping(self) -> Int[Tensor, "input"]:
        """f* on the CPU: mapping[x] is the output class of input x."""
        return self._tables[torch.device("cpu")][0]

    @cached_property
    def spec(self) -> TaskSpec:  # type: ignore[override]  # (cached: up to millions of token names)
        """Inputs are named `x0`, `x1`, ...; outputs `y0`, `y1`, ..."""
        N, M = self.cfg.inputs, self.cfg.n_outputs
        return TaskSpec(
            d_vocab=N,
            d_vocab_out=M,
            n_ctx=1,
            token_names=tuple(f"x{i}" for i in range(N)),
            target_names=tuple(f"y{i}" for i in range(M)),
        )

    def tables(self, device: torch.device | str) -> tuple[Int[Tensor, "input"], Float[Tensor, "input"]]:
        """(f*, p(x)) on `device`, copied there once."""
        device = torch.empty(0, device=device).device  # "cuda" and "cuda:0" are one device: one copy
        if device not in self._tables:
            self._tables[device] = tuple(t.to(device) for t in self._tables[torch.device("cpu")])  # type: ignore[assignment]
        return self._tables[device]

    def batch(self, x: Int[Tensor, "batch"]) -> Batch:
        """The one-token sequences of inputs `x`, each scored on f*(x)."""
        mapping, probs = self.tables(x.device)
        tokens = x[:, None]
        return Batch(
            tokens, mapping[x][:, None], torch.ones_like(tokens, dtype=torch.bool), memory_truth(x, mapping, probs)
        )

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        """ "train": x ~ p(x) (uniform for zipf = 0); "eval": x uniform. With replacement."""
        self.check_split(split)
        if split == "train" and self.cfg.zipf > 0:
            x = torch.multinomial(self.tables(device)[1], batch_size, replacement=True, generator=generator)
        else:
            x = torch.randint(self.cfg.inputs, (batch_size,), generator=generator, device=device)
        return self.batch(x)

    def enumerate(self, split: str) -> Optional[Batch]:
        """Every input once, in order 0..N-1, as one batch on the CPU: for "eval" and "all", and for "train"
        where its inputs are uniform (under Zipf a listed training set would be trained on uniformly: None)."""
        if split not in (*self.splits, "all"):
            raise ValueError(f"split: {split!r} is not a split of {self.name}; allowed: {', '.join(self.splits)}, all")
        if split == "train" and self.cfg.zipf > 0:
            return None
        return self.batch(torch.arange(self.cfg.inputs))

    def metrics(self, logits: Float[Tensor, "batch out_pos d_vocab_out"], batch: Batch) -> dict[str, float]:
        """With zipf > 0, adds p_acc = Σ p(x)·correct / Σ p(x) over the batch's sequences: the probability that
        an input drawn from p is recalled, exactly on a batch that holds each input once (the listed eval)."""
        out = super().metrics(logits, batch)
        if self.cfg.zipf > 0:
            logits, targets, _ = align(logits, batch)
            correct = (logits.argmax(-1) == targets)[:, -1].float()  # (one scored position per sequence)
            p = batch.truth["probs"][batch.truth["input"]].to(correct.device)
            out["p_acc"] = float((p * correct).sum() / p.sum())
        return out
