"""mechsynth: train small TransformerLens models on synthetic tasks with known ground truth,
and probe their checkpoints for the circuits the theory predicts."""

from mechsynth.run import Run, load_run
from mechsynth.runconfig import RunConfig, parse_config
from mechsynth.runner import train_run

__all__ = ["Run", "RunConfig", "load_run", "parse_config", "train_run"]
