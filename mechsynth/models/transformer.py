"""The transformer kind: a hooked transformer; vocabulary, context and output sizes come from the task.

It trains FusedTransformer (mechsynth/models/fused.py) and is probed as TransformerLens's own model
with the same weights (tl_compat), also on a continuous task's vectors (a linear read-in, W_E, in the
embedding's place) — except with learned relative positions, which TransformerLens does
not have: that model is probed as itself (FusedTransformer carries TransformerLens's hook names).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, Optional

import torch
import torch.nn as nn

from mechsynth.config import MAX_CTX, MAX_SEED, MAX_WIDTH, check, check_fields, doc, validates_itself
from mechsynth.models.base import FLOAT, MODEL_KINDS, ModelKind
from mechsynth.models.fused import FusedTransformer
from mechsynth.models.tl_compat import check_supported, hooked_transformer, load_weights
from mechsynth.tasks.base import TaskSpec


@MODEL_KINDS.register("transformer")
@validates_itself
@dataclass(frozen=True)
class TransformerConfig(ModelKind):
    reads_vectors: ClassVar[bool] = True  # continuous tasks: a linear read-in (W_E) in the embedding's place
    n_layers: int = doc("transformer layers", 2, lo=1, hi=256)
    n_heads: int = doc("attention heads per layer", 1, lo=1, hi=1024)
    d_model: int = doc("residual stream width", 64, lo=1, hi=MAX_WIDTH)
    d_head: Optional[int] = doc("per-head width; unset = d_model // n_heads", None, lo=1, hi=MAX_WIDTH)
    d_mlp: Optional[int] = doc("MLP hidden width; unset = 4 * d_model", None, lo=1, hi=2**20)
    attn_only: bool = doc("no MLP layers (the induction-head papers' models)", False)
    positional: Literal["standard", "rotary", "shortformer", "relative", "none"] = doc(
        "learned absolute, rotary, shortformer (absolute added to queries and keys only; TransformerLens 3.x), none "
        "(NoPE: the causal mask alone tells positions apart; Wen et al. 2023's Dyck models), or "
        "learned relative (Edelman et al. 2024: scores q·(k_j + r_{i-j}), one learned r per layer, head and distance)",
        "standard",
    )
    normalization: Literal["LN", "LNPre", "none"] = doc("LayerNorm with weights, without weights, or none", "LN")
    act_fn: Literal["relu", "gelu", "gelu_new", "silu"] = doc("MLP activation", "relu")
    n_ctx: Optional[int] = doc("context length; unset = the task's longest sequence", None, lo=1, hi=MAX_CTX)
    init_seed: int = doc(
        "seed of the initial weights",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit; seeds side by side add their index",
    )
    init_range: Optional[float] = doc(
        "std of the normal weight init; unset = 0.8/sqrt(d_model) as in TransformerLens", None
    )
    freeze_embeddings: bool = doc(
        "W_E, W_pos, W_U and b_U stay at their initial values (Nichani et al. 2024 train only attention and the MLP, "
        "over random embeddings: the init's rows are near-orthogonal, of norm ~0.8; init_range = 1/sqrt(d_model) "
        "gives their norm ~1)",
        False,
    )

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first
        check(
            self.init_range is None or self.init_range > 0, "init_range", f"must be > 0 or unset, got {self.init_range}"
        )
        check(
            self.d_head is not None or self.d_model % self.n_heads == 0,
            "d_head",
            f"unset needs d_model ({self.d_model}) divisible by n_heads ({self.n_heads}); set d_head",
        )
        if self.positional == "rotary":
            check(self.head_dim % 2 == 0, "d_head", f"rotary needs an even d_head, got {self.head_dim}")

    @property
    def transformer_lens(self) -> bool:
        return self.positional != "relative"

    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def mlp_dim(self) -> int:
        return self.d_mlp if self.d_mlp is not None else 4 * self.d_model

    def context_length(self, spec: TaskSpec) -> int:
        n_ctx = self.n_ctx if self.n_ctx is not None else spec.n_ctx
        check(
            n_ctx >= spec.n_ctx,
            "model.n_ctx",
            f"{n_ctx} is shorter than the task's sequences ({spec.n_ctx} tokens); allowed: ≥ {spec.n_ctx} or unset",
        )
        return n_ctx

    def describe(self) -> str:
        return (
            f"{self.n_layers}-layer{' attention-only' if self.attn_only else ''} transformer, "
            f"{self.n_heads} heads, d_model {self.d_model}{', frozen embeddings' if self.freeze_embeddings else ''}"
        )

    def validate(self, spec: TaskSpec) -> None:
        if self.transformer_lens:
            check_supported(self.positional)
        self.context_length(spec)

    def build(self, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
        return FusedTransformer(self, spec.d_vocab, spec.d_vocab_out, self.context_length(spec), n_models, spec.d_input)

    def input_weights(self) -> Optional[str]:
        # rotary and relative positions have no weights facing absolute positions
        return "W_pos" if self.positional in ("standard", "shortformer") else None

    def hooked(self, model: nn.Module, device: str | torch.device) -> nn.Module:
        if not self.transformer_lens:
            return super().hooked(model, device)
        sd = {k: v.detach() for k, v in model.state_dict().items()}
        return hooked_transformer(
            self, model.embed.W_E.shape[0], model.unembed.W_U.shape[1], model.n_ctx, sd, device, d_input=model.d_input
        )

    def reload(self, hooked: nn.Module, model: nn.Module) -> nn.Module:
        if not self.transformer_lens:
            return super().reload(hooked, model)
        return load_weights(hooked, self, {k: v.detach() for k, v in model.state_dict().items()})

    # ---- the memory estimate ---------------------------------------------------------------------

    def params(self, spec: TaskSpec) -> tuple[int, int]:
        """(parameters in the blocks, in the embeddings, unembedding and final norm) of one model."""
        dm, h, dh, L = self.d_model, self.n_heads, self.head_dim, self.n_layers
        norm = 2 * dm if self.normalization == "LN" else 0  # LNPre and none have no weights
        n_ctx = self.n_ctx if self.n_ctx is not None else spec.n_ctx
        attn = 4 * h * dm * dh + 3 * h * dh + dm  # W_Q, W_K, W_V, W_O; b_Q, b_K, b_V; b_O
        attn += h * n_ctx * dh if self.positional == "relative" else 0  # W_rel
        mlp = 0 if self.attn_only else norm + 2 * dm * self.mlp_dim + self.mlp_dim + dm
        pos = n_ctx * dm if self.input_weights() else 0  # W_pos
        return L * (norm + attn + mlp), spec.d_vocab * dm + pos + norm + dm * spec.d_vocab_out + spec.d_vocab_out

    def param_count(self, spec: TaskSpec) -> int:
        return sum(self.params(spec))

    def activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        # Per position and layer: the norms' inputs and outputs, Q, K, V, the attention output (and its
        # copy laid out for W_O), the MLP's hidden layer before and after its activation.
        T, V = spec.n_ctx, spec.d_vocab_out
        dm, hd, L = self.d_model, self.n_heads * self.head_dim, self.n_layers
        norm = 2 * dm if self.normalization != "none" else dm
        layer = norm + 5 * hd + (0 if self.attn_only else norm + 2 * self.mlp_dim)
        ends = dm + norm + 3 * V  # embedding; final norm, logits, log-softmax and its gradient
        pattern = batch * self.n_heads * T * T * FLOAT
        relative = (
            2 * L * pattern if self.positional == "relative" else 0
        )  # each layer's q·r, before and after the gather
        return batch * T * FLOAT * (L * layer + ends) + pattern + relative, pattern

    def eval_activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        # A few tensors of the widest layer at a time, the logits and the metrics' copies of them.
        T = spec.n_ctx
        widest = max(self.d_model, 3 * self.n_heads * self.head_dim, 0 if self.attn_only else self.mlp_dim)
        pattern = batch * self.n_heads * T * T * FLOAT
        return batch * T * FLOAT * (3 * widest + 3 * spec.d_vocab_out) + pattern, pattern

    def weight_field(self, spec: TaskSpec, context_field: str) -> str:
        # The layer count for a deep model, else the width whose matrices are largest (W_pos: the context).
        blocks, embeddings = self.params(spec)
        if blocks < embeddings:
            n_ctx = self.n_ctx if self.n_ctx is not None else spec.n_ctx
            if self.input_weights() and 2 * n_ctx * self.d_model > embeddings:
                return "model.n_ctx" if self.n_ctx is not None else context_field
            return "model.d_model"
        if self.n_layers > 1:
            return "model.n_layers"
        attention = self.n_heads * self.d_model * self.head_dim
        mlp = 0 if self.attn_only else self.d_model * self.mlp_dim
        if attention >= mlp:
            return "model.d_head" if self.d_head is not None else "model.d_model"
        return "model.d_mlp" if self.d_mlp is not None else "model.d_model"
