"""W&B, offline: the run is real and readable; a failure to start never stops training."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mechsynth import load_run, parse_config, train_run


def inspect(wandb_file: Path) -> dict:
    wandb_bin = shutil.which("wandb") or str(Path(sys.executable).parent / "wandb")
    out = subprocess.run([wandb_bin, "leet", "inspect", "--summary", "--json", str(wandb_file)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_offline_run_records_config_and_metrics_and_resumes_same_run(tmp_path, tiny):
    cfg = parse_config(tiny({"name": "sparse_parity", "n": 6, "k": 2}, wandb="offline",
                            train={"steps": 10, "eval_every": 5}) | {})
    cfg = parse_config({**cfg.to_dict(), "wandb": {"mode": "offline", "group": "g1", "project": "mechsynth-tests"}})
    run_dir = train_run(cfg, tmp_path / "run", progress=False)
    files = sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    summary = inspect(files[0])
    assert summary["state"] == "finished" and summary["project"] == "mechsynth-tests"
    assert summary["config"]["task"]["name"] == "sparse_parity"
    last = load_run(run_dir).metrics[-1]
    assert summary["summary"]["eval/acc"] == pytest.approx(last["eval/acc"])
    run_id = summary["run_id"]

    resumed = parse_config({**cfg.to_dict(), "train": {**cfg.to_dict()["train"], "steps": 15}})
    train_run(resumed, run_dir, resume=True, progress=False)
    ids = {inspect(f)["run_id"] for f in (run_dir / "wandb").glob("offline-run-*/run-*.wandb")}
    assert ids == {run_id}, "a resumed run continues the same W&B run"


def test_wandb_failure_warns_once_and_training_goes_on(tmp_path, tiny, monkeypatch):
    import wandb

    def broken(*a, **k):
        raise RuntimeError("no service")

    monkeypatch.setattr(wandb, "init", broken)
    cfg = parse_config(tiny({"name": "sparse_parity", "n": 6, "k": 2}, wandb="offline"))
    with pytest.warns(UserWarning, match="W&B did not start") as record:
        run_dir = train_run(cfg, tmp_path / "run", progress=False)
    assert len([w for w in record if "W&B" in str(w.message)]) == 1
    assert load_run(run_dir).metrics[-1]["step"] == 20


def test_seeds_side_by_side_log_one_wandb_run_each_in_one_group(tmp_path, tiny):
    cfg = parse_config(tiny({"name": "sparse_parity", "n": 6, "k": 2}, wandb="offline",
                            train={"steps": 10, "eval_every": 5, "seeds": 2}))
    run_dir = train_run(cfg, tmp_path / "batch", progress=False)
    summaries = []
    for i in range(2):
        files = sorted((run_dir / f"seed_{i}" / "wandb").glob("offline-run-*/run-*.wandb"))
        assert len(files) == 1, "each seed's W&B run lives in its own run directory"
        s = inspect(files[0])
        assert s["state"] == "finished" and s["name"] == f"batch-seed_{i}"
        assert s["config"]["wandb"]["group"] == "batch" and s["config"]["train"]["seed"] == i
        assert s["summary"]["eval/acc"] == pytest.approx(load_run(run_dir / f"seed_{i}").metrics[-1]["eval/acc"])
        summaries.append(s)
    ids = [s["run_id"] for s in summaries]
    assert len(set(ids)) == 2

    resumed = parse_config({**cfg.to_dict(), "train": {**cfg.to_dict()["train"], "steps": 15}})
    train_run(resumed, run_dir, resume=True, progress=False)
    for i in range(2):
        after = {inspect(f)["run_id"] for f in (run_dir / f"seed_{i}" / "wandb").glob("offline-run-*/run-*.wandb")}
        assert after == {ids[i]}, "a resumed batch continues each seed's W&B run"
