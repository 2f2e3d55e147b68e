"""The zoo of tracr-compiled programs (experiments/tracr_programs.py writes mechsynth/benchmark/tracr/*.{json,safetensors}):
each model loads through mechsynth's `hooked_transformer` and computes its RASP program, its stored truth is
the structural circuit of its stored weights, and exact edge patching (what `circuits.activation_patching`
computes for every edge: m(clean) - m(that one edge patched), here only for the true edges) leaves the metric
exactly where it is for each edge the file calls inert, under zero and resample ablation alike, and moves it
for each informative one. No jax: the weights are committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mechsynth import circuits

DATA = Path(__file__).parent.parent / "mechsynth" / "benchmark" / "tracr"
NAMES = sorted(p.stem for p in DATA.glob("*.json"))


def programs():
    """experiments/tracr_programs.py (its jax imports are inside the compiling functions)."""
    from experiments import tracr_programs

    return tracr_programs


def live_heads(sd: dict[str, torch.Tensor], layer: int) -> int:
    return int((sd[f"blocks.{layer}.attn.W_O"].abs().sum((1, 2)) > 0).sum())


def test_the_zoo_covers_what_it_claims():
    tp = programs()
    assert NAMES == sorted(tp.PROGRAMS) and len(NAMES) >= 6
    records = {name: json.loads((DATA / f"{name}.json").read_text()) for name in NAMES}
    assert {r["output"] for r in records.values()} == {"numerical", "categorical"}
    layers = {r["config"]["n_layers"] for r in records.values()}
    assert min(layers) == 1 and max(layers) == 6, layers
    several = [
        name
        for name in NAMES
        if any(live_heads(tp.load(name)[2], l) > 1 for l in range(records[name]["config"]["n_layers"]))
    ]
    assert len(several) >= 2, several  # some layer computes with more than one head
    assert any(r["inert"] for r in records.values())  # some true edge carries nothing the output uses


@pytest.mark.parametrize("name", NAMES)
def test_the_compiled_program_and_its_circuit(name):
    tp = programs()
    model, record, sd = tp.load(name)
    cfg = record["config"]
    clean, corrupted, mask, expected, metric = tp.patching_case(record)
    assert record["name"] == name and clean.shape == (tp.BATCH, record["N"]) and bool(mask[:, 0].any()) is False

    with torch.no_grad():
        logits = model(clean)
    if record["output"] == "categorical":
        assert torch.equal(logits.argmax(-1)[mask], expected[mask])
    else:
        assert float((logits[..., 0] - expected)[mask].abs().max()) < 1e-2
    # the counterfactual changes the output at some scored position
    assert any(
        a != b for r, s in zip(record["clean_outputs"], record["corrupted_outputs"]) for a, b in zip(r[1:], s[1:])
    )

    truth, off_path, dims = tp.structural_edges(
        {k: v.numpy() for k, v in sd.items()}, cfg["n_layers"], cfg["n_heads"], cfg["attn_only"]
    )
    assert truth == record["truth"] and off_path == record["structural_off_path"]
    assert {e: [record["residual_labels"][i] for i in d] for e, d in dims.items()} == record["carries"]

    inert, informative = list(record["inert"]), record["informative"]
    assert informative == [e for e in truth if e not in inert] and set(inert) <= set(truth)
    assert all(isinstance(why, str) and why for why in record["inert"].values())

    graph = circuits.Graph.of(model)
    index = graph.mask(truth).nonzero()[:, 0]
    assert [graph.edge_name(graph.edge_list[i]) for i in index.tolist()] == truth
    one_each = torch.zeros(len(truth), len(graph.edge_list), dtype=torch.bool)
    one_each[torch.arange(len(truth)), index] = True  # edge i (in truth's order: edge_list's) patched alone
    effects = {}
    for ablation in ("zero", "resample"):
        src = circuits.source(model, graph, clean, corrupted, ablation)
        none = torch.zeros(1, len(graph.edge_list), dtype=torch.bool)
        effect = circuits.metric_of(model, graph, clean, src, metric, none) - circuits.metric_of(
            model, graph, clean, src, metric, one_each
        )
        effects[ablation] = dict(zip(truth, effect.abs().tolist()))
    for e in inert:
        assert effects["zero"][e] < 1e-6 and effects["resample"][e] < 1e-6, (
            e,
            effects["zero"][e],
            effects["resample"][e],
        )
    for e in informative:  # well clear of float noise under one ablation at least
        assert max(effects["zero"][e], effects["resample"][e]) > 1e-3, (e, effects["zero"][e], effects["resample"][e])
