"""The first thing to run on a GPU: everything mechsynth does, on that device, in one go, into one JSON.

    python -m benchmarks.gpu_check [--device cuda|cpu] [--size full|quick] [--out assets/gpu_check.json]
                                   [--only SECTION,...]

Sections, in order (each one's failures are recorded and the next runs, so one CUDA failure hides nothing):
  train            every registered model kind on a task it fits, and the transformer on every task
  seeds            seeds side by side at S = 1, 8, 32 against the same models stepped one after another
                   (benchmarks/seeds_speed.py), and how far seed i ends from model i alone
  probes           every checkpoint of every run above with every probe that applies (the costly ones, llc,
                   sharpness and circuit, on its last); every registered probe must have run on some run
  circuits         every circuit method against one forward pass (benchmarks/circuit_speed.py), and the
                   circuit probe with every method and every ablation
  sweep            a 2-job sweep on the local pool, both jobs on the one device
  bench_train      mechsynth vs bare PyTorch vs TransformerLens's helper (benchmarks/train_speed.py)
  bench_probe      probing every checkpoint vs bare forwards (benchmarks/probe_speed.py)
  bench_landscape  llc and sharpness vs their bare versions (benchmarks/landscape_speed.py)
The JSON (device, versions, commit, seconds per section, every ratio, every failure with its traceback) is
rewritten after each section, so a run cut short keeps what it measured. Exit status 1 if anything failed.

`--size full` (the default) is the GPU's: the benchmarks at their own sizes, the rest large enough to give a GPU
some work (estimated at about 5 minutes on an H100-class GPU; the JSON says). `--size quick` checks this script
on a CPU (90 s on an idle 2-core one, 5 minutes with a test suite beside it; tests/test_gpu_check.py, CI's slow
tier), so that on a GPU only CUDA can fail. Run it from the checkout's root, with mechsynth installed (a GPU
machine given the repository and wheels of the rest: `pip install --no-deps --no-build-isolation -e .`).
`python -m benchmarks.speed_doc` turns the JSON into docs/speed.md's GPU part.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Optional, TypeVar

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("TQDM_DISABLE", "1")  # TransformerLens's patching helper draws a bar per call
os.environ["WANDB_MODE"] = "disabled"  # offline machines: nothing may reach for W&B's server
os.environ["WANDB_SILENT"] = "true"

import torch

T = TypeVar("T")
SEEDS = (1, 8, 32)
# A kind's model table where its defaults are too large for a short run, and the task it trains on first; else
# the first of CANDIDATE_TASKS it fits (as tests/test_contracts.py chooses).
KIND_TABLES = {"linearized": {"base": {"n_layers": 2, "n_heads": 1, "d_model": 16, "attn_only": True}}}
MARKOV = {"name": "markov_icl", "k": 3, "length": 16}  # also of the circuit probe's and the sweep's runs
FIRST_TASK = {"linearized": MARKOV}
CANDIDATE_TASKS = ({"name": "sparse_parity", "n": 6, "k": 2}, MARKOV, {"name": "single_index", "d": 6, "k_star": 2})
# Task parameters that keep every probe's inputs small (modular arithmetic's probes read all p² pairs).
SMALL_TASKS = {
    "associative_memory": {"inputs": 16},
    "modular_arithmetic": {"p": 7},
    "causal_icl": {"length": 8},
    "factual_recall": {"subjects": 8},
    "markov_icl": {"k": 3, "length": 16},
}
# Seed i side by side and model i alone differ by float rounding (amplified a little by Adam over the steps);
# a seed mixed up with another differs by the init scale (~0.02) or more.
SEED_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Size:
    transformer: dict[str, Any]  # the transformer's model table (train, probes, sweep)
    train: dict[str, Any]  # [train] of every run of train, probes and sweep
    probe_batch: int
    costly: dict[str, dict[str, Any]]  # options of the costly probes in the probes section (on the last checkpoint)
    seeds: dict[str, Any]  # seeds_speed.measure: steps, rounds, eval_batch_size, stacked
    circuits: dict[str, Any]  # circuit_speed.measure: batch, steps, repeats, eval_batch_size
    bench_train: dict[str, int]  # train_speed.measure: steps, rounds
    bench_probe: dict[str, Any]  # probe_speed: the demo run's steps, checkpoints, eval_batch_size; rounds, batch
    bench_landscape: dict[str, Any]  # landscape_speed.measure: checkpoints, steps, options


SIZES = {
    "full": Size(
        transformer={"n_layers": 2, "n_heads": 2, "d_model": 64},
        train={"steps": 150, "batch_size": 64, "eval_every": 50, "eval_batch_size": 256, "checkpoints": 6},
        probe_batch=64,
        costly={
            "llc": {"chains": 2, "draws": 20, "pool": 64, "batch": 32},
            "sharpness": {"batch": 64, "iterations": 8},
            "circuit": {},
        },
        # 128 held-out sequences a seed, not 512: markov_icl's Bayes predictor for each of 82 seeds' would take a minute
        seeds={"steps": 16, "rounds": 3, "eval_batch_size": 128},
        circuits={"batch": 64, "steps": 600, "repeats": 3},
        bench_train={"steps": 60, "rounds": 3},
        bench_probe={"steps": 2000, "checkpoints": 100, "eval_batch_size": None, "rounds": 3, "batch": 64},
        bench_landscape={"checkpoints": 3, "steps": 300},
    ),
    "quick": Size(
        transformer={"n_layers": 2, "n_heads": 1, "d_model": 16},
        train={"steps": 8, "batch_size": 16, "eval_every": 4, "eval_batch_size": 64, "checkpoints": 3},
        probe_batch=16,
        costly={
            "llc": {"chains": 1, "draws": 10, "pool": 16, "batch": 8},
            "sharpness": {"batch": 8, "iterations": 4},
            "circuit": {"method": "eap"},
        },
        seeds={"steps": 2, "rounds": 1, "eval_batch_size": 4, "stacked": False},
        circuits={"batch": 16, "steps": 30, "repeats": 1, "eval_batch_size": 16},
        bench_train={"steps": 4, "rounds": 1},
        bench_probe={"steps": 40, "checkpoints": 5, "eval_batch_size": 16, "rounds": 1, "batch": 16},
        bench_landscape={
            "checkpoints": 1,
            "steps": 20,
            "llc_options": {"chains": 1, "draws": 10, "pool": 16, "batch": 8},
            "sharpness_options": {"batch": 8, "iterations": 4},
            "eval_batch_size": 16,
        },
    ),
}


@dataclass
class Check:
    """What the sections share: where and how big, the runs trained, and what was measured and what failed."""

    device: str
    size: Size
    tmp: Path
    runs: dict[str, Path] = field(default_factory=dict)  # "<kind>/<task>" -> run directory
    ratios: dict[str, Optional[float]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)

    def attempt(self, section: str, item: Optional[str], fn: Callable[[], T]) -> Optional[T]:
        """fn(), or None with the failure recorded: one item failing (a kind, a run's probes) keeps the others."""
        try:
            out = fn()
            sync(self.device)  # an asynchronous CUDA error belongs to the item that queued it
            return out
        except Exception as e:  # noqa: BLE001 - every failure is recorded, none ends the check
            self.failures.append(failure(section, item, e))
            return None

    def record(self, prefix: str, values: dict[str, Optional[float]], suffix: str = "") -> None:
        """A measurement's numbers as ratios named `prefix/<key><suffix>`."""
        self.ratios.update({f"{prefix}/{k}{suffix}": v for k, v in values.items()})

    def config(self, task: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
        return {
            "task": task,
            "model": model,
            "train": {**self.size.train, "device": self.device},
            "wandb": {"mode": "disabled"},
        }


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def failure(section: str, item: Optional[str], e: BaseException) -> dict[str, Any]:
    lines = str(e).strip().splitlines()
    return {
        "section": section,
        "item": item,
        "error": type(e).__name__,
        "message": lines[0] if lines else "",
        "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__)[-12:]),
    }


# ---- the sections -----------------------------------------------------------------------------------


def kind_task(kind: str) -> dict[str, Any]:
    from mechsynth import models, tasks
    from mechsynth.errors import ConfigError

    for task in ([FIRST_TASK[kind]] if kind in FIRST_TASK else []) + list(CANDIDATE_TASKS):
        try:
            models.validate(
                models.parse({"kind": kind, **KIND_TABLES.get(kind, {})}),
                tasks.make(task["name"], {k: v for k, v in task.items() if k != "name"}).spec,
            )
            return task
        except ConfigError:
            continue
    raise ValueError(f"no task of {[t['name'] for t in CANDIDATE_TASKS]} fits model kind {kind!r}")


def train(check: Check) -> dict[str, Any]:
    from mechsynth import load_run, models, parse_config, tasks, train_run

    plan: dict[str, dict[str, Any]] = {}
    for kind in models.names():
        if kind != "transformer":  # it trains on every task below
            task = check.attempt("train", kind, lambda: kind_task(kind))
            if task is not None:
                plan[f"{kind}/{task['name']}"] = check.config(task, {"kind": kind, **KIND_TABLES.get(kind, {})})
    plan |= {
        f"transformer/{name}": check.config({"name": name, **SMALL_TASKS.get(name, {})}, dict(check.size.transformer))
        for name in tasks.names()
    }
    runs: dict[str, Any] = {}
    for label, data in plan.items():

        def one() -> dict[str, Any]:
            t0 = time.perf_counter()
            run = load_run(train_run(parse_config(data), check.tmp / "train" / label.replace("/", "-"), progress=False))
            seconds = time.perf_counter() - t0
            loss = run.metrics[-1].get(f"{run.task.main_eval}/loss")
            if loss is None or not math.isfinite(loss):
                raise ValueError(f"held-out loss after {run.steps[-1]} steps is {loss}")
            check.runs[label] = run.path
            check.ratios[f"train/{label}/steps_per_s"] = run.steps[-1] / seconds
            return {"seconds": seconds, "checkpoints": len(run.steps), "loss": loss}

        runs[label] = check.attempt("train", label, one)
    kinds = {label.split("/")[0] for label in check.runs}
    return {
        "runs": runs,
        "summary": f"{len(check.runs)}/{len(plan)} runs, {len(kinds)}/{len(models.names())} kinds, "
        f"{statistics.median([v for k, v in check.ratios.items() if k.startswith('train/')] or [0]):.0f} steps/s (median)",
    }


def seeds(check: Check) -> dict[str, Any]:
    from benchmarks import seeds_speed

    out: dict[str, Any] = {}
    for s in SEEDS:

        def one() -> None:
            out[f"S={s}"] = m = seeds_speed.measure(check.device, s, **check.size.seeds)
            for way, ratio in m["vs_sequential"].items():
                if way != "sequential":
                    check.ratios[f"seeds/S={s}/{way}_vs_sequential"] = ratio
                check.ratios[f"seeds/S={s}/{way}_model_steps_per_s"] = m["model_steps_per_s"][way]
            check.ratios[f"seeds/S={s}/eval_vs_sequential"] = m["eval_vs_sequential"]["batched"]
            if not m["max_weight_difference"] <= SEED_TOLERANCE:  # NaN too
                raise ValueError(
                    f"seed i side by side and model i alone differ by {m['max_weight_difference']:.3g} "
                    f"(> {SEED_TOLERANCE}) after the same steps"
                )

        check.attempt("seeds", f"S={s}", one)
    ratios = ", ".join(
        f"S={s} {check.ratios[k]:.2f}x" for s in SEEDS if (k := f"seeds/S={s}/batched_vs_sequential") in check.ratios
    )
    return {**out, "summary": f"side by side vs sequential: {ratios}"}


def probe(check: Check) -> dict[str, Any]:
    from mechsynth import load_run, probes
    from mechsynth.analysis import timeline

    covered: set[str] = set()
    out: dict[str, Any] = {}
    for label, path in check.runs.items():

        def one() -> dict[str, Any]:
            run = load_run(path)
            names = timeline.applicable(run, costly=True)
            costly = [n for n in names if probes.PROBES.get(n).costly]
            t0 = time.perf_counter()
            for group, steps, options in (
                ([n for n in names if n not in costly], run.steps, {}),
                (costly, run.steps[-1:], {n: check.size.costly.get(n, {}) for n in costly}),
            ):
                if not group:
                    continue
                tl = timeline.probe_run(
                    run, group, steps, batch_size=check.size.probe_batch, device=check.device, options=options
                )
                empty = [n for n in group if not tl.per_head[n] and not tl.metrics[n]]
                if empty:
                    raise ValueError(f"probes {', '.join(empty)} gave no values")
            covered.update(names)
            return {"probes": names, "checkpoints": len(run.steps), "seconds": time.perf_counter() - t0}

        out[label] = check.attempt("probes", label, one)
    missing = sorted(set(probes.names()) - covered)
    if missing:
        check.failures.append(
            {
                "section": "probes",
                "item": None,
                "error": "NotCovered",
                "message": f"never ran: {', '.join(missing)}",
                "traceback": "",
            }
        )
    return {
        "runs": out,
        "covered": sorted(covered),
        "summary": f"{len(covered)}/{len(probes.names())} probes over {sum(v is not None for v in out.values())}/{len(out)} runs",
    }


def circuits(check: Check) -> dict[str, Any]:
    from benchmarks import circuit_speed
    from mechsynth import circuits as circ
    from mechsynth import load_run, parse_config, train_run
    from mechsynth.analysis import timeline

    out: dict[str, Any] = {}

    def bench() -> list[Any]:
        m = circuit_speed.measure(check.device, **check.size.circuits)
        forward = m["rows"][0][2]
        for key, _, seconds, agreement, _ in m["rows"]:
            check.ratios[f"circuits/{key}/x_forward"] = seconds / forward
            if agreement is not None and key != "patching":
                check.ratios[f"circuits/{key}/agreement"] = agreement
        return m["rows"]

    out["benchmark"] = check.attempt("circuits", "benchmark", bench)

    # The circuit probe, as `mechsynth probe --probes circuit` runs it, with every method and every ablation (on the
    # last checkpoint: the probes section runs it on every run), on the train section's run of markov_icl.
    data = check.config(dict(MARKOV), dict(check.size.transformer))
    path = check.runs.get("transformer/markov_icl") or check.attempt(
        "circuits", "train", lambda: train_run(parse_config(data), check.tmp / "circuit", progress=False)
    )
    run = None if path is None else load_run(path)
    for method, ablation in [(m, "resample") for m in circ.METHODS] + [
        ("eap", a) for a in circ.ABLATIONS if a != "resample"
    ]:

        def one() -> dict[str, Any]:
            opts = {"method": method, "ablation": ablation}
            m = timeline.probe_run(
                run,
                ["circuit"],
                run.steps[-1:],
                batch_size=check.size.probe_batch,
                device=check.device,
                options={"circuit": opts},
            ).metrics["circuit"]
            last = {k: m[k][-1] for k in ("edges", "faithfulness", "gap")}
            if not math.isfinite(last["edges"]) or last["edges"] < 1:
                raise ValueError(f"the circuit at the last checkpoint has {last['edges']} edges")
            return last

        if run is not None:
            out[f"probe/{method}/{ablation}"] = check.attempt("circuits", f"probe {method} {ablation}", one)
    shown = ", ".join(
        f"{k} {check.ratios[f'circuits/{k}/x_forward']:.1f}x"
        for k in circ.METHODS
        if f"circuits/{k}/x_forward" in check.ratios
    )
    return {**out, "summary": f"x one forward: {shown}"}


def sweep(check: Check) -> dict[str, Any]:
    from mechsynth.runs import rundir
    from mechsynth.sweep import plan_of_runs, run_sweep

    steps = check.size.train["steps"]
    base = check.config(dict(MARKOV), dict(check.size.transformer))
    plan = plan_of_runs(
        "gpu_check",
        [({"lr": lr}, 0, {**base, "train": {**base["train"], "lr": lr}}) for lr in (1e-3, 3e-3)],
        side_by_side=False,
        wandb_mode="disabled",
    )
    log: list[str] = []
    t0 = time.perf_counter()
    outcome = run_sweep(plan, check.tmp / "sweep", workers=2, log=log.append)  # two worker processes, one device
    seconds = time.perf_counter() - t0
    if outcome.failures:
        raise RuntimeError(f"{len(outcome.failures)} jobs failed: {outcome.failures[0]['error']}")
    incomplete = [j.dir for j in plan.jobs if not rundir.is_complete(check.tmp / "sweep" / j.dir)]
    if incomplete:
        raise RuntimeError(f"runs not complete: {', '.join(incomplete)}")
    check.ratios["sweep/model_steps_per_s"] = len(plan.jobs) * steps / seconds
    return {
        "seconds": seconds,
        "jobs": len(plan.jobs),
        "log": log,
        "summary": f"{len(plan.jobs)} jobs on 2 workers, {seconds:.1f} s (worker start-up included)",
    }


def bench_train(check: Check) -> dict[str, Any]:
    from benchmarks import train_speed

    m = train_speed.measure(check.device, **check.size.bench_train)
    check.record("bench_train", m["steps_per_s"], "_steps_per_s")
    check.record("bench_train", m["ratios"])
    check.ratios["bench_train/data_generation_share"] = m["data_generation_share"]
    r = m["ratios"]
    return {
        **m,
        "summary": f"{m['steps_per_s']['mechsynth']:.0f} steps/s; {r['mechsynth/bare']:.2f}x bare, "
        f"{r['mechsynth/tl_helper']:.2f}x TL helper",
    }


def bench_probe(check: Check) -> dict[str, Any]:
    from benchmarks import probe_speed

    s = check.size.bench_probe
    m = probe_speed.measure(
        probe_speed.demo_run(check.device, s["steps"], s["checkpoints"], s["eval_batch_size"]),
        check.device,
        rounds=s["rounds"],
        batch=s["batch"],
    )
    check.record("bench_probe", m["ratios"])
    check.ratios["bench_probe/mechsynth_seconds_per_checkpoint"] = m["seconds"]["mechsynth"] / m["checkpoints"]
    rest = {k: v for k, v in m.items() if k != "seconds"}  # the section's own "seconds" is its wall time
    return {
        **rest,
        "seconds_each": m["seconds"],
        "summary": f"{m['checkpoints']} checkpoints: {m['ratios']['mechsynth/bare']:.2f}x bare forwards, "
        f"per-checkpoint TL {m['ratios']['per_checkpoint_tl/mechsynth']:.2f}x as long",
    }


def bench_landscape(check: Check) -> dict[str, Any]:
    from benchmarks import landscape_speed

    m = landscape_speed.measure(check.device, **check.size.bench_landscape)
    check.record("bench_landscape", m["ratios"])
    check.record("bench_landscape", m["seconds_per_checkpoint"], "_seconds_per_checkpoint")
    r = m["ratios"]
    return {
        **m,
        "summary": f"llc {r['llc/bare_sgld']:.2f}x bare SGLD, sharpness {r['sharpness/double_backward']:.2f}x double backward",
    }


SECTIONS: dict[str, Callable[[Check], dict[str, Any]]] = {
    "train": train,
    "seeds": seeds,
    "probes": probe,
    "circuits": circuits,
    "sweep": sweep,
    "bench_train": bench_train,
    "bench_probe": bench_probe,
    "bench_landscape": bench_landscape,
}


# ---- the record ------------------------------------------------------------------------------------


def device_info(device: str) -> dict[str, Any]:
    from experiments import harness

    info: dict[str, Any] = {
        "type": device,
        "name": harness.device_name(device),
        "torch_threads": torch.get_num_threads(),
    }
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        info |= {
            "count": torch.cuda.device_count(),
            "capability": f"{p.major}.{p.minor}",
            "memory_gib": round(p.total_memory / 2**30, 1),
        }
    return info


def save(out: dict[str, Any], path: Path) -> None:
    from experiments import harness
    from mechsynth.runs import io

    path.parent.mkdir(parents=True, exist_ok=True)
    io.write_json(path, harness._finite(out))  # atomic; NaN -> null, 5 significant digits


def table(out: dict[str, Any]) -> str:
    lines = [
        f"{out['device']['name']} ({out['device']['type']}), torch {out['versions']['torch']}"
        f"{f' (CUDA {c})' if (c := out['versions'].get('cuda')) else ''}, TransformerLens "
        f"{out['versions'].get('transformer_lens')}, size {out['size']}, {out['seconds']:.0f} s in all",
        f"{'section':<16}{'status':<8}{'seconds':>8}  result",
    ]
    for name, s in out["sections"].items():
        lines.append(f"{name:<16}{'ok' if s['ok'] else 'FAILED':<8}{s['seconds']:>8.1f}  {s.get('summary', '')}")
    for f in out["failures"]:
        item = f" ({f['item']})" if f["item"] else ""
        lines.append(f"FAILED {f['section']}{item}: {f['error']}: {f['message']}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--size", choices=tuple(SIZES), default="full", help="full: the GPU's; quick: checks the script on a CPU"
    )
    p.add_argument("--out", type=Path, default=ROOT / "assets" / "gpu_check.json")
    p.add_argument(
        "--commit",
        default=None,
        help="the commit to record where the checkout is a copy without .git (default: the checkout's)",
    )
    p.add_argument("--only", default=None, help=f"comma-separated sections (probes trains too): {', '.join(SECTIONS)}")
    args = p.parse_args(argv)
    chosen = list(SECTIONS) if args.only is None else [s.strip() for s in args.only.split(",")]
    if unknown := [s for s in chosen if s not in SECTIONS]:
        p.error(f"--only: unknown section {unknown[0]!r}; allowed: {', '.join(SECTIONS)}")
    if "probes" in chosen and "train" not in chosen:
        chosen.insert(0, "train")  # the probes read the runs it trains
    try:  # every run records mechsynth's version, and its probes are mechsynth.probes only once installed
        version("mechsynth")
    except PackageNotFoundError:
        p.error("mechsynth is not installed here: pip install --no-deps --no-build-isolation -e . (offline) first")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error(f"--device cuda: torch {torch.__version__} sees no CUDA device (--device cpu checks the script)")

    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp_dir:
        tmp = Path(tmp_dir)
        for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
            os.environ[var] = str(tmp / "wandb" / var.lower())  # nothing under the home directory
        from experiments import harness
        from mechsynth.runs import rundir

        versions = {
            **harness.versions(),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        }
        check = Check(args.device, SIZES[args.size], tmp)
        out: dict[str, Any] = {
            "device": device_info(args.device),
            "size": args.size,
            "versions": versions,
            "commit": args.commit or rundir.code_commit(ROOT),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "complete": False,
            "seconds": 0.0,
            "sections": {},
            "ratios": check.ratios,
            "failures": check.failures,
        }
        t_start = time.perf_counter()
        for name in (s for s in SECTIONS if s in chosen):
            print(f"gpu_check: {name} ...", file=sys.stderr, flush=True)
            before, t0 = len(check.failures), time.perf_counter()
            result = check.attempt(name, None, lambda: SECTIONS[name](check)) or {}
            out["sections"][name] = {**result, "ok": len(check.failures) == before, "seconds": time.perf_counter() - t0}
            out["seconds"] = time.perf_counter() - t_start
            save(out, args.out)
        out["complete"] = True
        save(out, args.out)
    print(table(out))
    print(f"wrote {args.out}")
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
