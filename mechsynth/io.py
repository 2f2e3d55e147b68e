"""Files that survive kills: atomic writes (temp file, then rename) and loads that name the bad file."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file


class CorruptFileError(RuntimeError):
    """A file that exists but cannot be read back (truncated, corrupt, wrong format)."""

    def __init__(self, path: Path | str, why: str):
        super().__init__(f"{path}: cannot be read ({why})")
        self.path = Path(path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _as_if_created(path: Path, base: int) -> None:
    """tempfile makes files 0600 and directories 0700; give them the mode a plain open()/mkdir() would,
    so a run directory can be shared like any other."""
    os.chmod(path, base & ~_umask())


def atomic_write(path: Path, write) -> None:
    """Call `write(tmp_path)`, fsync, then rename over `path`: readers see the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        _as_if_created(Path(tmp), 0o666)
        write(Path(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, lambda p: p.write_text(json.dumps(obj, indent=2) + "\n"))


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptFileError(path, str(e)) from None


def write_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    atomic_write(path, lambda p: save_file(tensors, str(p), metadata=metadata))


def read_tensors(path: Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path), device=str(device))
    except FileNotFoundError:
        raise
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CorruptFileError(path, str(e)) from None


def write_state(path: Path, state: dict[str, Any]) -> None:
    atomic_write(path, lambda p: torch.save(state, p))


def read_state(path: Path) -> dict[str, Any]:
    """Optimizer/RNG state. `weights_only=True`: tensors and plain containers only, never arbitrary objects."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as e:  # torch raises many types for a damaged zip/pickle
        raise CorruptFileError(path, f"{type(e).__name__}: {e}") from None


def atomic_dir(final: Path, fill) -> None:
    """Build a directory under a temp name with `fill(tmp_dir)`, then rename it into place."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        _as_if_created(tmp, 0o777)
        fill(tmp)
        if final.exists():  # a checkpoint re-written on resume: swap the old one out first
            old = final.with_name(f".{final.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
