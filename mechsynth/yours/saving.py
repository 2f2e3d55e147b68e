"""Checkpoints that say what they are: `save_checkpoint` stores the weights beside the model's architecture, task
and the logits of a fixed input, and `verify_saved` checks an import of them against those logits.

A module of its own because it is the writing side of the format `importing` reads (ENTRY, CHECK_TOKENS): a
training loop saves with it and needs none of the reading, and the check of those logits belongs with them.
"""

from __future__ import annotations

import json
import math
import os
import typing
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn as nn
from safetensors.torch import save_file
from torch import Tensor

from mechsynth import models
from mechsynth.config import check, show, to_dict
from mechsynth.errors import ConfigError
from mechsynth.models import ModelKind, TransformerConfig, external, tl_compat
from mechsynth.tasks.base import Task
from mechsynth.yours.architecture import FIELD
from mechsynth.yours.monitor import check_int

ENTRY = "mechsynth"  # the key (torch) or metadata entry (safetensors) where save_checkpoint stores the architecture
CHECK_TOKENS = 8  # positions of the fixed input whose logits a saved checkpoint keeps, to verify its import


@torch.no_grad()
def _check_logits(model: nn.Module, d_vocab: int, n_ctx: int) -> Optional[Tensor]:
    """The model's logits on a fixed input (seeded tokens, first CHECK_TOKENS positions, first 64 outputs): stored
    with a checkpoint so that its import can show the rebuilt model computes what the saved one did. None for a
    model that does not read tokens."""
    tokens = torch.randint(d_vocab, (1, min(n_ctx, CHECK_TOKENS)), generator=torch.Generator().manual_seed(0))
    try:
        device = next(model.parameters()).device
        return model(tokens.to(device))[..., :64].detach().float().cpu()
    except Exception:  # noqa: BLE001 - a model of vectors, or of another signature: nothing to compare
        return None


def _tl_cfg(model: nn.Module, kind: ModelKind, d_vocab: int, d_vocab_out: int, n_ctx: int) -> dict[str, Any]:
    """The model's TransformerLens config fields, as JSON keeps them: its own cfg (a TL model) or the fields of the
    TL model mechsynth would build for it."""
    cfg = (
        model.cfg.to_dict()
        if tl_compat.is_hooked_transformer(model)
        else (
            tl_compat._common(kind, d_vocab, d_vocab_out, n_ctx)
            if isinstance(kind, TransformerConfig) and kind.transformer_lens
            else {}
        )
    )
    return {k: v for k, v in cfg.items() if v is None or isinstance(v, (bool, int, float, str))}


@typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
def save_checkpoint(model: nn.Module, path: Path | str, step: int, task: Task | None = None) -> Path:
    """Save `model` (a TransformerLens transformer or a model mechsynth built) at training step `step` so that
    `mechsynth import` reads it without being told anything: the weights in HookedTransformer's layout beside a
    "mechsynth" entry with the model's config, its TransformerLens config fields, the step, the task (if given)
    and the logits of a fixed input, which import compares with the rebuilt model's. A .safetensors path keeps the
    entry in the file's metadata; any other suffix is a torch file {"state_dict": ..., "mechsynth": ...}."""
    check(isinstance(model, nn.Module), "model", f"expected a torch module, got {show(model)}")
    check(isinstance(path, (str, os.PathLike)), "path", f"expected a file path, got {show(path)}")
    check_int(step, "step", 0)
    check(task is None or isinstance(task, Task), "task", f"expected a mechsynth task or None, got {show(task)}")
    kind, weights = external.kind_of(model), external.weights_of(model)
    d_vocab, d_vocab_out, n_ctx = external.sizes(model)
    d_vocab_out = d_vocab_out if d_vocab_out is not None else (task.spec.d_vocab_out if task is not None else None)
    entry: dict[str, Any] = {
        "version": 1,
        "step": step,
        "model": models.to_dict(kind),
        "sizes": {"d_vocab": d_vocab, "d_vocab_out": d_vocab_out, "n_ctx": n_ctx},
        "tl_cfg": _tl_cfg(model, kind, d_vocab, d_vocab_out or d_vocab, n_ctx),
        "task": None if task is None else {"name": task.name, **to_dict(task.cfg)},
    }
    entry = json.loads(json.dumps(entry))  # plain JSON types: torch.load(weights_only=True) refuses numpy's floats
    logits = _check_logits(model, d_vocab, n_ctx)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".safetensors":  # metadata holds strings only: the entry as JSON, the check logits as tensors
        extra = {} if logits is None else {f"{ENTRY}.check_logits": logits.contiguous()}
        save_file({**weights, **extra}, str(path), metadata={ENTRY: json.dumps(entry)})
    else:
        torch.save(
            {"state_dict": weights, ENTRY: {**entry, **({} if logits is None else {"check_logits": logits})}}, path
        )
    return path


def verify_saved(model: nn.Module, entry: dict[str, Any], check_logits: Optional[Tensor], where: Path) -> None:
    """Refuse an import whose rebuilt model computes differently from the model save_checkpoint saved."""
    if check_logits is None:
        return
    sizes = entry.get("sizes", {})
    mine = _check_logits(model, sizes.get("d_vocab", 1), sizes.get("n_ctx", CHECK_TOKENS))
    diff = math.inf if mine is None or mine.shape != check_logits.shape else float((mine - check_logits).abs().max())
    if not diff <= external.TOLERANCE * max(1.0, float(check_logits.abs().max())):
        raise ConfigError(
            FIELD,
            f"{where.name}: the imported model computes differently from the model saved (max "
            f"|Δlogit| {diff:.2g} on the stored check input); it was saved by another version "
            "of mechsynth or TransformerLens that this one does not read alike",
        )


__all__ = ["save_checkpoint", "verify_saved"]
