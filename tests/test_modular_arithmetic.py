"""modular_arithmetic against a slow reference: plain Python loops over every op and every pair."""

from __future__ import annotations

import pytest
import torch

from mechsynth import load_run, parse_config, tasks, train_run
from mechsynth.errors import ConfigError
from mechsynth.tasks.base import latent_values

OPS = ["a+b", "a-b", "a*b", "a/b", "a^2+b^2", "a^2+ab+b^2", "a^3+ab"]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def reference(op: str, a: int, b: int, p: int) -> int:
    """a ∘ b mod p straight from the definition (division: Fermat's inverse of b)."""
    return {
        "a+b": a + b,
        "a-b": a - b,
        "a*b": a * b,
        "a/b": a * pow(b, p - 2, p) if b else None,
        "a^2+b^2": a * a + b * b,
        "a^2+ab+b^2": a * a + a * b + b * b,
        "a^3+ab": a**3 + a * b,
    }[op] % p


def reference_pairs(op: str, p: int) -> list[tuple[int, int]]:
    """All inputs in canonical (a-major) order; a/b has no b = 0."""
    return [(a, b) for a in range(p) for b in range(p) if op != "a/b" or b != 0]


def pairs_of(batch) -> list[tuple[int, int]]:
    return [tuple(row[:2]) for row in batch.tokens.tolist()]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("p", [5, 7, 13])
@pytest.mark.reference("modular_arithmetic")
def test_every_pair_matches_reference(op, p):
    task = tasks.make("modular_arithmetic", {"p": p, "op": op})
    b = task.enumerate("all")
    pairs = reference_pairs(op, p)
    assert b.tokens.tolist() == [[x, y, p] for x, y in pairs]  # tokens `a b =`, canonical order
    assert b.targets[:, -1].tolist() == [reference(op, x, y, p) for x, y in pairs]
    assert b.mask.tolist() == [[False, False, True]] * len(pairs)
    assert b.truth["a"].tolist() == [x for x, _ in pairs] and b.truth["b"].tolist() == [y for _, y in pairs]
    assert b.truth["modulus"] == p
    spec = task.spec
    assert (spec.d_vocab, spec.d_vocab_out, spec.n_ctx) == (p + 1, p, 3)
    assert task.token_labels(b.tokens[-1]) == [str(pairs[-1][0]), str(pairs[-1][1]), "="]


@pytest.mark.reference("modular_arithmetic")
def test_division_inverts_multiplication():
    """Independently of Fermat: (a / b) * b = a for every pair."""
    task = tasks.make("modular_arithmetic", {"p": 11, "op": "a/b"})
    b = task.enumerate("all")
    assert all(c * y % 11 == x for (x, y), c in zip(pairs_of(b), b.targets[:, -1].tolist()))


@pytest.mark.parametrize("op, frac", [("a+b", 0.3), ("a/b", 0.5), ("a^3+ab", 0.9)])
def test_split_partitions_the_pairs_and_is_fixed_by_the_seed(op, frac):
    p = 11
    task = tasks.make("modular_arithmetic", {"p": p, "op": op, "train_frac": frac, "seed": 3})
    train, held = task.enumerate("train"), task.enumerate("eval")
    everything = reference_pairs(op, p)
    tr, ev = pairs_of(train), pairs_of(held)
    assert len(tr) == round(frac * len(everything)) and set(tr).isdisjoint(ev) and sorted(tr + ev) == everything
    assert tr == sorted(tr) and ev == sorted(ev)  # canonical order within each split
    # The stated definition: the first round(frac * N) of a permutation drawn with the task seed.
    perm = torch.randperm(len(everything), generator=torch.Generator().manual_seed(3))
    assert set(tr) == {everything[i] for i in perm[: len(tr)].tolist()}
    assert train.truth["in_train"].all() and not held.truth["in_train"].any()
    whole = task.enumerate("all")
    assert [pair for pair, t in zip(pairs_of(whole), whole.truth["in_train"].tolist()) if t] == tr
    # Same seed, same split; another seed, another split.
    again = tasks.make("modular_arithmetic", {"p": p, "op": op, "train_frac": frac, "seed": 3})
    other = tasks.make("modular_arithmetic", {"p": p, "op": op, "train_frac": frac, "seed": 4})
    assert pairs_of(again.enumerate("train")) == tr and pairs_of(other.enumerate("train")) != tr
    with pytest.raises(ValueError, match="'test'.*allowed: train, eval, all"):
        task.enumerate("test")


def test_sample_draws_from_its_split_and_is_reproducible():
    task = tasks.make("modular_arithmetic", {"p": 7, "train_frac": 0.4})
    for split in ("train", "eval"):
        allowed = set(pairs_of(task.enumerate(split)))
        g = gen(5)
        state = g.get_state()
        b = task.sample(500, g, split=split)
        drawn = pairs_of(b)
        assert set(drawn) == allowed  # only its split, and (500 draws of ≤ 30 pairs) all of it
        assert b.truth["in_train"].all() if split == "train" else not b.truth["in_train"].any()
        assert b.targets[:, -1].tolist() == [reference("a+b", x, y, 7) for x, y in drawn]
        g.set_state(state)
        assert torch.equal(task.sample(500, g, split=split).tokens, b.tokens)
    assert not torch.equal(task.sample(50, gen(5)).tokens, task.sample(50, gen(6)).tokens)
    with pytest.raises(ValueError, match="all"):  # "all" is for enumerate, not a split to sample
        task.sample(4, gen(), split="all")


@pytest.mark.parametrize("op", OPS)
def test_linear_truth_exactly_for_linear_ops(op):
    task = tasks.make("modular_arithmetic", {"p": 13, "op": op})
    b = task.enumerate("all")
    assert set(b.truth) == set(task.truth_keys)
    assert ("linear" in task.truth_keys) == (op in ("a+b", "a-b"))
    if op in ("a+b", "a-b"):
        ca, cb = b.truth["linear"]
        assert (ca, cb) == ((1, 1) if op == "a+b" else (1, -1))
        assert all((ca * x + cb * y) % 13 == c for (x, y), c in zip(pairs_of(b), b.targets[:, -1].tolist()))


@pytest.mark.parametrize(
    "params, field, match",
    [
        ({"p": 15}, "task.p", "prime"),
        ({"p": 1}, "task.p", "≥ 2"),
        ({"p": 4099}, "task.p", "≤"),
        ({"op": "a%b"}, "task.op", "'a/b'"),
        ({"train_frac": 0.0}, "task.train_frac", r"\(0, 1\)"),
        ({"train_frac": 1.0}, "task.train_frac", r"\(0, 1\)"),
        ({"p": 2, "train_frac": 0.1}, "task.train_frac", "empty"),
        ({"p": 2, "train_frac": 0.9}, "task.train_frac", "empty"),
    ],
)
def test_config_errors_name_the_field(params, field, match):
    with pytest.raises(ConfigError, match=f"^{field}: .*{match}"):
        tasks.make("modular_arithmetic", params)


def test_config_errors_in_python_too():
    cls = tasks.TASKS.get("modular_arithmetic").Config
    for kw, field in (({"p": 9}, "p"), ({"op": "a%b"}, "op"), ({"train_frac": 1.5}, "train_frac")):
        with pytest.raises(ConfigError, match=f"^{field}:"):
            cls(**kw)


def test_a_tiny_run_trains_and_evaluates(tmp_path, tiny):
    cfg = parse_config(
        tiny(
            {"name": "modular_arithmetic", "p": 7, "op": "a-b", "train_frac": 0.5},
            {"n_layers": 1, "n_heads": 2, "d_model": 32},
            {"steps": 20, "lr": 1e-3},
        )
    )
    run = load_run(train_run(cfg, tmp_path / "run", progress=False))
    assert run.steps[-1] == 20
    last = run.metrics[-1]
    assert 0.0 <= last["eval/acc"] <= 1.0 and last["eval/loss"] > 0


@pytest.mark.parametrize("op", ["a-b", "a/b", "a^3+ab"])
@pytest.mark.reference("modular_arithmetic")
def test_latents_match_a_slow_reference(op):
    """The operands read from the tokens and the answer from the definition, defined at "=" alone."""
    p = 11
    task = tasks.make("modular_arithmetic", {"p": p, "op": op})
    batch = task.sample(32, gen(1), split="eval")
    got = latent_values(task, batch)
    assert {latent.name: latent.n_values for latent in task.latents} == {"a": p, "b": p, "c": p}
    for i, (a, b, eq) in enumerate(batch.tokens.tolist()):
        assert eq == p
        for name, value in (("a", a), ("b", b), ("c", reference(op, a, b, p))):
            values, defined = got[name]
            assert defined[i].tolist() == [False, False, True] and values[i, 2].item() == value, (name, a, b)
