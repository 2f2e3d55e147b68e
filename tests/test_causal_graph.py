"""The causal_graph probe: its scores against plain loops over positions, keys and subsets; on hand-set models
(TransformerLens's previous-token/induction circuit on a chain, two heads splitting a DAG's parents); and on a
disentangled transformer trained on causal_icl, which learns the graph. (The planted known answer on a random
tree: tests/planted.py, known_causal_graph.)"""

from __future__ import annotations

import itertools
import math
import shutil

import pytest
import torch
from planted import planted_causal_graph_model, planted_induction_model

from mechsynth import load_run, models, parse_config, probes, tasks, train_run
from mechsynth.analysis import timeline
from mechsynth.analysis.timeline import Timeline
from mechsynth.probes.causal_graph import edge_recovery, graph_induction_targets, parent_auc


def _graph(params: dict) -> torch.Tensor:
    return tasks.make("causal_icl", {"roots": "uniform", **params}).graph.parents


def reference_scores(att: torch.Tensor, parents: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per head: expected edge recovery, averaging over every top-|parents(i)| key set that some tie-breaking
    picks (each equally likely under random tie-breaking), and the mean per-position AUC over (parent, other)
    pairs; plain loops."""
    H, T, _ = att.shape
    recovery, auc = [], []
    for h in range(H):
        found = edges = 0.0
        aucs = []
        for i in range(T):
            ps = {int(p) for p in parents[i] if p >= 0}
            if not ps:
                continue
            v = [float(att[h, i, j]) for j in range(i + 1)]
            picks = [
                set(s)
                for s in itertools.combinations(range(i + 1), len(ps))
                if min(v[j] for j in s) >= max([v[j] for j in range(i + 1) if j not in s], default=-math.inf)
            ]
            found += sum(len(s & ps) for s in picks) / len(picks)
            edges += len(ps)
            others = [j for j in range(i + 1) if j not in ps]
            wins = [1.0 if v[p] > v[n] else 0.5 if v[p] == v[n] else 0.0 for p in ps for n in others]
            aucs.append(sum(wins) / len(wins))
        recovery.append(found / edges)
        auc.append(sum(aucs) / len(aucs))
    return recovery, auc


@pytest.mark.parametrize(
    "params",
    [
        {"k": 3, "length": 9, "graph": "tree", "seed": 4},
        {"k": 3, "length": 9, "graph": "dag", "parents": 2, "seed": 1},
        {"k": 3, "length": 8, "graph": "chain", "target": "next"},
    ],
)
def test_scores_match_plain_loops(params):
    parents = _graph(params)
    g = torch.Generator().manual_seed(0)
    att = torch.randint(4, (3, params["length"], params["length"]), generator=g).float() / 4  # many ties
    want_recovery, want_auc = reference_scores(att, parents)
    torch.testing.assert_close(edge_recovery(att, parents), torch.tensor(want_recovery, dtype=torch.float64))
    torch.testing.assert_close(parent_auc(att, parents), torch.tensor(want_auc, dtype=torch.float64))
    assert len(set(want_recovery)) > 1  # (the heads differ: a test of something)


def test_uniform_attention_scores_chance():
    parents = _graph({"k": 3, "length": 12, "graph": "dag", "parents": 2, "seed": 3})
    uniform = (torch.ones(12, 12).tril() / torch.arange(1, 13)[:, None])[None]
    m = (parents[:12] >= 0).sum(-1).double()
    expected = float(
        (m * m / torch.arange(1, 13)).sum() / m.sum()
    )  # each of i's m_i edges: kept with chance m_i / (i + 1)
    assert float(edge_recovery(uniform, parents)) == pytest.approx(expected, abs=1e-12)
    assert float(parent_auc(uniform, parents)) == 0.5
    no_edges = torch.full((4, 1), -1)
    assert math.isnan(float(edge_recovery(uniform[:, :3, :3], no_edges)))


@pytest.mark.parametrize(
    "params",
    [
        {"k": 3, "length": 10, "graph": "tree", "seed": 2},
        {"k": 2, "length": 10, "graph": "dag", "parents": 2, "seed": 0, "target": "next"},
    ],
)
def test_graph_induction_targets_match_a_plain_loop(params):
    task = tasks.make("causal_icl", {"roots": "uniform", **params})
    batch = task.sample(16, torch.Generator().manual_seed(0), split="eval")
    parents = batch.truth["parents"][0]
    got = graph_induction_targets(batch.tokens, parents, batch.mask)
    T = batch.tokens.shape[1]
    for b in range(16):
        for t in range(T):
            node = parents[t + 1].tolist()
            for j in range(T):
                own = parents[j].tolist()
                want = (
                    bool(batch.mask[b, t])
                    and j <= t
                    and node[0] >= 0
                    and own[0] >= 0
                    and all(batch.tokens[b, p] == batch.tokens[b, q] for p, q in zip(own, node))
                )
                assert bool(got[b, t, j]) == want, (b, t, j)
    assert got.any()


def test_on_transformer_lens_a_previous_token_and_induction_circuit_is_the_chain():
    """On a chain, TransformerLens's planted previous-token head is the parent head and its induction head the
    graph-induction head."""
    task = tasks.make("causal_icl", {"k": 10, "length": 40, "graph": "chain", "roots": "uniform"})
    model, prev, ind = planted_induction_model(vocab=10, n_ctx=40, n_heads=4, seed=3)
    result = probes.run("causal_graph", model, task)
    m = result.metrics
    assert float(result.per_head[0, prev]) == 1.0 and m[f"auc/L0H{prev}"] == 1.0 and m["edges"] == 38, m
    assert max(float(v) for h, v in enumerate(result.per_head[0]) if h != prev) < 0.5, result.per_head
    assert m[f"graph_induction/L1H{ind}"] > 0.9 > m["graph_induction_chance"] * 5, m


def test_heads_summed_recover_a_dag_that_no_single_head_does():
    """Two parents per node, one head on each: each head finds half the edges (plus the ties' chance), the
    layer all of them."""
    task = tasks.make("causal_icl", {"k": 3, "length": 12, "graph": "dag", "parents": 2, "roots": "uniform", "seed": 5})
    parents = task.graph.parents
    model = models.build(models.parse({"kind": "disentangled", "n_layers": 1, "n_heads": 2}), task.spec)
    V, scored = 3, [i for i in range(12) if parents[i, 0] >= 0]
    with torch.no_grad():
        for h in range(2):
            for i in scored:
                model.blocks[0].attn.W_A[h, V + i, V + int(parents[i, h])] = 50.0
    result = probes.run("causal_graph", model, task)
    m = result.metrics
    per_head = sum((1 + 1 / i) / 2 for i in scored) / len(scored)  # the other parent ties with the i other keys
    assert result.per_head[0].tolist() == pytest.approx([per_head, per_head], abs=1e-6) and per_head < 0.9
    assert m["auc/L0H0"] == pytest.approx(0.75, abs=1e-6) and m["auc/L0H1"] == pytest.approx(0.75, abs=1e-6)
    assert m["edge_recovery_all"] == 1.0 and m["auc_all"] == 1.0 and m["edges"] == 2 * len(scored)
    assert not any(k.startswith("graph_induction") for k in m)  # one layer: no second layer to score


def test_applies_by_the_truth_parents():
    markov = tasks.make("markov_icl", {"k": 3, "length": 8})
    model = models.build(models.parse({"kind": "disentangled"}), markov.spec)
    assert "needs truth parents" in probes.why_not("causal_graph", model, markov)


def test_summary_section_and_wandb_read_the_timeline(wandb_plots):
    task = tasks.make("causal_icl", {"k": 5, "length": 32, "graph": "tree", "roots": "uniform", "seed": 3})
    planted, parent, ind = planted_causal_graph_model(task, n_heads=3, seed=1)
    start = models.build(models.parse({"kind": "disentangled", "n_heads": 3}), task.spec)  # zero: uniform
    results = [probes.run("causal_graph", m, task) for m in (start, planted)]
    steps = [0, 100]
    tl = Timeline(
        steps,
        [1.0, 0.5],
        {"causal_graph": {f"L0H{h}": [float(r.per_head[0, h]) for r in results] for h in range(3)}},
        {"causal_graph": {k: [r.metrics[k] for r in results] for k in results[-1].metrics}},
        {"causal_graph": {}},
        50,
    )
    tl = Timeline.from_json(tl.to_json())
    probe = probes.PROBES.get("causal_graph")
    lines = probe.summary(tl, task)
    assert len(lines) == 2 and f"L0H{parent} 1.00 (AUC 1.00)" in lines[0] and "at step 100" in lines[0], lines
    assert f"L1H{ind} 1.00" in lines[1] and "uniform:" in lines[1], lines
    assert probe.section.figure(tl, task) is not None

    probe.wandb(tl, wandb_plots)
    assert set(wandb_plots.plots) == {"plots/causal_graph_edges", "plots/causal_graph_induction"}
    assert all(len(v) == 2 for series in wandb_plots.plots.values() for v in series.values())


@pytest.mark.slow
def test_a_trained_disentangled_transformer_learns_the_graph(tmp_path, tiny):
    """400 steps of Adam on a random tree (a few seconds): layer 0 ends on every parent, layer 1 on the earlier
    children of the query token, far above where the zero init starts (uniform attention)."""
    data = tiny(
        {"name": "causal_icl", "k": 4, "length": 10, "roots": "uniform", "seed": 2},
        {"kind": "disentangled"},
        {
            "steps": 400,
            "batch_size": 64,
            "lr": 0.03,
            "optimizer": "adam",
            "grad_clip": 0,
            "eval_every": 400,
            "checkpoints": 6,
        },
    )
    run = load_run(train_run(parse_config(data), tmp_path / "run", progress=False))
    tl = timeline.probe_run(run, ["causal_graph"], batch_size=64)
    recovery, m = tl.per_head["causal_graph"]["L0H0"], tl.metrics["causal_graph"]
    assert recovery[0] < 0.3 and recovery[-1] == 1.0 and m["auc/L0H0"][-1] == 1.0, recovery
    assert tl.formation["causal_graph"]["L0H0"] is not None
    induction, chance = m["graph_induction/L1H0"], m["graph_induction_chance"][0]
    assert induction[0] == pytest.approx(chance, abs=1e-6) and induction[-1] > 0.8 > 2 * chance, (induction, chance)
    shutil.rmtree(tmp_path / "run")
