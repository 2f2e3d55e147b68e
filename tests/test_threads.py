"""torch's CPU threads follow what the machine has free (mechsynth/training/threads.py): the allowed CPUs less the
load other processes make, MECHSYNTH_THREADS or a run's train.threads over that, and a resumed run trains on with
the count it recorded, bit for bit."""

from __future__ import annotations

import pytest
import torch

from mechsynth import configs, load_run, parse_config, train_run
from mechsynth.cli import main
from mechsynth.runs import rundir
from mechsynth.training import threads


@pytest.mark.parametrize(
    "allowed, others, want",
    [
        (2, 0.0, 2),
        (2, 0.4, 2),
        (2, 0.6, 1),
        (2, 1.0, 1),
        (2, 3.7, 1),
        (8, 2.0, 6),
        (8, 0.0, 8),
        (1.5, 0.0, 1),
        (16, 40.0, 1),
    ],
)
def test_free_cpus_leave_others_theirs(allowed, others, want):
    assert threads.free_cpus(allowed, others) == want


def test_what_is_busy_elsewhere_is_read_now():
    assert 0 <= threads.busy_elsewhere() < 4096


def test_the_variable_and_the_run_override_the_machine(monkeypatch):
    monkeypatch.setenv(threads.ENV, "3")
    assert threads.choose() == (3, threads.ENV) and threads.choose(5) == (5, "train.threads")
    monkeypatch.setenv(threads.ENV, "many")
    with pytest.raises(threads.ConfigError, match="MECHSYNTH_THREADS: 'many' is not allowed"):
        threads.choose()
    monkeypatch.delenv(threads.ENV)
    n, why = threads.choose()
    assert 1 <= n <= threads.cpus_allowed() and "CPUs allowed" in why and "busy elsewhere" in why


def test_a_bad_variable_is_one_line_before_any_work(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(threads.ENV, "0")
    assert main(["demo", "--out", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err.strip().startswith("mechsynth: error: MECHSYNTH_THREADS: '0'")
    assert not (tmp_path / "d").exists()


def _config(steps: int, threads_: int | None = None):
    cfg = configs.load("demo")
    cfg["task"] = {**cfg["task"], "length": 16}
    cfg["train"] = {
        **cfg["train"],
        "steps": steps,
        "checkpoints": 3,
        "eval_every": 10,
        "eval_batch_size": 16,
        "device": "cpu",
    } | ({"threads": threads_} if threads_ else {})
    return parse_config({**cfg, "wandb": {"mode": "disabled"}})


def test_a_resumed_run_trains_on_with_the_threads_it_recorded(tmp_path):
    """Trained with 2 threads to step 10, resumed in a process at 1: it takes 2 again, and ends as the unbroken run."""
    before = torch.get_num_threads()
    try:
        whole = load_run(train_run(_config(20, 2), tmp_path / "whole", progress=False))
        part = train_run(_config(10, 2), tmp_path / "part", progress=False)
        torch.set_num_threads(1)
        resumed = load_run(train_run(_config(20), part, resume=True, progress=False))
        assert torch.get_num_threads() == 1  # the run's count was the run's: this process's is given back
    finally:
        torch.set_num_threads(before)
    assert resumed.state(20)["threads"] == 2
    a, b = whole.weights(20), resumed.weights(20)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_run_resumed_before_its_first_checkpoint_takes_the_threads_it_started_with(tmp_path):
    """Started at 2 threads and cut before any checkpoint, resumed in a process at 1: config.json's count, 2, again."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        whole = load_run(train_run(_config(20), tmp_path / "whole", progress=False))
        cut = train_run(_config(20), tmp_path / "cut", progress=False)
        for s in rundir.steps(cut):
            rundir.ckpt_dir(cut, s).rename(tmp_path / f"gone_{s}")
        rundir.truncate_metrics(cut, 0)
        torch.set_num_threads(1)
        resumed = load_run(train_run(_config(20), cut, resume=True, progress=False))
    finally:
        torch.set_num_threads(before)
    assert rundir.read_config(cut)["threads"] == 2 and resumed.state(20)["threads"] == 2
    a, b = whole.weights(20), resumed.weights(20)
    assert all(torch.equal(a[k], b[k]) for k in a)
