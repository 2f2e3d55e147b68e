"""Hand-set attention-only transformers whose circuits are known exactly: ground truth for probes."""

from __future__ import annotations

import math

import torch

from mechsynth.models import ModelConfig
from mechsynth.models.tl_compat import hooked_transformer


def planted_induction_model(vocab: int = 10, n_ctx: int = 40, n_heads: int = 4, seed: int = 0, offset: int = 1):
    """2 layers: an exact previous-token head in layer 0 (looking `offset` tokens back) and an induction head in layer 1, at random
    head indices; every other head has small random weights. Returns (hooked model, prev head, induction head).

    Residual stream = [token one-hot | position one-hot | previous token one-hot]. The previous-token
    head matches query position i with key position i-1 and writes the key's token into the third
    block; the induction head matches the query's token against that block and copies the key's token.
    """
    g = torch.Generator().manual_seed(seed)
    V, N = vocab, n_ctx
    d_model, d_head = 2 * V + N, max(V, N)
    tok, pos, prev = slice(0, V), slice(V, V + N), slice(V + N, 2 * V + N)
    big = 60.0 * math.sqrt(d_head)
    cfg = ModelConfig(n_layers=2, n_heads=n_heads, d_model=d_model, d_head=d_head, attn_only=True, normalization="none")
    sd = {"embed.W_E": torch.zeros(V, d_model), "pos_embed.W_pos": torch.zeros(N, d_model),
          "unembed.W_U": torch.zeros(d_model, V), "unembed.b_U": torch.zeros(V)}
    sd["embed.W_E"][:, tok] = torch.eye(V)
    sd["pos_embed.W_pos"][:, pos] = torch.eye(N)
    sd["unembed.W_U"][tok] = 5 * torch.eye(V)
    heads = torch.randint(n_heads, (2,), generator=g).tolist()
    for layer in range(2):
        a = {w: torch.randn(n_heads, d_model, d_head, generator=g) * 0.1 for w in ("W_Q", "W_K", "W_V")}
        a["W_O"] = torch.randn(n_heads, d_head, d_model, generator=g) * 0.1
        a |= {b: torch.zeros(n_heads, d_head) for b in ("b_Q", "b_K", "b_V")} | {"b_O": torch.zeros(d_model)}
        h = heads[layer]
        for w in ("W_Q", "W_K", "W_V", "W_O"):
            a[w][h] = 0
        if layer == 0:  # previous token: query position i · key position j = big iff j = i - offset
            a["W_Q"][h, pos, :N] = torch.eye(N)
            a["W_K"][h, pos, :N] = big * torch.eye(N).roll(offset, dims=1)
            for j in range(N - offset, N):  # the last positions have no successor (roll wraps them round)
                a["W_K"][h, V + j, j + offset - N] = 0
            a["W_V"][h, tok, :V] = torch.eye(V)
            a["W_O"][h, :V, prev] = torch.eye(V)
        else:  # induction: query token · key's previous token, then copy the key's token
            a["W_Q"][h, tok, :V] = big * torch.eye(V)
            a["W_K"][h, prev, :V] = torch.eye(V)
            a["W_V"][h, tok, :V] = torch.eye(V)
            a["W_O"][h, :V, tok] = 3 * torch.eye(V)  # outvotes the direct path's "same token again"
        sd |= {f"blocks.{layer}.attn.{k}": v for k, v in a.items()}
    return hooked_transformer(cfg, V, V, N, sd), heads[0], heads[1]


def planted_selection_model(length: int, support: list[int], n_heads: int = 3, seed: int = 0):
    """1 layer: one head attends from the readout position (the last) uniformly onto `support`;
    the others have small random weights. Returns (hooked model, the planted head)."""
    g = torch.Generator().manual_seed(seed)
    V, N = 3, length + 1
    d_model, d_head = V + N, 4
    cfg = ModelConfig(n_layers=1, n_heads=n_heads, d_model=d_model, d_head=d_head, attn_only=True, normalization="none")
    sd = {"embed.W_E": torch.zeros(V, d_model), "pos_embed.W_pos": torch.zeros(N, d_model),
          "unembed.W_U": torch.randn(d_model, 2, generator=g), "unembed.b_U": torch.zeros(2)}
    sd["embed.W_E"][:, :V] = torch.eye(V)
    sd["pos_embed.W_pos"][:, V:] = torch.eye(N)
    a = {w: torch.randn(n_heads, d_model, d_head, generator=g) * 0.1 for w in ("W_Q", "W_K", "W_V")}
    a["W_O"] = torch.randn(n_heads, d_head, d_model, generator=g) * 0.1
    a |= {b: torch.zeros(n_heads, d_head) for b in ("b_Q", "b_K", "b_V")} | {"b_O": torch.zeros(d_model)}
    h = int(torch.randint(n_heads, (1,), generator=g))
    a["W_Q"][h] = 0
    a["W_K"][h] = 0
    a["W_Q"][h, V + N - 1, 0] = 100.0  # the readout position asks...
    for s in support:
        a["W_K"][h, V + s, 0] = 1.0  # ...and only the support answers
    sd |= {f"blocks.0.attn.{k}": v for k, v in a.items()}
    return hooked_transformer(cfg, V, 2, N, sd), h
