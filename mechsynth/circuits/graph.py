"""The computational graph of a hooked transformer, as circuit discovery sees it.

Nodes write to the residual stream (senders: the input embeddings, each head, each MLP) or read from it
(receivers: each head's query, key and value input, each MLP's input, the logits). An edge runs from a
sender to every receiver downstream of it along the residual stream; patching an edge changes what that
one receiver reads from that one sender and nothing else. Biases (b_O, the unembedding's) are no node:
they are the same in every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Optional

import torch
from jaxtyping import Bool
from torch import Tensor

from mechsynth import hooks

INPUT, LOGITS = "input", "logits"
COMPONENTS = ("q", "k", "v")


@dataclass(frozen=True)
class Graph:
    n_layers: int
    n_heads: int
    has_mlp: bool

    @classmethod
    def of(cls, model: Any) -> "Graph":
        cfg = model.cfg
        return cls(cfg.n_layers, cfg.n_heads, not cfg.attn_only)

    @cached_property
    def senders(self) -> list[str]:
        """ "input", then per layer its heads ("L0H1") and its MLP ("MLP0"), in the order they compute."""
        out = [INPUT]
        for layer in range(self.n_layers):
            out += [hooks.head_label(layer, h) for h in range(self.n_heads)] + ([f"MLP{layer}"] if self.has_mlp else [])
        return out

    @cached_property
    def receivers(self) -> list[str]:
        """Per layer each head's q, k and v ("L0H1.q"), then its MLP ("MLP0"); last the logits."""
        out = []
        for layer in range(self.n_layers):
            out += [f"{hooks.head_label(layer, h)}.{c}" for c in COMPONENTS for h in range(self.n_heads)]
            out += [f"MLP{layer}"] if self.has_mlp else []
        return out + [LOGITS]

    def sender_layer(self, index: int) -> float:
        """Where a sender writes: -1 for the input, l for a head of layer l, l + 0.5 for MLP l."""
        name = self.senders[index]
        return (
            -1
            if name == INPUT
            else float(name[3:]) + 0.5
            if name.startswith("MLP")
            else float(hooks.parse_head(name)[0])
        )

    def receiver_layer(self, index: int) -> float:
        """Where a receiver reads: l for a head of layer l, l + 0.5 for MLP l, n_layers for the logits."""
        name = self.receivers[index]
        if name == LOGITS:
            return float(self.n_layers)
        return float(name[3:]) + 0.5 if name.startswith("MLP") else float(hooks.parse_head(name.split(".")[0])[0])

    @cached_property
    def edges(self) -> Bool[Tensor, "sender receiver"]:
        """Which (sender, receiver) pairs are edges: the sender writes before the receiver reads."""
        s = torch.tensor([self.sender_layer(i) for i in range(len(self.senders))])
        r = torch.tensor([self.receiver_layer(i) for i in range(len(self.receivers))])
        return s[:, None] < r[None, :]

    @cached_property
    def edge_list(self) -> list[tuple[int, int]]:
        """Every edge as (sender index, receiver index), senders first."""
        return [tuple(e) for e in self.edges.nonzero().tolist()]  # type: ignore[misc]

    def edge_name(self, edge: tuple[int, int]) -> str:
        return f"{self.senders[edge[0]]}->{self.receivers[edge[1]]}"

    def edge_index(self, name: str) -> int:
        """The position in `edge_list` of an edge named as `edge_name` spells it ("L0H1->L1H0.k")."""
        names = [self.edge_name(e) for e in self.edge_list]
        if name not in names:
            raise ValueError(f"{name!r} is no edge of this graph")
        return names.index(name)

    def mask(self, names: list[str]) -> Bool[Tensor, "edge"]:
        """The edges named, as a mask over `edge_list`."""
        out = torch.zeros(len(self.edge_list), dtype=torch.bool)
        for name in names:
            out[self.edge_index(name)] = True
        return out

    def node_edges(self, sender: str) -> Bool[Tensor, "edge"]:
        """Every edge out of `sender`: patching them all is patching the node."""
        i = self.senders.index(sender)
        return torch.tensor([e[0] == i for e in self.edge_list])


def why_not(model: Any) -> Optional[str]:
    """Why circuit discovery cannot read this model, in one line; None when it can. It needs a
    TransformerLens-hooked transformer: the hook points of `mechsynth.hooks` and per-head weights."""
    have = getattr(model, "hook_dict", {})
    cfg = getattr(model, "cfg", None)
    if cfg is None or not hasattr(cfg, "normalization_type") or hooks.head_z(0) not in have:
        return f"{type(model).__name__} is no TransformerLens transformer with per-head hooks (attn.hook_z, hook_q/k/v)"
    if getattr(cfg, "positional_embedding_type", "standard") not in ("standard", "rotary"):
        return f"circuit discovery reads learned or rotary positions, not {cfg.positional_embedding_type!r}"
    if getattr(cfg, "parallel_attn_mlp", False):
        return "circuit discovery needs attention before the MLP in each block (parallel_attn_mlp is off)"
    needed = (
        [hooks.resid_pre(0), hooks.resid_post(cfg.n_layers - 1)]
        + [hooks.head_input(0, c) for c in COMPONENTS]
        + ([] if cfg.attn_only else [hooks.mlp_in(0), hooks.mlp_out(0)])
    )
    missing = [h for h in needed if h not in have]
    if missing:
        return f"{type(model).__name__} lacks hook {missing[0]!r}, which circuit discovery patches"
    return None
