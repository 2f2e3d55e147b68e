"""Outcomes of a sweep over its grid: how many seeds converge, when, and how accurate they end.

A run *converges* when its final held-out accuracy (`acc_key`, default eval/acc) is at least
`threshold`; its convergence step is the first evaluation step at which accuracy reached the
threshold. Statistics cover complete runs only; `n_complete` says how many of `n_runs` that is.
"""

from __future__ import annotations

import csv
import itertools
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from mechsynth import io, rundir
from mechsynth.config import ConfigError
from mechsynth.sweep_plan import Plan

METRICS = {  # heatmap quantity -> (column, how a cell is written, colour range)
    "final_acc": ("final_acc_mean", lambda v: f"{100 * v:.1f}", (0.0, 1.0)),
    "frac_converged": ("frac_converged", lambda v: f"{v:.2f}", (0.0, 1.0)),
    "conv_step": ("conv_step_median", lambda v: f"{v:.0f}", None),
}
COLUMNS = ("n_runs", "n_complete", "frac_converged", "conv_step_median", "conv_step_q25", "conv_step_q75",
           "conv_step_min", "conv_step_max", "final_acc_mean", "final_acc_std")


@dataclass(frozen=True)
class RunOutcome:
    final_acc: float
    converged: bool
    conv_step: Optional[int]


def outcomes(run_dir: Path, acc_key: str, threshold: float) -> list[RunOutcome]:
    """A complete run's outcome, one per model it trained (seeds side by side: one per seed); none for a
    run that is not complete."""
    if not rundir.is_complete(run_dir):
        return []
    return [_outcome(d, acc_key, threshold) for d in rundir.members(run_dir, rundir.n_seeds(rundir.read_config(run_dir)))]


def _outcome(run_dir: Path, acc_key: str, threshold: float) -> RunOutcome:
    metrics = rundir.read_metrics(run_dir)
    records = [r for r in metrics if isinstance(r.get(acc_key), (int, float))]
    if not records:
        raise ConfigError("--acc-key", f"{acc_key!r} is not in {run_dir}/metrics.jsonl; "
                                       f"allowed: {', '.join(sorted(k for k in metrics[-1] if k.endswith('acc')))}")
    final = records[-1][acc_key]
    reached = next((r["step"] for r in records if r[acc_key] >= threshold), None)
    return RunOutcome(final, final >= threshold, reached if final >= threshold else None)


def _quantile(xs: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(sweep_dir: Path | str, acc_key: str = "eval/acc", threshold: float = 0.99) -> tuple[Plan, list[dict[str, Any]]]:
    """One row per grid point: its axis labels, then COLUMNS (NaN where there is nothing to count)."""
    from mechsynth.sweep import load_plan

    sweep_dir = Path(sweep_dir)
    plan = load_plan(sweep_dir)
    rows: dict[str, dict[str, Any]] = {}
    done: dict[str, list[RunOutcome]] = {}
    for job in plan.jobs:
        rows.setdefault(job.point, {"point": job.point, **job.labels, "n_runs": 0})
        seeds = job.config["train"].get("seeds", 1)
        rows[job.point]["n_runs"] += seeds
        done.setdefault(job.point, []).extend(outcomes(sweep_dir / job.dir, acc_key, threshold))
    nan = float("nan")
    for point, row in rows.items():
        got = done[point]
        steps = [o.conv_step for o in got if o.converged]
        accs = [o.final_acc for o in got]
        row.update({
            "n_complete": len(got),
            "frac_converged": len(steps) / len(got) if got else nan,
            "conv_step_median": statistics.median(steps) if steps else nan,
            "conv_step_q25": _quantile(steps, 0.25) if steps else nan,
            "conv_step_q75": _quantile(steps, 0.75) if steps else nan,
            "conv_step_min": min(steps) if steps else nan,
            "conv_step_max": max(steps) if steps else nan,
            "final_acc_mean": statistics.fmean(accs) if accs else nan,
            "final_acc_std": statistics.stdev(accs) if len(accs) > 1 else (0.0 if accs else nan),
        })
    return plan, list(rows.values())


def write_csv(plan: Plan, rows: list[dict[str, Any]], path: Path) -> None:
    header = ["point", *(a.key for a in plan.axes), *COLUMNS]

    def fill(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=header)
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if isinstance(r[k], float) and math.isnan(r[k]) else r[k]) for k in header})

    io.atomic_write(path, fill)


def format_table(plan: Plan, rows: list[dict[str, Any]]) -> str:
    """The table for a terminal: one line per grid point."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "-" if math.isnan(v) else (f"{v:.0f}" if v == int(v) and abs(v) >= 10 else f"{v:.3f}")
        return str(v)

    header = [a.key for a in plan.axes] + ["runs", "converged", "conv_step median [q25, q75]", "final acc"]
    lines = []
    for r in rows:
        steps = "-" if math.isnan(r["conv_step_median"]) else \
            f"{r['conv_step_median']:.0f} [{r['conv_step_q25']:.0f}, {r['conv_step_q75']:.0f}]"
        acc = "-" if math.isnan(r["final_acc_mean"]) else f"{r['final_acc_mean']:.3f} ± {r['final_acc_std']:.3f}"
        lines.append([str(r[a.key]) for a in plan.axes]
                     + [f"{r['n_complete']}/{r['n_runs']}", fmt(r["frac_converged"]), steps, acc])
    widths = [max(len(x) for x in col) for col in zip(header, *lines)]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip() for line in [header, *lines])


def _axis(plan: Plan, name: Optional[str], field: str) -> Optional[int]:
    """An axis by its key or the key's last part (`n_layers` for `model.n_layers`)."""
    if name is None:
        return None
    keys = [a.key for a in plan.axes]
    matches = [i for i, k in enumerate(keys) if k == name] or [i for i, k in enumerate(keys) if k.split(".")[-1] == name]
    if len(matches) != 1:
        raise ConfigError(field, f"{name!r} is not an axis of this sweep; allowed: {', '.join(keys) or '(no grid)'}")
    return matches[0]


def title(plan: Plan, metric: str, acc_key: str, threshold: float) -> str:
    what = {"final_acc": f"final {acc_key}, % (mean over seeds)",
            "frac_converged": f"fraction of seeds with final {acc_key} ≥ {threshold}",
            "conv_step": f"median first step with {acc_key} ≥ {threshold}"}[metric]
    return f"{plan.name}\n{what}"


def check_axes(plan: Plan, rows_axis: Optional[str], cols_axis: Optional[str]) -> None:
    r_i, c_i = _axis(plan, rows_axis, "--rows"), _axis(plan, cols_axis, "--cols")
    if r_i is not None and r_i == c_i:
        raise ConfigError("--cols", "rows and columns must be different axes")


def heatmap(plan: Plan, rows: list[dict[str, Any]], path: Path, metric: str = "final_acc",
            rows_axis: Optional[str] = None, cols_axis: Optional[str] = None, title: str = "") -> None:
    """`metric` over two grid axes with the numbers in the cells (like the accuracy-vs-depth tables of
    Liu et al. 2023); one panel per combination of any further axes; one axis gives a single row."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if metric not in METRICS:
        raise ConfigError("--metric", f"{metric!r} is not allowed; allowed: {', '.join(METRICS)}")
    column, text, vrange = METRICS[metric]
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
    values = [r[column] for r in rows if not math.isnan(r[column])]
    vmin, vmax = vrange if vrange else ((min(values), max(values)) if values else (0.0, 1.0))

    row_labels, col_labels = labels(r_i), labels(c_i)
    label_width = 0.08 * max(len(str(v)) for v in row_labels)
    fig = Figure(figsize=(max(4.5, 2.0 + label_width + 0.75 * len(col_labels)),
                          (1.0 + 0.45 * len(row_labels)) * len(facets) + 0.6))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(facets), 1, squeeze=False)[:, 0]
    for ax, facet in zip(axes, facets):
        grid = [[float("nan")] * len(col_labels) for _ in row_labels]
        for key, r in by_labels.items():
            if all(key[i] == v for i, v in zip(rest, facet)):
                grid[row_labels.index(key[r_i]) if r_i is not None else 0][col_labels.index(key[c_i]) if c_i is not None else 0] = r[column]
        im = ax.imshow(grid, cmap="viridis", vmin=vmin, vmax=vmax, aspect="auto")
        for y, line in enumerate(grid):
            for x, v in enumerate(line):
                bright = not math.isnan(v) and (v - vmin) / max(vmax - vmin, 1e-12) > 0.6
                ax.text(x, y, "–" if math.isnan(v) else text(v), ha="center", va="center", fontsize=9,
                        color="black" if bright else "white")
        ax.set_xticks(range(len(col_labels)), col_labels)
        ax.set_yticks(range(len(row_labels)), row_labels)
        ax.set_xlabel(plan.axes[c_i].key if c_i is not None else "")
        ax.set_ylabel(plan.axes[r_i].key if r_i is not None else "")
        ax.set_title(", ".join(f"{plan.axes[i].key}={v}" for i, v in zip(rest, facet)), fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    fig.suptitle(title or f"{plan.name}: {column}", fontsize=9)
    fig.tight_layout()
    io.atomic_write(path, lambda p: fig.savefig(p, dpi=120, format="png"))
