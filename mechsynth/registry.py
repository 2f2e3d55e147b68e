"""A name -> object registry that refuses duplicates, so each task, probe, model kind or optimizer
spells its name once. Lookups first import the plugins named in MECHSYNTH_PLUGINS (mechsynth/plugins.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, Optional, TypeVar

from mechsynth import plugins

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, fill: Optional[Callable[[], None]] = None):
        """`fill`: imports the modules that register the built-in names, called before the first lookup (the model
        kinds import TransformerLens, which a config mistake elsewhere need not wait for)."""
        self.kind, self._fill = kind, fill
        self._items: dict[str, T] = {}
        plugins.REGISTRIES[kind] = self  # so plugins can say where a name came from without importing each folder

    def _load(self) -> None:
        if self._fill is not None:
            fill, self._fill = self._fill, None  # first: a module filling it may look a name up
            fill()
        plugins.load()

    def register(self, name: str):
        """Class/function decorator: `@TASKS.register("automata")`."""

        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            if getattr(obj, "name", None) != name:
                obj.name = name  # type: ignore[attr-defined]  # the one place the name is spelled
            return obj

        return deco

    def get(self, name: str) -> T:
        self._load()
        if name not in self._items:
            from mechsynth.errors import ConfigError

            raise ConfigError(
                f"{self.kind}.name",
                f"unknown {self.kind} {name!r}; allowed: {', '.join(self.names())} (or a "
                f"plugin's, named in {plugins.ENV})",
            )
        return self._items[name]

    def names(self) -> list[str]:
        self._load()
        return sorted(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items
