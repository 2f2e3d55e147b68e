"""The transformer we train: bare PyTorch with fused attention, TransformerLens's parameter layout.

TransformerLens computes attention unfused so `hook_pattern` exists, which costs ~1.5x in training
speed on small models. We train this module instead; its `state_dict()` has exactly
HookedTransformer's keys and shapes (`blocks.0.attn.W_Q`: [head_index, d_model, d_head], ...), so
the same weights load into a hooked TransformerLens model for probing (see `tl_compat`, and the
test that checks both give the same logits).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.models.config import ModelConfig

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(*shape))


class _Holder(nn.Module):
    """A module whose only job is to give parameters TransformerLens's names (`embed.W_E`, ...)."""

    def __init__(self, **params: nn.Parameter):
        super().__init__()
        for name, p in params.items():
            self.register_parameter(name, p)


def rotary_tables(n_ctx: int, dim: int, base: float = 10000.0) -> tuple[Tensor, Tensor]:
    """cos/sin [n_ctx, dim] for adjacent-pair rotary, the layout TL 4 uses (TL 3 with rotary_adjacent_pairs)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    angles = torch.outer(torch.arange(n_ctx).float(), inv_freq).repeat_interleave(2, dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x: Float[Tensor, "batch head pos d_head"], cos: Tensor, sin: Tensor) -> Tensor:
    rot = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * cos + rot * sin


class FusedTransformer(nn.Module):
    def __init__(self, cfg: ModelConfig, d_vocab: int, d_vocab_out: int, n_ctx: int):
        super().__init__()
        self.cfg, self.n_ctx = cfg, n_ctx
        dm, h, dh, L = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.n_layers
        self.embed = _Holder(W_E=_param(d_vocab, dm))
        if cfg.positional != "rotary":
            self.pos_embed = _Holder(W_pos=_param(n_ctx, dm))
        else:
            cos, sin = rotary_tables(n_ctx, dh)
            self.register_buffer("rotary_cos", cos, persistent=False)
            self.register_buffer("rotary_sin", sin, persistent=False)
        ln = cfg.normalization == "LN"
        blocks = []
        for _ in range(L):
            b = nn.Module()
            if ln:
                b.ln1 = _Holder(w=nn.Parameter(torch.ones(dm)), b=_param(dm))
            b.attn = _Holder(W_Q=_param(h, dm, dh), W_K=_param(h, dm, dh), W_V=_param(h, dm, dh),
                             W_O=_param(h, dh, dm), b_Q=_param(h, dh), b_K=_param(h, dh),
                             b_V=_param(h, dh), b_O=_param(dm))
            if not cfg.attn_only:
                if ln:
                    b.ln2 = _Holder(w=nn.Parameter(torch.ones(dm)), b=_param(dm))
                b.mlp = _Holder(W_in=_param(dm, cfg.mlp_dim), b_in=_param(cfg.mlp_dim),
                                W_out=_param(cfg.mlp_dim, dm), b_out=_param(dm))
            blocks.append(b)
        self.blocks = nn.ModuleList(blocks)
        if ln:
            self.ln_final = _Holder(w=nn.Parameter(torch.ones(dm)), b=_param(dm))
        self.unembed = _Holder(W_U=_param(dm, d_vocab_out), b_U=_param(d_vocab_out))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """TransformerLens's 'gpt2' init: weights ~ N(0, 0.8/sqrt(d_model)), biases 0, norms 1."""
        std = self.cfg.init_range or 0.8 / math.sqrt(self.cfg.d_model)
        g = torch.Generator().manual_seed(self.cfg.init_seed)
        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf.startswith("W_"):
                p.copy_(torch.randn(p.shape, generator=g) * std)

    def _norm(self, x: Tensor, holder: nn.Module | None) -> Tensor:
        if self.cfg.normalization == "none":
            return x
        w = holder.w if holder is not None else None
        b = holder.b if holder is not None else None
        return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_vocab_out"]:
        cfg = self.cfg
        seq = tokens.shape[1]
        if seq > self.n_ctx:
            raise ValueError(f"input has {seq} positions but the model's n_ctx is {self.n_ctx}")
        x = F.embedding(tokens, self.embed.W_E)  # its backward is much faster than indexing's
        pos = None
        if cfg.positional == "standard":
            x = x + self.pos_embed.W_pos[:seq]
        elif cfg.positional == "shortformer":
            pos = self.pos_embed.W_pos[:seq]
        for block in self.blocks:
            x = x + self._attention(self._norm(x, getattr(block, "ln1", None)), block.attn, pos, seq)
            if not cfg.attn_only:
                m = block.mlp
                hidden = ACTIVATIONS[cfg.act_fn](self._norm(x, getattr(block, "ln2", None)) @ m.W_in + m.b_in)
                x = x + hidden @ m.W_out + m.b_out
        x = self._norm(x, getattr(self, "ln_final", None))
        return x @ self.unembed.W_U + self.unembed.b_U

    def _attention(self, x: Tensor, a: nn.Module, pos: Tensor | None, seq: int) -> Tensor:
        b, h, dh = x.shape[0], self.cfg.n_heads, self.cfg.head_dim
        # One [d_model, 3 * head_index * d_head] matmul for Q, K and V (einsum over the per-head
        # layout would broadcast x across heads); re-laying out the small weights is cheap.
        w = torch.cat([a.W_Q, a.W_K, a.W_V], 0).permute(1, 0, 2).reshape(x.shape[-1], 3 * h * dh)
        bias = torch.cat([a.b_Q, a.b_K, a.b_V], 0).reshape(3 * h * dh)
        if pos is None:
            qkv = torch.addmm(bias, x.reshape(-1, x.shape[-1]), w)
        else:  # shortformer: positions inform where to attend, never what is moved
            qkv = torch.cat([torch.addmm(bias[: 2 * h * dh], (x + pos).reshape(-1, x.shape[-1]), w[:, : 2 * h * dh]),
                             torch.addmm(bias[2 * h * dh :], x.reshape(-1, x.shape[-1]), w[:, 2 * h * dh :])], -1)
        q, k, v = qkv.view(b, seq, 3, h, dh).permute(2, 0, 3, 1, 4)
        if self.cfg.positional == "rotary":
            cos, sin = self.rotary_cos[:seq], self.rotary_sin[:seq]
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [batch, head, pos, d_head]
        z = z.transpose(1, 2).reshape(b * seq, h * dh)
        return torch.addmm(a.b_O, z, a.W_O.reshape(h * dh, -1)).view(b, seq, -1)
