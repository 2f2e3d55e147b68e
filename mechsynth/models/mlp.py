"""The mlp kind: the 2-layer MLP baseline of the sparse-parity papers, as a HookedRootModule so hooks work on it,
or deeper (`depth` hidden layers, for depth against test risk). It also reads a continuous task's one input
vector (`TaskSpec.d_input`, e.g. single_index's Gaussian x)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.config import MAX_SEED, check, check_fields, doc, validates_itself
from mechsynth.errors import ConfigError
from mechsynth.models.base import FLOAT, MODEL_KINDS, ModelKind
from mechsynth.models.tl_compat import HookedRootModule, HookPoint
from mechsynth.tasks.base import TaskSpec


@MODEL_KINDS.register("mlp")
@validates_itself
@dataclass(frozen=True)
class MLPConfig(ModelKind):
    width: int = doc("hidden width r of the MLP baseline", 100, lo=1, hi=2**24)
    depth: int = doc(
        "hidden layers, each of `width` units (1: the 2-layer baseline)",
        1,
        lo=1,
        hi=256,
        why="one matrix of width² per layer; deeper is not a baseline any paper here uses",
    )
    act_fn: Literal["relu", "poly"] = doc("hidden activation; 'poly' is x**poly_degree", "relu")
    first_act_fn: Optional[Literal["relu", "poly"]] = doc(
        "activation of the first hidden layer (the one that reads the input); unset = act_fn. 'poly' here and 'relu' "
        "deeper is the three-layer network of Nichani et al. 2023 and Wang et al. 2023: an even first layer whose "
        "units are exact quadratics of x, then ReLUs",
        None,
    )
    poly_degree: int = doc("k in the x**k activation", 2, lo=1, hi=64, why="x**k overflows float32 long before")
    init_seed: int = doc(
        "seed of the initial weights",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit; seeds side by side add their index",
    )
    init_range: Optional[float] = doc(
        "std of the normal weight init; unset = PyTorch's default (uniform ±1/sqrt(fan_in))", None
    )
    init_sparsity: Optional[int] = doc(
        'sparse init ("lottery tickets", Edelman et al. 2023): each hidden unit starts with '
        "nonzero input weights on a random subset of this many input bits, drawn with "
        "fan_in = this (uniform ±1/sqrt(s)); training may then move every weight. "
        "Unset = dense",
        None,
        lo=1,
        hi=2**24,
    )

    reads_vectors: ClassVar[bool] = True

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first
        check(
            self.init_range is None or self.init_range > 0, "init_range", f"must be > 0 or unset, got {self.init_range}"
        )

    def describe(self) -> str:
        first = self.first_act_fn not in (None, self.act_fn)
        return (
            f"MLP, width {self.width}"
            + (f", {self.depth} hidden layers" if self.depth > 1 else "")
            + (
                f", first layer {self._act_name(self.first_act_fn)}, then {self._act_name(self.act_fn)}"
                if first
                else ""
            )
            + (f", sparse init ({self.init_sparsity} inputs per unit)" if self.init_sparsity else "")
        )

    def _act_name(self, act: Optional[str]) -> str:
        return "ReLU" if act == "relu" else f"x**{self.poly_degree}"

    def validate(self, spec: TaskSpec) -> None:
        if spec.d_input is not None:
            check(
                spec.n_ctx == 1,
                "model.kind",
                f"'mlp' reads one input vector, and the task feeds {spec.n_ctx} per "
                "sequence; allowed here: 'transformer'",
            )
        elif spec.token_values is None:
            raise ConfigError(
                "model.kind",
                "'mlp' needs a task with numeric inputs (sparse_parity, sparse_boolean) "
                "or one input vector (single_index); allowed here: 'transformer'",
            )
        n_inputs = inputs(spec)
        check(
            self.init_sparsity is None or self.init_sparsity <= n_inputs,
            "model.init_sparsity",
            f"{self.init_sparsity} nonzero input weights per unit, but the task has {n_inputs} input bits; allowed: 1 to {n_inputs}",
        )

    def build(self, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
        return MLPBaseline(self, inputs(spec), spec.d_vocab_out, spec.token_values, n_models)

    def input_weights(self) -> Optional[str]:
        return "W_in"  # [n_inputs, width]: row i reads input bit (or coordinate) i

    # ---- the memory estimate ---------------------------------------------------------------------

    def param_count(self, spec: TaskSpec) -> int:
        n_inputs, V = inputs(spec), spec.d_vocab_out
        return (
            n_inputs * self.width + self.width + (self.depth - 1) * (self.width + 1) * self.width + self.width * V + V
        )

    def activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        # input bits, hidden before and after the activation, output (logits, log-softmax, gradient)
        return batch * FLOAT * (inputs(spec) + 2 * self.depth * self.width + 3 * spec.d_vocab_out), 0

    def eval_activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        return self.activation_bytes(spec, batch)

    def weight_field(self, spec: TaskSpec, context_field: str) -> str:
        return "model.width"


def inputs(spec: TaskSpec) -> int:
    """The numbers the MLP reads: a continuous task's vector, or every token before the readout."""
    return spec.d_input if spec.d_input is not None else spec.n_ctx - 1


def sparse_mask(n_inputs: int, width: int, s: int, g: torch.Generator) -> Float[Tensor, "n_inputs width"]:
    """1 on s distinct random inputs of each hidden unit (column), 0 elsewhere."""
    chosen = torch.rand(width, n_inputs, generator=g).argsort(-1)[:, :s]  # a uniform s-subset per unit
    return torch.zeros(width, n_inputs).scatter_(1, chosen, 1.0).T


class MLPBaseline(HookedRootModule):
    """logits = W_out · act(W_in · x + b_in) + b_out, where x is the input bits as numbers.

    It reads every position but the last (the readout token) and answers for the last position
    only: its output has one position, which the trainer scores against the last target.
    `n_models=M` runs M independent networks side by side (see FusedTransformer).
    """

    def __init__(
        self,
        cfg: MLPConfig,
        n_inputs: int,
        d_vocab_out: int,
        token_values: Optional[tuple[float, ...]],
        n_models: Optional[int] = None,
    ):
        super().__init__()
        self.cfg, self.n_inputs, self.n_models = cfg, n_inputs, n_models
        # token_values None: a continuous task's one vector [batch, 1, n_inputs] is the input
        self.vectors = token_values is None
        self.d_vocab = n_inputs if self.vectors else len(token_values)
        self.d_vocab_out, self.n_ctx = d_vocab_out, 1 if self.vectors else n_inputs + 1
        lead = () if n_models is None else (n_models,)
        self.register_buffer("token_values", torch.tensor(() if self.vectors else token_values))
        self.W_in = nn.Parameter(torch.empty(*lead, n_inputs, cfg.width))
        self.b_in = nn.Parameter(torch.empty(*lead, cfg.width))
        self.W_out = nn.Parameter(torch.empty(*lead, cfg.width, d_vocab_out))
        self.b_out = nn.Parameter(torch.empty(*lead, d_vocab_out))
        self.hook_in = HookPoint()  # [batch, bit]: the input bits as numbers
        self.hook_pre = HookPoint()  # [batch, d_mlp] (d_mlp = width): the first hidden layer
        self.hook_post = HookPoint()  # [batch, d_mlp]
        if cfg.depth > 1:  # only then: a 2-layer run's weights and hooks stay as they were
            self.W_hidden = nn.Parameter(torch.empty(*lead, cfg.depth - 1, cfg.width, cfg.width))
            self.b_hidden = nn.Parameter(torch.empty(*lead, cfg.depth - 1, cfg.width))
            self.hook_hidden = nn.ModuleList(HookPoint() for _ in range(cfg.depth - 1))  # [batch, d_mlp] after each
        self.reset_parameters()
        self.setup()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """PyTorch's nn.Linear init (uniform ±1/sqrt(fan_in)), or N(0, init_range) if set; side by side,
        network i gets the weights of a single network with init_seed + i. With init_sparsity = s, each
        unit's input weights are zero outside s random inputs, and drawn with fan_in s (so each unit's
        pre-activation has the dense init's scale); the draws of a dense init stay as they were."""
        s, w = self.cfg.init_sparsity, self.cfg.width
        # Deeper layers are drawn last, so the first and last layers are those of the 2-layer net of the same seed.
        deep = ((self.W_hidden, w), (self.b_hidden, w)) if self.cfg.depth > 1 else ()
        for i in range(self.n_models or 1):
            g = torch.Generator().manual_seed(self.cfg.init_seed + i)
            for p, fan_in in (
                (self.W_in, s or self.n_inputs),
                (self.b_in, self.n_inputs),
                (self.W_out, w),
                (self.b_out, w),
                *deep,
            ):
                sparse = s is not None and p is self.W_in
                p = p if self.n_models is None else p[i]
                if self.cfg.init_range is not None:
                    p.copy_(torch.randn(p.shape, generator=g) * self.cfg.init_range)
                else:
                    p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) / math.sqrt(fan_in))
                if sparse:
                    p.mul_(sparse_mask(self.n_inputs, self.cfg.width, s, g))

    def act(self, x: Float[Tensor, "*shape"], first: bool = False) -> Float[Tensor, "*shape"]:
        kind = (self.cfg.first_act_fn or self.cfg.act_fn) if first else self.cfg.act_fn
        return F.relu(x) if kind == "relu" else x**self.cfg.poly_degree

    def forward(
        self, tokens: Int[Tensor, "*#n_models batch pos"] | Float[Tensor, "*#n_models batch 1 d_input"]
    ) -> Float[Tensor, "*#n_models batch 1 d_vocab_out"]:
        """tokens [batch, pos] (or a vector [batch, 1, d_input]) -> [batch, 1, d_vocab_out]; side by side as
        FusedTransformer.forward. Hooks see [n_models * batch, ...]."""
        m = self.n_models or 1
        x = tokens[..., 0, :] if self.vectors else self.token_values[tokens[..., : self.n_inputs]]
        x = x.expand(m, -1, -1).reshape(-1, self.n_inputs)
        x = self.hook_in(x)
        W_in, b_in, W_out, b_out = (
            p if self.n_models else p.unsqueeze(0) for p in (self.W_in, self.b_in, self.W_out, self.b_out)
        )
        pre = self.hook_pre(torch.baddbmm(b_in.unsqueeze(1), x.view(m, -1, self.n_inputs), W_in).flatten(0, 1))
        post = self.hook_post(self.act(pre, first=True)).view(m, -1, pre.shape[-1])
        for layer in range(self.cfg.depth - 1):
            W, b = (p[:, layer] if self.n_models else p[layer].unsqueeze(0) for p in (self.W_hidden, self.b_hidden))
            post = self.hook_hidden[layer](self.act(torch.baddbmm(b.unsqueeze(1), post, W)).flatten(0, 1)).view(
                m, -1, W.shape[-1]
            )
        out = torch.baddbmm(b_out.unsqueeze(1), post, W_out)
        return out[:, :, None, :] if self.n_models else out[0, :, None, :]
