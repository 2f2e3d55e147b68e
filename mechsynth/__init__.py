"""mechsynth: train small TransformerLens models on synthetic tasks with known ground truth,
and probe their checkpoints for the circuits the theory predicts."""

from mechsynth import tasks
from mechsynth.importing import import_checkpoints, import_models, probe_models
from mechsynth.models.tl_compat import hooked_model
from mechsynth.monitor import Monitor
from mechsynth.run import Run, load_run
from mechsynth.runconfig import RunConfig, parse_config
from mechsynth.runner import train_run

__all__ = ["Monitor", "Run", "RunConfig", "hooked_model", "import_checkpoints", "import_models", "load_run", "parse_config",
           "probe_models", "tasks", "train_run"]
