"""Run configs shipped with the package (TOML): `path("demo")` is the file `mechsynth demo` trains; and schema.json
(written by `mechsynth.cli.write_shipped`): the schema of every section's fields, which the CLI checks a config
against before it imports torch, and the listings `mechsynth tasks` and `probes` print without importing it."""

from __future__ import annotations

import importlib.util
import json
from importlib import resources
from pathlib import Path
from typing import Any, Optional

from mechsynth.config import check_table, read_toml, schema_fields


def path(name: str) -> Path:
    """The shipped config `name` (a file of this package, so it exists wherever mechsynth is installed)."""
    return Path(str(resources.files(__name__) / f"{name}.toml"))


def load(name: str) -> dict[str, Any]:
    return read_toml(path(name))


SCHEMA = "schema.json"


def schema() -> Optional[dict[str, Any]]:
    """The shipped schema and listings; None when the package's tasks, model kinds or probes are not the files it was
    written from (one added since, in a checkout): then the registries themselves answer."""
    shipped = json.loads((resources.files(__name__) / SCHEMA).read_text())
    return shipped if shipped.get("modules") == modules() else None


def modules() -> dict[str, list[str]]:
    """The files that register tasks, model kinds and probes, by package: what the shipped schema was written from
    (found without importing them, which would import torch)."""
    out = {}
    for package in ("tasks", "models", "probes"):
        spec = importlib.util.find_spec(f"mechsynth.{package}")
        folder = Path(list(spec.submodule_search_locations)[0])
        out[package] = sorted(p.name for p in folder.glob("*.py"))
    return out


def quick_check(data: Any) -> None:
    """Every key of a config's tables against its field's type and declared bounds, from the shipped schema, so that
    a mistake there is one line in well under a second (ConfigError, as the full check names it); the full check
    (`parse_config`) still follows, with the checks that need more than one field, a plugin's task or model kind,
    and the machine. Anything this check cannot place (a section or name it does not know) it leaves to that one."""
    known = schema()
    if (
        known is None
        or not isinstance(data, dict)
        or any(k not in known["sections"] or not isinstance(v, dict) for k, v in data.items())
    ):
        return  # the full check says what is wrong with the sections first
    task, model = dict(data.get("task", {})), dict(data.get("model", {}))
    name, kind = task.pop("name", None), model.pop("kind", known["default_kind"])
    tables = [
        ("task", task, known["task"].get(name) if isinstance(name, str) else None),
        ("train", data.get("train", {}), known["train"]),
        ("wandb", data.get("wandb", {}), known["wandb"]),
        ("model", model, known["model"].get(kind) if isinstance(kind, str) else None),
    ]
    for section, table, entry in tables:
        if entry is not None:
            if section == "model":  # a key of another kind: the full check says whose it is
                table = {k: v for k, v in table.items() if k in entry}
            check_table(schema_fields(entry), table, section)
