"""Bad input exits 2 with one line naming the field, before any training; good input trains."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mechsynth.cli import main

GOOD = """
[task]
name = "sparse_parity"
n = 6
k = 2
[model]
n_layers = 1
d_model = 16
[train]
steps = 4
batch_size = 8
eval_every = 2
eval_batch_size = 16
checkpoints = 3
device = "cpu"
[wandb]
mode = "disabled"
"""


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "cfg.toml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    "edit, sets, field",
    [
        ('name = "sparse_parity"', ['task.name="nope"'], "task.name"),
        ("", ["task.colour=3"], "task.colour"),
        ("", ["task.k=9"], "task.k"),
        ("", ["model.n_ctx=3"], "model.n_ctx"),
        ("", ["train.lr=-0.1"], "train.lr"),
        ("", ['train.optimizer="lion"'], "train.optimizer"),
        ("", ['model.d_model="big"'], "model.d_model"),
        ("", ["extra.x=1"], "extra"),
        ("", ['task.name="automata"'], "task.k"),
        ("", ["train.steps=0"], "train.steps"),
    ],
)
def test_bad_input_names_field_and_exits_2(tmp_path, capsys, edit, sets, field):
    cfg = write(tmp_path, GOOD)
    args = ["train", cfg, "--out", str(tmp_path / "run")]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mechsynth: error: {field}"), err
    assert not (tmp_path / "run").exists(), "no work may start on bad input"


def test_unreadable_and_invalid_files(tmp_path, capsys):
    assert main(["train", str(tmp_path / "missing.toml")]) == 2
    assert "missing.toml" in capsys.readouterr().err
    assert main(["train", write(tmp_path, "[task\nname=")]) == 2
    assert "not valid TOML" in capsys.readouterr().err


@pytest.mark.smoke
def test_console_script_bad_input_has_no_traceback(tmp_path):
    cfg = write(tmp_path, GOOD.replace("k = 2", "k = 7"))
    r = subprocess.run([sys.executable, "-m", "mechsynth.cli", "train", cfg], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == "mechsynth: error: task.k: must be between 1 and n=6, got 7"


def test_tasks_json_lists_every_registered_task(capsys):
    from mechsynth import tasks

    assert main(["tasks", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert sorted(table) == tasks.names() and {"sparse_parity", "sparse_boolean", "markov_icl", "automata"} <= set(
        table
    )
    assert {"name": "k", "type": "int", "default": 2}.items() <= table["sparse_parity"]["params"][1].items()


def test_train_and_resume_via_cli(tmp_path, capsys):
    cfg = write(tmp_path, GOOD)
    out = tmp_path / "run"
    assert main(["train", cfg, "--out", str(out), "--no-progress"]) == 0
    assert main(["train", cfg, "--out", str(out)]) == 2  # never train over an existing run
    assert "already exists" in capsys.readouterr().err
    assert main(["train", "--resume", str(out), "--set", "train.steps=8", "--no-progress"]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 8
    assert main(["train", "--resume", str(out), "--set", "model.d_model=8"]) == 2


@pytest.mark.slow
def test_every_experiment_config_is_valid():
    from mechsynth import parse_config
    from mechsynth.config import read_toml

    configs = sorted(Path(__file__).parents[1].glob("e[xm]*/*.toml"))  # examples/ and experiments/
    assert len(configs) >= 4
    for path in configs:
        data = read_toml(path)
        if "sweep" in data:  # a sweep file: every run it expands to must be valid
            from mechsynth.sweep import load_sweep

            assert len(load_sweep(path).jobs) > 1
        else:
            parse_config(data)
