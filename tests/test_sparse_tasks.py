"""sparse_parity and sparse_boolean against slow references written straight from the definitions."""

from __future__ import annotations

import itertools

import pytest
import torch

from mechsynth import tasks
from mechsynth.errors import ConfigError
from mechsynth.tasks.base import latent_values


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("encoding", ["pm1", "01"])
@pytest.mark.reference("sparse_parity")
def test_sparse_parity_matches_reference(encoding):
    task = tasks.make("sparse_parity", {"n": 12, "k": 3, "encoding": encoding, "seed": 5})
    b = task.sample(256, gen())
    S = b.truth["support"].tolist()
    assert len(set(S)) == 3 and all(0 <= s < 12 for s in S)
    values = task.spec.token_values
    for row, label in zip(b.tokens.tolist(), b.targets[:, -1].tolist()):
        x = [values[t] for t in row[:-1]]
        if encoding == "pm1":
            prod = 1.0
            for s in S:
                prod *= x[s]
            expected = 0 if prod == 1.0 else 1  # class 0 is the value +1
        else:
            expected = int(sum(x[s] for s in S)) % 2
        assert label == expected
        assert row[-1] == 2
    assert b.mask.sum().item() == 256 and b.mask[:, -1].all()


def test_sparse_parity_noise_rate_and_fixed_training_set():
    task = tasks.make("sparse_parity", {"n": 8, "k": 2, "noise": 0.2})
    b = task.sample(20_000, gen(), split="train")
    flipped = (b.targets[:, -1] != b.truth["label"]).float().mean().item()
    assert abs(flipped - 0.2) < 0.015
    clean = task.sample(2000, gen(), split="eval")
    assert torch.equal(clean.targets[:, -1], clean.truth["label"])

    fixed = tasks.make("sparse_parity", {"n": 8, "k": 2, "n_train": 10})
    rows = {tuple(r) for r in fixed.sample(2000, gen(), split="train").tokens.tolist()}
    assert len(rows) <= 10
    assert len({tuple(r) for r in fixed.sample(2000, gen(), split="eval").tokens.tolist()}) > 10


def test_support_comes_from_the_task_seed_not_the_data_seed():
    a, b, c = (tasks.make("sparse_parity", {"n": 30, "k": 3, "seed": s}) for s in (1, 1, 2))
    assert torch.equal(a.support, b.support) and not torch.equal(a.support, c.support)
    assert torch.equal(a.sample(8, gen(3)).tokens, b.sample(8, gen(3)).tokens)
    assert not torch.equal(a.sample(8, gen(3)).tokens, a.sample(8, gen(4)).tokens)


REFERENCE = {
    "and": lambda bits: int(all(bits)),
    "or": lambda bits: int(any(bits)),
    "majority": lambda bits: int(2 * sum(bits) > len(bits)),
    "parity": lambda bits: sum(bits) % 2,
}


@pytest.mark.parametrize("function", [*REFERENCE, "table"])
@pytest.mark.reference("sparse_boolean")
def test_sparse_boolean_matches_reference(function):
    s = 3
    table = (0, 1, 1, 0, 1, 0, 0, 1)[: 2**s] if function == "table" else ()
    task = tasks.make("sparse_boolean", {"length": 16, "s": s, "function": function, "table": list(table)})
    b = task.sample(512, gen())
    S = b.truth["support"].tolist()
    for row, label in zip(b.tokens.tolist(), b.targets[:, -1].tolist()):
        bits = [row[i] for i in S]
        if function == "table":
            expected = table[int("".join(map(str, bits)), 2)]
        else:
            expected = REFERENCE[function](bits)
        assert label == expected
    if function in ("and", "or"):  # the default bias balances the labels
        assert 0.4 < b.targets[:, -1].float().mean().item() < 0.6


def test_truth_table_enumerates_all_inputs():
    from mechsynth.tasks.sparse_boolean import truth_table

    for bits in itertools.product([0, 1], repeat=3):
        row = int("".join(map(str, bits)), 2)
        assert truth_table("majority", 3)[row].item() == REFERENCE["majority"](list(bits))


@pytest.mark.parametrize(
    "params, field",
    [({"n": 3, "k": 4}, "task.k"), ({"noise": 0.7}, "task.noise"), ({"encoding": "bits"}, "task.encoding")],
)
def test_sparse_parity_validation(params, field):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        tasks.make("sparse_parity", params)


def test_sparse_boolean_validation():
    with pytest.raises(ConfigError, match="^task.table:"):
        tasks.make("sparse_boolean", {"s": 2, "function": "table", "table": [0, 1]})


def test_balanced_accuracy_counts_each_label_equally():
    """Hand-computed: labels 0, 0, 0, 1 predicted 0, 0, 1, 0 -> acc 2/4, balanced (2/3 + 0/1) / 2."""
    from mechsynth.tasks.base import readout_batch

    task = tasks.make("sparse_boolean", {"length": 4, "s": 2})
    bits = torch.zeros(4, 4, dtype=torch.long)
    batch = readout_batch(bits, torch.tensor([0, 0, 0, 1]), {})
    logits = torch.zeros(4, 5, 2)
    logits[:, -1, :] = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    m = task.metrics(logits, batch)
    assert m["acc"] == pytest.approx(0.5) and m["balanced_acc"] == pytest.approx(1 / 3)
    # One label only: the accuracy on it.
    assert task.metrics(logits[:2], readout_batch(bits[:2], torch.tensor([0, 0]), {}))["balanced_acc"] == 1.0


def test_always_zero_scores_high_accuracy_but_half_balanced_accuracy_on_fair_bits():
    """Fair bits (bias 0.5): the AND of 3 bits is 1 for 1/8 of the inputs, so the constant 0 is right 7/8 of
    the time yet learns nothing; balanced accuracy says so."""
    task = tasks.make("sparse_boolean", {"length": 12, "s": 3, "function": "and", "bias": 0.5, "seed": 2})
    b = task.sample(8000, gen(1), split="eval")
    positives = b.targets[:, -1].float().mean().item()
    assert abs(positives - 1 / 8) < 0.015 and abs(task.p_one - 0.5) < 1e-12
    logits = torch.zeros(8000, 13, 2)
    logits[..., 0] = 1.0
    m = task.metrics(logits, b)
    assert m["acc"] == pytest.approx(1 - positives) and m["balanced_acc"] == pytest.approx(0.5)


def test_training_set_is_what_training_batches_are_drawn_from():
    task = tasks.make("sparse_boolean", {"length": 10, "s": 3, "bias": 0.5, "n_train": 6, "seed": 4})
    whole = task.training_set()
    assert whole.tokens.shape == (6, 11) and whole.mask[:, -1].all() and whole.mask.sum() == 6
    rows = {tuple(r) for r in whole.tokens.tolist()}
    assert {tuple(r) for r in task.sample(500, gen(), split="train").tokens.tolist()} == rows  # 500 draws cover all 6
    S = whole.truth["support"].tolist()
    assert whole.targets[:, -1].tolist() == [int(all(r[i] for i in S)) for r in whole.tokens.tolist()]
    # A larger training set of the same seed starts with the smaller one: sizes are nested.
    bigger = tasks.make("sparse_boolean", {"length": 10, "s": 3, "bias": 0.5, "n_train": 9, "seed": 4}).training_set()
    assert torch.equal(bigger.tokens[:6], whole.tokens)
    assert tasks.make("sparse_boolean", {"length": 10}).training_set() is None


@pytest.mark.parametrize(
    "name, params",
    [
        ("sparse_parity", {"n": 12, "k": 3, "seed": 5}),
        ("sparse_boolean", {"length": 14, "s": 3, "function": "majority"}),
    ],
)
@pytest.mark.reference("sparse_parity")
@pytest.mark.reference("sparse_boolean")
def test_latents_match_a_slow_reference(name, params):
    """The label (the parity or the majority of the bits of S, before noise) and each bit of S, read from the
    tokens at the task's support, defined at the readout alone."""
    task = tasks.make(name, params)
    S = task.support.tolist()
    batch = task.sample(64, gen(7), split="eval")
    got = latent_values(task, batch)
    assert [latent.name for latent in task.latents] == ["label"] + [f"bit:{i}" for i in range(len(S))]
    assert all(latent.n_values == 2 for latent in task.latents)
    for i, row in enumerate(batch.tokens.tolist()):
        bits = [row[p] for p in S]
        label = sum(bits) % 2 if name == "sparse_parity" else int(2 * sum(bits) > len(bits))
        want = {"label": label} | {f"bit:{j}": b for j, b in enumerate(bits)}
        readout = len(row) - 1
        for latent, value in want.items():
            values, defined = got[latent]
            assert defined[i].tolist() == [p == readout for p in range(len(row))], latent
            assert values[i, readout].item() == value, (latent, row)
