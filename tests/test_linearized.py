"""The linearized kind against known answers: 0 at θ₀; a network linear in its parameters is its own
linearization; a transformer's against finite differences (float64); its gradient is α·J(θ₀)ᵀ·g; the centred
network at large α approaches it (lazy training); side by side equals separate, in the trainer too; resume is bit
for bit; the nested config round-trips through config.json, --set and sweeps; a bad one is one line naming
model.base.<key>; probes see the network at the current weights."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from torch.func import functional_call

from mechsynth import load_run, models, parse_config, tasks, train_run
from mechsynth.analysis import timeline
from mechsynth.cli import main
from mechsynth.errors import ConfigError
from mechsynth.models.linearized import LinearizedConfig
from mechsynth.sweep import load_sweep
from mechsynth.tasks.base import TaskSpec
from mechsynth.training import budget
from mechsynth.training.train import TrainConfig

MARKOV = tasks.make("markov_icl", {"k": 3, "length": 16})
PARITY = tasks.make("sparse_parity", {"n": 6, "k": 2})
SMALL = {"n_layers": 2, "n_heads": 1, "d_model": 16, "attn_only": True}


def linearized(base: dict, **kw) -> LinearizedConfig:
    return models.parse({"kind": "linearized", "base": base, **kw})


def moved(model: torch.nn.Module, size: float = 0.05, seed: int = 0, only: tuple[str, ...] = ()) -> torch.nn.Module:
    """θ = θ₀ + a random step (only in the weights named `only`, when given), in place."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.base.named_parameters():
            step = torch.randn(p.shape, generator=g, dtype=p.dtype) * size
            if p.requires_grad and (not only or name.rsplit(".", 1)[-1] in only):
                p.add_(step)
    return model


def tokens_of(task, n: int = 4, seed: int = 1) -> torch.Tensor:
    return task.sample(n, torch.Generator().manual_seed(seed)).tokens


@pytest.mark.parametrize(
    "base, task", [(SMALL, MARKOV), ({"kind": "mlp", "width": 8}, PARITY), ({"kind": "linear_memory", "d": 8}, MARKOV)]
)
@pytest.mark.parametrize("linearize", [True, False])
def test_at_initialization_the_output_is_zero(base, task, linearize):
    model = models.build(linearized(base, linearize=linearize, scale=3.0), task.spec)
    out = model(tokens_of(task))
    assert out.shape == models.build(models.parse(base), task.spec)(tokens_of(task)).shape
    assert torch.count_nonzero(out) == 0


@pytest.mark.parametrize(
    "base, task, only",
    [({"kind": "mlp", "width": 8}, PARITY, ("W_out", "b_out")), ({"kind": "linear_memory", "d": 8}, MARKOV, ())],
)
def test_a_network_linear_in_its_parameters_is_its_own_linearization(base, task, only):
    """The MLP with only its last layer moved, and the linear associative memory (logits u_yᵀ W e(x)), are
    linear in what moved: their first-order expansion is exact, f_lin(θ) = α·(f(θ) − f(θ₀)) however far θ is."""
    lin = moved(models.build(linearized(base, scale=2.0), task.spec), size=0.5, only=only)
    real = models.build(linearized(base, scale=2.0, linearize=False), task.spec)
    real.load_state_dict(lin.state_dict())
    x = tokens_of(task, 16)
    torch.testing.assert_close(lin(x), real(x), atol=1e-5, rtol=1e-5)
    assert lin(x).abs().max() > 0.1  # (not a vacuous 0 = 0)


def test_a_transformer_s_linearization_is_its_directional_derivative():
    """J f(θ₀)·Δ against the central difference (f(θ₀ + εΔ) − f(θ₀ − εΔ))/2ε, in float64 (error O(ε²))."""
    model = moved(models.build(linearized({"n_layers": 2, "n_heads": 2, "d_model": 16}), MARKOV.spec), 0.1).double()
    x = tokens_of(MARKOV, 8)
    theta0 = dict(model.init.named_parameters())
    delta = {name: p.detach() - theta0[name] for name, p in model.base.named_parameters()}
    eps = 1e-5
    with torch.no_grad():
        plus = functional_call(model.base, {k: theta0[k] + eps * d for k, d in delta.items()}, (x,))
        minus = functional_call(model.base, {k: theta0[k] - eps * d for k, d in delta.items()}, (x,))
        ours = model(x)
    assert ours.dtype == torch.float64 and ours.abs().max() > 0.01
    torch.testing.assert_close(ours, (plus - minus) / (2 * eps), atol=1e-8, rtol=1e-6)


SPECS = (
    TaskSpec(3, 2, 9, ("0", "1", "?"), ("0", "1"), token_values=(1.0, -1.0, 0.0)),  # 8 bits and a readout
    TaskSpec(3, 3, 9, ("0", "1", "2"), ("0", "1", "2")),  # a 3-state chain: for kinds that copy tokens
    TaskSpec(8, 1, 1, ("x",), ("y",), d_input=8),
)  # one vector: for kinds that read only that


@pytest.mark.parametrize("kind", [k for k in models.names() if k != "linearized"])
def test_every_other_kind_linearizes_to_its_directional_derivative(kind):
    """Whatever the base (attention, recurrences, Hermite links, associative memories), the JVP is the central
    difference of the base along θ − θ₀, side by side too: in float64, or float32 (looser) for a base that computes
    in float32 only (the disentangled transformer's one-hot inputs)."""
    cfg = linearized({"kind": kind})
    spec = next(s for s in SPECS if _fits(cfg, s))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 1, spec.d_input, generator=g) if spec.d_input else torch.randint(0, 2, (3, 9), generator=g)
    for n_models in (None, 2):
        model = moved(models.build(cfg, spec, n_models), 0.05)
        try:
            model.double().base(x.double() if spec.d_input else x)
            x, eps, tol = (x.double() if spec.d_input else x), 1e-5, dict(atol=1e-7, rtol=1e-5)
        except RuntimeError:
            model.float()
            eps, tol = 1e-2, dict(atol=1e-4, rtol=1e-2)
        theta0 = dict(model.init.named_parameters())
        delta = {name: p.detach() - theta0[name] for name, p in model.base.named_parameters()}
        with torch.no_grad():
            plus = functional_call(model.base, {k: theta0[k] + eps * d for k, d in delta.items()}, (x,))
            minus = functional_call(model.base, {k: theta0[k] - eps * d for k, d in delta.items()}, (x,))
            ours = model(x)
        assert ours.abs().max() > 1e-4, kind
        torch.testing.assert_close(ours, (plus - minus) / (2 * eps), **tol, msg=kind)


def _fits(cfg, spec) -> bool:
    try:
        models.validate(cfg, spec)
        return True
    except ConfigError:
        return False


def test_its_gradient_is_alpha_times_the_jacobian_at_init_transposed():
    """f_lin is linear in θ: the gradient of ⟨g, f_lin⟩ is α·J(θ₀)ᵀg wherever θ is (reverse mode at θ₀)."""
    model = moved(models.build(linearized(SMALL, scale=3.0), MARKOV.spec), 0.2).double()
    x = tokens_of(MARKOV)
    out = model(x)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=out.dtype)
    grads = torch.autograd.grad((out * g).sum(), list(model.base.parameters()))
    theta0 = {k: p.detach().clone().requires_grad_() for k, p in model.init.named_parameters()}
    at_init = functional_call(model.base, theta0, (x,))
    want = torch.autograd.grad((at_init * g).sum(), list(theta0.values()))
    for got, ref in zip(grads, want):
        torch.testing.assert_close(got, 3.0 * ref, atol=1e-10, rtol=1e-8)


def test_the_centred_network_is_its_real_change_and_large_alpha_approaches_the_linearization():
    """linearize = false, α = 1: f(θ) − f(θ₀), θ₀ from a fresh build of the base with the same seed. And lazy
    training's limit: α·(f(θ₀ + Δ/α) − f(θ₀)) → J·Δ, the error shrinking like 1/α."""
    cfg = linearized(SMALL, linearize=False, init_seed=4)
    model = moved(models.build(cfg, MARKOV.spec), 0.1)
    x = tokens_of(MARKOV)
    fresh = models.build(models.parse({**SMALL, "init_seed": 4}), MARKOV.spec)
    start = fresh(x)
    fresh.load_state_dict(model.base.state_dict())
    torch.testing.assert_close(model(x), fresh(x) - start, atol=1e-6, rtol=1e-5)

    lin = moved(models.build(linearized(SMALL), MARKOV.spec), 0.2).double()
    target = lin(x)
    theta0 = dict(lin.init.named_parameters())
    errors = []
    for alpha in (10.0, 100.0):
        lazy = models.build(linearized(SMALL, linearize=False, scale=alpha), MARKOV.spec).double()
        lazy.load_state_dict(lin.state_dict())
        with torch.no_grad():
            for name, p in lazy.base.named_parameters():
                p.copy_(theta0[name] + (p - theta0[name]) / alpha)
        errors.append(float((lazy(x) - target).detach().abs().max()))
    assert errors[1] < errors[0] / 5 and errors[1] < 0.02 * float(target.detach().abs().max()), errors


@pytest.mark.parametrize("linearize", [True, False])
def test_side_by_side_equals_separate(linearize):
    cfg = linearized(SMALL, linearize=linearize, init_seed=5, scale=2.0)
    stacked = moved(models.build(cfg, MARKOV.spec, n_models=3), 0.1)
    singles = [models.build(dataclasses.replace(cfg, init_seed=5 + i), MARKOV.spec) for i in range(3)]
    for i, s in enumerate(singles):
        assert all(torch.equal(p[i], s.init.get_parameter(n)) for n, p in stacked.init.named_parameters() if "W_" in n)
        s.load_state_dict({k: v[i] for k, v in stacked.state_dict().items()})
    x, own = tokens_of(MARKOV), torch.stack([tokens_of(MARKOV, seed=s) for s in range(3)])
    shared, each = stacked(x), stacked(own)
    for i, s in enumerate(singles):
        torch.testing.assert_close(shared[i], s(x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(each[i], s(own[i]), atol=1e-5, rtol=1e-5)


def test_the_config_round_trips_and_names_its_parts():
    cfg = linearized({"kind": "mlp", "width": 8}, scale=10.0, linearize=False, init_seed=7)
    assert cfg.base.init_seed == 7 and dataclasses.replace(cfg, init_seed=9).base.init_seed == 9
    stored = models.to_dict(cfg)
    assert stored["base"] == {k: v for k, v in models.to_dict(cfg.base).items() if k != "init_seed"}
    assert models.parse(json.loads(json.dumps(stored))) == cfg
    old = {**stored, "base": {**stored["base"], "n_layers": 2}}  # a field of another kind, as old runs stored them
    assert models.parse(models.stored_table(old)) == cfg and models.stored_table(stored) == stored
    assert (
        models.describe(linearized(SMALL))
        == "linearized (NTK) 2-layer attention-only transformer, 1 heads, d_model 16, α = 1"
    )
    assert models.describe(cfg) == "centred MLP, width 8, α = 10"
    assert models.describe(models.parse({"kind": "linearized"})).startswith("linearized (NTK) 2-layer transformer")


@pytest.mark.parametrize(
    "table, field, message",
    [
        ({"base": {"n_layers": 0}}, "model.base.n_layers", "must be ≥ 1"),
        ({"base": {"kind": "linearized"}}, "model.base.kind", "cannot be linearized again"),
        ({"base": {"init_seed": 3}}, "model.base.init_seed", "is set by model.init_seed"),
        ({"base": {"width": 8}}, "model.base.width", "is a field of kind 'mlp', not 'transformer'"),
        ({"base": {"kind": "rnn"}}, "model.base.kind", "'rnn' is not allowed"),
        ({"base": 5}, "model.base", "expected a table"),
        ({"scale": 0}, "model.scale", "must be > 0"),
        ({"n_layers": 2}, "model.n_layers", "is a field of kinds"),
    ],
)
def test_a_bad_nested_config_is_one_line_naming_its_key(table, field, message):
    with pytest.raises(ConfigError) as e:
        models.parse({"kind": "linearized", **table})
    assert e.value.field == field and message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_base_that_cannot_read_the_task_is_named_as_the_base():
    with pytest.raises(ConfigError) as e:
        models.validate(linearized({"kind": "neuron"}), MARKOV.spec)
    assert e.value.field == "model.base.kind"
    with pytest.raises(ConfigError) as e:
        models.validate(linearized({**SMALL, "n_ctx": 4}), MARKOV.spec)
    assert e.value.field == "model.base.n_ctx"


def test_the_cli_refuses_a_bad_base_in_one_line(tmp_path, tiny, capsys):
    path = tmp_path / "cfg.toml"
    path.write_text(
        '[task]\nname = "markov_icl"\nk = 3\nlength = 16\n[model]\nkind = "linearized"\n'
        'base = { n_layers = 1, d_model = 16, attn_only = true }\n[train]\nsteps = 2\ndevice = "cpu"\n'
        '[wandb]\nmode = "disabled"\n'
    )
    for bad, field in (
        ("model.base.d_model=0", "model.base.d_model"),
        ("model.base.colour=1", "model.base.colour"),
        ('model.base.kind="linearized"', "model.base.kind"),
    ):
        assert main(["train", str(path), "--set", bad, "--out", str(tmp_path / "run"), "--no-progress"]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(f"mechsynth: error: {field}:"), err
    assert not (tmp_path / "run").exists()


def test_the_memory_estimate_counts_both_weights_and_names_the_base():
    cfg = linearized({"n_layers": 2, "d_model": 16})
    model = models.build(cfg, MARKOV.spec)
    assert (
        cfg.param_count(MARKOV.spec)
        == sum(p.numel() for p in model.parameters())
        == 2 * cfg.base.param_count(MARKOV.spec)
    )
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == cfg.base.param_count(MARKOV.spec)
    big = linearized({"n_layers": 64, "d_model": 1024})
    with pytest.raises(ConfigError) as e:
        budget.check(big, TrainConfig(batch_size=1, eval_batch_size=1), MARKOV, torch.device("cpu"), available=2**30)
    assert e.value.field == "model.base.n_layers"


# ---- through the trainer, run directories and sweeps ---------------------------------------------------------

MODEL = {"kind": "linearized", "base": {"n_layers": 1, "n_heads": 1, "d_model": 16, "attn_only": True}}
TASK = {"name": "markov_icl", "k": 3, "length": 16}
TRAIN = {"steps": 8, "checkpoints": 3, "eval_every": 4, "lr": 0.01}


@pytest.mark.parametrize("passes", ["stacked", "per_seed"])
def test_seeds_side_by_side_follow_separate_runs(tmp_path, tiny, passes):
    """Per-seed passes run the JVPs on worker threads (one at a time: forward-mode AD is process-wide)."""
    data = tiny(TASK, MODEL, {**TRAIN, "seeds": 2, "seed_passes": passes})
    train_run(parse_config(data), tmp_path / "two", progress=False)
    one = load_run(
        train_run(
            parse_config(tiny(TASK, {**MODEL, "init_seed": 1}, {**TRAIN, "seed": 1})), tmp_path / "one", progress=False
        )
    )
    two = load_run(tmp_path / "two" / "seed_1")
    a, b = one.weights(8), two.weights(8)
    assert a.keys() == b.keys() and {k for k in a if k.startswith("init.")}
    # (Not b_K: its gradient is 0 but for rounding, as softmax ignores it, and Adam scales rounding up to lr.)
    for k in (k for k in a if not k.endswith("b_K")):
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=1e-5, msg=k)
    assert two.config.model == one.config.model and two.config.model.base.init_seed == 1
    assert one.metrics[-1]["eval/loss"] == pytest.approx(two.metrics[-1]["eval/loss"], rel=1e-5)


def test_a_run_resumes_bit_for_bit_and_keeps_its_base(tmp_path, tiny, capsys):
    data = tiny(TASK, MODEL, TRAIN)
    whole = load_run(train_run(parse_config(data), tmp_path / "whole", progress=False))
    train_run(parse_config({**data, "train": {**data["train"], "steps": 4}}), tmp_path / "cut", progress=False)
    cut = load_run(train_run(parse_config(data), tmp_path / "cut", resume=True, progress=False))
    a, b = whole.weights(8), cut.weights(8)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(a["init.unembed.W_U"], whole.weights(0)["base.unembed.W_U"])  # θ₀ is the step-0 θ
    stored = json.loads((whole.path / "config.json").read_text())["model"]
    assert (
        stored["kind"] == "linearized"
        and "init_seed" not in stored["base"]
        and whole.config.model == parse_config(data).model
    )
    # --resume reads the stored config; a change to the base is refused, naming it
    assert main(["train", "--resume", str(tmp_path / "cut"), "--set", "model.base.d_model=32", "--no-progress"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "model.base.d_model" in err[0], err


def test_probes_see_the_network_at_the_current_weights(tmp_path, tiny):
    run = load_run(train_run(parse_config(tiny(TASK, MODEL, TRAIN)), tmp_path / "run", progress=False))
    x = tokens_of(run.task)
    trained = run.trainable(8)
    with torch.no_grad():
        torch.testing.assert_close(run.model(8)(x), trained.base(x), atol=2e-5, rtol=1e-4)
        assert not torch.allclose(run.model(8)(x), trained(x))  # not the linearized function's logits
    names = timeline.applicable(run)
    assert {"induction", "previous_token"} <= set(names)
    tl = timeline.probe_run(run, ["induction", "previous_token"], batch_size=8)
    assert all(len(s) == len(run.steps) for p in tl.per_head.values() for s in p.values())


def test_sweeps_set_keys_inside_the_base(tmp_path):
    base = (
        '[task]\nname = "markov_icl"\nk = 3\nlength = 16\n[model]\nkind = "linearized"\n'
        '[model.base]\nn_layers = 1\nd_model = 16\nattn_only = true\n[train]\nsteps = 4\ndevice = "cpu"\n'
        '[wandb]\nmode = "disabled"\n'
    )
    for grid in (
        '"model.base.n_layers" = [1, 2]\n"model.scale" = [1.0, 10.0]',
        "model.base.n_layers = [1, 2]\nmodel.scale = [1.0, 10.0]",
    ):
        path = tmp_path / "sweep.toml"
        path.write_text(base + f"[sweep]\nseeds = 2\n[sweep.grid]\n{grid}\n")
        plan = load_sweep(path)
        assert [a.key for a in plan.axes] == ["model.base.n_layers", "model.scale"] and len(plan.jobs) == 8
        job = next(j for j in plan.jobs if j.dir == "runs/n_layers=2,scale=10.0/seed_1")
        cfg = parse_config(job.config)
        assert (cfg.model.base.n_layers, cfg.model.scale, cfg.model.init_seed, cfg.model.base.init_seed) == (
            2,
            10.0,
            1,
            1,
        )
        assert cfg.model.base.d_model == 16
    over = load_sweep(path, ("sweep.grid.model.base.d_model=[8, 16]",))
    assert [a.key for a in over.axes] == ["model.base.n_layers", "model.scale", "model.base.d_model"]
    path.write_text(base + '[sweep]\n[sweep.grid]\n"model.base.n_layers.x" = [1]\n')
    with pytest.raises(ConfigError) as e:
        load_sweep(path)
    assert e.value.field == "model.base.n_layers"


def test_a_plugin_kind_as_the_base_is_remembered():
    """config.json's "plugins" lists the module of every kind a run names: the base's too (another process must
    import it to rebuild the run)."""
    from mechsynth import plugins

    named = [name for _, name in plugins._names({"model": {"kind": "linearized", "base": {"kind": "toy_attention"}}})]
    assert "linearized" in named and "toy_attention" in named
