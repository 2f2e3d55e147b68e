"""Model kinds: each file registers one (its config, how to build, hook and size it); adding a kind
touches one file. The transformer trains FusedTransformer and is probed as TransformerLens's model; the
MLP baseline is probed as itself."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any, Optional

import torch
import torch.nn as nn

from mechsynth.config import ConfigError, check, from_dict, key_name, show
from mechsynth.config import to_dict as fields_dict
from mechsynth.models.base import MODEL_KINDS, ModelKind
from mechsynth.models.fused import FusedTransformer
from mechsynth.models.mlp import MLPBaseline, MLPConfig
from mechsynth.models.tl_compat import TL_VERSION, load_weights
from mechsynth.models.transformer import TransformerConfig
from mechsynth.tasks.base import TaskSpec

DEFAULT_KIND = "transformer"

# Import every sibling module so each kind registers itself.
for _m in pkgutil.iter_modules(__path__):
    if _m.name != "base":
        importlib.import_module(f"{__name__}.{_m.name}")


def names() -> list[str]:
    return MODEL_KINDS.names()


def _fields(kind: str) -> list[str]:
    return [f.name for f in dataclasses.fields(MODEL_KINDS.get(kind)) if f.init]


def parse(table: dict[str, Any], field: str = "model") -> ModelKind:
    """The config of the kind `table["kind"]` names (default: transformer), from the rest of the table;
    every error names `<field>.<key>`, and a key of another kind says whose it is."""
    check(isinstance(table, dict), field, f"expected a table, got {show(table)}")
    table = dict(table)
    kind = table.pop("kind", DEFAULT_KIND)
    check(isinstance(kind, str) and kind in MODEL_KINDS, f"{field}.kind",
          f"{show(kind)} is not allowed; allowed: {', '.join(map(repr, names()))}")
    own = _fields(kind)
    for key in table:
        others = [k for k in names() if key not in own and key in _fields(k)]
        if others:
            whose = f"kind {others[0]!r}" if len(others) == 1 else f"kinds {', '.join(map(repr, others))}"
            raise ConfigError(f"{field}.{key_name(key)}", f"is a field of {whose}, not {kind!r}; "
                                                          f"allowed for {kind!r}: {', '.join(sorted(own))}")
    return from_dict(MODEL_KINDS.get(kind), table, field)


def stored_table(table: Any) -> Any:
    """A model table from a stored config.json with the fields of other kinds dropped: runs made before
    each kind had its own config stored every kind's fields. (Only for stored configs: in a user's TOML a
    key of another kind is a mistake, which `parse` names.)"""
    if not isinstance(table, dict) or table.get("kind", DEFAULT_KIND) not in MODEL_KINDS:
        return table  # parse says what is wrong
    own = set(_fields(table.get("kind", DEFAULT_KIND)))
    foreign = {f for k in names() for f in _fields(k)} - own
    return {k: v for k, v in table.items() if k not in foreign}


def to_dict(cfg: ModelKind) -> dict[str, Any]:
    """`kind` and that kind's fields, as config.json and `parse` have them."""
    return {"kind": cfg.kind, **fields_dict(cfg)}


def describe(cfg: ModelKind) -> str:
    """One line naming the architecture, for report headers ("2-layer attention-only transformer, 1 heads,
    d_model 32", "MLP, width 100")."""
    return cfg.describe()


def validate(cfg: ModelKind, spec: TaskSpec) -> None:
    """Every check that needs both the model and the task, so bad input fails before any work."""
    if spec.d_input is not None and not cfg.reads_vectors:
        readers = [k for k in names() if MODEL_KINDS.get(k).reads_vectors]
        raise ConfigError("model.kind", f"{cfg.kind!r} reads token ids, and the task feeds {spec.d_input}-wide vectors "
                                        f"(continuous inputs); allowed: {', '.join(map(repr, readers))}")
    cfg.validate(spec)


def build(cfg: ModelKind, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
    """The trainable model for a task, initialised from cfg.init_seed. `n_models=M`: M of them side by
    side, initialised from init_seed, init_seed + 1, ... Every built model carries its config (`.cfg`)
    and `.input_weights` (the weight whose first n_inputs rows face the input positions, or None)."""
    validate(cfg, spec)
    model = cfg.build(spec, n_models)
    model.cfg, model.input_weights = cfg, cfg.input_weights()
    return model


def hooked(model: nn.Module, device: str | torch.device = "cpu") -> nn.Module:
    """The model as TransformerLens sees it: for a transformer a HookedTransformer / TransformerBridge with
    the same weights; a kind that is its own HookedRootModule (the MLP baseline) is returned as is."""
    cfg = getattr(model, "cfg", None)
    if not isinstance(cfg, ModelKind):
        raise TypeError(f"{type(model).__name__} was not made by models.build (its .cfg is no model kind's config)")
    out = cfg.hooked(model, device)
    out.input_weights = cfg.input_weights()
    return out


def reload(hooked_model: nn.Module, model: nn.Module) -> nn.Module:
    """`hooked(model)` made cheaply: `hooked_model` (a `hooked()` of the same config, e.g. an earlier
    checkpoint) with `model`'s weights loaded into it, the same object."""
    return model.cfg.reload(hooked_model, model)


__all__ = ["DEFAULT_KIND", "FusedTransformer", "MLPBaseline", "MLPConfig", "MODEL_KINDS", "ModelKind", "TL_VERSION",
           "TransformerConfig", "build", "describe", "hooked", "load_weights", "names", "parse", "reload",
           "stored_table", "to_dict", "validate"]
