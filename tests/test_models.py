"""The fused model we train and the hooked TransformerLens model we probe compute the same function; every
registered model kind keeps the contract callers rely on."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from mechsynth import load_run, models, parse_config, train_run
from mechsynth.errors import ConfigError
from mechsynth.models import TL_VERSION, MLPConfig, TransformerConfig, build, hooked
from mechsynth.models.tl_compat import POSITIONAL, TL_MAJOR
from mechsynth.tasks.base import TaskSpec

SPEC = TaskSpec(d_vocab=5, d_vocab_out=4, n_ctx=12, token_names=tuple("abcde"), target_names=tuple("wxyz"))

VARIANTS = [
    dict(attn_only=True),
    dict(),
    dict(positional="rotary", n_heads=4),
    dict(positional="shortformer"),
    dict(positional="none"),
    dict(normalization="LNPre", act_fn="gelu"),
    dict(normalization="none", act_fn="gelu_new", d_head=5, d_mlp=7),
]
RELATIVE = dict(positional="relative", n_heads=2)  # not TransformerLens's: probed as FusedTransformer itself


@pytest.mark.parametrize(
    "kw", VARIANTS + [RELATIVE], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "default"
)
def test_fused_equals_hooked(kw):
    if kw.get("positional", "standard") not in POSITIONAL + ("relative",):
        pytest.skip(f"{kw['positional']} is not in TransformerLens {TL_VERSION}")
    cfg = TransformerConfig(n_layers=2, n_heads=kw.pop("n_heads", 2), d_model=16, init_seed=3, **kw)
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
    # The weight properties weight-reading probes use are TransformerLens's, also the MLP's.
    for w in ("W_E", "W_U", "W_Q", "W_O") + (() if cfg.attn_only else ("W_in", "W_out")):
        torch.testing.assert_close(getattr(model, w), getattr(ref, w).to(getattr(model, w).dtype), msg=w)
    assert not cfg.attn_only or not hasattr(model, "W_in")


VECTORS = TaskSpec(d_vocab=5, d_vocab_out=1, n_ctx=12, token_names=("x", "y"), target_names=("y",), d_input=5)


@pytest.mark.parametrize(
    "kw", VARIANTS + [RELATIVE], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "default"
)
def test_fused_equals_hooked_on_vectors(kw):
    """Continuous inputs, read in linearly (x @ W_E): TransformerLens's model of the same weights gives the same
    outputs, every hook it shares with ours holds the same activation (hook_embed: the read-in's output), it
    reloads another checkpoint's weights, and side by side each model computes what it computes alone."""
    if kw.get("positional", "standard") not in POSITIONAL + ("relative",):
        pytest.skip(f"{kw['positional']} is not in TransformerLens {TL_VERSION}")
    kw = dict(kw)
    cfg = TransformerConfig(n_layers=2, n_heads=kw.pop("n_heads", 2), d_model=16, init_seed=3, **kw)
    model = build(cfg, VECTORS)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    x = torch.randn(3, 12, 5, generator=g)
    ours_logits, ours = model.run_with_cache(x)
    ref = hooked(model)
    theirs_logits, theirs = ref.run_with_cache(x)
    assert ours_logits.shape == (3, 12, 1)
    torch.testing.assert_close(ours_logits, theirs_logits, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(theirs["hook_embed"], x @ model.embed.W_E)
    # (TransformerLens hooks a LayerNorm's output before its weights, we after: the same only at the init's w = 1, b = 0)
    shared = {n for n in set(ours.keys()) & set(theirs.keys()) if not n.endswith("hook_normalized")}
    assert {"hook_embed", "blocks.0.hook_resid_pre", "blocks.1.attn.hook_pattern", "blocks.1.hook_resid_post"} <= shared
    for name in sorted(shared):
        a, b = ours[name], theirs[name]
        if name.endswith("hook_attn_scores"):
            if TL_MAJOR >= 4 and ref is not model:  # TL 4.3's native bridge puts the softmaxed pattern on this hook
                a = a.softmax(-1)
            keep = torch.ones(12, 12, dtype=torch.bool).tril()
            a, b = a[..., keep], b[..., keep]
        torch.testing.assert_close(a, b.reshape(a.shape), atol=2e-5, rtol=1e-4, msg=name)
    later = build(dataclasses.replace(cfg, init_seed=5), VECTORS)
    torch.testing.assert_close(models.reload(ref, later)(x), later(x), atol=2e-5, rtol=1e-4)
    stacked = build(cfg, VECTORS, n_models=3)
    own = torch.randn(3, 2, 12, 5, generator=g)
    for i in range(3):
        alone = build(dataclasses.replace(cfg, init_seed=3 + i), VECTORS)
        torch.testing.assert_close(stacked(x)[i], alone(x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(stacked(own)[i], alone(own[i]), atol=1e-5, rtol=1e-5)
    with pytest.raises(TypeError, match="5-wide vectors"):
        model(torch.randint(0, 5, (3, 12)))
    with pytest.raises(TypeError, match="reads token ids"):
        build(cfg, SPEC)(x)


def edelman_forward(model, tokens):
    """Edelman et al.'s relative-position attention (mingpt/model_rpe.py), written out position by position
    from the weights: score(i, j) = (q_i·k_j + q_i·r_{i-j}) / sqrt(d_head) for j ≤ i; pre-LayerNorm."""
    sd = model.state_dict()
    ln = lambda x, p: torch.nn.functional.layer_norm(x, x.shape[-1:], sd[f"{p}.w"], sd[f"{p}.b"], eps=1e-5)  # noqa: E731
    x = sd["embed.W_E"][tokens]
    seq, dh = tokens.shape[-1], model.cfg.head_dim
    for layer in range(model.cfg.n_layers):
        a, y, out = f"blocks.{layer}.attn", ln(x, f"blocks.{layer}.ln1"), torch.zeros_like(x)
        for h in range(model.cfg.n_heads):
            q, k, v = (y @ sd[f"{a}.W_{n}"][h] + sd[f"{a}.b_{n}"][h] for n in "QKV")
            z = torch.zeros(*x.shape[:-1], dh)
            for i in range(seq):
                s = torch.stack([(q[:, i] * (k[:, j] + sd[f"{a}.W_rel"][h, i - j])).sum(-1) for j in range(i + 1)], -1)
                z[:, i] = ((s / dh**0.5).softmax(-1)[..., None] * v[:, : i + 1]).sum(1)
            out += z @ sd[f"{a}.W_O"][h]
        x = x + out + sd[f"{a}.b_O"]
    return ln(x, "ln_final") @ sd["unembed.W_U"] + sd["unembed.b_U"]


@pytest.mark.parametrize("n_models", [None, 3])
def test_relative_positions_are_edelman_et_al_s(n_models):
    """Learned relative positions against a plain re-implementation of the paper's attention, fused (the
    training path) and hooked (what probes cache), single and side by side; and attention between two
    positions depends on their distance, not where they are."""
    cfg = TransformerConfig(n_layers=2, n_heads=2, d_model=8, attn_only=True, positional="relative", init_seed=4)
    model = build(cfg, SPEC, n_models=n_models)
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    tokens = torch.randint(0, 5, (3, 12), generator=g)
    assert cfg.input_weights() is None and "blocks.0.attn.W_rel" in model.state_dict()
    assert sum(p.numel() for p in build(cfg, SPEC).parameters()) == cfg.param_count(SPEC)
    fused = model(tokens)
    hooked_logits, cache = hooked(model).run_with_cache(tokens)
    torch.testing.assert_close(fused, hooked_logits, atol=1e-5, rtol=1e-5)
    for i in range(n_models or 1):
        single = build(dataclasses.replace(cfg, init_seed=0), SPEC)
        single.load_state_dict({k: v if n_models is None else v[i] for k, v in model.state_dict().items()})
        want = edelman_forward(single, tokens)
        torch.testing.assert_close(fused if n_models is None else fused[i], want, atol=1e-5, rtol=1e-5)
    # With W_Q, W_K zero and b_Q fixed, the scores are b_Q·r_{i-j}: a function of the distance only.
    single = build(cfg, SPEC)
    with torch.no_grad():
        single.blocks[0].attn.W_Q.zero_(), single.blocks[0].attn.W_K.zero_(), single.blocks[0].attn.b_Q.fill_(1.0)
    scores = single.run_with_cache(tokens)[1]["blocks.0.attn.hook_attn_scores"][0, 0]
    torch.testing.assert_close(scores[5, 3], scores[9, 7])
    assert not torch.allclose(scores[5, 3], scores[5, 4])


def test_init_is_seeded():
    a, b, c = (build(TransformerConfig(init_seed=s), SPEC) for s in (0, 0, 1))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.embed.W_E, c.embed.W_E)


def test_state_dict_has_hooked_transformer_layout():
    sd = build(TransformerConfig(n_layers=1, n_heads=2, d_model=8), SPEC).state_dict()
    assert sd["blocks.0.attn.W_Q"].shape == (2, 8, 4)
    assert sd["blocks.0.attn.W_O"].shape == (2, 4, 8)
    assert sd["unembed.W_U"].shape == (8, 4)
    assert sd["pos_embed.W_pos"].shape == (12, 8)


@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "default")
def test_our_hooks_give_transformer_lens_activations(kw):
    """The fused model is itself hooked: every hook it shares with TransformerLens's model holds the same
    activation (attention is computed unfused only where a pattern or score is hooked)."""
    if kw.get("positional", "standard") not in POSITIONAL:
        pytest.skip(f"{kw['positional']} is not in TransformerLens {TL_VERSION}")
    cfg = TransformerConfig(n_layers=2, n_heads=kw.pop("n_heads", 2), d_model=16, init_seed=3, **kw)
    model = build(cfg, SPEC)
    tokens = torch.randint(0, 5, (3, 12), generator=torch.Generator().manual_seed(1))
    ours_logits, ours = model.run_with_cache(tokens)
    theirs_logits, theirs = hooked(model).run_with_cache(tokens)
    shared = set(ours.keys()) & set(theirs.keys())
    expected = {
        "hook_embed",
        "blocks.0.hook_resid_pre",
        "blocks.1.attn.hook_pattern",
        "blocks.1.attn.hook_z",
        "blocks.0.attn.hook_q",
        "blocks.0.hook_attn_out",
        "blocks.1.hook_resid_post",
    }
    assert expected <= shared, expected - shared
    for name in sorted(shared):
        a, b = ours[name], theirs[name]
        if name.endswith("hook_attn_scores"):
            if TL_MAJOR >= 4:  # TL 4.3's native bridge puts the softmaxed pattern on this hook
                a = a.softmax(-1)
            keep = torch.ones(12, 12, dtype=torch.bool).tril()  # masked entries differ in how they mark -inf
            a, b = a[..., keep], b[..., keep]
        torch.testing.assert_close(a, b.reshape(a.shape), atol=2e-5, rtol=1e-4, msg=name)
    torch.testing.assert_close(ours_logits, theirs_logits, atol=2e-5, rtol=1e-4)
    # Nothing hooked: the fused path gives the same logits.
    torch.testing.assert_close(model(tokens), ours_logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["transformer", "mlp", "deep_mlp"])
def test_side_by_side_models_equal_separate_ones(kind):
    spec = SPEC if kind == "transformer" else TaskSpec(2, 2, 9, ("0", "1"), ("0", "1"), token_values=(1.0, -1.0))
    cfg = (
        TransformerConfig(n_layers=2, n_heads=2, d_model=16, init_seed=5)
        if kind == "transformer"
        else MLPConfig(width=8, depth=3 if kind == "deep_mlp" else 1, init_seed=5)
    )
    stacked = build(cfg, spec, n_models=3)
    singles = [build(dataclasses.replace(cfg, init_seed=5 + i), spec) for i in range(3)]
    for name, p in stacked.named_parameters():
        assert all(torch.equal(p[i], s.get_parameter(name)) for i, s in enumerate(singles)), name
    g = torch.Generator().manual_seed(2)
    shared = torch.randint(0, spec.d_vocab, (4, spec.n_ctx), generator=g)
    own = torch.randint(0, spec.d_vocab, (3, 4, spec.n_ctx), generator=g)
    hook = "blocks.1.attn.hook_pattern" if kind == "transformer" else "hook_post"
    logits, cache = stacked.run_with_cache(shared)
    for i, s in enumerate(singles):
        ref_logits, ref = s.run_with_cache(shared)
        torch.testing.assert_close(logits[i], ref_logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(cache[hook][4 * i : 4 * (i + 1)], ref[hook], atol=1e-5, rtol=1e-5)
    out = stacked(own)
    for i, s in enumerate(singles):
        torch.testing.assert_close(out[i], s(own[i]), atol=1e-5, rtol=1e-5)


# ---- the registry of model kinds ----------------------------------------------------------------------

PARITY = TaskSpec(3, 2, 9, ("0", "1", "?"), ("0", "1"), token_values=(1.0, -1.0, 0.0))  # 8 bits, a readout
CHAIN = TaskSpec(3, 3, 9, ("0", "1", "2"), ("0", "1", "2"))  # a 3-state chain: for kinds that copy tokens


ONE_VECTOR = TaskSpec(
    8, 1, 1, ("x",), ("y",), d_input=8
)  # one Gaussian vector, a real target: for kinds that read only that


def spec_for(cfg) -> TaskSpec:
    """PARITY, or CHAIN for a kind that cannot read it (the minimal induction model), or ONE_VECTOR (the neuron)."""
    for spec in (PARITY, CHAIN):
        try:
            models.validate(cfg, spec)
            return spec
        except ConfigError:
            pass
    return ONE_VECTOR


def inputs_for(spec: TaskSpec) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 1, spec.d_input, generator=g) if spec.d_input else torch.randint(0, 2, (4, 9), generator=g)


@pytest.mark.parametrize("kind", models.names())
def test_every_kind_keeps_the_contract(kind):
    """What callers ask of a kind without checking classes: its config round-trips through the table
    config.json stores, it has init_seed (seeds side by side add to it), its model carries the config
    and `input_weights`, the hooked view answers like the module probes read (`probed`: the module itself, or
    for the linearized kind the network it linearizes), and `reload` reuses the hooked view."""
    cfg = models.parse({"kind": kind})
    assert cfg.kind == kind and models.parse(models.to_dict(cfg)) == cfg
    assert models.to_dict(cfg)["kind"] == kind and "init_seed" in models.to_dict(cfg)
    assert "\n" not in models.describe(cfg) and models.describe(cfg)
    spec = spec_for(cfg)
    model = build(dataclasses.replace(cfg, init_seed=1), spec)
    assert model.cfg.init_seed == 1 and sum(p.numel() for p in model.parameters()) == cfg.param_count(spec)
    view, probed = hooked(model), models.probed(model)
    tokens = inputs_for(spec)
    torch.testing.assert_close(view(tokens), probed(tokens), atol=2e-5, rtol=1e-4)
    assert view.input_weights == model.input_weights == probed.input_weights == cfg.input_weights()
    if cfg.input_weights() is not None:  # its first n_inputs rows face the input positions
        assert getattr(probed, cfg.input_weights()).shape[0] >= spec.n_ctx - 1
    later = build(dataclasses.replace(cfg, init_seed=2), spec)
    again = models.reload(view, later)
    assert again is view
    torch.testing.assert_close(again(tokens), models.probed(later)(tokens), atol=2e-5, rtol=1e-4)
    assert cfg.transformer_lens == (type(view) is not type(probed))


def test_describe_names_the_architecture():
    assert (
        models.describe(TransformerConfig(n_layers=2, n_heads=1, d_model=32, attn_only=True))
        == "2-layer attention-only transformer, 1 heads, d_model 32"
    )
    assert models.describe(MLPConfig(width=100)) == "MLP, width 100"


def test_input_weights_are_declared_by_the_kind():
    assert TransformerConfig().input_weights() == "W_pos" and MLPConfig().input_weights() == "W_in"
    assert TransformerConfig(positional="rotary", n_heads=2, d_model=16).input_weights() is None


@pytest.mark.parametrize(
    "table, field, message",
    [
        ({"width": 8}, "model.width", "is a field of kind 'mlp', not 'transformer'"),
        (
            {"kind": "mlp", "n_layers": 2},
            "model.n_layers",
            "is a field of kinds 'disentangled', 'recurrent', 'transformer', not 'mlp'",
        ),
        (
            {"kind": "rnn"},
            "model.kind",
            "'rnn' is not allowed; allowed: 'disentangled', 'linear_memory', 'linearized', 'minimal_induction', 'mlp', 'mlp_memory', 'neuron', 'polynet', 'recurrent', 'sin', 'transformer'",
        ),
        ({"kind": "mlp", "act_fn": "gelu"}, "model.act_fn", "'gelu' is not allowed"),
        ({"layers": 2}, "model.layers", "unknown key"),
    ],
)
def test_parse_names_the_key(table, field, message):
    with pytest.raises(ConfigError) as e:
        models.parse(table)
    assert e.value.field == field and message in str(e.value) and "\n" not in str(e.value)


def test_a_run_stored_with_every_kinds_fields_still_opens(tmp_path, tiny):
    """Runs made when one config held both kinds stored all fields in config.json; they must open (only a
    stored config drops another kind's keys: a user's TOML with them is refused, above)."""
    for model in ({"n_layers": 1, "n_heads": 2, "d_model": 16}, {"kind": "mlp", "width": 8}):
        data = tiny({"name": "sparse_parity", "n": 6, "k": 2}, model, {"steps": 4, "checkpoints": 2})
        run_dir = train_run(parse_config(data), tmp_path / models.parse(model).kind, progress=False)
        stored = json.loads((run_dir / "config.json").read_text())
        old = {
            "kind": "transformer",
            "n_layers": 2,
            "n_heads": 1,
            "d_model": 64,
            "d_head": None,
            "d_mlp": None,
            "attn_only": False,
            "positional": "standard",
            "normalization": "LN",
            "act_fn": "relu",
            "poly_degree": 2,
            "width": 100,
            "n_ctx": None,
            "init_seed": 0,
            "init_range": None,
        }
        stored["model"] = {**old, **stored["model"]}  # the old layout: every field of both kinds
        (run_dir / "config.json").write_text(json.dumps(stored))
        run = load_run(run_dir)
        assert run.config.model == parse_config(data).model
        assert [step for step, _ in run.models()] == run.steps
        train_run(parse_config({**data, "train": {**data["train"], "steps": 6}}), run_dir, resume=True, progress=False)
        assert load_run(run_dir).steps[-1] == 6


# ---- frozen embeddings (Nichani et al. 2024 train only attention and the MLP) -------------------------

FROZEN = ("embed.W_E", "pos_embed.W_pos", "unembed.W_U", "unembed.b_U")
RECALL = {"name": "factual_recall", "subjects": 6, "relations": 2, "answers": 3, "noise": 3, "length": 8}
FROZEN_MODEL = {"n_layers": 1, "n_heads": 2, "d_model": 16, "freeze_embeddings": True}
# Decay on every weight and clipping always active: neither may touch a frozen weight.
FROZEN_TRAIN = {"steps": 8, "checkpoints": 3, "eval_every": 4, "lr": 0.01, "weight_decay": 0.5, "grad_clip": 0.01}


def test_frozen_embeddings_start_as_trained_ones_and_only_the_rest_is_optimized():
    from mechsynth.training.train import TrainConfig, make_optimizer

    cfg = TransformerConfig(n_layers=1, n_heads=2, d_model=16, freeze_embeddings=True)
    frozen, free = build(cfg, SPEC), build(dataclasses.replace(cfg, freeze_embeddings=False), SPEC)
    assert frozen.state_dict().keys() == free.state_dict().keys()
    assert all(torch.equal(v, free.state_dict()[k]) for k, v in frozen.state_dict().items())
    assert {n for n, p in frozen.named_parameters() if not p.requires_grad} == set(FROZEN)
    assert sum(p.numel() for p in frozen.parameters()) == cfg.param_count(SPEC)  # the memory estimate: all of them
    optimized = [p for g in make_optimizer(frozen, TrainConfig(decay="matrices")).param_groups for p in g["params"]]
    assert len(optimized) == len(list(frozen.parameters())) - len(FROZEN)
    assert all(p.requires_grad for p in optimized)
    assert models.describe(cfg) == "1-layer transformer, 2 heads, d_model 16, frozen embeddings"


def test_frozen_embeddings_stay_bit_identical_and_resume_exactly(tmp_path, tiny):
    data = tiny(RECALL, FROZEN_MODEL, FROZEN_TRAIN)
    whole = load_run(train_run(parse_config(data), tmp_path / "whole", progress=False))
    start, end = whole.weights(0), whole.weights(8)
    assert all(torch.equal(start[k], end[k]) for k in FROZEN)
    moved = [k for k in end if k.rsplit(".", 1)[1].startswith("W_") and k not in FROZEN]
    assert len(moved) == 6 and all(not torch.equal(start[k], end[k]) for k in moved)  # W_Q, W_K, W_V, W_O, W_in, W_out
    train_run(parse_config({**data, "train": {**data["train"], "steps": 4}}), tmp_path / "cut", progress=False)
    cut = load_run(train_run(parse_config(data), tmp_path / "cut", resume=True, progress=False))
    assert all(torch.equal(end[k], cut.weights(8)[k]) for k in end)


@pytest.mark.parametrize("passes", ["stacked", "per_seed"])
def test_frozen_embeddings_side_by_side_follow_separate_runs(tmp_path, tiny, passes):
    data = tiny(RECALL, FROZEN_MODEL, {**FROZEN_TRAIN, "seeds": 2, "seed_passes": passes})
    out = train_run(parse_config(data), tmp_path / "seeds", progress=False)
    alone = tiny(RECALL, {**FROZEN_MODEL, "init_seed": 1}, {**FROZEN_TRAIN, "seed": 1})
    ref = load_run(train_run(parse_config(alone), tmp_path / "alone", progress=False)).weights(8)
    for i in range(2):
        run = load_run(out / f"seed_{i}")
        assert all(torch.equal(run.weights(0)[k], run.weights(8)[k]) for k in FROZEN), (passes, i)
    seed_1 = load_run(out / "seed_1").weights(8)
    # (Not b_K: its gradient is 0 but for rounding, as softmax ignores it, and Adam scales rounding up to lr.)
    for k, v in ((k, v) for k, v in ref.items() if not k.endswith("b_K")):
        torch.testing.assert_close(seed_1[k], v, atol=1e-5, rtol=1e-4, msg=f"{passes}: {k}")


def test_a_deeper_mlp_is_its_layers_by_hand_and_keeps_the_shallow_net_s_first_and_last_layers():
    spec = TaskSpec(6, 1, 1, ("x",), ("y",), d_input=6)
    deep, shallow = build(MLPConfig(width=5, depth=3, init_seed=2), spec), build(MLPConfig(width=5, init_seed=2), spec)
    x = torch.randn(4, 1, 6, generator=torch.Generator().manual_seed(0))
    h = torch.relu(x[:, 0] @ deep.W_in + deep.b_in)
    for layer in range(2):
        h = torch.relu(h @ deep.W_hidden[layer] + deep.b_hidden[layer])
    torch.testing.assert_close(deep(x)[:, 0], h @ deep.W_out + deep.b_out, atol=1e-6, rtol=1e-6)
    assert all(torch.equal(deep.get_parameter(n), p) for n, p in shallow.named_parameters())
    assert sum(p.numel() for p in deep.parameters()) == MLPConfig(width=5, depth=3).param_count(spec)
    _, cache = deep.run_with_cache(x)
    torch.testing.assert_close(cache["hook_hidden.1"], h)
