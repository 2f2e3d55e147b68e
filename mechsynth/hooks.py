"""TransformerLens hook names and head labels, spelled in one place.

TransformerLens derives hook names from its module tree (`blocks.{layer}.attn.hook_pattern`); both
TL 3's HookedTransformer and TL 4's TransformerBridge keep these names, and our fused model is
probed through them. Probes, the timeline and the report build names here, so a rename is one edit.
"""

from __future__ import annotations

from typing import Any


def attn_pattern(layer: int) -> str:
    """Attention probabilities of layer `layer`: [batch, head_index, query_pos, key_pos]."""
    return f"blocks.{layer}.attn.hook_pattern"


def resid_pre(layer: int) -> str:
    """The residual stream entering block `layer` (for layer 0: the embeddings): [batch, pos, d_model]."""
    return f"blocks.{layer}.hook_resid_pre"


def resid_post(layer: int) -> str:
    """The residual stream leaving block `layer`: [batch, pos, d_model]."""
    return f"blocks.{layer}.hook_resid_post"


def mlp_post(layer: int) -> str:
    """The MLP neurons of block `layer` after the activation function: [batch, pos, d_mlp]."""
    return f"blocks.{layer}.mlp.hook_post"


def head_z(layer: int) -> str:
    """Each head's mix of values before W_O: [batch, pos, head_index, d_head]."""
    return f"blocks.{layer}.attn.hook_z"


def head_input(layer: int, component: str) -> str:
    """A head's query, key or value (`component` "q", "k", "v"), before rotary: [batch, pos, head_index, d_head]."""
    return f"blocks.{layer}.attn.hook_{component}"


def attn_out(layer: int) -> str:
    """What the attention of block `layer` writes to the residual stream, its heads' sum and b_O:
    [batch, pos, d_model]."""
    return f"blocks.{layer}.hook_attn_out"


def mlp_in(layer: int) -> str:
    """What the MLP of block `layer` reads (TransformerLens's use_hook_mlp_in): [batch, pos, d_model]."""
    return f"blocks.{layer}.hook_mlp_in"


def mlp_out(layer: int) -> str:
    """What the MLP of block `layer` writes to the residual stream: [batch, pos, d_model]."""
    return f"blocks.{layer}.hook_mlp_out"


def attention_patterns(n_layers: int) -> list[str]:
    """Every layer's attention pattern hook."""
    return [attn_pattern(layer) for layer in range(n_layers)]


def residual_stream(n_layers: int) -> list[str]:
    """The residual stream at the embeddings, then after each layer."""
    return [resid_pre(0)] + [resid_post(layer) for layer in range(n_layers)]


def residual_places(n_layers: int) -> list[str]:
    """The residual stream's places as metric keys name them, in `residual_stream`'s order: "embed", "L0", ..."""
    return ["embed"] + [f"L{i}" for i in range(n_layers)]


def attention_layers(model: Any) -> int:
    """How many layers of `model` have attention heads, read from its hook points (0 for the MLP
    baseline, which has none)."""
    names = getattr(model, "hook_dict", {})
    n = 0
    while attn_pattern(n) in names:
        n += 1
    return n


def head_label(layer: int, head: int) -> str:
    """ "L1H0": how heads are named in metrics, timelines, tables and renders."""
    return f"L{layer}H{head}"


def parse_head(label: str) -> tuple[int, int]:
    """(layer, head) of a label from `head_label`."""
    layer, head = label[1:].split("H")
    return int(layer), int(head)
