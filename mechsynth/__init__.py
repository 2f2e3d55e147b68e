"""mechsynth: train small TransformerLens models on synthetic tasks with known ground truth,
and probe their checkpoints for the circuits the theory predicts."""

from pathlib import Path as _Path
from typing import TYPE_CHECKING

# What `mechsynth.X` names, imported when first asked for: importing torch and TransformerLens takes seconds, and
# `mechsynth --help` should not wait for them (tests/test_cli_imports.py).
_LAZY = {
    "tasks": "mechsynth.tasks",
    "build_model": "mechsynth.models",
    "hooked_model": "mechsynth.models.tl_compat",
    "Run": "mechsynth.runs.run",
    "load_run": "mechsynth.runs.run",
    "RunConfig": "mechsynth.runs.runconfig",
    "parse_config": "mechsynth.runs.runconfig",
    "train_run": "mechsynth.runs.runner",
    "import_checkpoints": "mechsynth.yours.importing",
    "import_models": "mechsynth.yours.importing",
    "probe_models": "mechsynth.yours.importing",
    "save_checkpoint": "mechsynth.yours.saving",
    "Monitor": "mechsynth.yours.monitor",
}

if TYPE_CHECKING:  # the same names for type checkers and the API reference (mkdocstrings reads them statically)
    from mechsynth import tasks
    from mechsynth.models import build_model
    from mechsynth.models.tl_compat import hooked_model
    from mechsynth.runs.run import Run, load_run
    from mechsynth.runs.runconfig import RunConfig, parse_config
    from mechsynth.runs.runner import train_run
    from mechsynth.yours.importing import import_checkpoints, import_models, probe_models
    from mechsynth.yours.monitor import Monitor
    from mechsynth.yours.saving import save_checkpoint


def __getattr__(name: str) -> object:
    import importlib

    if name not in _LAZY:
        raise AttributeError(f"module 'mechsynth' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    value = module if name == "tasks" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Monitor",
    "Run",
    "RunConfig",
    "build_model",
    "hooked_model",
    "import_checkpoints",
    "import_models",
    "load_run",
    "offline_html",
    "parse_config",
    "probe_models",
    "save_checkpoint",
    "save_html",
    "tasks",
    "train_run",
]


# circuitsvis is imported when first used (importing it costs ~1 s), by its one module, mechsynth.analysis.views.
def offline_html(view: object, title: str = "circuitsvis") -> str:
    """A circuitsvis view (or its `str()`) as a complete page that opens with no network: the bundled JavaScript
    inlined, as the run report does, in place of circuitsvis's import from unpkg."""
    from mechsynth.analysis import views

    return views.offline_html(view, title)


def save_html(view: object, path: "str | _Path", title: str = "circuitsvis") -> _Path:
    """Write `offline_html(view)` to `path`, a page that opens offline; returns the path."""
    from mechsynth.analysis import views

    return views.save_html(view, path, title)
