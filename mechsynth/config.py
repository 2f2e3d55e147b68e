"""Configuration: small frozen dataclasses, one per concern, validated on construction.

Every user-facing mistake raises `ConfigError(field, message)`, whose text names the field and
what is allowed; the CLI prints that one line and exits 2 before any work starts.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from dataclasses import field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ConfigError(ValueError):
    """A bad configuration value. `str(err)` is one line: "field: what is wrong; allowed: ..."."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def check(cond: bool, field: str, message: str) -> None:
    """Raise ConfigError unless `cond` (used instead of `assert`, which `python -O` strips)."""
    if not cond:
        raise ConfigError(field, message)


def _coerce(value: Any, tp: Any, name: str) -> Any:
    """Check `value` against a (simple) type annotation, converting int->float and list->tuple."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        allowed = get_args(tp)
        check(value in allowed, name, f"{value!r} is not allowed; allowed: {', '.join(map(repr, allowed))}")
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is not type(None):
                try:
                    return _coerce(value, arg, name)
                except ConfigError:
                    pass
        raise ConfigError(name, f"{value!r} has the wrong type; expected {_type_name(tp)}")
    if origin in (tuple, list):
        check(isinstance(value, (list, tuple)), name, f"expected a list, got {value!r}")
        args = get_args(tp)
        inner = args[0] if args else Any
        return tuple(_coerce(v, inner, f"{name}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        check(isinstance(value, dict), name, f"expected a table, got {value!r}")
        return dict(value)
    if tp is bool:
        check(isinstance(value, bool), name, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        check(isinstance(value, int) and not isinstance(value, bool), name, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        check(isinstance(value, (int, float)) and not isinstance(value, bool), name, f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        check(isinstance(value, str), name, f"expected a string, got {value!r}")
        return value
    return value


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(map(repr, get_args(tp)))
    if origin is Union:
        return " | ".join(_type_name(a) for a in get_args(tp) if a is not type(None)) + " (or unset)"
    if origin in (tuple, list):
        return "list"
    return getattr(tp, "__name__", str(tp))


def from_dict(cls: type, data: dict[str, Any], section: str):
    """Build dataclass `cls` from a TOML table, naming `section.key` in every error."""
    check(isinstance(data, dict), section, f"expected a table, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(f"{section}.{key}", f"unknown key; allowed: {', '.join(sorted(fields))}")
        kwargs[key] = _coerce(value, hints[key], f"{section}.{key}")
    try:
        return cls(**kwargs)
    except ConfigError as e:
        if not e.field.startswith(section + "."):
            raise ConfigError(f"{section}.{e.field}", str(e).split(": ", 1)[1]) from None
        raise


def describe(cls: type) -> list[dict[str, Any]]:
    """Fields of a config dataclass with type, default and the comment-free help (for `mechsynth tasks`)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        out.append({"name": f.name, "type": _type_name(hints[f.name]), "default": _jsonable(default),
                    "help": f.metadata.get("help", "")})
    return out


def _jsonable(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def to_dict(cfg: Any) -> dict[str, Any]:
    return {k: _jsonable(v) for k, v in dataclasses.asdict(cfg).items()}


def doc(help: str, default: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with a help string (shown by `mechsynth tasks` and `--help`)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: default, metadata={"help": help})
    return field(default=default, metadata={"help": help})


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError("config", f"cannot read {str(path)!r}: no such file")
    try:
        return tomllib.loads(p.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("config", f"cannot read {str(path)!r}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("config", f"{str(path)!r} is not valid TOML: {e}") from None


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply `--set section.key=value` in place; value is parsed as a TOML literal, else a string."""
    check("=" in assignment and "." in assignment.split("=", 1)[0], "--set",
          f"{assignment!r} must look like section.key=value")
    path, raw = assignment.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    *sections, key = path.strip().split(".")
    node = data
    for s in sections:
        node = node.setdefault(s, {})
        check(isinstance(node, dict), "--set", f"{path!r}: {s!r} is not a section")
    node[key] = value
