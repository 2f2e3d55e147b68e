"""What `mechsynth bench-circuits` writes beside its JSON: the leaderboard as a Markdown table, the figures over
training, a self-contained HTML page, and (with W&B on) a W&B table."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any, Optional

from matplotlib.figure import Figure

from mechsynth.util.figures import new_figure, png_base64

COLUMNS = [
    ("method", "method", ""),
    ("case", "zoo case", ""),
    ("checkpoints", "checkpoints", "d"),
    ("auroc", "AUROC", ".2f"),
    ("cpr", "CPR ↑", ".3f"),
    ("cmd", "CMD ↓", ".3f"),
    ("lag", "lag", "+.1f"),
    ("false_transient", "false (transient)", ".2f"),
    ("rank_transition", "ρ exact (transition)", ".2f"),
    ("seconds", "s / checkpoint", ".3f"),
    ("edges_per_s", "edges / s", ".0f"),
]


def cell(value: Any, fmt: str) -> str:
    """A value as the table shows it: "–" where there is none (never "None" or "nan")."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return format(value, fmt) if fmt else str(value)


def markdown(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---" if fmt == "" else "---:" for _, _, fmt in COLUMNS) + "|"
    body = ["| " + " | ".join(cell(r[k], fmt) for k, _, fmt in COLUMNS) + " |" for r in rows]
    return "\n".join([head, rule, *body]) + "\n"


LEGEND = (
    "AUROC: |score| separating the case's true edges from the others, mean over checkpoints. CPR, CMD: MIB's "
    "areas under the faithfulness curve over its edge budgets and between it and 1 (a circuit can keep more than "
    "the whole model, faithfulness above 1, and CPR with it). lag: checkpoints after exact "
    "patching until the method's top K edges (K: the final exact circuit's size) keep the level for good. false "
    "(transient): the share of the method's circuit outside exact patching's, before exact patching detects the "
    "final circuit. ρ exact (transition): Spearman's ρ with exact patching's |effects| around that checkpoint. "
    "s / checkpoint and edges / s: the method's own time."
)


def figure(results: dict[str, Any], methods: list[str]) -> Figure:
    """AUROC and CPR against training step, one row per case with several checkpoints."""
    cases = [(n, r) for n, r in results["cases"].items() if len(r["checkpoints"]) > 1]
    fig, axes = new_figure(max(1, len(cases)), 2, height=2.4, width=9.0)
    for row, (name, r) in zip(axes, cases):
        steps = [max(p["step"], 1) for p in r["checkpoints"]]
        for key, ax in zip(("auroc", "cpr"), row):
            for m in methods:
                ax.plot(steps, [p["methods"][m][key] for p in r["checkpoints"]], marker=".", label=m)
            ax.set_xscale("log")
            ax.set_title(f"{name}: {key.upper()}", fontsize=9)
            ax.set_xlabel("step")
    if cases:
        axes[0][0].legend(fontsize=7)
    return fig


def page(results: dict[str, Any], rows: list[dict[str, Any]], fig: Optional[Figure]) -> str:
    """The leaderboard and figures as one HTML page that opens offline."""
    head = "".join(f"<th>{html.escape(t)}</th>" for _, t, _ in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell(r[k], f))}</td>" for k, _, f in COLUMNS) + "</tr>" for r in rows
    )
    truths = "".join(
        f"<li><b>{html.escape(n)}</b> ({r['kind']}): scored against {html.escape(r['truth'])}</li>"
        for n, r in results["cases"].items()
    )
    img = f'<img alt="over training" src="data:image/png;base64,{png_base64(fig)}">' if fig is not None else ""
    return (
        f"<!doctype html><meta charset='utf-8'><title>circuit discovery benchmark</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;text-align:right}"
        "td:nth-child(-n+2),th:nth-child(-n+2){text-align:left}</style>"
        f"<h1>Circuit discovery over training</h1><p>{html.escape(LEGEND)}</p>"
        f"<table><tr>{head}</tr>{body}</table><h2>Zoo</h2><ul>{truths}</ul>{img}"
        f"<p>{html.escape(results['provenance'])}</p>"
    )


def write(out: Path, results: dict[str, Any], rows: list[dict[str, Any]], methods: list[str]) -> dict[str, Path]:
    fig = figure(results, methods) if any(len(r["checkpoints"]) > 1 for r in results["cases"].values()) else None
    paths = {"table": out / "leaderboard.md", "page": out / "bench_circuits.html"}
    paths["table"].write_text(markdown(rows) + "\n" + LEGEND + "\n")
    paths["page"].write_text(page(results, rows, fig))
    if fig is not None:
        paths["figure"] = out / "bench_circuits.png"
        fig.savefig(paths["figure"], dpi=110)
    return paths


def log_to_wandb(logger: Any, rows: list[dict[str, Any]], page_html: str) -> None:
    logger.table(
        "bench_circuits/leaderboard", [t for _, t, _ in COLUMNS], [[r[k] for k, _, _ in COLUMNS] for r in rows]
    )
    logger.html("bench_circuits/report", page_html)
