"""associative_memory against plain-Python references, and the linear_memory / mlp_memory kinds against hand
computation, separate models, their frozen embeddings and the paper's capacity gap (Nichani, Lee, Bietti 2024)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from mechsynth import load_run, models, parse_config, probes, tasks, train_run
from mechsynth.errors import ConfigError
from mechsynth.models.memory import LinearMemoryConfig, MLPMemoryConfig
from mechsynth.tasks.base import TaskSpec


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ---- the task ----------------------------------------------------------------------------------------


@pytest.mark.reference("associative_memory")
def test_sequences_and_the_map_match_reference():
    N, M = 13, 4
    task = tasks.make("associative_memory", {"inputs": N, "outputs": M, "seed": 7})
    # The stated map, as plain arithmetic: input j gets their f*(i) = floor(i·M/N) at i = perm[j].
    perm = torch.randperm(N, generator=gen(7)).tolist()
    want = [perm[j] * M // N for j in range(N)]
    assert task.mapping.tolist() == want
    counts = [want.count(y) for y in range(M)]
    assert sorted(counts) == [3, 3, 3, 4]  # every output used floor(13/4) or ceil(13/4) times
    for split in ("train", "eval"):
        b = task.sample(500, gen(1), split=split)
        assert b.tokens.shape == b.targets.shape == b.mask.shape == (500, 1) and b.mask.all()
        for row, target, x in zip(b.tokens.tolist(), b.targets.tolist(), b.truth["input"].tolist()):
            assert row == [x] and 0 <= x < N and target == [want[x]]
        assert set(b.truth["input"].tolist()) == set(range(N))  # 500 uniform draws of 13 inputs reach all
        assert b.truth["mapping"].tolist() == want and set(b.truth) == set(task.truth_keys)
    listed = task.enumerate("eval")
    assert listed.tokens[:, 0].tolist() == list(range(N)) and listed.targets[:, 0].tolist() == want
    assert task.enumerate("train").tokens.tolist() == task.enumerate("all").tokens.tolist() == listed.tokens.tolist()
    # M unset: M = N, a permutation.
    square = tasks.make("associative_memory", {"inputs": 50})
    assert sorted(square.mapping.tolist()) == list(range(50)) and square.spec.d_vocab_out == 50


@pytest.mark.reference("associative_memory")
def test_random_map_and_zipf_inputs_match_reference():
    task = tasks.make("associative_memory", {"inputs": 40, "outputs": 3, "mapping": "random", "seed": 2})
    assert task.mapping.tolist() == torch.randint(3, (40,), generator=gen(2)).tolist()
    a = 1.5
    task = tasks.make("associative_memory", {"inputs": 6, "zipf": a})
    weights = [1 / (x + 1) ** a for x in range(6)]
    p = [w / sum(weights) for w in weights]
    assert task.tables("cpu")[1].tolist() == pytest.approx(p, rel=1e-6)
    train = task.sample(40_000, gen(3)).truth["input"].tolist()
    held_out = task.sample(40_000, gen(3), split="eval").truth["input"].tolist()
    for x in range(6):  # 40k draws: frequencies within 0.01 of p(x) (training) and of 1/6 (eval)
        assert abs(train.count(x) / 40_000 - p[x]) < 0.01
        assert abs(held_out.count(x) / 40_000 - 1 / 6) < 0.01
    # Under Zipf the training split only samples (a listed set would be trained on uniformly); eval is listed.
    assert task.enumerate("train") is None and len(task.enumerate("eval").tokens) == 6


def test_p_acc_weights_by_the_input_distribution():
    """N = 4, zipf 1: p = (12, 6, 4, 3)/25. Right on inputs 0 and 3: acc 1/2, p_acc (12 + 3)/25."""
    task = tasks.make("associative_memory", {"inputs": 4, "zipf": 1.0})
    batch = task.enumerate("eval")
    logits = torch.zeros(4, 1, 4)
    for x, y in enumerate(batch.targets[:, 0].tolist()):
        logits[x, 0, y if x in (0, 3) else (y + 1) % 4] = 5.0
    m = task.metrics(logits, batch)
    assert m["acc"] == 0.5 and m["p_acc"] == pytest.approx(15 / 25)
    z = math.exp(5) + 3
    assert m["loss"] == pytest.approx(-(2 * math.log(math.exp(5) / z) + 2 * math.log(1 / z)) / 4, rel=1e-5)
    assert "p_acc" not in tasks.make("associative_memory", {"inputs": 4}).metrics(logits, batch)


def test_sample_is_reproducible_and_the_spec():
    task = tasks.make("associative_memory", {"inputs": 9, "outputs": 5})
    a, b = task.sample(64, gen(5)), task.sample(64, gen(5))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.targets, b.targets)
    spec = task.spec
    assert (spec.d_vocab, spec.d_vocab_out, spec.n_ctx) == (9, 5, 1)
    assert spec.token_names[:2] == ("x0", "x1") and spec.target_names[-1] == "y4"
    with pytest.raises(ValueError, match="'test'.*allowed: train, eval"):
        task.sample(4, gen(), split="test")
    with pytest.raises(ValueError, match="'test'.*allowed: train, eval, all"):
        task.enumerate("test")


@pytest.mark.parametrize(
    "params, field, match",
    [
        ({"inputs": 0}, "task.inputs", "≥ 1"),
        ({"outputs": 0}, "task.outputs", "≥ 1"),
        ({"zipf": -0.5}, "task.zipf", "≥ 0"),
        ({"mapping": "sorted"}, "task.mapping", "not allowed"),
        ({"inputs": 2**20 + 1}, "task.inputs", "listed"),
        ({"map": 1}, "task.map", "unknown key"),
    ],
)
def test_task_config_errors_name_the_field(params, field, match):
    with pytest.raises(ConfigError, match=f"^{field}: .*{match}"):
        tasks.make("associative_memory", params)


# ---- the model kinds ---------------------------------------------------------------------------------

SPEC = TaskSpec(3, 4, 2, ("a", "b", "c"), ("0", "1", "2", "3"))  # two positions of 3 tokens, 4 outputs


def hand_logits(model, tokens: list[int]) -> list[float]:
    """Plain loops: e = Σ_p W_E[p, x_p] / sqrt(P), then the kind's map, then u_yᵀ out for every y."""
    W_E, W_U = model.W_E.tolist(), model.W_U.tolist()
    d = len(W_U)
    e = [sum(W_E[p][x][j] for p, x in enumerate(tokens)) / math.sqrt(len(tokens)) for j in range(d)]
    if isinstance(model.cfg, LinearMemoryConfig):
        W = model.W_mem.tolist()
        out = [sum(e[j] * W[j][k] for j in range(d)) for k in range(d)]
    else:
        W_in, b_in, W_out = model.W_in.tolist(), model.b_in.tolist(), model.W_out.tolist()
        hidden = [max(0.0, sum(e[j] * W_in[j][i] for j in range(d)) + b_in[i]) for i in range(len(b_in))]
        out = [sum(hidden[i] * W_out[i][k] for i in range(len(hidden))) for k in range(d)]
    return [sum(out[k] * W_U[k][y] for k in range(d)) for y in range(len(W_U[0]))]


KINDS = [LinearMemoryConfig(d=5, init_seed=3), MLPMemoryConfig(d=5, m=7, init_seed=3)]


@pytest.mark.parametrize("cfg", KINDS, ids=lambda c: c.kind)
def test_forward_matches_a_hand_computation(cfg):
    model = models.build(cfg, SPEC)
    with torch.no_grad():  # a nonzero bias, so the hand computation checks it
        for name, p in model.named_parameters():
            if name == "b_in":
                p.copy_(torch.randn(p.shape, generator=gen(9)))
    sequences = [[0, 2], [1, 1], [2, 0]]
    logits = model(torch.tensor(sequences))
    assert logits.shape == (3, 1, 4)
    for row, seq in zip(logits[:, 0].tolist(), sequences):
        assert row == pytest.approx(hand_logits(model, seq), abs=1e-5)
    # One token: e(x) is exactly W_E[0, x], a unit vector; the output embeddings are unit columns.
    assert model(torch.tensor([[2]]))[0, 0].tolist() == pytest.approx(hand_logits(model, [2]), abs=1e-5)
    torch.testing.assert_close(model.W_E.norm(dim=-1), torch.ones(2, 3))
    torch.testing.assert_close(model.W_U.norm(dim=0), torch.ones(4))
    _, cache = model.run_with_cache(torch.tensor([[2]]))
    torch.testing.assert_close(cache["hook_in"][0], model.W_E[0, 2])
    if cfg.kind == "mlp_memory":
        torch.testing.assert_close(cache["hook_post"], cache["hook_pre"].relu())


@pytest.mark.parametrize("cfg", KINDS, ids=lambda c: c.kind)
def test_sizes_and_the_papers_parameter_count(cfg):
    model = models.build(cfg, SPEC)
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert total == cfg.param_count(SPEC) == trainable + 2 * 3 * 5 + 5 * 4  # W_E [2, 3, 5] and W_U [5, 4] are frozen
    if cfg.kind == "linear_memory":
        assert cfg.memory_params == 25 == trainable
    else:
        assert cfg.memory_params == 2 * 7 * 5 == trainable - 7  # (their count leaves out the m biases)
    # The input-facing weights: row p holds W_E[p, t] @ W (W_mem or W_in) for every token t.
    first = model.W_mem if cfg.kind == "linear_memory" else model.W_in
    for p in range(2):
        for t in range(3):
            w = first.shape[1]
            torch.testing.assert_close(model.W_pos_in[p, t * w : (t + 1) * w], model.W_E[p, t] @ first)


@pytest.mark.parametrize("cfg", KINDS, ids=lambda c: c.kind)
def test_side_by_side_models_equal_separate_ones(cfg):
    stacked = models.build(cfg, SPEC, n_models=3)
    singles = [models.build(dataclasses.replace(cfg, init_seed=3 + i), SPEC) for i in range(3)]
    for name, p in stacked.named_parameters():  # the frozen embeddings too: each seed draws its own
        assert all(torch.equal(p[i], s.get_parameter(name)) for i, s in enumerate(singles)), name
    assert not torch.equal(singles[0].W_E, singles[1].W_E)
    shared = torch.randint(0, 3, (4, 2), generator=gen(1))
    own = torch.randint(0, 3, (3, 4, 2), generator=gen(2))
    logits, cache = stacked.run_with_cache(shared)
    for i, s in enumerate(singles):
        ref_logits, ref = s.run_with_cache(shared)
        torch.testing.assert_close(logits[i], ref_logits)
        torch.testing.assert_close(cache["hook_out"][4 * i : 4 * (i + 1)], ref["hook_out"])
        torch.testing.assert_close(stacked(own)[i], s(own[i]))
        torch.testing.assert_close(stacked.W_pos_in[i], s.W_pos_in)


@pytest.mark.parametrize("passes", ["stacked", "per_seed"])
def test_training_moves_only_the_memory(tmp_path, tiny, passes):
    """Two seeds side by side (per-seed passes rewrap every parameter as trainable): the embeddings stay
    bit-exact, the memory moves, and eval/acc is the fraction of all N inputs the model gets right."""
    data = tiny(
        {"name": "associative_memory", "inputs": 24},
        {"kind": "mlp_memory", "d": 8, "m": 16},
        {
            "steps": 12,
            "checkpoints": 2,
            "eval_every": 12,
            "seeds": 2,
            "seed_passes": passes,
            "data": "fixed",
            "batch_size": 24,
            "optimizer": "adam",
            "lr": 0.05,
        },
    )
    run_dir = train_run(parse_config(data), tmp_path / "run", progress=False)
    for seed in (0, 1):
        run = load_run(run_dir / f"seed_{seed}")
        first, last = run.weights(0), run.weights(12)
        assert torch.equal(first["W_E"], last["W_E"]) and torch.equal(first["W_U"], last["W_U"])
        assert not torch.equal(first["W_in"], last["W_in"]) and not torch.equal(first["W_out"], last["W_out"])
        model, batch = run.model(12), run.task.enumerate("eval")
        right = (model(batch.tokens)[:, 0].argmax(-1) == batch.targets[:, 0]).tolist()
        assert len(right) == 24 and run.metrics[-1]["eval/acc"] == pytest.approx(sum(right) / 24)


def test_hidden_progress_applies_through_the_input_facing_weights():
    parity = tasks.make("sparse_parity", {"n": 6, "k": 2})
    for cfg in KINDS:
        assert probes.can_run("hidden_progress", models.build(cfg, parity.spec), parity)
        # (No probe reads an associative memory on its own task: none there has hooks or truth for it.)


@pytest.fixture
def one_thread():
    """Ops this small run fastest on one thread, and on a busy machine threads wait on each other; the rest
    of the suite gets its thread count back (bit-exact resume depends on it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def full_batch_accuracy(cfg, n_inputs: int, steps: int, lr: float) -> float:
    """Their training: Adam on the cross-entropy of all N inputs at once; the best accuracy on the way."""
    task = tasks.make("associative_memory", {"inputs": n_inputs})
    model, batch = models.build(cfg, task.spec), task.enumerate("all")
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    best = torch.tensor(0.0)
    for _ in range(steps):
        logits = model(batch.tokens)[:, 0]
        best = torch.maximum(best, (logits.argmax(-1) == batch.targets[:, 0]).float().mean())
        opt.zero_grad()
        F.cross_entropy(logits, batch.targets[:, 0]).backward()
        opt.step()
    return best.item()


@pytest.mark.slow
def test_capacity_grows_with_the_parameter_count(one_thread):
    """d = 16 (d² = 256): a linear memory stores N = 32 associations exactly and fails at N = 512 = 2d²
    (their N log N ∝ d² puts its capacity near 50); an MLP memory over the same embeddings with m = 64
    (2md = 2048 parameters) stores N = 128, beyond the linear one's capacity."""
    linear = LinearMemoryConfig(d=16)
    assert full_batch_accuracy(linear, 32, 300, 0.1) == 1.0
    assert full_batch_accuracy(linear, 512, 200, 0.1) < 0.05
    assert full_batch_accuracy(linear, 128, 600, 0.1) < 0.5
    assert full_batch_accuracy(MLPMemoryConfig(d=16, m=64), 128, 600, 0.03) == 1.0


@pytest.mark.parametrize(
    "table, field, match",
    [
        ({"kind": "linear_memory", "d": 0}, "model.d", "≥ 1"),
        ({"kind": "mlp_memory", "m": 0}, "model.m", "≥ 1"),
        ({"kind": "mlp_memory", "init_range": 0.0}, "model.init_range", "> 0"),
        ({"kind": "linear_memory", "m": 8}, "model.m", "is a field of kind 'mlp_memory'"),
    ],
)
def test_model_config_errors_name_the_field(table, field, match):
    with pytest.raises(ConfigError) as e:
        models.parse(table)
    assert e.value.field == field and match in str(e.value)


def test_a_transformer_trains_on_the_task_too(tmp_path, tiny):
    cfg = parse_config(
        tiny(
            {"name": "associative_memory", "inputs": 16},
            {"n_layers": 1, "d_model": 16},
            {"steps": 10, "checkpoints": 2},
        )
    )
    run = load_run(train_run(cfg, tmp_path / "run", progress=False))
    assert run.steps[-1] == 10 and 0.0 <= run.metrics[-1]["eval/acc"] <= 1.0
