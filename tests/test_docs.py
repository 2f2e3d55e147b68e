"""The docs site: `mkdocs build --strict` passes, the generated reference names every registered task, model kind,
optimizer and probe, every experiment's JSON has a page with its verdicts, and the built folder works from file://
in headless Chromium — nothing loaded from the network, search included."""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mechsynth import models, optimizers, probes, tasks
from mechsynth.config import describe
from mechsynth.util import browser

ROOT = Path(__file__).resolve().parents[1]
from experiments import results_table

needs_chromium = pytest.mark.skipif(
    browser.find_chromium() is None, reason="Chromium not found: install Debian's `chromium` package (.ci/run does)"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # Material's banner about MkDocs 2
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def text(page: Path) -> str:
    """A page's visible text, one space between words."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.read_text())).split())


@pytest.mark.smoke
def test_the_reference_names_every_registered_item(site):
    for page, names in (
        ("tasks", tasks.names()),
        ("probes", probes.names()),
        ("models", models.names()),
        ("optimizers", optimizers.names()),
    ):
        built = (site / "reference" / f"{page}.html").read_text()
        missing = [n for n in names if f"<code>{n}</code>" not in built]
        assert not missing, f"reference/{page}: no section for {missing}"
    tasks_page = (site / "reference" / "tasks.html").read_text()
    for name in tasks.names():  # and each task's fields, as `mechsynth tasks` lists them
        missing = [
            f["name"] for f in describe(tasks.TASKS.get(name).Config) if f"<code>{f['name']}</code>" not in tasks_page
        ]
        assert not missing, f"reference/tasks: {name} lacks {missing}"
    assert 'id="mechsynth.load_run"' in (site / "reference" / "api.html").read_text()  # mkdocstrings read the code


@pytest.mark.smoke
def test_every_experiment_has_a_page_with_its_verdicts(site):
    outs = [json.loads(p.read_text()) for p in sorted((ROOT / "assets").glob("*.json"))]
    outs = [o for o in outs if "experiment" in o]  # demo.json is what the demo printed, not an experiment
    assert outs
    index = text(site / "experiments" / "index.html")
    for out in outs:
        name = out["experiment"]
        page = site / "experiments" / f"{name}.html"
        assert page.exists() and name in index, f"no page for assets/{name}.json"
        shown = text(page)
        judged, _ = results_table.claims(out)
        assert judged, name
        for c in judged:
            assert f"Verdict: {c['verdict']}" in shown, (name, c["claim"])
        for figure in out.get("figures", []):
            assert (site / "assets" / figure).exists() and f"../assets/{figure}" in page.read_text()


@pytest.mark.smoke
def test_no_page_loads_anything_from_the_network(site):
    # A script, image or frame from another host, or a <link> to one (a stylesheet, Google Fonts' preconnect);
    # plain <a href> links are the reader's to follow.
    remote = re.compile(
        r'<(?:script|img|iframe)\b[^>]*\bsrc="(?:https?:)?//[^"]*"|<link\b[^>]*\bhref="(?:https?:)?//[^"]*"'
    )
    for page in site.rglob("*.html"):
        found = remote.findall(page.read_text())
        assert not found, f"{page.relative_to(site)}: {found}"


@pytest.mark.smoke
@needs_chromium
def test_the_site_opens_from_file_with_search_working(site, tmp_path):
    word = "Adafactor"  # in the generated optimizer reference only
    index = json.loads((site / "search" / "search_index.json").read_text())
    assert any(word in doc["text"] and doc["location"].startswith("reference/optimizers.html") for doc in index["docs"])
    # open_page takes a file; Material's search opens with the query in `?q=`, so a page of ours sends it there.
    start = tmp_path / "search.html"
    start.write_text(f"<script>location.replace({json.dumps((site / 'index.html').as_uri() + '?q=' + word)})</script>")
    opened = browser.open_page(start, budget_ms=8000, screenshot=tmp_path / "index.png")
    assert opened.requests == [], f"the site asked the network for {opened.requests}"
    assert "Getting started" in opened.dom and "Experiments" in opened.dom  # the page and its navigation rendered
    results = re.findall(r'class="md-search-result__item".*?href="([^"]+)"', opened.dom)
    assert any("reference/optimizers.html" in href for href in results), opened.dom[-3000:]


def test_written_pages_take_their_numbers_from_the_json():
    spec = importlib.util.spec_from_file_location("hooks", ROOT / "docs" / "hooks.py")  # as mkdocs loads it
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)

    out = {"experiment": "toy", "results": {"steps": {"mezo": 10000}, "shares": [0.49, 0.75], "rate": 0.0421}}
    said = hooks.filled(
        "MeZO ran {{ results.steps.mezo }} steps; {{results.shares}} of Adam's; {{ results.rate }}", out
    )
    assert said == "MeZO ran 10000 steps; 0.49–0.75 of Adam's; 0.042"
    assert hooks.filled("{{ results.shares.1 }}", out) == "0.75"
    with pytest.raises(ValueError, match=r"differences/toy.md: \{\{ results.steps.adam \}\} is not in assets/toy.json"):
        hooks.filled("{{ results.steps.adam }}", out)
    # every written page's placeholders are in its experiment's JSON
    for page in sorted((ROOT / "docs/experiments/differences").glob("*.md")):
        found = ROOT / "assets" / f"{page.stem}.json"
        if hooks.VALUE.search(page.read_text()) and found.exists():
            hooks.filled(page.read_text(), json.loads(found.read_text()))
