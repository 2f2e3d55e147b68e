"""A name -> object registry that refuses duplicates, so each task or probe spells its name once."""

from __future__ import annotations

from typing import Generic, Iterator, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

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
        if name not in self._items:
            from mechsynth.config import ConfigError

            raise ConfigError(f"{self.kind}.name", f"unknown {self.kind} {name!r}; allowed: {', '.join(self.names())}")
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        return name in self._items
