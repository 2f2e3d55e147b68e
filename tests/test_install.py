"""`make demo` / `make test` choose the torch build for the machine: the CPU build where nvidia-smi sees no
GPU (pip may only take a torch that needs no CUDA wheel), the CUDA build where it sees one. Checked with
`make -n`, which prints the commands without installing anything; the real installs run in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def install_commands(tmp_path: Path, gpu: bool, *make_args: str) -> str:
    """What `make` would run to install a new venv, with PATH holding an nvidia-smi that sees a GPU or
    none at all."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.unlink(missing_ok=True)
    if gpu:
        smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n")
        smi.chmod(0o755)
    keep = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "nvidia-smi").exists()]
    # Not the variables of a `make test` this suite runs under: make exports its command line (TORCH_BUILD=cuda
    # VENV=...) to the environment and to sub-makes
    outer = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "TORCH_BUILD", "TORCH", "VENV", "TL", "PYTHON")
    env = {**{k: v for k, v in os.environ.items() if k not in outer}, "PATH": os.pathsep.join([str(bin_dir), *keep])}
    venv = tmp_path / "venv"
    # CPU_INDEX_ANSWERS set: no request to PyTorch's index (tests stay off the network)
    out = subprocess.run(
        ["make", "-n", f"VENV={venv}", "CPU_INDEX_ANSWERS=", f"{venv}/.installed", *make_args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_without_a_gpu_only_a_cpu_build_of_torch_can_be_installed(tmp_path):
    commands = install_commands(tmp_path, gpu=False)
    assert "triton cuda-toolkit nvidia-cudnn-cu11 nvidia-cudnn-cu12 nvidia-cudnn-cu13 > " in commands
    torch_line = next(line for line in commands.splitlines() if '"torch>=2.2"' in line)
    assert "--constraint" in torch_line and "TORCH_BUILD=cpu" in commands


def test_with_a_gpu_the_cuda_build(tmp_path):
    commands = install_commands(tmp_path, gpu=True)
    assert "triton" not in commands and "TORCH_BUILD=cuda" in commands
    assert 'pip install --quiet "torch>=2.2"' in commands


def test_the_build_and_requirement_can_be_chosen(tmp_path):
    commands = install_commands(tmp_path, True, "TORCH_BUILD=cpu", "TORCH=torch==2.13.0")
    assert "triton" in commands and '"torch==2.13.0"' in commands
    out = subprocess.run(
        ["make", f"VENV={tmp_path}/v", "test", "TORCH_BUILD=rocm"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 2 and "TORCH_BUILD must be cpu or cuda, got 'rocm'" in out.stderr
    assert len(out.stderr.splitlines()) == 1 and not (tmp_path / "v").exists()
