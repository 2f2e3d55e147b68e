"""The disentangled kind: the "disentangled transformer" of Nichani, Damian & Lee 2024 ("How Transformers Learn
Causal Structure with Gradient Descent"), their reference code's `CatFormer` (github
eshnich/transformers-learn-causal-structure, catformer.py), in PyTorch.

h_0 = one-hot(token) ⊕ one-hot(position), width d_0 = d_vocab + n_ctx. Layer l has H heads, each one matrix
A (d_{l-1} x d_{l-1}): scores h_i^T A h_j, causal softmax, output Σ_j p_ij h_j, with no scaling and no value or
output matrices; the layer appends its heads' outputs (head-major) to its input, h_l = h_{l-1} ⊕ z_1 ⊕ ... ⊕ z_H,
so d_l = d_{l-1}·(1 + H). No MLP, no LayerNorm. A linear readout W_U (d_L x d_vocab_out, no bias) gives the
logits. As in their code every A and the readout start at zero (`init_range` draws them instead).

Not theirs: they read out at the last position only (their tasks score only it); we read out at every position,
so a task that scores every position (causal_icl with target = "next") trains it too. Where only the last
position is scored the loss, and so training, is theirs.

It is equivalently an attention-only transformer with d_model = d_L, d_head = d_{L-1}, no LayerNorm, each layer's
stream a prefix of the final one: W_Q = sqrt(d_head)·A, W_K = W_V = the identity on the layer's input, W_O the
identity into the head's slot, W_E and W_pos one-hot. The weight properties (W_E, W_pos, W_Q, W_K, W_V, W_O, W_U)
give that transformer's weights in TransformerLens's layout, so weight-based probes (induction's copying score)
read it; tests/test_disentangled.py checks that TransformerLens's own model with them gives the same logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.config import MAX_CTX, MAX_SEED, MAX_WIDTH, check, check_fields, doc, validates_itself
from mechsynth.errors import ConfigError
from mechsynth.models.base import FLOAT, MODEL_KINDS, ModelKind
from mechsynth.models.fused import _Holder, hooked_here
from mechsynth.models.tl_compat import HookedRootModule, HookPoint
from mechsynth.tasks.base import TaskSpec


@MODEL_KINDS.register("disentangled")
@validates_itself
@dataclass(frozen=True)
class DisentangledConfig(ModelKind):
    n_layers: int = doc("attention layers (theirs: 2)", 2, lo=1, hi=16, why="the width doubles per layer at least")
    n_heads: int = doc("heads per layer, each appending a copy of the layer's width (theirs: 1)", 1, lo=1, hi=64)
    n_ctx: Optional[int] = doc(
        "context length (the one-hot positions); unset = the task's longest sequence", None, lo=1, hi=MAX_CTX
    )
    init_seed: int = doc(
        "seed of the initial weights (used only with init_range)",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit; seeds side by side add their index",
    )
    init_range: Optional[float] = doc("std of a normal init of A and the readout; unset = zero, as in the paper", None)

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first
        check(
            self.init_range is None or self.init_range > 0, "init_range", f"must be > 0 or unset, got {self.init_range}"
        )
        check(
            (1 + self.n_heads) ** self.n_layers <= MAX_WIDTH,
            "n_layers",
            f"the width grows by (1 + n_heads)**n_layers = {1 + self.n_heads}**{self.n_layers}, past {MAX_WIDTH}; "
            "allowed: fewer layers or heads",
        )

    def context_length(self, spec: TaskSpec) -> int:
        n_ctx = self.n_ctx if self.n_ctx is not None else spec.n_ctx
        check(
            n_ctx >= spec.n_ctx,
            "model.n_ctx",
            f"{n_ctx} is shorter than the task's sequences ({spec.n_ctx} tokens); allowed: ≥ {spec.n_ctx} or unset",
        )
        return n_ctx

    def widths(self, spec: TaskSpec) -> list[int]:
        """[d_0, ..., d_L]: the stream's width entering each layer, then the readout's."""
        d = [spec.d_vocab + self.context_length(spec)]
        for _ in range(self.n_layers):
            d.append(d[-1] * (1 + self.n_heads))
        return d

    def describe(self) -> str:
        return f"{self.n_layers}-layer disentangled transformer, {self.n_heads} heads"

    def validate(self, spec: TaskSpec) -> None:
        width = self.widths(spec)[-1]
        if width > MAX_WIDTH:
            raise ConfigError(
                "model.n_layers",
                f"the final width (d_vocab + n_ctx)·(1 + n_heads)**n_layers is {width}, "
                f"past {MAX_WIDTH}; allowed: fewer layers or heads, or a shorter context",
            )

    def build(self, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
        return DisentangledTransformer(self, spec.d_vocab, spec.d_vocab_out, self.context_length(spec), n_models)

    # ---- the memory estimate ---------------------------------------------------------------------

    def param_count(self, spec: TaskSpec) -> int:
        d = self.widths(spec)
        return sum(self.n_heads * w * w for w in d[:-1]) + d[-1] * spec.d_vocab_out

    def activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        # Per position and layer: the input (kept by the matmuls), x·A for every head, the heads' outputs and
        # the attention's own saved tensors (its output, and a row of log-sum-exp per head); then the readout's
        # input and the logits three times (logits, log-softmax, gradient).
        d, H, T = self.widths(spec), self.n_heads, spec.n_ctx
        per_pos = sum(w + 3 * H * w + 2 * H for w in d[:-1]) + d[-1] + 3 * spec.d_vocab_out
        pattern = batch * H * T * T * FLOAT
        return batch * T * FLOAT * per_pos + pattern, pattern

    def eval_activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        # The last layer's input, its x·A and heads' outputs, its output, the logits and the metrics' copies.
        d, H, T = self.widths(spec), self.n_heads, spec.n_ctx
        pattern = batch * H * T * T * FLOAT
        return batch * T * FLOAT * (d[-2] + 2 * H * d[-2] + d[-1] + 3 * spec.d_vocab_out) + pattern, pattern

    def weight_field(self, spec: TaskSpec, context_field: str) -> str:
        # The width compounds over layers, then heads; with one of each it is d_vocab + n_ctx.
        if self.n_layers > 1:
            return "model.n_layers"
        if self.n_heads > 1:
            return "model.n_heads"
        return "model.n_ctx" if self.n_ctx is not None else context_field


class DisentangledTransformer(HookedRootModule):
    """The disentangled transformer (module docstring), a HookedRootModule with TransformerLens's hook names:
    blocks.{l}.hook_resid_pre [batch, pos, d_{l-1}], blocks.{l}.attn.hook_attn_scores and .hook_pattern
    [batch, head_index, query_pos, key_pos], blocks.{l}.attn.hook_z [batch, pos, head_index, d_head = d_{l-1}],
    blocks.{l}.hook_resid_post [batch, pos, d_l]. Weights: blocks.{l}.attn.W_A [head_index, d_{l-1}, d_{l-1}]
    and unembed.W_U [d_L, d_vocab_out].

    `n_models=M` runs M independent models side by side as FusedTransformer does: every weight gets a leading
    model axis, model i starts like a single model with init_seed + i, and hooks see [M * batch, ...]."""

    def __init__(
        self, cfg: DisentangledConfig, d_vocab: int, d_vocab_out: int, n_ctx: int, n_models: Optional[int] = None
    ):
        super().__init__()
        self.cfg, self.d_vocab, self.d_vocab_out, self.n_ctx, self.n_models = cfg, d_vocab, d_vocab_out, n_ctx, n_models
        lead = () if n_models is None else (n_models,)
        self.widths = [d_vocab + n_ctx]
        blocks = []
        for _ in range(cfg.n_layers):
            d = self.widths[-1]
            b = _Holder({}, ("hook_resid_pre", "hook_resid_post"))
            b.attn = _Holder(
                {"W_A": nn.Parameter(torch.zeros(*lead, cfg.n_heads, d, d))},
                ("hook_attn_scores", "hook_pattern", "hook_z"),
            )
            blocks.append(b)
            self.widths.append(d * (1 + cfg.n_heads))
        self.blocks = nn.ModuleList(blocks)
        self.unembed = _Holder({"W_U": nn.Parameter(torch.zeros(*lead, self.widths[-1], d_vocab_out))})
        self.reset_parameters()
        self.setup()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Zero, as in the paper; with init_range every weight ~ N(0, init_range), model i of a side-by-side stack
        drawing exactly what a single model with init_seed + i draws."""
        if self.cfg.init_range is None:
            for p in self.parameters():
                p.zero_()
            return
        for i in range(self.n_models or 1):
            g = torch.Generator().manual_seed(self.cfg.init_seed + i)
            for p in self.parameters():
                target = p if self.n_models is None else p[i]
                target.copy_(torch.randn(target.shape, generator=g) * self.cfg.init_range)

    def _hook(self, hp: HookPoint, x: Tensor) -> Tensor:
        return hp(x) if hooked_here(hp) else x

    def forward(self, tokens: Int[Tensor, "*#n_models batch pos"]) -> Float[Tensor, "*#n_models batch pos d_vocab_out"]:
        """tokens [batch, pos] -> logits [batch, pos, d_vocab_out]. Side by side, tokens [batch, pos] are read by
        every model and tokens [n_models, batch, pos] give each model its own; logits are then
        [n_models, batch, pos, d_vocab_out]."""
        m, seq = self.n_models or 1, tokens.shape[-1]
        if seq > self.n_ctx:
            raise ValueError(f"input has {seq} positions but the model's n_ctx is {self.n_ctx}")
        tokens = tokens.expand(m, *tokens.shape[-2:]) if tokens.ndim == 2 else tokens
        b = tokens.shape[1]
        positions = F.one_hot(torch.arange(seq, device=tokens.device), self.n_ctx).float()
        x = torch.cat([F.one_hot(tokens, self.d_vocab).float(), positions.expand(m, b, seq, self.n_ctx)], -1)
        x = x.view(m * b, seq, -1)
        for block in self.blocks:
            x = self._hook(block.hook_resid_pre, x)
            z = self._attention(x, block.attn)
            x = self._hook(block.hook_resid_post, torch.cat([x, z.flatten(-2)], -1))
        W_U = self.unembed.W_U if self.n_models else self.unembed.W_U[None]
        logits = torch.bmm(x.view(m, b * seq, -1), W_U).view(m, b, seq, -1)
        return logits if self.n_models else logits[0]

    def _attention(
        self, x: Float[Tensor, "batch pos d_model"], a: nn.Module
    ) -> Float[Tensor, "batch pos head_index d_head"]:
        """Each head's Σ_j softmax_j(x_i A x_j) x_j over keys j ≤ i (d_model = d_head: the layer's input width)."""
        mb, seq, d = x.shape
        m, H = self.n_models or 1, self.cfg.n_heads
        A = a.W_A if self.n_models else a.W_A[None]  # [n_models, head_index, d, d]
        # x·A for every head in one matmul per model: [n_models, batch * pos, head_index * d]
        q = torch.bmm(x.view(m, -1, d), A.transpose(1, 2).reshape(m, d, H * d))
        q = q.view(mb, seq, H, d).transpose(1, 2)  # [batch, head_index, query_pos, d]
        kv = x[:, None].expand(mb, H, seq, d)
        if hooked_here(a.hook_pattern) or hooked_here(a.hook_attn_scores):
            mask = torch.full((seq, seq), float("-inf"), device=x.device).triu(1)
            scores = self._hook(a.hook_attn_scores, q @ kv.transpose(-1, -2) + mask)
            z = self._hook(a.hook_pattern, scores.softmax(-1)) @ kv
        else:
            z = F.scaled_dot_product_attention(q, kv, kv, is_causal=True, scale=1.0)
        return self._hook(a.hook_z, z.transpose(1, 2))

    # ---- the equivalent transformer's weights, in TransformerLens's layout --------------------------

    def _stack(self, per_layer: list[Tensor]) -> Tensor:
        return torch.stack(per_layer, 0 if self.n_models is None else 1)

    def _lead(self) -> tuple[int, ...]:
        return () if self.n_models is None else (self.n_models,)

    def _embedding(self, rows: int, start: int) -> Float[Tensor, "*n_models rows d_model"]:
        w = torch.zeros(*self._lead(), rows, self.widths[-1], device=self.unembed.W_U.device)
        w[..., torch.arange(rows), start + torch.arange(rows)] = 1.0
        return w

    def _identities(self, into_slot: bool) -> Float[Tensor, "*n_models layer head_index d_x d_y"]:
        """W_V (each layer's input, read into d_head) or W_O (d_head written into the head's slot)."""
        H, D, dh = self.cfg.n_heads, self.widths[-1], self.widths[-2]
        out = torch.zeros(
            *self._lead(),
            self.cfg.n_layers,
            H,
            dh if into_slot else D,
            D if into_slot else dh,
            device=self.unembed.W_U.device,
        )
        for layer, d in enumerate(self.widths[:-1]):
            for h in range(H):
                r = torch.arange(d)
                if into_slot:
                    out[..., layer, h, r, d * (1 + h) + r] = 1.0
                else:
                    out[..., layer, h, r, r] = 1.0
        return out

    @property
    def W_E(self) -> Float[Tensor, "*n_models d_vocab d_model"]:
        return self._embedding(self.d_vocab, 0)

    @property
    def W_pos(self) -> Float[Tensor, "*n_models n_ctx d_model"]:
        return self._embedding(self.n_ctx, self.d_vocab)

    @property
    def W_Q(self) -> Float[Tensor, "*n_models layer head_index d_model d_head"]:
        D, dh = self.widths[-1], self.widths[-2]
        out = []
        for b, d in zip(self.blocks, self.widths):
            out.append(F.pad(b.attn.W_A, (0, dh - d, 0, D - d)) * math.sqrt(dh))
        return self._stack(out)

    @property
    def W_K(self) -> Float[Tensor, "*n_models layer head_index d_model d_head"]:
        return self._identities(into_slot=False)

    @property
    def W_V(self) -> Float[Tensor, "*n_models layer head_index d_model d_head"]:
        return self._identities(into_slot=False)

    @property
    def W_O(self) -> Float[Tensor, "*n_models layer head_index d_head d_model"]:
        return self._identities(into_slot=True)

    @property
    def W_U(self) -> Float[Tensor, "*n_models d_model d_vocab_out"]:
        return self.unembed.W_U

    def transformer_state_dict(self) -> dict[str, Tensor]:
        """The equivalent attention-only transformer (d_model = d_L, d_head = d_{L-1}, no LayerNorm) as
        HookedTransformer's state dict, biases zero; for a single model (n_models unset)."""
        if self.n_models is not None:
            raise ValueError("transformer_state_dict is for a single model; this one holds n_models side by side")
        H, D, dh = self.cfg.n_heads, self.widths[-1], self.widths[-2]
        sd = {
            "embed.W_E": self.W_E,
            "pos_embed.W_pos": self.W_pos,
            "unembed.W_U": self.W_U.detach(),
            "unembed.b_U": torch.zeros(self.d_vocab_out),
        }
        for layer, (q, k, v, o) in enumerate(zip(self.W_Q, self.W_K, self.W_V, self.W_O)):
            sd |= {f"blocks.{layer}.attn.{n}": w for n, w in (("W_Q", q), ("W_K", k), ("W_V", v), ("W_O", o))}
            sd |= {f"blocks.{layer}.attn.{n}": torch.zeros(H, dh) for n in ("b_Q", "b_K", "b_V")}
            sd[f"blocks.{layer}.attn.b_O"] = torch.zeros(D)
        return sd
