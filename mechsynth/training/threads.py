"""How many CPU threads torch computes with: as many as the CPUs this process may use and that other processes are
not already busy on, not the machine's core count.

Two threads on a 2-core machine beside other busy processes spin against them (OpenMP's threads spin-wait for work):
the demo config trained at 5.4 steps/s with torch's default of 2 threads beside two busy processes and at 13.5 with
1, while idle 2 threads are the faster (34.6 against 1 thread's ~25; benchmarks/threads_under_load.py,
assets/threads_under_load.json). So the count follows what is free when a command starts:

- the CPUs the process may run on (its affinity) and its cgroup's CPU quota (a container's `--cpus`);
- less the CPUs other processes keep busy as it starts (the runnable processes the kernel counts, less this one);
- `MECHSYNTH_THREADS` sets it outright, and a run's `train.threads` wins over both.

The count changes results in the last bits (a matrix product sums in another order), so a run records the count it
trained with at each checkpoint and `--resume` uses it again: a resumed run stays bit-identical to an unbroken one.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional

from mechsynth.errors import ConfigError

ENV = "MECHSYNTH_THREADS"


def cpus_allowed() -> float:
    """The CPUs this process may use: its affinity, capped by a cgroup CPU quota (v2 `cpu.max`, v1 `cfs_quota_us`)."""
    try:
        n: float = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return min(n, _quota() or n)


def _quota() -> Optional[float]:
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 else None
    except (OSError, ValueError):
        return None


def busy_elsewhere(samples: int = 5, every: float = 0.05) -> float:
    """How many CPUs other processes keep busy now: the runnable processes /proc/loadavg counts (this one among
    them), averaged over a quarter of a second. The load average would lag by a minute: a machine that just went
    idle would still look busy, one just turned busy idle."""
    import time

    counts = []
    for i in range(samples):
        try:
            counts.append(int(Path("/proc/loadavg").read_text().split()[3].split("/")[0]))
        except (OSError, ValueError, IndexError):
            try:
                return max(0.0, os.getloadavg()[0] - 1.0)
            except OSError:
                return 0.0
        if i + 1 < samples:
            time.sleep(every)
    return max(0.0, sum(counts) / len(counts) - 1.0)


def free_cpus(allowed: Optional[float] = None, others: Optional[float] = None) -> int:
    """The allowed CPUs less those other processes keep busy, rounded to the nearer, at least 1."""
    allowed = cpus_allowed() if allowed is None else allowed
    others = busy_elsewhere() if others is None else others
    return max(1, min(math.floor(allowed), math.floor(allowed - others + 0.5)))


def choose(requested: Optional[int] = None) -> tuple[int, str]:
    """(threads, why): `requested` (a run's train.threads), else MECHSYNTH_THREADS, else the free CPUs."""
    if requested is not None:
        return requested, "train.threads"
    raw = os.environ.get(ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ConfigError(ENV, f"{raw!r} is not allowed; allowed: a whole number of threads ≥ 1, or unset")
        return int(raw), ENV
    allowed, others = cpus_allowed(), busy_elsewhere()
    return free_cpus(allowed, others), f"{allowed:g} CPUs allowed, {others:.1f} busy elsewhere"


def use(requested: Optional[int] = None) -> tuple[int, str]:
    """Set torch's intra-op threads by `choose`; returns what `choose` did."""
    import torch

    n, why = choose(requested)
    torch.set_num_threads(n)
    return n, why
