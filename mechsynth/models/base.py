"""What every model kind provides. A kind is one file in mechsynth/models/: a frozen config dataclass of
its own fields that subclasses `ModelKind` and registers itself (`@MODEL_KINDS.register("mlp")`); the
config knows how to build, hook and size its model, so callers ask it instead of checking classes.

Here too: parsing a kind's table, storing it, checking it against a task and building its model (re-exported by
mechsynth.models), so that a kind built on another kind (linearized.py) reads and builds its base without
importing the package that imports it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Optional

import torch
import torch.nn as nn

from mechsynth.config import check, from_dict, key_name, show
from mechsynth.config import to_dict as fields_dict
from mechsynth.errors import ConfigError
from mechsynth.registry import Registry
from mechsynth.tasks.base import TaskSpec

DEFAULT_KIND = "transformer"

FLOAT = 4  # bytes: weights, activations and optimizer state are float32


class ModelKind:
    """Base of each kind's config. Every kind has an `init_seed` field (seeds side by side and sweeps set
    `model.init_seed`); `kind` is the registered name, so it is spelled once, in the register call."""

    name: ClassVar[str]  # set by MODEL_KINDS.register
    # Whether the kind reads a continuous task's vectors (TaskSpec.d_input) rather than token ids only;
    # `models.validate` refuses such a task for a kind that does not.
    reads_vectors: ClassVar[bool] = False
    init_seed: int

    @property
    def kind(self) -> str:
        return type(self).name

    @property
    def transformer_lens(self) -> bool:
        """Whether `hooked()` gives a TransformerLens model (HookedTransformer / TransformerBridge, through
        tl_compat) built from the trained module's weights, rather than the module itself (a HookedRootModule)."""
        return False

    def describe(self) -> str:
        """One line naming the architecture, for report headers ("MLP, width 100")."""
        raise NotImplementedError

    def table(self) -> dict[str, Any]:
        """The fields as config.json stores them (`to_dict` adds `kind`); a kind holding another kind's
        config stores that as a table of its own."""
        return fields_dict(self)

    def validate(self, spec: TaskSpec) -> None:
        """The checks that need the task too (raise ConfigError naming `model.<field>`)."""

    def build(self, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
        """The trainable module, initialised from `init_seed`; `n_models=M`: M side by side, initialised
        from init_seed, init_seed + 1, ... (every weight with a leading model axis)."""
        raise NotImplementedError

    def input_weights(self) -> Optional[str]:
        """The name of the weight whose first n_inputs rows face the input positions (W_pos, W_in), for
        probes of hidden progress; None when no weight does (rotary positions)."""
        return None

    def hooked(self, model: nn.Module, device: str | torch.device) -> nn.Module:
        """The module as TransformerLens probes see it (by default the module itself)."""
        return model.to(device).eval()

    def probed(self, model: nn.Module) -> nn.Module:
        """The module the probes read activations and weights of, side by side too (`n_models`): by default
        the trained module itself. The linearized kind has no activations of its own to hook (forward-mode AD
        hides them) and gives the network it linearizes, at the current weights."""
        return model

    def reload(self, hooked: nn.Module, model: nn.Module) -> nn.Module:
        """`hooked` (from `hooked()` on an earlier checkpoint) with `model`'s weights, reusing it: building
        a hooked model costs more than loading weights into one."""
        hooked.load_state_dict(model.state_dict())
        return hooked

    # ---- sizes for the memory estimate (mechsynth/training/budget.py), from the config alone -------

    def param_count(self, spec: TaskSpec) -> int:
        """Parameters of one model as `build(spec)` makes it."""
        raise NotImplementedError

    def activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        """(bytes one model's forward keeps for its backward pass on `batch` sequences, of which one
        layer's attention pattern)."""
        raise NotImplementedError

    def eval_activation_bytes(self, spec: TaskSpec, batch: int) -> tuple[int, int]:
        """(bytes of a forward without gradients, of which one layer's attention pattern)."""
        raise NotImplementedError

    def weight_field(self, spec: TaskSpec, context_field: str) -> str:
        """The field to blame when the weights dominate the estimate (`context_field`: the task's field
        that sets the sequence length)."""
        raise NotImplementedError


def _import_kinds() -> None:
    """Import every module of mechsynth/models, so each kind registers itself."""
    import importlib
    import pkgutil
    from pathlib import Path

    for m in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"mechsynth.models.{m.name}")


# Filled when a kind is first looked up: the kinds import TransformerLens (seconds), which checking a config's
# other sections need not wait for.
MODEL_KINDS: Registry[type[ModelKind]] = Registry("model kind", fill=_import_kinds)


def names() -> list[str]:
    return MODEL_KINDS.names()


def fields(kind: str) -> list[str]:
    """The config fields of kind `kind`."""
    return [f.name for f in dataclasses.fields(MODEL_KINDS.get(kind)) if f.init]


def parse(table: dict[str, Any], field: str = "model") -> ModelKind:
    """The config of the kind `table["kind"]` names (default: transformer), from the rest of the table;
    every error names `<field>.<key>`, and a key of another kind says whose it is."""
    check(isinstance(table, dict), field, f"expected a table, got {show(table)}")
    table = dict(table)
    kind = table.pop("kind", DEFAULT_KIND)
    check(
        isinstance(kind, str) and kind in MODEL_KINDS,
        f"{field}.kind",
        f"{show(kind)} is not allowed; allowed: {', '.join(map(repr, names()))}",
    )
    own = fields(kind)
    for key in table:
        others = [k for k in names() if key not in own and key in fields(k)]
        if others:
            whose = f"kind {others[0]!r}" if len(others) == 1 else f"kinds {', '.join(map(repr, others))}"
            raise ConfigError(
                f"{field}.{key_name(key)}",
                f"is a field of {whose}, not {kind!r}; allowed for {kind!r}: {', '.join(sorted(own))}",
            )
    return from_dict(MODEL_KINDS.get(kind), table, field)


def to_dict(cfg: ModelKind) -> dict[str, Any]:
    """`kind` and that kind's fields, as config.json and `parse` have them."""
    return {"kind": cfg.kind, **cfg.table()}


def validate(cfg: ModelKind, spec: TaskSpec) -> None:
    """Every check that needs both the model and the task, so bad input fails before any work."""
    if spec.d_input is not None and not cfg.reads_vectors:
        readers = [k for k in names() if MODEL_KINDS.get(k).reads_vectors]
        raise ConfigError(
            "model.kind",
            f"{cfg.kind!r} reads token ids, and the task feeds {spec.d_input}-wide vectors "
            f"(continuous inputs); allowed: {', '.join(map(repr, readers))}",
        )
    cfg.validate(spec)


def build(cfg: ModelKind, spec: TaskSpec, n_models: Optional[int] = None) -> nn.Module:
    """The trainable model for a task, initialised from cfg.init_seed. `n_models=M`: M of them side by
    side, initialised from init_seed, init_seed + 1, ... Every built model carries its config (`.cfg`)
    and `.input_weights` (the weight whose first n_inputs rows face the input positions, or None)."""
    validate(cfg, spec)
    model = cfg.build(spec, n_models)
    model.cfg, model.input_weights = cfg, cfg.input_weights()
    return model
