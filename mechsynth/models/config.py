"""ModelConfig: the architecture; vocabulary, context and output sizes come from the task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from mechsynth.config import MAX_CTX, MAX_SEED, MAX_WIDTH, check, check_fields, doc


@dataclass(frozen=True)
class ModelConfig:
    kind: Literal["transformer", "mlp"] = doc("a hooked transformer, or the 2-layer MLP baseline of the parity papers", "transformer")
    n_layers: int = doc("transformer layers", 2, lo=1, hi=256)
    n_heads: int = doc("attention heads per layer", 1, lo=1, hi=1024)
    d_model: int = doc("residual stream width", 64, lo=1, hi=MAX_WIDTH)
    d_head: Optional[int] = doc("per-head width; unset = d_model // n_heads", None, lo=1, hi=MAX_WIDTH)
    d_mlp: Optional[int] = doc("MLP hidden width; unset = 4 * d_model", None, lo=1, hi=2**20)
    attn_only: bool = doc("no MLP layers (the induction-head papers' models)", False)
    positional: Literal["standard", "rotary", "shortformer"] = doc("learned absolute, rotary, or shortformer (absolute added to queries and keys only; TransformerLens 3.x)", "standard")
    normalization: Literal["LN", "LNPre", "none"] = doc("LayerNorm with weights, without weights, or none", "LN")
    act_fn: Literal["relu", "gelu", "gelu_new", "silu", "poly"] = doc("MLP activation; 'poly' is x**poly_degree (MLP baseline only)", "relu")
    poly_degree: int = doc("k in the x**k activation", 2, lo=1, hi=64, why="x**k overflows float32 long before")
    width: int = doc("hidden width r of the MLP baseline", 100, lo=1, hi=2**24)
    n_ctx: Optional[int] = doc("context length; unset = the task's longest sequence", None, lo=1, hi=MAX_CTX)
    init_seed: int = doc("seed of the initial weights", 0, lo=0, hi=MAX_SEED,
                         why="torch seeds are 64-bit; seeds side by side add their index")
    init_range: Optional[float] = doc("std of the normal weight init; unset = 0.8/sqrt(d_model) as in TransformerLens (transformer) or PyTorch's default (MLP)", None)

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first
        check(self.init_range is None or self.init_range > 0, "init_range", f"must be > 0 or unset, got {self.init_range}")
        if self.kind == "transformer":
            check(self.act_fn != "poly", "act_fn", "'poly' is for kind='mlp'; allowed: relu, gelu, gelu_new, silu")
            check(self.d_head is not None or self.d_model % self.n_heads == 0, "d_head",
                  f"unset needs d_model ({self.d_model}) divisible by n_heads ({self.n_heads}); set d_head")
            if self.positional == "rotary":
                check(self.head_dim % 2 == 0, "d_head", f"rotary needs an even d_head, got {self.head_dim}")
        else:
            check(self.act_fn in ("relu", "poly"), "act_fn", f"{self.act_fn!r} is not allowed for kind='mlp'; allowed: 'relu', 'poly'")

    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def mlp_dim(self) -> int:
        return self.d_mlp if self.d_mlp is not None else 4 * self.d_model
