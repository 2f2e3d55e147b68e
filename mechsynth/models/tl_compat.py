"""The one module that imports TransformerLens model classes; it hides the 3.x / 4.x split.

TL 3.x builds `HookedTransformer(HookedTransformerConfig(...))`; TL 4.x removed it for
`TransformerBridge.boot_native(TransformerBridgeConfig(...))`, which keeps the same hook names
(`blocks.{l}.attn.hook_pattern`, `blocks.{l}.hook_resid_post`, ...) and `run_with_cache`.
Our weights are stored in HookedTransformer's layout, which TL 3 loads as is and which we map
onto the bridge's `nn.Linear` layout for TL 4.

Continuous inputs (a task's vectors [batch pos d_input], not token ids) go through TransformerLens's own
forward, hooks included: the embedding module is replaced by `ReadIn`, x @ W_E with W_E [d_input, d_model]
(what an embedding does to one-hot vectors), whose output `hook_embed` sees as a token embedding's. TL 3
sizes the positional embedding by the input's last axis, so its `PosEmbed` is given the positions' axis;
TL 4's bridge hands a float input to its native model as `inputs_embeds`, skipping the embedding, so that
model is told to read it through the embedding module instead (`_NativeVectors`). Feeding
`start_at_layer=0` a residual stream we built would have skipped `hook_embed` and `hook_pos_embed`.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Optional

import einops
import torch
from torch import Tensor, nn

from mechsynth.errors import ConfigError

TL_VERSION: str = version("transformer-lens")
TL_MAJOR: int = int(TL_VERSION.split(".")[0])

from transformer_lens.hook_points import HookPoint  # noqa: E402  (same in 3.x and 4.x)

try:
    from transformer_lens.hook_points import HookedRootModule  # 3.x
except ImportError:  # 4.x moved it to the package root
    from transformer_lens import HookedRootModule  # type: ignore[no-redef]

if TL_MAJOR >= 4:
    from transformer_lens import TransformerBridge
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge.sources.native.model import NativeModel

    class _NativeVectors(NativeModel):
        """TL 4's native model reading a float input (which the bridge passes as `inputs_embeds`) through its
        embedding module, the `ReadIn`, so `hook_embed` and the positions apply as to tokens."""

        def forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, **kwargs):
            return super().forward(
                input_ids=inputs_embeds if input_ids is None else input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                **kwargs,
            )
else:
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.components import PosEmbed

    class _VectorPosEmbed(PosEmbed):
        """TL 3's positional embedding, told the positions of vector inputs: it reads them off the input's
        last axis, which for vectors [batch pos d_input] is d_input."""

        def forward(self, tokens, *args, **kwargs):
            return super().forward(tokens[..., 0] if tokens.ndim == 3 else tokens, *args, **kwargs)


class ReadIn(nn.Module):
    """A linear read-in in the embedding's place: vectors [batch pos d_input] @ W [d_input, d_model]. The weight
    is named as the embedding's (`W_E` on TL 3, `weight` under TL 4's bridge), so the layouts stay as they are."""

    def __init__(self, d_input: int, d_model: int, weight: str = "W_E"):
        super().__init__()
        self.weight_name = weight
        self.register_parameter(weight, nn.Parameter(torch.zeros(d_input, d_model)))

    def forward(self, x: Tensor, *args, **kwargs) -> Tensor:
        return x @ getattr(self, self.weight_name)


# What a HookedTransformer's state dict holds besides its weights: causal masks and rotary tables (buffers).
BUFFERS = (".mask", ".IGNORE", "rotary_sin", "rotary_cos")

POSITIONAL = ("standard", "rotary", "none") if TL_MAJOR >= 4 else ("standard", "rotary", "shortformer", "none")


def check_supported(positional: str) -> None:
    if positional not in POSITIONAL:
        raise ConfigError(
            "model.positional",
            f"{positional!r} is not available in TransformerLens {TL_VERSION}; allowed: {', '.join(POSITIONAL)}",
        )


def _common(cfg, d_vocab: int, d_vocab_out: int, n_ctx: int) -> dict:
    return dict(
        n_layers=cfg.n_layers,
        d_model=cfg.d_model,
        n_ctx=n_ctx,
        d_head=cfg.head_dim,
        n_heads=cfg.n_heads,
        d_mlp=None if cfg.attn_only else cfg.mlp_dim,
        d_vocab=d_vocab,
        d_vocab_out=d_vocab_out,
        act_fn=cfg.act_fn,
        attn_only=cfg.attn_only,
        normalization_type=None if cfg.normalization == "none" else cfg.normalization,
        # none: TransformerLens's learned positions, loaded as zeros (the state dict's W_pos)
        positional_embedding_type="standard" if cfg.positional == "none" else cfg.positional,
        rotary_dim=cfg.head_dim if cfg.positional == "rotary" else None,
    )


def hooked_transformer(
    cfg,
    d_vocab: int,
    d_vocab_out: int,
    n_ctx: int,
    state_dict: dict[str, Tensor],
    device: str | torch.device = "cpu",
    d_input: Optional[int] = None,
):
    """A hooked TransformerLens model (TL 3: HookedTransformer, TL 4: TransformerBridge) with
    `state_dict` (HookedTransformer layout, as `FusedTransformer.state_dict()` gives) loaded. `d_input`: it
    reads vectors of that width (continuous inputs; d_vocab = d_input) through a `ReadIn`."""
    check_supported(cfg.positional)
    kw = _common(cfg, d_vocab, d_vocab_out, n_ctx)
    if TL_MAJOR >= 4:
        if kw["d_mlp"] is None:
            kw["d_mlp"] = 4 * cfg.d_model  # unused by attn-only models, but the bridge wants an int
        model = TransformerBridge.boot_native(TransformerBridgeConfig(**kw, init_weights=False), device=device)
        if d_input is not None:
            model.embed.set_original_component(ReadIn(d_input, cfg.d_model, "weight").to(device))
            model.original_model.__class__ = _NativeVectors  # (a class, not a bound method: it deep-copies)
    else:
        model = HookedTransformer(
            HookedTransformerConfig(
                **kw, rotary_adjacent_pairs=True, default_prepend_bos=False, init_weights=False, device=str(device)
            )
        )
        if d_input is not None:
            model.embed = ReadIn(d_input, cfg.d_model).to(device)
            if hasattr(model, "pos_embed"):
                model.pos_embed = _VectorPosEmbed(model.cfg).to(device)
            model.setup()  # the hook and module tables name the new modules
    model = load_weights(model, cfg, state_dict).eval()
    model.input_weights = cfg.input_weights()  # (models.hooked sets it too; planted test models come here directly)
    model.d_input = d_input  # what probes feed it: vectors of this width, or token ids (None)
    return model


def load_weights(model, cfg, state_dict: dict[str, Tensor]):
    """Load HookedTransformer-layout weights into a model `hooked_transformer` built (reusing one model
    across checkpoints is much cheaper than building one per checkpoint)."""
    if cfg.positional == "none":  # (TransformerLens's learned positions, at zero: see _common)
        state_dict = {**state_dict, "pos_embed.W_pos": torch.zeros(model.cfg.n_ctx, cfg.d_model)}
    if TL_MAJOR >= 4:
        model.load_state_dict(to_bridge_layout(state_dict, cfg), strict=True)
        return model
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = [k for k in missing if not k.endswith(BUFFERS)]  # nothing but the buffers may be missing
    if missing or unexpected:
        raise ValueError(f"weights do not fit the model: missing {missing}, unexpected {unexpected}")
    return model


def hooked_model(device: str | torch.device = "cpu", **fields):
    """A TransformerLens model from HookedTransformerConfig fields, by the same call on TL 3.x and 4.x:
    `hooked_model(n_layers=2, d_model=64, n_heads=1, d_head=64, n_ctx=100, d_vocab=3, act_fn="relu",
    attn_only=True)` is a HookedTransformer on TL 3 and a TransformerBridge on TL 4, with the same hook names.
    Rotary positions rotate adjacent pairs on both (TL 4's native bridge does; TL 3 is told to)."""
    fields.setdefault("default_prepend_bos", False)  # synthetic tasks have no BOS token
    if TL_MAJOR >= 4:
        if fields.get("attn_only") and fields.get("d_mlp") is None:
            fields["d_mlp"] = 4 * fields["d_model"]  # unused by attn-only models, but the bridge wants an int
        return TransformerBridge.boot_native(TransformerBridgeConfig(**fields), device=device)
    if fields.get("positional_embedding_type") == "rotary":
        fields.setdefault("rotary_adjacent_pairs", True)
    return HookedTransformer(HookedTransformerConfig(**fields, device=str(device)))


def is_bridge(model) -> bool:
    return TL_MAJOR >= 4 and isinstance(model, TransformerBridge)


def is_hooked_transformer(model) -> bool:
    """A TransformerLens transformer: TL 3's HookedTransformer or TL 4's TransformerBridge."""
    return is_bridge(model) if TL_MAJOR >= 4 else isinstance(model, HookedTransformer)


def to_bridge_layout(sd: dict[str, Tensor], cfg) -> dict[str, Tensor]:
    """HookedTransformer keys/shapes -> TL 4 bridge keys/shapes (per-head tensors become nn.Linear)."""
    out: dict[str, Tensor] = {}
    for key, t in sd.items():
        prefix, leaf = key.rsplit(".", 1)
        if leaf in ("W_E", "W_pos"):
            out[f"{prefix}.weight"] = t
        elif leaf in ("w", "b"):
            out[f"{prefix}.{'weight' if leaf == 'w' else 'bias'}"] = t
        elif leaf in ("W_Q", "W_K", "W_V"):
            out[f"{prefix}.{leaf[-1].lower()}.weight"] = einops.rearrange(t, "h m d -> (h d) m")
        elif leaf in ("b_Q", "b_K", "b_V"):
            out[f"{prefix}.{leaf[-1].lower()}.bias"] = einops.rearrange(t, "h d -> (h d)")
        elif leaf == "W_O":
            out[f"{prefix}.o.weight"] = einops.rearrange(t, "h d m -> m (h d)")
        elif leaf == "b_O":
            out[f"{prefix}.o.bias"] = t
        elif leaf in ("W_in", "W_out", "W_U"):
            name = {"W_in": "in", "W_out": "out"}.get(leaf)
            out[f"{prefix}.{name}.weight" if name else f"{prefix}.weight"] = t.T.contiguous()
        elif leaf in ("b_in", "b_out", "b_U"):
            name = {"b_in": "in", "b_out": "out"}.get(leaf)
            out[f"{prefix}.{name}.bias" if name else f"{prefix}.bias"] = t
        else:
            raise ValueError(f"unexpected weight {key!r}")
    return out


def from_bridge_layout(sd: dict[str, Tensor], n_heads: int) -> dict[str, Tensor]:
    """The inverse of `to_bridge_layout`: a TL 4 bridge's state dict in HookedTransformer's layout (the
    layout runs store). Keys the bridge keeps besides the weights (its causal mask) are dropped."""
    out: dict[str, Tensor] = {}
    for key, t in sd.items():
        if "._original_component." in key or key.endswith(("causal_mask", ".mask", ".IGNORE")):
            continue
        prefix, leaf = key.rsplit(".", 1)
        parent, module = prefix.rsplit(".", 1) if "." in prefix else ("", prefix)
        if module in ("q", "k", "v"):
            name = module.upper()
            out[f"{parent}.{'W' if leaf == 'weight' else 'b'}_{name}"] = (
                einops.rearrange(t, "(h d) m -> h m d", h=n_heads)
                if leaf == "weight"
                else einops.rearrange(t, "(h d) -> h d", h=n_heads)
            )
        elif module == "o":
            out[f"{parent}.W_O" if leaf == "weight" else f"{parent}.b_O"] = (
                einops.rearrange(t, "m (h d) -> h d m", h=n_heads) if leaf == "weight" else t
            )
        elif module in ("in", "out"):
            out[f"{parent}.{'W' if leaf == 'weight' else 'b'}_{module}"] = t.T.contiguous() if leaf == "weight" else t
        elif prefix == "unembed":
            out["unembed.W_U" if leaf == "weight" else "unembed.b_U"] = t.T.contiguous() if leaf == "weight" else t
        elif prefix == "embed":
            out["embed.W_E"] = t
        elif prefix == "pos_embed":
            out["pos_embed.W_pos"] = t
        elif leaf in ("weight", "bias"):  # layer norms
            out[f"{prefix}.{'w' if leaf == 'weight' else 'b'}"] = t
        else:
            raise ValueError(f"unexpected weight {key!r}")
    return out


__all__ = [
    "HookPoint",
    "HookedRootModule",
    "ReadIn",
    "TL_MAJOR",
    "TL_VERSION",
    "check_supported",
    "from_bridge_layout",
    "hooked_model",
    "hooked_transformer",
    "is_bridge",
    "is_hooked_transformer",
    "load_weights",
]
