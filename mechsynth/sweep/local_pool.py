"""The local sweep backend: runs in a pool of processes on this machine."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from mechsynth.sweep.job import JobFn, Resources, failed, run_job
from mechsynth.training.threads import free_cpus


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


def _how_workers_ended(workers: list[Any]) -> str:
    """How the pool's workers that ended did (a signal's name, or an exit code), for the report."""
    import signal

    def how(code: int) -> str:
        try:
            return signal.Signals(-code).name if code < 0 else f"exit code {code}"
        except ValueError:
            return f"signal {-code}"

    return ", ".join(how(p.exitcode) for p in workers if p.exitcode is not None) or "how is unknown"


def run(
    tasks: list[tuple[Any, str]], on_result: Callable[[Any, dict], None], resources: Resources, fn: JobFn = run_job
) -> None:
    """Each run in a process of a spawn pool (fork would copy torch's thread pools and CUDA state);
    with one worker, each run in turn in this process. `fn(run_dir, task.config, threads)` does the work
    (default: train the run; `mechsynth probe` passes its probing)."""
    workers = resources.workers
    threads = resources.threads or max(1, free_cpus() // workers)
    if workers == 1:  # one at a time: in this process, saving a worker's start-up (imports) per sweep
        import torch

        # Each job sets torch's thread count; this process's own is given back after, as a run continued
        # here under another count would not be bit-identical to one that was never stopped.
        before = torch.get_num_threads()
        try:
            for task, run_dir in tasks:
                on_result(task, fn(run_dir, task.config, threads))
        finally:
            torch.set_num_threads(before)
        return
    # A worker that dies (killed, out of memory) breaks the whole pool and every run still in it. Those
    # runs get one more try in a fresh pool (they continue from their checkpoints); a run whose pool
    # breaks twice is reported failed.
    todo, tried = list(tasks), set()
    while todo:
        cut = _run_pool(todo, on_result, workers, threads, fn)
        for task, run_dir, why in cut:
            if run_dir in tried:
                on_result(
                    task, failed(f"its worker process died ({why}) twice; run the same command again to retry it")
                )
        todo = [(task, run_dir) for task, run_dir, _ in cut if run_dir not in tried]
        tried |= {run_dir for _, run_dir in todo}


def _run_pool(
    tasks: list[tuple[Any, str]],
    on_result: Callable[[Any, dict], None],
    workers: int,
    threads: int,
    fn: JobFn = run_job,
) -> list[tuple[Any, str, str]]:
    """Run `tasks` in one spawn pool; returns those cut off by a worker's death, with how it died."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=(threads,),
    )
    cut = []
    try:
        futures = {pool.submit(fn, run_dir, task.config, threads): (task, run_dir) for task, run_dir in tasks}
        procs = list(pool._processes.values())  # (the pool forgets a worker that died: keep them to say how)
        for f in as_completed(futures):
            try:
                on_result(futures[f][0], f.result())
            except BrokenProcessPool:
                cut.append((*futures[f], _how_workers_ended(procs)))
    except KeyboardInterrupt:
        # The workers got the same Ctrl-C: each checkpoints its current step. Wait for that.
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return cut
