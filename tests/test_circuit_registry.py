"""Circuit-discovery methods as a registry: every registered method (test_circuits.py runs each on the planted and
tracr-compiled circuits) estimates the edges' exact effects to first order, options are checked before any work, a
method registered outside mechsynth reaches the circuit probe, and MIB's curve areas equal a hand computation on
the planted induction circuit."""

from __future__ import annotations

import pytest
import torch
from planted import planted_majority_model

from mechsynth import circuits, probes, tasks
from mechsynth.benchmark.zoo import planted_induction, repeated
from mechsynth.circuits import forward
from mechsynth.circuits import gradient as attr
from mechsynth.errors import ConfigError

GRADIENT = ["eap", "eap_ig", "clean_corrupted"]


@pytest.fixture(scope="module")
def induction():
    model, truth = planted_induction()
    graph = circuits.Graph.of(model)
    clean, corrupted = repeated(1), repeated(2)
    metric = circuits.patch_metric("logit_diff", clean, corrupted)
    return (
        model,
        graph,
        clean.tokens,
        circuits.source(model, graph, clean.tokens, corrupted.tokens, "resample"),
        metric,
        truth,
    )


@pytest.mark.parametrize("method", GRADIENT)
def test_gradient_methods_are_exact_patching_to_first_order(method):
    """With a source a hair from the clean run, every point on the path is the clean run: each gradient method's
    score is the first-order term of the exact effect."""
    from test_circuits import last_logit_diff, random_model, tokens

    model = random_model(False, "LN")
    graph = circuits.Graph.of(model)
    clean = tokens(1)
    out = forward.sender_outputs(model, graph, clean)
    src = out + 1e-3 * torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
    exact = circuits.discover("patching", model, graph, clean, src, last_logit_diff)
    ours = circuits.discover(method, model, graph, clean, src, last_logit_diff)
    assert torch.allclose(ours, exact, atol=2e-5, rtol=1e-2)


def test_ig_on_activations_batched_equals_each_point_alone(induction):
    """The groups run as copies of the batch, several per forward, each group's output set in its copy; one at a
    time, with every edge out of the group patched instead (its receivers' inputs rebuilt), they give the same."""
    model, graph, tokens, src, metric, _ = induction
    steps = 3
    batched = attr.along_activations(model, graph, tokens, src, metric, steps)
    clean = forward.sender_outputs(model, graph, tokens)
    groups = attr.sender_groups(graph)
    assert [[graph.senders[i] for i in g] for g in groups] == [
        ["input"],
        ["L0H0", "L0H1", "L0H2"],
        ["L1H0", "L1H1", "L1H2"],
    ]
    total = 0
    for group in groups:
        out_of = torch.tensor([s in group for s, _ in graph.edge_list])
        for k in range(1, steps + 1):
            point = src + k / steps * (clean - src)
            patch = circuits.patching.as_patch(graph, out_of[None])
            total += attr.gradients(model, graph, tokens, metric, None, None, patch, point).dot(clean - src)
    assert torch.allclose(batched, attr.on_edges(graph, total) / (len(groups) * steps), atol=1e-5, rtol=1e-4)


def test_ig_on_activations_cuts_the_gradient_through_the_group_it_sets():
    """MIB's definition: with one step (every group set to its clean output), an edge into the logits, downstream
    of every group, scores as EAP; an edge into layer 0 reads a gradient whose paths through layer 0's heads and
    MLP are cut in their runs, so it differs."""
    from test_circuits import last_logit_diff, random_model, tokens

    model = random_model(False, "LN")
    graph = circuits.Graph.of(model)
    clean = tokens(1)
    src = circuits.source(model, graph, clean, tokens(2), "resample")
    eap = circuits.discover("eap", model, graph, clean, src, last_logit_diff)
    ours = attr.along_activations(model, graph, clean, src, last_logit_diff, 1)
    into = lambda name: torch.tensor([graph.receivers[r] == name for _, r in graph.edge_list])  # noqa: E731
    assert torch.allclose(ours[into("logits")], eap[into("logits")], atol=1e-6)
    assert not torch.allclose(ours[into("MLP0")], eap[into("MLP0")], atol=1e-6)


def test_options_are_checked_before_any_work(induction):
    model, graph, tokens, src, metric, _ = induction
    with pytest.raises(ConfigError, match=r"circuit\.eap_ig\.ig_steps"):
        circuits.discover("eap_ig", model, graph, tokens, src, metric, ig_steps=1)
    with pytest.raises(ConfigError, match="takes no options; got ig_steps"):
        circuits.discover("eap", model, graph, tokens, src, metric, ig_steps=8)
    with pytest.raises(ConfigError, match=r"circuit\.acdc.*unknown|circuit\.acdc\.steps"):
        circuits.discover("acdc", model, graph, tokens, src, metric, steps=3)
    with pytest.raises(ConfigError, match="unknown circuit method 'nope'"):
        circuits.discover("nope", model, graph, tokens, src, metric)
    assert circuits.declared("acdc", {"ig_steps": 4, "threshold": 0.1}) == {"threshold": 0.1}


def test_a_method_registered_outside_mechsynth_reaches_the_probe():
    """A method of yours (here: scores that favour the planted majority circuit's edges) is named like a built-in
    one in the circuit probe's options, and its circuit is the planted one."""
    task = tasks.make("sparse_boolean", {"length": 12, "s": 3, "function": "majority", "seed": 4})
    model, h = planted_majority_model(task)
    want = {f"input->L0H{h}.v", f"L0H{h}->logits"}

    @circuits.register_method("test_oracle", cost="none")
    def oracle(model, graph, tokens, src, metric, options):
        return torch.tensor([float(graph.edge_name(e) in want) for e in graph.edge_list])

    try:
        result = probes.run("circuit", model, task, option={"method": "test_oracle"}, batch_size=32)
        assert {k[3:] for k, v in result.metrics.items() if k.startswith("in/") and v == 1} == want
        assert result.metrics["faithfulness"] == pytest.approx(1.0, abs=1e-4) and result.metrics["cpr"] > 0.5
    finally:
        circuits.METHODS._items.pop("test_oracle")


def test_mib_areas_equal_the_hand_computation(induction):
    """52 edges: MIB's budgets keep int(share × 52) = 0, 0, 0, 0, 1, 2, 5, 10, 26, 52 of them. Ranked first, the
    induction head's edge to the logits (its inputs all patched, it writes its corrupted output: f = 0) and the
    previous-token head's value input (read only through an edge then patched: f = 0), then the other three true
    edges: f = 0 up to 2 edges, 1 from 5. CPR = 0.05·½ + 0.1 + 0.3 + 0.5 = 0.925; CMD = 0.049 + 0.05·½ = 0.074.
    Ranked last (every other edge first): f = 0 until all 52, CPR = 0.5·½ = 0.25, CMD = 0.499 + 0.25 = 0.749."""
    model, graph, tokens, src, metric, truth = induction
    assert len(graph.edge_list) == 52
    p, i = truth[0].split("->")[1][:4], truth[-1].split("->")[0]
    first = [f"{i}->logits", f"input->{p}.v"] + [e for e in truth if e not in (f"{i}->logits", f"input->{p}.v")]
    scores = torch.zeros(52)
    for rank, name in enumerate(first):
        scores[graph.edge_index(name)] = 10.0 - rank
    curve = circuits.mib_curve(model, graph, tokens, src, metric, scores)
    assert curve.edges == [0, 0, 0, 0, 1, 2, 5, 10, 26, 52]
    assert curve.faithfulness == pytest.approx([0, 0, 0, 0, 0, 0, 1, 1, 1, 1], abs=1e-5)
    assert curve.cpr == pytest.approx(0.925, abs=1e-5) and curve.cmd == pytest.approx(0.074, abs=1e-5)
    last = circuits.mib_curve(model, graph, tokens, src, metric, 1.0 - graph.mask(truth).float())
    assert last.faithfulness == pytest.approx([0] * 9 + [1], abs=1e-5)
    assert last.cpr == pytest.approx(0.25, abs=1e-5) and last.cmd == pytest.approx(0.749, abs=1e-5)


def test_signed_selection_puts_edges_that_raise_the_metric_last():
    scores = torch.tensor([0.5, -3.0, 2.0, 0.0])
    assert circuits.top_edges(scores, 2).tolist() == [False, True, True, False]
    assert circuits.top_edges(scores, 2, absolute=False).tolist() == [True, False, True, False]


def test_bench_circuits_refuses_a_bad_request_in_one_line_before_any_work(tmp_path, capsys):
    from mechsynth.cli import main

    (tmp_path / "file").write_text("mine")
    for args, says in [
        (["--methods", "eap,nope"], "--methods: unknown circuit method 'nope'"),
        (["--methods", "eap_ig", "--set", "eap_ig.ig_steps=1"], "circuit.eap_ig.ig_steps"),
        (["--set", "acdc.threshold=0.1"], "--set acdc: options for method 'acdc', which is not run"),
        (["--set", "eap_ig"], "expected METHOD.OPTION=VALUE"),
        (["--size", "huge"], "--size: 'huge'; allowed: smoke, cpu, full"),
        (["--cases", "tracr_nope"], "no zoo case 'tracr_nope'"),
        (["--out", str(tmp_path / "file" / "sub")], "--out: cannot write"),
    ]:
        out = str(tmp_path / "bench") if "--out" not in args else args[-1]
        rc = main(["bench-circuits", "--methods", "eap", "--out", out, *args])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and err.count("\n") == 0 and says in err, (args, err)
    assert not (tmp_path / "bench").exists() and (tmp_path / "file").read_text() == "mine"
