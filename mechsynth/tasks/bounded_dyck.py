"""Bounded Dyck languages Dyck_{k,D} (Yao et al. 2021, "Self-attention networks can process bounded hierarchical
languages"; Wen, Li, Liu & Risteski 2023, "Transformers are uninterpretable with myopic methods"): predict the
next bracket of well-nested strings over k bracket types whose nesting never exceeds depth D.

Sequences are prefixes of Yao et al.'s random walk (their DyckPDFA), as in Wen et al.'s setting: with the stack
empty, an open bracket of a uniform type; with it full (depth D), the close matching the top; otherwise an open
(1/2, its type uniform) or the matching close (1/2). A wrong close is never drawn, and the walk never ends (Yao's
END token is redrawn until the minimum length, which a prefix never reaches). Each sequence is START followed by
`length` brackets; the model reads START and the first length − 1 and predicts each next bracket. Splits: `eval`
(the training length) and `eval_long` (`eval_long_length` brackets: length generalisation, Wen et al.'s 400–500).

What is scored: `loss_on = "closes"` (Wen et al.) trains only where the next token is a close, whose type the
stack decides; `"all"` (Yao et al.) every next token, the random opens included. Held-out splits always score the
closes. `close_acc` is Yao et al.'s accuracy: at every position whose stack is non-empty (whatever comes next),
correct when the right close holds more than 0.8 of the probability the model gives to closes.

Wen et al.'s contrastive regulariser (`contrastive` > 0, their `objective: contrastive`): a balanced string
prefixed to a training sequence must not change the model's outputs on it, so training adds `contrastive` × the
mean squared difference of the logits with and without it. Their prefix is (_a^D )_a^D (_b^D )_b^D with one more
pair "(_t )_t" after the d-th open of block t (t, d uniform), one draw per batch; ours one draw per sequence.

Token ids: 0..k−1 the opens, k..2k−1 their closes (type t: t and k + t), 2k START (input only).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, ClassVar, Literal, Optional

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth.config import MAX_CTX, check, check_fields, doc, validates_itself
from mechsynth.tasks.base import TASKS, Batch, Latent, Task, TaskSpec

THRESHOLD = 0.8  # Yao et al.'s closing-bracket accuracy: the right close's share of the closes' probability


@validates_itself
@dataclass(frozen=True)
class BoundedDyckConfig:
    k: int = doc("bracket types", 2, lo=1, hi=128)
    depth: int = doc("D, the deepest nesting allowed: at depth D the next bracket is a close", 4, lo=1, hi=256)
    length: int = doc(
        "brackets per training and `eval` sequence (Wen et al.'s 28); the model reads START and the first length − 1",
        28,
        lo=2,
        hi=MAX_CTX,
    )
    eval_long_length: int = doc(
        "brackets per `eval_long` sequence, ≥ length: length generalisation (Wen et al. test "
        "400–500); the model's context",
        400,
        lo=2,
        hi=MAX_CTX,
    )
    loss_on: Literal["closes", "all"] = doc(
        "training targets: the closes only (Wen et al.: the stack decides them) or every next bracket (Yao et al.)",
        "closes",
    )
    contrastive: float = doc(
        "weight of Wen et al.'s contrastive regulariser: the mean squared change of the logits "
        "when a balanced prefix of 4·depth + 2 brackets is prepended (theirs 0.3); 0: off",
        0.0,
        lo=0,
        hi=1000,
    )

    def __post_init__(self):
        check_fields(self)
        check(
            self.eval_long_length >= self.length,
            "eval_long_length",
            f"must be ≥ length={self.length}, got {self.eval_long_length}",
        )
        check(
            not self.contrastive or self.eval_long_length >= self.length + self.prefix_length,
            "eval_long_length",
            f"must be ≥ length + 4·depth + 2 = {self.length + self.prefix_length} with contrastive > 0 (the "
            f"prefixed training sequences must fit the context), got {self.eval_long_length}",
        )

    @property
    def prefix_length(self) -> int:
        return 4 * self.depth + 2

    context_field: ClassVar[str] = "task.eval_long_length"  # the model's context (mechsynth/training/budget.py)

    def sample_bytes(self, n_seqs: int, split: str) -> tuple[int, int]:
        """(bytes of a batch, peak while sampling it): int64 tokens, targets, depth, match and top, a bool mask and
        nonempty; while sampling, the walk's uniform draws (float32) and types (int64) and the two stacks."""
        T = self.eval_long_length if split == "eval_long" else self.length
        kept = n_seqs * T * (5 * 8 + 2)
        return kept, kept + n_seqs * (T * 12 + 2 * (self.depth + 1) * 8)


def dyck_truth(
    depth: Int[Tensor, "batch pos"], match: Int[Tensor, "batch pos"], top: Int[Tensor, "batch pos"]
) -> dict[str, Any]:
    """Batch.truth of bounded_dyck, at input positions (0 is START): `depth` [batch pos], the stack's depth after
    reading the token (the close of an open at depth d reads d − 1); `match` [batch pos], where
    the stack is non-empty, the position of the open on its top — the bracket the next close must match — else −1;
    `top` [batch pos], that open's type (0..k−1), 0 where the stack is empty; `nonempty` [batch pos], True where
    the stack is non-empty (match ≥ 0)."""
    return {"depth": depth, "match": match, "top": top, "nonempty": match >= 0}


def walk(
    batch_size: int, brackets: int, k: int, D: int, generator: torch.Generator, device: Any
) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, "batch pos"], Int[Tensor, "batch pos"]]:
    """`brackets` steps of the walk for each sequence: (bracket ids, the depth after each, the position of the open
    then on top, −1 where the stack is empty), positions counted from 1 (START is 0). One vectorised step per
    position; the draws are made up front, so the same generator state gives the same batch."""
    u = torch.rand(batch_size, brackets, generator=generator, device=device)
    types = torch.randint(k, (batch_size, brackets), generator=generator, device=device)
    # Slot j holds the open at depth j + 1 (its type, its position); slot D takes the writes of closes, unread.
    stack = torch.zeros(batch_size, D + 1, dtype=torch.long, device=device)
    where = torch.zeros(batch_size, D + 1, dtype=torch.long, device=device)
    depth = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
    seq, depths, match = (torch.empty(batch_size, brackets, dtype=torch.long, device=device) for _ in range(3))
    for i in range(brackets):
        close = (depth == D) | ((depth > 0) & (u[:, i : i + 1] < 0.5))
        top = (depth - 1).clamp_min(0)
        seq[:, i : i + 1] = torch.where(close, k + stack.gather(1, top), types[:, i : i + 1])
        slot = torch.where(close, D, depth)
        stack.scatter_(1, slot, types[:, i : i + 1])
        where.scatter_(1, slot, torch.full_like(slot, i + 1))
        depth = torch.where(close, depth - 1, depth + 1)
        depths[:, i : i + 1] = depth
        match[:, i : i + 1] = torch.where(depth > 0, where.gather(1, (depth - 1).clamp_min(0)), -1)
    return seq, depths, match


@TASKS.register("bounded_dyck")
class BoundedDyck(Task):
    Config = BoundedDyckConfig
    splits = ("train", "eval", "eval_long")
    truth_keys = ("depth", "match", "top", "nonempty")  # dyck_truth

    @property
    def latents(self) -> tuple[Latent, ...]:  # type: ignore[override]
        """The stack's depth at every position, and the type of the open on its top where it is non-empty."""
        return (
            Latent(
                "depth",
                "categorical",
                "depth",
                self.cfg.depth + 1,
                about="the stack's depth, 0..D: what Yao et al.'s first layer counts and Wen et al. probe for",
            ),
            Latent(
                "top",
                "categorical",
                "top",
                self.cfg.k,
                where="nonempty",
                about="the type of the open on top of the stack, which the next close must match (Yao et al.)",
            ),
        )

    @property
    def start(self) -> int:
        return 2 * self.cfg.k

    @property
    def spec(self) -> TaskSpec:
        letters = [chr(ord("a") + t) if t < 26 else str(t) for t in range(self.cfg.k)]
        brackets = tuple(f"({a}" for a in letters) + tuple(f"{a})" for a in letters)
        return TaskSpec(
            d_vocab=2 * self.cfg.k + 1,
            d_vocab_out=2 * self.cfg.k,
            n_ctx=self.cfg.eval_long_length,
            token_names=brackets + ("START",),
            target_names=brackets,
        )

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        self.check_split(split)
        cfg = self.cfg
        n = cfg.eval_long_length if split == "eval_long" else cfg.length
        seq, depths, match = walk(batch_size, n, cfg.k, cfg.depth, generator, device)
        start = torch.full((batch_size, 1), self.start, dtype=torch.long, device=device)
        tokens, targets = torch.cat([start, seq[:, :-1]], 1), seq
        mask = (
            torch.ones_like(targets, dtype=torch.bool)
            if split == "train" and cfg.loss_on == "all"
            else targets >= cfg.k
        )
        depth = torch.cat([torch.zeros_like(start), depths[:, :-1]], 1)
        top = torch.cat([torch.full_like(start, -1), match[:, :-1]], 1)
        top_type = torch.where(top >= 0, tokens.gather(1, top.clamp_min(0)), 0)  # the open's type: its token id
        truth = dyck_truth(depth, top, top_type)
        if split == "train" and cfg.contrastive:  # drawn last, so a run without it samples as before
            truth["prefix"] = balanced_prefix(batch_size, cfg.k, cfg.depth, generator, device)
        return Batch(tokens, targets, mask, truth)

    @property
    def regularised(self) -> bool:
        return self.cfg.contrastive > 0

    def regulariser(
        self, forward: Callable[[Tensor], Tensor], batch: Batch, logits: Float[Tensor, "batch pos d_vocab_out"]
    ) -> Optional[Float[Tensor, ""]]:
        """Wen et al.'s contrastive term: `contrastive` × the mean squared difference between the logits of the
        training sequences and of the same sequences after their balanced prefix (both differentiated)."""
        if not self.cfg.contrastive:
            return None
        prefixed = forward(torch.cat([batch.truth["prefix"], batch.tokens], -1))[..., -logits.shape[-2] :, :]
        return self.cfg.contrastive * F.mse_loss(prefixed.float(), logits.float())

    def metrics(self, logits: Float[Tensor, "batch out_pos d_vocab_out"], batch: Batch) -> dict[str, float]:
        """Loss and accuracy on the scored targets, and `close_acc` (Yao et al.'s closing-bracket accuracy)."""
        out = super().metrics(logits, batch)
        scored = open_positions(batch)[:, -logits.shape[1] :]
        out["close_acc"] = float(close_correct(logits, batch, self.cfg.k)[scored].float().mean())
        return out


def balanced_prefix(
    batch_size: int, k: int, D: int, generator: torch.Generator, device: Any
) -> Int[Tensor, "batch prefix_pos"]:
    """Wen et al.'s balanced prefix for each sequence: D opens of type a then their D closes, the same for type b
    (a, b = 0, 1; both 0 when k = 1), with a pair "(_t )_t" inserted after the d-th open of block t, t ∈ {0, 1} and
    d ∈ [0, D) uniform. Depth never exceeds D, and the string leaves the stack empty."""
    a, b = 0, min(1, k - 1)
    base = torch.tensor([a] * D + [k + a] * D + [b] * D + [k + b] * D, dtype=torch.long, device=device)
    block = torch.randint(2, (batch_size, 1), generator=generator, device=device)
    at = block * 2 * D + torch.randint(D, (batch_size, 1), generator=generator, device=device)  # the pair's place
    t = torch.where(block == 0, a, b)
    i = torch.arange(4 * D + 2, device=device)
    shifted = base[(i - 2 * (i > at)).clamp(0, 4 * D - 1)]
    return torch.where(i == at, t, torch.where(i == at + 1, k + t, shifted))


def open_positions(batch: Batch) -> Bool[Tensor, "batch pos"]:
    """Where the stack is non-empty: the positions Yao et al.'s accuracy scores."""
    return batch.truth["match"] >= 0


def close_correct(
    logits: Float[Tensor, "batch out_pos d_vocab_out"], batch: Batch, k: int
) -> Bool[Tensor, "batch out_pos"]:
    """Whether the close matching the top of the stack holds more than THRESHOLD of the closes' probability (False
    where the stack is empty, which has no right close)."""
    p = logits.shape[1]  # the last p positions (as base.align scores a model that answers at the last few only)
    match = batch.truth["match"]
    right = batch.tokens.gather(1, match.clamp_min(0))[:, -p:].clamp_max(k - 1)  # the open's type (START: unscored)
    share = logits[..., k : 2 * k].float().softmax(-1).gather(-1, right[..., None])[..., 0]
    return (share > THRESHOLD) & (match[:, -p:] >= 0)
