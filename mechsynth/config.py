"""Configuration: small frozen dataclasses, one per concern, validated on construction.

Every user-facing mistake raises `ConfigError(field, message)`, whose text names the field and
what is allowed; the CLI prints that one line and exits 2 before any work starts.

Under pytest every annotation in mechsynth is checked at run time (pyproject.toml: jaxtyping's import hook
with beartype), except the config classes' constructors (`validates_itself`): they take any value and say
themselves what is wrong with it, naming the field.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import re
import reprlib
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any, Literal, Optional, TypeVar, Union, get_args, get_origin

from mechsynth.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Bounds shared by several configs. Each lies far beyond anything this package trains; past it a value
# can only hang (a loop of 10**20 steps) or exhaust memory, so it is refused before any work starts.
# Seeds: torch generators take seeds below 2**64 and the code adds small offsets (seed + i for seeds
# side by side, seed + 1_000_003 * k for held-out splits), so seeds stop at the int64 maximum.
MAX_SEED = 2**63 - 1
MAX_STEPS = 10**9  # about 12 days at 1000 steps/s
MAX_CTX = 2**16  # tokens in a sequence (attention costs n_ctx**2)
MAX_WIDTH = 2**16  # d_model, d_head

# Values in messages are shortened: a 10 MB string or a 300-deep list must still give one short line.
_repr = reprlib.Repr()
_repr.maxstring, _repr.maxother, _repr.maxlong, _repr.maxlevel, _repr.maxlist, _repr.maxdict = 60, 60, 40, 3, 6, 4


def show(value: Any) -> str:
    """A short one-line repr of a user-given value, for error messages (an object's repr, e.g. a torch module's,
    can span lines: they are joined; a string's repr never holds a raw newline)."""
    return re.sub(r"\s*\n\s*", " ", _repr.repr(value))


def key_name(key: Any) -> str:
    """A user-given key as it appears in a field name: as is when plain, else quoted (a key may hold a
    newline, which would break the one-line error)."""
    return key if isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_\-]+", key) else show(key)


def fmt_int(v: int) -> str:
    """2**63 - 1 and 10**9 rather than their digits, in help strings and messages."""
    for base, start in ((2, 16), (10, 6)):
        for delta, tail in ((0, ""), (1, " - 1")):
            e = round(math.log(v + delta, base)) if v + delta > 0 else 0
            if e >= start and base**e == v + delta:
                return f"{base}**{e}{tail}"
    return str(v)


def _allowed(lo: Any, hi: Any) -> str:
    if hi is None:
        return f"≥ {lo}"
    if lo is None:
        return f"≤ {fmt_int(hi)}"
    return f"{lo} to {fmt_int(hi)}"


def check_value(value: Any, meta: Any, name: str) -> None:
    """The checks a field's metadata declares (see `doc`): finite floats and an integer range."""
    if not meta.get("nonfinite"):
        check_finite(value, name)
    lo, hi = meta.get("lo"), meta.get("hi")
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or (lo is None and hi is None):
        return
    allowed = _allowed(lo, hi) + (f" ({meta['why']})" if meta.get("why") else "")
    if lo is not None and value < lo:
        raise ConfigError(name, f"must be ≥ {lo}, got {show(value)}; allowed: {allowed}")
    if hi is not None and value > hi:
        raise ConfigError(name, f"must be ≤ {fmt_int(hi)}, got {show(value)}; allowed: {allowed}")


def check_finite(value: Any, name: str) -> None:
    """inf and nan (which TOML allows) in a size or a rate only ever give a hang or a NaN run."""
    values = value if isinstance(value, tuple) else (value,)
    bad = [v for v in values if isinstance(v, float) and not math.isfinite(v)]
    check(not bad, name, f"must be a finite number, got {show(value)}; allowed: finite numbers (no inf or nan)")


def check_fields(obj: Any) -> None:
    """Every field's type and declared checks (`doc(..., lo=, hi=)`, finite floats), for `__post_init__`: a
    config built in Python (`TrainConfig(checkpoints=2.5)`, `dataclasses.replace`) is held to the same types and
    bounds as one read from TOML, and keeps the types TOML would give it (a list as a tuple, an int as a float).
    Called first, so the other checks never see an absurd value (k**(order-1) with order = 10**20)."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        if f.init:
            value = getattr(obj, f.name)
            coerced = _coerce(value, hints[f.name], f.name, finite=not f.metadata.get("nonfinite"))
            if coerced is not value:
                object.__setattr__(obj, f.name, coerced)  # (frozen dataclasses too)
            check_value(coerced, f.metadata, f.name)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


C = TypeVar("C", bound=type)


def validates_itself(cls: C) -> C:
    """Marks a config dataclass whose `__post_init__` checks every field: its constructor takes any value,
    so that the ConfigError naming the field is what a wrong value gets, never the test-time type checker's
    error (which skips an `__init__` marked no_type_check). The class keeps its type hints: `from_dict`
    reads them, where `typing.no_type_check` on the class would hide them."""
    typing.no_type_check(cls.__init__)
    return cls


def check(cond: bool, field: str, message: str) -> None:
    """Raise ConfigError unless `cond` (used instead of `assert`, which `python -O` strips)."""
    if not cond:
        raise ConfigError(field, message)


def _coerce(value: Any, tp: Any, name: str, finite: bool = True) -> Any:
    """Check `value` against a (simple) type annotation, converting int->float and list->tuple.
    Floats must be finite unless `finite=False` (a field that says so in its metadata)."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        allowed = get_args(tp)
        ok = any(type(value) is type(a) and value == a for a in allowed)  # (True is not 1)
        check(ok, name, f"{show(value)} is not allowed; allowed: {', '.join(map(repr, allowed))}")
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is not type(None):
                try:
                    coerced = _coerce(value, arg, name, finite=False)
                except ConfigError:
                    continue
                if finite:  # the right type but not finite: say that, not "wrong type"
                    check_finite(coerced, name)
                return coerced
        raise ConfigError(name, f"{show(value)} has the wrong type; expected {_type_name(tp)}")
    if origin in (tuple, list):
        check(isinstance(value, (list, tuple)), name, f"expected a list, got {show(value)}")
        args = get_args(tp)
        inner = args[0] if args else Any
        return tuple(_coerce(v, inner, f"{name}[{i}]", finite) for i, v in enumerate(value))
    if origin is dict:
        check(isinstance(value, dict), name, f"expected a table, got {show(value)}")
        return dict(value)
    if tp is bool:
        check(isinstance(value, bool), name, f"expected true or false, got {show(value)}")
        return value
    if tp is int:  # (numpy's and torch's integers too: a size computed in Python)
        check(
            isinstance(value, numbers.Integral) and not isinstance(value, bool),
            name,
            f"expected an integer, got {show(value)}",
        )
        return int(value)
    if tp is float:
        check(
            isinstance(value, numbers.Real) and not isinstance(value, bool),
            name,
            f"expected a number, got {show(value)}",
        )
        try:
            number = float(value)
        except OverflowError:  # an integer past float's range (10**400)
            raise ConfigError(name, f"must be a finite number, got {show(value)}; allowed: finite numbers") from None
        if finite:
            check_finite(number, name)
        return number
    if tp is str:
        check(isinstance(value, str), name, f"expected a string, got {show(value)}")
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


# The names a field's type may use in the shipped schema (mechsynth/configs/schema.json): every config type is made of these.
TYPE_NAMES = {"Any": Any, "Literal": Literal, "Optional": Optional, "Union": Union} | {
    t.__name__: t for t in (bool, int, float, str, tuple, list, dict)
}


def type_expr(tp: Any) -> str:
    """A field's type as the schema writes it ("Optional[tuple[int, ...]]"); "Any" for a type made of other names."""
    text = tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")
    try:
        return text if type_of(text) == tp else "Any"
    except Exception:  # a type of a plugin's own: the full check alone reads it
        return "Any"


def type_of(text: str) -> Any:
    """The type a schema's `type_expr` names (made of TYPE_NAMES only)."""
    return eval(text, {"__builtins__": {}}, dict(TYPE_NAMES))


def schema_fields(entry: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[Any, Mapping[str, Any]]]:
    """The schema's fields of one config class, as `check_table` takes them."""
    return {k: (type_of(v["type"]), v["meta"]) for k, v in entry.items()}


def unset(value: Any) -> bool:
    """A `doc` check left at its default (no bound, no reason, finite): the schema leaves it out. (0 is a bound.)"""
    return value is None or value is False or value == ""


def fields_entry(cls: type) -> dict[str, dict[str, Any]]:
    """A config class's fields as the schema stores them: each one's type and `doc` checks."""
    hints = _hints(cls)
    keep = ("lo", "hi", "why", "nonfinite")
    return {
        f.name: {
            "type": type_expr(hints[f.name]),
            "meta": {k: f.metadata[k] for k in keep if not unset(f.metadata.get(k))},
        }
        for f in dataclasses.fields(cls)
        if f.init
    }


def from_dict(cls: type, data: dict[str, Any], section: str):
    """Build dataclass `cls` from a TOML table, naming `section.key` in every error."""
    hints = _hints(cls)
    fields = {f.name: (hints[f.name], f.metadata) for f in dataclasses.fields(cls) if f.init}
    kwargs = check_table(fields, data, section)
    try:
        return cls(**kwargs)
    except ConfigError as e:
        if not e.field.startswith(section + "."):
            raise ConfigError(f"{section}.{e.field}", str(e).split(": ", 1)[1]) from None
        raise


def check_table(fields: Mapping[str, tuple[Any, Mapping[str, Any]]], data: Any, section: str) -> dict[str, Any]:
    """Each key of a TOML table against its field's type and declared checks (field -> (type, `doc` metadata)),
    naming `section.key`; the values as the type takes them. What `from_dict` does before the class's own checks,
    and what the CLI checks against the shipped schema before importing anything heavy (`configs.quick_check`)."""
    check(isinstance(data, dict), section, f"expected a table, got {show(data)}")
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(f"{section}.{key_name(key)}", f"unknown key; allowed: {', '.join(sorted(fields))}")
        tp, meta = fields[key]
        kwargs[key] = _coerce(value, tp, f"{section}.{key}", finite=not meta.get("nonfinite"))
        # Here as well as in __post_init__ (check_fields): before the class's own checks run.
        check_value(kwargs[key], meta, f"{section}.{key}")
    return kwargs


def describe(cls: type) -> list[dict[str, Any]]:
    """Fields of a config dataclass with type, default and the comment-free help (for `mechsynth tasks`)."""
    hints = _hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        out.append(
            {
                "name": f.name,
                "type": _type_name(hints[f.name]),
                "default": _jsonable(default),
                "help": f.metadata.get("help", ""),
            }
        )
    return out


def _jsonable(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def to_dict(cfg: Any) -> dict[str, Any]:
    return {k: _jsonable(v) for k, v in dataclasses.asdict(cfg).items()}


def doc(
    help: str,
    default: Any = dataclasses.MISSING,
    *,
    lo: Optional[int] = None,
    hi: Optional[int] = None,
    why: str = "",
    nonfinite: bool = False,
) -> Any:
    """A dataclass field with a help string (shown by `mechsynth tasks` and `--help`). `lo`/`hi` bound an
    integer (inclusive; `why` says why the upper bound is where it is), and both go into the help.
    Floats must be finite unless `nonfinite`. `from_dict` and `check_fields` enforce both."""
    if lo is not None or hi is not None:
        help = f"{help} [{_allowed(lo, hi)}{f'; {why}' if why else ''}]"
    meta = {"help": help, "lo": lo, "hi": hi, "why": why, "nonfinite": nonfinite}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: default, metadata=meta)
    return field(default=default, metadata=meta)


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
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise ConfigError("config", f"{str(path)!r} nests arrays or tables too deeply; allowed: a few levels") from None


# A quoted part of a dotted key: "task.n" or 'task.n' (TOML's basic and literal strings).
_QUOTED = re.compile(r"""\s*("(?:[^"\\\n]|\\.)*"|'[^'\n]*')\s*""")


def key_path(path: str, field: str = "--set") -> list[str]:
    """The parts of a dotted key as TOML spells it: `sweep.grid."task.n"` -> ["sweep", "grid", "task.n"]
    (a quoted part may hold dots); an unquoted part is taken as it is, so a misspelt key is still named by
    the config's own check. A quote left open raises ConfigError naming `field`."""
    parts: list[str] = []
    i = 0
    while True:
        m = _QUOTED.match(path, i)
        if m:
            try:
                parts.append(tomllib.loads(f"v = {m.group(1)}")["v"])
            except tomllib.TOMLDecodeError:
                raise ConfigError(field, f"{show(path)}: {show(m.group(1))} is not a TOML string") from None
            i = m.end()
        else:
            dot = path.find(".", i)
            part = path[i:] if dot < 0 else path[i:dot]
            check(
                '"' not in part and "'" not in part,
                field,
                f'{show(path)} has a quote left open; a key with dots is spelt as in TOML: sweep.grid."task.n"',
            )
            parts.append(part.strip())
            i = len(path) if dot < 0 else dot
        if i >= len(path):
            return parts
        check(path[i] == ".", field, f"{show(path)}: a dot must follow {show(parts[-1])}")
        i += 1


def parse_value(raw: str, field: str) -> Any:
    """A --set value: a TOML literal (10, [10, 20], "x", {a = 1}), else the text itself as a string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
    except RecursionError:
        raise ConfigError(field, "the --set value nests arrays or tables too deeply; allowed: a few levels") from None


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply `--set section.key=value` in place; value is parsed as a TOML literal, else a string. A key
    part may be quoted as in TOML (`sweep.grid."task.n"=[10, 20]`)."""
    check(
        "=" in assignment and "." in assignment.split("=", 1)[0],
        "--set",
        f"{assignment!r} must look like section.key=value",
    )
    path, raw = assignment.split("=", 1)
    value = parse_value(raw, ".".join(map(key_name, path.strip().split("."))))
    *sections, key = key_path(path.strip())
    node = data
    for i, s in enumerate(sections):
        node = node.setdefault(s, {})
        where = ".".join(map(key_name, sections[: i + 1]))
        check(
            isinstance(node, dict),
            where,
            f"is {show(node)}, not a table, so --set {show(path.strip())}=... cannot go into it; allowed: a table",
        )
    node[key] = value
