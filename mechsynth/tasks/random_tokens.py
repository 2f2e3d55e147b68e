"""Random tokens: uniform random sequences, each token's target the next one — no structure to learn.

The task of a model brought from elsewhere whose task mechsynth does not know (a monitor or an import
without a task): it sizes the model's inputs, and the probes that need no ground truth (previous-token,
duplicate-token and induction heads) read it. Trained on, it is the null for formation steps: the loss
cannot fall below log(d_vocab), and no circuit has a reason to form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

import torch

from mechsynth.config import MAX_CTX, check_fields, doc, validates_itself
from mechsynth.tasks.base import TASKS, Batch, Task, TaskSpec


@validates_itself
@dataclass(frozen=True)
class RandomTokensConfig:
    d_vocab: int = doc("tokens in the vocabulary", 10, lo=2, hi=2**20)
    n_ctx: int = doc("sequence length", 32, lo=2, hi=MAX_CTX)
    d_vocab_out: Optional[int] = doc(
        "output classes; unset = d_vocab (targets ≥ it are drawn again: only the sizes matter here)",
        None,
        lo=1,
        hi=2**20,
    )

    context_field: ClassVar[str] = "task.n_ctx"  # for the memory estimate (mechsynth/training/budget.py)

    def __post_init__(self):
        check_fields(self)


@TASKS.register("random_tokens")
class RandomTokens(Task):
    Config = RandomTokensConfig

    @property
    def spec(self) -> TaskSpec:
        n_out = self.cfg.d_vocab_out or self.cfg.d_vocab
        return TaskSpec(
            d_vocab=self.cfg.d_vocab,
            d_vocab_out=n_out,
            n_ctx=self.cfg.n_ctx,
            token_names=tuple(map(str, range(self.cfg.d_vocab))),
            target_names=tuple(map(str, range(n_out))),
        )

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        self.check_split(split)
        n_out = self.cfg.d_vocab_out or self.cfg.d_vocab
        seq = torch.randint(self.cfg.d_vocab, (batch_size, self.cfg.n_ctx + 1), generator=generator, device=device)
        targets = seq[:, 1:] % n_out  # a target for every position; its value carries no information either way
        return Batch(seq[:, :-1], targets, torch.ones_like(targets, dtype=torch.bool))
