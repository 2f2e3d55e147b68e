"""automata against slow references written straight from each definition (not from the tables)."""

from __future__ import annotations

import pytest
import torch

from mechsynth import tasks
from mechsynth.errors import ConfigError
from mechsynth.tasks.base import latent_values


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
    return (
        a1 * a2 - b1 * b2 - c1 * c2 - d1 * d2,
        a1 * b2 + b1 * a2 + c1 * d2 - d1 * c2,
        a1 * c2 - b1 * d2 + c1 * a2 + d1 * b2,
        a1 * d2 + b1 * c2 - c1 * b2 + d1 * a2,
    )


def run_reference(name, n, symbols):
    """Yield the reference state (in the task's naming) after each symbol."""
    if name in ("parity", "cyclic"):
        m, s = (2 if name == "parity" else n), 0
        for x in symbols:
            s = (s + int(x)) % m
            yield str(s)
    elif name in ("dihedral", "alternating", "symmetric"):
        g = tuple(range(n))
        gens = {
            "dihedral": {"r": cyc(n, list(range(n))), "s": tuple((-i) % n for i in range(n))},
            "alternating": {
                "(012)": cyc(n, [0, 1, 2]),
                "cycle": cyc(n, list(range(n)) if n % 2 else list(range(1, n))),
            },
            "symmetric": {"(01)": cyc(n, [0, 1]), "cycle": cyc(n, list(range(n)))},
        }[name]
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


CASES = [
    ("parity", 2),
    ("cyclic", 5),
    ("dihedral", 3),
    ("dihedral", 5),
    ("quaternion", 2),
    ("alternating", 4),
    ("alternating", 5),
    ("symmetric", 5),
    ("c2_cubed", 2),
    ("flipflop", 2),
    ("gridworld", 9),
    ("dyck", 3),
    ("car", 2),
]


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


@pytest.mark.parametrize(
    "name, n, size",
    [
        ("symmetric", 5, 120),
        ("alternating", 5, 60),
        ("quaternion", 3, 8),
        ("dihedral", 3, 6),
        ("dihedral", 4, 8),
        ("dihedral", 5, 10),
        ("c2_cubed", 3, 8),
        ("car", 3, 8),
        ("cyclic", 7, 7),
    ],
)
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
        for s, f1, f2 in zip(
            b.targets.flatten().tolist(),
            b.truth[f"factor:{first}"].flatten().tolist(),
            b.truth[f"factor:{second}"].flatten().tolist(),
        ):
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


@pytest.mark.parametrize(
    "params, field",
    [
        ({"automaton": "symmetric", "n": 9}, "task.n"),
        ({"automaton": "dyck", "alphabet": "all"}, "task.alphabet"),
        ({"automaton": "parity", "length": 10, "eval_length": 5}, "task.eval_length"),
        ({"automaton": "rubik"}, "task.automaton"),
    ],
)
def test_validation(params, field):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        tasks.make("automata", params)


# ---- Liu et al.'s alphabets, from their generator's definitions (synthseq automata.py) -------------------


def liu_permutation(p, a):  # their permutation automata: input a takes state p to p[a[j]] at each j
    return tuple(p[i] for i in a)


def liu_reference(name, n, symbols, n_actions=None):
    """Yield the state after each symbol, as the running product of the symbols in Liu et al.'s definitions
    (matrices for D_2n, Hamilton's product for Q8, their index arrays for A_n and S_n), in the task's naming."""
    if name in ("cyclic", "quaternion"):  # add i; right multiplication by 1, i, j, k
        yield from run_reference(name, n, symbols)
    elif name == "dihedral":  # g = R^p S^t as 2x2 matrices; flip = ·S, move = ·R
        import math

        R = torch.tensor(
            [
                [math.cos(2 * math.pi / n), -math.sin(2 * math.pi / n)],
                [math.sin(2 * math.pi / n), math.cos(2 * math.pi / n)],
            ],
            dtype=torch.float64,
        )
        S = torch.tensor([[1.0, 0.0], [0.0, -1.0]], dtype=torch.float64)
        g = torch.eye(2, dtype=torch.float64)
        for x in symbols:
            g = g @ (S if x == "flip" else R)
            t = int(torch.det(g) < 0)
            rotation = g @ S if t else g  # R^p
            p = round(math.atan2(rotation[1, 0].item(), rotation[0, 0].item()) / (2 * math.pi / n)) % n
            yield f"{'s' if t else 'r'}{p}"
    else:
        identity = tuple(range(n))
        if name == "alternating":
            gens = {"id": identity}
            for x in range(3, n + 1):  # (1 2 x), 1-based: their index array has idx[0], idx[1], idx[x-1] = 1, x-1, 0
                idx = list(range(n))
                idx[0], idx[1], idx[x - 1] = 1, x - 1, 0
                gens[f"(12{x})"] = tuple(idx)
        else:
            import itertools

            first = [identity, tuple(range(1, n)) + (0,), (1, 0) + tuple(range(2, n))]
            rest = [p for p in itertools.permutations(range(n)) if p not in first]
            gens = dict(
                zip(["id", "shift", "swap"] + ["".join(map(str, p)) for p in rest], (first + rest)[: n_actions or 3])
            )
        g = identity
        for x in symbols:
            g = liu_permutation(g, gens[x])
            yield "".join(map(str, g))


LIU = [
    ("cyclic", 3, None, ["0", "1"]),
    ("cyclic", 5, 4, ["0", "1", "2", "3"]),
    ("dihedral", 3, None, ["flip", "move"]),
    ("dihedral", 4, None, ["flip", "move"]),
    ("quaternion", 2, None, ["1", "i", "j", "k"]),
    ("alternating", 5, None, ["id", "(123)", "(124)", "(125)"]),
    ("symmetric", 5, None, ["id", "shift", "swap"]),
    ("symmetric", 4, 5, ["id", "shift", "swap", "0132", "0213"]),
]


@pytest.mark.parametrize("name, n, n_actions, symbols", LIU)
@pytest.mark.reference("automata")
def test_liu_alphabets_match_their_definitions(name, n, n_actions, symbols):
    task = tasks.make("automata", {"automaton": name, "n": n, "alphabet": "liu", "n_actions": n_actions, "length": 60})
    assert list(task.spec.token_names) == symbols
    states = task.spec.target_names
    b = task.sample(24, gen(1))
    for row, labels in zip(b.tokens.tolist(), b.targets.tolist()):
        assert [states[s] for s in labels] == list(liu_reference(name, n, [symbols[x] for x in row], n_actions))
    # inputs are uniform and i.i.d.: every symbol about equally often
    counts = torch.bincount(task.sample(4000, gen(2)).tokens.flatten(), minlength=len(symbols)).double()
    assert (counts / counts.mean() - 1).abs().max() < 0.05


@pytest.mark.parametrize(
    "name, n, size, orders",
    [
        ("parity", 2, 2, {"0": 1, "1": 2}),
        ("cyclic", 3, 3, {"0": 1, "1": 3}),
        ("dihedral", 3, 6, {"flip": 2, "move": 3}),
        ("dihedral", 4, 8, {"flip": 2, "move": 4}),
        ("quaternion", 2, 8, {"1": 1, "i": 4, "j": 4, "k": 4}),
        ("alternating", 5, 60, {"id": 1, "(123)": 3, "(124)": 3, "(125)": 3}),
        ("symmetric", 5, 120, {"id": 1, "shift": 5, "swap": 2}),
        ("gridworld", 9, 9, None),
    ],
)
def test_liu_alphabets_close_to_the_whole_group(name, n, size, orders):
    task = tasks.make("automata", {"automaton": name, "n": n, "alphabet": "liu"})
    assert task.spec.d_vocab_out == size  # the symbols generate the whole group (every state reachable)
    if orders is None:  # Grid9: L and R clamped to the 9 cells, from cell 0
        assert task.table.delta == [[max(s - 1, 0), min(s + 1, 8)] for s in range(9)] and task.table.start == 0
        return
    for symbol, order in orders.items():  # acting on the identity, a symbol returns after exactly its order
        x, state, steps = (
            task.spec.token_names.index(symbol),
            task.table.delta[task.table.start][task.spec.token_names.index(symbol)],
            1,
        )
        while state != task.table.start:
            state, steps = task.table.delta[state][x], steps + 1
        assert steps == order, symbol


def test_liu_alphabet_keeps_mechsynths_definitions_where_theirs_has_none():
    for name in ("dyck", "c2_cubed", "parity", "gridworld"):
        liu, ours = (tasks.make("automata", {"automaton": name, "n": 4, "alphabet": a}) for a in ("liu", "generators"))
        assert liu.table.delta == ours.table.delta and liu.spec.token_names == ours.spec.token_names


@pytest.mark.parametrize(
    "params, message",
    [
        ({"automaton": "cyclic", "n": 3, "n_actions": 3}, "is for alphabet 'liu'"),
        ({"automaton": "cyclic", "n": 3, "alphabet": "liu", "n_actions": 4}, "cyclic n=3 has 3 actions, got 4"),
        ({"automaton": "quaternion", "alphabet": "liu", "n_actions": 2}, "with 'quaternion'"),
        ({"automaton": "gridworld", "alphabet": "all"}, "allows 'generators' or 'liu'"),
    ],
)
def test_liu_validation(params, message):
    with pytest.raises(ConfigError, match=f"^task.(n_actions|alphabet): .*{message}"):
        tasks.make("automata", params)


# Each factor of a decomposable automaton, read off the reference's state name, and how many values it takes
# (None: n, the dihedral group's n-gon).
FACTORS = {
    "dihedral": {"flip": (lambda s: int(s[0] == "s"), 2), "rotation": (lambda s: int(s[1:]), None)},
    "car": {"direction": (lambda s: int(s[0] == "-"), 2), "position": (lambda s: int(s[1:]), 4)},
    "c2_cubed": {f"bit{i}": ((lambda s, i=i: int(s[i])), 2) for i in range(3)},
}


@pytest.mark.parametrize("name, n", [("cyclic", 5), ("dihedral", 5), ("car", 2), ("c2_cubed", 2), ("dyck", 3)])
@pytest.mark.reference("automata")
def test_latents_match_a_slow_reference(name, n):
    """The state and each factor at every position, from the reference walked symbol by symbol."""
    task = tasks.make("automata", {"automaton": name, "n": n, "length": 12})
    b = task.sample(8, gen(1), split="eval")
    got = latent_values(task, b)
    factors = FACTORS.get(name, {})
    assert set(got) == {"state"} | set(factors)
    sizes = {latent.name: latent.n_values for latent in task.latents}
    assert sizes == {"state": len(task.spec.target_names)} | {f: size or n for f, (_, size) in factors.items()}
    symbols, states = task.spec.token_names, task.spec.target_names
    for i, row in enumerate(b.tokens.tolist()):
        walked = list(run_reference(name, n, [symbols[x] for x in row]))
        assert got["state"][0][i].tolist() == [states.index(s) for s in walked]
        for f, (of, _) in factors.items():
            assert got[f][0][i].tolist() == [of(s) for s in walked], f
    assert all(defined.all() for _, defined in got.values())
