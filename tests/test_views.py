"""Offline circuitsvis views and task token labels."""

from __future__ import annotations

import html.parser
import json
import re

import pytest
import torch

from mechsynth import tasks
from mechsynth.analysis import views
from mechsynth.util import browser


def view(n: int = 2, labels=("a", "b", "c")) -> views.AttentionView:
    pattern = torch.softmax(torch.randn(n, len(labels), len(labels)), -1)
    return views.AttentionView("t", list(labels), pattern, [f"h{i}" for i in range(n)])


def props_of(page: str) -> list[list[dict]]:
    """The props passed to CircuitsVis.render on a page, grouped by view (div ids VIEW-PATTERN)."""
    calls = re.findall(r'CircuitsVis\.render\("([^"]+)-(\d+)", CircuitsVis\.AttentionPattern, (.*?)\);</script>', page)
    grouped: dict[str, list[dict]] = {}
    for view_id, _, props in calls:
        grouped.setdefault(view_id, []).append(json.loads(props.replace("<\\/", "</").replace("<\\!--", "<!--")))
    return list(grouped.values())


def test_bundle_is_inlined_once_and_cannot_end_its_script_early():
    js = views.bundle_js()
    assert "var CircuitsVis=" in js and "</script" not in js.lower() and "sourceMappingURL" not in js
    page = views.views_html([view(), view(3), view(1)])
    assert page.count("var CircuitsVis=") == 1
    scripts = []
    parser = html.parser.HTMLParser()
    parser.handle_starttag = lambda tag, attrs: scripts.append(tag) if tag == "script" else None
    parser.feed(page)
    assert len(scripts) == page.lower().count("</script>") == 1 + 2 + 3 + 1  # the bundle, then one per pattern
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "nothing loaded from the network"


def test_view_props_carry_patterns_tokens_and_names_even_with_hostile_labels():
    v = view(2, labels=("</script>", "<!--", "x"))
    page = views.views_html([v])
    [props] = props_of(page)
    assert all(p["tokens"] == ["</script>", "<!--", "x"] for p in props) and ">h0<" in page and ">h1<" in page
    assert torch.tensor([p["attention"] for p in props]) == pytest.approx(v.patterns, abs=1e-4)


def test_shape_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="do not match"):
        views.AttentionView("t", ["a", "b"], torch.zeros(1, 3, 3), ["h"])


def test_notebook_display_is_self_contained_and_ids_are_unique():
    a, b = views.show(view()), views.show([view(), view()])
    html_a, html_b = a._repr_html_(), b._repr_html_()
    assert "var CircuitsVis=" in html_a and len(props_of(html_b)) == 2
    ids = re.findall(r'id="(cv[^"]+)"', html_a + html_b)
    assert len(ids) == 6 and len(set(ids)) == 6


def test_token_labels_say_what_tokens_mean():
    g = torch.Generator().manual_seed(0)
    auto = tasks.make("automata", {"automaton": "dihedral", "n": 4, "length": 10})
    batch = auto.sample(2, g, split="eval")
    labels = auto.token_labels(batch.tokens[0])
    expect = [
        f"{auto.table.symbols[x]}→{auto.table.states[s]}"
        for x, s in zip(batch.tokens[0].tolist(), batch.truth["states"][0].tolist())
    ]
    assert labels == expect

    for name, params in (
        ("sparse_parity", {"n": 9, "k": 3, "encoding": "01"}),
        ("sparse_boolean", {"length": 9, "s": 2}),
    ):
        task = tasks.make(name, params)
        batch = task.sample(1, g, split="eval")
        labels = task.token_labels(batch.tokens[0])
        support = set(batch.truth["support"].tolist())
        assert labels[-1] == "?" and len(labels) == batch.tokens.shape[1]
        for i, (label, bit) in enumerate(zip(labels[:-1], batch.tokens[0, :-1].tolist())):
            assert label == f"{bit}{'*' if i in support else ''}"

    markov = tasks.make("markov_icl", {"k": 4, "length": 12})
    tokens = markov.sample(1, g).tokens[0]
    assert markov.token_labels(tokens) == [str(t) for t in tokens.tolist()]


# ---- circuitsvis's own views in a user's script: mechsynth.offline_html / save_html ----------------------------


def _circuitsvis_view():
    import circuitsvis.attention

    return circuitsvis.attention.attention_patterns(tokens=["a", "b", "c"], attention=torch.rand(2, 3, 3).softmax(-1))


def test_offline_html_inlines_the_bundle_in_place_of_circuitsvis_network_import(tmp_path):
    import mechsynth

    view = _circuitsvis_view()
    assert re.search(r'from\s*"https://unpkg\.com/', str(view)), "circuitsvis's own HTML imports from the network"
    for given in (view, str(view)):  # the view, or its HTML
        page = mechsynth.offline_html(given)
        # no script from anywhere: neither a src nor a module import of a URL (the bundle's own strings name
        # react's docs, which it never loads)
        assert not re.search(r'<script\b[^>]*\bsrc=|\bimport\s*\{[^}]*\}\s*from\s*["\']|import\(\s*["\']https?:', page)
        assert page.count(views.bundle_js()) == 1 and "const { render, AttentionPatterns } = CircuitsVis;" in page
    saved = mechsynth.save_html(view, tmp_path / "view.html")
    assert saved.read_text(encoding="utf-8").startswith("<!doctype html>")
    with pytest.raises(ValueError, match=r"^view: expected a circuitsvis view or its HTML \(str\(view\)\), got int"):
        mechsynth.offline_html(3)


@pytest.mark.smoke
@pytest.mark.skipif(
    browser.find_chromium() is None, reason="Chromium not found: install Debian's `chromium` package (.ci/run does)"
)
def test_offline_html_renders_in_headless_chromium_asking_the_network_nothing(tmp_path):
    import mechsynth

    opened = browser.open_page(mechsynth.save_html(_circuitsvis_view(), tmp_path / "view.html"), budget_ms=5000)
    assert opened.requests == [] and "<canvas" in opened.dom, opened.dom[-2000:]
