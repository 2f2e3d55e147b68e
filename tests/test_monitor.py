"""The Monitor records only what it knows of your loop, and checks everything before the loop runs: a tiny real
loop (Adam, batch 32, seed 1234) is recorded as such and the rest as not recorded (config.json, load_run, the
report's Configuration table); wrong probes, options, sizes and directories are refused in one line before a
step; progress=True shows progress; overwrite=True replaces a run, and only when asked."""

from __future__ import annotations

import io
import json
import re
import sys

import pytest
import torch

import mechsynth
from mechsynth import load_run, tasks
from mechsynth.analysis import report
from mechsynth.errors import ConfigError, UserError
from mechsynth.tasks.base import masked_loss

TASK = tasks.make("markov_icl", {"k": 3, "order": 2, "length": 8})
STEPS = 8


def _model(n_ctx: int = TASK.spec.n_ctx) -> torch.nn.Module:
    torch.manual_seed(1234)
    return mechsynth.hooked_model(
        n_layers=1,
        d_model=8,
        n_heads=1,
        d_head=8,
        n_ctx=n_ctx,
        d_vocab=TASK.spec.d_vocab,
        act_fn="relu",
        attn_only=True,
    )


def _loop(model, run_dir, opt, loop_batch=32, loop_seed=1234, **monitor):
    """A user's loop: their optimizer, batch size and data seed, one monitor call per update."""
    g = torch.Generator().manual_seed(loop_seed)
    with mechsynth.Monitor(model, run_dir, TASK, steps=STEPS, checkpoints=3, eval_batch_size=8, **monitor) as mon:
        for step in range(1, STEPS + 1):
            batch = TASK.sample(loop_batch, g)
            loss = masked_loss(model(batch.tokens), batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            mon.step(step, loss)
    return mon


def _stored(run_dir) -> dict:
    return json.loads((run_dir / "config.json").read_text())


def _config_rows(run) -> dict[str, dict[str, str]]:
    """The report's Configuration tables as {table: {key: shown value}}."""
    tables = {}
    for table in re.findall(r"<table>(.*?)</table>", report._config_tables(run)):
        head = re.search(r"<th>(.*?)</th>", table).group(1)
        tables[head] = dict(re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td></tr>", table))
    return tables


# ---- what is recorded -------------------------------------------------------------------------------


def test_a_loop_with_adam_batch_32_seed_1234_is_recorded_as_such_and_the_rest_as_not_recorded(tmp_path):
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.8, 0.99))
    _loop(
        model, tmp_path / "run", opt, loop_batch=32, loop_seed=1234, optimizer=opt, batch_size=32, seed=1234, probes=[]
    )
    stored = _stored(tmp_path / "run")
    train = stored["train"]
    assert (train["optimizer"], train["lr"], train["batch_size"], train["seed"]) == ("adam", 3e-3, 32, 1234)
    assert train["betas"] == [0.8, 0.99] and train["weight_decay"] == 0 and train["steps"] == STEPS
    unknown = set(stored["origin"]["not_recorded"])
    assert {"model.init_seed", "train.grad_clip", "train.schedule", "train.warmup_steps", "train.data"} <= unknown
    assert not unknown & {f"train.{k}" for k in train}, "a key is either stored or listed as not recorded"
    assert "init_seed" not in stored["model"] and stored["origin"]["optimizer"] == "torch.optim.adam.Adam"

    run = load_run(tmp_path / "run")
    assert run.not_recorded == unknown and run.config.train.batch_size == 32 and run.config.train.optimizer == "adam"
    assert "grad_clip" not in run.recorded_config()["train"] and run.recorded_config()["train"]["seed"] == 1234
    rows = _config_rows(run)
    assert (rows["train"]["batch_size"], rows["train"]["seed"], rows["train"]["optimizer"]) == ("32", "1234", "adam")
    assert rows["train"]["lr"] == "0.003" and rows["origin"]["optimizer"] == "torch.optim.adam.Adam"
    for key in unknown:
        section, name = key.split(".")
        assert rows[section][name] == "not recorded", key
    assert "None" not in report._config_tables(run)


def test_what_the_monitor_is_not_told_is_not_recorded_never_a_default(tmp_path):
    model = _model()
    _loop(model, tmp_path / "run", torch.optim.SGD(model.parameters(), lr=0.1), probes=[])
    stored = _stored(tmp_path / "run")
    assert not {"optimizer", "lr", "batch_size", "seed"} & set(stored["train"])
    assert {"train.optimizer", "train.lr", "train.batch_size", "train.seed"} <= set(stored["origin"]["not_recorded"])
    rows = _config_rows(load_run(tmp_path / "run"))["train"]
    assert all(rows[k] == "not recorded" for k in ("optimizer", "lr", "batch_size", "seed"))
    assert rows["steps"] == str(STEPS) and rows["eval_batch_size"] == "8"  # the Monitor's own: known


def test_the_optimizer_is_read_where_it_is_mechsynths_and_named_where_it_is_not(tmp_path):
    model = _model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    _loop(model, tmp_path / "sgd", sgd, optimizer=sgd, probes=[])
    train = _stored(tmp_path / "sgd")["train"]
    assert (train["optimizer"], train["lr"], train["momentum"]) == ("sgd", 0.05, 0.9) and "betas" not in train
    rms = torch.optim.RMSprop(model.parameters(), lr=1e-3)  # no mechsynth optimizer of that name
    _loop(model, tmp_path / "rms", rms, optimizer=rms, lr=1e-3, probes=[])
    stored = _stored(tmp_path / "rms")
    assert "optimizer" not in stored["train"] and stored["train"]["lr"] == 1e-3
    assert stored["origin"]["optimizer"] == "torch.optim.rmsprop.RMSprop"
    # groups that disagree (no decay on biases) record no weight decay; a scheduler's start is the peak lr
    groups = [
        {"params": [p for p in model.parameters() if p.ndim > 1], "weight_decay": 0.1},
        {"params": [p for p in model.parameters() if p.ndim <= 1], "weight_decay": 0.0},
    ]
    adamw = torch.optim.AdamW(groups, lr=2e-3)
    torch.optim.lr_scheduler.LinearLR(adamw, start_factor=0.1)
    _loop(model, tmp_path / "adamw", adamw, optimizer=adamw, probes=[])
    stored = _stored(tmp_path / "adamw")
    assert stored["train"]["optimizer"] == "adamw" and stored["train"]["lr"] == 2e-3
    assert "weight_decay" not in stored["train"] and "train.weight_decay" in stored["origin"]["not_recorded"]


def test_old_runs_without_a_not_recorded_list_read_and_report_as_stored(tmp_path):
    model = _model()
    _loop(model, tmp_path / "run", torch.optim.Adam(model.parameters()), probes=[])
    run = load_run(tmp_path / "run")
    old = {**run.config.to_dict(), "origin": {"by": "mechsynth.Monitor", "model": "HookedTransformer"}}
    (tmp_path / "run" / "config.json").write_text(json.dumps(old))  # as Monitor runs were written before
    run = load_run(tmp_path / "run")
    assert run.not_recorded == frozenset() and run.recorded_config() == run.config.to_dict()
    assert "not recorded" not in report._config_tables(run) and _config_rows(run)["train"]["batch_size"] == "64"


# ---- refused before the loop ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, model, names",
    [
        ({"probes": ["inducton"]}, None, ["probes:", "'inducton'", "allowed:"]),
        ({"probes": ["induction"], "options": {"previous_token": {}}}, None, ["options:", "previous_token", "probes="]),
        ({"options": {"previous_token": {"ofset": 2}}}, None, ["options:", "ofset"]),
        ({"lr": 1e-3, "optimizer": "__adam__"}, None, ["optimizer:", "allowed:", "adamw", "optimizer=opt"]),
        ({"lr": -1.0}, None, ["lr:", "positive"]),
        ({"batch_size": 0}, None, ["batch_size:", "≥ 1"]),
        ({}, 4, ["model:", "n_ctx", "build the model with n_ctx ≥ 8"]),
    ],
    ids=[
        "probe_typo",
        "options_of_an_unnamed_probe",
        "option_typo",
        "optimizer_name",
        "lr",
        "batch_size",
        "short_context",
    ],
)
def test_a_monitor_mistake_is_one_line_naming_the_fix_before_the_loop_runs(tmp_path, kwargs, model, names):
    with pytest.raises(UserError) as e:
        mechsynth.Monitor(_model(model) if model else _model(), tmp_path / "run", TASK, steps=STEPS, **kwargs)
    message = str(e.value)
    assert "\n" not in message and all(n in message for n in names), message
    assert not (tmp_path / "run").exists()


def test_a_probe_that_does_not_apply_is_refused_on_entry(tmp_path):
    for task, probe in ((None, "icl_strategy"), (TASK, "fourier")):  # (no task: random tokens, no ground truth)
        with pytest.raises(
            ConfigError, match=rf"^probes: '{probe}' does not apply: .*truth.*; allowed: .*previous_token"
        ) as e:
            mechsynth.Monitor(_model(), tmp_path / "run", task, probes=[probe])
        assert "\n" not in str(e.value) and not (tmp_path / "run").exists()


def test_an_optimizer_and_an_lr_that_disagree_are_refused(tmp_path):
    model = _model()
    with pytest.raises(ConfigError, match=r"^lr: 0\.001, but your optimizer's learning rate is 0\.003; give one"):
        mechsynth.Monitor(
            model, tmp_path / "run", TASK, optimizer=torch.optim.Adam(model.parameters(), lr=3e-3), lr=1e-3
        )


# ---- progress and overwrite --------------------------------------------------------------------------


def test_progress_shows_lines_in_a_log_and_a_bar_on_a_terminal(tmp_path, capsys, monkeypatch):
    model = _model()
    _loop(model, tmp_path / "log", torch.optim.Adam(model.parameters()), probes=["previous_token"], progress=True)
    err = capsys.readouterr().err
    assert f"step {STEPS}/{STEPS}  loss " in err and "eval/acc" in err
    assert re.search(r"^probing \d+ checkpoints of .*: previous_token$", err, re.M)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    _loop(model, tmp_path / "tty", torch.optim.Adam(model.parameters()), probes=[], progress=True)
    assert f"{STEPS}/{STEPS}" in terminal.getvalue() and "step/s" in terminal.getvalue()  # tqdm's bar
    monkeypatch.undo()
    _loop(model, tmp_path / "quiet", torch.optim.Adam(model.parameters()), probes=[])
    assert capsys.readouterr().err == ""


def test_an_existing_run_is_replaced_only_with_overwrite(tmp_path):
    model = _model()
    _loop(model, tmp_path / "run", torch.optim.Adam(model.parameters()), probes=[])
    first = (tmp_path / "run" / "config.json").read_text()
    with pytest.raises(
        ConfigError,
        match=r"^run_dir: .* already exists and is not empty; choose another directory, or "
        r"pass overwrite=True to replace the run there$",
    ):
        mechsynth.Monitor(model, tmp_path / "run", TASK)
    with pytest.raises(ConfigError, match="^probes:"):  # a mistake with overwrite=True deletes nothing
        mechsynth.Monitor(model, tmp_path / "run", TASK, overwrite=True, probes=["inducton"])
    assert (tmp_path / "run" / "config.json").read_text() == first
    (tmp_path / "run" / "checkpoints" / "extra.txt").write_text("from the first run")
    with mechsynth.Monitor(model, tmp_path / "run", TASK, schedule=[0, 2], overwrite=True, probes=[]) as mon:
        mon.step(1)
        mon.step(2)
    assert load_run(tmp_path / "run").steps == [0, 2] and not (tmp_path / "run" / "checkpoints" / "extra.txt").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not a run")
    with pytest.raises(
        ConfigError, match=r"^run_dir: .* holds files but no mechsynth run .*overwrite=True replaces only"
    ):
        mechsynth.Monitor(model, tmp_path / "mine", TASK, overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "not a run"
