"""`mechsynth report RUN_DIR`: one self-contained HTML file per run — config, curves, probe timelines,
the task's own sections, and attention renders of each probe's top heads before, while and after
they form. Figures are embedded PNGs and the circuitsvis bundle is inlined once, so the file opens
anywhere with no network."""

from __future__ import annotations

import html
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
from jaxtyping import Float
from matplotlib.figure import Figure
from torch import Tensor

from mechsynth import hooks, models, probes
from mechsynth.analysis import plots, stages, timeline, views
from mechsynth.analysis.timeline import Timeline, applicable, probe_run, summary
from mechsynth.runs import io, rundir
from mechsynth.runs.run import Run, load_run
from mechsynth.util.figures import png_base64

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; margin: 0 auto; max-width: 1100px;
       padding: 1.5em 2em 4em; color: #1d1d1f; background: #fff; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.1em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
.sub { color: #666; margin-top: 0; } pre { background: #f6f6f8; padding: 0.8em 1em; border-radius: 6px;
      white-space: pre-wrap; overflow-wrap: anywhere; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 1.5em 0.5em 0; vertical-align: top; }
td, th { border-bottom: 1px solid #eee; padding: 0.15em 0.7em; text-align: left; } th { background: #f6f6f8; }
.tables { display: flex; flex-wrap: wrap; align-items: flex-start; } img { max-width: 100%; }
nav a { margin-right: 1em; } .note { color: #555; font-size: 0.9em; }
"""


@dataclass
class Report:
    path: Path
    html: str
    timeline: Timeline
    figures: dict[str, Figure] = field(default_factory=dict)
    views: list[views.AttentionView] = field(default_factory=list)
    probed: bool = False  # the timeline was probed for this report (there was no probes.json)


def timeline_of(run: Run, batch_size: int = 64, seed: int = 0) -> tuple[Timeline, bool]:
    """The run's probe timeline: probes.json if `mechsynth probe` wrote one, with the circuit probes it lacks
    probed now (it may hold only `--probes llc,sharpness`), else every checkpoint probed now; whatever was
    probed is written to probes.json and probes.csv. Returns (timeline, whether anything was just probed)."""
    old = timeline.load(run.path) if (run.path / timeline.JSON).exists() else None
    missing = [p for p in applicable(run) if old is None or p not in old.metrics]
    if old is not None and (not missing or old.steps != run.steps):
        return old, False
    tl = probe_run(run, missing, batch_size=batch_size, seed=seed)
    tl = tl if old is None else timeline.merge(old, tl)
    timeline.save(tl, run.path)
    return tl, True


# ---- attention renders ------------------------------------------------------------------------


def _moments(tl: Timeline, probe: str) -> list[tuple[int, str]]:
    """Checkpoints before, during and after formation of the probe's first head to form; without one,
    around the loss drop (or the middle of training)."""
    formed = sorted(s for s in tl.formation.get(probe, {}).values() if s is not None)
    anchor, what = (formed[0], "forms") if formed else (tl.loss_drop_step, "loss drop")
    if anchor is None:
        anchor, what = tl.steps[len(tl.steps) // 2], "middle"
    before = max([s for s in tl.steps if s <= anchor / 2] or [tl.steps[0]])
    out = {before: "before", anchor: what, tl.steps[-1]: "end"}
    return sorted(out.items())


def _top_heads(tl: Timeline, probe: str, n: int = 2) -> list[str]:
    """The heads that formed (earliest first), then the highest-scoring at the last checkpoint."""
    heads = tl.per_head[probe]
    formed = sorted((s, h) for h, s in tl.formation.get(probe, {}).items() if s is not None)
    by_score = sorted(heads, key=lambda h: -heads[h][-1])
    return list(dict.fromkeys([h for _, h in formed] + by_score))[:n]


def _head_pattern(cache, head: str) -> Float[Tensor, "query_pos key_pos"]:
    layer, h = hooks.parse_head(head)
    return cache[hooks.attn_pattern(layer)][0, h].cpu()


@torch.no_grad()
def attention_views(run: Run, tl: Timeline, seed: int = 0) -> list[views.AttentionView]:
    """For each head-scoring probe: its top heads' attention on the probe's own example sequence (the
    first of its input batch), at checkpoints before, during and after formation."""
    chosen = [p for p, heads in tl.per_head.items() if heads and p in probes.names()]
    first_formed = {
        p: min([s for s in tl.formation.get(p, {}).values() if s is not None], default=math.inf) for p in chosen
    }
    chosen.sort(key=lambda p: first_formed[p])  # the circuits that formed first, first
    if not chosen or not set(tl.steps) <= set(run.steps):
        return []
    plans = {p: (_top_heads(tl, p), _moments(tl, p)) for p in chosen}
    needed = sorted({s for _, moments in plans.values() for s, _ in moments})
    patterns: dict[tuple[str, int], dict[str, torch.Tensor]] = {}
    tokens: dict[str, torch.Tensor] = {}
    init = models.probed(run.trainable(run.steps[0]))
    for step, model in run.models(needed):
        if not tokens:  # a probe's inputs are seeded, the same at every checkpoint
            tokens = {
                p: probes.run(p, model, run.task, batch_size=8, seed=seed, init=init).render["tokens"] for p in chosen
            }
        for p, (heads, moments) in plans.items():
            if step in dict(moments):
                wanted = set(hooks.attention_patterns(hooks.attention_layers(model)))
                _, cache = model.run_with_cache(
                    tokens[p][None].to(next(model.parameters()).device), names_filter=lambda n: n in wanted
                )
                patterns[p, step] = {h: _head_pattern(cache, h) for h in heads}
    out = []
    for p, (heads, moments) in plans.items():
        pats, names = [], []
        for head in heads:
            for step, what in moments:
                pats.append(patterns[p, step][head].float())
                names.append(f"{head} step {step} ({what})")
        labels = run.task.token_labels(tokens[p])
        out.append(
            views.AttentionView(
                f"{p}: heads {', '.join(heads)} on the probe's example",
                labels,
                torch.stack(pats),
                names,
                columns=len(moments),
            )
        )
    return out


# ---- the page -----------------------------------------------------------------------------------


def _table(rows: Sequence[tuple[Any, Any]], head: Optional[tuple[str, str]] = None) -> str:
    cells = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(_fmt(v))}</td></tr>" for k, v in rows)
    top = f"<tr><th>{html.escape(head[0])}</th><th>{html.escape(head[1])}</th></tr>" if head else ""
    return f"<table>{top}{cells}</table>"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "—" if math.isnan(v) else f"{v:.4g}"  # NaN: not measured there (a costly probe's skipped checkpoint)
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v)) or "—"
    return "—" if v is None else str(v)


def _formed(tl: Timeline, probe: str, head: str) -> int | str:
    step = tl.formation.get(probe, {}).get(head)
    return "not reached" if step is None else step


def _img(fig: Optional[Figure], alt: str) -> str:
    return "" if fig is None else f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{png_base64(fig)}">'


def _section(anchor: str, title: str, body: str) -> tuple[str, str, str]:
    return anchor, title, f'<section id="{anchor}"><h2>{html.escape(title)}</h2>\n{body}\n</section>'


NOT_RECORDED = "not recorded"  # a key the run never recorded: never shown as the default that stands in for it


def _config_tables(run: Run) -> str:
    cfg = run.config.to_dict()
    stored = rundir.read_config(run.path)
    versions = stored.get("versions", {})
    last = run.metrics[-1] if run.metrics else {}
    stats = [("checkpoints", len(run.steps)), ("last step", last.get("step"))] + [
        (k, v) for k, v in last.items() if k != "step" and isinstance(v, (int, float))
    ]
    parts = [
        _table([(k, NOT_RECORDED if f"{s}.{k}" in run.not_recorded else v) for k, v in cfg[s].items()], (s, ""))
        for s in ("task", "model", "train", "wandb")
    ]
    origin = stored.get("origin")
    if isinstance(origin, dict):  # who made a run mechsynth did not train, and what it was told
        parts.append(_table([(k, v) for k, v in origin.items() if k != rundir.NOT_RECORDED], ("origin", "")))
    parts += [_table(stats, ("at the end", "")), _table(list(versions.items()), ("versions", ""))]
    note = (
        (
            f"<p>{len(run.not_recorded)} values are {NOT_RECORDED}: this run was made outside mechsynth, which was "
            "not told them (run.not_recorded names them; run.config holds mechsynth's defaults there only so that "
            "it parses).</p>"
        )
        if run.not_recorded
        else ""
    )
    return f'{note}<div class="tables">{"".join(parts)}</div>'


def _formation_table(tl: Timeline) -> str:
    rows = []
    for p, heads in tl.per_head.items():
        threshold, chance = timeline.formation_threshold(tl, p)
        shown = _fmt(threshold) + (f" (chance {_fmt(chance)})" if chance is not None else "")
        for h, series in heads.items():
            rows.append(
                f"<tr><td>{p}</td><td>{h}</td><td>{_fmt(_formed(tl, p, h))}</td>"
                f"<td>{html.escape(shown)}</td><td>{_fmt(max(series))}</td><td>{_fmt(series[-1])}</td></tr>"
            )
    if not rows:
        return ""
    return (
        "<table><tr><th>probe</th><th>head</th><th>forms at step</th><th>threshold</th><th>max score</th>"
        f"<th>last score</th></tr>{''.join(rows)}</table>"
    )


def _last_metrics(tl: Timeline) -> str:
    tables = [
        _table([(k, v[-1]) for k, v in m.items()], (p, f"step {tl.steps[-1]}")) for p, m in tl.metrics.items() if m
    ]
    return f'<details><summary>every probe metric at the last checkpoint</summary><div class="tables">{"".join(tables)}</div></details>'


def _sections(tl: Timeline) -> list[probes.Section]:
    return [p.section for p in timeline.shown_probes(tl) if p.section is not None]


def probe_figures(tl: Timeline, task: Any) -> dict[str, Figure]:
    """The probes' own figures (strategy KL, linear probes, hidden progress, ...) for this timeline, by
    section name; a probe with nothing to draw has none."""
    figs = {s.name: s.figure(tl, task) for s in _sections(tl)}
    return {k: f for k, f in figs.items() if f is not None}


def build(run_dir: Path | str, *, batch_size: int = 64, seed: int = 0) -> Report:
    """Assemble the report of a run (probing it first if it has no probes.json) without writing it."""
    run = load_run(run_dir)
    tl, probed = timeline_of(run, batch_size, seed)
    thresholds = {p: timeline.formation_threshold(tl, p)[0] for p in tl.per_head if p in probes.names()}
    found = stages.detect(tl)
    figs = {
        "curves": plots.curves(run.metrics, tl.loss_drop_step, tl.formed()),
        "timelines": plots.head_timelines(tl, thresholds),
        "stages": plots.stages(tl, stages.series(tl), found),
    } | probe_figures(tl, run.task)
    figs = {k: f for k, f in figs.items() if f is not None}
    rendered = attention_views(run, tl, seed)

    cfg = run.config
    sections = [
        _section("summary", "Summary", f"<pre>{html.escape(chr(10).join(summary(tl, run.task)))}</pre>"),
        _section("config", "Configuration", _config_tables(run)),
        _section(
            "curves",
            "Loss and accuracy",
            _img(figs["curves"], "loss and accuracy curves")
            + '<p class="note">Dotted: the step where the held-out loss falls fastest (per unit of log-step) after it '
            "leaves its plateau, where it has one (a change point of the loss; the first steps' fall from "
            "the initialisation is no transition). "
            "Dashed: the first head of each probe to form.</p>",
        ),
    ]
    if "timelines" in figs:
        sections.append(
            _section(
                "timelines",
                "Probe timelines",
                _img(figs["timelines"], "per-head probe timelines")
                + '<p class="note">Each head\'s score at every probed checkpoint, one panel per probe '
                "(labelled by its name); dash-dotted: the probe's threshold, raised where a uniform "
                "head already scores high on the probe's inputs (chance); dashed: the step after "
                "which a head stays above it (formation); dotted: the loss drop.</p>" + _formation_table(tl),
            )
        )
    sections.append(
        _section(
            "stages",
            "Stages",
            _img(figs["stages"], "stages of training")
            + '<p class="note">Stages found without a circuit in mind, on one step axis: each timeline\'s '
            "change points (red: where the best piecewise-linear fit in log-step turns a corner), the "
            "LLC's turns (purple, dash-dotted: where it stops rising or falling, as Hoogland et al. "
            "read stages), and the step each probe's first head forms (dashed). The LLC and sharpness "
            "appear when the run was probed with <code>--probes llc,sharpness</code>.</p>"
            + _table(
                [(name, ", ".join(map(str, steps)) or "—") for name, steps in found.items()],
                ("timeline", "stage boundaries (steps)"),
            ),
        )
    )
    for probe in timeline.shown_probes(tl):  # each headed by the probe that drew it
        own = probe.section
        if own is not None and own.name in figs:
            sections.append(
                _section(
                    own.name,
                    f"{own.title} (probe {probe.name})",
                    _img(figs[own.name], own.title.lower())
                    + f'<p class="note">{html.escape(own.note, quote=False)}</p>',
                )
            )
    if rendered:
        body = (
            '<p class="note">circuitsvis renders of each probe\'s top heads at checkpoints before, while and after '
            "they form: rows of each heatmap are queries (destination), columns keys (source); hover a cell for "
            "its tokens and value. The labels are what the tokens mean in the task.</p>"
            + views.views_html(rendered, "attn")
        )
    else:
        body = '<p class="note">No attention renders: this model has no attention heads, or no probe scores heads.</p>'
    sections.append(_section("attention", "Attention", body))
    sections.append(_section("metrics", "Probe metrics", _last_metrics(tl)))

    nav = "<nav>" + "".join(f'<a href="#{a}">{html.escape(t)}</a>' for a, t, _ in sections) + "</nav>"
    head = (
        f'<h1>{html.escape(run.path.name)}</h1><p class="sub">{html.escape(cfg.task_name)} · '
        f"{html.escape(models.describe(cfg.model))} · "
        f"{len(tl.steps)} checkpoints probed · report written {time.strftime('%Y-%m-%d %H:%M')}</p>"
    )
    page = views.page(f"mechsynth report: {run.path.name}", head + nav + "\n".join(s for _, _, s in sections), STYLE)
    return Report(run.path / "report.html", page, tl, figs, rendered, probed)


def write(run_dir: Path | str, *, batch_size: int = 64, seed: int = 0) -> Report:
    """Build the report and write RUN_DIR/report.html atomically (refused before probing where RUN_DIR is
    read-only: ConfigError naming it)."""
    rundir.check_writable(run_dir, "run_dir")
    report = build(run_dir, batch_size=batch_size, seed=seed)
    io.atomic_write(report.path, lambda p: p.write_text(report.html, encoding="utf-8"))
    return report


def attention_page(report: Report) -> str:
    """The attention renders alone, as a page of their own (the bundle once)."""
    return views.page(f"attention: {report.path.parent.name}", views.views_html(report.views, "attn"), STYLE)


def log_to_wandb(report: Report, logger) -> None:
    """The renders (one page, bundle once), the whole report, the tidy probe table and a line plot per
    probe, into the run's W&B run."""
    if report.views:
        logger.html("report/attention", attention_page(report))
    logger.html("report/page", report.html)
    timeline.log_plots_to_wandb(report.timeline, logger)
    logger.summary({"report/formed": len(report.timeline.formed())})
