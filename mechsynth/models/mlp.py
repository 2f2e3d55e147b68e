"""The 2-layer MLP baseline of the sparse-parity papers, as a HookedRootModule so hooks work on it."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.models.config import ModelConfig
from mechsynth.models.tl_compat import HookedRootModule, HookPoint


class MLPBaseline(HookedRootModule):
    """logits = W_out · act(W_in · x + b_in) + b_out, where x is the input bits as numbers.

    It reads every position but the last (the readout token) and answers for the last position
    only: its output has one position, which the trainer scores against the last target.
    """

    def __init__(self, cfg: ModelConfig, n_inputs: int, d_vocab_out: int, token_values: tuple[float, ...]):
        super().__init__()
        self.cfg, self.n_inputs = cfg, n_inputs
        self.register_buffer("token_values", torch.tensor(token_values))
        self.W_in = nn.Parameter(torch.empty(n_inputs, cfg.width))
        self.b_in = nn.Parameter(torch.empty(cfg.width))
        self.W_out = nn.Parameter(torch.empty(cfg.width, d_vocab_out))
        self.b_out = nn.Parameter(torch.empty(d_vocab_out))
        self.hook_in = HookPoint()  # [batch, n_inputs]
        self.hook_pre = HookPoint()  # [batch, width]
        self.hook_post = HookPoint()  # [batch, width]
        self.reset_parameters()
        self.setup()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """PyTorch's nn.Linear init (uniform ±1/sqrt(fan_in)), or N(0, init_range) if set."""
        g = torch.Generator().manual_seed(self.cfg.init_seed)
        for p, fan_in in ((self.W_in, self.n_inputs), (self.b_in, self.n_inputs),
                          (self.W_out, self.cfg.width), (self.b_out, self.cfg.width)):
            if self.cfg.init_range is not None:
                p.copy_(torch.randn(p.shape, generator=g) * self.cfg.init_range)
            else:
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) / math.sqrt(fan_in))

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch 1 d_vocab_out"]:
        x = self.hook_in(self.token_values[tokens[:, : self.n_inputs]])
        pre = self.hook_pre(x @ self.W_in + self.b_in)
        post = F.relu(pre) if self.cfg.act_fn == "relu" else pre**self.cfg.poly_degree
        return (self.hook_post(post) @ self.W_out + self.b_out)[:, None, :]
