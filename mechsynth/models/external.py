"""Models from elsewhere, as a run stores them: the model kind's config and the weights in
HookedTransformer's layout. A TransformerLens transformer the user built (TL 3 `HookedTransformer`,
TL 4 `TransformerBridge`, e.g. from `models.tl_compat.hooked_model`) becomes a `transformer` kind with
its sizes; a model mechsynth built is stored as it is. Every conversion is checked where it matters:
the converted model's logits must equal the source's (`check_same`), so an option of the user's
config that mechsynth does not model is refused instead of silently changing the model.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.nn as nn
from jaxtyping import Float
from torch import Tensor

from mechsynth import models
from mechsynth.errors import ConfigError
from mechsynth.models import ModelKind, TransformerConfig, tl_compat
from mechsynth.tasks.base import TaskSpec

# TransformerLens config fields whose other values change the computation in ways FusedTransformer does
# not model, with the value it does model.
_MODELLED = {
    "gated_mlp": False,
    "parallel_attn_mlp": False,
    "final_rms": False,
    "n_key_value_heads": None,
    "use_local_attn": False,
    "scale_attn_by_inverse_layer_idx": False,
    "use_attn_scale": True,
    "post_embedding_ln": False,
    "use_qk_norm": False,
    "num_experts": None,
}
_NORMS = {None: "none", "LN": "LN", "LNPre": "LNPre"}
TOLERANCE = 1e-5  # |Δlogit| allowed between a model and its conversion (relative above 1)


def _fail(what: str) -> ConfigError:
    return ConfigError("model", what)


def kind_of(model: nn.Module) -> ModelKind:
    """The model kind config that rebuilds `model` (its sizes; vocabulary and context come from the task)."""
    if isinstance(getattr(model, "cfg", None), ModelKind):
        return model.cfg
    if not tl_compat.is_hooked_transformer(model):
        raise _fail(
            f"{type(model).__name__} is neither a TransformerLens transformer (TL {tl_compat.TL_VERSION}: "
            f"{'TransformerBridge' if tl_compat.TL_MAJOR >= 4 else 'HookedTransformer'}; build one with "
            "mechsynth.hooked_model) nor a model mechsynth built (mechsynth.models.build)"
        )
    c = model.cfg
    for key, modelled in _MODELLED.items():
        value = getattr(c, key, modelled)
        if value != modelled and not (modelled is None and value in (None, c.n_heads)):
            raise _fail(f"its config has {key}={value!r}; mechsynth models transformers with {key}={modelled!r}")
    if c.normalization_type not in _NORMS:
        raise _fail(f"normalization_type={c.normalization_type!r} is not modelled; allowed: LN, LNPre, None")
    return TransformerConfig(
        n_layers=c.n_layers,
        n_heads=c.n_heads,
        d_model=c.d_model,
        d_head=c.d_head,
        d_mlp=None if c.attn_only else c.d_mlp,
        attn_only=bool(c.attn_only),
        positional=c.positional_embedding_type,
        normalization=_NORMS[c.normalization_type],
        act_fn=c.act_fn,
        n_ctx=c.n_ctx,
    )


def sizes(model: nn.Module) -> tuple[int, Optional[int], int]:
    """(d_vocab, d_vocab_out, n_ctx) of a TransformerLens or mechsynth model (d_vocab_out None: a mechsynth kind
    that does not say it); AttributeError for a model that says neither."""
    if isinstance(getattr(model, "d_vocab", None), int):  # ours keep their sizes themselves
        return model.d_vocab, getattr(model, "d_vocab_out", None), model.n_ctx
    c = model.cfg
    return c.d_vocab, c.d_vocab_out if c.d_vocab_out > 0 else c.d_vocab, c.n_ctx


def task_misfit(model: nn.Module, spec: TaskSpec, task_name: str) -> Optional[str]:
    """Why `model` cannot read the task's sequences or answer in its output classes, naming both sizes."""
    try:
        d_vocab, d_vocab_out, n_ctx = sizes(model)
    except AttributeError:
        return None  # not a model whose sizes we know: the probes' own checks speak
    if d_vocab != spec.d_vocab:
        return (
            f"the model's vocabulary has {d_vocab} tokens and task {task_name}'s has {spec.d_vocab} "
            f"(d_vocab); build the model with d_vocab={spec.d_vocab}"
        )
    if d_vocab_out is not None and d_vocab_out != spec.d_vocab_out:
        return (
            f"the model has {d_vocab_out} outputs and task {task_name} has {spec.d_vocab_out} target classes "
            f"(d_vocab_out); build the model with d_vocab_out={spec.d_vocab_out}"
        )
    if n_ctx < spec.n_ctx:
        return (
            f"the model's context is {n_ctx} positions and task {task_name}'s sequences are {spec.n_ctx} "
            f"tokens (n_ctx); build the model with n_ctx ≥ {spec.n_ctx}"
        )
    return None


def check_fits(model: nn.Module, task: Any) -> None:
    why = task_misfit(model, task.spec, task.name)
    if why is not None:
        raise _fail(why)


def weights_of(model: nn.Module) -> dict[str, Tensor]:
    """The model's weights in HookedTransformer's layout (what checkpoints hold), detached, on the CPU."""
    if isinstance(getattr(model, "cfg", None), ModelKind):
        sd = model.state_dict()
    elif tl_compat.is_bridge(model):
        sd = tl_compat.from_bridge_layout(model.state_dict(), model.cfg.n_heads)
    else:  # HookedTransformer
        sd = {k: v for k, v in model.state_dict().items() if not k.endswith(tl_compat.BUFFERS)}
    return {k.removeprefix("_orig_mod."): v.detach().to("cpu", copy=True).contiguous() for k, v in sd.items()}


def nonfinite(weights: dict[str, Tensor]) -> Optional[str]:
    """The name of the first floating-point tensor in `weights` holding a NaN or an infinity (None: all finite)."""
    return next((k for k, v in weights.items() if v.is_floating_point() and not bool(v.isfinite().all())), None)


NONFINITE = "a run's checkpoints are finite (mechsynth train stops at the last finite one)"


def shape_text(t: Tensor) -> str:
    """A tensor's shape as the one-line errors write it: "2×16"."""
    return "×".join(map(str, t.shape))


def weights_misfit(expected: dict[str, Tensor], weights: dict[str, Tensor]) -> Optional[str]:
    """The first parameter whose presence or size differs between a built model's state dict and the weights."""
    for key, t in expected.items():
        if key not in weights:
            return f"the checkpoint has no {key} ({shape_text(t)} in the model)"
        if weights[key].shape != t.shape:
            return f"{key} is {shape_text(weights[key])} in the checkpoint and {shape_text(t)} in the model"
    extra = next((k for k in weights if k not in expected), None)
    return (
        None if extra is None else f"the checkpoint has {extra} ({shape_text(weights[extra])}), which the model has not"
    )


def rebuild(cfg: ModelKind, spec: TaskSpec, weights: dict[str, Tensor], hint: str = "") -> nn.Module:
    """The trainable mechsynth model of kind `cfg` with `weights` (what `Run.trainable` gives). Weights that do
    not fit are one line naming the first parameter that differs and both its sizes, then `hint`
    (load_state_dict's own error runs over many lines and names an internal class)."""
    model = models.build(cfg, spec)
    why = weights_misfit(model.state_dict(), weights)
    if why is not None:
        raise _fail(f"the weights do not fit a {cfg.describe()}: {why}{hint}")
    model.load_state_dict(weights)
    return model.eval()


@torch.no_grad()
def max_difference(a: nn.Module, b: nn.Module, spec: TaskSpec, n: int = 8, seed: int = 0) -> float:
    """max |logits_a − logits_b| / max(1, |logits_a|) on `n` random sequences of the task's length (of standard
    normal vectors for a continuous task)."""
    g = torch.Generator().manual_seed(seed)
    tokens = (
        torch.randint(spec.d_vocab, (n, spec.n_ctx), generator=g)
        if spec.d_input is None
        else torch.randn(n, spec.n_ctx, spec.d_input, generator=g)
    )
    device = next(a.parameters()).device
    la: Float[Tensor, "batch pos d_vocab_out"] = a(tokens.to(device)).float().cpu()
    lb = b(tokens.to(next(b.parameters()).device)).float().cpu()
    if la.shape != lb.shape:
        return math.inf
    return float(((la - lb).abs() / la.abs().clamp_min(1)).max())


def check_same(source: nn.Module, converted: nn.Module, spec: TaskSpec) -> None:
    """Refuse a conversion that computes differently from its source."""
    diff = max_difference(source, converted, spec)
    if not diff <= TOLERANCE:
        raise _fail(
            f"{type(source).__name__} computes differently from the mechsynth model of its config "
            f"(max |Δlogit| {diff:.2g} > {TOLERANCE:g}): its config has an option mechsynth does not model"
        )


def convert(model: nn.Module, task: Any, check: bool = True) -> tuple[ModelKind, dict[str, Tensor]]:
    """(model kind config, weights) that a run stores for `model` trained on `task`; with `check`, the
    rebuilt model's logits are compared with `model`'s."""
    check_fits(model, task)
    cfg, weights = kind_of(model), weights_of(model)
    # Said as what it is: compared below, NaN logits would read as "computes differently" (an unmodelled option).
    if (bad := nonfinite(weights)) is not None:
        raise _fail(f"its weights are not finite ({bad} holds NaN or inf); {NONFINITE}")
    if check and not isinstance(getattr(model, "cfg", None), ModelKind):
        check_same(model, rebuild(cfg, task.spec, weights), task.spec)
    return cfg, weights


def trainable(model: nn.Module, task: Any) -> nn.Module:
    """The plain mechsynth model (FusedTransformer) with a TransformerLens model's weights: what the
    landscape probes differentiate. A hooked model keeps activations of its last forward attached to
    the graph (TL 4's bridge), which devinterp's per-chain deepcopy cannot copy, and holds its
    unembedding bias as a buffer, which SGLD would never move; the plain model has neither problem."""
    if isinstance(getattr(model, "cfg", None), ModelKind):
        return model
    cfg, weights = convert(model, task, check=False)
    return rebuild(cfg, task.spec, weights).to(next(model.parameters()).device)
