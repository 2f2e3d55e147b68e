"""Run configs shipped with the package (TOML): `path("demo")` is the file `mechsynth demo` trains."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from mechsynth.config import read_toml


def path(name: str) -> Path:
    """The shipped config `name` (a file of this package, so it exists wherever mechsynth is installed)."""
    return Path(str(resources.files(__name__) / f"{name}.toml"))


def load(name: str) -> dict[str, Any]:
    return read_toml(path(name))
