"""Damaged files and wrong arguments at every entry point a user calls besides train/probe/sweep/report:
`mechsynth import`, `import_checkpoints`, `Monitor`, the Trainer callbacks, `probe_models` and probe options.
Each mistake is one line naming the file or the argument (exit 2 from the CLI, a UserError in Python), made
before any work: no directory is left behind and no file of the user's is changed."""

from __future__ import annotations

import inspect
import random
import re
import tempfile
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Union

import pytest
import torch
from safetensors.torch import save_file

import mechsynth
from mechsynth import probes, tasks
from mechsynth.cli import main
from mechsynth.config import show
from mechsynth.errors import UserError, one_line
from mechsynth.models import external
from mechsynth.yours import callbacks, importing

TASK = tasks.make("markov_icl", {"k": 3, "order": 2, "length": 8})


def _model(nan: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    model = mechsynth.hooked_model(
        n_layers=1,
        d_model=8,
        n_heads=1,
        d_head=8,
        n_ctx=TASK.spec.n_ctx,
        d_vocab=TASK.spec.d_vocab,
        act_fn="relu",
        attn_only=True,
    )
    if nan:
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))
    return model


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def check_line(message: str, names: Sequence[str]) -> None:
    """One line of words, naming each of `names`: no traceback, and no None standing in for a missing text
    ("cannot be read (None)", "field: None"); "got None", echoing a None given, is words."""
    assert message.strip() and "\n" not in message.strip() and "Traceback" not in message, message
    assert not re.search(r"(^|[:(] ?)None($|[);,])", message.removeprefix("mechsynth: error: ")), message
    for name in names:
        assert name in message, (name, message)


# ---- checkpoint files, damaged in the ways a user's get damaged ------------------------------------------


def _weights() -> dict[str, torch.Tensor]:
    return external.weights_of(_model())


def _pt(path: Path, transform: Callable[[dict[str, torch.Tensor]], Any] = lambda w: w) -> None:
    torch.save(transform(_weights()), path)


def _truncated(path: Path, write: Callable[[Path], None]) -> None:
    write(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _nan_everywhere(w: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: torch.full_like(v, float("nan")) for k, v in w.items()}


def _inf_in_one(w: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.clone().fill_(float("inf")) if k.endswith("W_Q") else v for k, v in w.items()}


NOISE = random.Random(0).randbytes(512)  # (seeded: the same bytes every run)
DAMAGED: dict[str, tuple[str, Callable[[Path], None], str]] = {  # case: (file name, how it is made, what the line says)
    "zero_bytes_pt": ("empty.pt", lambda p: p.write_bytes(b""), "empty (0 bytes)"),
    "zero_bytes_safetensors": ("empty.safetensors", lambda p: p.write_bytes(b""), "empty (0 bytes)"),
    "zero_bytes_tracr_json": ("empty.json", lambda p: p.write_bytes(b""), "empty (0 bytes)"),
    "truncated_pt": ("half_10.pt", lambda p: _truncated(p, _pt), "cannot be read"),
    "truncated_safetensors": (
        "half_10.safetensors",
        lambda p: _truncated(p, lambda q: save_file(_weights(), q)),
        "cannot be read",
    ),
    "random_bytes_pt": ("noise.pt", lambda p: p.write_bytes(NOISE), "cannot be read"),
    "random_bytes_safetensors": ("noise.safetensors", lambda p: p.write_bytes(NOISE), "cannot be read"),
    "not_a_state_dict": ("list.pt", lambda p: torch.save([1, 2, 3], p), "not a state dict"),
    "nan_weights": ("nan_100.pt", lambda p: _pt(p, _nan_everywhere), "not finite"),
    "inf_in_one_tensor": (
        "inf_100.safetensors",
        lambda p: save_file(_inf_in_one(_weights()), p),
        "W_Q holds NaN or inf",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_checkpoint_is_one_line_naming_it_from_the_cli_and_from_python(tmp_path, capsys, case):
    name, make, says = DAMAGED[case]
    source = tmp_path / "mine"
    source.mkdir()
    make(source / name)
    before = snapshot(source)
    assert main(["import", str(source / name), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mechsynth: error: ")
    check_line(err, [name, says])
    with pytest.raises(UserError) as e:
        importing.import_checkpoints(source / name, tmp_path / "run")
    check_line(str(e.value), [name, says])
    assert not (tmp_path / "run").exists() and snapshot(source) == before


def test_an_import_of_many_names_the_first_nonfinite_checkpoint_and_writes_nothing(tmp_path, capsys):
    """`mechsynth train` keeps no checkpoint after its weights stop being finite; neither does an import."""
    source = tmp_path / "ckpts"
    source.mkdir()
    _pt(source / "step_0.pt")
    _pt(source / "step_10.pt", _inf_in_one)
    _pt(source / "step_20.pt", _nan_everywhere)
    assert main(["import", str(source), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    check_line(err, ["step_10.pt", "not finite", "before it"])
    assert "step_20" not in err and not (tmp_path / "run").exists()


def test_a_missing_source_or_a_used_out_directory_leaves_the_users_files_as_they_were(tmp_path, capsys):
    _pt(tmp_path / "step_0.pt")
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    before = snapshot(tmp_path)
    for sources, out, names in [
        ([tmp_path / "missing.pt"], tmp_path / "run", ["missing.pt", "no such file"]),
        ([tmp_path / "empty_dir"], tmp_path / "run", ["empty_dir", "no checkpoint file"]),
        ([tmp_path / "step_0.pt"], tmp_path / "used", ["--out", "not empty"]),
        ([tmp_path / "step_0.pt"], tmp_path / "step_0.pt", ["--out", "step_0.pt"]),
    ]:
        assert main(["import", *map(str, sources), "--out", str(out)]) == 2
        check_line(capsys.readouterr().err, names)
    assert snapshot(tmp_path) == before and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "kwargs, names",
    [
        ({"paths": []}, ["checkpoints", "no checkpoint"]),
        ({"paths": None}, ["checkpoints", "a list of paths"]),
        ({"paths": 5}, ["checkpoints", "a list of paths"]),
        ({"paths": [5]}, ["checkpoints", "5"]),
        ({"model": 5}, ["model", "table"]),
        ({"model": "gelu"}, ["model", "table"]),
        ({"model": {"bogus": 1}}, ["model.bogus", "unknown key"]),
        ({"task": 5}, ["task", "int"]),
        ({"task": "no_such_task"}, ["task", "no_such_task"]),
        ({"run_dir": None}, ["--out", "directory path"]),
    ],
)
def test_import_checkpoints_refuses_wrong_arguments_in_one_line(tmp_path, kwargs, names):
    _pt(tmp_path / "step_0.pt")
    args: dict[str, Any] = {"paths": [tmp_path / "step_0.pt"], "run_dir": tmp_path / "run"} | kwargs
    with pytest.raises(UserError) as e:
        importing.import_checkpoints(**args)
    check_line(str(e.value), names)
    assert not (tmp_path / "run").exists()


# ---- the Monitor: every keyword argument, wrong in the ways its annotation allows ----------------------


def _wrong_values(hint: Any) -> list[Any]:
    """Values of the wrong type, or out of range, for an argument annotated `hint`: None where it is not optional,
    and the near misses a user types (a string for a number, a float or a bool for an integer, -1 for a count)."""
    optional = typing.get_origin(hint) is Union and type(None) in typing.get_args(hint)
    base = next(a for a in typing.get_args(hint) if a is not type(None)) if optional else hint
    none = [] if optional or base is Any else [None]
    if base is bool:
        return ["yes", 1, *none]
    if base is int:
        return ["3", 2.5, True, -1, *none]
    if base is float:  # the learning rate
        return ["3e-3", True, 0.0, -1.0, float("nan"), *none]
    if typing.get_origin(base) is Mapping:  # probe options: {probe: {option: value}}
        return [
            "previous_token",
            {"no_such_probe": {}},
            {"previous_token": 3},
            {"previous_token": {"no_such_option": 1}},
            {"llc": {}},
            *none,
        ]
    if typing.get_origin(base) is Sequence and typing.get_args(base) == (str,):  # probe names
        return ["previous_token", [3], ["no_such_probe"], *none]
    if typing.get_origin(base) is Sequence and typing.get_args(base) == (int,):  # checkpoint steps
        return ["1,2", [1.5], [-1], [True], [], *none]
    if base is Any:  # the W&B run; the optimizer (a torch optimizer or a mechsynth optimizer's name)
        return [object(), "my-run"]
    raise AssertionError(f"no wrong values for {hint!r}: add them here")


MONITOR_HINTS = inspect.get_annotations(
    mechsynth.Monitor.__init__, eval_str=True
)  # (no_type_check hides them from typing)
MONITOR_CASES = [
    (name, value)
    for name, p in inspect.signature(mechsynth.Monitor).parameters.items()
    if p.kind is p.KEYWORD_ONLY
    for value in _wrong_values(MONITOR_HINTS[name])
]


def test_the_fuzz_covers_every_keyword_of_the_monitor():
    keywords = {n for n, p in inspect.signature(mechsynth.Monitor).parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert keywords >= {"steps", "checkpoints", "schedule", "start", "probes", "wandb"}
    assert {n for n, _ in MONITOR_CASES} == keywords


# (an id names a bare object() by its type: its repr holds an address, which differs between xdist workers)
MONITOR_IDS = [f"{n}={'object()' if type(v) is object else show(v)}" for n, v in MONITOR_CASES]


@pytest.mark.parametrize("name, value", MONITOR_CASES, ids=MONITOR_IDS)
def test_a_wrong_monitor_keyword_is_one_line_naming_it_and_makes_nothing(tmp_path, name, value):
    with pytest.raises(UserError) as e:
        mechsynth.Monitor(_model(), tmp_path / "run", TASK, **{name: value})
    check_line(str(e.value), [f"{name}:"])
    assert not (tmp_path / "run").exists()


def test_monitor_steps_0_is_refused_as_steps_minus_5_is(tmp_path):
    for steps in (0, -5):
        with pytest.raises(UserError, match=rf"^steps: must be ≥ 1, got {steps}$"):
            mechsynth.Monitor(_model(), tmp_path / "run", TASK, steps=steps)
    with pytest.raises(UserError, match="^schedule: give steps"):
        mechsynth.Monitor(_model(), tmp_path / "run", TASK, steps=0, schedule=[0, 5])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "model, run_dir, task, names",
    [
        (None, "run", TASK, ["model", "got None"]),
        (torch.nn.Linear(3, 3), "run", TASK, ["model", "Linear"]),
        ("nan", "run", TASK, ["model", "not finite"]),
        ("ok", None, TASK, ["run_dir", "directory path"]),
        ("ok", 3, TASK, ["run_dir", "directory path"]),
        ("ok", "run", 5, ["task", "int"]),
        ("ok", "run", "no_such_task", ["task", "no_such_task"]),
        ("ok", "notes.txt/run", TASK, ["run_dir", "notes.txt"]),
        ("ok", "used", TASK, ["run_dir", "not empty"]),
    ],
    ids=[
        "model_none",
        "model_linear",
        "model_nan",
        "run_dir_none",
        "run_dir_int",
        "task_int",
        "task_unknown",
        "run_dir_under_a_file",
        "run_dir_used",
    ],
)
def test_a_wrong_monitor_argument_leaves_the_users_files_as_they_were(tmp_path, model, run_dir, task, names):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("mine")
    before = snapshot(tmp_path)
    model = {"ok": _model(), "nan": _model(nan=True)}.get(model, model) if isinstance(model, str) else model
    with pytest.raises(UserError) as e:
        mechsynth.Monitor(model, tmp_path / run_dir if isinstance(run_dir, str) else run_dir, task)
    check_line(str(e.value), names)
    assert snapshot(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "used"]


# ---- the Trainer callbacks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, field", [(callbacks.hf_callback, "hf_callback"), (callbacks.lightning_callback, "lightning_callback")]
)
def test_a_callback_of_something_other_than_an_open_monitor_is_refused_in_one_line(tmp_path, make, field):
    for wrong in (None, "runs/mine", _model()):
        with pytest.raises(UserError) as e:
            make(wrong)
        check_line(str(e.value), [field, "mechsynth.Monitor"])
    monitor = mechsynth.Monitor(_model(), tmp_path / "run", TASK, steps=2, checkpoints=2, eval_batch_size=4, probes=[])
    monitor.finish()
    with pytest.raises(UserError) as e:
        make(monitor)
    check_line(str(e.value), [field, "closed"])


# ---- probe_models and probe options -----------------------------------------------------------------


@pytest.mark.parametrize(
    "checkpoints, kwargs, names",
    [
        ([], {}, ["checkpoints", "no (step, model)"]),
        (["model"], {}, ["checkpoints", "(step, model) pairs"]),
        ([("a", "model")], {}, ["checkpoints (step)", "'a'"]),
        ([(-1, "model")], {}, ["checkpoints (step)", "≥ 0"]),
        ([(1.5, "model")], {}, ["checkpoints (step)", "1.5"]),
        ([(0, "nan")], {}, ["model", "not finite"]),
        ([(0, "model"), (5, "nan")], {}, ["model", "step 5", "not finite"]),
        ([(0, "model")], {"probes": "previous_token"}, ["probes", "list of probe names"]),
        ([(0, "model")], {"probes": ["no_such_probe"]}, ["probes", "no_such_probe"]),
        ([(0, "model")], {"probes": ["sparse_selection"]}, ["probes", "sparse_selection", "does not apply"]),
        ([(0, "model")], {"options": {"previous_token": {"offset": 0}}}, ["previous_token.offset", "≥ 1"]),
        ([(0, "model")], {"options": {"previous_token": "offset=2"}}, ["previous_token", "table of options"]),
        ([(0, "model")], {"options": "previous_token.offset=2"}, ["options"]),
        ([(0, "model")], {"batch_size": 0}, ["batch_size", "≥ 1"]),
        ([(0, "model")], {"bogus": 1}, ["bogus", "allowed"]),
        ([(0, "model")], {"run_dir": 3}, ["run_dir", "directory path"]),
    ],
)
def test_probe_models_refuses_wrong_input_before_writing_a_run(tmp_path, monkeypatch, checkpoints, kwargs, names):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where a run of its own would go
    (tmp_path / "tmp").mkdir()
    models = {"model": _model(), "nan": _model(nan=True)}
    held = [(item[0], models[item[1]]) if isinstance(item, tuple) else models[item] for item in checkpoints]
    for run_dir in (None, tmp_path / "run"):
        with pytest.raises(UserError) as e:
            mechsynth.probe_models(held, TASK, **({"run_dir": run_dir} | kwargs))
        check_line(str(e.value), names)
        assert not (tmp_path / "run").exists() and not any((tmp_path / "tmp").iterdir())


@pytest.mark.parametrize(
    "call, names",
    [
        (lambda m: probes.options("previous_token", "offset=2"), ["previous_token", "table of options"]),
        (lambda m: probes.options("previous_token", ["offset"]), ["previous_token", "table of options"]),
        (lambda m: probes.options("previous_token", {"offset": 1.5}), ["previous_token.offset", "integer"]),
        (lambda m: probes.options("previous_token", {"offset": True}), ["previous_token.offset", "integer"]),
        (lambda m: probes.options("induction", {"threshold": float("nan")}), ["induction.threshold", "finite"]),
        (lambda m: probes.options("induction", {"no_such_option": 1}), ["induction.no_such_option", "unknown key"]),
        (lambda m: probes.options("no_such_probe", {}), ["probe.name", "no_such_probe"]),
        (lambda m: probes.run("previous_token", m, TASK, option="offset=2"), ["previous_token", "table of options"]),
        (lambda m: probes.run("previous_token", m, TASK, batch_size=0), ["batch_size", "≥ 1"]),
        (lambda m: probes.run("previous_token", m, TASK, batch_size="8"), ["batch_size", "integer"]),
        (lambda m: probes.run("previous_token", m, TASK, batch_size=True), ["batch_size", "integer"]),
        (lambda m: probes.run("previous_token", m, TASK, seed="x"), ["seed", "integer"]),
    ],
)
def test_a_wrong_probe_option_or_argument_is_one_line_naming_it(call, names):
    with pytest.raises(UserError) as e:
        call(_model())
    check_line(str(e.value), names)


@pytest.mark.parametrize("model", [None, "model.pt", {"W_Q": 1}])
def test_a_probe_given_no_model_says_so_in_one_line(model):
    with pytest.raises(probes.ProbeError) as e:
        probes.run("previous_token", model, TASK)
    check_line(str(e.value), ["previous_token", "reads a model", "got"])


# ---- the pieces the messages are made of --------------------------------------------------------------


def test_an_exception_without_text_still_makes_a_line():
    assert one_line(EOFError()) == "EOFError"  # torch.load of a zero-byte file: once an IndexError
    assert one_line(ValueError("\n  \nfirst\nsecond")) == "ValueError: first"
    assert one_line(RuntimeError("x" * 500), typed=False) == "x" * 200
    assert "\n" in repr(_model()) and "\n" not in show(_model())  # a module's repr spans lines; the message does not
