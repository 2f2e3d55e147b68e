"""What the scalar parity models share (the `sin` and `polynet` kinds, Barak et al. 2022): a few linear forms
of the input bits, wᵢᵀx (+ bᵢ), combined into one number f(x), read as the logits of a binary label.

Barak et al. train these models as scalar predictors of the ±1 label y. Our tasks score logits over
d_vocab_out = 2 classes with cross-entropy, where class 0 is the label +1 (the bit value +1 / parity 0;
mechsynth/tasks/sparse_parity.py). Logits [f/2, −f/2] make that cross-entropy exactly the logistic loss
log(1 + e^{−y·f}) of the scalar f (the logit difference is f), so f itself predicts y and the scalar
model needs no readout layer the paper's model lacks. (Logits [0, f] would give the same loss with f = −y·margin:
the same model up to the sign of f; the symmetric split keeps f's sign = the predicted label.)
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.config import check, check_fields
from mechsynth.errors import ConfigError
from mechsynth.models.base import FLOAT, ModelKind
from mechsynth.models.tl_compat import HookedRootModule, HookPoint
from mechsynth.tasks.base import TaskSpec


class ScalarKind(ModelKind):
    """The config side of a scalar model: subclasses give `forms` (how many wᵢ), `bias`, `init_range` and the
    module class (`module`); everything else (checks, sizes, hooks) is shared."""

    bias: bool
    init_range: Optional[float]
    module: type["ScalarNet"]

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first
        check(
            self.init_range is None or self.init_range > 0, "init_range", f"must be > 0 or unset, got {self.init_range}"
        )

    @property
    def forms(self) -> int:
        raise NotImplementedError

    def validate(self, spec: TaskSpec) -> None:
        if spec.token_values is None:
            raise ConfigError(
                "model.kind",
                f"{self.kind!r} needs a task with numeric inputs (sparse_parity, "
                "sparse_boolean); allowed here: 'transformer'",
            )
        if spec.d_vocab_out != 2:
            raise ConfigError(
                "model.kind",
                f"{self.kind!r} predicts one number, read as a binary label; the task has "
                f"{spec.d_vocab_out} output classes; allowed: 2",
            )

    def build(self, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
        return self.module(self, spec.n_ctx - 1, spec.token_values, n_models)

    def input_weights(self) -> Optional[str]:
        return "W_in"  # [n_inputs, forms]: row i reads input bit i

    def param_count(self, spec: TaskSpec) -> int:
        return (spec.n_ctx - 1) * self.forms + (self.forms if self.bias else 0)

    def activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        # input bits, the forms, f, logits (and their log-softmax and gradient)
        return batch * FLOAT * (spec.n_ctx - 1 + self.forms + 1 + 3 * spec.d_vocab_out), 0

    def eval_activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        return self.activation_bytes(spec, batch)

    def weight_field(self, spec: TaskSpec, context_field: str) -> str:
        return "model.degree" if self.forms > 1 else context_field  # (a sin neuron's weights are the input's size)


class ScalarNet(HookedRootModule):
    """logits = [f/2, −f/2] with f = combine(W_inᵀx + b_in), where x is the input bits as numbers.

    Like the MLP baseline it reads every position but the last (the readout) and answers at the last
    position only (out_pos = 1). `n_models=M`: M independent models side by side, every weight with a
    leading model axis; model i is initialised exactly like a single model with init_seed + i. Hooks
    see [n_models * batch, ...].
    """

    def __init__(self, cfg: ScalarKind, n_inputs: int, token_values: tuple[float, ...], n_models: Optional[int] = None):
        super().__init__()
        self.cfg, self.n_inputs, self.n_models = cfg, n_inputs, n_models
        self.d_vocab, self.n_ctx = len(token_values), n_inputs + 1  # (what probes read off our own models)
        lead = () if n_models is None else (n_models,)
        self.register_buffer("token_values", torch.tensor(token_values))
        self.W_in = nn.Parameter(torch.empty(*lead, n_inputs, cfg.forms))
        self.b_in = nn.Parameter(torch.empty(*lead, cfg.forms)) if cfg.bias else None
        self.hook_in = HookPoint()  # [batch, bit]: the input bits as numbers
        self.hook_pre = HookPoint()  # [batch, form]: the linear forms wᵢᵀx + bᵢ
        self.hook_out = HookPoint()  # [batch]: f(x), the logit of label +1 minus that of label −1
        self.reset_parameters()
        self.setup()

    def combine(self, pre: Float[Tensor, "n_models batch form"]) -> Float[Tensor, "n_models batch"]:
        raise NotImplementedError

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Each weight uniform ±1/sqrt(n_inputs) (PyTorch's nn.Linear init: each form wᵢᵀx starts with
        variance 1/3 on ±1 bits), or N(0, init_range) if set."""
        for i in range(self.n_models or 1):
            g = torch.Generator().manual_seed(self.cfg.init_seed + i)
            for p in (self.W_in, self.b_in):
                if p is None:
                    continue
                p = p if self.n_models is None else p[i]
                if self.cfg.init_range is not None:
                    p.copy_(torch.randn(p.shape, generator=g) * self.cfg.init_range)
                else:
                    p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) / math.sqrt(self.n_inputs))

    def forward(self, tokens: Int[Tensor, "*#n_models batch pos"]) -> Float[Tensor, "*#n_models batch 1 d_vocab_out"]:
        """tokens [batch, pos] (shared by every model) or [n_models, batch, pos] (each its own) ->
        logits [(n_models,) batch, 1, 2]."""
        m = self.n_models or 1
        x = self.token_values[tokens[..., : self.n_inputs]].expand(m, -1, -1).reshape(-1, self.n_inputs)
        x = self.hook_in(x).view(m, -1, self.n_inputs)
        W_in = self.W_in if self.n_models else self.W_in.unsqueeze(0)
        pre = torch.bmm(x, W_in)
        if self.b_in is not None:
            pre = pre + (self.b_in if self.n_models else self.b_in.unsqueeze(0)).unsqueeze(1)
        pre = self.hook_pre(pre.flatten(0, 1)).view(m, -1, W_in.shape[-1])
        f = self.hook_out(self.combine(pre).flatten()).view(m, -1)
        out = torch.stack([f / 2, -f / 2], -1)  # logistic loss of f on the ±1 label (module docstring)
        return out[:, :, None, :] if self.n_models else out[0, :, None, :]
