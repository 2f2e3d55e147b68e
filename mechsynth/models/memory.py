"""The linear_memory and mlp_memory kinds: the associative memories of Nichani, Lee, Bietti 2024 ("Understanding
factual recall in transformers via associative memories"), over fixed random embeddings.

    linear:  logits_y = u_yᵀ W_memᵀ e(x)                       trainable W_mem: d² parameters
    MLP:     logits_y = u_yᵀ W_outᵀ relu(W_inᵀ e(x) + b_in)    trainable W_in, W_out: 2md (and b_in: m)

Input embeddings e and output embeddings u_y are drawn once from init_seed, uniform on the unit sphere (their
code: Gaussian rows, normalized), and never trained. They store N associations with about d² (linear) and
md (MLP) parameters, up to log factors; `memory_params` gives the paper's count.

Any token task: each (position, token) pair has its own fixed embedding W_E[p, t], and a sequence of P
tokens reads e(x) = Σ_p W_E[p, x_p] / sqrt(P) (about unit norm, and linear in the one-hot input), so for a
one-token input (associative_memory) e(x) is exactly the paper's e_x. Like the MLP baseline, the memory
answers at the last position only: its output has one position, scored against the last target.

From their code (linear_AM.ipynb, mlp_sweep.py): unit-norm Gaussian embeddings, no bias in the linear memory
or in the MLP's second layer, a first-layer bias initialised at 0, ReLU, weights with their flax default
(lecun normal: std 1/sqrt(fan_in), which they truncate at 2 std; ours is not truncated). They train with
full-batch Adam on cross-entropy (linear lr 1000, MLP 3e-2) and call N stored at accuracy ≥ 0.99.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.config import MAX_SEED, MAX_WIDTH, check, check_fields, doc, validates_itself
from mechsynth.models.base import FLOAT, MODEL_KINDS, ModelKind
from mechsynth.models.tl_compat import HookedRootModule, HookPoint
from mechsynth.tasks.base import TaskSpec


class MemoryKind(ModelKind):
    """The config side of an associative memory: subclasses give `d`, `init_range`, the trainable shapes
    (`trainable`) and the module class; checks, sizes and hooks are shared."""

    d: int
    init_range: Optional[float]
    module: type["AssociativeMemory"]
    hidden: int  # activations between e(x) and the output (the MLP's pre- and post-activation: 2m)
    size_field: str  # the field to blame when the trainable weights dominate the memory estimate

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first
        check(
            self.init_range is None or self.init_range > 0, "init_range", f"must be > 0 or unset, got {self.init_range}"
        )

    def trainable(self) -> dict[str, tuple[tuple[int, ...], int]]:
        """Each trainable weight's shape and its fan-in (which sets its default init scale)."""
        raise NotImplementedError

    @property
    def memory_params(self) -> int:
        """The paper's parameter count of the memory: d² (linear), 2md (MLP; its m biases left out)."""
        raise NotImplementedError

    def build(self, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
        return self.module(self, spec, n_models)

    def input_weights(self) -> Optional[str]:
        return "W_pos_in"  # [pos, d_vocab·width]: the first layer as each input position's embeddings see it

    # ---- the memory estimate (the frozen embeddings are parameters too: counted, and saved) ------------

    def param_count(self, spec: TaskSpec) -> int:
        """Every parameter, the fixed embeddings included (what the model holds; `memory_params` is the paper's)."""
        return (
            spec.n_ctx * spec.d_vocab * self.d
            + self.d * spec.d_vocab_out
            + sum(math.prod(shape) for shape, _ in self.trainable().values())
        )

    def activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        # the embeddings of every position (summed at once), e(x), the hidden layer(s), the memory's output,
        # logits (and their log-softmax and gradient)
        return batch * FLOAT * (spec.n_ctx * self.d + 2 * self.d + self.hidden + 3 * spec.d_vocab_out), 0

    def eval_activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        return self.activation_bytes(spec, batch)

    def weight_field(self, spec: TaskSpec, context_field: str) -> str:
        fixed = (spec.n_ctx * spec.d_vocab + spec.d_vocab_out) * self.d
        return self.size_field if self.memory_params > fixed else "model.d"


def sphere(shape: tuple[int, ...], g: torch.Generator) -> Float[Tensor, "... d_model"]:
    """Rows uniform on the unit sphere: Gaussian, normalized (their embeddings)."""
    x = torch.randn(shape, generator=g)
    return x / x.norm(dim=-1, keepdim=True)


class AssociativeMemory(HookedRootModule):
    """The shared module: fixed W_E [pos, d_vocab, d_model] and W_U [d_model, d_vocab_out] (parameters that do
    not require grad: saved with the weights, never optimized), the trainable weights of `cfg.trainable()`,
    and `memory(x)`, the kind's map from e(x) to the vector the unembedding reads.

    Hooks (`HOOKS`): hook_in [batch, d_model] e(x); hook_out [batch, d_model] the memory's output (W e(x), or
    the MLP's); the MLP adds hook_pre / hook_post [batch, d_mlp]. `n_models=M`: M memories side by side, every
    weight (the embeddings too) with a leading model axis, model i exactly a single one with init_seed + i;
    hooks see [n_models * batch, ...].
    """

    HOOKS: ClassVar[tuple[str, ...]] = ("hook_in", "hook_out")

    def __init__(self, cfg: MemoryKind, spec: TaskSpec, n_models: Optional[int] = None):
        super().__init__()
        self.cfg, self.n_models = cfg, n_models
        self.d_vocab, self.n_ctx = spec.d_vocab, spec.n_ctx  # (what probes read off our own models)
        lead = () if n_models is None else (n_models,)
        self.W_E = nn.Parameter(torch.empty(*lead, spec.n_ctx, spec.d_vocab, cfg.d), requires_grad=False)
        self.W_U = nn.Parameter(torch.empty(*lead, cfg.d, spec.d_vocab_out), requires_grad=False)
        for name, (shape, _) in cfg.trainable().items():
            setattr(self, name, nn.Parameter(torch.empty(*lead, *shape)))
        for name in self.HOOKS:
            setattr(self, name, HookPoint())
        self.reset_parameters()
        self.setup()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Per model i, from init_seed + i: the embeddings first (so a kind's other settings never change
        them), then each trainable weight N(0, init_range or 1/sqrt(fan_in)); biases 0."""
        for i in range(self.n_models or 1):
            g = torch.Generator().manual_seed(self.cfg.init_seed + i)
            own = {name: p if self.n_models is None else p[i] for name, p in self.named_parameters()}
            own["W_E"].copy_(sphere(own["W_E"].shape, g))
            d, d_vocab_out = own["W_U"].shape
            own["W_U"].copy_(sphere((d_vocab_out, d), g).T)  # columns u_y on the sphere
            for name, (shape, fan_in) in self.cfg.trainable().items():
                std = self.cfg.init_range if self.cfg.init_range is not None else 1 / math.sqrt(fan_in)
                own[name].copy_(torch.zeros(shape) if name.startswith("b_") else torch.randn(shape, generator=g) * std)

    def stacked(self, name: str) -> Tensor:
        """Weight `name` with a leading model axis (of 1 for a single model)."""
        p = getattr(self, name)
        return p if self.n_models else p.unsqueeze(0)

    def memory(self, x: Float[Tensor, "n_models batch d_model"]) -> Float[Tensor, "n_models batch d_model"]:
        """The kind's map from e(x) to the vector each u_y is compared with."""
        raise NotImplementedError

    def forward(self, tokens: Int[Tensor, "*#n_models batch pos"]) -> Float[Tensor, "*#n_models batch 1 d_vocab_out"]:
        """tokens [batch, pos] (shared by every model) or [n_models, batch, pos] (each its own) -> logits
        [(n_models,) batch, 1, d_vocab_out], the answer at the last position."""
        # Detached: seed views (mechsynth/training/seeds.py) rewrap every parameter as trainable; no gradient may reach them.
        W_E, W_U = self.stacked("W_E").detach(), self.stacked("W_U").detach()
        m, pos = W_E.shape[0], tokens.shape[-1]
        tokens = tokens.expand(m, *tokens.shape[-2:])
        rows = torch.arange(pos, device=tokens.device) * self.d_vocab + tokens  # row of (p, x_p) in W_E.flatten(1, 2)
        x = W_E.flatten(1, 2)[torch.arange(m, device=tokens.device)[:, None, None], rows].sum(2) / math.sqrt(pos)
        x = self.hook_in(x.flatten(0, 1)).view(m, -1, W_E.shape[-1])
        out = self.hook_out(self.memory(x).flatten(0, 1)).view(m, -1, W_E.shape[-1])
        logits = torch.bmm(out, W_U)
        return logits[:, :, None, :] if self.n_models else logits[0, :, None, :]

    def first_layer(self) -> Float[Tensor, "n_models d_model width"]:
        """The trainable weight that reads e(x) (W_mem, or W_in), with a leading model axis."""
        raise NotImplementedError

    @property
    def W_pos_in(self) -> Float[Tensor, "*n_models pos d_vocab_width"]:
        """The trainable first layer as each input position sees it: row p holds W_E[p, t] @ W for every token
        t (W = W_mem, or the MLP's W_in), before the 1/sqrt(P) scaling. The embeddings never move, so how far
        row p drifts from step 0 is how much the memory's response to position p changed (the input-facing
        weights hidden_progress reads)."""
        W_E, W = self.stacked("W_E"), self.first_layer()
        out = torch.einsum("mpvd,mdw->mpvw", W_E, W).flatten(2)
        return out if self.n_models else out[0]


class LinearMemory(AssociativeMemory):
    """out = W_memᵀ e(x) (the paper's W e_x, in TransformerLens's x @ W layout: W_mem [d_model, d_model])."""

    def memory(self, x: Float[Tensor, "n_models batch d_model"]) -> Float[Tensor, "n_models batch d_model"]:
        return torch.bmm(x, self.stacked("W_mem"))

    def first_layer(self) -> Float[Tensor, "n_models d_model width"]:
        return self.stacked("W_mem")


class MLPMemory(AssociativeMemory):
    """out = W_outᵀ relu(W_inᵀ e(x) + b_in): W_in [d_model, d_mlp], b_in [d_mlp], W_out [d_mlp, d_model]."""

    HOOKS = ("hook_in", "hook_pre", "hook_post", "hook_out")

    def memory(self, x: Float[Tensor, "n_models batch d_model"]) -> Float[Tensor, "n_models batch d_model"]:
        m, width = x.shape[0], self.cfg.m  # type: ignore[attr-defined]
        pre = torch.baddbmm(self.stacked("b_in").unsqueeze(1), x, self.stacked("W_in"))
        post = self.hook_post(F.relu(self.hook_pre(pre.flatten(0, 1)))).view(m, -1, width)
        return torch.bmm(post, self.stacked("W_out"))

    def first_layer(self) -> Float[Tensor, "n_models d_model width"]:
        return self.stacked("W_in")


@MODEL_KINDS.register("linear_memory")
@validates_itself
@dataclass(frozen=True)
class LinearMemoryConfig(MemoryKind):
    d: int = doc("d, the embedding dimension; W is d x d", 32, lo=1, hi=MAX_WIDTH)
    init_seed: int = doc(
        "seed of the fixed embeddings and the initial W",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit; seeds side by side add their index",
    )
    init_range: Optional[float] = doc("std of the normal init of W; unset = 1/sqrt(d) (their flax default)", None)

    module = LinearMemory
    hidden = 0
    size_field = "model.d"

    @property
    def memory_params(self) -> int:
        return self.d * self.d

    def trainable(self) -> dict[str, tuple[tuple[int, ...], int]]:
        return {"W_mem": ((self.d, self.d), self.d)}

    def describe(self) -> str:
        return f"linear associative memory, d {self.d}"


@MODEL_KINDS.register("mlp_memory")
@validates_itself
@dataclass(frozen=True)
class MLPMemoryConfig(MemoryKind):
    d: int = doc("d, the embedding dimension", 32, lo=1, hi=MAX_WIDTH)
    m: int = doc("m, the hidden width of the MLP (2md parameters)", 64, lo=1, hi=2**20)
    init_seed: int = doc(
        "seed of the fixed embeddings and the initial weights",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit; seeds side by side add their index",
    )
    init_range: Optional[float] = doc(
        "std of the normal init of W_in and W_out; unset = 1/sqrt(fan_in) (their flax default); b_in starts at 0", None
    )

    module = MLPMemory
    size_field = "model.m"

    @property
    def hidden(self) -> int:  # type: ignore[override]
        return 2 * self.m

    @property
    def memory_params(self) -> int:
        return 2 * self.m * self.d

    def trainable(self) -> dict[str, tuple[tuple[int, ...], int]]:
        return {"W_in": ((self.d, self.m), self.d), "b_in": ((self.m,), self.d), "W_out": ((self.m, self.d), self.m)}

    def describe(self) -> str:
        return f"MLP associative memory, d {self.d}, width {self.m}"
