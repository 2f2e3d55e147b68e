"""One forward pass of a hooked transformer with chosen edges of its graph patched, the same on
TransformerLens 3.x and 4.x.

Only hooks that behave alike on both are used. Senders are read at block 0's `hook_resid_pre` (the
embeddings: the input node), `attn.hook_z` (head h writes z[..., h, :] @ W_O[h]) and `hook_mlp_out`. Receivers: an MLP's input at
`hook_mlp_in`, the logits' at the last `hook_resid_post`, and each head's own query, key and value input
rebuilt inside `attn.hook_q/k/v` from the block's `hook_resid_pre` (LN1(x_h) @ W_Q[h] + b_Q[h]): TL 4's
bridge has no per-head inputs (`use_split_qkv_input`), and this gives them on both.

A patched edge (u, v) changes what v reads by (source_u - current_u): v sees u's output from the source
run (the corrupted input, the batch mean, or zero) while everything else sees u as it is in this run.
Several patch sets run side by side as copies of the batch (`patch[copy]`), one forward for all.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from collections.abc import Iterator
from typing import Any, Optional

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth import hooks
from mechsynth.circuits.graph import COMPONENTS, LOGITS, Graph


@contextmanager
def mlp_inputs(model: Any) -> Iterator[None]:
    """`hook_mlp_in` on for the duration (TL leaves it off; it adds a copy per MLP)."""
    has_mlp = not model.cfg.attn_only
    before = getattr(model.cfg, "use_hook_mlp_in", False)
    if has_mlp and not before:
        model.set_use_hook_mlp_in(True)
    try:
        yield
    finally:
        if has_mlp and not before:
            model.set_use_hook_mlp_in(False)


def _normalize(model: Any, layer: int, x: Tensor) -> Tensor:
    """Block `layer`'s LN1 as TransformerLens computes it (LN, LNPre or none), on any leading shape."""
    kind = model.cfg.normalization_type
    if kind is None:
        return x
    x = x - x.mean(-1, keepdim=True)
    x = x / (x.pow(2).mean(-1, keepdim=True) + model.cfg.eps).sqrt()
    if kind == "LN":
        ln = model.blocks[layer].ln1
        return x * ln.w + ln.b
    if kind == "LNPre":
        return x
    raise ValueError(f"circuit discovery does not know normalization {kind!r}")


@dataclass
class Outputs:
    """What a patched forward gives back: the logits of every copy, and (with `keep_inputs`) tensors in the
    autograd graph from whose gradients every receiver's input's follows (gradient.Gradients)."""

    logits: Float[Tensor, "copy batch pos d_vocab_out"]
    inputs: dict[int, Tensor] = field(default_factory=dict)  # receiver index -> [copy*batch, pos, d_model]
    # (layer, "q"/"k"/"v") -> [copy*batch, pos, head_index, d_head], with `keep_inputs`, for a layer whose heads'
    # inputs were not patched and so not rebuilt; and each layer's input, through which gradients reach them
    qkv: dict[tuple[int, str], Tensor] = field(default_factory=dict)
    resid_pre: dict[int, Tensor] = field(default_factory=dict)


def sender_outputs(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"]
) -> Float[Tensor, "sender batch pos d_model"]:
    """What each sender writes to the residual stream on `tokens` (no gradients)."""
    seen: dict[int, Tensor] = {}
    with torch.no_grad():
        run(model, graph, tokens, None, None, record=seen)
    return torch.stack([seen[i] for i in range(len(graph.senders))])


def run(
    model: Any,
    graph: Graph,
    tokens: Int[Tensor, "batch pos"],
    patch: Optional[Float[Tensor, "copy sender receiver"]],
    source: Optional[Float[Tensor, "sender batch pos d_model"]],
    *,
    keep_inputs: bool = False,
    input_override: Optional[Float[Tensor, "batch pos d_model"]] = None,
    record: Optional[dict[int, Tensor]] = None,
    set_outputs: Optional[Bool[Tensor, "copy sender"]] = None,
) -> Outputs:
    """The model on `tokens`, with edge (u, v) of copy c patched by `patch[c, u, v]` (0: not, 1: fully;
    None: nothing patched, one copy) to `source[u]`. `input_override`: the input node's output (the
    embeddings, `hook_resid_pre` of block 0) replaced; integrated gradients walk it from the source to
    the clean input. `set_outputs`: in copy c, sender s writes `source[s]` to the residual stream instead of
    what it computes (the input, a layer's heads together, an MLP), which cuts the gradient through it: every
    edge out of it patched, without rebuilding a receiver's input. `record`: filled with each sender's output
    in this run. `keep_inputs`: what gradients with respect to every receiver's input need, requiring
    gradients: the readers' and patched heads' inputs, and the q, k and v of a layer whose heads' inputs were
    not patched (`Outputs`)."""
    B = tokens.shape[0]
    C = patch.shape[0] if patch is not None else set_outputs.shape[0] if set_outputs is not None else 1
    H, L = graph.n_heads, graph.n_layers
    current: dict[int, Tensor] = {}  # sender index -> [C*B, pos, d_model], as computed in this run
    resid_pre: dict[int, Tensor] = {}
    inputs: dict[int, Tensor] = {}
    qkv: dict[tuple[int, str], Tensor] = {}
    rows = {name: i for i, name in enumerate(graph.receivers)}

    def delta(receivers: list[int]) -> Optional[Tensor]:
        """[len(receivers), C*B, pos, d_model]: what patching adds to each receiver's input."""
        if patch is None:
            return None
        weights = patch[:, :, receivers]  # [C, S, R]
        used = [s for s in current if bool(weights[:, s].any())]
        if not used:
            return None
        diff = torch.stack([source[s] - current[s].unflatten(0, (C, B)) for s in used], 1)  # [C, S', B, pos, d_model]
        # a matrix product per copy, [R, S'] @ [S', B*pos*d_model] (einsum takes a path 2-3× slower here)
        added = weights[:, used].to(diff.dtype).transpose(1, 2) @ diff.flatten(2)
        return added.transpose(0, 1).reshape(len(receivers), C * B, *diff.shape[3:])

    def receive(x: Tensor, r: int) -> Tensor:
        if keep_inputs and not x.requires_grad:  # a model with frozen weights
            x.requires_grad_()
        inputs[r] = x
        return x

    def setting(t: Tensor, senders: list[int], value: Tensor) -> Tensor:
        """t with each copy where `set_outputs` sets `senders` replaced by `value` (detached: nothing flows back)."""
        if not bool(set_outputs[:, senders].any()):
            return t
        where = set_outputs[:, senders].all(1)
        if not bool((where == set_outputs[:, senders].any(1)).all()):
            raise ValueError("set_outputs sets a layer's heads together or not at all")
        return torch.where(where[:, None, None, None], value.detach(), t.unflatten(0, (C, B))).flatten(0, 1)

    def on_resid_pre(t: Tensor, hook: Any, layer: int) -> Tensor:
        if layer == 0:
            t = input_override.repeat(C, 1, 1) if input_override is not None else t
            t = setting(t, [0], source[0]) if set_outputs is not None else t
            if keep_inputs and not t.requires_grad:  # frozen embeddings, or an override: gradients start here
                t = t.detach().requires_grad_()
            current[0] = t
        resid_pre[layer] = t
        return t

    def on_head_input(t: Tensor, hook: Any, layer: int, c: str) -> Tensor:
        index = [rows[f"{hooks.head_label(layer, h)}.{c}"] for h in range(H)]
        d = delta(index)
        if d is None:
            if keep_inputs:
                qkv[(layer, c)] = t
            return t
        x = torch.stack([receive(resid_pre[layer] + d[h], r) for h, r in enumerate(index)], 2)
        # [batch, pos, head_index, d_model]
        attn = model.blocks[layer].attn
        W, b = getattr(attn, f"W_{c.upper()}"), getattr(attn, f"b_{c.upper()}")
        return torch.einsum("bphm,hmd->bphd", _normalize(model, layer, x), W) + b

    def on_z(t: Tensor, hook: Any, layer: int) -> Tensor:
        written = torch.einsum("bphd,hdm->hbpm", t, model.blocks[layer].attn.W_O)
        first = graph.senders.index(hooks.head_label(layer, 0))
        current.update({first + h: written[h] for h in range(H)})
        return t

    def on_attn_out(t: Tensor, hook: Any, layer: int) -> Tensor:
        heads = [graph.senders.index(hooks.head_label(layer, h)) for h in range(H)]
        return setting(t, heads, source[heads].sum(0) + model.blocks[layer].attn.b_O)

    def on_mlp_out(t: Tensor, hook: Any, layer: int) -> Tensor:
        s = graph.senders.index(f"MLP{layer}")
        current[s] = t
        return setting(t, [s], source[s]) if set_outputs is not None else t

    def on_reader(t: Tensor, hook: Any, r: int) -> Tensor:
        d = delta([r])
        if d is None and not keep_inputs:
            return t
        return receive(t + d[0] if d is not None else t.clone(), r)

    fwd = []
    for layer in range(L):
        fwd.append((hooks.resid_pre(layer), lambda t, hook, l=layer: on_resid_pre(t, hook, l)))
        fwd += [
            (hooks.head_input(layer, c), lambda t, hook, l=layer, c=c: on_head_input(t, hook, l, c)) for c in COMPONENTS
        ]
        fwd.append((hooks.head_z(layer), lambda t, hook, l=layer: on_z(t, hook, l)))
        if set_outputs is not None:
            fwd.append((hooks.attn_out(layer), lambda t, hook, l=layer: on_attn_out(t, hook, l)))
        if graph.has_mlp:
            fwd += [
                (hooks.mlp_in(layer), lambda t, hook, r=rows[f"MLP{layer}"]: on_reader(t, hook, r)),
                (hooks.mlp_out(layer), lambda t, hook, l=layer: on_mlp_out(t, hook, l)),
            ]
    fwd.append((hooks.resid_post(L - 1), lambda t, hook: on_reader(t, hook, rows[LOGITS])))
    with mlp_inputs(model):
        logits = model.run_with_hooks(tokens.repeat(C, 1), fwd_hooks=fwd)
    if record is not None:
        record.update({s: t[:B] for s, t in current.items()})
    return Outputs(logits.unflatten(0, (C, B)), inputs, qkv, resid_pre)
