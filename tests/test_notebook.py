"""examples/explore.ipynb runs headless, top to bottom, on a tiny run trained here."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from mechsynth import load_run, parse_config, train_run

NOTEBOOK = Path(__file__).parent.parent / "examples" / "explore.ipynb"


def test_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


@pytest.mark.smoke
def test_notebook_runs_on_a_tiny_run(tmp_path, monkeypatch):
    data = {
        "task": {"name": "markov_icl", "k": 3, "length": 16},
        "model": {"n_layers": 2, "n_heads": 1, "d_model": 16, "attn_only": True},
        "train": {"steps": 20, "batch_size": 16, "eval_every": 10, "checkpoints": 5, "device": "cpu"},
        "wandb": {"mode": "disabled"},
    }
    run_dir = train_run(parse_config(data), tmp_path / "run", progress=False)
    monkeypatch.setenv("MECHSYNTH_RUN", str(run_dir))
    for var in ("JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "IPYTHONDIR"):  # nothing in $HOME
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    steps = load_run(run_dir).steps
    assert f"{len(steps)} checkpoints: {steps}" in text
    assert "induction at step" in text and "loss falls fastest at step" in text
    views = [
        o.data["text/html"]
        for o in outputs
        if "text/html" in o.get("data", {}) and "CircuitsVis" in o.data["text/html"]
    ]
    assert len(views) == 1
    assert views[0].count("var CircuitsVis=") == 1 and "CircuitsVis.render(" in views[0]
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", views[0]), "the view loads nothing from the network"
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= 3, "loss curves, per-head timelines, strategy KL"
    assert (run_dir / "probes.json").exists(), "the timeline was probed and saved"
