"""What the tests of experiments/ share: that folder on sys.path (its scripts and rules import harness and
verdicts as plain modules), and loading a script by its path (experiments/ is not a package)."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
sys.path.insert(0, str(EXPERIMENTS))


def script(name: str) -> ModuleType:
    """experiments/<name>.py, freshly executed."""
    spec = importlib.util.spec_from_file_location(f"experiment_{name}", EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
