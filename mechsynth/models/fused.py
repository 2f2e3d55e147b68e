"""FusedTransformer, the module the transformer kind trains (its config: mechsynth/models/transformer.py):
bare PyTorch with fused attention, TransformerLens's parameter layout.

TransformerLens computes attention unfused so `hook_pattern` exists, which costs ~1.5x in training
speed on small models. We train this module instead; its `state_dict()` has exactly
HookedTransformer's keys and shapes (`blocks.0.attn.W_Q`: [head_index, d_model, d_head], ...), so
the same weights load into a hooked TransformerLens model for probing (see `tl_compat`, and the
test that checks both give the same logits and activations).

It is itself a `HookedRootModule` with TransformerLens's hook names, so `run_with_cache` works on
it; attention is computed unfused only for a layer whose pattern or scores are hooked.

Built for a continuous task (`d_input`), it reads vectors [batch, pos, d_input] instead of token ids, times
W_E [d_input, d_model]: the map an embedding applies to one-hot tokens, so names and layout stay the same.

`n_models=M` puts M independent models side by side: every weight gets a leading axis of size M
and one forward runs all of them with batched matmuls — seeds trained together, or checkpoints
probed together. Hooks then see TransformerLens's shapes with the M batches concatenated:
[M * batch, ...], model-major. In the shapes below `batch` is that concatenated axis, as the hooks see
it, and `n_models` the leading model axis of the weights, the tokens and the logits.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.models.tl_compat import HookedRootModule, HookPoint

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


class _Holder(nn.Module):
    """A module whose only job is to give parameters and hook points TransformerLens's names."""

    def __init__(self, params: dict[str, nn.Parameter], hooks: tuple[str, ...] = ()):
        super().__init__()
        for name, p in params.items():
            self.register_parameter(name, p)
        for name in hooks:
            setattr(self, name, HookPoint())


def hooked_here(hp: HookPoint) -> bool:
    """Whether anything is attached to this hook point; skipping idle ones keeps training fast."""
    return bool(hp._forward_hooks or hp._backward_hooks)


def rotary_tables(
    n_ctx: int, dim: int, base: float = 10000.0
) -> tuple[Float[Tensor, "pos d_head"], Float[Tensor, "pos d_head"]]:
    """cos/sin [n_ctx, dim] for adjacent-pair rotary, the layout TL 4 uses (TL 3 with rotary_adjacent_pairs)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    angles = torch.outer(torch.arange(n_ctx).float(), inv_freq).repeat_interleave(2, dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(
    x: Float[Tensor, "batch head_index pos d_head"], cos: Float[Tensor, "pos d_head"], sin: Float[Tensor, "pos d_head"]
) -> Float[Tensor, "batch head_index pos d_head"]:
    rot = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * cos + rot * sin


class FusedTransformer(HookedRootModule):
    # cfg: a TransformerConfig (typed Any: transformer.py, which defines it, imports this module)
    def __init__(
        self,
        cfg: Any,
        d_vocab: int,
        d_vocab_out: int,
        n_ctx: int,
        n_models: Optional[int] = None,
        d_input: Optional[int] = None,
    ):
        super().__init__()
        self.cfg, self.d_vocab, self.d_vocab_out, self.n_ctx, self.n_models = cfg, d_vocab, d_vocab_out, n_ctx, n_models
        # Continuous inputs (TaskSpec.d_input): vectors [batch pos d_input] read in as x @ W_E, W_E [d_input, d_model]
        # (an embedding is that map on one-hot vectors), so the weights keep TransformerLens's layout and names.
        self.d_input = d_input
        if d_input is not None and d_input != d_vocab:
            raise ValueError(
                f"a model of {d_input}-wide input vectors reads them with W_E [d_input, d_model]: "
                f"d_vocab must be {d_input}, got {d_vocab}"
            )
        dm, h, dh, L = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.n_layers
        lead = () if n_models is None else (n_models,)

        def zeros(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.zeros(*lead, *shape))

        def norm(hooks: tuple[str, ...] = ("hook_normalized",)) -> _Holder:
            params = {"w": nn.Parameter(torch.ones(*lead, dm)), "b": zeros(dm)} if cfg.normalization == "LN" else {}
            return _Holder(params, hooks)

        self.embed = _Holder({"W_E": zeros(d_vocab, dm)})
        self.hook_embed = HookPoint()
        if cfg.positional in ("standard", "shortformer"):
            self.pos_embed = _Holder({"W_pos": zeros(n_ctx, dm)})
            self.hook_pos_embed = HookPoint()
        elif cfg.positional == "rotary":  # (relative: each layer's attention holds its own W_rel)
            cos, sin = rotary_tables(n_ctx, dh)
            self.register_buffer("rotary_cos", cos, persistent=False)
            self.register_buffer("rotary_sin", sin, persistent=False)
        attn_hooks = ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z")
        if cfg.positional == "rotary":
            attn_hooks += ("hook_rot_q", "hook_rot_k")
        blocks = []
        for _ in range(L):
            b = _Holder({}, ("hook_resid_pre", "hook_attn_out", "hook_resid_post"))
            if cfg.normalization != "none":
                b.ln1 = norm()
            attn = {
                "W_Q": zeros(h, dm, dh),
                "W_K": zeros(h, dm, dh),
                "W_V": zeros(h, dm, dh),
                "W_O": zeros(h, dh, dm),
                "b_Q": zeros(h, dh),
                "b_K": zeros(h, dh),
                "b_V": zeros(h, dh),
                "b_O": zeros(dm),
            }
            if cfg.positional == "relative":  # r_d for each distance d = query_pos - key_pos (Edelman et al. 2024)
                attn["W_rel"] = zeros(h, n_ctx, dh)
            b.attn = _Holder(attn, attn_hooks)
            if not cfg.attn_only:
                b.hook_resid_mid, b.hook_mlp_out = HookPoint(), HookPoint()
                if cfg.normalization != "none":
                    b.ln2 = norm()
                b.mlp = _Holder(
                    {
                        "W_in": zeros(dm, cfg.mlp_dim),
                        "b_in": zeros(cfg.mlp_dim),
                        "W_out": zeros(cfg.mlp_dim, dm),
                        "b_out": zeros(dm),
                    },
                    ("hook_pre", "hook_post"),
                )
            blocks.append(b)
        self.blocks = nn.ModuleList(blocks)
        if cfg.normalization != "none":
            self.ln_final = norm()
        self.unembed = _Holder({"W_U": zeros(dm, d_vocab_out), "b_U": zeros(d_vocab_out)})
        self.reset_parameters()
        # The trainer optimizes (and clips) only what requires grad. (getattr: other kinds may reuse this module.)
        if getattr(cfg, "freeze_embeddings", False):
            for holder in (self.embed, self.unembed, *([self.pos_embed] if hasattr(self, "pos_embed") else [])):
                holder.requires_grad_(False)
        self.setup()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """TransformerLens's 'gpt2' init: weights ~ N(0, 0.8/sqrt(d_model)), biases 0, norms 1.
        Side by side, model i gets exactly the weights of a single model with init_seed + i."""
        std = self.cfg.init_range or 0.8 / math.sqrt(self.cfg.d_model)
        for i in range(self.n_models or 1):
            g = torch.Generator().manual_seed(self.cfg.init_seed + i)
            for name, p in self.named_parameters():
                if name.rsplit(".", 1)[-1].startswith("W_"):
                    target = p if self.n_models is None else p[i]
                    target.copy_(torch.randn(target.shape, generator=g) * std)

    # TransformerLens's weight properties (stacked over layers), so weight-based probes work here too.
    W_E = property(lambda self: self.embed.W_E)
    W_U = property(lambda self: self.unembed.W_U)
    W_pos = property(lambda self: self.pos_embed.W_pos)
    W_Q = property(lambda self: self._layers("W_Q"))
    W_K = property(lambda self: self._layers("W_K"))
    W_V = property(lambda self: self._layers("W_V"))
    W_O = property(lambda self: self._layers("W_O"))
    W_in = property(lambda self: self._layers("W_in", "mlp"))
    W_out = property(lambda self: self._layers("W_out", "mlp"))

    def _layers(self, name: str, part: str = "attn") -> Float[Tensor, "*n_models layer _ _ *_"]:
        """[layer, head_index, ...] (W_Q: [layer, head_index, d_model, d_head]; W_in: [layer, d_model, d_mlp]),
        or [n_models, layer, ...] side by side. An attention-only model has no W_in: AttributeError."""
        if part == "mlp" and self.cfg.attn_only:
            raise AttributeError(f"{name}: an attention-only model has no MLP")
        return torch.stack([getattr(getattr(b, part), name) for b in self.blocks], 0 if self.n_models is None else 1)

    def _hook(self, hp: HookPoint, x: Tensor) -> Tensor:
        return hp(x) if hooked_here(hp) else x

    def _norm(
        self, x: Float[Tensor, "batch pos d_model"], holder: Optional[nn.Module]
    ) -> Float[Tensor, "batch pos d_model"]:
        if holder is None:
            return x
        if not hasattr(holder, "w"):  # LNPre
            out = F.layer_norm(x, (x.shape[-1],), eps=1e-5)
        elif self.n_models is None:
            out = F.layer_norm(x, (x.shape[-1],), holder.w, holder.b, eps=1e-5)
        else:
            out = F.layer_norm(x, (x.shape[-1],), eps=1e-5).view(self.n_models, -1, x.shape[-1])
            out = (out * holder.w[:, None] + holder.b[:, None]).view_as(x)
        return self._hook(holder.hook_normalized, out)

    @staticmethod
    def _mm(
        x: Float[Tensor, "batch pos d_in"],
        w: Float[Tensor, "*n_models d_in d_out"],
        b: Float[Tensor, "*n_models d_out"],
    ) -> Float[Tensor, "batch pos d_out"]:
        """x @ w + b for each model: one batched matmul over [n_models, batch * pos, d_in]. (A single model
        skips the model axis: every op we save is one fewer Python call, and the per-seed passes of
        seeds side by side run single models on threads that share Python's GIL.)"""
        if w.ndim == 2:
            return torch.addmm(b, x.reshape(-1, x.shape[-1]), w).view(*x.shape[:-1], w.shape[-1])
        out = torch.baddbmm(b.unsqueeze(1), x.reshape(w.shape[0], -1, x.shape[-1]), w)
        return out.view(*x.shape[:-1], w.shape[-1])

    def _add_pos(
        self, x: Float[Tensor, "batch pos d_model"], pos: Float[Tensor, "... pos d_model"]
    ) -> Float[Tensor, "batch pos d_model"]:
        """x + each model's positional embedding ([pos, d_model], or [n_models, 1, pos, d_model] side by side)."""
        if self.n_models is None:
            return x + pos
        return (x.view(self.n_models, -1, *x.shape[1:]) + pos).view(x.shape)

    def forward(
        self, tokens: Int[Tensor, "*#n_models batch pos"] | Float[Tensor, "*#n_models batch pos d_input"]
    ) -> Float[Tensor, "*#n_models batch pos d_vocab_out"]:
        """tokens [batch, pos] -> logits [batch, pos, d_vocab_out]. Side by side, tokens [batch, pos] are read
        by every model and tokens [n_models, batch, pos] give each model its own; logits are then
        [n_models, batch, pos, d_vocab_out]. A model of continuous inputs reads vectors instead, [batch, pos,
        d_input] (or [n_models, batch, pos, d_input])."""
        cfg, m = self.cfg, self.n_models or 1
        if self.d_input is None and tokens.is_floating_point():
            raise TypeError(
                f"this model reads token ids; got a {tokens.dtype} tensor (vectors are for a model "
                "built for a continuous task)"
            )
        if self.d_input is not None and (not tokens.is_floating_point() or tokens.shape[-1] != self.d_input):
            raise TypeError(
                f"this model reads {self.d_input}-wide vectors [batch, pos, {self.d_input}]; got a "
                f"{tokens.dtype} tensor of shape {tuple(tokens.shape)}"
            )
        seq = tokens.shape[-1] if self.d_input is None else tokens.shape[-2]
        if seq > self.n_ctx:
            raise ValueError(f"input has {seq} positions but the model's n_ctx is {self.n_ctx}")
        x = self._hook(self.hook_embed, self._embed(tokens) if self.d_input is None else self._read_in(tokens))
        pos = None
        if cfg.positional in ("standard", "shortformer"):
            # [pos, d_model], or [n_models, 1, pos, d_model] side by side: broadcast over the batch
            pos = self.pos_embed.W_pos[:seq] if self.n_models is None else self.pos_embed.W_pos[:, None, :seq]
            if hooked_here(self.hook_pos_embed):  # the hook sees TransformerLens's [batch, pos, d_model]
                if self.n_models is None:
                    pos = self.hook_pos_embed(pos.expand(x.shape))
                else:
                    pos = self.hook_pos_embed(pos.expand(m, x.shape[0] // m, seq, -1).reshape(x.shape)).view(
                        m, -1, seq, x.shape[-1]
                    )
            if cfg.positional == "standard":
                x, pos = self._add_pos(x, pos), None
        for block in self.blocks:
            x = self._hook(block.hook_resid_pre, x)
            x = x + self._hook(
                block.hook_attn_out, self._attention(self._norm(x, getattr(block, "ln1", None)), block.attn, pos)
            )
            if not cfg.attn_only:
                x = self._hook(block.hook_resid_mid, x)
                mlp = block.mlp
                pre = self._hook(mlp.hook_pre, self._mm(self._norm(x, getattr(block, "ln2", None)), mlp.W_in, mlp.b_in))
                post = self._hook(mlp.hook_post, ACTIVATIONS[cfg.act_fn](pre))
                x = x + self._hook(block.hook_mlp_out, self._mm(post, mlp.W_out, mlp.b_out))
            x = self._hook(block.hook_resid_post, x)
        logits = self._mm(self._norm(x, getattr(self, "ln_final", None)), self.unembed.W_U, self.unembed.b_U)
        return logits if self.n_models is None else logits.view(m, -1, seq, logits.shape[-1])

    def _embed(self, tokens: Int[Tensor, "*#n_models batch pos"]) -> Float[Tensor, "_batch pos d_model"]:
        """The token embeddings, [n_models * batch, pos, d_model] side by side (the models' batches concatenated)."""
        m, seq = self.n_models or 1, tokens.shape[-1]
        if self.n_models is not None:
            if tokens.ndim == 2:
                tokens = tokens.expand(m, *tokens.shape)
            # Each model's rows are offset into one table: F.embedding's backward is much faster than indexing's.
            tokens = tokens + (torch.arange(m, device=tokens.device) * self.d_vocab).view(m, 1, 1)
        W_E = self.embed.W_E if self.n_models is None else self.embed.W_E.flatten(0, 1)
        return F.embedding(tokens.reshape(-1, seq), W_E)

    def _read_in(self, inputs: Float[Tensor, "*#n_models batch pos d_input"]) -> Float[Tensor, "_batch pos d_model"]:
        """Continuous inputs times W_E: [batch, pos, d_input] shared by the models side by side, or [n_models,
        batch, pos, d_input], each model its own; [n_models * batch, pos, d_model] side by side, as `_embed`."""
        if self.n_models is None:
            return inputs @ self.embed.W_E
        if inputs.ndim == 3:
            inputs = inputs.expand(self.n_models, *inputs.shape)
        return (inputs.flatten(1, 2) @ self.embed.W_E).view(-1, inputs.shape[-2], self.cfg.d_model)

    def _attention(
        self, x: Float[Tensor, "batch pos d_model"], a: nn.Module, pos: Optional[Float[Tensor, "... pos d_model"]]
    ) -> Float[Tensor, "batch pos d_model"]:
        mb, seq, dm = x.shape
        h, dh, lead = self.cfg.n_heads, self.cfg.head_dim, () if self.n_models is None else (self.n_models,)
        # One [d_model, 3 * head_index * d_head] matmul per model for Q, K and V (einsum over the
        # per-head layout would broadcast x across heads); re-laying out the small weights is cheap.
        W = torch.cat([a.W_Q, a.W_K, a.W_V], -3).transpose(-3, -2).reshape(*lead, dm, 3 * h * dh)
        B = torch.cat([a.b_Q, a.b_K, a.b_V], -2).reshape(*lead, 3 * h * dh)
        if pos is None:
            qkv = self._mm(x, W, B)
        else:  # shortformer: positions inform where to attend, never what is moved
            qk = 2 * h * dh
            qkv = torch.cat(
                [self._mm(self._add_pos(x, pos), W[..., :qk], B[..., :qk]), self._mm(x, W[..., qk:], B[..., qk:])], -1
            )
        q, k, v = (
            self._hook(hp, t) for hp, t in zip((a.hook_q, a.hook_k, a.hook_v), qkv.view(mb, seq, 3, h, dh).unbind(2))
        )
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [batch, head_index, pos, d_head]
        if self.cfg.positional == "rotary":
            cos, sin = self.rotary_cos[:seq], self.rotary_sin[:seq]
            q = self._hook(a.hook_rot_q, apply_rotary(q, cos, sin).transpose(1, 2)).transpose(1, 2)
            k = self._hook(a.hook_rot_k, apply_rotary(k, cos, sin).transpose(1, 2)).transpose(1, 2)
        mask = torch.full((seq, seq), float("-inf"), device=x.device).triu(1)
        if self.cfg.positional == "relative":  # the causal mask plus q·r_{query_pos - key_pos}, scaled as q·k is
            mask = mask + self._relative_scores(q, a.W_rel) / math.sqrt(dh)
        if hooked_here(a.hook_pattern) or hooked_here(a.hook_attn_scores):
            # Scale, mask and q·k in one batched matmul: these [batch, head_index, pos, pos] tensors
            # dominate probing time, so each extra pass over them counts.
            scores = torch.baddbmm(
                mask if mask.ndim == 2 else mask.flatten(0, 1),
                q.flatten(0, 1),
                k.flatten(0, 1).transpose(-1, -2),
                alpha=1 / math.sqrt(dh),
            )
            scores = self._hook(a.hook_attn_scores, scores.view(mb, h, seq, seq))
            z = self._hook(a.hook_pattern, scores.softmax(-1)) @ v
        elif self.cfg.positional == "relative":
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        z = self._hook(a.hook_z, z.transpose(1, 2))  # [batch, pos, head_index, d_head]
        return self._mm(z.reshape(mb, seq, h * dh), a.W_O.flatten(-3, -2), a.b_O)

    def _relative_scores(
        self, q: Float[Tensor, "batch head_index pos d_head"], W_rel: Float[Tensor, "*n_models head_index n_ctx d_head"]
    ) -> Float[Tensor, "batch head_index query_pos key_pos"]:
        """q_i · r_{i-j} for every query i and key j ≤ i (0 above the diagonal, which the mask removes)."""
        mb, h, seq, dh = q.shape
        m = self.n_models or 1
        # [n_models, batch, head_index, query_pos, distance]: each query against every distance's vector
        by_distance = q.view(m, mb // m, h, seq, dh) @ W_rel.view(m, 1, h, -1, dh)[..., :seq, :].transpose(-1, -2)
        i = torch.arange(seq, device=q.device)
        distance = (i[:, None] - i[None, :]).clamp_min(0)  # [query_pos, key_pos]
        return by_distance.gather(-1, distance.expand(m, mb // m, h, seq, seq)).view(mb, h, seq, seq)
