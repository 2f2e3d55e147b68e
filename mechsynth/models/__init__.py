"""Model kinds: each file registers one (its config, how to build, hook and size it); adding a kind
touches one file. The transformer trains FusedTransformer and is probed as TransformerLens's model; the
MLP baseline is probed as itself; the linearized kind (the first-order Taylor expansion of another kind) is
probed as the network it linearizes, at its current weights."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import torch
import torch.nn as nn

from mechsynth.errors import ConfigError
from mechsynth.models.base import DEFAULT_KIND, MODEL_KINDS, ModelKind, build, fields, names, parse, to_dict, validate

if TYPE_CHECKING:
    from mechsynth.models.fused import FusedTransformer
    from mechsynth.models.mlp import MLPBaseline, MLPConfig
    from mechsynth.models.tl_compat import TL_VERSION, load_weights
    from mechsynth.models.transformer import TransformerConfig

# The kinds register themselves when MODEL_KINDS is first looked up (models/base.py); these names of theirs are
# imported when first asked for, since they import TransformerLens.
_LAZY = {
    "FusedTransformer": "fused",
    "MLPBaseline": "mlp",
    "MLPConfig": "mlp",
    "TL_VERSION": "tl_compat",
    "load_weights": "tl_compat",
    "TransformerConfig": "transformer",
}


def __getattr__(name: str) -> object:
    import importlib

    if name not in _LAZY:
        raise AttributeError(f"module 'mechsynth.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"mechsynth.models.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def stored_table(table: Any) -> Any:
    """A model table from a stored config.json with the fields of other kinds dropped: runs made before
    each kind had its own config stored every kind's fields. (Only for stored configs: in a user's TOML a
    key of another kind is a mistake, which `parse` names.) A kind's table within it (the linearized kind's base)
    is read alike."""
    if not isinstance(table, dict) or table.get("kind", DEFAULT_KIND) not in MODEL_KINDS:
        return table  # parse says what is wrong
    own = set(fields(table.get("kind", DEFAULT_KIND)))
    foreign = {f for k in names() for f in fields(k)} - own
    return {
        k: stored_table(v) if isinstance(v, dict) and "kind" in v else v for k, v in table.items() if k not in foreign
    }


def build_model(task: Any, kind: Optional[str] = None, *, n_models: Optional[int] = None, **fields: Any) -> nn.Module:
    """The model `mechsynth train` trains, for your own training loop: for a transformer the fused model
    (FusedTransformer), several times faster per step than TransformerLens's own model, whose `state_dict()`
    has HookedTransformer's parameter names and layout (`embed.W_E`, `blocks.0.attn.W_Q` [head_index, d_model,
    d_head], ...), so its checkpoints probe exactly as TransformerLens's model with these weights does.

    `task`: a Task (`mechsynth.tasks.make(name, params)`), a task name (its default parameters), or a RunConfig
    (`mechsynth.parse_config(...)`: its task and its [model] table, which `fields` override). The task sets the
    vocabulary, the context and the output classes. `kind`: a model kind (unset: the config's, else
    "transformer"); `fields`: that kind's config fields (`n_layers=2, d_model=64, n_heads=2, attn_only=True`, ...,
    `init_seed`), each checked as `mechsynth train` checks the [model] table. `n_models=M`: M models side by side
    (seeds init_seed, init_seed + 1, ...). The model is on the CPU, in training mode: `.to(device)` it.
    It goes wherever a TransformerLens model does in mechsynth (`Monitor`, `save_checkpoint`, `probe_models`);
    `mechsynth.models.hooked(model)` is TransformerLens's own model (HookedTransformer / TransformerBridge) with
    its current weights, for `run_with_cache` and TransformerLens's tools."""
    from mechsynth import tasks as task_lib  # (mechsynth.tasks imports nothing of the models)

    base: dict[str, Any] = {}
    if hasattr(task, "build_task") and isinstance(getattr(task, "model", None), ModelKind):  # a RunConfig
        base, task = to_dict(task.model), task.build_task()
    elif isinstance(task, str):
        task = task_lib.make(task, {})
    if not hasattr(task, "spec"):
        raise ConfigError(
            "task",
            f"expected a Task (mechsynth.tasks.make(name, params)), a task name or a RunConfig, "
            f"got {type(task).__name__}",
        )
    if kind is not None and kind != base.get("kind", kind):
        base = {}  # another kind: the config's model fields are not its own
    table = {**base, **({"kind": kind} if kind is not None else {}), **fields}
    cfg = parse(table, "model")
    return build(cfg, task.spec, n_models)


def describe(cfg: ModelKind) -> str:
    """One line naming the architecture, for report headers ("2-layer attention-only transformer, 1 heads,
    d_model 32", "MLP, width 100")."""
    return cfg.describe()


def hooked(model: nn.Module, device: str | torch.device = "cpu") -> nn.Module:
    """The model as TransformerLens sees it: for a transformer a HookedTransformer / TransformerBridge with
    the same weights; a kind that is its own HookedRootModule (the MLP baseline) is returned as is."""
    cfg = getattr(model, "cfg", None)
    if not isinstance(cfg, ModelKind):
        raise TypeError(f"{type(model).__name__} was not made by models.build (its .cfg is no model kind's config)")
    out = cfg.hooked(model, device)
    out.input_weights = cfg.input_weights()
    return out


def probed(model: nn.Module) -> nn.Module:
    """The module probes read (activations, weights; side by side too): the trained module itself, except for
    a kind without activations of its own to hook (linearized: the network it linearizes, at the current
    weights). What `hooked()` gives is always a view of this module."""
    return model.cfg.probed(model)


def reload(hooked_model: nn.Module, model: nn.Module) -> nn.Module:
    """`hooked(model)` made cheaply: `hooked_model` (a `hooked()` of the same config, e.g. an earlier
    checkpoint) with `model`'s weights loaded into it, the same object."""
    return model.cfg.reload(hooked_model, model)


__all__ = [
    "DEFAULT_KIND",
    "FusedTransformer",
    "MLPBaseline",
    "MLPConfig",
    "MODEL_KINDS",
    "ModelKind",
    "TL_VERSION",
    "TransformerConfig",
    "build",
    "build_model",
    "describe",
    "hooked",
    "load_weights",
    "names",
    "parse",
    "probed",
    "reload",
    "stored_table",
    "to_dict",
    "validate",
]
