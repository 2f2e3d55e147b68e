"""The one module that imports ray: each sweep run is a Ray task with CPU/GPU resource requests.

The same code runs on a laptop (a local Ray instance started here) and on a multi-node cluster
(`--address`): a task only needs mechsynth installed on its node and the sweep directory at the
same path there (a shared filesystem), because each run reads and writes its own run directory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from mechsynth.errors import ConfigError, one_line
from mechsynth.sweep.job import JobFn, Resources, failed, run_job

INSTALL_HINT = "ray is not installed; install it with: pip install 'mechsynth[ray]'"


def require() -> None:
    """Fail with one line, before any work, when ray is missing."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ConfigError("--backend", INSTALL_HINT) from None


def _gpus_for(config: dict[str, Any], cluster_gpus: float) -> float:
    """Default GPU request: a whole GPU for runs that use CUDA, none for CPU runs ("auto" uses CUDA
    when the cluster has a GPU: Ray hides GPUs from tasks that did not ask for one)."""
    device = config["train"]["device"]
    if device.startswith("cuda"):
        return 1.0
    return 1.0 if device == "auto" and cluster_gpus > 0 else 0.0


def run(
    tasks: list[tuple[Any, str]], on_result: Callable[[Any, dict], None], resources: Resources, fn: JobFn = run_job
) -> None:
    """Run `tasks` [(job, run_dir)] as Ray tasks, each `fn(run_dir, job.config, threads)` (default: train it),
    and call `on_result(job, result)` as each finishes.
    Without `resources.address`, starts a fresh local Ray instance (never attaches to a stray one) and
    stops it afterwards; with one ("auto", "HOST:PORT", "ray://..."), connects to that cluster."""
    import ray

    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {"logging_level": logging.WARNING}
        if resources.address:
            ray.init(address=resources.address, **kwargs)
        else:
            ray.init(address="local", include_dashboard=False, **kwargs)
    try:
        cluster_gpus = ray.cluster_resources().get("GPU", 0.0)
        remote = ray.remote(fn)
        refs = {}
        for job, run_dir in tasks:
            gpus = resources.num_gpus if resources.num_gpus is not None else _gpus_for(job.config, cluster_gpus)
            threads = max(1, int(resources.num_cpus))
            ref = remote.options(num_cpus=resources.num_cpus, num_gpus=gpus, name=job.dir).remote(
                run_dir, job.config, threads
            )
            refs[ref] = job
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayError as e:  # the task's process or node died
                        result = {**failed(one_line(e)), "traceback": str(e)}
                    on_result(refs[ref], result)
        except KeyboardInterrupt:
            # Cancel raises KeyboardInterrupt inside each task: train_run checkpoints before exiting.
            for ref in pending:
                ray.cancel(ref)
            ray.wait(pending, num_returns=len(pending), timeout=60)
            raise
    finally:
        if started:
            ray.shutdown()
