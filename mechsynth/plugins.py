"""Tasks, probes, model kinds and optimizers from outside the package.

Inside mechsynth each is one file in its folder (mechsynth/tasks/, probes/, mechsynth/models/,
mechsynth/optimizers/), imported with the folder. Your own live in your own files: name them in
MECHSYNTH_PLUGINS (module names or .py paths, separated by the OS path separator, ":" on Linux) and
every registry imports them before its first lookup, in this process and in sweep workers, which
inherit the environment. In Python, importing the file yourself does the same.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path

from mechsynth.errors import ConfigError

ENV = "MECHSYNTH_PLUGINS"
_loaded = False


def load() -> None:
    """Import every plugin named in MECHSYNTH_PLUGINS, once per process."""
    global _loaded
    if _loaded:
        return
    _loaded = True  # first: a plugin that looks a name up while it is imported must not recurse here
    for entry in filter(None, os.environ.get(ENV, "").split(os.pathsep)):
        try:
            _import(entry)
        except ConfigError:
            raise
        except Exception as e:
            where = traceback.extract_tb(e.__traceback__)[-1]
            raise ConfigError(ENV, f"{entry}: {type(e).__name__}: {e} (at {Path(where.filename).name}:{where.lineno})") from e


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
    spec.loader.exec_module(module)
