"""Counterfactual pairs for causal patching: every task that sets `patch_metric` makes them, and each pair is
checked against the task's answer recomputed here in plain Python (parity by a loop over bits, (a ∘ b) mod p
with Python ints, the automaton stepped through its table, the fact looked up)."""

from __future__ import annotations

import pytest
import torch

from mechsynth import tasks
from mechsynth.tasks.base import Batch

SEVEN = {
    "sparse_parity",
    "sparse_boolean",
    "markov_icl",
    "automata",
    "modular_arithmetic",
    "causal_icl",
    "factual_recall",
}
PATCHED = sorted(n for n in tasks.names() if tasks.TASKS.get(n).patch_metric is not None)
UNPATCHED = sorted(set(tasks.names()) - set(PATCHED))


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def clean(task, n: int = 16, split: str | None = None, seed: int = 0) -> Batch:
    return task.sample(n, gen(seed), split=split or task.main_eval)


def corrupt(task, batch: Batch, control: bool = False, seed: int = 1) -> Batch | None:
    return task.counterfactual(batch, gen(seed), control)


def same(x: Batch, y: Batch) -> bool:
    tensors = lambda b: [b.tokens, b.targets, b.mask] + [v for v in b.truth.values() if isinstance(v, torch.Tensor)]  # noqa: E731
    return set(x.truth) == set(y.truth) and all(torch.equal(u, v) for u, v in zip(tensors(x), tensors(y)))


def changed(x: Batch, y: Batch) -> list[list[int]]:
    """Per sequence, the positions whose token differs."""
    return [torch.nonzero(row)[:, 0].tolist() for row in x.tokens != y.tokens]


def answer_differs(x: Batch, y: Batch) -> list[bool]:
    """Per sequence: is some scored answer different (where logit_diff looks)?"""
    return ((x.targets != y.targets) & x.mask).any(1).tolist()


def test_the_tasks_that_make_counterfactuals():
    assert SEVEN <= set(PATCHED), f"no counterfactuals: {SEVEN - set(PATCHED)}"
    assert {"hmm_masked", "associative_memory"} <= set(UNPATCHED)


@pytest.mark.parametrize("name", UNPATCHED)
def test_a_task_without_patch_metric_makes_none(name):
    task = tasks.make(name)
    with pytest.raises(NotImplementedError, match=name):
        task.counterfactual(clean(task, 2), gen(0))


@pytest.mark.parametrize("name", PATCHED)
def test_counterfactuals_keep_the_batch_contract(name):
    """Same shapes, dtypes and truth keys; deterministic per generator state; the clean batch untouched; for
    logit_diff, the answer moves in most sequences and a control never moves it."""
    task = tasks.make(name)
    batch = clean(
        task, 16 if task.patch_metric == "logit_diff" else 4
    )  # eval batches of "loss" tasks carry costly predictors
    before = Batch(
        batch.tokens.clone(),
        batch.targets.clone(),
        batch.mask.clone(),
        {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.truth.items()},
    )
    spec = task.spec
    for control in (False, True):
        cf = corrupt(task, batch, control)
        if cf is None:
            assert control, f"{name}: no counterfactual"
            continue
        assert same(before, batch), f"{name}: the clean batch changed"
        for field in ("tokens", "targets", "mask"):
            u, v = getattr(batch, field), getattr(cf, field)
            assert (u.shape, u.dtype) == (v.shape, v.dtype), (name, field)
        assert list(cf.truth) == list(batch.truth), name
        for key, value in batch.truth.items():
            if isinstance(value, torch.Tensor):
                assert (cf.truth[key].shape, cf.truth[key].dtype) == (value.shape, value.dtype), (name, key)
            else:
                assert cf.truth[key] == value, (name, key)
        assert 0 <= cf.tokens.min() and cf.tokens.max() < spec.d_vocab
        assert 0 <= cf.targets[cf.mask].min() and cf.targets[cf.mask].max() < spec.d_vocab_out
        if not control:
            assert same(cf, corrupt(task, batch)), f"{name}: not deterministic"
            assert not torch.equal(cf.tokens, corrupt(task, batch, seed=2).tokens), f"{name}: ignores the generator"
        assert not torch.equal(cf.tokens, batch.tokens)
        if task.patch_metric == "logit_diff":
            differs = answer_differs(batch, cf)
            if control:
                assert not any(differs), f"{name}: a control moved the answer"
            else:
                assert sum(differs) > len(differs) / 2, f"{name}: the answer moved in {sum(differs)} of {len(differs)}"


# sparse_parity -------------------------------------------------------------------------------------------


def test_sparse_parity_flips_one_bit_of_s_and_the_label():
    task = tasks.make("sparse_parity", {"n": 12, "k": 3})
    S, n = task.support.tolist(), 12
    batch = clean(task, 64)
    cf, ctrl = corrupt(task, batch), corrupt(task, batch, control=True)
    for b in range(64):
        bits = cf.tokens[b, :n].tolist()
        assert cf.targets[b, -1] == cf.truth["label"][b] == sum(bits[i] for i in S) % 2
        assert cf.targets[b, -1] != batch.targets[b, -1]
    assert all(len(c) == 1 and c[0] in S for c in changed(batch, cf))
    assert all(len(c) == 1 and c[0] not in S for c in changed(batch, ctrl))
    assert torch.equal(ctrl.targets, batch.targets) and torch.equal(ctrl.truth["label"], batch.truth["label"])
    assert {c[0] for c in changed(batch, cf)} == set(S)  # every bit of S is drawn
    assert (
        corrupt(
            tasks.make("sparse_parity", {"n": 4, "k": 4}),
            clean(tasks.make("sparse_parity", {"n": 4, "k": 4})),
            control=True,
        )
        is None
    )


@pytest.mark.parametrize("params", [{"noise": 0.3}, {"noise": 0.3, "n_train": 50}])
def test_sparse_parity_training_batches_keep_each_label_noise_flip(params):
    task = tasks.make("sparse_parity", {"n": 8, "k": 3, **params})
    batch = clean(task, 64, split="train")
    flips = (batch.targets[:, -1] ^ batch.truth["label"]).tolist()
    assert 0 < sum(flips) < 64
    for control in (False, True):
        cf = corrupt(task, batch, control)
        assert (cf.targets[:, -1] ^ cf.truth["label"]).tolist() == flips
        S = task.support.tolist()
        assert cf.truth["label"].tolist() == [sum(row[i] for i in S) % 2 for row in cf.tokens.tolist()]


# sparse_boolean ------------------------------------------------------------------------------------------


FUNCTIONS = {
    "and": lambda v: int(all(v)),
    "or": lambda v: int(any(v)),
    "parity": lambda v: sum(v) % 2,
    "majority": lambda v: int(2 * sum(v) > len(v)),
}


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_sparse_boolean_flips_a_pivotal_bit(function):
    task = tasks.make("sparse_boolean", {"length": 10, "s": 3, "function": function})
    f, S = FUNCTIONS[function], task.support.tolist()
    batch = clean(task, 64)
    cf, ctrl = corrupt(task, batch), corrupt(task, batch, control=True)
    for b, (row, where, where_ctrl) in enumerate(zip(batch.tokens.tolist(), changed(batch, cf), changed(batch, ctrl))):
        pivotal = [i for i in S if f([row[j] ^ (j == i) for j in S]) != f([row[j] for j in S])]
        assert len(where) == 1 and where[0] in (pivotal or S)
        assert cf.targets[b, -1] == f([cf.tokens[b, j].item() for j in S])
        assert (cf.targets[b, -1] != batch.targets[b, -1]) == bool(pivotal)
        assert len(where_ctrl) == 1 and where_ctrl[0] not in S
    assert torch.equal(ctrl.targets, batch.targets)


def test_sparse_boolean_draws_every_pivotal_bit():
    """One sequence repeated: each copy draws its own bit, so all pivotal bits appear and no other does."""
    task = tasks.make("sparse_boolean", {"length": 8, "s": 5, "function": "majority"})
    S = task.support.tolist()
    bits = torch.zeros(1, 8, dtype=torch.long)
    bits[0, S[:3]] = 1  # 3 of 5 set: each set bit is pivotal, no unset one
    batch = clean(task, 200)
    batch.tokens[:, :8] = bits
    assert {c[0] for c in changed(batch, corrupt(task, batch))} == set(S[:3])
    whole = tasks.make("sparse_boolean", {"length": 3, "s": 3})
    assert corrupt(whole, clean(whole), control=True) is None


# automata ------------------------------------------------------------------------------------------------


def run(task, symbols: list[int]) -> list[int]:
    state, out = task.table.start, []
    for x in symbols:
        state = task.table.delta[state][x]
        out.append(state)
    return out


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"automaton": "dihedral", "n": 4},
        {"automaton": "symmetric", "n": 3, "alphabet": "all"},
        {"automaton": "flipflop"},
        {"automaton": "dyck", "n": 3},
    ],
)
@pytest.mark.parametrize("split", ["eval", "eval_long"])
def test_automata_change_one_symbol_and_recompute_the_states(params, split):
    task = tasks.make("automata", {"length": 12, **params})
    batch = clean(task, 32, split)
    cf = corrupt(task, batch)
    assert corrupt(task, batch, control=True) is None
    where = changed(batch, cf)
    assert all(len(c) == 1 for c in where) if task.cfg.automaton != "dyck" else all(len(c) <= 1 for c in where)
    assert sum(map(len, where)) > 16
    for b in range(32):
        states = run(task, cf.tokens[b].tolist())
        assert min(states) >= 0 and cf.targets[b].tolist() == states == cf.truth["states"][b].tolist()
        if task.cfg.automaton in ("parity", "dihedral", "symmetric") and where[b]:  # groups: the state moves at once
            assert cf.targets[b, where[b][0]] != batch.targets[b, where[b][0]]
    if task.factors:
        for k, v in task.factors.items():
            assert torch.equal(cf.truth[f"factor:{k}"], v[cf.targets])


def test_dyck_words_with_no_valid_change_stay():
    task = tasks.make("automata", {"automaton": "dyck", "n": 1, "length": 6})
    batch = clean(task, 8)
    assert torch.equal(corrupt(task, batch).tokens, batch.tokens)  # depth ≤ 1 forces ()()(): any change breaks it


# modular_arithmetic --------------------------------------------------------------------------------------


def python_answer(op: str, a: int, b: int, p: int) -> int:
    return {
        "a+b": a + b,
        "a-b": a - b,
        "a*b": a * b,
        "a/b": a * pow(b, p - 2, p),
        "a^2+b^2": a * a + b * b,
        "a^2+ab+b^2": a * a + a * b + b * b,
        "a^3+ab": a**3 + a * b,
    }[op] % p


@pytest.mark.parametrize("op", ["a+b", "a-b", "a*b", "a/b", "a^2+b^2", "a^2+ab+b^2", "a^3+ab"])
def test_modular_arithmetic_replaces_b_to_move_the_answer(op):
    p = 11
    task = tasks.make("modular_arithmetic", {"p": p, "op": op, "train_frac": 0.5})
    batch = task.enumerate("all")
    cf = corrupt(task, batch)
    assert corrupt(task, batch, control=True) is None
    train = {tuple(pair) for pair in task.enumerate("train").tokens[:, :2].tolist()}
    residues = range(1, p) if op == "a/b" else range(p)
    for (a, b, eq), (a2, b2, eq2), target in zip(batch.tokens.tolist(), cf.tokens.tolist(), cf.targets[:, -1].tolist()):
        assert (a2, eq2) == (a, eq) and b2 != b and b2 in residues
        assert target == python_answer(op, a, b2, p)
        can = any(python_answer(op, a, x, p) != python_answer(op, a, b, p) for x in residues)
        assert (target != python_answer(op, a, b, p)) == can
    assert cf.truth["b"].tolist() == cf.tokens[:, 1].tolist() and cf.truth["a"].tolist() == cf.tokens[:, 0].tolist()
    assert cf.truth["in_train"].tolist() == [tuple(pair) in train for pair in cf.tokens[:, :2].tolist()]


def test_modular_arithmetic_draws_every_other_b():
    task = tasks.make("modular_arithmetic", {"p": 7, "op": "a^2+b^2"})
    batch = task.batch(torch.full((300,), 3 * 7 + 2))  # a = 3, b = 2: b = 5 gives the same answer
    assert set(corrupt(task, batch).tokens[:, 1].tolist()) == {0, 1, 3, 4, 6}


# markov_icl ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("params", [{"length": 30}, {"order": 3, "length": 20, "start": "uniform"}])
@pytest.mark.parametrize("split", ["train", "eval"])
def test_markov_icl_redraws_valid_sequences(params, split):
    task = tasks.make("markov_icl", params)
    batch = clean(task, 8, split)
    cf = corrupt(task, batch)
    assert corrupt(task, batch, control=True) is None
    assert torch.equal(cf.targets[:, :-1], cf.tokens[:, 1:]) and bool(cf.mask.all())
    assert list(cf.truth) == list(batch.truth) and not torch.equal(cf.truth["transition"], batch.truth["transition"])
    assert torch.allclose(cf.truth["transition"].sum(-1), torch.ones(8, task.n_contexts))
    if split == "eval":
        for key, value in task.predictors(cf.tokens).items():
            assert torch.allclose(cf.truth[key], value, atol=1e-5), key


# causal_icl ----------------------------------------------------------------------------------------------


def python_conditional(task, batch: Batch, b: int, node: int) -> list[float]:
    """Node `node`'s distribution given its parents' tokens, read off the kernel in plain Python."""
    parents = [p for p in task.graph.parents[node].tolist() if p >= 0]
    if not parents:
        return None
    row = 0
    for p in parents:
        row = row * task.cfg.k + batch.tokens[b, p].item()
    return batch.truth["transition"][b, row].tolist()


@pytest.mark.parametrize("params", [{}, {"graph": "chain"}, {"graph": "dag", "parents": 2, "k": 4}])
def test_causal_icl_changes_the_answers_parents(params):
    task = tasks.make("causal_icl", {"length": 12, **params})
    T = 12
    split = "eval" if not params else "train"  # Bayes' predictor once: it costs more than the rest
    batch = clean(task, 4 if split == "eval" else 8, split)
    cf, ctrl = corrupt(task, batch), corrupt(task, batch, control=True)
    parents = [p for p in task.graph.parents[T].tolist() if p >= 0]
    for b in range(len(batch.tokens)):
        assert changed(batch, cf)[b] == parents
        assert cf.truth["conditional"][b, -1].tolist() == python_conditional(task, cf, b, T)
        assert not torch.equal(cf.truth["conditional"][b, -1], batch.truth["conditional"][b, -1])
        assert cf.truth["conditional"][b, -1, cf.targets[b, -1]] > 0
        where = changed(batch, ctrl)[b]
        assert len(where) == 1 and where[0] not in parents
        assert torch.equal(ctrl.truth["conditional"][b, -1], batch.truth["conditional"][b, -1])
    for x in (cf, ctrl):
        assert torch.equal(x.targets[:, :-1], x.tokens[:, 1:]) and torch.equal(x.mask, batch.mask)
        assert torch.allclose(
            x.truth["conditional"], task.conditional(x.tokens, x.truth["transition"], x.truth["root"])
        )
    if split == "eval":
        assert torch.allclose(cf.truth["bayes"], task.bayes(cf.tokens))
    assert torch.equal(ctrl.targets[:, -1], batch.targets[:, -1])
    every = tasks.make("causal_icl", {"graph": "dag", "parents": 2, "k": 3, "length": 2})
    assert corrupt(every, clean(every, 4, "train"), control=True) is None


def test_causal_icl_next_mode_changes_one_position_with_children():
    task = tasks.make("causal_icl", {"length": 12, "target": "next"})
    batch = clean(task, 32, "train")
    cf = corrupt(task, batch)
    assert corrupt(task, batch, control=True) is None
    with_children = set(p for p in task.graph.parents.flatten().tolist() if p >= 0)
    answer_parents = [p for p in task.graph.parents[12].tolist() if p >= 0]
    for b, where in enumerate(changed(batch, cf)):
        assert len(where) == 1 and where[0] in with_children
        if where[0] not in answer_parents:
            assert cf.targets[b, -1] == batch.targets[b, -1]
        for node in range(1, 13):
            expected = python_conditional(task, cf, b, node)
            if expected is not None:
                assert cf.truth["conditional"][b, node - 1].tolist() == expected
    assert torch.equal(cf.targets[:, :-1], cf.tokens[:, 1:])


# factual_recall ------------------------------------------------------------------------------------------


def test_factual_recall_swaps_the_subject_for_one_with_another_fact():
    task = tasks.make("factual_recall", {"subjects": 16, "relations": 3, "answers": 4, "length": 10})
    facts = task.facts.tolist()
    batch = clean(task, 64)
    cf, ctrl = corrupt(task, batch), corrupt(task, batch, control=True)
    t = batch.truth
    for b in range(64):
        s, r, s2 = t["subject"][b].item(), t["relation"][b].item(), cf.truth["subject"][b].item()
        assert changed(batch, cf)[b] == [t["subject_pos"][b].item()] and cf.tokens[b, t["subject_pos"][b]] == s2
        assert facts[s2][r] != facts[s][r] and cf.targets[b, -1] == facts[s2][r]
        where = changed(batch, ctrl)[b]
        assert len(where) == 1 and where[0] not in (t["subject_pos"][b], t["relation_pos"][b], 9)
        assert 16 + 3 <= ctrl.tokens[b, where[0]] < task.end_token
    assert torch.equal(ctrl.targets, batch.targets) and torch.equal(ctrl.truth["subject"], t["subject"])
    for key in ("relation", "subject_pos", "relation_pos"):
        assert torch.equal(cf.truth[key], t[key]) and torch.equal(ctrl.truth[key], t[key])


def test_factual_recall_without_another_fact_or_noise():
    one = tasks.make("factual_recall", {"subjects": 8, "relations": 2, "answers": 1, "length": 6})
    batch = clean(one, 16)
    cf = corrupt(one, batch)  # one answer per relation: another subject, the same answer
    assert (cf.truth["subject"] != batch.truth["subject"]).all() and torch.equal(cf.targets, batch.targets)
    for params in ({"length": 3}, {"noise": 1}):
        task = tasks.make("factual_recall", {"subjects": 8, "relations": 2, **params})
        assert corrupt(task, clean(task, 4), control=True) is None
