"""The recurrent kind: an LSTM or GRU language model, the baseline transformers are compared with (Liu et al.
2023, "Exposing attention glitches": a 1-layer LSTM extrapolates flip-flop perfectly where transformers glitch).

    tokens -> W_E (embedding, d_model) -> n_layers of LSTM / GRU (hidden d_model) -> W_U, b_U -> logits

at every position, like the transformer. The cell equations are PyTorch's nn.LSTM / nn.GRU (run through
`torch.func.functional_call`, so the fused kernels do the work), as is the init: every cell weight
U(±1/sqrt(d_model)), the embedding N(0, 1) (nn.Embedding), the readout nn.Linear's U(±1/sqrt(d_model)).
Side by side (`n_models=M`) every weight has a leading model axis and each model runs its own fused
recurrence: a recurrence cannot be batched across different weights the way a matrix product can.

Hooks (TransformerLens names, for probes that read the residual stream): `hook_embed` [batch pos d_model];
`blocks.{l}.hook_resid_post` [batch pos d_model], layer l's hidden states, which are all that flows on.
There is no attention, so attention probes refuse it in one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

import torch
import torch.nn as nn
from jaxtyping import Float, Int
from torch import Tensor
from torch.func import functional_call

from mechsynth.config import MAX_SEED, MAX_WIDTH, check_fields, doc, validates_itself
from mechsynth.models.base import FLOAT, MODEL_KINDS, ModelKind
from mechsynth.models.tl_compat import HookedRootModule, HookPoint
from mechsynth.tasks.base import TaskSpec

GATES = {"lstm": 4, "gru": 3}  # gate blocks in a cell's weight_ih / weight_hh rows
CELLS = {"lstm": nn.LSTM, "gru": nn.GRU}
CELL_WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")  # nn.LSTM's names, suffixed _l0


@MODEL_KINDS.register("recurrent")
@validates_itself
@dataclass(frozen=True)
class RecurrentConfig(ModelKind):
    cell: Literal["lstm", "gru"] = doc("the recurrent cell: PyTorch's nn.LSTM or nn.GRU equations", "lstm")
    n_layers: int = doc("stacked recurrent layers", 1, lo=1, hi=64)
    d_model: int = doc("width of the embedding and of every layer's hidden state", 128, lo=1, hi=MAX_WIDTH)
    init_seed: int = doc(
        "seed of the initial weights",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit; seeds side by side add their index",
    )

    def __post_init__(self):
        check_fields(self)

    def describe(self) -> str:
        return f"{self.n_layers}-layer {self.cell.upper()}, d_model {self.d_model}"

    def build(self, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
        return RecurrentLM(self, spec, n_models)

    # ---- the memory estimate ---------------------------------------------------------------------

    def param_count(self, spec: TaskSpec) -> int:
        d, g = self.d_model, GATES[self.cell]
        return spec.d_vocab * d + self.n_layers * g * d * (2 * d + 2) + d * spec.d_vocab_out + spec.d_vocab_out

    def activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        # per layer and position: the gates and the cell/hidden states the backward pass keeps (an upper
        # bound on the fused kernels' workspace), then the logits, their log-softmax and gradient
        per_pos = self.n_layers * (GATES[self.cell] + 3) * self.d_model + self.d_model + 3 * spec.d_vocab_out
        return batch * spec.n_ctx * per_pos * FLOAT, 0

    def eval_activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        return batch * spec.n_ctx * (2 * self.d_model + 2 * spec.d_vocab_out) * FLOAT, 0

    def weight_field(self, spec: TaskSpec, context_field: str) -> str:
        return "model.d_model"


class RecurrentLayer(nn.Module):
    """One cell's weights (nn.LSTM's weight_ih, weight_hh, bias_ih, bias_hh, with a leading model axis side by
    side) and the hook on its hidden states."""

    def __init__(self, cell: str, d_model: int, lead: tuple[int, ...]):
        super().__init__()
        rows = GATES[cell] * d_model
        self.weight_ih = nn.Parameter(torch.empty(*lead, rows, d_model))
        self.weight_hh = nn.Parameter(torch.empty(*lead, rows, d_model))
        self.bias_ih = nn.Parameter(torch.empty(*lead, rows))
        self.bias_hh = nn.Parameter(torch.empty(*lead, rows))
        self.hook_resid_post = HookPoint()  # [batch, pos, d_model]


class RecurrentLM(HookedRootModule):
    def __init__(self, cfg: RecurrentConfig, spec: TaskSpec, n_models: Optional[int] = None):
        super().__init__()
        self.cfg, self.n_models = cfg, n_models
        self.d_vocab, self.d_vocab_out, self.n_ctx = spec.d_vocab, spec.d_vocab_out, spec.n_ctx
        lead = () if n_models is None else (n_models,)
        d = cfg.d_model
        self.W_E = nn.Parameter(torch.empty(*lead, spec.d_vocab, d))
        self.blocks = nn.ModuleList(RecurrentLayer(cfg.cell, d, lead) for _ in range(cfg.n_layers))
        self.W_U = nn.Parameter(torch.empty(*lead, d, spec.d_vocab_out))
        self.b_U = nn.Parameter(torch.empty(*lead, spec.d_vocab_out))
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        # The module whose forward runs a layer on given weights; kept out of the module tree (a tuple), so its
        # own (unused) parameters are neither trained, saved nor moved.
        self._cell = (CELLS[cfg.cell](d, d, batch_first=True),)
        self.reset_parameters()
        self.setup()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """PyTorch's defaults (see the module docstring); side by side, model i gets the weights of a single
        model with init_seed + i."""
        bound = 1 / math.sqrt(self.cfg.d_model)
        for i in range(self.n_models or 1):
            g = torch.Generator().manual_seed(self.cfg.init_seed + i)
            pick = (lambda p: p) if self.n_models is None else (lambda p: p[i])  # noqa: E731
            pick(self.W_E).copy_(torch.randn(pick(self.W_E).shape, generator=g))
            for block in self.blocks:
                for name in CELL_WEIGHTS:
                    p = pick(getattr(block, name))
                    p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
            for p in (pick(self.W_U), pick(self.b_U)):
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)

    def _weights(self, block: RecurrentLayer, i: Optional[int]) -> dict[str, Tensor]:
        return {f"{name}_l0": getattr(block, name) if i is None else getattr(block, name)[i] for name in CELL_WEIGHTS}

    def forward(self, tokens: Int[Tensor, "*#n_models batch pos"]) -> Float[Tensor, "*#n_models batch pos d_vocab_out"]:
        """tokens [batch, pos] -> logits [batch, pos, d_vocab_out]; side by side, tokens [batch, pos] (the same
        for every model) or [n_models, batch, pos] -> [n_models, batch, pos, d_vocab_out]. Hooks see
        [n_models * batch, ...]."""
        m = self.n_models
        models = [None] if m is None else list(range(m))
        if m is not None and tokens.ndim == 2:
            tokens = tokens.expand(m, *tokens.shape)
        per_model = [self.W_E[tokens] if m is None else self.W_E[i][tokens[i]] for i in models]
        x = self._hooked(self.hook_embed, per_model)
        for block in self.blocks:
            x = self._hooked(
                block.hook_resid_post, [self._layer(self._weights(block, i), h) for i, h in zip(models, x)]
            )
        if m is None:
            return x[0] @ self.W_U + self.b_U
        return torch.stack([h @ self.W_U[i] + self.b_U[i] for i, h in zip(models, x)])

    def _layer(
        self, weights: dict[str, Tensor], x: Float[Tensor, "batch pos d_model"]
    ) -> Float[Tensor, "batch pos d_model"]:
        """One layer's hidden states: PyTorch's fused kernel, or step by step where it cannot serve (forward-mode
        AD, which sharpness's Hessian-vector products use, is not implemented for it)."""
        try:
            return functional_call(self._cell[0], weights, (x,))[0]
        except NotImplementedError:
            return step_by_step(self.cfg.cell, weights, x)

    @staticmethod
    def _hooked(hook: HookPoint, per_model: list[Tensor]) -> list[Tensor]:
        """The models' activations through one hook as [n_models * batch, ...], then split back per model."""
        if len(per_model) == 1:
            return [hook(per_model[0])]
        return list(hook(torch.cat(per_model)).chunk(len(per_model)))


def step_by_step(
    cell: str, weights: dict[str, Tensor], x: Float[Tensor, "batch pos d_model"]
) -> Float[Tensor, "batch pos d_model"]:
    """nn.LSTM's / nn.GRU's equations (PyTorch's documentation), one position at a time."""
    W_ih, W_hh, b_ih, b_hh = (weights[f"{name}_l0"] for name in CELL_WEIGHTS)
    gi = x @ W_ih.T + b_ih  # the inputs' part of every gate, for all positions at once
    h = x.new_zeros(x.shape[0], W_hh.shape[1])
    c = torch.zeros_like(h)
    out = []
    for t in range(x.shape[1]):
        gh = h @ W_hh.T + b_hh
        if cell == "lstm":
            i, f, g, o = (gi[:, t] + gh).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        else:
            (i_r, i_z, i_n), (h_r, h_z, h_n) = gi[:, t].chunk(3, -1), gh.chunk(3, -1)
            r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
            h = (1 - z) * torch.tanh(i_n + r * h_n) + z * h
        out.append(h)
    return torch.stack(out, 1)
