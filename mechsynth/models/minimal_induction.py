"""The minimal_induction kind: the simplified two-layer linear transformer of Edelman, Edelman, Goel, Malach &
Tsilivis 2024 ("The evolution of statistical induction heads"), in which they analyse how an in-context bigram
(statistical induction) head forms:

    f(E) = mask(E W_k (M E)ᵀ) E,    M[i, j] = v_{i−j+1} for j ≤ i (0 above the diagonal)

E [pos, d_vocab] is the one-hot sequence; the first layer M E mixes each position with those before it by the
learned relative-position vector v (v_1: the token itself, v_2: the one before, ...); the second layer is linear
attention from each token to the mixed keys through W_k [d_vocab, d_vocab], with the causal mask zeroing keys
after the query (no softmax), and copies the keys' tokens. Row i is a weighted count of tokens, read as the
logits of the next token (their code feeds it to cross-entropy as is). The bigram solution is W_k = I,
v = (0, 1, 0, ...): the tokens that followed earlier copies of the current one; the unigram one W_k = 11ᵀ,
v = (1, 0, ...): every token so far.

As their code (github.com/EzraEdelman/Evolution-of-Statistical-Induction-Heads, mingpt/min_model.py, in its first,
linear form): W_k starts at `init_W_scale`·11ᵀ (an uninformed start) or at `init_W_scale`·I, v at `init_v`
everywhere; they train with plain SGD, v at lr 1 and W_k at 1e-2. One learning rate serves both here: v is
stored as u with v = sqrt(`v_lr_ratio`)·u, which under plain SGD is exactly v's own learning rate ratio × W_k's
(under Adam it only rescales v's start). Probes read `W_k` and `v` (index 0 is their v_1).

Hooks: `hook_prev` [batch pos d_vocab], the first layer's M E; `hook_scores` [batch query_pos key_pos], the
second layer's masked scores (unnormalized: not an attention pattern, so attention probes refuse the model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

import torch
import torch.nn as nn
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.config import MAX_SEED, check, check_fields, doc, validates_itself
from mechsynth.errors import ConfigError
from mechsynth.models.base import FLOAT, MODEL_KINDS, ModelKind
from mechsynth.models.tl_compat import HookedRootModule, HookPoint
from mechsynth.tasks.base import TaskSpec


@MODEL_KINDS.register("minimal_induction")
@validates_itself
@dataclass(frozen=True)
class MinimalInductionConfig(ModelKind):
    init_W: Literal["uniform", "identity"] = doc(
        "W_k's start: init_W_scale·11ᵀ (uninformed, their code's) or init_W_scale·I", "uniform"
    )
    init_W_scale: float = doc("the scale of W_k's start", 0.01)
    init_v: float = doc("every v_d's start (their code: 0)", 0.0)
    v_lr_ratio: float = doc("v's learning rate over W_k's under plain SGD (theirs: 1 / 1e-2)", 100.0)
    init_seed: int = doc(
        "unused: the start is deterministic (kept so seeds side by side and sweeps can set it)",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit",
    )

    def __post_init__(self):
        check_fields(self)
        check(self.v_lr_ratio > 0, "v_lr_ratio", f"must be > 0, got {self.v_lr_ratio}")
        check(
            self.init_W_scale != 0 or self.init_v != 0,
            "init_W_scale",
            "0 with init_v = 0 starts where every gradient is 0 (nothing would train); set either",
        )

    def describe(self) -> str:
        return "minimal induction model (linear, relative positions v, W_k)"

    def validate(self, spec: TaskSpec) -> None:
        if spec.d_vocab != spec.d_vocab_out:
            raise ConfigError(
                "model.kind",
                f"'minimal_induction' predicts the next token by copying input tokens, so "
                f"the task's outputs must be its tokens; it has {spec.d_vocab} tokens and "
                f"{spec.d_vocab_out} outputs (markov_icl fits)",
            )

    def build(self, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
        return MinimalInduction(self, spec, n_models)

    def param_count(self, spec: TaskSpec) -> int:
        return spec.d_vocab**2 + spec.n_ctx

    def activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        t, k = spec.n_ctx, spec.d_vocab
        return batch * FLOAT * (2 * t * t + 5 * t * k), batch * FLOAT * t * t

    def eval_activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        return self.activation_bytes(spec, batch)

    def weight_field(self, spec: TaskSpec, context_field: str) -> str:
        return context_field


class MinimalInduction(HookedRootModule):
    def __init__(self, cfg: MinimalInductionConfig, spec: TaskSpec, n_models: Optional[int] = None):
        super().__init__()
        self.cfg, self.n_models = cfg, n_models
        self.d_vocab, self.d_vocab_out, self.n_ctx = spec.d_vocab, spec.d_vocab_out, spec.n_ctx
        lead = () if n_models is None else (n_models,)
        k = spec.d_vocab
        start = torch.ones(k, k) if cfg.init_W == "uniform" else torch.eye(k)
        self.W_k = nn.Parameter((cfg.init_W_scale * start).expand(*lead, k, k).clone())
        self.u = nn.Parameter(torch.full((*lead, spec.n_ctx), cfg.init_v / self.v_scale))
        self.hook_prev = HookPoint()
        self.hook_scores = HookPoint()
        self.setup()

    @property
    def v_scale(self) -> float:
        return math.sqrt(self.cfg.v_lr_ratio)

    @property
    def v(self) -> Float[Tensor, "*n_models pos"]:
        """The relative-position vector: v[..., d] weighs the token d positions back (their v_{d+1})."""
        return self.v_scale * self.u

    def forward(self, tokens: Int[Tensor, "*#n_models batch pos"]) -> Float[Tensor, "*#n_models batch pos d_vocab_out"]:
        """tokens [batch, pos] -> logits [batch, pos, d_vocab]; side by side, [n_models, batch, pos] or the same
        [batch, pos] for every model -> [n_models, batch, pos, d_vocab]. Hooks see [n_models * batch, ...]."""
        m, t = self.n_models, tokens.shape[-1]
        stacked = m is not None
        if stacked and tokens.ndim == 2:
            tokens = tokens.expand(m, *tokens.shape)
        W_k, v = (self.W_k, self.v) if stacked else (self.W_k[None], self.v[None])
        E = nn.functional.one_hot(tokens if stacked else tokens[None], self.d_vocab).to(W_k.dtype)  # [models, b, t, k]
        back = torch.arange(t, device=tokens.device)
        back = back[:, None] - back[None, :]  # i − j
        M = torch.where(back >= 0, v[:, back.clamp(min=0)], 0.0)  # [models, t, t]
        prev = self._hooked(self.hook_prev, M[:, None] @ E)  # [models, b, t, k]: M E
        scores = (E @ W_k[:, None]) @ prev.transpose(-1, -2)  # [models, b, t(query), t(key)]
        scores = self._hooked(self.hook_scores, scores.tril())
        out = scores @ E
        return out if stacked else out[0]

    @staticmethod
    def _hooked(hook: HookPoint, x: Tensor) -> Tensor:
        """x [models, batch, ...] through a hook as [models * batch, ...]."""
        return hook(x.flatten(0, 1)).reshape(x.shape)
