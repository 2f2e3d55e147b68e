"""What a sweep hands its backend: each run on its own, or a grid point's seeds side by side as one job.

A point whose seeds are 0, 1, ..., S-1 (the usual `seeds = S`) trains as one job with `train.seeds = S`
into runs/<point>: that batched run's seed i is written to runs/<point>/seed_i with train.seed and
model.init_seed i (mechsynth/runs/rundir.py, mechsynth/training/seeds.py) — the very directory and config the
separate run of seed i would have, so everything that reads a sweep sees the same runs either way.
Seeds are batched only from 0 because a batch names its seed directories by index.

Side by side is used where it changes nothing but speed, and where the directory allows it:
  - `[sweep] side_by_side` is true (the default), the point has ≥ 2 seeds, exactly 0..S-1;
  - each run trains one model (`train.seeds` = 1) with an elementwise optimizer (a seed's update must
    not see the others'), the seeds' configs differ only in their seeds (no `seed_keys`);
  - the batch fits the device's memory;
  - on disk: runs/<point> is new, or holds this very batch (to continue). A point whose seeds were
    trained as separate runs (by a sweep of before, or with side_by_side = false) stays separate, so
    runs are never mixed: the seed directories of a batch are written only by the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from mechsynth.errors import UserError
from mechsynth.runs import rundir
from mechsynth.runs.runconfig import complete
from mechsynth.sweep.plan import SEED_KEYS, Job, Plan


@dataclass(frozen=True)
class Unit:
    """One job for a backend: `config` trained into `dir` (relative to the sweep directory). Seeds side
    by side: `dir` is runs/<point>, `config` has train.seeds = len(jobs), and `jobs` are its seeds."""

    dir: str
    config: dict[str, Any]
    jobs: tuple[Job, ...]
    separate_why: Optional[str] = None  # a point with several seeds that runs them separately: why

    @property
    def side_by_side(self) -> bool:
        return len(self.jobs) > 1

    def describe(self) -> str:
        return (
            f"{self.dir} (seeds {self.jobs[0].seed}-{self.jobs[-1].seed} side by side)"
            if self.side_by_side
            else self.dir
        )


def elementwise(optimizer: str) -> bool:
    """Whether each parameter's update depends only on its own gradient (then seeds side by side follow
    their separate runs); the optimizer registry says."""
    from mechsynth import optimizers

    return optimizer in optimizers.elementwise()


def batch_config(jobs: list[Job]) -> dict[str, Any]:
    """The one run that trains `jobs` (seeds 0..S-1 of a point) side by side."""
    config = {s: dict(t) for s, t in jobs[0].config.items()}
    config["train"]["seeds"] = len(jobs)
    # seed_config names seed i `<name>-seed_i`: the name each job already has
    config["wandb"]["name"] = _base_name(config["wandb"].get("name"), jobs[0].seed)
    return config


def _base_name(name: Optional[str], seed: int) -> Optional[str]:
    suffix = f"-seed_{seed}"
    return name[: -len(suffix)] if name and name.endswith(suffix) else name


def _without_seeds(config: dict[str, Any]) -> dict[str, Any]:
    flat = rundir.flatten(config)
    for key in (*SEED_KEYS, "wandb.name"):
        flat.pop(key, None)
    return flat


def why_separate(plan: Plan, jobs: list[Job], resources: bool = True) -> Optional[str]:
    """None when the point's `jobs` may train side by side as far as their configs go; else why not."""
    if not plan.side_by_side:
        return "side_by_side = false"
    seeds = [j.seed for j in jobs]
    if len(jobs) < 2:
        return "one seed"
    if sorted(seeds) != list(range(len(seeds))):
        return f"seeds {seeds} are not 0..{len(seeds) - 1} (a batch names its seed directories by index)"
    if plan.seed_keys:
        return f"the seed also sets {', '.join(plan.seed_keys)}: each seed's task differs"
    train = jobs[0].config["train"]
    if train.get("seeds", 1) != 1:
        return f"each run already trains train.seeds = {train['seeds']} models side by side"
    if not elementwise(train.get("optimizer", "adamw")):
        return f"optimizer {train.get('optimizer')!r} is not elementwise"
    first = _without_seeds(jobs[0].config)
    if any(_without_seeds(j.config) != first for j in jobs[1:]):
        return "its seeds' configs differ"
    if resources:
        from mechsynth.runs.runconfig import parse_config

        try:
            parse_config(batch_config(sorted(jobs, key=lambda j: j.seed)))
        except UserError as e:
            return f"as one batch: {e}"
    return None


def why_not_on_disk(point_dir: Path, config: dict[str, Any]) -> Optional[str]:
    """None when the batch `config` may train into `point_dir`: new, or holding this batch to continue."""
    n = config["train"]["seeds"]
    if (point_dir / rundir.CONFIG).exists():
        try:
            stored = rundir.read_config(point_dir)
        except UserError as e:
            return f"its batch config cannot be read ({e})"
        if rundir.n_seeds(stored) != n:
            return f"it holds a batch of {rundir.n_seeds(stored)} seeds"
        fixed = [
            k for k in rundir.changed_keys(complete(stored), complete(config)) if not rundir.may_change_on_resume(k)
        ]
        if fixed:
            return f"its batch has another {fixed[0]}"
        from mechsynth.runs.runner import resume_step

        try:
            resume_step(rundir.members(point_dir, n))
        except UserError:
            return "a seed of its batch was continued on its own"
        return None
    return None if is_vacant(point_dir, n) else "it holds runs of its seeds trained separately"


def is_vacant(point_dir: Path, n: int) -> bool:
    """Absent, or holding nothing but absent or empty seed_0..seed_{n-1} (a lock file counts as empty:
    a batch killed before writing its config leaves that)."""
    if not point_dir.exists():
        return True
    if not point_dir.is_dir():
        return False
    allowed = {rundir.LOCK} | {rundir.seed_dir(point_dir, i).name for i in range(n)}
    for p in point_dir.iterdir():
        if p.name not in allowed:
            return False
        if p.name != rundir.LOCK and (not p.is_dir() or any(q.name != rundir.LOCK for q in p.iterdir())):
            return False
    return True


def clear_vacant(point_dir: Path, n: int) -> None:
    """Remove what `is_vacant` allows (empty directories, lock files of a killed start) so a batch can start."""
    for i in range(n):
        d = rundir.seed_dir(point_dir, i)
        if d.is_dir():
            (d / rundir.LOCK).unlink(missing_ok=True)
            d.rmdir()
    (point_dir / rundir.LOCK).unlink(missing_ok=True)


def plan_units(plan: Plan, sweep_dir: Path, resources: bool = True) -> list[Unit]:
    """The jobs of `plan` as the backend will run them: side by side where allowed, else one by one."""
    by_point: dict[str, list[Job]] = {}
    for job in plan.jobs:
        by_point.setdefault(job.point, []).append(job)
    units: list[Unit] = []
    for point, jobs in by_point.items():
        jobs = sorted(jobs, key=lambda j: j.seed)
        why = why_separate(plan, jobs, resources)
        if why is None:
            config = batch_config(jobs)
            why = why_not_on_disk(sweep_dir / "runs" / point, config)
            if why is None:
                units.append(Unit(f"runs/{point}", config, tuple(jobs)))
                continue
        units += [Unit(j.dir, j.config, (j,), why if len(jobs) > 1 else None) for j in jobs]
    return units
