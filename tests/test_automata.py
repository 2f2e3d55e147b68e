"""automata against slow references written straight from each definition (not from the tables)."""

from __future__ import annotations

import pytest
import torch

from mechsynth import tasks
from mechsynth.config import ConfigError


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def perm_then(p, q):  # apply p, then q
    return tuple(q[i] for i in p)


def cyc(n, pts):
    p = list(range(n))
    for a, b in zip(pts, pts[1:] + pts[:1]):
        p[a] = b
    return tuple(p)


QUAT = {"1": (1, 0, 0, 0), "i": (0, 1, 0, 0), "j": (0, 0, 1, 0), "k": (0, 0, 0, 1)}


def hamilton(a, b):
    a1, b1, c1, d1 = a
    a2, b2, c2, d2 = b
    return (a1 * a2 - b1 * b2 - c1 * c2 - d1 * d2, a1 * b2 + b1 * a2 + c1 * d2 - d1 * c2,
            a1 * c2 - b1 * d2 + c1 * a2 + d1 * b2, a1 * d2 + b1 * c2 - c1 * b2 + d1 * a2)


def run_reference(name, n, symbols):
    """Yield the reference state (in the task's naming) after each symbol."""
    if name in ("parity", "cyclic"):
        m, s = (2 if name == "parity" else n), 0
        for x in symbols:
            s = (s + int(x)) % m
            yield str(s)
    elif name in ("dihedral", "alternating", "symmetric"):
        g = tuple(range(n))
        gens = {"dihedral": {"r": cyc(n, list(range(n))), "s": tuple((-i) % n for i in range(n))},
                "alternating": {"(012)": cyc(n, [0, 1, 2]), "cycle": cyc(n, list(range(n)) if n % 2 else list(range(1, n)))},
                "symmetric": {"(01)": cyc(n, [0, 1]), "cycle": cyc(n, list(range(n)))}}[name]
        for x in symbols:
            g = perm_then(g, gens[x])
            if name == "dihedral":
                yield f"{'s' if (g[1] - g[0]) % n == n - 1 else 'r'}{g[0]}"
            else:
                yield "".join(map(str, g))
    elif name == "quaternion":
        q = QUAT["1"]
        for x in symbols:
            q = hamilton(q, QUAT[x])
            unit = next(u for u, v in QUAT.items() if tuple(abs(c) for c in q) == v)
            yield ("-" if sum(q) < 0 else "") + unit
    elif name == "c2_cubed":
        bits = [0, 0, 0]
        for x in symbols:
            bits[int(x[1])] ^= 1
            yield "".join(map(str, bits))
    elif name == "flipflop":
        s = 0
        for x in symbols:
            s = {"write0": 0, "write1": 1}.get(x, s)
            yield str(s)
    elif name == "gridworld":
        s = 0
        for x in symbols:
            s = max(0, s - 1) if x == "L" else min(n - 1, s + 1)
            yield str(s)
    elif name == "dyck":
        d = 0
        for x in symbols:
            d += 1 if x == "(" else -1
            assert 0 <= d <= n, "a sampled Dyck word left the allowed depths"
            yield str(d)
    elif name == "car":
        direction, pos = 1, 0
        for x in symbols:
            if x == "D":
                pos = (pos + direction) % 4
            else:
                direction = -direction
            yield f"{'+' if direction > 0 else '-'}{pos}"


CASES = [("parity", 2), ("cyclic", 5), ("dihedral", 3), ("dihedral", 5), ("quaternion", 2), ("alternating", 4),
         ("alternating", 5), ("symmetric", 5), ("c2_cubed", 2), ("flipflop", 2), ("gridworld", 9), ("dyck", 3), ("car", 2)]


@pytest.mark.parametrize("name, n", CASES)
@pytest.mark.reference("automata")
def test_labels_match_reference(name, n):
    task = tasks.make("automata", {"automaton": name, "n": n, "length": 40})
    symbols, states = task.spec.token_names, task.spec.target_names
    for split in ("train", "eval_long"):
        b = task.sample(32, gen(), split=split)
        assert b.tokens.shape == (32, 40 if split == "train" else 80) and b.mask.all()
        for row, labels in zip(b.tokens.tolist(), b.targets.tolist()):
            assert [states[s] for s in labels] == list(run_reference(name, n, [symbols[x] for x in row]))


@pytest.mark.parametrize("name, n, size", [("symmetric", 5, 120), ("alternating", 5, 60), ("quaternion", 3, 8),
                                           ("dihedral", 3, 6), ("dihedral", 4, 8), ("dihedral", 5, 10),
                                           ("c2_cubed", 3, 8), ("car", 3, 8), ("cyclic", 7, 7)])
def test_state_counts(name, n, size):
    task = tasks.make("automata", {"automaton": name, "n": n})
    assert task.spec.d_vocab_out == size
    # group automata: every input permutes the states
    assert all(sorted(col) == list(range(size)) for col in task.delta.T.tolist())


def test_alphabet_all_uses_every_element():
    task = tasks.make("automata", {"automaton": "symmetric", "n": 4, "alphabet": "all"})
    assert task.spec.d_vocab == task.spec.d_vocab_out == 24
    b = task.sample(64, gen())
    # state after one step = the input element itself (identity · a = a)
    assert torch.equal(b.targets[:, 0], b.tokens[:, 0])


def test_factors_are_consistent():
    for name in ("dihedral", "car"):
        task = tasks.make("automata", {"automaton": name, "n": 4})
        b = task.sample(16, gen())
        names = task.spec.target_names
        first, second = ("flip", "rotation") if name == "dihedral" else ("direction", "position")
        for s, f1, f2 in zip(b.targets.flatten().tolist(), b.truth[f"factor:{first}"].flatten().tolist(),
                             b.truth[f"factor:{second}"].flatten().tolist()):
            assert f1 == int(names[s][0] in "s-") and f2 == int(names[s][1:])


def test_determinism_and_dyck_respects_allowed_symbols():
    task = tasks.make("automata", {"automaton": "dyck", "n": 2, "length": 50})
    a, b, c = task.sample(64, gen(3)), task.sample(64, gen(3)), task.sample(64, gen(4))
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)
    assert a.targets.min() >= 0 and a.targets.max() <= 2


def test_metrics_include_last_position_accuracy():
    task = tasks.make("automata", {"automaton": "parity", "length": 10})
    b = task.sample(8, gen())
    perfect = torch.nn.functional.one_hot(b.targets, 2).float() * 10
    metrics = task.metrics(perfect, b)
    assert metrics["acc_last"] == 1.0 and metrics["acc_by_position"] == [1.0] * 10


@pytest.mark.parametrize("params, field", [({"automaton": "symmetric", "n": 9}, "task.n"),
                                           ({"automaton": "dyck", "alphabet": "all"}, "task.alphabet"),
                                           ({"automaton": "parity", "length": 10, "eval_length": 5}, "task.eval_length"),
                                           ({"automaton": "rubik"}, "task.automaton")])
def test_validation(params, field):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        tasks.make("automata", params)
