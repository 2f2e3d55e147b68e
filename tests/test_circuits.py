"""Circuit discovery against known answers: the patched forward against TransformerLens's own runs and
patching utilities, and every method on a hand-set model whose circuit is known edge by edge."""

from __future__ import annotations

import math

import pytest
import torch
from transformer_lens import patching

from mechsynth import circuits
from mechsynth.circuits import forward
from mechsynth.circuits import gradient as attr
from mechsynth.circuits.patching import as_patch
from mechsynth.models import TransformerConfig
from mechsynth.models.tl_compat import TL_MAJOR, hooked_transformer
from mechsynth.tasks.base import Batch

from mechsynth.benchmark import zoo
from mechsynth.benchmark.zoo import planted_induction, repeated


def random_model(attn_only: bool, normalization: str, positional: str = "standard", seed: int = 0):
    """2 layers × 2 heads (and MLPs), every weight random: no structure to hide a wrong patch behind."""
    g = torch.Generator().manual_seed(seed)
    V, N, M, H = 10, 8, 16, 2
    cfg = TransformerConfig(
        n_layers=2,
        n_heads=H,
        d_model=M,
        d_head=M // H,
        attn_only=attn_only,
        normalization=normalization,
        positional=positional,
        d_mlp=4 * M,
    )
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.3  # noqa: E731
    sd = {"embed.W_E": r(V, M), "unembed.W_U": r(M, V), "unembed.b_U": r(V)}
    if positional == "standard":
        sd["pos_embed.W_pos"] = r(N, M)
    for layer in range(2):
        p = f"blocks.{layer}."
        sd |= {p + f"attn.W_{w}": r(H, M, M // H) for w in "QKV"} | {p + f"attn.b_{w}": r(H, M // H) for w in "QKV"}
        sd |= {p + "attn.W_O": r(H, M // H, M), p + "attn.b_O": r(M)}
        for ln in ["ln1"] + ([] if attn_only else ["ln2"]):
            if normalization == "LN":
                sd |= {p + ln + ".w": 1 + r(M), p + ln + ".b": r(M)}
        if not attn_only:
            sd |= {
                p + "mlp.W_in": r(M, 4 * M),
                p + "mlp.b_in": r(4 * M),
                p + "mlp.W_out": r(4 * M, M),
                p + "mlp.b_out": r(M),
            }
    if normalization == "LN":
        sd |= {"ln_final.w": 1 + r(M), "ln_final.b": r(M)}
    return hooked_transformer(cfg, V, V, N, sd)


def tokens(seed: int, batch: int = 4) -> torch.Tensor:
    return torch.randint(10, (batch, 8), generator=torch.Generator().manual_seed(seed))


def last_logit_diff(logits: torch.Tensor) -> torch.Tensor:
    return (logits[:, :, -1, 0] - logits[:, :, -1, 1]).mean(-1)


KINDS = [(False, "LN", "standard"), (True, "none", "standard"), (False, "LNPre", "rotary")]


@pytest.mark.parametrize("attn_only,normalization,positional", KINDS)
def test_patched_forward_agrees_with_transformer_lens(attn_only, normalization, positional):
    model = random_model(attn_only, normalization, positional)
    graph = circuits.Graph.of(model)
    clean, corrupted = tokens(1), tokens(2)
    src = circuits.source(model, graph, clean, corrupted, "resample")
    n = len(graph.edge_list)
    with torch.no_grad():
        same = forward.run(model, graph, clean, None, None, keep_inputs=True).logits[0]
        assert torch.allclose(same, model(clean), atol=1e-5)
        # every edge patched: every receiver reads what it reads on the corrupted input
        everything = forward.run(model, graph, clean, as_patch(graph, torch.ones(1, n, dtype=torch.bool)), src).logits[
            0
        ]
        assert torch.allclose(everything, model(corrupted), atol=1e-4)
    # node patching, against TransformerLens's own: each head's z from the corrupted run, in the clean run
    _, corrupted_cache = model.run_with_cache(corrupted)
    theirs = patching.get_act_patch_attn_head_out_all_pos(
        model, clean, corrupted_cache, lambda lg: last_logit_diff(lg[None])[0]
    )
    ours = circuits.activation_patching(model, graph, clean, src, last_logit_diff, level="node")
    m_clean = float(last_logit_diff(model(clean)[None])[0])
    for layer in range(2):
        for head in range(2):
            i = graph.senders.index(f"L{layer}H{head}")
            assert float(ours[i]) == pytest.approx(m_clean - float(theirs[layer, head]), abs=1e-4)


@pytest.mark.skipif(TL_MAJOR >= 4, reason="TransformerLens 4's bridge has no per-head query inputs to compare with")
def test_an_edge_into_one_query_against_transformer_lens_split_inputs():
    """TL 3's use_split_qkv_input gives each head its own query input: adding the edge's difference there is
    patching that one edge."""
    model = random_model(False, "LN")
    graph = circuits.Graph.of(model)
    clean, corrupted = tokens(1), tokens(2)
    src = circuits.source(model, graph, clean, corrupted, "resample")
    out = forward.sender_outputs(model, graph, clean)
    edge = graph.edge_index("L0H1->L1H0.q")
    with torch.no_grad():
        ours = forward.run(
            model, graph, clean, as_patch(graph, torch.eye(len(graph.edge_list), dtype=torch.bool)[edge][None]), src
        ).logits[0]
        model.set_use_split_qkv_input(True)
        try:

            def shift(t, hook):
                t = t.clone()
                t[:, :, 0] += src[2] - out[2]
                return t

            theirs = model.run_with_hooks(clean, fwd_hooks=[("blocks.1.hook_q_input", shift)])
        finally:
            model.set_use_split_qkv_input(False)
    assert torch.allclose(ours, theirs, atol=1e-5) and not torch.allclose(ours, model(clean), atol=1e-3)


@pytest.mark.parametrize("normalization", ["LN", "LNPre", "none"])
def test_heads_gradients_through_ln1_by_hand_equal_autograds(normalization):
    """An unpatched run takes each head's input's gradient back through W and LN1 by hand (gradient.Gradients).
    Patching the edges into one layer's heads to the run's own outputs (by zero) rebuilds those inputs instead,
    and autograd gives their gradients directly (the paths through later layers are left alone): the two agree
    on every such edge's product with the senders' differences."""
    model = random_model(False, normalization)
    graph = circuits.Graph.of(model)
    clean = tokens(1)
    out = forward.sender_outputs(model, graph, clean)
    diff = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    by_hand = attr.gradients(model, graph, clean, last_logit_diff)
    heads = [[r for r, name in enumerate(graph.receivers) if name.startswith(f"L{layer}H")] for layer in range(2)]
    assert [sorted(receivers) for receivers, _, _ in by_hand.parts[1:]] == heads  # the readers', then each layer's
    for layer in range(2):
        into = torch.tensor([graph.receivers[r].startswith(f"L{layer}H") for _, r in graph.edge_list])
        rebuilt = attr.gradients(model, graph, clean, last_logit_diff, None, None, as_patch(graph, into[None]), out)
        assert set(heads[layer]) <= set(rebuilt.parts[0][0])  # rebuilt: autograd's, beside the readers'
        torch.testing.assert_close(
            attr.on_edges(graph, by_hand.dot(diff))[into], attr.on_edges(graph, rebuilt.dot(diff))[into]
        )


def test_attribution_is_the_first_order_term_of_patching():
    """With a tiny source difference, EAP's estimate equals exact edge patching (to second order)."""
    model = random_model(False, "LN")
    graph = circuits.Graph.of(model)
    clean = tokens(1)
    out = forward.sender_outputs(model, graph, clean)
    src = out + 1e-3 * torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
    exact = circuits.activation_patching(model, graph, clean, src, last_logit_diff)
    eap = circuits.attribution(model, graph, clean, src, last_logit_diff)
    assert torch.allclose(eap, exact, atol=2e-5, rtol=1e-2)


# ---- a planted induction circuit (mechsynth.benchmark.zoo) ------------------------------------------------


@pytest.mark.parametrize("method", circuits.METHODS)
def test_every_method_recovers_the_planted_circuit(method):
    model, truth_names = planted_induction()
    graph = circuits.Graph.of(model)
    clean, corrupted = repeated(1), repeated(2)
    metric = circuits.patch_metric("logit_diff", clean, corrupted)
    src = circuits.source(model, graph, clean.tokens, corrupted.tokens, "resample")
    truth = graph.mask(truth_names)
    scores = circuits.discover(method, model, graph, clean.tokens, src, metric)
    assert circuits.auc(scores, truth) == 1.0, [
        (graph.edge_name(e), float(s)) for e, s in zip(graph.edge_list, scores) if s
    ]
    found = circuits.circuit(model, graph, clean.tokens, src, metric, scores, level=0.9)
    assert torch.equal(found.edges, truth) and found.faithfulness == pytest.approx(1.0, abs=1e-5)
    assert found.curve[len(truth_names) - 2] < 0.9  # one edge fewer falls short


@pytest.mark.parametrize("ablation,extra", [("mean", []), ("zero", ["input->L0H{p}.q", "input->L0H{p}.k"])])
def test_ablations_move_the_planted_circuit_where_they_should(ablation, extra):
    """Mean ablation keeps each position's embedding, so the previous-token head still finds its key; zero
    ablation removes positions, and the edges carrying them join the circuit."""
    model, truth_names = planted_induction()
    p = truth_names[0].split("->L0H")[1][0]
    graph = circuits.Graph.of(model)
    clean, corrupted = repeated(1), repeated(2)
    metric = circuits.patch_metric("logit_diff", clean, corrupted)
    src = circuits.source(model, graph, clean.tokens, corrupted.tokens, ablation)
    scores = circuits.discover("patching", model, graph, clean.tokens, src, metric)
    truth = graph.mask(truth_names + [e.format(p=p) for e in extra])
    assert bool((scores[truth].abs() > 1e-3).all()) and bool((scores[~truth].abs() < 1e-5).all())


def test_metrics_and_faithfulness_on_known_values():
    clean = Batch(
        torch.zeros(2, 3, dtype=torch.long),
        torch.tensor([[0, 1, 2], [1, 1, 0]]),
        torch.tensor([[False, True, True], [False, True, True]]),
    )
    corrupted = Batch(clean.tokens, torch.tensor([[0, 2, 2], [1, 0, 0]]), clean.mask)
    logits = torch.zeros(1, 2, 3, 3)
    logits[0, 0, 1] = torch.tensor([0.0, 3.0, 1.0])  # position 1 of sequence 0: right 3, wrong 1
    logits[0, 1, 1] = torch.tensor([2.0, 0.0, 0.0])  # sequence 1: right 0, wrong 2
    assert float(circuits.patch_metric("logit_diff", clean, corrupted)(logits)[0]) == pytest.approx((2 - 2) / 2)
    minus_loss = circuits.patch_metric("loss", clean, corrupted)(logits)[0]
    expected = -torch.nn.functional.cross_entropy(logits[0][clean.mask], clean.targets[clean.mask])
    assert float(minus_loss) == pytest.approx(float(expected))
    with pytest.raises(ValueError, match="changes the answer"):
        circuits.patch_metric("logit_diff", clean, clean)
    assert circuits.auc(torch.tensor([3.0, -2.0, 1.0, 0.0]), torch.tensor([True, True, False, False])) == 1.0
    assert circuits.auc(torch.tensor([1.0, 1.0]), torch.tensor([True, False])) == 0.5
    assert math.isnan(circuits.auc(torch.tensor([1.0]), torch.tensor([True])))


def test_models_circuit_discovery_cannot_read_are_named():
    from mechsynth import models
    from mechsynth.tasks import make

    task = make("sparse_parity", {"n": 8, "k": 2})
    mlp = models.build(models.MLPConfig(), task.spec)
    assert "per-head hooks" in circuits.why_not(mlp)
    assert circuits.why_not(random_model(False, "LN")) is None


# ---- tracr-compiled programs ---------------------------------------------------------------------------


def tracr_case(name: str):
    """(model, clean tokens, corrupted tokens, metric, {ablation: true edges}) of a tracr-compiled program of the zoo:
    its structural circuit less its inert edges (who writes what the other reads, on a path to the output) under
    zero ablation; under resample ablation, also without the edges that carry only what the counterfactual keeps
    (positions, BOS, tracr's constant dimension), which then have no effect."""
    case = zoo.tracr_case(name)
    _, record = zoo.tracr_model(name)
    model = next(case.checkpoints())[1]
    return model, case.clean, case.corrupted, case.metric, {"zero": case.truth, "resample": zoo.resample_truth(record)}


@pytest.mark.parametrize("name", ["frac_prevs", "detect_pattern"])
@pytest.mark.parametrize("method", circuits.METHODS)
def test_every_method_recovers_tracr_compiled_circuits(name, method):
    model, clean, corrupted, metric, truths = tracr_case(name)
    graph = circuits.Graph.of(model)
    for ablation, truth_names in truths.items():
        truth = graph.mask(truth_names)
        src = circuits.source(model, graph, clean, corrupted, ablation)
        scores = circuits.discover(method, model, graph, clean, src, metric)
        assert circuits.auc(scores, truth) == 1.0, (
            ablation,
            [(graph.edge_name(e), float(s)) for e, s in zip(graph.edge_list, scores)],
        )
        found = circuits.circuit(model, graph, clean, src, metric, scores, level=0.9)
        # every true edge ranks first, so the circuit holds true edges only; under zero ablation a method's order can
        # reach the level before the last true edge (eap_ig_activations: 3 of detect_pattern's 7 keep all of it)
        assert not (found.edges & ~truth).any() and found.faithfulness >= 0.9, ablation
        if method == "patching":
            assert torch.equal(found.edges, truth) and found.faithfulness == pytest.approx(1.0, abs=1e-4), ablation
