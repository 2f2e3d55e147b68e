"""Shared fixtures. W&B never touches the network or the home directory: every WANDB_* path is under tmp."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    # under pytest-xdist: each worker (and the subprocesses its tests start) its share of the cores, the CLI too:
    # chosen by the load, two runs of one seed could differ in the last bits (tests/test_threads.py tests the choice)
    if not os.environ.get("OMP_NUM_THREADS", "").isdigit():
        _workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
        os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // _workers))
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    os.environ.setdefault("MECHSYNTH_THREADS", os.environ["OMP_NUM_THREADS"])

_WANDB_TMP = Path(tempfile.mkdtemp(prefix="mechsynth-wandb-"))
for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
    os.environ[var] = str(_WANDB_TMP / var.lower())
    Path(os.environ[var]).mkdir(parents=True, exist_ok=True)
os.environ["WANDB_MODE"] = "offline"
os.environ["WANDB_SILENT"] = "true"
os.environ.pop("WANDB_API_KEY", None)


def tiny_config(task: dict, model: dict | None = None, train: dict | None = None, wandb: str = "disabled") -> dict:
    """A config dict for a short CPU run (a small transformer unless `model` names another kind)."""
    small = (
        {"n_layers": 1, "n_heads": 1, "d_model": 16}
        if (model or {}).get("kind", "transformer") == "transformer"
        else {}
    )
    return {
        "task": task,
        "model": {**small, **(model or {})},
        "train": {
            "steps": 20,
            "batch_size": 16,
            "eval_every": 5,
            "eval_batch_size": 64,
            "checkpoints": 6,
            "device": "cpu",
            **(train or {}),
        },
        "wandb": {"mode": wandb},
    }


@pytest.fixture
def tiny():
    return tiny_config


@pytest.fixture
def ctrl_c_at(monkeypatch):
    """`ctrl_c_at(TrainerClass, step)`: that class's training raises KeyboardInterrupt when it reaches
    `step`, as Ctrl-C would; returns the function that undoes it."""

    def patch(cls, step: int):
        original = cls.train_step

        def interrupting(self):
            if self.step == step:
                raise KeyboardInterrupt
            return original(self)

        monkeypatch.setattr(cls, "train_step", interrupting)
        return monkeypatch.undo

    return patch


class PlotRecorder:
    """Stands in for WandbLogger where a probe draws its own W&B plots: keeps each plot's x values and series."""

    def __init__(self):
        self.plots: dict = {}
        self.xs: dict = {}

    def line_series(self, key, xs, series, title, x_name):
        self.plots[key], self.xs[key] = series, xs

    def table(self, key, columns, rows):
        self.plots[key] = [dict(zip(columns, row)) for row in rows]


@pytest.fixture
def wandb_plots():
    return PlotRecorder()


def pytest_addoption(parser):
    parser.addoption(
        "--durations-file",
        default=None,
        metavar="PATH",
        help="write each test's duration (setup + call + teardown, seconds) to PATH as JSON "
        "(the repository keeps one in .test_durations: `python tests/tiers.py` reads it)",
    )


class DurationsFile:
    def __init__(self, path: str):
        self.path, self.seconds = Path(path), {}
        self.partial = self.path.with_name(self.path.name + ".partial")  # as it goes, for a suite stopped half-way

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        if report.when == "teardown":
            with self.partial.open("a", encoding="utf-8") as f:
                f.write(json.dumps([report.nodeid, round(self.seconds[report.nodeid], 3)]) + "\n")

    def pytest_sessionfinish(self):
        text = json.dumps({k: round(v, 3) for k, v in sorted(self.seconds.items())}, indent=0)
        self.path.write_text(text + "\n", encoding="utf-8")
        self.partial.unlink(missing_ok=True)


def pytest_configure(config):
    path = config.getoption("--durations-file")
    if path and not hasattr(config, "workerinput"):  # the controller hears every worker's reports
        config.pluginmanager.register(DurationsFile(path), "durations-file")
