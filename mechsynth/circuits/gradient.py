"""Gradient estimates of every edge's effect (what the EAP family of methods shares): (clean_u - source_u) · dm/dx_v
for each edge (u, v), the gradient of the metric with respect to receiver v's input taken at one point or averaged
over several on a path from the source run to the clean one.

Where the points lie is what tells the variants apart (Hanna et al. 2024; MIB, Mueller et al. 2025):
- EAP: the clean run alone;
- EAP-IG on inputs: the input node's output moved from the source's to the clean one, the rest of the model
  computing on from there;
- EAP-IG on activations: one sender group at a time (the input, a layer's heads, an MLP) set on the way from
  its source output to its clean one, everything else clean (the gradient does not flow back through the group
  that is set: MIB's definition, which is therefore not EAP's gradient even at the clean end);
- clean-corrupted: the clean run and the source run (the model on the source's input), the path's two ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth import hooks
from mechsynth.circuits import forward
from mechsynth.circuits.graph import COMPONENTS, INPUT, Graph
from mechsynth.circuits.patching import BUDGET, Metric


@dataclass
class Gradients:
    """d metric / d (each receiver's input) from one forward and backward pass, summed over the copies of the
    batch, kept as the scores use them: `parts`, each a group of receivers, the senders that may feed them (the
    first k: senders go in order) and the gradient at each one's input, flattened. The readers' (MLPs', logits')
    and any rebuilt heads' come from autograd; for a layer whose heads' inputs were not patched, autograd stops at
    its q, k and v and the gradient goes back through W and LN1 by hand (`_through_ln1`): such a run computes q, k
    and v once, as the model does, instead of once more from a copy of the layer's input per head.

    The points of a path add up (`+`) before they meet the senders' differences, so `dot`'s products are paid once
    per path, not once per point."""

    graph: Graph
    parts: list[tuple[list[int], int, Tensor]]  # (receivers, k, [receiver, batch*pos*d_model])

    def __add__(self, other: "Gradients") -> "Gradients":
        return Gradients(self.graph, [(r, k, a + b) for (r, k, a), (_, _, b) in zip(self.parts, other.parts)])

    def dot(self, diff: Float[Tensor, "sender batch pos d_model"]) -> Float[Tensor, "sender receiver"]:
        """diff[s] · (receiver r's gradient), summed over the batch, positions and d_model, for every pair; only
        the edges' entries mean anything (`on_edges`)."""
        out = diff.new_zeros(len(self.graph.senders), len(self.graph.receivers))
        for receivers, k, g in self.parts:
            out[:k, torch.tensor(receivers, device=out.device)] = diff[:k].flatten(1) @ g.T
        return out


def _through_ln1(
    model: Any,
    layer: int,
    x: Float[Tensor, "copy batch pos d_model"],
    W: Float[Tensor, "qkv head_index d_model d_head"],
    g: Float[Tensor, "qkv copy batch pos head_index d_head"],
) -> Float[Tensor, "qkv_head batch_pos_d_model"]:
    """The gradient at head h's q, k or v input x (before LN1), summed over copies: J(x)ᵀ W g, J LN1's Jacobian
    at x, which for LN(x) = w ⊙ x̂, x̂ = (x - mean x) / σ, is (I - 11ᵀ/m - x̂x̂ᵀ/m) diag(w) / σ. So it is
    (w ⊙ W g - its mean over d_model) / σ - x̂ (x̂ · w ⊙ W g) / (m σ), with w, the centring and 1/σ folded into W
    and g (which are small) rather than applied to the result (which is large)."""
    kind, (C, m) = model.cfg.normalization_type, (x.shape[0], x.shape[-1])
    g = g.permute(0, 4, 1, 2, 3, 5).flatten(2, 4)  # [qkv, head, copy*batch*pos, d_head]
    if kind is None:
        return (g.unflatten(2, (C, -1)).sum(2) @ W.transpose(-1, -2)).flatten(0, 1).flatten(1)
    if kind not in ("LN", "LNPre"):
        raise ValueError(f"circuit discovery does not know normalization {kind!r}")
    # x̂ and 1/σ in one fused kernel (var_mean alone is several times slower on a CPU)
    x, _, rstd = torch.native_layer_norm(x.flatten(0, 2), [m], None, None, model.cfg.eps)
    if kind == "LN":
        W = W * model.blocks[layer].ln1.w[:, None]
    g = g * rstd
    back = (g.unflatten(2, (C, -1)).sum(2) if C > 1 else g) @ (W - W.mean(2, keepdim=True)).transpose(-1, -2)
    if C == 1:  # x̂ · (w ⊙ W g) is x̂ · back (x̂ sums to 0)
        return torch.addcmul(back, (back * x).sum(-1, keepdim=True), x, value=-1 / m).flatten(0, 1).flatten(1)
    along_x = (g * (x @ W)).sum(-1, keepdim=True)  # back sums the copies: x̂ · (w ⊙ W g) per copy, x̂ @ W is small
    for along, at in zip(along_x.chunk(C, 2), x.chunk(C)):  # each copy its own x̂
        back = torch.addcmul(back, along, at, value=-1 / m)
    return back.flatten(0, 1).flatten(1)


def gradients(
    model: Any,
    graph: Graph,
    tokens: Tensor,
    metric: Metric,
    override: Optional[Tensor] = None,
    record: Optional[dict[int, Tensor]] = None,
    patch: Optional[Tensor] = None,
    src: Optional[Tensor] = None,
    set_outputs: Optional[Tensor] = None,
) -> Gradients:
    """d metric / d (each receiver's input), summed over the copies of `patch` or `set_outputs` (each copy's own
    gradient: copies do not interact), on `tokens`; `override` replaces the input node's output; `record` gets
    each sender's output on the way (forward.run)."""
    with torch.enable_grad():
        out = forward.run(
            model,
            graph,
            tokens,
            patch,
            src,
            keep_inputs=True,
            input_override=override,
            record=record,
            set_outputs=set_outputs,
        )
        readers, heads = sorted(out.inputs), sorted(out.qkv)
        grads = torch.autograd.grad(
            metric(out.logits).sum(), [out.inputs[k] for k in readers] + [out.qkv[k] for k in heads]
        )
    return Gradients(
        graph,
        _parts(model, graph, tokens.shape[0], out, dict(zip(readers, grads)), dict(zip(heads, grads[len(readers) :]))),
    )


@torch.no_grad()
def _parts(
    model: Any,
    graph: Graph,
    B: int,
    out: forward.Outputs,
    at_inputs: dict[int, Tensor],
    at_qkv: dict[tuple[int, str], Tensor],
) -> list[tuple[list[int], int, Tensor]]:
    """`Gradients.parts` from autograd's gradients at the receivers' inputs and at the unpatched layers' q, k, v."""
    parts = []
    if at_inputs:
        g = torch.stack([g.unflatten(0, (-1, B)).sum(0) for g in at_inputs.values()])
        parts.append((list(at_inputs), len(graph.senders), g.flatten(1)))
    rows = {name: i for i, name in enumerate(graph.receivers)}
    for layer in sorted({layer for layer, _ in at_qkv}):
        cs = [c for c in COMPONENTS if (layer, c) in at_qkv]
        into = [rows[f"{hooks.head_label(layer, h)}.{c}"] for c in cs for h in range(graph.n_heads)]
        k = int(graph.edges[:, into[0]].sum())  # the senders before the layer: the first k (they go in order)
        g = torch.stack([at_qkv[layer, c] for c in cs]).unflatten(1, (-1, B))
        W = torch.stack([getattr(model.blocks[layer].attn, f"W_{c.upper()}") for c in cs])
        parts.append((into, k, _through_ln1(model, layer, out.resid_pre[layer].unflatten(0, (-1, B)), W, g)))
    return parts


def on_edges(graph: Graph, pairs: Float[Tensor, "sender receiver"]) -> Float[Tensor, "edge"]:
    """A score per sender-receiver pair, read at the edges, in `graph.edge_list`'s order."""
    return pairs[graph.edges.to(pairs.device)].detach()


def attribution(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, steps: int = 1
) -> Float[Tensor, "edge"]:
    """EAP (`steps` = 1): the gradient at the clean input. EAP-IG on inputs (`steps` > 1): the gradient averaged
    over the input node's outputs source + α (clean - source), α = 1/steps ... 1."""
    return along_inputs(model, graph, tokens, src, metric, [k / steps for k in range(1, steps + 1)])


def along_inputs(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, alphas: Sequence[float]
) -> Float[Tensor, "edge"]:
    """The gradient averaged over the input node's outputs source + α (clean - source), one point per α. The
    clean end (α = 1) is the clean run itself: it goes first and records the senders' outputs that every point's
    products need (a path that stops short of it takes a forward to read them)."""
    seen: dict[int, Tensor] = {}
    at_clean = gradients(model, graph, tokens, metric, None, seen) if 1.0 in alphas else None
    if at_clean is not None:
        clean = torch.stack([seen[i].detach() for i in range(len(graph.senders))])
    else:
        clean = forward.sender_outputs(model, graph, tokens)
    diff = clean - src
    total = at_clean
    for a in alphas:
        if a != 1.0:
            point = gradients(model, graph, tokens, metric, (src[0] + a * diff[0]).detach())
            total = point if total is None else total + point
    return on_edges(graph, total.dot(diff) / len(alphas))


def sender_groups(graph: Graph) -> list[list[int]]:
    """The groups EAP-IG on activations moves together: the input, each layer's heads, each MLP."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(graph.senders):
        key = INPUT if name == INPUT else name if name.startswith("MLP") else name.split("H")[0]
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def along_activations(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, steps: int
) -> Float[Tensor, "edge"]:
    """The gradient averaged over (group, α): one sender group's output set to source + α (clean - source),
    α = 1/steps ... 1, everything else clean, as MIB's EAP-IG-activations (Hanna et al.'s
    `get_scores_ig_activations`) computes it: the group's output is set, not computed, so no gradient flows back
    through it in that run. Each group a copy of the batch, several per forward, its output set in its copy
    (forward.run's `set_outputs`: the receivers' inputs need no rebuilding)."""
    clean = forward.sender_outputs(model, graph, tokens)
    groups = sender_groups(graph)
    sets = torch.stack([torch.tensor([s in group for s in range(len(graph.senders))]) for group in groups])
    B, P = tokens.shape
    per_copy = B * P * model.cfg.d_model * 4 * (len(graph.senders) + 3 * graph.n_heads + 2) * 3  # forward + backward
    chunk = max(1, BUDGET // per_copy)
    total = None
    for k in range(1, steps + 1):
        point = (src + k / steps * (clean - src)).detach()
        for start in range(0, len(groups), chunk):
            chosen = sets[start : start + chunk].to(src.device)
            grads = gradients(model, graph, tokens, metric, None, None, None, point, chosen)
            total = grads if total is None else total + grads
    return on_edges(graph, total.dot(clean - src) / (len(groups) * steps))


def at_both_ends(
    model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric
) -> Float[Tensor, "edge"]:
    """The gradient averaged over the clean run and the source run (the model on the source's input: under resample
    ablation, the corrupted run), the two ends of EAP-IG's path."""
    return along_inputs(model, graph, tokens, src, metric, [0.0, 1.0])
