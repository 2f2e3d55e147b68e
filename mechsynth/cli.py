"""The `mechsynth` command. `main(argv)` returns an exit code so tests call it in-process."""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from mechsynth.config import apply_override, describe, read_toml
from mechsynth.errors import ConfigError, DivergedError, UserError
from mechsynth.runs.wandb_log import MODES

# mechsynth.sweep.job.BACKENDS, spelled here: importing the sweep package imports torch, which --help need not wait
# for (tests/test_cli_imports.py checks the two agree)
BACKENDS = ("local", "ray")

COMPUTES = ("train", "demo", "probe", "report", "import", "bench-circuits")  # torch's threads set first
DIVERGED = 3  # exit code of a run whose loss stopped being finite (2: a user error; 130: Ctrl-C)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mechsynth", description="Train small hooked transformers on synthetic tasks and watch circuits form."
    )
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("tasks", help="list tasks, their parameters and defaults")
    t.add_argument("--json", action="store_true", help="machine-readable output")
    ps = sub.add_parser(
        "probes", help="list probes, the task truth each reads, and their options (mechsynth probe --set)"
    )
    ps.add_argument("--json", action="store_true", help="machine-readable output")

    tr = sub.add_parser("train", help="train a model from a TOML config (or continue one with --resume)")
    tr.add_argument("config", nargs="?", help="TOML file with [task], [model], [train], [wandb] tables")
    tr.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a config value (repeatable)"
    )
    tr.add_argument("--out", help="run directory (default: runs/<config name>-<time>)")
    tr.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint")
    tr.add_argument("--wandb", choices=MODES, help="W&B mode (default: the config's, else WANDB_MODE, else offline)")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")

    pr = sub.add_parser(
        "probe", help="probe every checkpoint of a run (or of every run of a sweep) and report when each circuit forms"
    )
    pr.add_argument(
        "run_dir",
        help="a run directory (from `mechsynth train`); a sweep directory, or a run with seeds side "
        "by side: each of its complete runs, in parallel, skipping those probed already",
    )
    pr.add_argument("--probes", help="comma-separated probe names (default: all that apply to the run)")
    pr.add_argument("--steps", help="comma-separated checkpoint steps (default: all)")
    pr.add_argument("--batch-size", type=int, default=64, help="sequences per probe")
    pr.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PROBE.OPTION=VALUE",
        help="a probe's option, e.g. llc.draws=400 or sharpness.checkpoints=0 (repeatable; "
        "`mechsynth probes` lists them)",
    )
    pr.add_argument(
        "--json",
        action="store_true",
        help="print the timeline as JSON (many runs: each one's status and earliest heads)",
    )
    pr.add_argument("--wandb", choices=MODES, help="W&B mode (default: the run's)")
    pr.add_argument(
        "--backend", choices=BACKENDS, default="local", help="many runs: a local process pool (default) or Ray tasks"
    )
    pr.add_argument("--workers", type=int, help="many runs, local backend: runs at a time (default: the CPU count)")
    pr.add_argument(
        "--address", help="many runs, ray backend: cluster to join ('auto', HOST:PORT); default: start a local Ray"
    )
    pr.add_argument("--cpus-per-run", type=float, help="many runs, ray backend: CPUs each run requests (default 1)")

    sw = sub.add_parser("sweep", help="train a grid of configs × seeds; run it again to finish a killed sweep")
    sw.add_argument(
        "sweep_file", help="TOML run config (or `base = FILE`) plus a [sweep] table with seeds and [sweep.grid]"
    )
    sw.add_argument("--out", help="sweep directory (default: runs/<sweep name>)")
    sw.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value of every run (repeatable)",
    )
    sw.add_argument("--backend", choices=BACKENDS, default="local", help="a local process pool (default) or Ray tasks")
    sw.add_argument(
        "--workers",
        type=int,
        help="local backend: runs at a time (default: the CPU count; 1 runs them in turn in this process)",
    )
    sw.add_argument("--address", help="ray backend: cluster to join ('auto', HOST:PORT); default: start a local Ray")
    sw.add_argument(
        "--cpus-per-run", type=float, help="ray backend: CPUs each run requests (default: sweep.num_cpus, 1)"
    )
    sw.add_argument(
        "--gpus-per-run",
        type=float,
        help="ray backend: GPUs each run requests (default: sweep.num_gpus; 1 if the run uses CUDA, else 0)",
    )
    sw.add_argument("--wandb", choices=MODES, help="W&B mode of every run")
    sw.add_argument("--dry-run", action="store_true", help="validate and print the runs and their state; train nothing")

    sr = sub.add_parser("sweep-report", help="tabulate a sweep's outcomes over its grid (CSV, heatmap, table)")
    sr.add_argument("sweep_dir", help="a sweep directory (from `mechsynth sweep`)")
    sr.add_argument(
        "--acc",
        type=float,
        help="accuracy at which a run counts as converged (default 0.99; without --acc "
        "or --acc-key: the task's own criterion, e.g. markov_icl's eval/kl_bayes ≤ 0.02)",
    )
    sr.add_argument("--acc-key", help="the accuracy metric (default eval/acc; e.g. eval/acc_last, eval_long/acc)")
    sr.add_argument("--metric", default="final_acc", help="heatmap quantity: final_acc, frac_converged, conv_step")
    sr.add_argument("--rows", help="grid axis down the heatmap (default: the first)")
    sr.add_argument("--cols", help="grid axis across the heatmap (default: the second)")

    rp = sub.add_parser(
        "report", help="write RUN_DIR/report.html: curves, probe timelines, attention renders; opens offline"
    )
    rp.add_argument("run_dir", help="a run directory (probed first if it has no probes.json)")
    rp.add_argument("--batch-size", type=int, default=64, help="sequences per probe, when probing")
    rp.add_argument("--wandb", choices=MODES, help="W&B mode (default: the run's)")

    im = sub.add_parser(
        "import",
        help="turn checkpoints from elsewhere (TransformerLens state dicts, nanoGPT, a tracr "
        "program) into a run directory that probe and report read",
    )
    im.add_argument(
        "checkpoints",
        nargs="+",
        help="checkpoint files, or directories of them; a file's step is the last "
        "number in its name (nanoGPT's: its iter_num); tracr:NAME, a "
        "compiled program of the circuit zoo (tracr:detect_pattern)",
    )
    im.add_argument("--out", required=True, help="the new run directory")
    im.add_argument(
        "--task",
        help="the task the model learned (default: random tokens of its vocabulary; a tracr "
        "program: its own vocabulary and length)",
    )
    im.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="task.KEY=VALUE|model.KEY=VALUE",
        help="a task parameter, or a model field the weights cannot say (model.act_fn=gelu, "
        "model.normalization=LNPre; model.n_heads for TransformerBridge state dicts); checked "
        "against the weights' shapes",
    )
    im.add_argument(
        "--tl-config",
        metavar="FILE",
        help="the model's TransformerLens config: a JSON file of HookedTransformerConfig fields (model.cfg.to_dict())",
    )

    bc = sub.add_parser(
        "bench-circuits",
        help="score every circuit-discovery method (yours too, through "
        "MECHSYNTH_PLUGINS) against known circuits at every checkpoint: planted, tracr-compiled and "
        "trained models; writes a JSON, a leaderboard, figures and a page",
    )
    bc.add_argument(
        "--out", default="bench-circuits", help="output directory (trained zoo runs are kept there and reused)"
    )
    bc.add_argument(
        "--methods",
        help="comma-separated method names (default: every registered one; exact patching "
        "always runs, as the reference)",
    )
    bc.add_argument("--cases", help="comma-separated zoo cases (default: all at this size)")
    bc.add_argument("--size", default="cpu", help="smoke (seconds), cpu (minutes on 2 cores) or full")
    bc.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="METHOD.OPTION=VALUE",
        help="a method's option, e.g. eap_ig.ig_steps=16",
    )
    bc.add_argument("--list", action="store_true", help="list the registered methods, their cost and options, and stop")
    bc.add_argument("--wandb", choices=MODES, help="also log the leaderboard and page to W&B (default: off)")

    d = sub.add_parser("demo", help="train the default model (markov_icl, 2-layer attention-only) on the CPU")
    d.add_argument("--out", default=None, help="run directory (default: runs/demo-<time>)")
    d.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a config value")
    d.add_argument("--wandb", choices=MODES, help="W&B mode")
    return p


ABBREVIATIONS = ("et al.", "e.g.", "i.e.", "cf.", "vs.", "resp.", "approx.", "Fig.", "Eq.", "Sec.")


def first_sentence(text: str) -> str:
    """The first sentence of `text`'s first paragraph, on one line. A sentence ends at ".", "?" or "!" outside
    brackets, before a capital or an opening bracket, and not after an abbreviation ("et al.", "e.g."): a plain
    split at ". " cut "Automata (Liu et al. 2023, ...)" after "et al."."""
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    depth = 0
    for i, c in enumerate(paragraph):
        depth += (c in "([{") - (c in ")]}")
        head, after = paragraph[: i + 1], paragraph[i + 2 : i + 3]
        if (
            c in ".?!"
            and depth == 0
            and paragraph[i + 1 : i + 2] == " "
            and after
            and (after.isupper() or after in "([")
            and not head.endswith(ABBREVIATIONS)
        ):
            return head
    return paragraph if paragraph.endswith((".", "?", "!")) else paragraph.rstrip(":;, ") + "."


def _first_line(obj: Any) -> str:
    """The first sentence of `obj`'s own docstring where it has one (a probe function), else of the docstring
    of the module that defines it (a task class; a probe file with one probe)."""
    own = obj.__doc__ if callable(obj) and not isinstance(obj, type) else None
    return first_sentence(own or sys.modules[obj.__module__].__doc__ or "")


def _cmd_tasks(args) -> int:
    return _listing(_shipped_or_live("tasks", _task_table), args.json)


def _cmd_probes(args) -> int:
    return _listing(_shipped_or_live("probes", _probe_table), args.json)


def _shipped_or_live(what: str, live: Any) -> dict[str, dict[str, Any]]:
    """The listing of mechsynth's own tasks or probes as shipped with the package (no torch to import: well under a
    second), or the registry's own: with plugins named (MECHSYNTH_PLUGINS), or a task, kind or probe file added since
    the listing was written."""
    import os

    from mechsynth import configs, plugins

    known = configs.schema()
    if os.environ.get(plugins.ENV) or known is None:
        return live()
    return known["listing"][what]


def _task_table() -> dict[str, dict[str, Any]]:
    from mechsynth import tasks

    return {
        name: {
            "doc": _first_line(tasks.TASKS.get(name)),
            "params": describe(tasks.TASKS.get(name).Config),
            "latents": [_latent(latent) for latent in tasks.make(name).latents],  # with the default config
        }
        for name in tasks.names()
    }


def _latent(latent: Any) -> dict[str, Any]:
    kind = f"{latent.kind}, {latent.n_values} values" if latent.n_values else latent.kind
    return {"name": latent.name, "kind": kind, "where": latent.where, "about": latent.about}


def _probe_table() -> dict[str, dict[str, Any]]:
    from mechsynth import probes

    table = {}
    for name in probes.names():
        p = probes.PROBES.get(name)
        table[name] = {
            "doc": _first_line(p.fn),
            "truth": list(p.truth),
            "costly": p.costly,
            "params": describe(p.options) if p.options is not None else [],
        }
    return table


def shipped() -> dict[str, Any]:
    """What mechsynth/configs/schema.json holds: every config section's fields (`runconfig.schema`) and the listings
    `mechsynth tasks` and `probes` print, all of mechsynth's own (write_shipped rewrites it; a test holds it equal)."""
    from mechsynth import configs
    from mechsynth.runs.runconfig import schema

    return schema() | {"listing": {"tasks": _task_table(), "probes": _probe_table()}, "modules": configs.modules()}


def write_shipped() -> Path:
    """Rewrite mechsynth/configs/schema.json from the code: `python -c "from mechsynth.cli import write_shipped;
    write_shipped()"` after changing a config field, a task, a probe or its options."""
    from mechsynth import configs

    path = Path(configs.__file__).parent / configs.SCHEMA
    path.write_text(json.dumps(shipped(), indent=1, ensure_ascii=False) + "\n")  # (in the registries' order)
    return path


def _listing(table: dict[str, dict[str, Any]], as_json: bool) -> int:
    if as_json:
        print(json.dumps(table, indent=2))
        return 0
    for name, info in table.items():
        note = ""
        if "truth" in info:  # a probe: the truth it reads, and whether it runs only when named
            note = (
                f" [{'reads truth ' + ', '.join(info['truth']) if info['truth'] else 'reads no truth'}"
                f"{'; runs only when named' if info['costly'] else ''}]"
            )
        print(f"{name}: {info['doc']}{note}")
        if info.get("latents"):  # a task's latent variables, which the latents and dictionary probes look for
            print(
                "  latent variables (default config): "
                + "; ".join(f"{v['name']} ({v['kind']})" for v in info["latents"])
            )
        for p in info["params"]:
            print(f"  {p['name']:<14} {p['type']:<34} default {p['default']!r:<10} {p['help']}")
        print()
    return 0


def _config(data: dict, overrides: Sequence[str], wandb: Optional[str]) -> dict:
    """A config with its `--set` overrides and W&B mode applied, each key checked against the shipped schema: a
    mistake there is one line before torch is imported (seconds on a busy machine)."""
    from mechsynth import configs

    for o in overrides:
        apply_override(data, o)
    if wandb:
        apply_override(data, f'wandb.mode="{wandb}"')
    configs.quick_check(data)
    return data


def _train(data: dict, out: Optional[str], default_name: str, progress: bool) -> Path:
    """Train the config `data` (overrides applied: `_config`) into `out`."""
    from mechsynth.runs.runconfig import parse_config

    cfg = parse_config(data)
    from mechsynth.runs.runner import train_run  # after the config: it imports TransformerLens (seconds)

    run_dir = Path(out) if out else Path("runs") / f"{default_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    train_run(cfg, run_dir, progress=progress, log=_say)
    print(run_dir)
    return run_dir


def _resume(args) -> int:
    from mechsynth.runs.run import parse_stored
    from mechsynth.runs.runconfig import parse_config
    from mechsynth.runs.runner import train_run

    run_dir = Path(args.resume)
    data = parse_stored(run_dir).to_dict()
    for o in args.set:
        apply_override(data, o)
    if args.wandb:
        data["wandb"]["mode"] = args.wandb
    train_run(parse_config(data), run_dir, resume=True, progress=not args.no_progress, log=_say)
    print(run_dir)
    return 0


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _probe(
    run_dir: Path,
    probe_names: Optional[str],
    steps: Optional[str],
    batch_size: int,
    as_json: bool,
    wandb: Optional[str],
    sets: Sequence[str] = (),
) -> int:
    from dataclasses import replace

    from mechsynth import probes
    from mechsynth.analysis import timeline
    from mechsynth.runs import rundir
    from mechsynth.runs.run import load_run
    from mechsynth.runs.wandb_log import WandbLogger, resolve_mode

    run = load_run(run_dir)
    if not run.steps:
        raise ConfigError("run_dir", f"{run_dir} has no checkpoint yet")
    rundir.check_writable(run.path, "run_dir")  # probes.json goes there: refuse before probing, not after
    names = timeline.applicable(run)
    allowed = timeline.applicable(run, costly=True)
    if probe_names:
        asked = [n.strip() for n in probe_names.split(",") if n.strip()]
        probes.check_known(asked, "--probes")
        for n in asked:
            why = timeline.why_not(run, n)
            if why is not None:
                raise ConfigError("--probes", f"{n!r} does not apply to this run: {why}; allowed: {', '.join(allowed)}")
        names = asked
    options: dict[str, Any] = {}
    for assignment in sets:
        apply_override(options, assignment)
    for n, table in options.items():
        if n not in names:
            raise ConfigError(f"--set {n}", f"probe {n!r} is not being run; allowed: options of {', '.join(names)}")
        probes.options(n, table)  # every bad option named before any work
        why = timeline.why_not(run, n, table)  # (options that name what it reads: a hook the model lacks)
        if why is not None:
            raise ConfigError(f"--set {n}", why)
    chosen = run.steps
    if steps:
        try:
            chosen = [int(s) for s in steps.split(",")]
        except ValueError:
            raise ConfigError("--steps", f"{steps!r} must be comma-separated integers") from None
        missing = [s for s in chosen if s not in run.steps]
        if missing:
            raise ConfigError("--steps", f"no checkpoint at {missing}; allowed: {run.steps}")
    if batch_size < 1:
        raise ConfigError("--batch-size", f"must be ≥ 1, got {batch_size}")
    tl = timeline.probe_run(run, names, chosen, batch_size=batch_size, options=options, progress=True)
    try:  # probing again for some probes keeps the others'
        tl = timeline.merge(timeline.load(run.path), tl)
    except (FileNotFoundError, UserError):
        pass
    timeline.save(tl, run.path)
    cfg = run.config.wandb if wandb is None else replace(run.config.wandb, mode=wandb)
    if resolve_mode(cfg) != "disabled":
        logger = WandbLogger(
            cfg,
            run.path,
            run.recorded_config(),
            run_id=run.state(run.steps[-1]).get("wandb_id"),
            yours=run.origin is not None,
        )
        timeline.log_to_wandb(tl, logger)
        logger.finish()
    if as_json:
        print(json.dumps(timeline.as_json(tl)))
    else:
        print("\n".join(timeline.summary(tl, run.task)))
        print(f"table: {run.path / timeline.CSV}")
    return 0


def _sweep(args) -> int:
    from mechsynth import sweep

    for flag, value, ok, allowed in (
        ("--workers", args.workers, lambda v: v >= 1, "an integer ≥ 1"),
        ("--cpus-per-run", args.cpus_per_run, lambda v: v > 0, "a number > 0"),
        ("--gpus-per-run", args.gpus_per_run, lambda v: v >= 0, "a number ≥ 0"),
    ):
        if value is not None and not ok(value):
            raise ConfigError(flag, f"must be {allowed}, got {value}")
    if args.backend != "ray" and (args.address or args.cpus_per_run is not None or args.gpus_per_run is not None):
        raise ConfigError("--backend", "--address, --cpus-per-run and --gpus-per-run need --backend ray")
    if args.backend == "ray" and args.workers is not None:
        raise ConfigError("--workers", "is for the local backend; Ray schedules runs by --cpus-per-run/--gpus-per-run")
    if args.backend == "ray":
        from mechsynth.sweep import ray_backend

        ray_backend.require()
    # A Ray head node need not have the runs' device (a GPU): their workers check it, each run on its own.
    plan = sweep.load_sweep(args.sweep_file, tuple(args.set), args.wandb, resources=args.backend != "ray")
    sweep_dir = Path(args.out) if args.out else Path("runs") / plan.name
    if args.dry_run:
        print("\n".join(sweep.describe_plan(plan, sweep_dir)))
        return 0
    try:
        outcome = sweep.run_sweep(
            plan,
            sweep_dir,
            backend=args.backend,
            workers=args.workers,
            address=args.address,
            num_cpus=args.cpus_per_run,
            num_gpus=args.gpus_per_run,
        )
    except KeyboardInterrupt:
        print(
            "mechsynth: interrupted; running runs are checkpointed — run the same command again to finish the sweep",
            file=sys.stderr,
        )
        return 130
    print(sweep_dir)
    return 1 if outcome.failures else 0


def _sweep_report(args) -> int:
    from mechsynth.runs import rundir
    from mechsynth.sweep import load_plan
    from mechsynth.sweep import report as sweep_report

    if args.acc is not None and not 0 < args.acc <= 1:
        raise ConfigError("--acc", f"must be in (0, 1], got {args.acc}")
    if args.metric not in sweep_report.METRICS:
        raise ConfigError("--metric", f"{args.metric!r} is not allowed; allowed: {', '.join(sweep_report.METRICS)}")
    sweep_dir = Path(args.sweep_dir)
    sweep_report.check_axes(load_plan(sweep_dir), args.rows, args.cols)
    rundir.check_writable(sweep_dir, "sweep_dir")  # the table and the figure go there
    plan, rows = sweep_report.summarize(sweep_dir, args.acc_key, args.acc)
    formation = sweep_report.add_formation(sweep_dir, plan, rows)
    sweep_report.write_csv(plan, rows, sweep_dir / "sweep_report.csv", formation.probes)
    sweep_report.heatmap(
        plan,
        rows,
        sweep_dir / "sweep_report.png",
        args.metric,
        args.rows,
        args.cols,
        title=sweep_report.title(plan, args.metric, args.acc_key or "eval/acc", sweep_report.criteria(rows)),
    )
    figures = [sweep_dir / f"sweep_formation_{p}.png" for p in formation.probes]
    for probe, path in zip(formation.probes, figures):
        sweep_report.formation_heatmap(plan, rows, path, probe, args.rows, args.cols)
    print(sweep_report.format_table(plan, rows, formation.probes))
    print(f"converged: {sweep_report.criteria(rows)}")
    hint = sweep_report.not_converged_hint(rows)
    if hint:
        print(hint, file=sys.stderr)
    if formation.probes:
        print(
            f"circuits: {', '.join(formation.probes)} — the step each one's earliest head forms, median over the seeds "
            "where it formed (seeds formed / probed)"
        )
    incomplete = sum(r["n_runs"] - r["n_complete"] for r in rows)
    if incomplete:
        print(f"{incomplete} runs are not complete and are left out", file=sys.stderr)
    if formation.unprobed or formation.damaged:
        damaged = f" ({formation.damaged} with a probes.json that cannot be read)" if formation.damaged else ""
        print(
            f"{formation.unprobed + formation.damaged} complete runs are not probed{damaged}, so circuit formation "
            f"leaves them out: mechsynth probe {sweep_dir}",
            file=sys.stderr,
        )
    print(f"table: {sweep_dir / 'sweep_report.csv'}\nfigure: {sweep_dir / 'sweep_report.png'}")
    for path in figures:
        print(f"figure: {path}")
    return 0


def _import(args) -> int:
    from mechsynth import tasks
    from mechsynth.yours import importing

    given: dict[str, Any] = {}
    for o in args.set:
        apply_override(given, o)
    for section in given:
        if section not in ("task", "model"):
            raise ConfigError(f"--set {section}", "unknown section; allowed: task, model")
    if given.get("task") and not args.task:
        raise ConfigError("--set task", "task parameters need --task NAME")
    task = tasks.make(args.task, given.get("task", {})) if args.task else None
    run_dir = importing.import_checkpoints(
        [_zoo_program(c) for c in args.checkpoints], Path(args.out), task, given.get("model"), args.tl_config
    )
    print("\n".join(importing.summary(run_dir)))  # what was inferred and guessed, before the path scripts read
    print(run_dir)
    return 0


def _zoo_program(name: str) -> str:
    """ "tracr:NAME": the zoo's compiled program NAME (mechsynth/benchmark/tracr/NAME.json), installed or not."""
    if not name.startswith("tracr:"):
        return name
    from mechsynth.benchmark import zoo

    if name[6:] not in zoo.tracr_programs():
        raise ConfigError(
            "checkpoints",
            f"no tracr program {name[6:]!r} in the zoo; allowed: "
            f"{', '.join('tracr:' + p for p in zoo.tracr_programs())}",
        )
    return str(zoo.TRACR / f"{name[6:]}.json")


def _bench_circuits(args) -> int:
    from mechsynth import benchmark, circuits
    from mechsynth.config import parse_value

    if args.list:
        for name in circuits.METHODS:
            m = circuits.METHODS.get(name)
            print(f"{name:<20} {m.cost}" + (f"; options: {', '.join(m.fields())}" if m.fields() else ""))
        return 0
    options: dict[str, dict[str, Any]] = {}
    for item in args.set:
        key, eq, value = item.partition("=")
        method, dot, option = key.partition(".")
        if not eq or not dot or not option:
            raise ConfigError("--set", f"{item!r}: expected METHOD.OPTION=VALUE, e.g. eap_ig.ig_steps=16")
        options.setdefault(method, {})[option] = parse_value(value, key)
    split = lambda text: [x.strip() for x in text.split(",") if x.strip()] if text else None  # noqa: E731
    results = benchmark.run(Path(args.out), split(args.methods), args.size, options, split(args.cases), log=_say)
    if args.wandb and args.wandb != "disabled":
        from mechsynth.benchmark import output
        from mechsynth.runs.wandb_log import WandbConfig, WandbLogger

        logger = WandbLogger(
            WandbConfig(mode=args.wandb, name="bench-circuits"),
            Path(args.out),
            {"methods": results["methods"], "size": args.size, "options": options},
        )
        output.log_to_wandb(logger, results["leaderboard"], (Path(args.out) / "bench_circuits.html").read_text())
        logger.finish()
    print((Path(args.out) / "leaderboard.md").read_text(), end="")
    print(f"written: {Path(args.out) / benchmark.RESULTS}, leaderboard.md, bench_circuits.html")
    return 0


def _report(run_dir: Path, batch_size: int, wandb: Optional[str]) -> int:
    from dataclasses import replace

    from mechsynth.analysis import report
    from mechsynth.analysis.timeline import log_to_wandb
    from mechsynth.runs.run import load_run
    from mechsynth.runs.wandb_log import WandbLogger, resolve_mode

    if batch_size < 1:
        raise ConfigError("--batch-size", f"must be ≥ 1, got {batch_size}")
    run = load_run(run_dir)
    if not run.steps:
        raise ConfigError("run_dir", f"{run_dir} has no checkpoint yet")
    rep = report.write(run.path, batch_size=batch_size)
    cfg = run.config.wandb if wandb is None else replace(run.config.wandb, mode=wandb)
    if resolve_mode(cfg) != "disabled":  # into the training run's W&B run
        logger = WandbLogger(
            cfg,
            run.path,
            run.recorded_config(),
            run_id=run.state(run.steps[-1]).get("wandb_id"),
            yours=run.origin is not None,
        )
        if rep.probed:
            log_to_wandb(rep.timeline, logger)
        report.log_to_wandb(rep, logger)
        logger.finish()
    print(rep.path)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    # A warning here is for the user (an LLC chain that diverged): one line, not the source line it came from.
    warnings.formatwarning = lambda message, category, *rest, **kw: f"warning: {message}\n"
    try:
        data = None
        if args.command == "train" and args.config and not args.resume:
            data = _config(read_toml(args.config), args.set, args.wandb)
        elif args.command == "demo":
            from mechsynth import configs

            data = _config(configs.load("demo"), args.set, args.wandb)
        if args.command in COMPUTES:
            from mechsynth.training import threads

            threads.use()  # the CPUs free now, not the core count (a run's train.threads and --resume set their own)
        if args.command == "tasks":
            return _cmd_tasks(args)
        if args.command == "probes":
            return _cmd_probes(args)
        if args.command == "train":
            if args.resume:
                if args.config:
                    raise ConfigError("config", "give either CONFIG or --resume DIR, not both")
                return _resume(args)
            if not args.config:
                raise ConfigError("config", "missing; give a TOML file or --resume DIR")
            _train(data, args.out, Path(args.config).stem, not args.no_progress)
            return 0
        if args.command == "probe":
            from mechsynth.sweep import probe as sweep_probe

            many = sweep_probe.runs_within(Path(args.run_dir))
            if many is not None:  # a sweep, or seeds side by side: each run, in parallel
                return sweep_probe.probe_many(
                    Path(args.run_dir),
                    many,
                    args.probes,
                    args.steps,
                    args.batch_size,
                    args.set,
                    wandb=args.wandb,
                    backend=args.backend,
                    workers=args.workers,
                    address=args.address,
                    num_cpus=args.cpus_per_run,
                    as_json=args.json,
                )
            sweep_probe.check_single_run(args.backend, args.workers, args.address, args.cpus_per_run)
            return _probe(Path(args.run_dir), args.probes, args.steps, args.batch_size, args.json, args.wandb, args.set)
        if args.command == "sweep":
            return _sweep(args)
        if args.command == "sweep-report":
            return _sweep_report(args)
        if args.command == "demo":
            run_dir = _train(data, args.out, "demo", True)
            if (run_dir / "seed_0").is_dir():  # train.seeds > 1: probe the first seed
                print(f"probing seed_0; the others: mechsynth probe {run_dir}/seed_<i>", file=sys.stderr)
                run_dir = run_dir / "seed_0"
            print(f"probing {len(list((run_dir / 'checkpoints').iterdir()))} checkpoints ...", file=sys.stderr)
            _probe(run_dir, None, None, 64, False, args.wandb)
            print("writing the report ...", file=sys.stderr)
            return _report(run_dir, 64, args.wandb)
        if args.command == "import":
            return _import(args)
        if args.command == "bench-circuits":
            return _bench_circuits(args)
        if args.command == "report":
            return _report(Path(args.run_dir), args.batch_size, args.wandb)
    except UserError as e:
        print(f"mechsynth: error: {e}", file=sys.stderr)
        return 2
    except DivergedError as e:
        print(f"mechsynth: {e}", file=sys.stderr)
        return DIVERGED
    except KeyboardInterrupt:
        print(
            "mechsynth: interrupted; the last step is checkpointed — continue with `mechsynth train --resume DIR`",
            file=sys.stderr,
        )
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
