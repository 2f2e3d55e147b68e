"""What goes wrong for a user, as exceptions that say so in one line.

`UserError` is everything a user can fix: a bad config value, a damaged or missing file, a run
directory in use, a full disk. The CLI prints it as one line and exits 2; in Python it is raised
as is. A run whose loss stops being finite is `DivergedError` (exit 3): not a mistake in the input,
but the run cannot go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


class _Picklable:
    """Errors cross process boundaries (sweep workers, Ray tasks): rebuild them from their own arguments,
    not from the one-line message (which is what `Exception` pickles, and what their __init__ rejects)."""

    def __reduce__(self):
        return type(self), self._init_args


class UserError(_Picklable, Exception):
    """Something the user can fix. `str(err)` is one line."""

    def __init__(self, message: str):
        self._init_args = (message,)
        super().__init__(message)


class ConfigError(UserError, ValueError):
    """A bad configuration value. `str(err)` is "field: what is wrong; allowed: ..."."""

    def __init__(self, field: str, message: str):
        self.field, self.why = field, message
        super().__init__(f"{field}: {message}")
        self._init_args = (field, message)


class RunFileError(UserError):
    """A file of a run that is missing, cannot be read, or holds something it should not."""

    def __init__(self, path: Path | str, why: str):
        self.path = Path(path)
        super().__init__(f"{path}: {why}")
        self._init_args = (path, why)


class CorruptFileError(RunFileError, RuntimeError):
    """A file that exists but cannot be read back (truncated, damaged, wrong format, wrong checksum)."""

    def __init__(self, path: Path | str, why: str):
        super().__init__(path, f"cannot be read ({why})")
        self._init_args = (path, why)


class PluginError(RunFileError):
    """A run (its config.json, or a sweep's run) needs a plugin — a task, model kind or optimizer from outside
    mechsynth — that this process cannot import; the message says how to point MECHSYNTH_PLUGINS at it."""


class DiskFullError(RunFileError, OSError):
    """No space left (or quota reached) while writing `path`; what was written before is intact."""

    def __init__(self, path: Path | str):
        super().__init__(
            path,
            "no space left on the device while writing it; free some space and run again "
            "(everything written before is intact; a training run continues with --resume)",
        )
        self._init_args = (path,)


class UnwritableError(RunFileError, PermissionError):
    """`path` cannot be written: no permission, or a read-only filesystem (`why`, the system's words)."""

    def __init__(self, path: Path | str, why: str):
        super().__init__(path, f"cannot be written ({why}); make its directory writable or choose another")
        self._init_args = (path, why)


class RunInUseError(UserError):
    """Another process holds the run (or sweep) directory."""


def one_line(e: BaseException, typed: bool = True) -> str:
    """A library's exception as one line for a message: its first non-blank line (cut at 200 characters), after
    its type name with `typed`. An exception with no text at all (torch.load of a zero-byte file raises a bare
    EOFError) gives its type name alone, where `str(e).splitlines()[0]` would raise IndexError instead."""
    text = next((line.strip() for line in str(e).splitlines() if line.strip()), "")[:200]
    if not text:
        return type(e).__name__
    return f"{type(e).__name__}: {text}" if typed else text


class DivergedError(_Picklable, Exception):
    """The training loss (or a held-out loss, or a weight) stopped being finite."""

    def __init__(self, message: str, step: int, last_checkpoint: int | None = None, seeds: Sequence[int] = ()):
        self.step, self.last_checkpoint, self.seeds = step, last_checkpoint, list(seeds)
        super().__init__(message)
        self._init_args = (message, step, last_checkpoint, list(seeds))
