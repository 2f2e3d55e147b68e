"""The hmm_masked task against independent truth: the exact predictor against sums over every hidden path in
plain Python, the sampled data's conditional frequencies (and a plain-Python loop sampler's) against the exact
predictor, the token layout, the masks, the emission options and the config errors."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter, defaultdict

import pytest
import torch

from mechsynth import load_run, parse_config, tasks, train_run
from mechsynth.errors import ConfigError
from mechsynth.tasks.base import latent_values

TINY = {"k": 2, "d": 3, "length": 4, "concentration": 2.0, "seed": 3}


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def plain(task) -> tuple[list[list[float]], list[list[float]], list[float]]:
    """O [obs][hidden], T [hidden][hidden], π as Python floats."""
    return task.emission.tolist(), task.transition.tolist(), task.stationary.tolist()


def path_weights(task, shown: dict[int, int]) -> list[tuple[tuple[int, ...], float]]:
    """Every hidden path h_0..h_{L-1} with P(h, the shown x's), by plain products."""
    O, T, pi = plain(task)
    out = []
    for h in itertools.product(range(task.cfg.k), repeat=task.cfg.length):
        w = pi[h[0]] * math.prod(T[a][b] for a, b in zip(h, h[1:]))
        out.append((h, w * math.prod(O[x][h[t]] for t, x in shown.items())))
    return out


def brute_answer(task, shown: dict[int, int], asked: tuple[int, ...]) -> list[float]:
    """P(x_asked | the shown x's) over every joint value of the asked positions (first-major), by paths."""
    O, d = plain(task)[0], task.cfg.d
    paths = path_weights(task, shown)
    total = sum(w for _, w in paths)
    return [
        sum(w * math.prod(O[v][h[t]] for v, t in zip(values, asked)) for h, w in paths) / total
        for values in itertools.product(range(d), repeat=len(asked))
    ]


@pytest.mark.reference("hmm_masked")
@pytest.mark.parametrize("objective", ["pairwise", "triplet"])
def test_exact_predictor_matches_a_sum_over_hidden_paths(objective):
    for positions in ((0, 1, 2), (2, 0, 3), (3, 1, 0)):
        task = tasks.make("hmm_masked", TINY | {"objective": objective} | dict(zip(("t1", "t2", "t3"), positions)))
        listed = task.enumerate("all")
        asked = positions[1:] if objective == "triplet" else positions[1:2]
        for x1 in range(task.cfg.d):
            want = brute_answer(task, {positions[0]: x1}, asked)
            assert listed.tokens[x1].tolist() == [3] * positions[0] + [x1] + [3] * (3 - positions[0]) + [4]
            got = listed.truth["optimal"][x1, 0].tolist()
            assert max(abs(a - b) for a, b in zip(got, want)) < 1e-6, (positions, x1, got, want)


@pytest.mark.reference("hmm_masked")
def test_mlm_predictor_matches_a_sum_over_hidden_paths_for_every_mask():
    task = tasks.make("hmm_masked", TINY | {"objective": "mlm"})
    d, L, mask = task.cfg.d, task.cfg.length, task.mask_token
    slots = torch.tensor(list(itertools.product(range(d + 1), repeat=L)))
    slots = torch.where(slots == d, mask, slots)  # every pattern of shown values and masks
    optimal = task.optimal(slots)
    checked = 0
    for row, q in zip(slots.tolist(), optimal):
        shown = {t: x for t, x in enumerate(row) if x != mask}
        for t in range(L):
            if t not in shown:
                want = brute_answer(task, shown, (t,))
                assert max(abs(a - b) for a, b in zip(q[t].tolist(), want)) < 1e-6, (row, t)
                checked += 1
    assert checked == L * (d + 1) ** (L - 1)  # every masked slot of every pattern


def test_stationary_distribution_and_stochastic_matrices():
    for emission in ("generic", "repeated"):
        task = tasks.make("hmm_masked", {"k": 4, "d": 6, "emission": emission, "seed": 5})
        O, T, pi = plain(task)
        assert all(abs(sum(O[x][h] for x in range(6)) - 1) < 1e-12 for h in range(4))
        assert all(abs(sum(row) - 1) < 1e-12 for row in T) and abs(sum(pi) - 1) < 1e-12
        assert all(abs(sum(pi[a] * T[a][b] for a in range(4)) - pi[b]) < 1e-12 for b in range(4))
        rank = int(torch.linalg.matrix_rank(task.emission))
        assert rank == (4 if emission == "generic" else 3)
        assert torch.equal(task.emission[:, 0], task.emission[:, 1]) == (emission == "repeated")
    a, b = (tasks.make("hmm_masked", {"seed": s}) for s in (0, 1))
    assert torch.equal(a.emission, tasks.make("hmm_masked", {"seed": 0}).emission)
    assert not torch.equal(a.emission, b.emission)


def empirical(batch, n_answers: int) -> dict[tuple, tuple[Counter, torch.Tensor]]:
    """(input tokens, answer position) -> (the targets seen there, the optimal predictor there), scored only."""
    groups: dict[tuple, tuple[Counter, torch.Tensor]] = {}
    opt = batch.truth["optimal"]
    for i, j in batch.mask[:, -n_answers:].nonzero().tolist():
        key = (tuple(batch.tokens[i].tolist()), j)
        if key not in groups:
            groups[key] = (Counter(), opt[i, j])
        assert torch.equal(groups[key][1], opt[i, j]), "the optimal predictor is a function of the input"
        groups[key][0][int(batch.targets[i, batch.targets.shape[1] - n_answers + j])] += 1
    return groups


@pytest.mark.reference("hmm_masked")
@pytest.mark.parametrize("objective", ["pairwise", "triplet", "mlm"])
def test_sampled_conditional_frequencies_converge_to_the_exact_predictor(objective):
    task = tasks.make("hmm_masked", TINY | {"objective": objective, "length": 3})
    batch = task.sample(30000, gen(1), split="eval")
    checked = 0
    for counts, q in empirical(batch, task.cfg.n_answers).values():
        n = sum(counts.values())
        if n < 200:
            continue
        for c, p in enumerate(q.tolist()):
            assert abs(counts[c] / n - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-3, (objective, c, counts[c] / n, p)
            checked += 1
    assert checked >= task.cfg.d_out * (task.cfg.d if objective != "mlm" else 10)


@pytest.mark.reference("hmm_masked")
def test_a_plain_python_sampler_agrees_with_the_exact_table_and_the_task():
    """A loop sampler from O, T and π alone: its P(x_{t2}, x_{t3} | x_{t1}) is the task's exact table, and its
    frequencies of x_{t1} are those of the task's own sampler."""
    task = tasks.make("hmm_masked", TINY | {"objective": "triplet", "length": 3, "t1": 1, "t2": 2, "t3": 0})
    O, T, pi = plain(task)
    rng, d, n = random.Random(0), task.cfg.d, 40000

    def draw(weights: list[float]) -> int:
        return rng.choices(range(len(weights)), weights)[0]

    joint: dict[int, Counter] = defaultdict(Counter)
    for _ in range(n):
        h = [draw(pi)]
        for _ in range(2):
            h.append(draw(T[h[-1]]))
        x = [draw([O[v][s] for v in range(d)]) for s in h]
        joint[x[1]][x[2] * d + x[0]] += 1
    table = task.enumerate("all").truth["optimal"][:, 0]
    for x1 in range(d):
        m = sum(joint[x1].values())
        for c in range(d * d):
            p = float(table[x1, c])
            assert abs(joint[x1][c] / m - p) < 5 * math.sqrt(p * (1 - p) / m) + 1e-3, (x1, c)
    ours = Counter(task.sample(n, gen(2)).tokens[:, 1].tolist())
    for x1 in range(d):
        p = sum(joint[x1].values()) / n
        assert abs(ours[x1] / n - p) < 6 * math.sqrt(p * (1 - p) / n), (x1, ours[x1] / n, p)


def test_objectives_share_the_chain_and_lay_out_tokens():
    """Same task seed and generator: the same chain under every objective, so the triplet target carries the
    pairwise one, and mlm shows the same x_{t1} where it is visible."""
    params = {"k": 3, "d": 5, "length": 6, "t1": 2, "t2": 4, "t3": 1}
    pair, trip, mlm = (tasks.make("hmm_masked", params | {"objective": o}) for o in ("pairwise", "triplet", "mlm"))
    a, b, c = (t.sample(64, gen(3)) for t in (pair, trip, mlm))
    d, L = 5, 6
    assert torch.equal(a.tokens, b.tokens) and a.tokens.shape == (64, L + 1)
    assert (a.tokens[:, L] == d + 1).all() and (a.tokens[:, [0, 1, 3, 4, 5]] == d).all() and (a.tokens[:, 2] < d).all()
    assert torch.equal(b.targets[:, -1] // d, a.targets[:, -1]) and a.mask.sum(1).eq(1).all() and a.mask[:, -1].all()
    shown = c.tokens[:, 2] != d
    assert torch.equal(c.tokens[shown, 2], a.tokens[shown, 2]) and c.tokens.shape == (64, 2 * L)
    assert (c.tokens[:, L:] == d + 1).all() and not c.mask[:, :L].any()
    # mlm: a query is scored exactly where its slot is masked, and its target is the slot's hidden value
    assert torch.equal(c.mask[:, L:], c.tokens[:, :L] == d)
    assert torch.equal(c.targets[:, L:][~c.mask[:, L:]], c.tokens[:, :L][~c.mask[:, L:]])
    spec = trip.spec
    assert (spec.d_vocab, spec.d_vocab_out, spec.n_ctx) == (d + 2, d * d, L + 1) and spec.target_names[7] == "1,2"
    assert mlm.token_labels(c.tokens[0])[L:] == ["?"] * L and pair.spec.token_names[d] == "_"


@pytest.mark.parametrize("ratio", [0.15, 0.5, 1.0])
def test_mlm_masks_each_position_with_the_ratio_and_at_least_one(ratio):
    task = tasks.make("hmm_masked", {"objective": "mlm", "length": 8, "mask_ratio": ratio})
    masked = task.sample(20000, gen(4)).mask[:, 8:]
    assert masked.any(1).all()
    expected = 8 * ratio + (1 - ratio) ** 8  # independent masks, plus one where none is
    assert abs(masked.sum(1).float().mean() - expected) < 0.05, (ratio, masked.sum(1).float().mean())


def test_samples_are_reproducible_and_training_batches_skip_the_predictor():
    task = tasks.make("hmm_masked", {"objective": "mlm"})
    a, b = task.sample(16, gen(5), split="eval"), task.sample(16, gen(5), split="eval")
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.targets, b.targets) and torch.equal(a.mask, b.mask)
    assert tuple(a.truth) == task.truth_keys and "optimal" not in task.sample(4, gen(5)).truth
    assert not torch.equal(a.tokens, task.sample(16, gen(6), split="eval").tokens)


def test_metrics_kl_to_the_optimal_predictor():
    for objective in ("triplet", "mlm"):
        task = tasks.make("hmm_masked", {"objective": objective, "d": 4})
        batch = task.sample(256, gen(7), split="eval")
        P = batch.truth["optimal"].shape[1]
        exact = torch.zeros(256, task.spec.n_ctx, task.spec.d_vocab_out)
        exact[:, -P:] = batch.truth["optimal"].clamp_min(1e-30).log()
        m = task.metrics(exact, batch)
        assert abs(m["kl_optimal"]) < 1e-5, m
        q = batch.truth["optimal"][batch.mask[:, -P:]].double()
        entropy = float(-(q * q.clamp_min(1e-300).log()).sum(-1).mean())
        assert abs(m["optimal_loss"] - entropy) < 1e-9
        uniform = task.metrics(torch.zeros_like(exact), batch)  # KL(q ‖ uniform) = log(d_out) − H(q)
        assert abs(uniform["kl_optimal"] - (math.log(task.spec.d_vocab_out) - entropy)) < 1e-5, uniform


def test_listed_inputs_for_the_probe():
    task = tasks.make("hmm_masked", {"objective": "mlm", "d": 3, "length": 4, "t1": 1, "t2": 3, "t3": 0})
    listed = task.enumerate("all")
    assert listed.tokens.shape == (3 + 9, 8) and task.enumerate("train") is None and task.enumerate("eval") is None
    assert listed.tokens[:3, :4].tolist() == [[3, x, 3, 3] for x in range(3)]
    assert listed.tokens[3 + 5, :4].tolist() == [3, 1, 3, 2]  # (x_{t1}, x_{t2}) = (1, 2), x_{t1}-major
    assert torch.equal(listed.mask[:, 4:], listed.tokens[:, :4] == 3)
    assert torch.equal(
        listed.targets[:, 4:][listed.mask[:, 4:]], listed.truth["optimal"][listed.mask[:, 4:]].argmax(-1)
    )


@pytest.mark.parametrize(
    "params, field, match",
    [
        ({"k": 1}, "task.k", "≥ 2"),
        ({"d": 65}, "task.d", "≤ 64"),
        ({"t2": 8}, "task.t2", "< length=8"),
        ({"t2": 0}, "task.t2", "distinct"),
        ({"t3": 1}, "task.t3", "distinct"),
        ({"mask_ratio": 0.0}, "task.mask_ratio", "\\(0, 1\\]"),
        ({"concentration": 0}, "task.concentration", "10\\*\\*4"),
        ({"objective": "pairs"}, "task.objective", "allowed"),
        ({"emission": "x"}, "task.emission", "allowed"),
        ({"length": 2}, "task.t3", "< length=2"),
    ],
)
def test_config_errors_name_the_field(params, field, match):
    with pytest.raises(ConfigError, match=f"^{field}: .*{match}"):
        tasks.make("hmm_masked", params)


def test_config_accepts_what_pairwise_leaves_unused():
    assert tasks.make("hmm_masked", {"objective": "pairwise", "length": 2, "t3": 1}).spec.n_ctx == 3
    cls = tasks.TASKS.get("hmm_masked").Config
    with pytest.raises(ConfigError, match="^t1:"):
        cls(t1=9)


def test_a_tiny_run_trains_and_evaluates(tmp_path, tiny):
    cfg = parse_config(
        tiny({"name": "hmm_masked", "objective": "triplet", "d": 4}, {"n_layers": 1}, {"steps": 20, "lr": 3e-3})
    )
    run = load_run(train_run(cfg, tmp_path / "run", progress=False))
    first, last = run.metrics[0], run.metrics[-1]
    assert last["eval/kl_optimal"] < first["eval/kl_optimal"] and last["eval/loss"] > last["eval/optimal_loss"] > 0


@pytest.mark.reference("hmm_masked")
@pytest.mark.parametrize("objective", ["triplet", "mlm"])
def test_latents_match_a_slow_reference(objective):
    """The hidden chain, walked step by step from π, T and the sampler's own uniforms (the hidden steps, then the
    emissions), emits the visible tokens and is the latent `hidden` at the L slots, undefined at the answers."""
    task = tasks.make("hmm_masked", TINY | {"objective": objective, "length": 6})
    O, T, pi = plain(task)
    B, L, d = 16, task.cfg.length, task.cfg.d
    batch = task.sample(B, gen(2), split="eval")
    g = gen(2)
    u_h, u_x = torch.rand(B, L, generator=g).tolist(), torch.rand(B, L, generator=g).tolist()

    def inverse_cdf(weights: list[float], u: float) -> int:
        total = 0.0
        for i, w in enumerate(weights):
            total += w
            if u <= total:
                return i
        return len(weights) - 1

    values, defined = latent_values(task, batch)["hidden"]
    for i in range(B):
        h = [inverse_cdf(pi, u_h[i][0])]
        for t in range(1, L):
            h.append(inverse_cdf(T[h[-1]], u_h[i][t]))
        x = [inverse_cdf([O[v][h[t]] for v in range(d)], u_x[i][t]) for t in range(L)]
        slots = batch.tokens[i, :L].tolist()
        assert [v for v in slots if v != task.mask_token] == [x[t] for t in range(L) if slots[t] != task.mask_token]
        assert values[i, :L].tolist() == h
        assert defined[i].tolist() == [True] * L + [False] * task.cfg.n_answers
    assert [latent.n_values for latent in task.latents] == [task.cfg.k]
