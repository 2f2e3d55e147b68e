"""The run directory: the one module that knows its layout, what makes a run complete, which config
keys may change on resume, and who may write into it.

    RUN_DIR/config.json                  everything needed to rebuild task and model (+ EXTRAS: "versions",
                                         the "plugins" its task, model or optimizer came from, and the
                                         CPU "threads" it started training with)
    RUN_DIR/metrics.jsonl                one JSON record per evaluation, steps strictly increasing
    RUN_DIR/checkpoints/step_00000100/   model.safetensors, state.pt (resume), meta.json (step, metrics,
                                         and the SHA-256 of the other two, checked on every load)
    RUN_DIR/.lock                        held by the process training into the run (its pid inside)

With `train.seeds = S` > 1 the run trains S models side by side: RUN_DIR/config.json is the batched
job and RUN_DIR/seed_0 ... RUN_DIR/seed_{S-1} are each a run directory as above ("members"); a
single run is its own only member.

Every problem with a file raises `RunFileError` (or `CorruptFileError`) naming the file. Nothing here
deletes a directory: a run that cannot be continued is moved aside (`move_aside`).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import math
import os
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Optional

from mechsynth import plugins
from mechsynth.errors import ConfigError, CorruptFileError, RunFileError, RunInUseError
from mechsynth.runs import io

CONFIG, METRICS, LOCK = "config.json", "metrics.jsonl", ".lock"
WEIGHTS, STATE, META = "model.safetensors", "state.pt", "meta.json"
# Keys that may change when a run is continued: how long it trains, where, how often it is
# evaluated and how it logs. Anything else would make the continued run a different experiment.
RESUMABLE = ("train.steps", "train.device", "train.eval_every", "train.seed_passes", "train.threads", "wandb.")
# Keys config.json stores beside the run config: provenance (`stored_extras`), never compared or parsed as config.
# origin: what made a run mechsynth did not train (Monitor, import); threads: the count a run resumed before its first
# checkpoint trains with again (each checkpoint records its own), so that it stays bit-identical to an unbroken run.
EXTRAS = ("versions", "plugins", "origin", "threads")
NOT_RECORDED = (
    "not_recorded"  # origin's list of the config keys nobody gave (absent from the tables; see `unknown_keys`)
)


# ---- layout ---------------------------------------------------------------------------------------


def ckpt_dir(run_dir: Path | str, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:08d}"


def seed_dir(run_dir: Path | str, i: int) -> Path:
    """The run directory of seed i of a batched (`train.seeds` > 1) run."""
    return Path(run_dir) / f"seed_{i}"


def members(run_dir: Path | str, n_seeds: int) -> list[Path]:
    """The directories that hold each model's metrics and checkpoints."""
    return [Path(run_dir)] if n_seeds == 1 else [seed_dir(run_dir, i) for i in range(n_seeds)]


def steps(run_dir: Path | str) -> list[int]:
    """Steps that have a checkpoint directory. Checkpoints appear atomically (renamed into place), so
    each is whole as written; a file missing or damaged since is reported when it is read."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(int(p.name[5:]) for p in root.iterdir() if p.name.startswith("step_") and p.name[5:].isdigit())


def read_config(run_dir: Path | str) -> dict[str, Any]:
    """config.json as stored (with its EXTRAS); a missing or damaged file is named."""
    path = Path(run_dir) / CONFIG
    if Path(run_dir).exists() and not Path(run_dir).is_dir():
        raise RunFileError(run_dir, "is a file, not a run directory")
    if not path.exists():
        raise RunFileError(run_dir, "is not a mechsynth run (no config.json)")
    data = io.read_json(path)
    train = data.get("train") if isinstance(data, dict) else None
    if not isinstance(train, dict) or not isinstance(data.get("task"), dict):
        raise CorruptFileError(path, "not a run config: it needs [task] and [train] tables")
    for key in ("steps", "seeds"):
        if key in train and (not isinstance(train[key], int) or isinstance(train[key], bool) or train[key] < 1):
            raise CorruptFileError(path, f"train.{key} must be an integer ≥ 1, got {train[key]!r}")
    return data


def unknown_keys(config: dict[str, Any]) -> frozenset[str]:
    """The dotted config keys ("train.lr", "model.init_seed") that config.json says were never known: a run made
    outside mechsynth (a Monitor over your loop) stores only what it was told or read, leaves the rest out of its
    tables and lists it in origin["not_recorded"]. A reader parsing the tables gets mechsynth's defaults there, so
    whoever shows a config shows these keys as not recorded. Runs mechsynth trained (and older runs) list none."""
    origin = config.get("origin")
    keys = origin.get(NOT_RECORDED) if isinstance(origin, dict) else None
    return frozenset(k for k in keys if isinstance(k, str)) if isinstance(keys, list) else frozenset()


def drop_unknown(tables: dict[str, Any], unknown: Iterable[str]) -> dict[str, Any]:
    """`tables` (a run config's sections, as `RunConfig.to_dict()` has them) without the dotted keys `unknown`."""
    out = {s: dict(t) if isinstance(t, dict) else t for s, t in tables.items()}
    for key in unknown:
        section, _, name = key.partition(".")
        if isinstance(out.get(section), dict):
            out[section].pop(name, None)
    return out


def n_seeds(config: dict[str, Any]) -> int:
    return config["train"].get("seeds", 1)


def is_complete(run_dir: Path | str) -> bool:
    """Every model of the run has a checkpoint at its configured `train.steps` (seeds side by side: each
    seed directory). The one definition sweeps and experiments use to skip finished runs."""
    try:
        return _complete(run_dir, read_config(run_dir))
    except RunFileError:
        return False


def _complete(run_dir: Path | str, config: dict[str, Any]) -> bool:
    last = config["train"].get("steps")
    return all(last in steps(d) for d in members(run_dir, n_seeds(config)))


Status = Literal["complete", "partial", "new", "foreign"]


def status(run_dir: Path | str) -> Status:
    """'complete'; 'partial' (a run of ours, to continue: from its last checkpoint, or from step 0 if it
    has none yet); 'new' (absent or empty); 'foreign' (holds files but no readable run config: never
    ours to delete)."""
    run_dir = Path(run_dir)
    if not run_dir.exists() or (run_dir.is_dir() and not any(run_dir.iterdir())):
        return "new"
    try:
        config = read_config(run_dir)
    except RunFileError:
        return "foreign"
    return "complete" if _complete(run_dir, config) else "partial"


def move_aside(run_dir: Path | str) -> Path:
    """Rename a run directory that cannot be continued to RUN_DIR.aside-<time>[-n], keeping every file."""
    run_dir = Path(run_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        target = run_dir.with_name(f"{run_dir.name}.aside-{stamp}" + (f"-{n}" if n else ""))
        if not target.exists():
            os.replace(run_dir, target)
            return target
    raise RunFileError(run_dir, "cannot be moved aside: too many earlier copies beside it")


# ---- the resume policy ----------------------------------------------------------------------------


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"task": {"n": 2}} and {"task.n": 2} both become {"task.n": 2} (TOML allows either spelling)."""
    out = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted config keys whose values differ (EXTRAS are provenance, not config)."""
    a, b = (flatten({k: v for k, v in c.items() if k not in EXTRAS}) for c in (old, new))
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def may_change_on_resume(key: str) -> bool:
    return key.startswith(RESUMABLE)


def check_resumable(old: dict[str, Any], new: dict[str, Any], field: str = "--set") -> None:
    """Raise ConfigError unless `new` differs from the stored `old` only in keys a resume may change."""
    fixed = [k for k in changed_keys(old, new) if not may_change_on_resume(k)]
    if fixed:
        a, b = flatten(old), flatten(new)
        raise ConfigError(
            field,
            f"{fixed[0]} cannot change when a run is continued (stored {a.get(fixed[0])!r}, "
            f"given {b.get(fixed[0])!r}); allowed to change: {', '.join(RESUMABLE)}*",
        )


# ---- metrics --------------------------------------------------------------------------------------


def read_metrics(run_dir: Path | str) -> list[dict[str, Any]]:
    """Records of metrics.jsonl. A last line cut short by a kill is skipped; any other line that is not a
    JSON record, or whose step does not follow the one before, is an error naming the line."""
    path = Path(run_dir) / METRICS
    if not path.exists():
        return []
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise CorruptFileError(path, str(e)) from None
    lines = text.splitlines()
    out: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1 and not text.endswith("\n"):
                break  # the line a kill cut short
            raise CorruptFileError(path, f"line {i + 1} is not JSON") from None
        step = record.get("step") if isinstance(record, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            raise CorruptFileError(path, f"line {i + 1} is not a record with an integer step")
        if out and step <= out[-1]["step"]:
            what = "repeats" if step == out[-1]["step"] else "comes before"
            raise CorruptFileError(
                path,
                f"line {i + 1}: step {step} {what} step {out[-1]['step']} of the line before "
                "(two processes wrote to this run?)",
            )
        out.append(record)
    return out


def truncate_metrics(run_dir: Path | str, step: Optional[int]) -> None:
    """Keep the records up to `step` (none for None): later ones will be produced again by a resume."""
    kept = [r for r in read_metrics(run_dir) if step is not None and r["step"] <= step]
    io.atomic_write(Path(run_dir) / METRICS, lambda p: p.write_text("".join(_record_line(r) for r in kept)))


def json_safe(x: Any) -> Any:
    """JSON has no NaN or infinity: they are written as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def _record_line(record: dict[str, Any]) -> str:
    return json.dumps(json_safe(record), allow_nan=False) + "\n"


class MetricsWriter:
    """Appends records to metrics.jsonl, one flushed line each."""

    def __init__(self, run_dir: Path | str):
        self.path = Path(run_dir) / METRICS
        self.file = io.guard_disk(self.path, lambda: open(self.path, "a"))

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        line = _record_line({"step": step, **metrics})

        def write() -> None:
            self.file.write(line)
            self.file.flush()

        io.guard_disk(self.path, write)

    def close(self) -> None:
        try:
            self.file.close()
        except OSError:  # a full disk fails the final flush too; what could be written is written
            pass


# ---- checkpoints ----------------------------------------------------------------------------------


def write_checkpoint(
    run_dir: Path | str,
    step: int,
    weights: dict[str, Any],
    metrics: dict[str, Any],
    state: dict[str, Any],
    train_s: Optional[float] = None,
) -> None:
    """Weights, resumable state and meta.json (with both files' SHA-256) appear together or not at all.
    `train_s`: seconds spent training up to this step, over every resume (not the time between them)."""
    blobs = {WEIGHTS: io.tensors_bytes(weights), STATE: io.state_bytes(state)}
    meta = {
        "step": step,
        "metrics": json_safe(metrics),
        "time": time.time(),
        **({"train_s": round(train_s, 3)} if train_s is not None else {}),
        "sha256": {name: hashlib.sha256(b).hexdigest() for name, b in blobs.items()},
    }

    def fill(tmp: Path) -> None:
        for name, blob in blobs.items():
            (tmp / name).write_bytes(blob)
        (tmp / META).write_text(json.dumps(meta, indent=2, allow_nan=False) + "\n")

    io.atomic_dir(ckpt_dir(run_dir, step), fill)


def read_meta(run_dir: Path | str, step: int) -> dict[str, Any]:
    path = ckpt_dir(run_dir, step) / META
    if not path.exists():
        raise RunFileError(path, f"missing: the checkpoint of step {step} has no meta.json")
    meta = io.read_json(path)
    if not isinstance(meta, dict) or meta.get("step") != step or not isinstance(meta.get("metrics"), dict):
        raise CorruptFileError(path, f"not the meta.json of step {step}")
    return meta


def _verified_bytes(run_dir: Path | str, step: int, name: str) -> bytes:
    path = ckpt_dir(run_dir, step) / name
    meta = read_meta(run_dir, step)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        raise RunFileError(path, f"missing: the checkpoint of step {step} has lost this file") from None
    except OSError as e:
        raise CorruptFileError(path, str(e)) from None
    expected = meta.get("sha256", {}).get(name)  # checkpoints written before checksums have none
    if expected is not None and hashlib.sha256(blob).hexdigest() != expected:
        raise CorruptFileError(
            path,
            "its SHA-256 differs from the one recorded in meta.json when it was written: the file was damaged since",
        )
    return blob


def read_weights(run_dir: Path | str, step: int, device: Any = "cpu") -> dict[str, Any]:
    """The weights of `step`, checked against their checksum."""
    return io.tensors_from_bytes(_verified_bytes(run_dir, step, WEIGHTS), ckpt_dir(run_dir, step) / WEIGHTS, device)


def read_state(run_dir: Path | str, step: int) -> dict[str, Any]:
    """The resumable state (optimizer, data RNG, W&B id) of `step`, checked against its checksum."""
    return io.state_from_bytes(_verified_bytes(run_dir, step, STATE), ckpt_dir(run_dir, step) / STATE)


def remove_stale_temps(run_dir: Path | str) -> None:
    """Leftovers of writes a kill interrupted (hidden .*.tmp names mechsynth itself made): never read."""
    run_dir = Path(run_dir)
    for stale in [
        *(run_dir / "checkpoints").glob(".step_*.tmp"),
        *(run_dir / "checkpoints").glob(".step_*.old"),
        *run_dir.glob(".*.tmp"),
    ]:
        io.remove(stale)


# ---- the lock -------------------------------------------------------------------------------------


def check_writable(path: Path | str, field: str) -> None:
    """ConfigError naming `field` and the culprit unless a run (or sweep) directory can be made or written at
    `path`: asked before any work, since a run that cannot be saved would otherwise fail after training, in a
    traceback (a parent that is a file, a read-only directory, /proc)."""
    why = io.why_unwritable(path)
    if why is not None:
        raise ConfigError(field, f"cannot write {path}: {why}")


class RunLock:
    """One writer per run (or sweep) directory: `with RunLock([dirs]):`. Each directory's .lock file is
    flock'ed (the kernel releases it when the holder dies, so a killed run never leaves a stale lock),
    holds the owner's pid for the message, and is removed on release. Where the filesystem has no flock, a lock whose pid is no
    longer running is taken over."""

    def __init__(self, dirs: Iterable[Path | str], what: str = "run"):
        self.dirs, self.what, self.fds = [Path(d) for d in dirs], what, []  # fds[i] locks dirs[i]

    def __enter__(self) -> "RunLock":
        try:
            for d in self.dirs:
                self.fds.append(self._take(d))
        except BaseException:
            self.__exit__()
            raise
        return self

    def _take(self, d: Path) -> int:
        import fcntl

        path = d / LOCK
        while True:
            fd = io.guard_disk(path, lambda: os.open(path, os.O_RDWR | os.O_CREAT, 0o644))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _pid_in(path)
                os.close(fd)
                raise RunInUseError(
                    f"{d}: in use by another mechsynth process{f' (pid {owner})' if owner else ''}; "
                    f"wait for it to finish or stop it: two writers would mix their {self.what}s"
                ) from None
            except OSError as e:
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    os.close(fd)
                    raise
                owner = _pid_in(path)  # no flock here (some network filesystems): trust a live pid
                if owner and owner != os.getpid() and _alive(owner):
                    os.close(fd)
                    raise RunInUseError(f"{d}: in use by another mechsynth process (pid {owner})") from None
            # The holder before us removes the file on release; if it did so after we opened it, our lock
            # is on a file nobody else will see: take the new one instead.
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)  # a killed holder's pid may still be there
        io.guard_disk(path, lambda: os.pwrite(fd, f"{os.getpid()}\n".encode(), 0))
        return fd

    def __exit__(self, *exc: Any) -> None:
        for d, fd in zip(self.dirs, self.fds):
            try:
                (d / LOCK).unlink()  # still holding it: nobody can take it in between
            except OSError:
                pass
            os.close(fd)  # closing releases the flock
        self.fds = []


def _pid_in(path: Path) -> Optional[int]:
    try:
        return int(path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def libraries() -> dict[str, str]:
    """The versions of what made a run. torch's is `torch.__version__`, with its build (2.13.0+cpu,
    2.14.1+cu130): PyPI's CUDA wheels carry the build there and not in their package metadata."""
    import platform
    from importlib.metadata import version

    import torch

    return {
        "mechsynth": version("mechsynth"),
        "torch": torch.__version__,
        "transformer_lens": version("transformer-lens"),
        "python": platform.python_version(),
    }


def versions() -> dict[str, str]:
    """What made the run, stored beside its config: `libraries()`, and the commit of the checkout
    mechsynth runs from (absent for an installed wheel)."""
    commit = code_commit(Path(__file__).resolve().parent)
    return libraries() if commit is None else {**libraries(), "commit": commit}


def stored_extras(config: dict[str, Any]) -> dict[str, Any]:
    """What config.json stores beside the run config `config` (as `RunConfig.to_dict()` has it): the
    `versions()` that made the run and the plugins another process must import to rebuild it
    (`plugins.recorded`). Every writer of a config.json stores `{**config, **stored_extras(config)}`."""
    return {"versions": versions(), "plugins": plugins.recorded(config)}


CODE = ("mechsynth", "probes", "experiments", "pyproject.toml")  # what a commit marked "-dirty" has changed


@functools.lru_cache(maxsize=None)
def code_commit(where: Path) -> Optional[str]:
    """The commit of the git checkout holding `where`, with "-dirty" when tracked code (CODE) differs from
    it; None outside a checkout. Once per process: the code a process runs is the code it imported."""

    def git(*args: str) -> Optional[str]:
        try:
            out = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    head = git("rev-parse", "--short=12", "HEAD")
    changed = git("status", "--porcelain", "--untracked-files=no", "--", *(f":(top){p}" for p in CODE))
    return None if head is None else head + ("-dirty" if changed else "")
