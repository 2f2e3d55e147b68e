"""Files that survive kills and full disks: atomic writes (temp file, then rename), loads that name the
bad file, and a full disk reported as the path being written."""

from __future__ import annotations

import errno
import io as _io
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from mechsynth.errors import CorruptFileError, DiskFullError, UnwritableError, one_line

T = TypeVar("T")
_FULL = (errno.ENOSPC, errno.EDQUOT)
_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)


def guard_disk(path: Path | str, fn: Callable[[], T]) -> T:
    """Run `fn`, turning "no space left" into DiskFullError and "permission denied" or "read-only filesystem"
    into UnwritableError, each naming `path` in one line (the commands check before any work, `why_unwritable`;
    this catches a directory made read-only while a run was going)."""
    try:
        return fn()
    except OSError as e:
        if e.errno in _FULL:
            raise DiskFullError(path) from None
        if e.errno in _DENIED:
            raise UnwritableError(path, e.strerror or type(e).__name__) from None
        raise


def why_unwritable(path: Path | str) -> Optional[str]:
    """Why no directory can be made (or written into) at `path`, in words that name the culprit; None when
    one can. Asked before any work, so that a run that could never be saved fails in one line, not in a
    traceback after training: a parent that is a file, a directory without write permission or on a
    read-only filesystem, a filesystem that makes nothing (/proc)."""
    path = Path(path)
    # os.path.exists, not Path.exists: under a directory we may not search, the latter raises
    existing = next((p for p in (path, *path.parents) if os.path.lexists(p)), None)
    if existing is None:
        return "the current directory no longer exists"
    if not existing.is_dir():
        return f"{existing} is {'a file' if existing.is_file() else 'not a directory'}, not a directory to write in"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable (no permission, or a read-only filesystem)"
    try:  # access() reads the mode bits; some filesystems refuse anyway (/proc, a read-only bind mount as root)
        os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".mechsynth-check-"))
    except OSError as e:
        return f"nothing can be created in {existing} ({e.strerror or type(e).__name__})"
    return None


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


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def atomic_write(path: Path, write: Callable[[Path], Any]) -> None:
    """Call `write(tmp_path)`, fsync, then rename over `path`: readers see the old file or the new one."""
    path = Path(path)

    def attempt() -> None:
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

    guard_disk(path, attempt)


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, lambda p: p.write_text(json.dumps(obj, indent=2) + "\n"))


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CorruptFileError(path, one_line(e, typed=False)) from None


def tensors_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    return save_safetensors({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, metadata=metadata)


def tensors_from_bytes(blob: bytes, path: Path | str, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Tensors from safetensors bytes read from `path` (named in the error if they are not valid)."""
    try:
        tensors = load_safetensors(blob)
    except (SafetensorError, ValueError, RuntimeError, OverflowError) as e:
        raise CorruptFileError(path, f"not a valid safetensors file: {e}") from None
    return {k: v.to(device) for k, v in tensors.items()}


def read_tensors(path: Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    try:
        blob = Path(path).read_bytes()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise CorruptFileError(path, str(e)) from None
    return tensors_from_bytes(blob, path, device)


def state_bytes(state: dict[str, Any]) -> bytes:
    buf = _io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def state_from_bytes(blob: bytes, path: Path | str) -> dict[str, Any]:
    """Optimizer/RNG state. `weights_only=True`: tensors and plain containers only, never arbitrary objects."""
    try:
        with warnings.catch_warnings():  # torch warns about pickles it is about to refuse anyway
            warnings.simplefilter("ignore")
            state = torch.load(_io.BytesIO(blob), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many types for a damaged zip or a refused pickle
        if "weights_only" in str(e) or "Unsupported global" in str(e):
            # torch's own message suggests weights_only=False, i.e. running the file's code: never.
            raise CorruptFileError(
                path,
                "it holds Python objects other than tensors and plain values, which "
                "mechsynth never loads (loading them could run code from the file)",
            ) from None
        raise CorruptFileError(path, one_line(e)) from None
    if not isinstance(state, dict):
        raise CorruptFileError(path, f"holds a {type(state).__name__}, not a training state")
    return state


def read_state(path: Path) -> dict[str, Any]:
    try:
        blob = Path(path).read_bytes()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise CorruptFileError(path, str(e)) from None
    return state_from_bytes(blob, path)


def atomic_dir(final: Path, fill: Callable[[Path], Any]) -> None:
    """Build a directory under a temp name with `fill(tmp_dir)`, then rename it into place."""
    final = Path(final)

    def attempt() -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
        try:
            _as_if_created(tmp, 0o777)
            fill(tmp)
            for f in tmp.iterdir():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
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

    guard_disk(final, attempt)
