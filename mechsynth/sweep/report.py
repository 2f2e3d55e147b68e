"""Outcomes of a sweep over its grid: how many seeds converge, when, and how accurate they end.

A run *converges* when its final value of its task's criterion (`Task.convergence`: eval/acc ≥ 0.99 unless
the task declares another, as markov_icl's KL to the Bayes predictor) is reached, or, where `acc_key` or
`threshold` is given, its final accuracy `acc_key` (default eval/acc) is at least `threshold` (default 0.99); its
convergence step is the first evaluation step at which the criterion held. Statistics cover complete runs only; `n_complete` says how many of `n_runs` that is.

When circuits form (`add_formation`, from each run's probes.json written by `mechsynth probe SWEEP_DIR`):
per probe that scores heads against a threshold, the step its earliest-forming head formed in each seed,
as the median over the seeds where it formed, with how many did ("not reached" where none of the probed
seeds did; empty where none was probed).
"""

from __future__ import annotations

import csv
import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from mechsynth.errors import ConfigError
from mechsynth.runs import io, rundir
from mechsynth.sweep.plan import Plan
from mechsynth.tasks.base import Convergence

METRICS = {  # heatmap quantity -> (column, how a cell is written, colour range)
    "final_acc": ("final_acc_mean", lambda v: f"{100 * v:.1f}", (0.0, 1.0)),
    "frac_converged": ("frac_converged", lambda v: f"{v:.2f}", (0.0, 1.0)),
    "conv_step": ("conv_step_median", lambda v: f"{v:.0f}", None),
}
COLUMNS = (
    "n_runs",
    "n_complete",
    "frac_converged",
    "conv_step_median",
    "conv_step_q25",
    "conv_step_q75",
    "conv_step_min",
    "conv_step_max",
    "final_acc_mean",
    "final_acc_std",
)


@dataclass(frozen=True)
class RunOutcome:
    final_acc: float
    converged: bool
    conv_step: Optional[int]


@dataclass(frozen=True)
class Criterion:
    """What "converged" means for one run: `rule` over the metric `key` (e.g. eval/kl_bayes)."""

    key: str
    rule: Convergence

    def text(self) -> str:
        return f"{self.key} {'≤' if self.rule.below else '≥'} {self.rule.threshold:g}"


def criterion(task_config: dict[str, Any], acc_key: Optional[str], threshold: Optional[float]) -> Criterion:
    """The flags' accuracy criterion where either is given, else the task's own (`Task.convergence`)."""
    from mechsynth import tasks

    if acc_key is not None or threshold is not None:
        return Criterion(acc_key or "eval/acc", Convergence("acc", 0.99 if threshold is None else threshold))
    cls = tasks.TASKS.get(task_config["name"])
    return Criterion(f"{cls.main_eval}/{cls.convergence.metric}", cls.convergence)


def outcomes(run_dir: Path, acc_key: str, rule: Criterion) -> list[RunOutcome]:
    """A complete run's outcome, one per model it trained (seeds side by side: one per seed); none for a
    run that is not complete."""
    if not rundir.is_complete(run_dir):
        return []
    return [_outcome(d, acc_key, rule) for d in rundir.members(run_dir, rundir.n_seeds(rundir.read_config(run_dir)))]


def _series(metrics: list[dict[str, Any]], key: str, run_dir: Path, field: str) -> list[dict[str, Any]]:
    records = [r for r in metrics if isinstance(r.get(key), (int, float))]
    if not records:
        raise ConfigError(
            field,
            f"{key!r} is not in {run_dir}/metrics.jsonl; "
            f"allowed: {', '.join(sorted(k for k in metrics[-1] if k.endswith('acc')))}",
        )
    return records


def _outcome(run_dir: Path, acc_key: str, rule: Criterion) -> RunOutcome:
    metrics = rundir.read_metrics(run_dir)
    final = _series(metrics, acc_key, run_dir, "--acc-key")[-1][acc_key]
    records = _series(metrics, rule.key, run_dir, "--acc-key")
    converged = rule.rule.reached(records[-1][rule.key])
    reached = next((r["step"] for r in records if rule.rule.reached(r[rule.key])), None)
    return RunOutcome(final, converged, reached if converged else None)


def _quantile(xs: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(
    sweep_dir: Path | str, acc_key: Optional[str] = None, threshold: Optional[float] = None
) -> tuple[Plan, list[dict[str, Any]]]:
    """One row per grid point: its axis labels, then COLUMNS (NaN where there is nothing to count), and
    "criterion", what converged means there (see the module docstring)."""
    from mechsynth.sweep import load_plan

    sweep_dir = Path(sweep_dir)
    plan = load_plan(sweep_dir)
    rows: dict[str, dict[str, Any]] = {}
    done: dict[str, list[RunOutcome]] = {}
    for job in plan.jobs:
        rule = criterion(job.config["task"], acc_key, threshold)
        rows.setdefault(job.point, {"point": job.point, **job.labels, "n_runs": 0, "criterion": rule.text()})
        seeds = job.config["train"].get("seeds", 1)
        rows[job.point]["n_runs"] += seeds
        done.setdefault(job.point, []).extend(outcomes(sweep_dir / job.dir, acc_key or "eval/acc", rule))
    nan = float("nan")
    for point, row in rows.items():
        got = done[point]
        steps = [o.conv_step for o in got if o.converged]
        accs = [o.final_acc for o in got]
        row.update(
            {
                "n_complete": len(got),
                "frac_converged": len(steps) / len(got) if got else nan,
                "conv_step_median": statistics.median(steps) if steps else nan,
                "conv_step_q25": _quantile(steps, 0.25) if steps else nan,
                "conv_step_q75": _quantile(steps, 0.75) if steps else nan,
                "conv_step_min": min(steps) if steps else nan,
                "conv_step_max": max(steps) if steps else nan,
                "final_acc_mean": statistics.fmean(accs) if accs else nan,
                "final_acc_std": statistics.stdev(accs) if len(accs) > 1 else (0.0 if accs else nan),
            }
        )
    return plan, list(rows.values())


@dataclass(frozen=True)
class Formation:
    """What `add_formation` found: the probes tabulated, and the complete runs (seeds) it could not use."""

    probes: tuple[str, ...]
    unprobed: int  # no probes.json yet
    damaged: int  # a probes.json that cannot be read


def formation_columns(probe: str) -> tuple[str, str, str]:
    """The CSV columns of `probe`: the median formation step (inf: not reached), seeds formed, seeds probed."""
    return f"formation_{probe}", f"formation_{probe}_formed", f"formation_{probe}_probed"


def _earliest(formation: dict[str, Optional[int]]) -> Optional[int]:
    steps = [s for s in formation.values() if s is not None]
    return min(steps) if steps else None


def add_formation(sweep_dir: Path | str, plan: Plan, rows: list[dict[str, Any]]) -> Formation:
    """Add each probe's formation columns to `rows` (from `summarize`), from the probes.json of every complete
    run: per grid point, the median over seeds of the step its earliest head formed (inf where it formed in
    none of the probed seeds, NaN where none was probed), and the seeds where it formed and that were probed.
    Probes without a formation threshold (metrics only: llc, icl_strategy, ...) are left out."""
    from mechsynth.analysis import timeline
    from mechsynth.errors import UserError
    from mechsynth.sweep.probe import forms

    sweep_dir = Path(sweep_dir)
    found: dict[str, dict[str, list[Optional[int]]]] = {}  # point -> probe -> earliest step of each probed seed
    names: dict[str, None] = {}
    unprobed = damaged = 0
    for job in plan.jobs:
        run_dir = sweep_dir / job.dir
        if not rundir.is_complete(run_dir):
            continue
        for member in rundir.members(run_dir, rundir.n_seeds(rundir.read_config(run_dir))):
            try:
                tl = timeline.load(member)
            except FileNotFoundError:
                unprobed += 1
                continue
            except UserError:
                damaged += 1
                continue
            for name, heads in tl.formation.items():
                if forms(name, heads):
                    names.setdefault(name)
                    found.setdefault(job.point, {}).setdefault(name, []).append(_earliest(heads))
    for row in rows:
        for name in names:
            seen = found.get(row["point"], {}).get(name, [])
            formed = [s for s in seen if s is not None]
            median, n_formed, n_probed = formation_columns(name)
            row[median] = float(statistics.median(formed)) if formed else (math.inf if seen else math.nan)
            row[n_formed], row[n_probed] = len(formed), len(seen)
    return Formation(tuple(names), unprobed, damaged)


def _cell(v: Any) -> Any:
    """A CSV cell: NaN (nothing to count) empty, inf (a formation never reached) "not reached"."""
    if isinstance(v, float) and math.isnan(v):
        return ""
    return "not reached" if v == math.inf else v


def write_csv(plan: Plan, rows: list[dict[str, Any]], path: Path, probes: Sequence[str] = ()) -> None:
    """One line per grid point; `probes`: the formation columns of each (`add_formation`)."""
    header = ["point", *(a.key for a in plan.axes), *COLUMNS, *(c for p in probes for c in formation_columns(p))]

    def fill(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=header)
            w.writeheader()
            for r in rows:
                w.writerow({k: _cell(r[k]) for k in header})

    io.atomic_write(path, fill)


def formation_text(row: dict[str, Any], probe: str) -> str:
    """ "40 (2/2 seeds)", "not reached (0/2 seeds)", or "-" where no seed was probed."""
    median, n_formed, n_probed = formation_columns(probe)
    if not row.get(n_probed):
        return "-"
    step = "not reached" if row[median] == math.inf else f"{row[median]:.0f}"
    return f"{step} ({row[n_formed]}/{row[n_probed]} seeds)"


def format_table(plan: Plan, rows: list[dict[str, Any]], probes: Sequence[str] = ()) -> str:
    """The table for a terminal: one line per grid point; then, per probe in `probes`, when it formed."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "-" if math.isnan(v) else (f"{v:.0f}" if v == int(v) and abs(v) >= 10 else f"{v:.3f}")
        return str(v)

    header = (
        [a.key for a in plan.axes]
        + ["runs", "converged", "conv_step median [q25, q75]", "final acc"]
        + [f"{p} forms" for p in probes]
    )
    lines = []
    for r in rows:
        # "-": no complete run to count; "not reached": complete runs, none of them converged
        steps = (
            ("not reached" if r["n_complete"] else "-")
            if math.isnan(r["conv_step_median"])
            else f"{r['conv_step_median']:.0f} [{r['conv_step_q25']:.0f}, {r['conv_step_q75']:.0f}]"
        )
        acc = "-" if math.isnan(r["final_acc_mean"]) else f"{r['final_acc_mean']:.3f} ± {r['final_acc_std']:.3f}"
        lines.append(
            [str(r[a.key]) for a in plan.axes]
            + [f"{r['n_complete']}/{r['n_runs']}", fmt(r["frac_converged"]), steps, acc]
            + [formation_text(r, p) for p in probes]
        )
    widths = [max(len(x) for x in col) for col in zip(header, *lines)]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip() for line in [header, *lines])


def _axis(plan: Plan, name: Optional[str], field: str) -> Optional[int]:
    """An axis by its key or the key's last part (`n_layers` for `model.n_layers`)."""
    if name is None:
        return None
    keys = [a.key for a in plan.axes]
    matches = [i for i, k in enumerate(keys) if k == name] or [
        i for i, k in enumerate(keys) if k.split(".")[-1] == name
    ]
    if len(matches) != 1:
        raise ConfigError(field, f"{name!r} is not an axis of this sweep; allowed: {', '.join(keys) or '(no grid)'}")
    return matches[0]


def criteria(rows: list[dict[str, Any]]) -> str:
    """What converged means over the grid: one criterion, or each point's, joined."""
    return " or ".join(dict.fromkeys(r["criterion"] for r in rows))


def title(plan: Plan, metric: str, acc_key: str, rule: str) -> str:
    what = {
        "final_acc": f"final {acc_key}, % (mean over seeds)",
        "frac_converged": f"fraction of seeds with final {rule}",
        "conv_step": f"median first step with {rule}",
    }[metric]
    return f"{plan.name}\n{what}"


def not_converged_hint(rows: list[dict[str, Any]]) -> Optional[str]:
    """A line for when complete runs exist and none converged: what converged meant, and the flags that change it."""
    if any(r["n_complete"] for r in rows) and not any(r["frac_converged"] > 0 for r in rows if r["n_complete"]):
        return (
            f"no run converged ({criteria(rows)}); set the criterion with --acc-key KEY and --acc THRESHOLD "
            "(the heatmap's quantity: --metric)"
        )
    return None


def check_axes(plan: Plan, rows_axis: Optional[str], cols_axis: Optional[str]) -> None:
    r_i, c_i = _axis(plan, rows_axis, "--rows"), _axis(plan, cols_axis, "--cols")
    if r_i is not None and r_i == c_i:
        raise ConfigError("--cols", "rows and columns must be different axes")


def heatmap(
    plan: Plan,
    rows: list[dict[str, Any]],
    path: Path,
    metric: str = "final_acc",
    rows_axis: Optional[str] = None,
    cols_axis: Optional[str] = None,
    title: str = "",
) -> None:
    """`metric` over two grid axes with the numbers in the cells (like the accuracy-vs-depth tables of
    Liu et al. 2023); one panel per combination of any further axes; one axis gives a single row."""
    if metric not in METRICS:
        raise ConfigError("--metric", f"{metric!r} is not allowed; allowed: {', '.join(METRICS)}")
    column, text, vrange = METRICS[metric]
    _draw(
        plan,
        rows,
        path,
        column,
        lambda r: "–" if math.isnan(r[column]) else text(r[column]),
        vrange,
        rows_axis,
        cols_axis,
        title or f"{plan.name}: {column}",
    )


def formation_heatmap(
    plan: Plan,
    rows: list[dict[str, Any]],
    path: Path,
    probe: str,
    rows_axis: Optional[str] = None,
    cols_axis: Optional[str] = None,
) -> None:
    """When `probe`'s circuit forms over the grid (`add_formation`'s columns): the median step, coloured,
    with the seeds where it formed; "not reached" and unprobed points blank."""
    median = formation_columns(probe)[0]
    _draw(
        plan,
        rows,
        path,
        median,
        lambda r: formation_text(r, probe).replace(" (", "\n("),
        None,
        rows_axis,
        cols_axis,
        f"{plan.name}\n{probe}: step its earliest head forms\n(median over the seeds where it formed)",
    )


def _draw(
    plan: Plan,
    rows: list[dict[str, Any]],
    path: Path,
    column: str,
    cell: Callable[[dict[str, Any]], str],
    vrange: Optional[tuple[float, float]],
    rows_axis: Optional[str],
    cols_axis: Optional[str],
    title: str,
) -> None:
    """`column` of `rows` as colours over two grid axes, each cell's text `cell(row)`; a non-finite value blank."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n_axes = len(plan.axes)
    check_axes(plan, rows_axis, cols_axis)
    r_i, c_i = _axis(plan, rows_axis, "--rows"), _axis(plan, cols_axis, "--cols")
    free = [i for i in range(n_axes) if i not in (r_i, c_i)]
    if r_i is None and c_i is None and n_axes == 1:
        c_i = free.pop(0)  # one axis: a single row
    if r_i is None and free:
        r_i = free.pop(0)
    if c_i is None and free:
        c_i = free.pop(0)
    rest = free
    labels = lambda i: list(plan.axes[i].labels) if i is not None else [""]  # noqa: E731
    by_labels = {tuple(r[a.key] for a in plan.axes): r for r in rows}
    facets = list(itertools.product(*(labels(i) for i in rest))) or [()]
    values = [r[column] for r in rows if math.isfinite(r[column])]
    vmin, vmax = vrange if vrange else ((min(values), max(values)) if values else (0.0, 1.0))

    row_labels, col_labels = labels(r_i), labels(c_i)
    label_width = 0.08 * max(len(str(v)) for v in row_labels)
    fig = Figure(
        figsize=(
            max(4.5, 2.0 + label_width + 0.75 * len(col_labels)),
            (1.0 + 0.45 * len(row_labels)) * len(facets) + 0.6,
        )
    )
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(facets), 1, squeeze=False)[:, 0]
    for ax, facet in zip(axes, facets):
        grid = [[float("nan")] * len(col_labels) for _ in row_labels]
        texts = [["–"] * len(col_labels) for _ in row_labels]
        for key, r in by_labels.items():
            if all(key[i] == v for i, v in zip(rest, facet)):
                y, x = (
                    row_labels.index(key[r_i]) if r_i is not None else 0,
                    col_labels.index(key[c_i]) if c_i is not None else 0,
                )
                grid[y][x] = r[column] if math.isfinite(r[column]) else float("nan")
                texts[y][x] = cell(r)
        im = ax.imshow(grid, cmap="viridis", vmin=vmin, vmax=vmax, aspect="auto")
        for y, line in enumerate(grid):
            for x, v in enumerate(line):
                # dark text on a bright cell, and on a blank one (NaN is not drawn: the white shows)
                dark = math.isnan(v) or (v - vmin) / max(vmax - vmin, 1e-12) > 0.6
                ax.text(x, y, texts[y][x], ha="center", va="center", fontsize=9, color="black" if dark else "white")
        ax.set_xticks(range(len(col_labels)), col_labels)
        ax.set_yticks(range(len(row_labels)), row_labels)
        ax.set_xlabel(plan.axes[c_i].key if c_i is not None else "")
        ax.set_ylabel(plan.axes[r_i].key if r_i is not None else "")
        ax.set_title(", ".join(f"{plan.axes[i].key}={v}" for i, v in zip(rest, facet)), fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    io.atomic_write(path, lambda p: fig.savefig(p, dpi=120, format="png"))
