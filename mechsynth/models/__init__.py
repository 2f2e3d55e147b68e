"""Models: the fused transformer we train, the MLP baseline, and hooked TransformerLens views of them."""

from __future__ import annotations

from typing import Optional

import torch.nn as nn

from mechsynth.config import ConfigError, check
from mechsynth.models.config import ModelConfig
from mechsynth.models.mlp import MLPBaseline
from mechsynth.models.tl_compat import TL_VERSION, check_supported, hooked_transformer, load_weights
from mechsynth.models.transformer import FusedTransformer
from mechsynth.tasks.base import TaskSpec


def context_length(cfg: ModelConfig, spec: TaskSpec) -> int:
    n_ctx = cfg.n_ctx if cfg.n_ctx is not None else spec.n_ctx
    check(n_ctx >= spec.n_ctx, "model.n_ctx",
          f"{n_ctx} is shorter than the task's sequences ({spec.n_ctx} tokens); allowed: ≥ {spec.n_ctx} or unset")
    return n_ctx


def validate(cfg: ModelConfig, spec: TaskSpec) -> None:
    """Every check that needs both the model and the task, so bad input fails before any work."""
    if cfg.kind == "mlp":
        if spec.token_values is None:
            raise ConfigError("model.kind", "'mlp' needs a task with numeric inputs (sparse_parity, sparse_boolean); allowed here: 'transformer'")
    else:
        check_supported(cfg.positional)
        context_length(cfg, spec)


def build(cfg: ModelConfig, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
    """The trainable model for a task: FusedTransformer or MLPBaseline, initialised from cfg.init_seed.
    `n_models=M`: M of them side by side, initialised from init_seed, init_seed + 1, ..."""
    validate(cfg, spec)
    if cfg.kind == "mlp":
        return MLPBaseline(cfg, spec.n_ctx - 1, spec.d_vocab_out, spec.token_values, n_models)
    return FusedTransformer(cfg, spec.d_vocab, spec.d_vocab_out, context_length(cfg, spec), n_models)


def hooked(model: nn.Module, device="cpu") -> nn.Module:
    """The model as TransformerLens sees it: a HookedTransformer / TransformerBridge with the same
    weights for a FusedTransformer; the MLP baseline is already a HookedRootModule."""
    if isinstance(model, FusedTransformer):
        emb, unemb = model.embed.W_E, model.unembed.W_U
        sd = {k: v.detach() for k, v in model.state_dict().items()}
        return hooked_transformer(model.cfg, emb.shape[0], unemb.shape[1], model.n_ctx, sd, device)
    return model.to(device).eval()


__all__ = ["FusedTransformer", "MLPBaseline", "ModelConfig", "TL_VERSION", "build", "hooked", "load_weights",
           "validate"]
