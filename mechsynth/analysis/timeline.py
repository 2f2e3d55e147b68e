"""Probe every checkpoint of a run and find when each circuit forms, next to the loss curve; and the
one writer and reader of a run's probe timeline (probes.json, the tidy probes.csv and W&B's table)."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn as nn

from mechsynth import hooks, models, probes
from mechsynth.analysis import stages
from mechsynth.config import to_dict
from mechsynth.errors import CorruptFileError, UserError, one_line
from mechsynth.probes import Timeline, formation_step, variant_key  # (importable from here too, as before)
from mechsynth.runs import io
from mechsynth.runs.run import Run
from mechsynth.training.fixed_set import FixedTrainingSet
from mechsynth.util.progress import Progress

JSON, CSV = "probes.json", "probes.csv"  # in the run directory
COLUMNS = ["step", "probe", "layer", "head", "metric", "value"]


def steepest_drop(steps: Sequence[int], loss: Sequence[Optional[float]], window: float = 1.5) -> Optional[int]:
    """The step ending the largest loss decrease per unit of log(step), each decrease measured over at
    least a `window`-fold span of steps: log scale because checkpoints are log-spaced early and the
    first steps always fall fast; the span keeps noise between close checkpoints from winning."""
    pairs = [(s, l) for s, l in zip(steps, loss) if s > 0 and l is not None]
    best, best_rate = None, 0.0
    for s1, l1 in pairs:
        earlier = [(s, l) for s, l in pairs if s * window <= s1]
        if earlier:
            s0, l0 = earlier[-1]
            rate = (l0 - l1) / math.log(s1 / s0)
            if rate > best_rate:
                best, best_rate = s1, rate
    return best


def loss_transition(steps: Sequence[int], loss: Sequence[Optional[float]]) -> tuple[Optional[int], Optional[int]]:
    """(where the loss leaves its plateau: `stages.plateau_exit`, a loss change point; where it falls fastest
    from there), or (None, the steepest drop anywhere) when it has no plateau to leave. Fastest from the exit on,
    not anywhere: the first steps from the initialisation often fall fastest per log-step and would hide the
    transition (the demo's "step 2" against its change points near 100-300)."""
    exit = stages.plateau_exit(steps, loss)
    if exit is None:
        return None, steepest_drop(steps, loss)
    after = [i for i, s in enumerate(steps) if s >= exit]
    # the window's earlier end may reach back into the plateau: the drop starting at the exit counts
    since = sorted(set([i for i, s in enumerate(steps) if s * 1.5 >= exit][:1] + after))
    fastest = steepest_drop([steps[i] for i in since], [loss[i] for i in since])
    return exit, fastest if fastest is not None and fastest >= exit else None


def applicable(run: Run, costly: bool = False) -> list[str]:
    """Probes that make sense for this run: its task, and the hooks its model has (no attention probes on an
    MLP); the costly probes (llc, sharpness, circuit) only with `costly`, as they run only when named."""
    if not run.steps:
        return []
    return [
        name for name in probes.names() if (costly or not probes.PROBES.get(name).costly) and why_not(run, name) is None
    ]


def why_not(run: Run, name: str, options: Optional[dict[str, Any]] = None) -> Optional[str]:
    """Why probe `name` does not apply to this run (None: it does), read off its first checkpoint's model (the
    hooked TransformerLens model for the probes that patch it); `options`: the probe's, where they name hooks."""
    return why_not_model(run.trainable(run.steps[0]), run.task, name, options)


def why_not_model(model: nn.Module, task: Any, name: str, options: Optional[dict[str, Any]] = None) -> Optional[str]:
    """Why probe `name` does not apply to `model` (a run's trainable model: what a checkpoint rebuilds) on `task`."""
    return probes.why_not(name, _seen(model, probes.PROBES.get(name).hooked), task, options)


def _seen(model: nn.Module, hooked: bool) -> nn.Module:
    """What a probe reads of a trained module: the hooked TransformerLens model for the probes that patch it, else
    the module its kind gives probes (models.probed)."""
    return models.hooked(model) if hooked else models.probed(model)


def chunk_size(model: nn.Module, batch_size: int, device: torch.device) -> int:
    """Checkpoints per batched forward. On a CPU, few: the attention patterns of a chunk should stay
    near the caches (4 x 64 sequences of 64 tokens measured fastest for the demo model; 32 took twice
    as long). On a GPU, many: one launch does the work of many."""
    budget = 2**30 if device.type == "cuda" else 2**22
    n_heads, n_ctx = getattr(model.cfg, "n_heads", 1), model.n_ctx
    return max(1, min(64, budget // (4 * batch_size * n_heads * n_ctx * n_ctx)))


def probe_run(
    run: Run,
    names: Optional[Sequence[str]] = None,
    steps: Optional[Sequence[int]] = None,
    batch_size: int = 64,
    seed: int = 0,
    device: str | torch.device = "cpu",
    options: Optional[dict[str, dict[str, Any]]] = None,
    progress: bool = False,
) -> Timeline:
    """Probe checkpoints `steps` (default: all). Checkpoints are loaded side by side into one model with
    a leading checkpoint axis (`n_models`), so each chunk of checkpoints costs one forward per input.
    Costly probes (llc, sharpness, circuit) run on one checkpoint at a time, on the log-spaced subset their
    options pick, and are NaN at the others. `options`: {probe: overrides of its options} (the attention
    probes' thresholds, previous_token's offset, ...), recorded as run in `Timeline.options`; `progress`: a
    line (or bar) per checkpoint they visit, as those take seconds each."""
    names = list(names) if names is not None else applicable(run)
    steps = list(steps) if steps is not None else run.steps
    opts = {n: probes.options(n, (options or {}).get(n)) for n in names}  # every bad option before any work
    loss = [run.meta(s)["metrics"].get(f"{run.task.main_eval}/loss") for s in steps]
    tl = Timeline(
        steps,
        loss,
        {n: {} for n in names},
        {n: {} for n in names},
        options={n: to_dict(o) for n, o in opts.items() if o is not None},
    )
    costly = [n for n in names if probes.PROBES.get(n).costly]
    batched = [n for n in names if n not in costly]
    if batched:
        _probe_batched(run, tl, batched, batch_size, seed, device, opts)
    if costly:
        _probe_costly(run, tl, costly, batch_size, seed, device, opts, progress)
    for name in names:
        threshold, _ = formation_threshold(tl, name)
        tl.formation[name] = {h: formation_step(steps, series, threshold) for h, series in tl.per_head[name].items()}
    tl.loss_drop_step = loss_transition(steps, loss)[1]
    tl.run_dir = run.path
    return tl


def _probe_batched(
    run: Run,
    tl: Timeline,
    names: list[str],
    batch_size: int,
    seed: int,
    device: str | torch.device,
    opts: dict[str, Any],
) -> None:
    steps = tl.steps
    init = models.probed(run.trainable(run.steps[0], device))  # step 0: what hidden-progress probes compare with
    # Chunks are sized by the largest input the probes read (modular arithmetic's "all": every pair).
    largest = max(
        [batch_size]
        + [
            len(probes.draw(probes.resolve(i, run.task), init, run.task, batch_size, seed).tokens)
            for name in names
            for i in probes.PROBES.get(name).reads
        ]
    )
    size = min(len(steps), chunk_size(init, largest, torch.device(device)))
    stacked = models.build(run.config.model, run.task.spec, n_models=size).to(device)
    params = dict(stacked.named_parameters())
    for start in range(0, len(steps), size):
        chunk = steps[start : start + size]
        weights = [run.weights(s) for s in chunk]
        weights += [weights[-1]] * (size - len(chunk))  # pad the last chunk; its extra results are dropped
        stacked.load_state_dict(
            {k: torch.stack([w[k] for w in weights]) if k in params else weights[0][k] for k in weights[0]}
        )  # buffers (e.g. the MLP's token values) are shared
        for results in probes.run_many(
            names,
            models.probed(stacked),
            run.task,
            batch_size=batch_size,
            seed=seed,
            init=init,
            options={n: opts[n] for n in names},
        )[: len(chunk)]:
            _record(tl, results)


def _record(tl: Timeline, results: dict[str, probes.ProbeResult]) -> None:
    for name, result in results.items():
        if result.per_head is not None:
            for layer in range(result.per_head.shape[0]):
                for head in range(result.per_head.shape[1]):
                    tl.per_head[name].setdefault(hooks.head_label(layer, head), []).append(
                        float(result.per_head[layer, head])
                    )
        for key, value in result.metrics.items():
            tl.metrics[name].setdefault(key, []).append(value)


def _probe_costly(
    run: Run,
    tl: Timeline,
    names: list[str],
    batch_size: int,
    seed: int,
    device: str | torch.device,
    opts: dict[str, Any],
    progress: bool,
) -> None:
    """Each costly probe on its own log-spaced checkpoints (`checkpoints` in its options, `opts`: each probe's
    options), one model at a time (the hooked model for `hooked` probes), with the run's fixed training set where
    it had one; the last checkpoint first, so that probes comparing with it (the circuit's final circuit) have it
    as `View.last`."""
    visit = {n: set(probes.log_spaced(tl.steps, opts[n].checkpoints)) for n in names}
    train = run.config.train
    train_set = FixedTrainingSet(run.task, train.n_train, train.set_seed).set if train.data == "fixed" else None
    measured: dict[str, dict[int, dict[str, float]]] = {n: {} for n in names}
    todo = [s for s in tl.steps if any(s in visit[n] for n in names)]
    todo = todo[-1:] + todo[:-1]
    last: dict[str, probes.ProbeResult] = {}
    tl_model: Optional[nn.Module] = None  # one hooked model for every checkpoint, its weights reloaded (Run.models())
    bar = Progress(len(todo), 0, progress)
    for i, step in enumerate(todo, 1):
        here = [n for n in names if step in visit[n]]
        trained = run.trainable(step, device)
        for hooked in (False, True):
            group = [n for n in here if probes.PROBES.get(n).hooked == hooked]
            if not group:
                continue
            if hooked:
                tl_model = models.hooked(trained) if tl_model is None else models.reload(tl_model, trained)
            results = probes.run_many(
                group,
                tl_model if hooked else _seen(trained, False),
                run.task,
                batch_size=batch_size,
                seed=seed,
                options={n: opts[n] for n in group},
                train_set=train_set,
                train=train,
                last=last,
            )[0]
            for n, result in results.items():
                measured[n][step] = result.metrics
                last.setdefault(n, result)
        bar.update(1)
        bar.show(i, checkpoint=f"{step} ({', '.join(here)})")
    bar.close()
    for n in names:
        keys = list(dict.fromkeys(k for m in measured[n].values() for k in m))
        tl.metrics[n] = {k: [measured[n].get(s, {}).get(k, math.nan) for s in tl.steps] for k in keys}


def merge(old: Timeline, new: Timeline) -> Timeline:
    """`new` with the probes only `old` has, where both cover the same checkpoints: probing a run again for
    some probes (`--probes llc,sharpness`) keeps the others' timelines. A probe in both that ran with other options
    before (the circuit probe with another method) keeps its old result among `variants`, beside the new one."""
    if old.steps != new.steps:
        return new
    kept = [p for p in old.per_head if p not in new.per_head]
    variants = {p: old.variants[p] for p in kept if p in old.variants}
    for p in new.metrics:
        latest = variant_key(p, new.options.get(p, {}))  # the main entry, so no variant of its own
        others = {k: v for k, v in (old.results(p) | new.variants.get(p, {})).items() if k != latest}
        if others:
            variants[p] = others
    return Timeline(
        new.steps,
        new.loss,
        {p: old.per_head[p] for p in kept} | new.per_head,
        {p: old.metrics[p] for p in kept} | new.metrics,
        {p: old.formation[p] for p in kept} | new.formation,
        new.loss_drop_step,
        {p: old.options[p] for p in kept if p in old.options} | new.options,
        new.run_dir,
        variants,
    )


def formation_threshold(tl: Timeline, name: str) -> tuple[float, Optional[float]]:
    """(the score a head of probe `name` had to reach and hold to form, the chance level where chance raised it
    above the threshold of the options it ran with, else None): `probes.formation_threshold` on the options in
    `tl.options` and the metric `chance`, the score of a uniform head on the inputs the probe read (the same at
    every checkpoint; the highest is taken)."""
    if name not in probes.PROBES:
        return math.nan, None
    chance = [v for v in tl.metrics.get(name, {}).get("chance", []) if math.isfinite(v)]
    c = max(chance) if chance else None
    table = tl.options.get(name)
    try:
        base, threshold = probes.formation_threshold(name, table), probes.formation_threshold(name, table, c)
    except UserError:  # options stored by another version of the probe: its threshold as registered now
        base = threshold = probes.PROBES.get(name).threshold
    return threshold, (c if threshold > base else None)


def threshold_text(tl: Timeline, name: str) -> str:
    """ "score ≥ 0.4", or "score ≥ 0.76; chance 0.52" where chance raised the threshold (`formation_threshold`)."""
    threshold, chance = formation_threshold(tl, name)
    return f"score ≥ {threshold:.3g}" + (f"; chance {chance:.2g}" if chance is not None else "")


def shown_probes(tl: Timeline) -> list[probes.Probe]:
    """The registered probes in the timeline, in its order (a probes.json may name a probe since removed)."""
    return [probes.PROBES.get(name) for name in tl.metrics if name in probes.PROBES]


def drop_line(tl: Timeline) -> str:
    """The loss's headline: where it falls fastest after leaving its plateau (the exit: a loss change point), else
    where it falls fastest and that it has no plateau; or why there is no such step (never "step None"). The
    change points follow, so the headline can be checked against them."""
    exit, fastest = loss_transition(tl.steps, tl.loss)
    found = stages.change_points(tl.steps, tl.loss)
    points = f"loss change points: {', '.join(map(str, found))}" if found else "no loss change point"
    if exit is not None and fastest is not None:
        return f"loss falls fastest at step {fastest}, after leaving its plateau at step {exit} ({points})"
    if exit is not None:
        return f"loss leaves its plateau at step {exit} ({points})"
    if tl.loss_drop_step is not None:
        return f"loss falls fastest at step {tl.loss_drop_step}, with no plateau to leave ({points})"
    if not any(loss is not None and math.isfinite(loss) for loss in tl.loss):
        return "loss not measured at the probed checkpoints: no loss drop to show"
    return "loss never falls over the probed checkpoints (no drop across a 1.5-fold span of steps)"


def summary(tl: Timeline, task: Any = None) -> list[str]:
    """Human-readable lines: when each circuit formed, beside the loss drop, then each probe's own lines."""
    lines = [drop_line(tl)]
    thresholds = {p.name: threshold_text(tl, p.name) for p in shown_probes(tl)}
    for probe, head, step in tl.formed():
        lines.append(f"{probe:<16} {head} formed at step {step} ({thresholds.get(probe, 'score ≥ ?')})")
    own = [line for p in shown_probes(tl) if p.summary is not None for line in p.summary(tl, task)]
    # "No circuit" speaks of heads: say it where heads were scored, or where nothing else was said.
    if not tl.formed() and (any(tl.per_head.values()) or not own):
        own.append("no circuit stayed above its threshold")
    return lines + own + stages.summary(stages.detect(tl))


def rows(tl: Timeline) -> list[list[Any]]:
    """The tidy table, one row per (step, probe, layer, head, metric, value): per-head scores (metric
    "score"), then every other metric with layer and head None. probes.csv and W&B's table both hold it."""
    out: list[list[Any]] = []
    for name, heads in tl.per_head.items():
        for head, series in heads.items():
            layer, h = hooks.parse_head(head)
            out += [[s, name, layer, h, "score", float(v)] for s, v in zip(tl.steps, series)]
    for name, metrics in tl.metrics.items():
        for metric, series in metrics.items():
            out += [[s, name, None, None, metric, float(v)] for s, v in zip(tl.steps, series)]
    for name, kept in tl.variants.items():  # earlier results with other options: probe "circuit[eap]"
        for key, entry in kept.items():
            for metric, series in entry["metrics"].items():
                out += [[s, f"{name}[{key}]", None, None, metric, float(v)] for s, v in zip(tl.steps, series)]
    return out


def save(tl: Timeline, run_dir: Path | str) -> None:
    """Write RUN_DIR/probes.csv (None as an empty cell) and probes.json, each atomically; probes.json last,
    since its presence means "probed"."""

    def fill(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(COLUMNS)
            w.writerows(rows(tl))

    io.atomic_write(Path(run_dir) / CSV, fill)
    io.write_json(Path(run_dir) / JSON, as_json(tl))


def as_json(tl: Timeline) -> dict[str, Any]:
    """The timeline, and the stage boundaries found in it (`stages.detect`; recomputed on reading)."""
    return tl.to_json() | {"plateau_exit": stages.plateau_exit(tl.steps, tl.loss), "stages": stages.detect(tl)}


def load(run_dir: Path | str) -> Timeline:
    """The timeline in RUN_DIR/probes.json (FileNotFoundError when there is none; CorruptFileError naming
    the file when it is damaged or not a timeline)."""
    path = Path(run_dir) / JSON
    data = io.read_json(path)
    try:
        tl = Timeline.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CorruptFileError(path, f"not a probe timeline ({one_line(e)}); delete it to probe again") from None
    tl.run_dir = Path(run_dir)
    return tl


def log_to_wandb(tl: Timeline, logger) -> None:
    """Every series against the probed step (`probe/<probe>/<head or metric>`), formation steps in the summary.
    `logger`: a WandbLogger, or a W&B run of your own (`wandb.init(...)`), which stays open."""
    from mechsynth.runs.wandb_log import WandbLogger

    if not isinstance(logger, WandbLogger):
        logger = WandbLogger.attach(logger)
    history = []
    for i, step in enumerate(tl.steps):
        row: dict[str, Any] = {"probe_step": step}
        for name, heads in tl.per_head.items():
            row |= {f"probe/{name}/{h}": series[i] for h, series in heads.items()}
        for name, metrics in tl.metrics.items():
            row |= {f"probe/{name}/{m}": series[i] for m, series in metrics.items()}
        history.append(row)
    logger.log_against("probe_step", history)
    logger.summary(
        {f"formation/{p}/{h}": s for p, heads in tl.formation.items() for h, s in heads.items()}
        | {"formation/loss_drop_step": tl.loss_drop_step}
        | {f"stages/{name}": found for name, found in stages.detect(tl).items()}
    )


def log_plots_to_wandb(tl: Timeline, logger) -> None:
    """The tidy table, a line plot of every head's score per probe, and each probe's own plots."""
    logger.table("probes/table", COLUMNS, rows(tl))
    for p, heads in tl.per_head.items():
        logger.line_series(f"plots/{p}", tl.steps, heads, f"{p}: score per head", "step")
    for probe in shown_probes(tl):
        if probe.wandb is not None:
            probe.wandb(tl, logger)
