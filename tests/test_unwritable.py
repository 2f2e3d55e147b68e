"""A run or sweep directory that cannot be written — a parent that is a regular file, /proc, a read-only
directory or filesystem — is refused in one line naming the path, exit 2, before any work and without
deleting anything."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mechsynth.cli import main
from mechsynth.errors import UnwritableError
from mechsynth.runs import io

from test_cli import GOOD, write

not_as_root = pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a chmod 0o555 directory anyway")


def refused(capsys, args: list[str], path: Path | str) -> str:
    """Run the CLI; it must exit 2 with a single stderr line that names `path`."""
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mechsynth: error: ") and str(path) in err[0], err
    return err[0]


def commands(tmp_path: Path, out: Path) -> dict[str, list[str]]:
    cfg = write(tmp_path, GOOD)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'base = "{cfg}"\n[sweep]\nseeds = [0]\n')
    return {
        "train": ["train", cfg, "--out", str(out), "--no-progress"],
        "demo": ["demo", "--out", str(out)],
        "sweep": ["sweep", str(sweep), "--out", str(out), "--workers", "1"],
    }


@pytest.mark.parametrize("command", ["train", "demo", "sweep"])
def test_a_regular_file_as_parent_is_refused(command, tmp_path, capsys):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("keep me")
    line = refused(capsys, commands(tmp_path, blocker / "sub")[command], blocker / "sub")
    assert line.startswith("mechsynth: error: --out: cannot write ") and f"{blocker} is a file" in line, line
    assert blocker.read_text() == "keep me", "nothing deleted"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.toml", "notes.txt", "sweep.toml"], "nothing made"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc here")
@pytest.mark.parametrize("command", ["train", "demo", "sweep"])
def test_a_directory_under_proc_is_refused(command, tmp_path, capsys):
    line = refused(capsys, commands(tmp_path, Path("/proc/mechsynth-run"))[command], "/proc/mechsynth-run")
    assert "nothing can be created in /proc" in line or "/proc is not writable" in line, line
    assert not Path("/proc/mechsynth-run").exists()


@pytest.fixture
def read_only(tmp_path):
    """A directory with mode 0o555 (made writable again afterwards, so that pytest can remove it)."""
    d = tmp_path / "read_only"
    d.mkdir()
    d.chmod(0o555)
    yield d
    d.chmod(0o755)


@not_as_root
@pytest.mark.parametrize("command", ["train", "demo", "sweep"])
def test_a_read_only_parent_is_refused(command, tmp_path, read_only, capsys):
    line = refused(capsys, commands(tmp_path, read_only / "run")[command], read_only / "run")
    assert f"{read_only} is not writable" in line, line
    assert list(read_only.iterdir()) == []


@not_as_root
def test_probe_and_report_refuse_a_read_only_run_before_probing(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", write(tmp_path, GOOD), "--out", str(run), "--no-progress"]) == 0
    before = sorted(p.name for p in run.iterdir())
    run.chmod(0o555)
    try:
        for args in (["probe", str(run)], ["report", str(run)]):
            capsys.readouterr()
            line = refused(capsys, args, run)
            assert line.startswith("mechsynth: error: run_dir: cannot write") and f"{run} is not writable" in line, line
        assert sorted(p.name for p in run.iterdir()) == before, "no probes.json, no report.html, nothing removed"
    finally:
        run.chmod(0o755)


@pytest.fixture
def tmpfs(tmp_path):
    """A small tmpfs, writable; `remount_ro()` makes it a read-only filesystem, which binds root too."""
    mount = tmp_path / "fs"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("this machine does not allow mounting a tmpfs")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def remount_ro(mount: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)


def test_a_read_only_filesystem_is_refused_before_any_work(tmp_path, tmpfs, capsys):
    run = tmpfs / "run"
    assert main(["train", write(tmp_path, GOOD), "--out", str(run), "--no-progress"]) == 0
    before = sorted(p.name for p in run.iterdir())
    remount_ro(tmpfs)
    capsys.readouterr()
    for command, args in commands(tmp_path, tmpfs / "new").items():
        line = refused(capsys, args, tmpfs / "new")
        assert f"{tmpfs} is not writable" in line, (command, line)
    for args in (["probe", str(run)], ["report", str(run)], ["train", "--resume", str(run), "--no-progress"]):
        line = refused(capsys, args, run)
        assert f"{run} is not writable" in line, (args, line)
    assert sorted(p.name for p in run.iterdir()) == before
    with pytest.raises(UnwritableError, match=f"{run / 'probes.json'}: cannot be written \\(Read-only file system\\)"):
        io.write_json(run / "probes.json", {})  # the backstop under the checks names the file too


@not_as_root
def test_a_write_into_a_read_only_directory_names_the_file(read_only):
    """The backstop under the checks: a directory made read-only while a run goes on."""
    with pytest.raises(UnwritableError, match=f"{read_only / 'probes.json'}: cannot be written"):
        io.write_json(read_only / "probes.json", {})
    assert isinstance(UnwritableError("x", "y"), PermissionError)


def test_a_writable_place_passes(tmp_path):
    assert io.why_unwritable(tmp_path / "new" / "run") is None and io.why_unwritable(tmp_path) is None
    assert list(tmp_path.iterdir()) == [], "the check leaves nothing behind"
