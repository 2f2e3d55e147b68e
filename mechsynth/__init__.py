"""mechsynth: train small TransformerLens models on synthetic tasks with known ground truth,
and probe their checkpoints for the circuits the theory predicts."""

from pathlib import Path as _Path

# pyproject installs ./probes as mechsynth.probes. A source checkout imported through PYTHONPATH (a second clone
# beside an editable install of the first) takes its own probes, found here before the install's finder would
# point at the first clone's: the commit a result names is the code that made it.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "probes" / "__init__.py").is_file() and not (_Path(__file__).resolve().parent / "probes").exists():
    __path__.append(str(_checkout))

from mechsynth import tasks  # noqa: E402
from mechsynth.models import build_model  # noqa: E402
from mechsynth.models.tl_compat import hooked_model  # noqa: E402
from mechsynth.runs.run import Run, load_run  # noqa: E402
from mechsynth.runs.runconfig import RunConfig, parse_config  # noqa: E402
from mechsynth.training.runner import train_run  # noqa: E402
from mechsynth.yours.importing import import_checkpoints, import_models, probe_models  # noqa: E402
from mechsynth.yours.saving import save_checkpoint  # noqa: E402
from mechsynth.yours.monitor import Monitor  # noqa: E402

__all__ = ["Monitor", "Run", "RunConfig", "build_model", "hooked_model", "import_checkpoints", "import_models", "load_run",
           "offline_html", "parse_config", "probe_models", "save_checkpoint", "save_html", "tasks", "train_run"]


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
