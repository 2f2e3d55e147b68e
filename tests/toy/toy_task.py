"""A task in one file: recall the first token. Every later position must output the token at position 0.

Its truth is `source`, the position to recall, which the toy probe reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from mechsynth.config import MAX_SEED, check_fields, doc
from mechsynth.tasks import TASKS, Batch, Task, TaskSpec


@dataclass(frozen=True)
class FirstTokenConfig:
    length: int = doc("tokens per sequence", 8, lo=2, hi=64)
    vocab: int = doc("distinct tokens", 5, lo=2, hi=64)
    seed: int = doc("unused: the task has no hidden structure", 0, lo=0, hi=MAX_SEED)

    def __post_init__(self):
        check_fields(self)

    context_field: ClassVar[str] = "task.length"


@TASKS.register("toy_first_token")
class FirstToken(Task):
    Config = FirstTokenConfig
    truth_keys = ("source",)

    @property
    def spec(self) -> TaskSpec:
        names = tuple(chr(ord("a") + i) for i in range(self.cfg.vocab))
        return TaskSpec(
            d_vocab=self.cfg.vocab,
            d_vocab_out=self.cfg.vocab,
            n_ctx=self.cfg.length,
            token_names=names,
            target_names=names,
        )

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        self.check_split(split)
        tokens = torch.randint(self.cfg.vocab, (batch_size, self.cfg.length), generator=generator, device=device)
        mask = torch.ones_like(tokens, dtype=torch.bool)
        mask[:, 0] = False
        source = torch.zeros(batch_size, dtype=torch.long, device=device)
        return Batch(tokens, tokens[:, :1].expand_as(tokens).clone(), mask, {"source": source})
