"""Tasks, probes, model kinds and optimizers from outside the package.

Inside mechsynth each is one file in its folder (mechsynth/tasks/, probes/, mechsynth/models/,
mechsynth/optimizers/), imported with the folder. Your own live in your own files: name them in
MECHSYNTH_PLUGINS (module names or .py paths, separated by the OS path separator, ":" on Linux) and
every registry imports them before its first lookup, in this process and in sweep workers, which
inherit the environment. In Python, importing the file yourself does the same.

A run remembers its plugins: config.json's "plugins" (`recorded`) lists every MECHSYNTH_PLUGINS entry in
effect when it trained and the module or file defining each task, model kind and optimizer its config
names from outside mechsynth; reading the run imports them again (`load_recorded`), so later commands
need no variable. A plugin that has moved since is found again through MECHSYNTH_PLUGINS.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mechsynth.errors import ConfigError, PluginError

ENV = "MECHSYNTH_PLUGINS"
REGISTRIES: dict[str, Any] = {}  # kind -> Registry, each added as it is made
_loaded = False


def load() -> None:
    """Import every plugin named in MECHSYNTH_PLUGINS, once per process."""
    global _loaded
    if _loaded:
        return
    _loaded = True  # first: a plugin that looks a name up while it is imported must not recurse here
    for entry in _env_entries():
        try:
            _import(entry)
        except ConfigError:
            raise
        except Exception as e:
            raise ConfigError(ENV, f"{entry}: {_why(e)}") from e


def _env_entries() -> list[str]:
    return list(filter(None, os.environ.get(ENV, "").split(os.pathsep)))


def _why(e: BaseException) -> str:
    where = traceback.extract_tb(e.__traceback__)[-1]
    return f"{type(e).__name__}: {e} (at {Path(where.filename).name}:{where.lineno})"


def _import(entry: str) -> None:
    if not entry.endswith(".py"):
        importlib.import_module(entry)
        return
    path = Path(entry).resolve()
    if not path.is_file():
        raise ConfigError(ENV, f"{entry}: no such file")
    name = f"mechsynth_plugin_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look the module up
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]  # half run: a later try must run it again, not take it as imported
        raise


# ---- what a run records, and reading it back ------------------------------------------------------


def recorded(config: Mapping[str, Any]) -> list[str]:
    """The plugins a run of `config` (a run config as config.json stores it) needs to be rebuilt in another
    process: every MECHSYNTH_PLUGINS entry in effect (module names as given, .py paths made absolute),
    then the defining module or file of each task, model kind and optimizer it names from outside
    mechsynth (a plugin imported by hand in Python). What config.json stores as "plugins"."""
    out = [str(Path(e).resolve()) if e.endswith(".py") else e for e in _env_entries()]
    for obj in _named(config):
        source = _source(obj)
        if source is not None:
            out.append(source)
    return list(dict.fromkeys(out))


def _registries() -> list[tuple[Any, tuple[str, ...], str]]:
    """(registry, where its name sits in a run config, the built-in default) for each name a config holds. The
    registries register themselves here (mechsynth/registry.py): importing them would make an import cycle."""
    return [
        (REGISTRIES[kind], where, default)
        for kind, where, default in (
            ("task", ("task", "name"), ""),
            ("model kind", ("model", "kind"), "transformer"),
            ("optimizer", ("train", "optimizer"), "adamw"),
        )
        if kind in REGISTRIES
    ]


def _names(config: Mapping[str, Any]) -> Iterator[tuple[Any, str]]:
    """(registry, name) for each task, model kind and optimizer `config` names."""
    for registry, (section, key), default in _registries():
        table = config.get(section)
        name = table.get(key, default) if isinstance(table, Mapping) else default
        if isinstance(name, str) and name:
            yield registry, name
        # A model table holding another kind's table (the linearized kind's base: model.base.kind) names that too.
        for inner in table.values() if section == "model" and isinstance(table, Mapping) else ():
            if isinstance(inner, Mapping) and isinstance(inner.get(key), str) and inner[key]:
                yield registry, inner[key]


def _named(config: Mapping[str, Any]) -> Iterator[Any]:
    for registry, name in _names(config):
        if name in registry:
            yield registry.get(name)


def _source(obj: Any) -> str | None:
    """How another process imports what defines `obj`: a module in a package (or a package) by its name, as
    its relative imports need; a lone module by its absolute path, which holds from any directory. None for
    mechsynth's own, and for a script run as __main__ (importing it again would run it)."""
    name = getattr(obj, "__module__", "") or ""
    if name == "__main__" or name == "mechsynth" or name.startswith("mechsynth."):
        return None
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None) or _code_file(obj)
    if module is not None and ("." in name or (file and Path(file).name == "__init__.py")):
        return name
    if file and file.endswith(".py") and Path(file).is_file():
        return str(Path(file).resolve())
    return name if module is not None else None


def _code_file(obj: Any) -> str | None:
    """The file a class's methods were compiled from (a module loaded by hand may be in no sys.modules)."""
    for value in vars(obj).values() if isinstance(obj, type) else [obj]:
        code = getattr(getattr(value, "__func__", value), "__code__", None)
        if code is not None:
            return code.co_filename
    return None


def load_recorded(entries: Sequence[str], where: Path | str) -> list[str]:
    """Import the plugins a run recorded (`entries`, from its `where`: config.json) that this process has not
    imported yet, after those of MECHSYNTH_PLUGINS (so the variable can point at a plugin that moved).
    Returns those that cannot be found: whether the run needs them shows when its config is parsed
    (`check_names`). One that fails to import raises PluginError naming it."""
    load()
    if not isinstance(entries, list) or not all(isinstance(e, str) and e for e in entries):
        raise PluginError(where, f"plugins must be a list of module names or .py paths, got {entries!r}")
    missing = []
    for entry in entries:
        if imported(entry):
            continue
        if entry.endswith(".py") and not Path(entry).is_file():
            missing.append(entry)
            continue
        try:
            _import(entry)
        except Exception as e:
            # Not found is the module itself (or its package) missing, not a module the plugin imports.
            if isinstance(e, ModuleNotFoundError) and e.name is not None and f"{entry}.".startswith(f"{e.name}."):
                missing.append(entry)
                continue
            raise PluginError(
                where,
                f"trained with plugin {entry}, which fails to import ({_why(e)}); "
                f"fix it, or set {ENV} to a copy that imports",
            ) from e
    return missing


def imported(entry: str) -> bool:
    """Whether this process has imported `entry` already: by its name, or (a .py path) under the name a
    plugin file gets, or as any module loaded from that file (a plugin imported by hand) — importing it
    again would register its names twice."""
    if not entry.endswith(".py"):
        return entry in sys.modules
    path = Path(entry).resolve()
    if f"mechsynth_plugin_{path.stem}" in sys.modules:
        return True
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and os.path.basename(file) == path.name and Path(file).resolve() == path:
            return True
    return False


def unregistered(config: Mapping[str, Any]) -> list[str]:
    """The tasks, model kinds and optimizers `config` names that nothing here registers ("task 'lag_copy'")."""
    return [f"{registry.kind} {name!r}" for registry, name in _names(config) if name not in registry]


def check_names(config: Mapping[str, Any], where: Path | str, missing: Sequence[str], entries: Sequence[str]) -> None:
    """After `load_recorded(entries)` returned `missing`: raise PluginError with the way out when `config` names
    a task, model kind or optimizer that no plugin here registers (else return: the config is wrong in
    some other way, which its parser says)."""
    unknown = unregistered(config)
    if not unknown:
        return
    if missing:
        s = "s" if len(missing) > 1 else ""
        raise PluginError(
            where,
            f"trained with plugin{s} {', '.join(missing)}, which cannot be found "
            f"(set {ENV} to where {'they are' if s else 'it is'} now)",
        )
    if entries:
        raise PluginError(
            where,
            f"names {unknown[0]}, which none of its plugins ({', '.join(entries)}) registers; "
            f"set {ENV} to the module or .py file that defines it",
        )
    raise PluginError(
        where,
        f"names {unknown[0]}, which is not built in and which no plugin here registers (the run "
        f"does not record its plugins); set {ENV} to the module or .py file that defines it",
    )


def warn_missing(missing: Sequence[str], where: Path | str) -> None:
    """A recorded plugin that cannot be found but that the config does not need (it may have added probes)."""
    if missing and not _env_entries():  # (with the variable set, the user says where plugins are now)
        warnings.warn(
            f"{where}: trained with plugin {', '.join(missing)}, which cannot be found; going on without "
            f"it (set {ENV} to where it is now)",
            stacklevel=2,
        )
