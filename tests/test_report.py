"""The run report: sections per task, renders that match the model, and a page that renders offline
in a real browser."""

from __future__ import annotations

import html.parser
import re

import pytest
import torch
from test_views import props_of

from mechsynth import hooks, load_run, parse_config, probes, train_run
from mechsynth.analysis import report
from mechsynth.analysis.timeline import Timeline
from mechsynth.cli import main
from mechsynth.util import browser


def train(tmp_path_factory, name: str, task: dict, model: dict, steps: int = 40, wandb: str = "disabled"):
    data = {
        "task": task,
        "model": model,
        "train": {
            "steps": steps,
            "batch_size": 32,
            "lr": 3e-3,
            "eval_every": 10,
            "eval_batch_size": 64,
            "checkpoints": 6 if steps < 100 else 10,
            "device": "cpu",
        },
        "wandb": {"mode": wandb},
    }
    return train_run(parse_config(data), tmp_path_factory.mktemp(name) / "run", progress=False)


@pytest.fixture(scope="module")
def markov_run(tmp_path_factory):
    return train(
        tmp_path_factory,
        "markov",
        {"name": "markov_icl", "k": 3, "length": 24},
        {"n_layers": 2, "n_heads": 2, "d_model": 32, "attn_only": True},
        steps=120,
    )


@pytest.fixture(scope="module")
def markov_report(markov_run):
    return report.write(markov_run, batch_size=16)


def view_props(rep, probe: str) -> dict:
    """The props of the probe's first pattern."""
    return next(p for v, p in zip(rep.views, props_of(rep.html)) if v.title.startswith(probe + ":"))[0]


def section_ids(page: str) -> set[str]:
    return set(re.findall(r'<section id="([^"]+)"', page))


def test_markov_report_has_its_sections_and_probes_first_when_needed(markov_run, markov_report):
    page = (markov_run / "report.html").read_text()
    assert page == markov_report.html and markov_report.probed
    assert (markov_run / "probes.json").exists() and (markov_run / "probes.csv").exists()
    assert section_ids(page) == {
        "summary",
        "config",
        "curves",
        "timelines",
        "stages",
        "strategy_kl",
        "attention",
        "metrics",
    }
    assert page.count("var CircuitsVis=") == 1, "the circuitsvis bundle is inlined once"
    assert len(props_of(page)) == len(markov_report.views) == 3  # previous_token, induction, duplicate_token
    assert page.count("data:image/png;base64,") == 4  # curves, timelines, stages, strategy KL
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//|@import|url\(\s*["']?https?:""", page)
    # Written again from probes.json, without probing.
    assert not report.build(markov_run).probed


def test_renders_are_the_models_attention_at_the_named_checkpoints(markov_run, markov_report):
    run = load_run(markov_run)
    models = {}  # TransformerLens's own model at each named checkpoint, built once
    for v, view_props in zip(markov_report.views, props_of(markov_report.html)):
        probe = v.title.split(":")[0]
        tokens = probes.run(probe, run.model(run.steps[-1]), run.task, batch_size=8).render["tokens"]
        assert len(view_props) == len(v.names) == 2 * v.columns  # two heads, each at before/forms/end
        for name, props in zip(v.names, view_props):
            assert props["tokens"] == run.task.token_labels(tokens) and f">{name}<" in markov_report.html
            pattern = props["attention"]
            head, step = re.match(r"(L\d+H\d+) step (\d+) \(", name).groups()
            layer, h = hooks.parse_head(head)
            if step not in models:
                models[step] = run.model(int(step))
            _, cache = models[step].run_with_cache(tokens[None])
            truth = cache[hooks.attn_pattern(layer)][0, h]
            assert torch.tensor(pattern) == pytest.approx(truth, abs=2e-4), (probe, name)


def test_figures_draw_the_probed_series(markov_report):
    tl = markov_report.timeline
    kl = {
        line.get_label(): list(line.get_ydata())
        for line in markov_report.figures["strategy_kl"].axes[0].lines
        if line.get_label() in ("uniform", "unigram", "ngram", "bayes")
    }
    assert kl and all(kl[s] == pytest.approx(tl.metrics["icl_strategy"][f"kl/{s}"]) for s in kl)
    panels = markov_report.figures["timelines"].axes
    induction = next(ax for ax in panels if ax.get_ylabel() == "induction")
    drawn = {
        line.get_label().split(" ")[0]: list(line.get_ydata()) for line in induction.lines if line.get_label()[0] == "L"
    }
    assert drawn == {h: pytest.approx(s) for h, s in tl.per_head["induction"].items()}


def test_checkpoints_before_during_and_after_formation():
    steps = [0, 1, 2, 5, 10, 20, 50, 100, 200, 400]
    tl = Timeline(
        steps,
        [1.0] * 10,
        {"p": {"L0H0": [0.0] * 10, "L0H1": [0.0] * 10}},
        {"p": {}},
        {"p": {"L0H0": 100, "L0H1": 50}},
        loss_drop_step=20,
    )
    assert report._moments(tl, "p") == [(20, "before"), (50, "forms"), (400, "end")]
    assert report._top_heads(tl, "p") == ["L0H1", "L0H0"]
    tl.formation["p"] = {"L0H0": None, "L0H1": None}
    assert report._moments(tl, "p") == [(10, "before"), (20, "loss drop"), (400, "end")]


def test_automata_report_shows_linear_probes_per_layer(tmp_path_factory):
    run_dir = train(
        tmp_path_factory,
        "automata",
        {"name": "automata", "automaton": "dihedral", "n": 3, "length": 8},
        {"n_layers": 2, "n_heads": 1, "d_model": 16},
    )
    rep = report.write(run_dir, batch_size=16)
    assert {"linear_probes", "timelines", "attention"} <= section_ids(rep.html) and "strategy_kl" not in section_ids(
        rep.html
    )
    metrics = rep.timeline.metrics["automaton_shortcut"]
    over_time = rep.figures["linear_probes"].axes[1]
    assert {
        line.get_label(): list(line.get_ydata())
        for line in over_time.lines
        if line.get_label() in ("embed", "L0", "L1")
    } == {d: pytest.approx(metrics[f"linear/state/{d}"]) for d in ("embed", "L0", "L1")}
    props = view_props(rep, "automaton_shortcut")
    assert all("→" in t for t in props["tokens"]), "automaton tokens are labelled with the state they lead to"


def test_parity_reports_hidden_progress_and_selection_renders(tmp_path_factory):
    task = {"name": "sparse_parity", "n": 8, "k": 2}
    run_dir = train(tmp_path_factory, "parity", task, {"n_layers": 1, "n_heads": 2, "d_model": 16})
    rep = report.write(run_dir, batch_size=16)
    assert {"hidden_progress", "attention"} <= section_ids(rep.html)
    props = view_props(rep, "sparse_selection")
    support = load_run(run_dir).task.support.tolist()
    assert [i for i, t in enumerate(props["tokens"]) if t.endswith("*")] == support and props["tokens"][-1] == "?"
    drift = rep.figures["hidden_progress"].axes[0].lines[0]
    assert list(drift.get_ydata()) == pytest.approx(rep.timeline.metrics["hidden_progress"]["drift_on_support"])

    mlp = train(tmp_path_factory, "mlp", task, {"kind": "mlp", "width": 32})
    rep = report.write(mlp)
    assert "hidden_progress" in section_ids(rep.html) and "timelines" not in section_ids(rep.html)
    assert rep.views == [] and "no attention heads" in rep.html and "var CircuitsVis=" not in rep.html


def test_report_cli(markov_run, tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"mechsynth: error: {tmp_path}: is not a mechsynth run (no config.json)"
    assert main(["report", str(markov_run), "--wandb", "disabled"]) == 0
    assert capsys.readouterr().out.strip() == str(markov_run / "report.html")


# ---- in a real browser ------------------------------------------------------------------------


class Rendered(html.parser.HTMLParser):
    """Per circuitsvis root div: how many canvases ended up inside it (and any text)."""

    def __init__(self):
        super().__init__()
        self.roots: dict[str, dict] = {}
        self.stack: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        root = attrs.get("id") if "cv-root" in (attrs.get("class") or "") else None
        if root:
            self.roots[root] = {"canvas": 0, "text": ""}
        if tag == "canvas":
            for _, r in self.stack:
                if r:
                    self.roots[r]["canvas"] += 1
        if tag not in ("img", "br", "input", "meta", "link", "hr", "col", "source", "wbr"):  # void: no end tag
            self.stack.append((tag, root))

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        for _, r in self.stack:
            if r:
                self.roots[r]["text"] += data


needs_chromium = pytest.mark.skipif(
    browser.find_chromium() is None, reason="Chromium not found: install Debian's `chromium` package (.ci/run does)"
)


@pytest.mark.smoke
@needs_chromium
def test_report_renders_offline_in_headless_chromium(markov_run, markov_report, tmp_path):
    import numpy as np
    from PIL import Image

    opened = browser.open_page(markov_run / "report.html", screenshot=tmp_path / "report.png", height=2400)
    assert opened.requests == [], "the report asked the network for something"

    pixels = torch.tensor(np.array(Image.open(opened.screenshot).convert("L")), dtype=torch.float)
    assert pixels.std() > 20 and (pixels < 200).float().mean() > 0.02, "the screenshot is (nearly) blank"

    parsed = Rendered()
    parsed.feed(opened.dom)
    assert len(parsed.roots) == sum(len(v.names) for v in markov_report.views) == 18
    assert all(root["canvas"] == 1 for root in parsed.roots.values()), "every pattern rendered its heatmap"


@pytest.mark.smoke
@needs_chromium
def test_the_network_check_sees_a_page_that_asks(tmp_path):
    """The check above must be able to fail: a page that loads a stylesheet, an image, a fetch and a
    websocket is caught, each request by URL."""
    page = tmp_path / "asks.html"
    page.write_text(
        '<!doctype html><link rel="stylesheet" href="https://fonts.invalid/css"><img src="http://img.invalid/a.png">'
        '<script>fetch("https://api.invalid/q").catch(() => 0); new WebSocket("wss://ws.invalid/s");</script>'
    )
    opened = browser.open_page(page, budget_ms=3000)
    assert opened.requests == [
        "http://img.invalid/a.png",
        "https://api.invalid/q",
        "https://fonts.invalid/css",
        "wss://ws.invalid/s",
    ]


def test_the_summary_box_wraps_its_lines(markov_report):
    """The summary's lines (the stages line is long) wrap inside the box: no sideways scrolling that hides
    their ends, also for a run of characters without spaces."""
    style = re.search(r"<style>(.*?)</style>", markov_report.html, re.S).group(1)
    rule = re.search(r"(?:^|[}\s])pre\s*\{([^}]*)\}", style).group(1)
    assert re.search(r"white-space:\s*pre-wrap", rule) and re.search(r"overflow-wrap:\s*anywhere", rule), rule
    assert re.search(r'<section id="summary"><h2>Summary</h2>\s*<pre>', markov_report.html)


def summary_box_widths(page: str, path) -> tuple[int, int]:
    """(scrollWidth, clientWidth) of the report's summary box in headless Chromium, with a long line in it."""
    long = "icl_strategy     stages: " + " -> ".join(f"ngram (step {s})" for s in range(40)) + " " + "x" * 300
    page = page.replace(
        '<section id="summary"><h2>Summary</h2>\n<pre>', f'<section id="summary"><h2>Summary</h2>\n<pre>{long}\n', 1
    )
    probe = (
        "<script>const box = document.querySelector('#summary pre'); "
        "document.body.setAttribute('data-widths', box.scrollWidth + ' ' + box.clientWidth);</script>"
    )
    path.write_text(page.replace("</body>", probe + "</body>"), encoding="utf-8")
    opened = browser.open_page(path, width=1000, budget_ms=3000)
    scroll, client = map(int, re.search(r'data-widths="(\d+) (\d+)"', opened.dom).groups())
    return scroll, client


@pytest.mark.smoke
@needs_chromium
def test_the_summary_box_never_scrolls_sideways_in_chromium(markov_report, tmp_path):
    scroll, client = summary_box_widths(markov_report.html, tmp_path / "report.html")
    assert client > 300 and scroll == client, (scroll, client)
    # the measurement sees a box that scrolls: the same page with lines that do not wrap
    unwrapped = markov_report.html.replace("</style>", "pre { white-space: pre; overflow-x: auto; }</style>", 1)
    scroll, client = summary_box_widths(unwrapped, tmp_path / "unwrapped.html")
    assert scroll > 2 * client, (scroll, client)
