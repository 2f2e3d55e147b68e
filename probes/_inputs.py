"""The inputs probes read, each drawn from its own generator so it is the same for every probe and
every checkpoint:

- `random`: uniform random tokens from the model's vocabulary, the model's full context (for a model of
  continuous inputs, `d_input`-wide standard normal vectors);
- `data`: a held-out batch of the task (its main evaluation split) — `random` when there is no task;
- `repeated`: a random sequence repeated twice (induction; vectors too for a model of continuous inputs);
- `task:<split>`: a batch of another split of the task (e.g. automata's longer `eval_long`);
- `all`: every input of the task, in the task's fixed order (`Task.enumerate("all")`: modular arithmetic's
  p² pairs), for tasks few enough to list; the batch size and seed do not apply.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any, Optional

import torch

from mechsynth import hooks
from mechsynth.probes._base import ProbeError
from mechsynth.tasks.base import Batch

INPUTS = ("random", "data", "repeated", "task:<split>", "all")


def dims(model: Any) -> tuple[int, int, int, int]:
    """(n_layers, n_heads, d_vocab, n_ctx); no layers or heads for a model without attention."""
    n_layers = hooks.attention_layers(model)
    own = isinstance(getattr(model, "d_vocab", None), int)  # our models; TransformerLens keeps sizes in cfg
    return (
        n_layers,
        model.cfg.n_heads if n_layers else 0,
        model.d_vocab if own else model.cfg.d_vocab,
        model.n_ctx if own else model.cfg.n_ctx,
    )


def vector_width(model: Any, task: Any = None) -> Optional[int]:
    """The width of the vectors `model` reads in place of token ids (continuous inputs), None for token ids:
    the task says it where there is one, else the model (`d_input`, which mechsynth's models carry)."""
    if task is not None:
        return task.spec.d_input
    return getattr(model, "d_input", None)


def split_of(input: str, task: Any) -> Optional[str]:
    """The task split an input draws from (None: not from the task)."""
    if input.startswith("task:"):
        return input[5:]
    return task.main_eval if input == "data" and task is not None else None


def draw(input: str, model: Any, task: Any, batch_size: int, seed: int) -> Batch:
    """The input `input`: its own generator, so every probe and checkpoint sees the same tokens."""
    g = _generator(input, seed)
    _, _, d_vocab, n_ctx = dims(model)
    width = vector_width(model, task)

    def draw_tokens(n: int) -> torch.Tensor:
        if width is not None:
            return torch.randn(batch_size, n, width, generator=g)
        return torch.randint(d_vocab, (batch_size, n), generator=g)

    if input == "random":
        tokens = draw_tokens(n_ctx)
    elif input == "repeated":
        first = draw_tokens(min(n_ctx // 2, 64))
        tokens = torch.cat([first, first], 1)
    elif input == "data" or input.startswith("task:"):
        return _task_batch(task, batch_size, input, seed, split_of(input, task))
    elif input == "all":
        return _all_inputs(task)
    else:
        raise ProbeError(f"unknown probe input {input!r}; allowed: {', '.join(INPUTS)}")
    blank = torch.zeros(tokens.shape[:2], dtype=tokens.dtype)  # no targets to score
    return Batch(tokens, blank, torch.zeros_like(blank, dtype=torch.bool))


@functools.lru_cache(maxsize=4)
def _task_batch(task: Any, batch_size: int, input: str, seed: int, split: str) -> Batch:
    """The task's batch for `draw`, made once: probing a run's checkpoints draws it for every chunk of
    them, and an evaluation batch can cost more than the probes (markov_icl's Bayes predictor)."""
    return task.sample(batch_size, _generator(input, seed), "cpu", split)


@functools.lru_cache(maxsize=4)
def _all_inputs(task: Any) -> Batch:
    """Every input of the task, listed once (as `_task_batch`: probing a run draws it for every chunk)."""
    if task is None:
        raise ProbeError("probe input 'all' lists the task's inputs; pass the task")
    batch = task.enumerate("all")
    if batch is None:
        raise ProbeError(
            f"probe input 'all' lists every input of the task, which task {task.name!r} cannot (it only samples)"
        )
    return batch


def _generator(input: str, seed: int) -> torch.Generator:
    return torch.Generator().manual_seed((zlib.crc32(input.encode()) + seed * 1_000_003) % 2**63)
