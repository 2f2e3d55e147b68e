"""What every model kind provides. A kind is one file in mechsynth/models/: a frozen config dataclass of
its own fields that subclasses `ModelKind` and registers itself (`@MODEL_KINDS.register("mlp")`); the
config knows how to build, hook and size its model, so callers ask it instead of checking classes.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import torch
import torch.nn as nn

from mechsynth.registry import Registry
from mechsynth.tasks.base import TaskSpec

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


MODEL_KINDS: Registry[type[ModelKind]] = Registry("model kind")
