"""The report in W&B, offline (every WANDB_* directory under tmp, see conftest): read the run back and
find the probe series, formation steps, renders, the tidy table, the line plots and checkpoint artifacts."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_wandb import inspect

from mechsynth import load_run, parse_config, train_run
from mechsynth.cli import main


def records(wandb_file: Path) -> list[dict]:
    wandb_bin = shutil.which("wandb") or str(Path(sys.executable).parent / "wandb")
    out = subprocess.run(
        [wandb_bin, "leet", "inspect", "--json", str(wandb_file)], capture_output=True, text=True, check=True
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def tiny_run(tmp_path: Path, **wandb) -> Path:
    data = {
        "task": {"name": "markov_icl", "k": 3, "length": 16},
        "model": {"n_layers": 2, "n_heads": 1, "d_model": 16, "attn_only": True},
        "train": {"steps": 20, "batch_size": 16, "eval_every": 10, "checkpoints": 5, "device": "cpu"},
        "wandb": {"mode": "offline", **wandb},
    }
    return train_run(parse_config(data), tmp_path / "run", progress=False)


def test_report_logs_series_summary_and_media_to_the_training_run(tmp_path, capsys):
    run_dir = tiny_run(tmp_path)
    assert main(["report", str(run_dir), "--batch-size", "8"]) == 0  # no probes.json yet: probes, then reports
    assert capsys.readouterr().out.strip() == str(run_dir / "report.html")
    files = sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len({inspect(f)["run_id"] for f in files}) == 1, "the report continues the training run"
    wandb_file = files[-1]
    files_dir = wandb_file.parent / "files"
    summary = inspect(wandb_file)["summary"]
    probes_json = json.loads((run_dir / "probes.json").read_text())

    # Per-head series against the training step, and formation steps in the summary.
    history = [r["history"]["item"] for r in records(wandb_file) if r["type"] == "history"]
    rows = sorted((h for h in history if "probe_step" in h), key=lambda h: h["probe_step"])
    assert [h["probe_step"] for h in rows] == probes_json["steps"]
    for probe, data in probes_json["probes"].items():
        for head, series in data["per_head"].items():
            assert [h[f"probe/{probe}/{head}"] for h in rows] == pytest.approx(series)
            if data["formation"][head] is not None:
                assert summary[f"formation/{probe}/{head}"] == data["formation"][head]
    assert summary["formation/loss_drop_step"] == probes_json["loss_drop_step"]
    # and the stage boundaries found without a circuit in mind, beside them
    assert probes_json["stages"]["loss"] is not None
    assert {k: summary[f"stages/{k}"] for k in probes_json["stages"]} == probes_json["stages"]

    # The renders and the whole report, unchanged: W&B injects no stylesheet from the network.
    for key, must in (("report/attention", "CircuitsVis.render("), ("report/page", '<section id="attention">')):
        assert summary[key]["_type"] == "html-file"
        page = (files_dir / summary[key]["path"]).read_text()
        assert must in page and page.count("var CircuitsVis=") == 1 and "normalize.css" not in page
    assert (files_dir / summary["report/page"]["path"]).read_text() == (run_dir / "report.html").read_text()

    # The tidy table: the same rows as probes.csv.
    table = json.loads((files_dir / summary["probes/table"]["path"]).read_text())
    assert table["columns"] == ["step", "probe", "layer", "head", "metric", "value"]
    with open(run_dir / "probes.csv") as f:
        tidy = list(csv.DictReader(f))
    assert len(table["data"]) == len(tidy)
    first = tidy[0]
    assert table["data"][0][:2] == [int(first["step"]), first["probe"]] and table["data"][0][5] == pytest.approx(
        float(first["value"])
    )

    # A line plot per head-scoring probe: a W&B line-series panel over a table of the series.
    config = {}
    for r in records(wandb_file):
        if r["type"] == "config":
            config.update(r["config"].get("update", {}))
    for probe, data in probes_json["probes"].items():
        if data["per_head"]:
            assert config[f"_wandb.visualize.plots/{probe}"]["panel_config"]["panelDefId"] == "wandb/lineseries/v0"
            plot = json.loads((files_dir / summary[f"plots/{probe}_table"]["path"]).read_text())
            head, series = next(iter(data["per_head"].items()))
            col = plot["columns"]
            drawn = [row[col.index("lineVal")] for row in plot["data"] if row[col.index("lineKey")] == head]
            assert drawn == pytest.approx(series)


def artifacts(run_dir: Path) -> list[dict]:
    return [
        r["artifact"]
        for f in sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
        for r in records(f)
        if r["type"] == "artifact"
    ]


def test_checkpoints_become_model_artifacts_only_when_asked(tmp_path):
    plain = tiny_run(tmp_path / "plain")
    assert artifacts(plain) == []
    run_dir = tiny_run(tmp_path / "logged", log_checkpoints=True)
    logged = artifacts(run_dir)
    steps = load_run(run_dir).steps
    assert [a["type"] for a in logged] == ["model"] * len(steps)
    assert [json.loads(a["metadata"])["step"] for a in logged] == steps
    assert all(f"step-{s}" in a["aliases"] for a, s in zip(logged, steps))
    for a in logged:
        assert {c["path"] for c in a["manifest"]["contents"]} == {"model.safetensors", "meta.json", "state.pt"}


def test_a_table_past_the_run_row_limit_goes_to_an_artifact(tmp_path, monkeypatch):
    import wandb

    from mechsynth.runs.wandb_log import WandbConfig, WandbLogger

    monkeypatch.setattr(wandb.Table, "MAX_ROWS", 2)
    logger = WandbLogger(WandbConfig(mode="offline"), tmp_path, {})
    logger.table("probes/table", ["step", "value"], [[0, 1.0], [1, 2.0], [2, 3.0]])
    logger.table("small", ["step", "value"], [[0, 1.0]])
    logger.finish()
    [wandb_file] = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    [artifact] = [
        r["artifact"] for r in records(wandb_file) if r["type"] == "artifact" and r["artifact"]["type"] == "table"
    ]
    assert [c["path"] for c in artifact["manifest"]["contents"]] == ["table.table.json"]
    summary = inspect(wandb_file)["summary"]
    assert "probes/table" not in summary and summary["small"]["nrows"] == 1
