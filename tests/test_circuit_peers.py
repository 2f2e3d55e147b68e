"""mechsynth's EAP and EAP-IG edge scores against a published implementation, auto-circuit (Miller, Chughtai &
Saunders 2024; PyPI `auto-circuit` 1.0.1, github.com/UFO-101/auto-circuit), edge by edge, on the same TransformerLens 3
HookedTransformer in float64.

How auto-circuit is set up to compute what mechsynth computes:

- Its graph: `patchable_model(model, factorized=True, separate_qkv=True, slice_output="last_seq", seq_len=None)`: an
  edge from every sender to every later receiver, each head's q, k and v a receiver of its own, every position
  patched at once, the metric read at the last position. It reads per-head inputs from TransformerLens itself
  (`use_split_qkv_input`, `use_attn_result`, `use_hook_mlp_in`), where mechsynth rebuilds them inside hook_q/k/v; the
  two run on separate copies of the model with the same weights, so neither sees the other's hooks.
- Its nodes are mechsynth's: "Resid Start" (blocks.0.hook_resid_pre) = "input"; "A{l}.{h}" (attn.hook_result, without
  b_O) = "L{l}H{h}"; "MLP {l}" (hook_mlp_out, hook_mlp_in) = "MLP{l}"; "A{l}.{h}.Q/K/V" (hook_q/k/v_input) =
  "L{l}H{h}.q/k/v"; "Resid End" (the last hook_resid_post) = "logits". The edge sets are the same (asserted).
- EAP = `mask_gradient_prune_scores(grad_function="logit", answer_function="avg_diff", mask_val=0.0)`: d(-metric)/
  d(mask of edge u->v) at mask 0 (the clean run), where mask 1 makes v read u's ablated output: -(src_u - clean_u) ·
  dm/dx_v = (clean_u - src_u) · dm/dx_v, mechsynth's score, sign included (auto-circuit minimises the negated metric
  and patches toward the ablation: the two flips cancel). Neither takes |score| nor normalises beyond the metric's
  own batch mean (auto-circuit's avg_diff: the mean over prompts of the answer's logit minus the wrong answer's, at
  the last position; mechsynth is given that metric). Its docstring's claim that this equals its replication of
  Syed et al.'s EAP (`edge_attribution_patching_prune_scores`) is checked too.
- Ablations: mechsynth "resample" = RESAMPLE on the corrupt prompts; "mean" (each position's mean over the clean
  batch) = BATCH_TOKENWISE_MEAN on the clean prompts; "zero" = ZERO. Both ablate the input node as embeddings plus
  positions (blocks.0.hook_resid_pre).
- EAP-IG: auto-circuit has no EAP-IG on inputs. Its `integrated_grad_samples` interpolates every edge mask at once
  from 0 to 1 and sums the mask gradients at n + 1 points: each edge then reads (1 - α) of its sender's output in the
  partly patched run plus α of the ablated one, a different path (and an unnormalised sum), so it is not compared.
  Hanna et al.'s EAP-IG on inputs is built from auto-circuit's EAP instead: with the input node's output held at
  x_k = src + k/m (clean - src) (a hook on blocks.0.hook_resid_pre), the mask gradient at mask 0 is
  -(P_u - a_u(x_k)) · g_v(x_k) for patch sources P (a_u: u's output in that run), linear in P; so the gradient with P
  the ablation's sources minus the one with P the clean run's sources is (clean_u - src_u) · g_v(x_k), the k-th term,
  and mechsynth's eap_ig is their mean over k = 1..m (`ig_points="right"`) or k = 0..m-1 (`"left"`). (The EAP-IG
  authors' code, hannamw/EAP-IG, used k = 1..m in 2024 and uses k = 0..m-1 since commit 13c0033, Feb 2025, the
  version MIB pins: at few steps the two differ.)
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from mechsynth import circuits
from mechsynth.models.tl_compat import TL_MAJOR, TL_VERSION, hooked_model

pytestmark = pytest.mark.skipif(
    TL_MAJOR >= 4,
    reason="auto-circuit wraps TransformerLens 3's HookedTransformer; on "
    f"TransformerLens {TL_VERSION} mechsynth reads a TransformerBridge",
)

INSTALL = (
    "pip install --no-deps auto-circuit==1.0.1 && pip install attrs plotly blobfile "
    "(without --no-deps it also brings jax, dm-haiku, tracr and kaleido, which these tests do not use)"
)
# float64 throughout: the two implementations agree to ~1e-15 here; these bounds leave room for other BLAS builds
RTOL, ATOL = 1e-9, 1e-11
B, P, V = 5, 6, 10
IG_STEPS = 4
# (attn_only, normalization_type, positional_embedding_type)
KINDS = {"attn-only": (True, "LN", "standard"), "mlp": (False, "LN", "standard"), "rotary": (False, "LNPre", "rotary")}
ABLATIONS = ("resample", "mean", "zero")


def _alias_kv_cache() -> None:
    """auto-circuit 1.0.1 imports `transformer_lens.past_key_value_caching.HookedTransformerKeyValueCache`, which
    TransformerLens 3.9 has as `transformer_lens.cache.key_value_cache.TransformerLensKeyValueCache`. auto-circuit only
    uses it for its prefix cache (PromptDataLoader's kv_cache), which these tests leave off: the old names are given
    to the new class (in this process) so that auto-circuit imports, its code unchanged."""
    import transformer_lens

    try:
        import transformer_lens.past_key_value_caching  # noqa: F401

        return
    except ModuleNotFoundError:
        pass
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    alias = types.ModuleType("transformer_lens.past_key_value_caching")
    alias.HookedTransformerKeyValueCache = TransformerLensKeyValueCache  # type: ignore[attr-defined]
    sys.modules[alias.__name__] = alias
    if not hasattr(transformer_lens, "HookedTransformerKeyValueCache"):
        transformer_lens.HookedTransformerKeyValueCache = TransformerLensKeyValueCache  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def ac():
    """auto-circuit's pieces these tests call; a failure (not a skip) where it is missing on TransformerLens 3."""
    _alias_kv_cache()
    missing = None
    try:
        from auto_circuit.data import PromptDataLoader, PromptDataset
        from auto_circuit.prune_algos.edge_attribution_patching import edge_attribution_patching_prune_scores
        from auto_circuit.prune_algos.mask_gradient import mask_gradient_prune_scores
        from auto_circuit.types import AblationType
        from auto_circuit.utils.ablation_activations import src_ablations
        from auto_circuit.utils.graph_utils import patchable_model
    except ModuleNotFoundError as e:
        missing = str(e)
    if missing is not None:
        pytest.fail(
            f"auto-circuit, the peer these tests compare with, does not import on TransformerLens {TL_VERSION} "
            f"({missing}); install it: {INSTALL}",
            pytrace=False,
        )
    return types.SimpleNamespace(
        PromptDataLoader=PromptDataLoader,
        PromptDataset=PromptDataset,
        AblationType=AblationType,
        mask_gradient=mask_gradient_prune_scores,
        syed_eap=edge_attribution_patching_prune_scores,
        src_ablations=src_ablations,
        patchable_model=patchable_model,
    )


def build(kind: str, seed: int = 0):
    """2 layers × 2 heads (and MLPs), float64, every weight random and of order 1 (TransformerLens's own init gives
    logits too flat to tell a wrong gradient from a right one)."""
    attn_only, norm, positional = KINDS[kind]
    model = hooked_model(
        n_layers=2,
        n_heads=2,
        d_model=16,
        d_head=8,
        d_mlp=None if attn_only else 32,
        n_ctx=P,
        d_vocab=V,
        act_fn="gelu",
        attn_only=attn_only,
        normalization_type=norm,
        positional_embedding_type=positional,
        dtype=torch.float64,
    )
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3 + (1.0 if name.endswith(".w") else 0.0))
    return model.eval()


def data(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    clean, corrupt = torch.randint(V, (B, P), generator=g), torch.randint(V, (B, P), generator=g)
    answer = torch.randint(V, (B, 1), generator=g)
    wrong = (answer + 1 + torch.randint(V - 1, (B, 1), generator=g)) % V
    return clean, corrupt, answer, wrong


def logit_diff(answer, wrong):
    """mechsynth's metric (logits [copy, batch, pos, vocab] -> [copy]) equal to auto-circuit's avg_diff of the
    logits at the last position."""

    def metric(logits: torch.Tensor) -> torch.Tensor:
        last = logits[:, :, -1]
        right = last.gather(-1, answer[None].expand(last.shape[0], -1, -1))
        other = last.gather(-1, wrong[None].expand(last.shape[0], -1, -1))
        return (right - other).mean((1, 2))

    return metric


def node_name(ac_node: str) -> str:
    """auto-circuit's node name as mechsynth spells it ("A1.0.K" -> "L1H0.k", "MLP 0" -> "MLP0")."""
    if ac_node == "Resid Start":
        return "input"
    if ac_node == "Resid End":
        return "logits"
    if ac_node.startswith("MLP "):
        return "MLP" + ac_node[4:]
    layer, head, *qkv = ac_node[1:].split(".")
    return f"L{layer}H{head}" + (f".{qkv[0].lower()}" if qkv else "")


def edge_name(ac_edge: str) -> str:
    sender, receiver = ac_edge.split("->")
    return f"{node_name(sender)}->{node_name(receiver)}"


class Peer:
    """The model as auto-circuit sees it, with the batch as its one-batch dataloader."""

    def __init__(self, ac, kind: str, clean, corrupt, answer, wrong):
        self.ac = ac
        self.tl = build(kind)  # the same weights as mechsynth's copy
        self.tl.set_use_attn_result(True)
        self.tl.set_use_split_qkv_input(True)
        if not self.tl.cfg.attn_only:
            self.tl.set_use_hook_mlp_in(True)
        self.model = ac.patchable_model(
            self.tl,
            factorized=True,
            slice_output="last_seq",
            separate_qkv=True,
            seq_len=None,
            device=torch.device("cpu"),
        )
        self.loader = ac.PromptDataLoader(
            ac.PromptDataset(clean, corrupt, answer, wrong), seq_len=None, diverge_idx=0, batch_size=B, shuffle=False
        )
        self.batch = next(iter(self.loader))

    def ablation(self, ablation: str):
        """(AblationType, clean_corrupt) of mechsynth's ablation; "clean": the clean run's own outputs."""
        t = self.ac.AblationType
        return {
            "resample": (t.RESAMPLE, "corrupt"),
            "mean": (t.BATCH_TOKENWISE_MEAN, "clean"),
            "zero": (t.ZERO, None),
            "clean": (t.RESAMPLE, "clean"),
        }[ablation]

    def by_name(self, prune_scores) -> dict[str, float]:
        return {edge_name(e.name): float(e.prune_score(prune_scores)) for e in self.model.edges}

    def eap(self, ablation: str) -> dict[str, float]:
        kind, clean_corrupt = self.ablation(ablation)
        return self.by_name(
            self.ac.mask_gradient(
                self.model,
                self.loader,
                None,
                grad_function="logit",
                answer_function="avg_diff",
                mask_val=0.0,
                ablation_type=kind,
                clean_corrupt=clean_corrupt,
            )
        )

    def input_node(self, ablation: str) -> torch.Tensor:
        """The input node's ablated output, as auto-circuit computes it (row 0: "Resid Start")."""
        kind, clean_corrupt = self.ablation(ablation)
        tokens = self.batch.corrupt if clean_corrupt == "corrupt" else self.batch.clean
        return self.ac.src_ablations(self.model, tokens, kind)[0]

    def eap_ig_inputs(self, ablation: str, steps: int, points: str = "right") -> dict[str, float]:
        """Hanna et al.'s EAP-IG on inputs from auto-circuit's mask gradients (module docstring): the mean over
        k = 1..steps ("right"; "left": k = 0..steps-1) of [mask gradient, ablation's sources] - [mask gradient, the
        clean run's sources], the input node's output held at src + k/steps (clean - src)."""
        x_clean, x_src = self.input_node("clean"), self.input_node(ablation)
        total: dict[str, float] = {}
        for k in range(1, steps + 1) if points == "right" else range(steps):
            point = x_src + k / steps * (x_clean - x_src)

            def hold(t, hook, point=point):
                # auto-circuit computes the patch sources under torch.inference_mode: those runs keep their inputs
                return t if torch.is_inference_mode_enabled() else point

            with self.tl.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", hold)]):
                towards_src, towards_clean = self.eap(ablation), self.eap("clean")
            for name in towards_src:
                total[name] = total.get(name, 0.0) + (towards_src[name] - towards_clean[name]) / steps
        return total


def ours_by_name(graph: circuits.Graph, scores: torch.Tensor) -> dict[str, float]:
    return {graph.edge_name(e): float(s) for e, s in zip(graph.edge_list, scores)}


def assert_same(graph: circuits.Graph, ours: dict[str, float], theirs: dict[str, float]) -> None:
    missing, extra = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
    assert not missing and not extra, f"edges only mechsynth has: {missing}; only auto-circuit has: {extra}"
    names = [graph.edge_name(e) for e in graph.edge_list]
    torch.testing.assert_close(
        torch.tensor([ours[n] for n in names], dtype=torch.float64),
        torch.tensor([theirs[n] for n in names], dtype=torch.float64),
        rtol=RTOL,
        atol=ATOL,
    )


def setup(ac, kind: str, ablation: str):
    clean, corrupt, answer, wrong = data()
    model = build(kind)
    graph = circuits.Graph.of(model)
    src = circuits.source(model, graph, clean, corrupt, ablation)
    return model, graph, clean, src, logit_diff(answer, wrong), Peer(ac, kind, clean, corrupt, answer, wrong)


@pytest.mark.parametrize("kind", list(KINDS))
def test_same_edges_and_same_model(ac, kind):
    """auto-circuit's graph of the model is mechsynth's, edge for edge, and its copy computes the same logits."""
    model, graph, clean, _, _, peer = setup(ac, kind, "resample")
    theirs = {edge_name(e.name) for e in peer.model.edges}
    assert theirs == {graph.edge_name(e) for e in graph.edge_list}
    with torch.no_grad():
        torch.testing.assert_close(peer.model(clean), model(clean), rtol=0, atol=1e-12)


@pytest.mark.parametrize("ablation", ABLATIONS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_eap_equals_auto_circuit(ac, kind, ablation):
    model, graph, clean, src, metric, peer = setup(ac, kind, ablation)
    ours = ours_by_name(graph, circuits.attribution(model, graph, clean, src, metric, steps=1))
    assert max(abs(v) for v in ours.values()) > 0.05  # scores large enough that agreeing says something
    assert_same(graph, ours, peer.eap(ablation))


@pytest.mark.parametrize("kind", list(KINDS))
def test_eap_equals_auto_circuits_syed_replication(ac, kind):
    """auto-circuit's replication of Syed et al.'s EAP (gradients from TransformerLens backward hooks, activations
    from run_with_cache; resample ablation only) gives mechsynth's scores too."""
    model, graph, clean, src, metric, peer = setup(ac, kind, "resample")
    ours = ours_by_name(graph, circuits.attribution(model, graph, clean, src, metric, steps=1))
    assert_same(graph, ours, peer.by_name(ac.syed_eap(peer.model, peer.loader, None)))


@pytest.mark.parametrize("points", ["right", "left"])
@pytest.mark.parametrize("ablation", ABLATIONS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_eap_ig_on_inputs_equals_auto_circuit(ac, kind, ablation, points):
    model, graph, clean, src, metric, peer = setup(ac, kind, ablation)
    ours = circuits.discover("eap_ig", model, graph, clean, src, metric, ig_steps=IG_STEPS, ig_points=points)
    eap = circuits.attribution(model, graph, clean, src, metric, steps=1)
    assert float((ours - eap).abs().max()) > 0.05  # integrating moves the scores: this is no second EAP check
    assert_same(graph, ours_by_name(graph, ours), peer.eap_ig_inputs(ablation, IG_STEPS, points))
