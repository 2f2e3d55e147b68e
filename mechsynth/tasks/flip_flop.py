"""Flip-flop language modeling (Liu, Ash, Goel, Krishnamurthy & Zhang 2023, "Exposing attention glitches with
flip-flop language modeling"): remember one bit across a sequence of instructions, ignoring what lies between.

A sequence is T/2 (instruction, bit) pairs over the alphabet {w, r, i, 0, 1}: `w b` writes bit b, `r b` reads
— b is the bit of the most recent write — and `i b` is noise to ignore. The first instruction is a write and
the last a read; the others are drawn i.i.d. with probabilities (p_w, p_r, p_i) = ((1 − p_i)/2, (1 − p_i)/2,
p_i), FFL(p_i) in the paper's shorthand; written and ignored bits are uniform. As in the paper's reported
("clean") setting, the model is trained and judged on the read bits only, the deterministic tokens
(`loss_on = "all"`: every next token, their "noisy" setting). Splits: `eval` (the training p_i; the paper's
FFL(0.8)), `eval_sparse` (p_i = 0.98: reads and writes rare, so the write a read needs lies far back) and
`eval_dense` (p_i = 0.1: writes and reads close together), their in-distribution and two out-of-distribution
tests. `error` is their test error: the share of wrong reads; `seq_error` the share of sequences with one.
`diverse`: their best remedy (R4), training on an equal mixture of the three distributions.

The flip-flop *automaton* of Liu et al. 2022 (tasks/automata.py) is the same memory read as a state sequence;
here the reads are queries inside a language, as the 2023 paper poses it.

Token ids: 0 w, 1 r, 2 i, 3 the bit 0, 4 the bit 1. Inputs are the first T − 1 tokens, targets the next ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth.config import MAX_CTX, check, check_fields, doc, validates_itself
from mechsynth.tasks.base import TASKS, Batch, Latent, Task, TaskSpec, align

W, R, I, BIT0 = 0, 1, 2, 3  # token ids; the bit b is BIT0 + b


@validates_itself
@dataclass(frozen=True)
class FlipFlopConfig:
    length: int = doc(
        "T, tokens per sequence: T/2 (instruction, bit) pairs; the paper's 512",
        64,
        lo=4,
        hi=MAX_CTX + 1,
        why="the model reads the first T − 1 tokens",
    )
    p_ignore: float = doc(
        "p_i of the training sequences (and of `eval`): each instruction between the first write and "
        "the last read is an ignore with this probability, else a write or a read, equally likely",
        0.8,
    )
    sparse_p_ignore: float = doc("p_i of the `eval_sparse` split (the paper's long-range test)", 0.98)
    dense_p_ignore: float = doc("p_i of the `eval_dense` split (the paper's short-range test)", 0.1)
    diverse: bool = doc(
        "train on an equal mixture of FFL(p_ignore), FFL(sparse_p_ignore) and FFL(dense_p_ignore) "
        "(the paper's remedy of more diverse data, App. B.3)",
        False,
    )
    loss_on: Literal["reads", "all"] = doc(
        "training targets: the read bits (the paper's reported, clean setting) or every next token (its noisy setting)",
        "reads",
    )

    def __post_init__(self):
        check_fields(self)
        check(self.length % 2 == 0, "length", f"must be even (instruction, bit pairs), got {self.length}")
        for name in ("p_ignore", "sparse_p_ignore", "dense_p_ignore"):
            value = getattr(self, name)
            check(0.0 <= value <= 1.0, name, f"must be in [0, 1], got {value}")

    context_field: ClassVar[str] = "task.length"  # for the memory estimate (mechsynth/training/budget.py)


def flip_flop_truth(
    instr: Int[Tensor, "batch pair"], last_write: Int[Tensor, "batch pair"], bits: Int[Tensor, "batch pair"]
) -> dict[str, Any]:
    """Batch.truth of flip_flop, at input positions (pos = 2·pair for an instruction, 2·pair + 1 for its bit):
    `source` [batch pos], where the input token predicts a read bit (the `r`), the position of the bit that read
    copies (the most recent write's), −1 elsewhere; `written` [batch pos], True at every written bit; `memory`
    [batch pos], the bit (0 or 1) of the most recent write the inputs up to the position show — the bit a read
    there would return — 0 at position 0, where no written bit is shown yet; `memory_defined` [batch pos], True
    from position 1 on (the first instruction is a write)."""
    batch, pairs = instr.shape
    pos = 2 * pairs - 1
    source = torch.full((batch, 2 * pairs), -1, dtype=torch.long, device=instr.device)
    source[:, 0::2] = torch.where(instr == R, 2 * last_write + 1, -1)
    written = torch.zeros((batch, 2 * pairs), dtype=torch.bool, device=instr.device)
    written[:, 1::2] = instr == W
    stored = bits.gather(1, last_write)  # after each pair's bit: the last write's bit so far
    memory = torch.zeros((batch, 2 * pairs), dtype=torch.long, device=instr.device)
    memory[:, 1::2] = stored
    memory[:, 2::2] = stored[:, :-1]  # an instruction does not show its own bit yet
    defined = torch.ones((batch, pos), dtype=torch.bool, device=instr.device)
    defined[:, 0] = False
    return {
        "source": source[:, :pos],
        "written": written[:, :pos],
        "memory": memory[:, :pos],
        "memory_defined": defined,
    }


@TASKS.register("flip_flop")
class FlipFlop(Task):
    Config = FlipFlopConfig
    splits = ("train", "eval", "eval_sparse", "eval_dense")
    truth_keys = ("source", "written", "memory", "memory_defined")  # flip_flop_truth
    latents = (
        Latent(
            "memory",
            "categorical",
            "memory",
            2,
            where="memory_defined",
            about="the bit of the most recent write: the one state a flip-flop automaton keeps (Liu et al.)",
        ),
    )

    @property
    def spec(self) -> TaskSpec:
        names = ("w", "r", "i", "0", "1")
        return TaskSpec(d_vocab=5, d_vocab_out=5, n_ctx=self.cfg.length - 1, token_names=names, target_names=names)

    def p_ignore(self, split: str) -> float:
        return {"eval_sparse": self.cfg.sparse_p_ignore, "eval_dense": self.cfg.dense_p_ignore}.get(
            split, self.cfg.p_ignore
        )

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        self.check_split(split)
        cfg, pairs = self.cfg, self.cfg.length // 2
        p_i = torch.full((batch_size, 1), self.p_ignore(split), device=device)
        if split == "train" and cfg.diverse:  # each sequence from one of the three, uniformly
            which = torch.randint(3, (batch_size, 1), generator=generator, device=device)
            p_i = torch.tensor([cfg.p_ignore, cfg.sparse_p_ignore, cfg.dense_p_ignore], device=device)[which]
        u = torch.rand(batch_size, pairs, generator=generator, device=device)
        # u < p_i: ignore; then the rest of [0, 1) split evenly between write and read
        instr = torch.where(u < p_i, I, torch.where(u < p_i + (1 - p_i) / 2, W, R))
        instr[:, 0], instr[:, -1] = W, R
        bits = torch.randint(2, (batch_size, pairs), generator=generator, device=device)
        index = torch.arange(pairs, device=device).expand(batch_size, -1)
        last_write = torch.where(instr == W, index, -1).cummax(1).values  # pair 0 is a write: always ≥ 0
        bits = torch.where(instr == R, bits.gather(1, last_write), bits)
        seq = torch.stack([instr, BIT0 + bits], 2).flatten(1)  # [batch, T]: instruction, bit, instruction, ...
        tokens, targets = seq[:, :-1], seq[:, 1:]
        reads = torch.zeros_like(tokens, dtype=torch.bool)
        reads[:, 0::2] = instr == R  # the input `r` at 2j predicts the read bit at 2j + 1
        mask = torch.ones_like(reads) if split == "train" and cfg.loss_on == "all" else reads
        return Batch(tokens, targets, mask, flip_flop_truth(instr, last_write, bits))

    def metrics(self, logits: Float[Tensor, "batch out_pos d_vocab_out"], batch: Batch) -> dict[str, float]:
        """Loss and accuracy on the scored targets; `error`, the share of wrong reads (the paper's test error),
        and `seq_error`, the share of sequences with at least one."""
        out = super().metrics(logits, batch)
        logits, targets, _ = align(logits, batch)
        reads = read_positions(batch)[:, -logits.shape[1] :]
        wrong = (logits.argmax(-1) != targets) & reads
        out["error"] = (wrong.sum() / reads.sum()).item()
        out["seq_error"] = wrong.any(1).float().mean().item()
        return out


def read_positions(batch: Batch) -> Bool[Tensor, "batch pos"]:
    """Where the target is a read bit: the input positions whose token is the `r` instruction."""
    return batch.truth["source"] >= 0
