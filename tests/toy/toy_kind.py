"""A model kind in one file: one attention layer read straight out by the unembedding, as a
HookedRootModule, so TransformerLens's run_with_cache and hooks work on it and attention probes apply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth import hooks
from mechsynth.config import MAX_SEED, check_fields, doc
from mechsynth.models.base import FLOAT, MODEL_KINDS, ModelKind
from mechsynth.models.tl_compat import HookedRootModule, HookPoint
from mechsynth.tasks.base import TaskSpec


@MODEL_KINDS.register("toy_attention")
@dataclass(frozen=True)
class ToyAttentionConfig(ModelKind):
    n_heads: int = doc("attention heads", 2, lo=1, hi=64)
    d_model: int = doc("residual width", 16, lo=1, hi=4096)
    init_seed: int = doc("seed of the initial weights", 0, lo=0, hi=MAX_SEED)

    def __post_init__(self):
        check_fields(self)

    def describe(self) -> str:
        return f"one attention layer, {self.n_heads} heads, d_model {self.d_model}"

    def build(self, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
        return ToyAttention(self, spec, n_models)

    def input_weights(self) -> Optional[str]:
        return "W_pos"

    def param_count(self, spec: TaskSpec) -> int:
        return self.d_model * (spec.d_vocab + spec.n_ctx + 4 * self.d_model + spec.d_vocab_out)

    def activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        pattern = batch * self.n_heads * spec.n_ctx**2 * FLOAT
        return batch * spec.n_ctx * FLOAT * (6 * self.d_model + 3 * spec.d_vocab_out) + 2 * pattern, pattern

    def eval_activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        return self.activation_bytes(spec, batch)

    def weight_field(self, spec: TaskSpec, context_field: str) -> str:
        return "model.d_model"


class ToyAttention(HookedRootModule):
    """With `n_models=M` every weight has a leading model axis, so M models run side by side (one model's
    weights have none: checkpoints hold one model each)."""

    def __init__(self, cfg: ToyAttentionConfig, spec: TaskSpec, n_models: Optional[int]):
        super().__init__()
        self.cfg, self.n_models, self.d_vocab, self.n_ctx = cfg, n_models, spec.d_vocab, spec.n_ctx
        lead, d, h = () if n_models is None else (n_models,), cfg.d_model, cfg.n_heads
        g = torch.Generator().manual_seed(cfg.init_seed)
        init = lambda *shape: nn.Parameter(torch.randn(*lead, *shape, generator=g) / shape[-2] ** 0.5)  # noqa: E731
        self.W_E, self.W_pos, self.W_U = init(spec.d_vocab, d), init(spec.n_ctx, d), init(d, spec.d_vocab_out)
        self.W_Q, self.W_K, self.W_V = init(h, d, d // h), init(h, d, d // h), init(h, d, d // h)
        # The hook sits where TransformerLens's is, under the name the probes ask for.
        self.blocks = nn.ModuleList([nn.ModuleDict({"attn": nn.ModuleDict({"hook_pattern": HookPoint()})})])
        assert hooks.attn_pattern(0) == "blocks.0.attn.hook_pattern"
        self.setup()

    def forward(self, tokens: Int[Tensor, "... batch pos"]) -> Float[Tensor, "... batch pos d_vocab_out"]:
        W_E, W_pos, W_Q, W_K, W_V, W_U = (
            p if self.n_models else p[None] for p in (self.W_E, self.W_pos, self.W_Q, self.W_K, self.W_V, self.W_U)
        )
        m, pos = W_E.shape[0], tokens.shape[-1]
        tokens = tokens.expand(m, *tokens.shape[-2:]) if tokens.ndim == 2 else tokens
        x = torch.stack([W_E[i][tokens[i]] for i in range(m)]) + W_pos[:, None, :pos]
        q, k, v = (torch.einsum("mbpd,mhde->mbhpe", x, W) for W in (W_Q, W_K, W_V))
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        scores = scores.masked_fill(torch.ones(pos, pos, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        pattern = self.blocks[0]["attn"]["hook_pattern"](scores.softmax(-1).flatten(0, 1)).view(scores.shape)
        z = (pattern @ v).transpose(2, 3).flatten(-2)  # heads concatenated: [m, batch, pos, d_model]
        logits = (x + z) @ W_U[:, None]
        return logits if self.n_models else logits[0]
