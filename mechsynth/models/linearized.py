"""The linearized kind: any other kind's network replaced by its first-order Taylor expansion at initialization (the
neural tangent kernel model of lazy training), and the output scale α that moves a real network towards it. The lazy
regime is Chizat, Oyallon & Bach's (2019); Bai & Lee's QuadNTK and Nichani, Damian & Lee (2022) ask how networks
escape it.

    [model]
    kind = "linearized"
    scale = 1.0                  # α
    linearize = true             # false: the real network, centred and scaled
    init_seed = 0                # θ₀'s seed: the base takes it from here
    base = { kind = "transformer", n_layers = 2, n_heads = 1, d_model = 32, attn_only = true }

With `linearize = true` the model is f_lin(x; θ) = α·J_θ f(x; θ₀)·(θ − θ₀): centred (f(x; θ₀) subtracted, as
Chizat et al. do), so it starts at 0 and is linear in θ. With `linearize = false` it is α·(f(x; θ) − f(x; θ₀)): the
network itself, centred and scaled; as α grows its training stays ever closer to f_lin's (lazy training), provided
the learning rate shrinks like 1/α² (the output moves α·Δθ, the gradient is α times larger: compare runs at
lr·α² fixed). That is gradient descent's rule; Adam's steps do not grow with the gradient, so under Adam it is 1/α.

θ₀ (the base's initialisation from `init_seed`) is stored beside θ as parameters that do not require gradients,
under `init.` (θ lives under `base.`, with the base's own names): checkpoints hold both, the optimizer never sees
θ₀, and seeds side by side stack and split them as every weight (a buffer would be copied whole to each seed).

What probes see: the base's hooked view of the CURRENT weights θ (`probed`, `hooked`), not the linearized
function's activations. Forward-mode AD computes J·(θ − θ₀) without ever forming activations of f_lin one could
hook (its "activations" are tangents of the base's), and in the lazy regime θ stays near θ₀, so the network at θ
is what f_lin is the expansion of; attention and circuit probes then say whether the weights formed a circuit.
Loss and accuracy come from the linearized forward itself, through the trainer's evaluation as for every kind.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Optional

import torch
import torch.nn as nn
from jaxtyping import Float, Int
from torch import Tensor
from torch.func import functional_call, jvp

from mechsynth.config import MAX_SEED, check, check_fields, doc, show, validates_itself
from mechsynth.errors import ConfigError
from mechsynth.models.base import DEFAULT_KIND, MODEL_KINDS, ModelKind, build, parse, to_dict, validate
from mechsynth.tasks.base import TaskSpec


@MODEL_KINDS.register("linearized")
@validates_itself
@dataclass(frozen=True)
class LinearizedConfig(ModelKind):
    """α·J f(θ₀)·(θ − θ₀), or α·(f(θ) − f(θ₀)), of the network `base` describes. Probes and `hooked()` see that
    network at the current weights θ, not the linearized function (which has no activations to hook); the
    trainer's loss and accuracy are the linearized function's own."""

    base: ModelKind = doc(
        "the network to linearize: another kind's [model] table (its kind and fields; its "
        'init_seed is this table\'s), e.g. {kind = "transformer", n_layers = 2}',
        {},
    )
    scale: float = doc(
        "α: the output is α·J(θ − θ₀) (linearize) or α·(f(θ) − f(θ₀)); large α without "
        "linearizing is the lazy regime (compare runs at lr·α² fixed under SGD, lr·α under Adam)",
        1.0,
    )
    linearize: bool = doc(
        "true: the first-order Taylor expansion at θ₀ (the NTK model); false: the network "
        "itself, centred and scaled by α",
        True,
    )
    init_seed: int = doc(
        "seed of θ₀, the base's initial weights (passed down to the base)",
        0,
        lo=0,
        hi=MAX_SEED,
        why="torch seeds are 64-bit; seeds side by side add their index",
    )

    # Whether the task's vectors are readable is the base's to say (`validate` asks it).
    reads_vectors = True

    def __post_init__(self):
        check_fields(self)
        check(self.scale > 0, "scale", f"must be > 0, got {self.scale}")
        base = self.base
        if isinstance(base, dict):
            kind = base.get("kind", DEFAULT_KIND)
            check(
                kind != self.kind,
                "base.kind",
                f"{kind!r} cannot be linearized again (the base is the network to linearize); allowed: any other kind",
            )
            check(
                "init_seed" not in base,
                "base.init_seed",
                "is set by model.init_seed (one seed for θ₀); allowed: "
                "init_seed beside kind = 'linearized', not in base",
            )
            base = parse({**base, "init_seed": self.init_seed}, "base")
        elif isinstance(base, ModelKind):  # built in Python, or `replace(cfg, init_seed=...)`: the seed is ours
            check(
                not isinstance(base, LinearizedConfig),
                "base.kind",
                f"{self.kind!r} cannot be linearized again; allowed: any other kind",
            )
            base = base if base.init_seed == self.init_seed else replace(base, init_seed=self.init_seed)
        else:
            raise ConfigError("base", f"expected a table (another kind's [model] config), got {show(base)}")
        object.__setattr__(self, "base", base)

    def table(self) -> dict[str, Any]:
        # The base's init_seed is ours: stored once, so a config.json round-trips and a sweep's seed sets both.
        base = {k: v for k, v in to_dict(self.base).items() if k != "init_seed"}
        return {"base": base, "scale": self.scale, "linearize": self.linearize, "init_seed": self.init_seed}

    @property
    def transformer_lens(self) -> bool:
        return self.base.transformer_lens

    def describe(self) -> str:
        what = "linearized (NTK)" if self.linearize else "centred"
        return f"{what} {self.base.describe()}, α = {self.scale:g}"

    def validate(self, spec: TaskSpec) -> None:
        try:
            validate(self.base, spec)
        except ConfigError as e:  # the base names its fields model.<key>: here they are model.base.<key>
            raise ConfigError(e.field.replace("model.", "model.base.", 1), str(e).split(": ", 1)[1]) from None

    def build(self, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
        return Linearized(self, build(self.base, spec, n_models))

    def input_weights(self) -> Optional[str]:
        return self.base.input_weights()

    def hooked(self, model: nn.Module, device: str | torch.device) -> nn.Module:
        return self.base.hooked(model.base, device)

    def probed(self, model: nn.Module) -> nn.Module:
        return model.base

    def reload(self, hooked: nn.Module, model: nn.Module) -> nn.Module:
        return self.base.reload(hooked, model.base)

    # ---- the memory estimate: θ and θ₀; the base's activations, and their tangents ---------------------

    def param_count(self, spec: TaskSpec) -> int:
        return 2 * self.base.param_count(spec)

    def activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        acts, pattern = self.base.activation_bytes(spec, batch)
        if not self.linearize:  # the network with gradients, and f(θ₀) without
            return acts + self.base.eval_activation_bytes(spec, batch)[0], pattern
        # The backward pass through a JVP keeps activations and their tangents: measured 1.4–2x the base's on
        # the transformer (attention patterns twice).
        return 2 * acts, 2 * pattern

    def eval_activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        acts, pattern = self.base.eval_activation_bytes(spec, batch)
        return (2 * acts, 2 * pattern) if self.linearize else (acts, pattern)

    def weight_field(self, spec: TaskSpec, context_field: str) -> str:
        field = self.base.weight_field(spec, context_field)
        return field.replace("model.", "model.base.", 1) if field.startswith("model.") else field


# Forward-mode AD levels are process-wide, and so are the flags that pick PyTorch's attention kernels; seeds side
# by side run their passes on worker threads. So one JVP at a time (their backward passes still run in parallel).
_JVP = threading.Lock()
_FUSED = ("flash", "mem_efficient", "cudnn")  # attention kernels without a forward-mode derivative


@contextlib.contextmanager
def forward_mode() -> Iterator[None]:
    """Hold this process's one JVP, with `scaled_dot_product_attention` through its math kernel: the fused kernels
    (flash, memory-efficient, cuDNN) have no forward-mode derivative."""
    cuda = torch.backends.cuda
    with _JVP:
        # (cuDNN's flag is newer than torch 2.2)
        saved = {k: getattr(cuda, f"{k}_sdp_enabled")() for k in _FUSED if hasattr(cuda, f"{k}_sdp_enabled")}
        for k in saved:
            getattr(cuda, f"enable_{k}_sdp")(False)
        try:
            yield
        finally:
            for k, enabled in saved.items():
                getattr(cuda, f"enable_{k}_sdp")(enabled)


class Linearized(nn.Module):
    """α·J f(θ₀)·(θ − θ₀) (or α·(f(θ) − f(θ₀)) with linearize = false) of the network `base`, which holds θ.

    `base` is the base kind's own module, holding θ: what the optimizer trains, and what probes and `hooked()` see
    — the network at the current weights, NOT the linearized function: forward-mode AD never forms activations of
    f_lin to hook (its intermediates are tangents of the base's), and in the lazy regime θ stays near θ₀, so the
    network at θ is what f_lin expands. `init` is a copy of it at initialisation (θ₀, never trained). Side by side
    (`n_models`) both carry the leading model axis, and one JVP runs all models.
    """

    def __init__(self, cfg: LinearizedConfig, base: nn.Module):
        super().__init__()
        self.cfg = cfg
        self.base = base
        self.init = copy.deepcopy(base).requires_grad_(False)

    @property
    def n_models(self) -> Optional[int]:
        return self.base.n_models

    @n_models.setter
    def n_models(self, value: Optional[int]) -> None:
        # seed_view (seeds side by side) slices every parameter to one model's and sets n_models = None on the
        # copy: both networks must hear it.
        self.base.n_models = value
        self.init.n_models = value

    def forward(
        self, tokens: Int[Tensor, "*#n_models batch pos"] | Float[Tensor, "*#n_models batch pos d_input"]
    ) -> Float[Tensor, "*#n_models batch out_pos d_vocab_out"]:
        """The base's input -> α·(its output's first-order change from θ₀), in the base's output shape."""
        if not self.cfg.linearize:
            with torch.no_grad():
                start = self.init(tokens)
            return self.cfg.scale * (self.base(tokens) - start)
        theta0 = dict(self.init.named_parameters())
        # θ − θ₀ carries the gradient to θ: f_lin is linear in it, so backpropagating through the JVP gives
        # α·J(θ₀)ᵀ·(the loss's gradient), the NTK model's gradient.
        tangent = {name: p - theta0[name] for name, p in self.base.named_parameters()}
        with forward_mode():
            _, change = jvp(lambda params: functional_call(self.base, params, (tokens,)), (theta0,), (tangent,))
        return self.cfg.scale * change
