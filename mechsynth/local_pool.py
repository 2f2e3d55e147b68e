"""The local sweep backend: runs in a pool of processes on this machine."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

from mechsynth.sweep_job import Resources, failed, run_job


def _init_worker(threads: int) -> None:
    """Pool worker start: few torch threads (workers share the cores), and die with the parent so a
    killed sweep leaves no orphan training into the directory that a restart will use."""
    import torch

    torch.set_num_threads(threads)
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def run(tasks: list[tuple[Any, str]], on_result: Callable[[Any, dict], None], resources: Resources) -> None:
    """Each run in a process of a spawn pool (fork would copy torch's thread pools and CUDA state);
    with one worker, each run in turn in this process."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    workers = resources.workers
    threads = max(1, cpu_count() // workers)
    if workers == 1:  # one at a time: in this process, saving a worker's start-up (imports) per sweep
        for task, run_dir in tasks:
            on_result(task, run_job(run_dir, task.config, threads))
        return
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(threads,))
    try:
        futures = {pool.submit(run_job, run_dir, task.config, threads): task for task, run_dir in tasks}
        for f in as_completed(futures):
            try:
                result = f.result()
            except BrokenProcessPool as e:
                result = failed(f"worker process died ({e})")
            on_result(futures[f], result)
    except KeyboardInterrupt:
        # The workers got the same Ctrl-C: each checkpoints its current step. Wait for that.
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
