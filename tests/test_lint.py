"""ruff passes on the whole tree: its checks of what is wrong (pyproject's [tool.ruff.lint]: syntax, pyflakes) and
its formatter (line length 120), which leaves every file as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_finds_nothing(command):
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"ruff {' '.join(command)} .: " + done.stdout[-3000:] + done.stderr[-1000:]
