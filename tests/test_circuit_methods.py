"""The circuit probe's results per method, side by side: probing again with another method keeps the earlier
result (probes.json `variants`), old probes.json files still load, the summary names each method's circuit against
the task's known one and says what the gap is, and the graph labels each edge by the input it feeds. Known
answer: the planted majority circuit of planted.py (input -> head.v, head -> logits; the support's positions)."""

from __future__ import annotations

import csv
import json
from typing import Any

import pytest
from matplotlib.figure import Figure

from mechsynth import probes, tasks
from mechsynth.analysis import timeline
from mechsynth.analysis.timeline import Timeline
from mechsynth.config import to_dict
from planted import planted_majority_model

probe_circuit = pytest.importorskip("mechsynth.probes.circuit")


@pytest.fixture(scope="module")
def planted():
    task = tasks.make("sparse_boolean", {"length": 12, "s": 3, "function": "majority", "seed": 4})
    model, h = planted_majority_model(task)
    return task, model, h


@pytest.fixture(scope="module")
def result(planted):
    """The circuit probe's result on the planted model per options, each computed once (a few seconds apiece)."""
    task, model, _ = planted
    done: dict[tuple, probes.ProbeResult] = {}

    def get(**options: Any) -> probes.ProbeResult:
        key = tuple(sorted(options.items()))
        if key not in done:
            done[key] = probes.run("circuit", model, task, option=options, batch_size=32)
        return done[key]

    return get


def _timeline(result, **options: Any) -> Timeline:
    """A one-checkpoint timeline holding the circuit probe's result with `options`, as probe_run records it."""
    metrics = {k: [v] for k, v in result(**options).metrics.items()}
    return Timeline(
        [10],
        [0.5],
        {"circuit": {}},
        {"circuit": metrics},
        {"circuit": {}},
        10,
        {"circuit": to_dict(probes.options("circuit", options))},
    )


def test_each_method_is_kept_beside_the_others_and_survives_a_reload(planted, result, tmp_path):
    h = planted[2]
    truth = {f"input->L0H{h}.v", f"L0H{h}->logits"}
    merged = _timeline(result, method="eap")
    for method, extra in (("patching", {}), ("eap_ig", {"ablation": "mean"}), ("eap", {})):
        merged = timeline.merge(merged, _timeline(result, method=method, **extra))
    kept = merged.results("circuit")
    assert list(kept)[0] == "eap" and set(kept) == {"eap", "patching", "eap_ig, ablation=mean"}, list(kept)
    for key, result in kept.items():  # every method finds the planted circuit
        found = {k[3:] for k, v in result["metrics"].items() if k.startswith("in/") and v[0] == 1}
        assert found == truth, (key, found)
    timeline.save(merged, tmp_path)
    back = timeline.load(tmp_path)
    assert back.results("circuit").keys() == kept.keys() and back.variants == merged.variants
    with open(tmp_path / timeline.CSV, newline="") as f:
        csv_probes = {row["probe"] for row in csv.DictReader(f)}
    assert {"circuit", "circuit[patching]", "circuit[eap_ig, ablation=mean]"} <= csv_probes


def test_a_probes_json_from_before_variants_loads_as_one_result(result, tmp_path):
    data = _timeline(result, method="eap").to_json()
    assert "variants" not in data["probes"]["circuit"]  # one result: written as before
    (tmp_path / timeline.JSON).write_text(json.dumps(data))
    old = timeline.load(tmp_path)
    assert list(old.results("circuit")) == ["eap"] and old.variants == {}


def test_the_summary_names_each_circuit_against_the_known_one_and_defines_the_gap(planted, result):
    task, _, h = planted
    tl = timeline.merge(_timeline(result, method="patching"), _timeline(result, method="eap"))
    lines = [line for line in timeline.summary(tl, task) if line.startswith("circuit ")]
    text = "\n".join(lines)
    assert lines[0].startswith("circuit          eap (resample ablation): 2 of ") and "keep 1.00 of the gap" in lines[0]
    for key in ("eap", "patching"):
        assert f"{key} edges, strongest first: " in text
        edges = next(line for line in lines if f"{key} edges" in line).split("first: ")[1].split(", ")
        assert set(edges) == {f"input->L0H{h}.v", f"L0H{h}->logits"}, edges
    assert "gap: m(clean) - m(every edge patched), m = logit_diff (the clean answer's logit minus" in text
    support = ", ".join(map(str, sorted(int(p) for p in task.support)))
    assert f"its truth says the answer reads positions {support}" in text and "(the same; AUC 1.00)" in text, text
    assert "None" not in text and "nan" not in text


def test_a_task_whose_truth_names_no_circuit_says_so(planted, result):
    task = planted[0]
    tl = _timeline(result, method="eap")
    for k in [k for k in tl.metrics["circuit"] if k.startswith(("known/", "effect/"))]:
        del tl.metrics["circuit"][k]  # as on markov_icl, whose truth names no positions
    line = [x for x in timeline.summary(tl, task) if "known circuit" in x][0]
    assert "sparse_boolean's truth names none" in line and "None" not in line


def test_the_graph_labels_each_circuit_edge_by_the_input_it_feeds():
    fig = Figure()
    ax = fig.add_subplot()
    names = ["input->L0H0.q", "input->L0H0.k", "input->L1H0.v", "L0H0->L1H0.k", "L0H0->L1H0.q", "L1H0->logits"]
    probe_circuit._graph_axes(ax, names, [1.0, 0.5, 0.8, 0.9, 0.1, 1.0], [1, 1, 1, 1, 0, 1], "g")
    letters = sorted(t.get_text() for t in ax.texts if t.get_text() in ("q", "k", "v"))
    assert letters == ["k", "k", "q", "v"]  # one per circuit edge into a head; none on the logits edge or a faint one
    colours = {line.get_color() for line in ax.lines}
    assert set(probe_circuit.PORT_COLOURS.values()) <= colours
