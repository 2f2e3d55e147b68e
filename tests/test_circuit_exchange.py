"""Edge scores and circuits through EAP-IG's and MIB's graph files (`mechsynth.circuits.exchange`): a round trip is
the identity, a file in EAP-IG's format written by hand reads as the edges it names, and a file that does not fit the
model is refused in one line naming what does not fit."""

from __future__ import annotations

import copy
import json
import re

import pytest
import torch

from mechsynth.circuits import exchange
from mechsynth.circuits.graph import Graph


def random_circuit(graph: Graph, seed: int = 0, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    n = len(graph.edge_list)
    return torch.randn(n, generator=g, dtype=dtype), torch.rand(n, generator=g) > 0.5


@pytest.mark.parametrize("graph", [Graph(2, 2, True), Graph(2, 2, False), Graph(3, 1, True)], ids=str)
def test_round_trip_is_identity(graph, tmp_path):
    scores, kept = random_circuit(graph)
    data = json.loads(json.dumps(exchange.to_eap_json(graph, scores, kept, d_model=16)))  # through the JSON text
    back, back_kept = exchange.from_eap_json(data, graph, d_model=16)
    assert torch.equal(back, scores) and torch.equal(back_kept, kept)
    # the edges written are mechsynth's, each once
    assert sorted(data["edges"]) == sorted(exchange.eap_edge_name(graph, e) for e in graph.edge_list)
    for suffix in (".json", ".pt"):
        back, back_kept = exchange.load(exchange.save(tmp_path / f"c{suffix}", graph, scores, kept), graph)
        assert torch.equal(back, scores) and torch.equal(back_kept, kept), suffix
    # float64 scores come back exactly when asked for in float64
    wide, _ = random_circuit(graph, dtype=torch.float64)
    for suffix in (".json", ".pt"):
        back, _ = exchange.load(exchange.save(tmp_path / f"w{suffix}", graph, wide, kept), graph, dtype=torch.float64)
        assert torch.equal(back, wide), suffix


def test_round_trip_of_membership_only_and_of_scores_only():
    """MIB's circuits per edge budget carry no scores; a file of scores alone has every edge out of the circuit."""
    graph = Graph(2, 2, True)
    scores, kept = random_circuit(graph)
    data = exchange.to_eap_json(graph, None, kept)
    assert all(set(edge) == {"in_graph"} for edge in data["edges"].values())
    back, back_kept = exchange.from_eap_json(data, graph)
    assert back is None and torch.equal(back_kept, kept)
    back, back_kept = exchange.from_eap_json(exchange.to_eap_json(graph, scores), graph)
    assert torch.equal(back, scores) and not back_kept.any()


# What EAP-IG's own code writes for a 1-layer, 1-head model with an MLP (src/eap/graph.py at 795f560:
# Graph.from_model({"n_layers": 1, "n_heads": 1, "parallel_attn_mlp": False, "d_model": 4}), scores and in_graph set
# edge by edge, then to_json), its nodes and edges in EAP-IG's order.
ONE_LAYER = {
    "cfg": {"n_layers": 1, "n_heads": 1, "parallel_attn_mlp": False, "d_model": 4},
    "nodes": {
        "input": {"in_graph": True},
        "a0.h0": {"in_graph": True},
        "m0": {"in_graph": True},
        "logits": {"in_graph": True},
    },
    "edges": {
        "input->a0.h0<q>": {"score": 0.5, "in_graph": True},
        "input->a0.h0<k>": {"score": -0.25, "in_graph": False},
        "input->a0.h0<v>": {"score": 2.0, "in_graph": True},
        "input->m0": {"score": 0.125, "in_graph": False},
        "a0.h0->m0": {"score": -1.5, "in_graph": True},
        "input->logits": {"score": 3.0, "in_graph": True},
        "a0.h0->logits": {"score": 0.0, "in_graph": False},
        "m0->logits": {"score": 1.0, "in_graph": True},
    },
}
# the same edges as mechsynth names them
ONE_LAYER_OURS = {
    "input->L0H0.q": (0.5, True),
    "input->L0H0.k": (-0.25, False),
    "input->L0H0.v": (2.0, True),
    "input->MLP0": (0.125, False),
    "L0H0->MLP0": (-1.5, True),
    "input->logits": (3.0, True),
    "L0H0->logits": (0.0, False),
    "MLP0->logits": (1.0, True),
}


def test_a_hand_written_eap_ig_graph_reads_as_the_edges_it_names():
    graph = Graph(1, 1, True)
    assert sorted(graph.edge_name(e) for e in graph.edge_list) == sorted(ONE_LAYER_OURS)  # the same edge set
    scores, kept = exchange.from_eap_json(copy.deepcopy(ONE_LAYER), graph, d_model=4)
    for name, (score, member) in ONE_LAYER_OURS.items():
        i = graph.edge_index(name)
        assert (float(scores[i]), bool(kept[i])) == (score, member), name
    # and written back, it is that file: the same cfg, nodes, edges, values and order
    written = exchange.to_eap_json(graph, scores, kept, d_model=4)
    assert written == ONE_LAYER
    assert list(written["nodes"]) == list(ONE_LAYER["nodes"]) and list(written["edges"]) == list(ONE_LAYER["edges"])
    pt = exchange.to_eap_pt(graph, scores, kept, d_model=4)  # EAP-IG's matrices: senders × receivers, its order
    assert pt["src_nodes"] == ["input", "a0.h0", "m0"]
    assert pt["dst_nodes"] == ["a0.h0<q>", "a0.h0<k>", "a0.h0<v>", "m0", "logits"]
    assert pt["edges_scores"].tolist() == [
        [0.5, -0.25, 2.0, 0.125, 3.0],
        [0.0, 0.0, 0.0, -1.5, 0.0],
        [0.0, 0.0, 0.0, 0.0, 1.0],
    ]
    assert pt["nodes_in_graph"].tolist() == [True, True, True]


def attention_only_from_eap_ig() -> dict:
    """What EAP-IG writes for a 1-layer, 1-head model it was told nothing about MLPs of: its graph always has m0,
    whose edges nobody scored."""
    data = copy.deepcopy(ONE_LAYER)
    for name in ("input->m0", "a0.h0->m0", "m0->logits"):
        data["edges"][name] = {"score": 0.0, "in_graph": False}
    data["nodes"]["m0"] = {"in_graph": False}
    return data


def test_an_attention_only_model_reads_eap_igs_unscored_mlp_edges_and_writes_none():
    graph = Graph(1, 1, False)
    scores, kept = exchange.from_eap_json(attention_only_from_eap_ig(), graph)
    assert [graph.edge_name(e) for e in graph.edge_list] == [
        "input->L0H0.q",
        "input->L0H0.k",
        "input->L0H0.v",
        "input->logits",
        "L0H0->logits",
    ]
    assert scores.tolist() == [0.5, -0.25, 2.0, 3.0, 0.0] and kept.tolist() == [True, False, True, True, False]
    written = exchange.to_eap_json(graph, scores, kept)
    assert "m0" not in written["nodes"] and not any("m0" in name for name in written["edges"])


def refused(data, graph=Graph(1, 1, True), **kw) -> str:
    with pytest.raises(ValueError) as info:
        exchange.from_eap_json(data, graph, **kw)
    message = str(info.value)
    assert "\n" not in message and message
    return message


def edited(change) -> dict:
    data = copy.deepcopy(ONE_LAYER)
    change(data)
    return data


@pytest.mark.parametrize(
    "change,graph,says",
    [
        (
            lambda d: d["cfg"].update(n_layers=2),
            Graph(1, 1, True),
            r"^cfg\.n_layers: the file's graph has 2, this model 1$",
        ),
        (lambda d: None, Graph(1, 2, True), r"^cfg\.n_heads: the file's graph has 1, this model 2$"),
        (lambda d: d["cfg"].pop("n_heads"), Graph(1, 1, True), r"^cfg\.n_heads: missing$"),
        (lambda d: d["cfg"].update(parallel_attn_mlp=True), Graph(1, 1, True), r"^cfg\.parallel_attn_mlp: "),
        (lambda d: d.pop("edges"), Graph(1, 1, True), r"^edges: missing"),
        (
            lambda d: d["nodes"].update({"a0.h3": {"in_graph": True}}),
            Graph(1, 1, True),
            r"^nodes: 'a0\.h3' is no node of this model",
        ),
        (
            lambda d: d["edges"].update({"m0->a0.h0<q>": {"score": 1.0, "in_graph": True}}),
            Graph(1, 1, True),
            r"^edges: 'm0->a0\.h0<q>' is no edge of this model \(1 layers × 1 heads, with MLPs\)$",
        ),
        (lambda d: d["edges"].pop("a0.h0->m0"), Graph(1, 1, True), r"^edges\['a0\.h0->m0'\]: missing$"),
        (
            lambda d: d["edges"]["input->logits"].pop("score"),
            Graph(1, 1, True),
            r"^edges\['input->logits'\]\.score: missing \(other edges have it\)$",
        ),
        (
            lambda d: (d.update(attention_only_from_eap_ig()), d["edges"]["m0->logits"].update(in_graph=True)),
            Graph(1, 1, False),
            r"^edges\['m0->logits'\]: scored or in the circuit, but this attention-only model has no MLP$",
        ),
        (
            lambda d: d["nodes"]["a0.h0"].update(neurons=[True, False, True, True]),
            Graph(1, 1, True),
            r"^nodes\['a0\.h0'\]\.neurons: a neuron-level circuit",
        ),
    ],
    ids=[
        "layers",
        "heads",
        "no-heads",
        "parallel",
        "no-edges",
        "unknown-node",
        "unknown-edge",
        "missing-edge",
        "some-scores",
        "mlp-edge-of-attn-only",
        "neurons",
    ],
)
def test_a_graph_that_does_not_fit_is_refused_in_one_line(change, graph, says):
    assert re.search(says, refused(edited(change), graph)), says


def test_d_model_is_checked_when_given():
    assert refused(copy.deepcopy(ONE_LAYER), d_model=8) == "cfg.d_model: the file's graph has 4, this model 8"


def test_pt_graphs_that_do_not_fit_are_refused_in_one_line(tmp_path):
    graph = Graph(1, 1, True)
    scores, kept = exchange.from_eap_json(copy.deepcopy(ONE_LAYER), graph)
    pt = exchange.to_eap_pt(graph, scores, kept, d_model=4)
    cases = [
        ({"src_nodes": ["input", "a0.h1", "m0"]}, r"^src_nodes\[1\]: 'a0\.h1', this model's is 'a0\.h0'$"),
        ({"edges_scores": torch.zeros(3, 4)}, r"^edges_scores: shape \(3, 4\), this model's is \(3, 5\)$"),
        (
            {"edges_scores": pt["edges_scores"].index_put((torch.tensor(2), torch.tensor(0)), torch.tensor(1.0))},
            r"^edges_scores\[2, 0\]: m0->a0\.h0<q> is scored or in the circuit, but is no edge of this model$",
        ),
    ]
    for change, says in cases:
        with pytest.raises(ValueError) as info:
            exchange.from_eap_pt({**pt, **change}, graph)
        assert re.search(says, str(info.value)), str(info.value)
    with pytest.raises(ValueError, match=r"\.txt: EAP-IG graphs are \.json or \.pt files$"):
        exchange.save(tmp_path / "c.txt", graph, scores)
