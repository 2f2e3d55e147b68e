"""The fused model we train and the hooked TransformerLens model we probe compute the same function."""

from __future__ import annotations

import pytest
import torch

from mechsynth.models import TL_VERSION, ModelConfig, build, hooked
from mechsynth.models.tl_compat import POSITIONAL
from mechsynth.tasks.base import TaskSpec

SPEC = TaskSpec(d_vocab=5, d_vocab_out=4, n_ctx=12, token_names=tuple("abcde"), target_names=tuple("wxyz"))

VARIANTS = [
    dict(attn_only=True),
    dict(),
    dict(positional="rotary", n_heads=4),
    dict(positional="shortformer"),
    dict(normalization="LNPre", act_fn="gelu"),
    dict(normalization="none", act_fn="gelu_new", d_head=5, d_mlp=7),
]


@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "default")
def test_fused_equals_hooked(kw):
    if kw.get("positional", "standard") not in POSITIONAL:
        pytest.skip(f"{kw['positional']} is not in TransformerLens {TL_VERSION}")
    cfg = ModelConfig(n_layers=2, n_heads=kw.pop("n_heads", 2), d_model=16, init_seed=3, **kw)
    model = build(cfg, SPEC)
    with torch.no_grad():  # perturb biases and norms too, which the init leaves at 0/1
        g = torch.Generator().manual_seed(0)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    tokens = torch.randint(0, 5, (3, 12), generator=g)
    ref = hooked(model)
    logits, cache = ref.run_with_cache(tokens)
    torch.testing.assert_close(model(tokens), logits, atol=2e-5, rtol=1e-4)
    assert cache["blocks.1.attn.hook_pattern"].shape == (3, cfg.n_heads, 12, 12)
    assert cache["blocks.0.hook_resid_post"].shape == (3, 12, 16)


def test_init_is_seeded():
    a, b, c = (build(ModelConfig(init_seed=s), SPEC) for s in (0, 0, 1))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.embed.W_E, c.embed.W_E)


def test_state_dict_has_hooked_transformer_layout():
    sd = build(ModelConfig(n_layers=1, n_heads=2, d_model=8), SPEC).state_dict()
    assert sd["blocks.0.attn.W_Q"].shape == (2, 8, 4)
    assert sd["blocks.0.attn.W_O"].shape == (2, 4, 8)
    assert sd["unembed.W_U"].shape == (8, 4)
    assert sd["pos_embed.W_pos"].shape == (12, 8)
