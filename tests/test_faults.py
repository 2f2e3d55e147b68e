"""Faults a user meets, tried for real: damaged and missing files, kills in the middle of a checkpoint
write, a diverging run, two writers on one run, a full disk, a sweep started again. Each ends in one
line naming the file (exit 2; a diverged run exits 3), and nothing a user made is lost or changed."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mechsynth import load_run
from mechsynth.cli import main
from mechsynth.errors import UserError
from mechsynth.runs import rundir

REPO = Path(__file__).resolve().parents[1]
CONFIG = """
[task]
name = "sparse_parity"
n = 6
k = 2
[model]
n_layers = 1
d_model = 16
[train]
steps = 20
batch_size = 16
eval_every = 5
eval_batch_size = 32
checkpoints = 4
device = "cpu"
[wandb]
mode = "disabled"
"""


def write_config(tmp_path: Path, text: str = CONFIG, **train: object) -> str:
    for key, value in train.items():
        text = re.sub(rf"^{key} = .*\n", "", text, flags=re.M).replace(
            "[train]\n", f"[train]\n{key} = {json.dumps(value)}\n"
        )
    path = tmp_path / "cfg.toml"
    path.write_text(text)
    return str(path)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    return err[0]


def weights_equal(a: Path, b: Path, step: int) -> bool:
    wa, wb = rundir.read_weights(a, step), rundir.read_weights(b, step)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("trained")
    assert main(["train", write_config(tmp), "--out", str(tmp / "run"), "--no-progress"]) == 0
    return tmp / "run"


# ---- damaged and missing files, under every command ---------------------------------------------------


def _flip(offset: int, n: int = 1):
    def damage(b: bytes) -> bytes:
        at = offset if offset >= 0 else len(b) + offset
        return b[:at] + bytes(x ^ 0xFF for x in b[at : at + n]) + b[at + n :]

    return damage


CKPT = "checkpoints/step_00000020/"
# name: (file, new contents (bytes, or a function of the old ones; None deletes it))
DAMAGES = {
    "weights truncated": (CKPT + "model.safetensors", lambda b: b[: len(b) // 2]),
    "weights zeroed": (CKPT + "model.safetensors", lambda b: bytes(len(b))),
    "weights header flipped": (CKPT + "model.safetensors", _flip(12)),
    "16 bytes of tensor data flipped": (CKPT + "model.safetensors", _flip(-40, 16)),
    "weights missing": (CKPT + "model.safetensors", None),
    "state garbage": (CKPT + "state.pt", b"\x00garbage" * 20),
    "state missing": (CKPT + "state.pt", None),
    "meta garbage": (CKPT + "meta.json", b"{not json"),
    "meta missing": (CKPT + "meta.json", None),
    "config garbage": ("config.json", b"\xff\xfe garbage"),
    "config wrong shape": ("config.json", b"[1, 2, 3]\n"),
    "config wrong types": ("config.json", lambda b: b.replace(b'"n": 6', b'"n": "six"')),
    "config missing": ("config.json", None),
    "metrics garbage line": ("metrics.jsonl", lambda b: b.replace(b"\n", b"\ngarbage\n", 1)),
    "metrics duplicate step": ("metrics.jsonl", lambda b: b + b.splitlines(keepends=True)[-1]),
    "metrics out of order": ("metrics.jsonl", lambda b: b"".join(reversed(b.splitlines(keepends=True)))),
}
# What each command reads: probing and reports never need the optimizer state.
COMMANDS = {
    "resume": (lambda d: ["train", "--resume", d, "--set", "train.steps=30", "--no-progress"], set(DAMAGES)),
    "probe": (lambda d: ["probe", d], {k for k in DAMAGES if not k.startswith("state")}),
    "report": (lambda d: ["report", d], {k for k in DAMAGES if not k.startswith("state")}),
}


def damaged_copy(trained: Path, tmp_path: Path, damage: str) -> tuple[Path, str]:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    name, change = DAMAGES[damage]
    path = run / name
    if change is None:
        path.unlink()
    else:
        path.write_bytes(change(path.read_bytes()) if callable(change) else change)
    # A missing config.json makes the directory "not a run": then the directory is what is named.
    return run, str(run if damage == "config missing" else path)


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_file_is_one_line_naming_it_and_nothing_changes(trained, tmp_path, capsys, damage, command):
    run, named = damaged_copy(trained, tmp_path, damage)
    argv, needs = COMMANDS[command]
    before = snapshot(run)
    code = main(argv(str(run)))
    if damage not in needs:
        assert code == 0, capsys.readouterr().err
        return
    line = one_error_line(capsys)
    assert code == 2 and line.startswith("mechsynth: error: ") and named in line, line
    assert "Traceback" not in line and "weights_only" not in line
    assert snapshot(run) == before, "a command that fails must leave the run as it was (config.json included)"


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_load_run_raises_a_typed_error_naming_the_file(trained, tmp_path, damage):
    run, named = damaged_copy(trained, tmp_path, damage)
    if damage.startswith("state"):
        with pytest.raises(UserError, match="state.pt"):
            load_run(run).state(20)
        return
    with pytest.raises(UserError) as err:
        load_run(run).trainable(20)
    assert named in str(err.value) and len(str(err.value).splitlines()) == 1


def test_a_pickle_that_would_run_code_is_refused_without_suggesting_to_allow_it(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    state = run / CKPT / "state.pt"
    state.write_bytes(pickle.dumps(Exploit()))
    meta = json.loads((run / CKPT / "meta.json").read_text())  # with a valid checksum, only the pickle stops it
    meta["sha256"]["state.pt"] = hashlib.sha256(state.read_bytes()).hexdigest()
    (run / CKPT / "meta.json").write_text(json.dumps(meta))
    assert main(["train", "--resume", str(run), "--no-progress"]) == 2
    line = one_error_line(capsys)
    assert str(state) in line and "weights_only" not in line and "never loads" in line
    assert not marker.exists()


# ---- kills in the middle of a checkpoint write --------------------------------------------------------

KILLER = """
import os, pathlib, signal, sys
from mechsynth.cli import main
from mechsynth.runs import io

target, where = sys.argv[1], sys.argv[2]
real_dir, real_text = io.atomic_dir, pathlib.Path.write_text

def atomic_dir(final, fill):
    if pathlib.Path(final).name != target:
        return real_dir(final, fill)
    def dying(tmp):
        if where == "before meta.json":  # weights and state are written, meta.json not yet
            pathlib.Path.write_text = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
        fill(tmp)
        os.kill(os.getpid(), signal.SIGKILL)  # "before rename": all written, not yet in place
    return real_dir(final, dying)

io.atomic_dir = atomic_dir
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.smoke
@pytest.mark.parametrize("where", ["before meta.json", "before rename"])
def test_kill_during_a_checkpoint_write_resumes_bit_exact(tmp_path, capsys, where):
    cfg = write_config(tmp_path, steps=60, checkpoints=6)
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert main(["train", cfg, "--out", str(full), "--no-progress"]) == 0
    steps = rundir.steps(full)
    target = f"step_{steps[3]:08d}"
    proc = subprocess.run(
        [sys.executable, "-c", KILLER, target, where, "train", cfg, "--out", str(cut), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert rundir.steps(cut) == steps[:3]
    assert list((cut / "checkpoints").glob(f".{target}.*.tmp")), "the kill left the half-written checkpoint"
    assert load_run(cut).steps == steps[:3]  # readers never see it
    capsys.readouterr()
    assert main(["train", "--resume", str(cut), "--no-progress"]) == 0
    assert f"continuing {cut} from step {steps[2]}" in capsys.readouterr().err
    assert not list((cut / "checkpoints").glob(".*")), "leftovers of the killed write are cleaned up"
    assert rundir.steps(cut) == steps and weights_equal(full, cut, steps[-1])
    assert [r["step"] for r in load_run(cut).metrics] == [r["step"] for r in load_run(full).metrics]


# ---- divergence ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_diverging_run_stops_keeps_its_finite_checkpoints_and_can_be_probed(tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["train", write_config(tmp_path, lr=1e6, steps=40), "--out", str(run), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 3, err
    assert "not finite at step" in err and "last finite checkpoint, step 0" in err and "train.lr" in err
    for line in (run / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in metrics.jsonl"))
    r = load_run(run)
    assert r.steps == [0] and all(torch.isfinite(w).all() for w in r.weights(0).values())
    assert main(["probe", str(run)]) == 0 and main(["report", str(run)]) == 0


def test_side_by_side_divergence_names_the_seeds(tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["train", write_config(tmp_path, seeds=2, lr=1e6, steps=10), "--out", str(run), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 3 and re.search(r"not finite at step \d+ \(seeds? [01](, 1)?\)", err), err
    assert all(load_run(d).steps == [0] for d in rundir.members(run, 2))


# ---- two writers ----------------------------------------------------------------------------------------


@pytest.mark.smoke
def test_second_writer_is_refused_and_a_dead_ones_lock_is_taken_over(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    # A: continues the run for a long time, in its own process.
    a = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mechsynth.cli",
            "train",
            "--resume",
            str(run),
            "--set",
            "train.steps=1000000",
            "--no-progress",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not ((run / ".lock").exists() and (run / ".lock").read_text().strip()):
            time.sleep(0.05)
        assert (run / ".lock").read_text().strip() == str(a.pid)
        time.sleep(1.0)  # let A write a few records
        # B: refused at once, with one line naming A.
        assert main(["train", "--resume", str(run), "--no-progress"]) == 2
        line = one_error_line(capsys)
        assert str(run) in line and f"pid {a.pid}" in line, line
        assert load_run(run).metrics  # reading a run that is training is fine
    finally:
        a.kill()
        a.wait()
    # A died holding the lock: B takes it over and finishes the run it asked for.
    assert main(["train", "--resume", str(run), "--set", "train.steps=60", "--no-progress"]) == 0
    steps = [r["step"] for r in load_run(run).metrics]
    assert steps == sorted(set(steps)) and not (run / ".lock").exists()


@pytest.mark.smoke
def test_two_new_runs_into_one_directory(tmp_path, capsys):
    cfg, out = write_config(tmp_path, steps=2000), tmp_path / "run"
    a = subprocess.Popen(
        [sys.executable, "-m", "mechsynth.cli", "train", cfg, "--out", str(out), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (out / "config.json").exists():
            time.sleep(0.05)
        assert main(["train", cfg, "--out", str(out), "--no-progress"]) == 2
        line = one_error_line(capsys)
        assert str(out) in line and ("not empty" in line or "in use" in line), line
    finally:
        a.kill()
        a.wait()


# ---- runs cut before their first checkpoint -------------------------------------------------------------


@pytest.mark.parametrize("seeds", [1, 2])
def test_a_run_killed_before_its_first_shared_checkpoint_resumes_from_step_0(tmp_path, capsys, seeds):
    cfg = write_config(tmp_path, seeds=seeds)
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert main(["train", cfg, "--out", str(full), "--no-progress"]) == 0
    shutil.copytree(full, cut)
    members = rundir.members(cut, seeds)
    for i, d in enumerate(members):  # seed 0 got its step-0 checkpoint, the others did not
        for s in rundir.steps(d)[1 if i == 0 and seeds > 1 else 0 :]:
            shutil.rmtree(rundir.ckpt_dir(d, s))
        rundir.truncate_metrics(d, 0)
    capsys.readouterr()
    assert main(["train", "--resume", str(cut), "--no-progress"]) == 0
    assert f"continuing {cut} from step 0" in capsys.readouterr().err
    for a, b in zip(rundir.members(full, seeds), members):
        assert weights_equal(a, b, 20)


# ---- a full disk ----------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs", str(mount)], capture_output=True
    ).returncode:
        pytest.skip("this machine does not allow mounting a tmpfs")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_is_one_line_keeps_earlier_checkpoints_and_resumes_after(small_disk, tmp_path, capsys):
    # ~0.5 MB per checkpoint (weights + Adam state): the 1.2 MB disk fills within the first few.
    cfg = write_config(tmp_path, CONFIG.replace("d_model = 16", "d_model = 64"), steps=40, checkpoints=8)
    run = small_disk / "run"
    assert main(["train", cfg, "--out", str(run), "--no-progress"]) == 2
    started, line = capsys.readouterr().err.strip().splitlines()  # the run had started: one line says so
    assert started.startswith("training") and line.startswith(f"mechsynth: error: {run}") and "no space left" in line
    kept = load_run(run).steps
    assert kept and all(load_run(run).trainable(s) is not None for s in kept)  # checksums hold
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
    assert main(["train", "--resume", str(run), "--no-progress"]) == 0
    assert rundir.is_complete(run)


# ---- sweeps never delete -------------------------------------------------------------------------------


@pytest.mark.smoke
def test_sweep_with_seeds_side_by_side_keeps_finished_runs_and_user_files(tmp_path, capsys):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'base = "{REPO / "examples" / "sparse_parity.toml"}"\n'
        '[train]\nsteps = 30\neval_every = 10\ncheckpoints = 4\nseeds = 2\ndevice = "cpu"\n'
        '[wandb]\nmode = "disabled"\n[sweep]\nseeds = 1\n[sweep.grid]\n"task.n" = [10]\n'
    )
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1"]) == 0
    notes = out / "runs/n=10/seed_0/seed_1/notes.txt"
    notes.write_text("mine")
    before = snapshot(out / "runs")
    capsys.readouterr()
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1"]) == 0
    assert "1 complete, 0 to resume, 0 to start" in capsys.readouterr().err
    assert snapshot(out / "runs") == before  # nothing retrained, the user's file untouched


@pytest.mark.smoke
def test_sweep_moves_a_directory_it_cannot_read_aside(tmp_path, capsys):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(CONFIG + '[sweep]\nseeds = 1\n[sweep.grid]\n"task.n" = [6]\n')
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1"]) == 0
    job = out / "runs/n=6/seed_0"
    (job / "config.json").write_text("{damaged")
    (job / "notes.txt").write_text("mine")
    before = snapshot(job)
    capsys.readouterr()
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1"]) == 0
    err = capsys.readouterr().err
    aside = [p for p in job.parent.iterdir() if p.name.startswith("seed_0.aside-")]
    assert len(aside) == 1 and str(aside[0]) in err
    assert snapshot(aside[0]) == before and rundir.is_complete(job)


def test_out_pointing_at_a_file_is_refused_and_the_file_kept(tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    cfg = write_config(tmp_path)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(CONFIG + "[sweep]\nseeds = 1\n")
    for argv in (["train", cfg, "--out", str(target)], ["sweep", str(sweep), "--out", str(target)]):
        assert main(argv) == 2
        line = one_error_line(capsys)
        assert line.startswith("mechsynth: error: --out") and "is a file" in line, line
        assert target.read_text() == "mine"


def test_errors_cross_process_boundaries_intact():
    """Sweep workers and Ray tasks send errors back pickled: each must come back as itself."""
    from mechsynth import errors

    for err in (
        errors.UserError("x"),
        errors.ConfigError("train.lr", "bad"),
        errors.RunFileError("a/b", "missing"),
        errors.CorruptFileError("a/b", "damaged"),
        errors.DiskFullError("a/b"),
        errors.RunInUseError("busy"),
        errors.DivergedError("diverged", 7, 5, [1]),
    ):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err) and vars(back) == vars(err)


def test_resuming_from_the_step_0_checkpoint_records_step_0_once(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    for s in rundir.steps(run)[1:]:  # killed right after its first checkpoint
        shutil.rmtree(rundir.ckpt_dir(run, s))
    rundir.truncate_metrics(run, 0)
    assert main(["train", "--resume", str(run), "--no-progress"]) == 0
    steps = [r["step"] for r in load_run(run).metrics]  # (load_run refuses repeated steps)
    assert steps == [r["step"] for r in load_run(trained).metrics] and weights_equal(trained, run, 20)
