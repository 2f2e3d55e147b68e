"""Edge scores and circuits in and out of the graph format of EAP-IG (Hanna et al.; github.com/hannamw/EAP-IG,
`src/eap/graph.py` at 795f560: `Graph.to_json`, `from_json`, `to_pt`, `from_pt`), which is also what MIB's circuit
track takes as a submission (Mueller et al. 2025; github.com/hannamw/MIB-circuit-track at b759df3,
`MIB_circuit_track/circuit_loading.py`: one .json or .pt file of importance scores per model and task, or one file
per edge budget with membership only).

The JSON form:

    {"cfg":   {"n_layers": 2, "n_heads": 2, "parallel_attn_mlp": false, "d_model": 16},
     "nodes": {"input": {"in_graph": true}, "a0.h0": {...}, "a0.h1": {...}, "m0": {...}, ..., "logits": {...}},
     "edges": {"input->a0.h0<q>": {"score": 0.12, "in_graph": true}, ..., "a0.h1->a1.h0<k>": {...},
               "a1.h1->m1": {...}, "m1->logits": {...}}}

and the .pt form (`to_eap_pt`): the same cfg, the sender names (`src_nodes`), the receiver names (`dst_nodes`,
"a0.h0<q>", ..., "m0", ..., "logits") and [sender, receiver] matrices `edges_scores` and `edges_in_graph` in
EAP-IG's order (its forward and backward indices), with `nodes_in_graph` per sender.

Names: mechsynth's "input", "L{l}H{h}", "MLP{l}", "logits" are EAP-IG's "input", "a{l}.h{h}", "m{l}", "logits"; a
head's q, k or v input is a suffix of the edge, so "L0H1->L1H0.k" is "a0.h1->a1.h0<k>".

Where the two graphs differ:
- Edges: with MLPs they are the same set: every sender into every later receiver, input->logits included, a layer's
  heads into its own MLP, no MLP into its own layer's MLP or heads, no node for biases. EAP-IG's graph always has the
  MLP nodes (its `Graph.from_model` does not read attn_only): of an attention-only model it also holds edges into and
  out of "m{l}", which mechsynth's graph lacks. They are not written here (EAP-IG's `from_json` leaves an edge the
  file does not list at score 0, out of the circuit), and are read only when they are what EAP-IG would hold for
  them: score 0, out of the circuit.
- Nodes: mechsynth's circuits are sets of edges. A node is written in the graph when an edge of the circuit leaves it
  or enters it (the logits always, as EAP-IG has them); on reading, nodes are checked by name and their membership is
  not used. EAP-IG's `evaluate_graph` first prunes (`Graph.prune`): edges out of a node that no edge enters and into
  one that no edge leaves; mechsynth's `faithfulness` keeps them. Node scores and neuron-level circuits have no
  counterpart here: a file with a neuron left out is refused.
- Scores: written as they are, sign included. EAP-IG scores with a loss (MIB: minus the logit difference, or the
  cross-entropy) and takes (corrupted - clean) · d loss, i.e. (clean - corrupted) · d metric, mechsynth's sign; it
  then divides by the number of examples on top of a batch-mean metric, so its scores are 1/N of mechsynth's on the
  same N examples: the same ranking. EAP-IG keeps scores in float32; this module writes and reads Python floats
  (float64).
- The input node: EAP-IG's is the token embeddings (`hook_embed`), mechsynth's the embeddings plus positions
  (`blocks.0.hook_resid_pre`): the same difference under resample ablation, not under zero or mean ablation.
- `cfg.d_model`: EAP-IG's `from_json` (and MIB's loader) need it and mechsynth's `Graph` does not know it: pass the
  model's (`d_model=model.cfg.d_model`) for a file they can read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Union

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from mechsynth import hooks
from mechsynth.circuits.graph import COMPONENTS, INPUT, LOGITS, Graph

EdgeScores = Optional[Float[Tensor, "edge"]]
EdgeMask = Optional[Bool[Tensor, "edge"]]


# --- names -------------------------------------------------------------------------------------------------------


def eap_node(name: str) -> str:
    """mechsynth's sender or receiver node as EAP-IG names it ("L0H1" -> "a0.h1", "MLP0" -> "m0"; q/k/v dropped)."""
    if name in (INPUT, LOGITS):
        return name
    if name.startswith("MLP"):
        return f"m{name[3:]}"
    layer, head = hooks.parse_head(name.split(".")[0])
    return f"a{layer}.h{head}"


def eap_edge_name(graph: Graph, edge: tuple[int, int]) -> str:
    """An edge of `graph.edge_list` as EAP-IG names it ("L0H1->L1H0.k" -> "a0.h1->a1.h0<k>")."""
    sender, receiver = graph.senders[edge[0]], graph.receivers[edge[1]]
    qkv = f"<{receiver.split('.')[1]}>" if "." in receiver else ""
    return f"{eap_node(sender)}->{eap_node(receiver)}{qkv}"


def _eap_nodes(n_layers: int, n_heads: int) -> list[str]:
    """EAP-IG's nodes in its order: the input, per layer its heads and its MLP, the logits."""
    out = [INPUT]
    for layer in range(n_layers):
        out += [f"a{layer}.h{h}" for h in range(n_heads)] + [f"m{layer}"]
    return out + [LOGITS]


def _eap_receivers(n_layers: int, n_heads: int) -> list[str]:
    """EAP-IG's receivers in its backward order (`Graph.get_dst_nodes`)."""
    out = []
    for layer in range(n_layers):
        out += [f"a{layer}.h{h}<{c}>" for c in COMPONENTS for h in range(n_heads)] + [f"m{layer}"]
    return out + [LOGITS]


def _eap_edges(n_layers: int, n_heads: int) -> list[tuple[str, str, str]]:
    """Every edge of EAP-IG's graph (`Graph.from_model`, attention before the MLP), in its order, as (edge name,
    sender, receiver with its <q|k|v>)."""
    out: list[tuple[str, str, str]] = []
    stream = [INPUT]
    for layer in range(n_layers):
        heads = [f"a{layer}.h{h}" for h in range(n_heads)]
        for node in stream:
            out += [(f"{node}->{head}<{c}>", node, f"{head}<{c}>") for head in heads for c in COMPONENTS]
        stream += heads
        out += [(f"{node}->m{layer}", node, f"m{layer}") for node in stream]
        stream.append(f"m{layer}")
    return out + [(f"{node}->{LOGITS}", node, LOGITS) for node in stream]


# --- to EAP-IG ---------------------------------------------------------------------------------------------------


def _check_lengths(graph: Graph, scores: EdgeScores, in_circuit: EdgeMask) -> None:
    n = len(graph.edge_list)
    for field, given in (("scores", scores), ("in_circuit", in_circuit)):
        if given is not None and len(given) != n:
            raise ValueError(f"{field}: {len(given)} values for a graph of {n} edges")


def _cfg(graph: Graph, d_model: Optional[int]) -> dict[str, Any]:
    cfg: dict[str, Any] = {"n_layers": graph.n_layers, "n_heads": graph.n_heads, "parallel_attn_mlp": False}
    return cfg if d_model is None else {**cfg, "d_model": int(d_model)}


def _nodes_in_circuit(graph: Graph, in_circuit: EdgeMask) -> dict[str, bool]:
    """Each EAP-IG node mechsynth's graph has: in the circuit when an edge of it leaves or enters it; the logits
    always (EAP-IG's LogitNode)."""
    touched = {INPUT: False, LOGITS: True} | {eap_node(s): False for s in graph.senders}
    if in_circuit is not None:
        for (s, r), kept in zip(graph.edge_list, in_circuit.tolist()):
            if kept:
                touched[eap_node(graph.senders[s])] = touched[eap_node(graph.receivers[r])] = True
    return {name: touched[name] for name in _eap_nodes(graph.n_layers, graph.n_heads) if name in touched}


def to_eap_json(
    graph: Graph, scores: EdgeScores, in_circuit: EdgeMask = None, *, d_model: Optional[int] = None
) -> dict[str, Any]:
    """`scores` and the circuit `in_circuit` (both over `graph.edge_list`) as EAP-IG's `Graph.to_json` writes a graph:
    every edge of mechsynth's graph, in EAP-IG's order, with "score" (none where `scores` is None: MIB's
    membership-only circuits) and "in_graph" (False for every edge where `in_circuit` is None)."""
    _check_lengths(graph, scores, in_circuit)
    index = {eap_edge_name(graph, e): i for i, e in enumerate(graph.edge_list)}
    score_list = None if scores is None else scores.detach().double().cpu().tolist()
    kept = [False] * len(index) if in_circuit is None else in_circuit.cpu().tolist()
    edges: dict[str, dict[str, Any]] = {}
    for name, _, _ in _eap_edges(graph.n_layers, graph.n_heads):
        if name in index:
            i = index[name]
            edges[name] = ({} if score_list is None else {"score": score_list[i]}) | {"in_graph": bool(kept[i])}
    nodes = {name: {"in_graph": v} for name, v in _nodes_in_circuit(graph, in_circuit).items()}
    return {"cfg": _cfg(graph, d_model), "nodes": nodes, "edges": edges}


def to_eap_pt(
    graph: Graph, scores: Float[Tensor, "edge"], in_circuit: EdgeMask = None, *, d_model: Optional[int] = None
) -> dict[str, Any]:
    """The same as EAP-IG's `Graph.to_pt` writes it: [sender, receiver] matrices in EAP-IG's order (for an
    attention-only model its MLP rows and columns stay 0 and out of the circuit), every edge out of the circuit where
    `in_circuit` is None."""
    _check_lengths(graph, scores, in_circuit)
    senders = _eap_nodes(graph.n_layers, graph.n_heads)[:-1]
    receivers = _eap_receivers(graph.n_layers, graph.n_heads)
    rows, cols = _cells(graph)
    edge_scores = torch.zeros(len(senders), len(receivers), dtype=scores.dtype)
    edges_in = torch.zeros(len(senders), len(receivers), dtype=torch.bool)
    edge_scores[rows, cols] = scores.detach().cpu()
    if in_circuit is not None:
        edges_in[rows, cols] = in_circuit.cpu()
    member = _nodes_in_circuit(graph, in_circuit)
    nodes_in = torch.tensor([member.get(n, False) for n in senders])
    return {
        "cfg": _cfg(graph, d_model),
        "src_nodes": senders,
        "dst_nodes": receivers,
        "edges_scores": edge_scores,
        "edges_in_graph": edges_in,
        "nodes_in_graph": nodes_in,
    }


def _cells(graph: Graph) -> tuple[Tensor, Tensor]:
    """Where each edge of `graph.edge_list` sits in EAP-IG's [sender, receiver] matrices: (rows, columns)."""
    row = {n: i for i, n in enumerate(_eap_nodes(graph.n_layers, graph.n_heads)[:-1])}
    col = {n: i for i, n in enumerate(_eap_receivers(graph.n_layers, graph.n_heads))}
    pairs = [eap_edge_name(graph, e).split("->") for e in graph.edge_list]
    return torch.tensor([row[s] for s, _ in pairs]), torch.tensor([col[r] for _, r in pairs])


# --- from EAP-IG -------------------------------------------------------------------------------------------------


def _check_cfg(cfg: Any, graph: Graph, d_model: Optional[int]) -> None:
    if not isinstance(cfg, dict):
        raise ValueError("cfg: not a mapping of the model's sizes")
    for field, ours in (("n_layers", graph.n_layers), ("n_heads", graph.n_heads), ("d_model", d_model)):
        if field not in cfg:
            if field == "d_model":
                continue
            raise ValueError(f"cfg.{field}: missing")
        if ours is not None and cfg[field] != ours:
            raise ValueError(f"cfg.{field}: the file's graph has {cfg[field]}, this model {ours}")
    if cfg.get("parallel_attn_mlp", False):
        raise ValueError("cfg.parallel_attn_mlp: true; mechsynth's graph has attention before the MLP in each block")


def _unknown(kind: str, name: str, graph: Graph) -> ValueError:
    mlp = "with MLPs" if graph.has_mlp else "attention-only"
    return ValueError(
        f"{kind}: {name!r} is no {kind[:-1]} of this model ({graph.n_layers} layers × {graph.n_heads} heads, {mlp})"
    )


def from_eap_json(
    data: dict[str, Any], graph: Graph, *, d_model: Optional[int] = None, dtype: Optional[torch.dtype] = None
) -> tuple[EdgeScores, EdgeMask]:
    """(scores, in_circuit) over `graph.edge_list` from a graph as EAP-IG's `Graph.to_json` writes it (or a dict of
    that JSON). Either is None where no edge has that field ("score": MIB's membership-only circuits). A file that
    does not fit the model (other sizes, a node or edge it lacks, an edge of it missing, a field on some edges only)
    is refused with a ValueError naming the field or the edge. `d_model`: checked against cfg.d_model when given.
    `dtype`: of the scores (default: torch's default dtype)."""
    if not isinstance(data, dict):
        raise ValueError("not an EAP-IG graph: expected a mapping with cfg, nodes and edges")
    for field in ("cfg", "nodes", "edges"):
        if field not in data:
            raise ValueError(f"{field}: missing (an EAP-IG graph has cfg, nodes and edges)")
    _check_cfg(data["cfg"], graph, d_model)
    ours_nodes = set(_eap_nodes(graph.n_layers, graph.n_heads))
    for name, node in data["nodes"].items():
        if name not in ours_nodes:
            raise _unknown("nodes", name, graph)
        neurons = node.get("neurons") if isinstance(node, dict) else None
        if neurons is not None and not all(neurons):
            raise ValueError(f"nodes[{name!r}].neurons: a neuron-level circuit; mechsynth's circuits are edges")
    index = {eap_edge_name(graph, e): i for i, e in enumerate(graph.edge_list)}
    theirs = {name for name, _, _ in _eap_edges(graph.n_layers, graph.n_heads)}
    edges = data["edges"]
    n = len(graph.edge_list)
    values: dict[str, list[Any]] = {"score": [None] * n, "in_graph": [None] * n}
    for name, edge in edges.items():
        if name not in theirs:
            raise _unknown("edges", name, graph)
        if not isinstance(edge, dict):
            raise ValueError(f"edges[{name!r}]: not a mapping with score and in_graph")
        if name not in index:  # an MLP edge of EAP-IG's graph of an attention-only model
            if edge.get("score", 0) != 0 or edge.get("in_graph", False):
                raise ValueError(f"edges[{name!r}]: scored or in the circuit, but this attention-only model has no MLP")
            continue
        for field in values:
            if field in edge:
                values[field][index[name]] = edge[field]
    for name in index:
        if name not in edges:
            raise ValueError(f"edges[{name!r}]: missing")
    out: list[Any] = []
    for field, got in values.items():
        present = [v is not None for v in got]
        if any(present) and not all(present):
            name = next(k for k, i in index.items() if got[i] is None)
            raise ValueError(f"edges[{name!r}].{field}: missing (other edges have it)")
        if not any(present):
            out.append(None)
        elif field == "score":
            out.append(torch.tensor([float(v) for v in got], dtype=dtype or torch.get_default_dtype()))
        else:
            out.append(torch.tensor([bool(v) for v in got], dtype=torch.bool))
    return out[0], out[1]


def from_eap_pt(
    data: dict[str, Any], graph: Graph, *, d_model: Optional[int] = None, dtype: Optional[torch.dtype] = None
) -> tuple[Float[Tensor, "edge"], Bool[Tensor, "edge"]]:
    """(scores, in_circuit) over `graph.edge_list` from what EAP-IG's `Graph.to_pt` saves; refused as
    `from_eap_json` refuses, and where a matrix entry that is no edge of this model is scored or in the circuit."""
    for field in ("cfg", "src_nodes", "dst_nodes", "edges_scores", "edges_in_graph"):
        if field not in data:
            raise ValueError(
                f"{field}: missing (EAP-IG's .pt graph has cfg, src_nodes, dst_nodes, edges_scores, "
                "edges_in_graph, nodes_in_graph)"
            )
    _check_cfg(data["cfg"], graph, d_model)
    senders = _eap_nodes(graph.n_layers, graph.n_heads)[:-1]
    receivers = _eap_receivers(graph.n_layers, graph.n_heads)
    for field, ours in (("src_nodes", senders), ("dst_nodes", receivers)):
        if list(data[field]) != ours:
            given = list(data[field])
            at = next((i for i, (a, b) in enumerate(zip(given, ours)) if a != b), min(len(given), len(ours)))
            raise ValueError(
                f"{field}[{at}]: {given[at] if at < len(given) else 'missing'!r}, "
                f"this model's is {ours[at] if at < len(ours) else 'none'!r}"
            )
    shape = (len(senders), len(receivers))
    for field in ("edges_scores", "edges_in_graph"):
        if tuple(data[field].shape) != shape:
            raise ValueError(f"{field}: shape {tuple(data[field].shape)}, this model's is {shape}")
    rows, cols = _cells(graph)
    scores, kept = data["edges_scores"], data["edges_in_graph"].bool()
    ours = torch.zeros(shape, dtype=torch.bool)
    ours[rows, cols] = True
    stray = ((scores != 0) | kept) & ~ours
    if stray.any():
        i, j = stray.nonzero()[0].tolist()
        field = "edges_scores" if scores[i, j] != 0 else "edges_in_graph"
        raise ValueError(
            f"{field}[{i}, {j}]: {senders[i]}->{receivers[j]} is scored or in the circuit, but is no edge of this model"
        )
    return scores[rows, cols].to(dtype or torch.get_default_dtype()).clone(), kept[rows, cols].clone()


# --- files -------------------------------------------------------------------------------------------------------


def save(
    path: Union[str, Path],
    graph: Graph,
    scores: EdgeScores,
    in_circuit: EdgeMask = None,
    *,
    d_model: Optional[int] = None,
) -> Path:
    """Write the scores and circuit where EAP-IG and MIB read them: `path` ending .json (`to_eap_json`) or .pt
    (`to_eap_pt`)."""
    path = Path(path)
    if path.suffix == ".json":
        path.write_text(json.dumps(to_eap_json(graph, scores, in_circuit, d_model=d_model)))
    elif path.suffix == ".pt":
        if scores is None:
            raise ValueError("scores: EAP-IG's .pt graph always holds scores (write membership only as .json)")
        torch.save(to_eap_pt(graph, scores, in_circuit, d_model=d_model), path)
    else:
        raise ValueError(f"{path}: EAP-IG graphs are .json or .pt files")
    return path


def load(
    path: Union[str, Path], graph: Graph, *, d_model: Optional[int] = None, dtype: Optional[torch.dtype] = None
) -> tuple[EdgeScores, EdgeMask]:
    """(scores, in_circuit) over `graph.edge_list` from an EAP-IG / MIB graph file (.json or .pt)."""
    path = Path(path)
    if path.suffix == ".json":
        return from_eap_json(json.loads(path.read_text()), graph, d_model=d_model, dtype=dtype)
    if path.suffix == ".pt":
        return from_eap_pt(torch.load(path, weights_only=True), graph, d_model=d_model, dtype=dtype)
    raise ValueError(f"{path}: EAP-IG graphs are .json or .pt files")


__all__ = ["eap_edge_name", "eap_node", "from_eap_json", "from_eap_pt", "load", "save", "to_eap_json", "to_eap_pt"]
