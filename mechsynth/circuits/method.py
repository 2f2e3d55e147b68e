"""Circuit-discovery methods, a registry like tasks and probes: each is one file in mechsynth/circuits/methods/
(or a plugin named in MECHSYNTH_PLUGINS) registering a function from (model, graph, clean tokens, source, metric,
options) to one score per edge of `graph.edge_list`, an estimate of m(clean) - m(that edge patched):

    @circuits.register_method("my_method", options=MyOptions, cost="one forward and one backward")
    def my_method(model, graph, tokens, src, metric, options: MyOptions) -> Float[Tensor, "edge"]: ...

`options` is a dataclass of `mechsynth.config.doc` fields (None: the method takes none); what a user gives is
checked against it, naming `circuit.<method>.<field>`, before any work. The contract tests run every registered
method on the planted and compiled circuits (tests/test_circuit_registry.py), and `mechsynth bench-circuits`
scores each against the zoo's known circuits over training.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.circuits.graph import Graph
from mechsynth.circuits.patching import Metric
from mechsynth.config import from_dict
from mechsynth.errors import ConfigError
from mechsynth.registry import Registry

Scorer = Callable[..., Float[Tensor, "edge"]]


@dataclass(frozen=True)
class Method:
    name: str
    score: Scorer
    options: Optional[type]
    cost: str  # what one call costs, in forwards and backwards (shown by `mechsynth bench-circuits --list`)
    exact: bool  # the exact edge effects: the reference the approximate methods are ranked against

    def fields(self) -> list[str]:
        return [] if self.options is None else [f.name for f in dataclasses.fields(self.options) if f.init]


METHODS: Registry[Method] = Registry("circuit method")


def register_method(name: str, *, cost: str, options: Optional[type] = None, exact: bool = False):
    """Function decorator adding a circuit-discovery method under `name`."""

    def deco(fn: Scorer) -> Scorer:
        METHODS.register(name)(Method(name, fn, options, cost, exact))
        return fn

    return deco


def method_options(name: str, given: Optional[Mapping[str, Any]] = None) -> Any:
    """Method `name`'s options from `given` (every other field at its default); ConfigError naming
    `circuit.<name>.<field>` for a bad or unknown one. None for a method without options."""
    method = METHODS.get(name)
    given = dict(given or {})
    if method.options is None:
        if given:
            raise ConfigError(f"circuit.{name}", f"method {name!r} takes no options; got {', '.join(given)}")
        return None
    return from_dict(method.options, given, f"circuit.{name}")


def declared(name: str, available: Mapping[str, Any]) -> dict[str, Any]:
    """Those of `available` that method `name` declares as options (of the circuit probe's ig_steps and threshold,
    what eap_ig or acdc reads): a table meant for every method gives each its own."""
    fields = METHODS.get(name).fields()
    return {k: v for k, v in available.items() if k in fields}


def discover(
    method: str, model: Any, graph: Graph, tokens: Int[Tensor, "batch pos"], src: Tensor, metric: Metric, **options: Any
) -> Float[Tensor, "edge"]:
    """Every edge's score by the registered `method` (`METHODS`), with its `options` (e.g. ig_steps=8 for
    eap_ig, threshold=0.02 for acdc)."""
    found = METHODS.get(method)
    return found.score(model, graph, tokens, src, metric, method_options(method, options))
