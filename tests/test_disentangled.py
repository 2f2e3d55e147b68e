"""The disentangled transformer (Nichani et al. 2024's CatFormer) against a plain per-position loop, against
TransformerLens's own model with its equivalent weights, side by side against separate models, and its config
and memory estimate."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import Tensor

from mechsynth import hooks, models, probes, tasks
from mechsynth.errors import ConfigError
from mechsynth.models.disentangled import DisentangledConfig
from mechsynth.models.tl_compat import hooked_transformer
from mechsynth.training.seeds import saved_activation_bytes


def reference(As: list[Tensor], W_U: Tensor, tokens: Tensor, d_vocab: int, n_ctx: int) -> tuple[Tensor, list[Tensor]]:
    """Logits [batch, pos, d_vocab_out] and each layer's attention [batch, head, query, key], one sequence, layer,
    head, query and key at a time in float64, from the paper's definition: h_0 = one-hot(token) ⊕ one-hot(pos);
    head output Σ_j softmax_j(h_i·A h_j) h_j over j ≤ i, appended to h_i; logits h_L W_U."""
    B, T = tokens.shape
    H = As[0].shape[0]
    patterns = [torch.zeros(B, H, T, T, dtype=torch.float64) for _ in As]
    logits = torch.zeros(B, T, W_U.shape[1], dtype=torch.float64)
    for b in range(B):
        h = []
        for i in range(T):
            v = torch.zeros(d_vocab + n_ctx, dtype=torch.float64)
            v[int(tokens[b, i])] = 1.0
            v[d_vocab + i] = 1.0
            h.append(v)
        for layer, A in enumerate(As):
            A = A.double()
            new = []
            for i in range(T):
                outs = []
                for head in range(H):
                    scores = [float(h[i] @ A[head] @ h[j]) for j in range(i + 1)]
                    top = max(scores)
                    e = [math.exp(s - top) for s in scores]
                    p = [x / sum(e) for x in e]
                    patterns[layer][b, head, i, : i + 1] = torch.tensor(p, dtype=torch.float64)
                    outs.append(sum(p[j] * h[j] for j in range(i + 1)))
                new.append(torch.cat([h[i], *outs]))
            h = new
        for i in range(T):
            logits[b, i] = h[i] @ W_U.double()
    return logits, patterns


def _task(length: int = 6, k: int = 3):
    return tasks.make("causal_icl", {"k": k, "length": length, "roots": "uniform"})


@pytest.mark.parametrize("n_layers, n_heads, n_ctx, seq", [(2, 2, None, 6), (1, 1, 9, 5), (3, 1, None, 6)])
def test_forward_and_hooks_match_a_plain_loop(n_layers, n_heads, n_ctx, seq):
    task = _task()
    cfg = DisentangledConfig(n_layers=n_layers, n_heads=n_heads, n_ctx=n_ctx, init_range=0.4, init_seed=7)
    model = models.build(cfg, task.spec)
    tokens = torch.randint(3, (3, seq), generator=torch.Generator().manual_seed(0))
    want, want_patterns = reference(
        [b.attn.W_A.detach() for b in model.blocks], model.unembed.W_U.detach(), tokens, 3, model.n_ctx
    )
    assert want_patterns[0].abs().sum() > 0 and want.abs().max() > 0.1  # (a test of something)
    torch.testing.assert_close(model(tokens).double(), want, atol=1e-4, rtol=1e-4)  # fused attention
    logits, cache = model.run_with_cache(tokens)  # unfused, hooked
    torch.testing.assert_close(logits.double(), want, atol=1e-4, rtol=1e-4)
    widths = [3 + model.n_ctx]
    for layer in range(n_layers):
        torch.testing.assert_close(
            cache[hooks.attn_pattern(layer)].double(), want_patterns[layer], atol=1e-5, rtol=1e-4
        )
        assert cache[hooks.resid_pre(layer)].shape == (3, seq, widths[-1])
        assert cache[f"blocks.{layer}.attn.hook_z"].shape == (3, seq, n_heads, widths[-1])
        scores = cache[f"blocks.{layer}.attn.hook_attn_scores"]
        assert scores.shape == (3, n_heads, seq, seq) and torch.isinf(scores.triu(1)[..., 0, 1:]).all()
        widths.append(widths[-1] * (1 + n_heads))
        assert cache[hooks.resid_post(layer)].shape == (3, seq, widths[-1])
    assert widths == model.widths == cfg.widths(dataclasses.replace(task.spec, n_ctx=model.n_ctx))


def test_zero_init_attends_uniformly_and_only_the_readout_learns_first():
    """The paper's init: every weight zero, so attention is uniform over the prefix and the logits zero; the
    first gradient reaches the readout only (A's gradient passes through W_U = 0)."""
    task = _task(length=8)
    model = models.build(DisentangledConfig(), task.spec)
    assert all(float(p.detach().abs().sum()) == 0 for p in model.parameters())
    batch = task.sample(16, torch.Generator().manual_seed(0))
    logits, cache = model.run_with_cache(batch.tokens)
    assert float(logits.detach().abs().max()) == 0
    uniform = torch.ones(8, 8).tril() / torch.arange(1, 9)[:, None]
    for layer in range(2):
        torch.testing.assert_close(cache[hooks.attn_pattern(layer)], uniform.expand(16, 1, 8, 8))
    torch.nn.functional.cross_entropy(model(batch.tokens)[:, -1], batch.targets[:, -1]).backward()
    assert model.unembed.W_U.grad.abs().sum() > 0
    assert all(float(b.attn.W_A.grad.abs().sum()) == 0 for b in model.blocks)


def test_side_by_side_equals_separate_models():
    task = _task(length=7)
    cfg = DisentangledConfig(n_layers=2, n_heads=2, init_range=0.3, init_seed=5)
    stacked = models.build(cfg, task.spec, n_models=3)
    singles = [models.build(dataclasses.replace(cfg, init_seed=5 + i), task.spec) for i in range(3)]
    for name, p in stacked.named_parameters():
        for i, s in enumerate(singles):
            assert torch.equal(p[i], s.get_parameter(name)), name
    shared = torch.randint(3, (4, 7), generator=torch.Generator().manual_seed(1))
    own = torch.randint(3, (3, 4, 7), generator=torch.Generator().manual_seed(2))
    hook = hooks.attn_pattern(1)
    logits, cache = stacked.run_with_cache(shared, names_filter=[hook, "blocks.1.attn.hook_z"])
    assert logits.shape == (3, 4, 7, 3) and cache[hook].shape == (12, 2, 7, 7)
    for i, s in enumerate(singles):
        ref_logits, ref = s.run_with_cache(shared, names_filter=[hook, "blocks.1.attn.hook_z"])
        torch.testing.assert_close(logits[i], ref_logits, atol=1e-5, rtol=1e-5)
        for name in (hook, "blocks.1.attn.hook_z"):
            torch.testing.assert_close(cache[name][4 * i : 4 * (i + 1)], ref[name], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(stacked(own)[i], s(own[i]), atol=1e-5, rtol=1e-5)
        for w in ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U"):  # the weight views, per model
            assert torch.equal(getattr(stacked, w)[i], getattr(s, w)), w


@pytest.mark.parametrize("n_layers, n_heads", [(2, 1), (2, 3), (1, 2)])
def test_it_is_an_attention_only_transformer_lens_model(n_layers, n_heads):
    """TransformerLens's own model (HookedTransformer / TransformerBridge) with the equivalent weights
    (d_model = d_L, d_head = d_{L-1}, W_Q = sqrt(d_head)·A, identities for W_K, W_V, W_O) gives the same logits
    and attention."""
    task = _task(length=6)
    model = models.build(DisentangledConfig(n_layers=n_layers, n_heads=n_heads, init_range=0.3), task.spec)
    d = model.widths
    tl_cfg = models.TransformerConfig(
        n_layers=n_layers, n_heads=n_heads, d_model=d[-1], d_head=d[-2], attn_only=True, normalization="none"
    )
    tl = hooked_transformer(tl_cfg, 3, 3, model.n_ctx, model.transformer_state_dict())
    tokens = torch.randint(3, (4, 6), generator=torch.Generator().manual_seed(0))
    want, cache = model.run_with_cache(tokens)
    got, tl_cache = tl.run_with_cache(tokens)
    assert want.abs().max() > 0.1
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    for layer in range(n_layers):
        torch.testing.assert_close(
            tl_cache[hooks.attn_pattern(layer)], cache[hooks.attn_pattern(layer)], atol=1e-5, rtol=1e-4
        )


def test_probes_read_it():
    """Attention probes apply, and a previous-token A planted by hand (positions one-hot: A[i, i-1] = big) is
    what previous_token finds; induction reads the equivalent weights."""
    task = _task(length=10, k=4)
    model = models.build(DisentangledConfig(n_layers=2, n_heads=2), task.spec)
    assert {"causal_graph", "previous_token", "induction", "duplicate_token"} <= {
        n for n in probes.names() if probes.can_run(n, model, task)
    }
    V, N = 4, 10
    with torch.no_grad():
        model.blocks[0].attn.W_A[1, V + torch.arange(1, N), V + torch.arange(N - 1)] = 50.0
    result = probes.run("previous_token", model)
    assert result.top_heads(1)[0][:2] == (0, 1) and result.per_head[0, 1] > 0.99, result.per_head
    assert result.per_head[0, 0] < 0.3, result.per_head
    assert "copying/L1H0" in probes.run("induction", model).metrics


def test_config_errors_name_the_field():
    spec = _task(length=20, k=10).spec
    with pytest.raises(ConfigError, match="model.n_ctx"):
        models.build(DisentangledConfig(n_ctx=10), spec)
    with pytest.raises(ConfigError, match="model.n_layers"):
        models.build(DisentangledConfig(n_layers=8, n_heads=3), spec)  # 30 * 4**8 > 2**16
    with pytest.raises(ConfigError, match="^n_layers"):
        DisentangledConfig(n_layers=3, n_heads=64)
    with pytest.raises(ConfigError, match="init_range"):
        DisentangledConfig(init_range=-1.0)
    with pytest.raises(ConfigError, match="model.d_model: is a field of kinds? .*'transformer'"):
        models.parse({"kind": "disentangled", "d_model": 16})


@pytest.mark.parametrize(
    "task_name, params",
    [("causal_icl", {"k": 10, "length": 20, "roots": "uniform"}), ("sparse_parity", {"n": 12, "k": 3})],
)
@pytest.mark.parametrize("kw", [{}, {"n_heads": 3}, {"n_layers": 1}, {"n_layers": 3, "n_ctx": 30}])
def test_memory_estimate(task_name, params, kw):
    task = tasks.make(task_name, params)
    cfg = DisentangledConfig(**kw)
    assert cfg.param_count(task.spec) == sum(p.numel() for p in models.build(cfg, task.spec).parameters())
    assert 3 * cfg.param_count(task.spec) == sum(
        p.numel() for p in models.build(cfg, task.spec, n_models=3).parameters()
    )
    tokens = task.sample(32, torch.Generator().manual_seed(0), "cpu", task.splits[-1]).tokens
    real = saved_activation_bytes(models.build(dataclasses.replace(cfg, init_range=0.1), task.spec), tokens)
    estimate, pattern = cfg.activation_bytes(task.spec, 32)
    assert 0.5 < estimate / real < 3 and 0 < pattern < estimate, (estimate, real)
    assert cfg.eval_activation_bytes(task.spec, 32)[0] > 0
    assert cfg.weight_field(task.spec, "task.length").startswith(("model.", "task."))
