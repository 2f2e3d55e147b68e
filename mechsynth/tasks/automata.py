"""Automata (Liu et al. 2023, "Transformers learn shortcuts to automata").

The label at position t is the automaton's state after reading x_1..x_t. Shallow transformers
solve this with "shortcuts" — parallel-prefix circuits, and for solvable groups the Krohn–Rhodes
decomposition — that are brittle at lengths beyond those seen in training (`eval_long`).
Each automaton is a transition table built once from its definition below; decomposable ones
name their factors (D_2n: flip and rotation; car on a circle: direction and position) for probes.

Input alphabets (`alphabet`), drawn uniformly and i.i.d. (Dyck: uniformly among the allowed brackets):

| automaton   | "generators" (mechsynth)   | "liu" (Liu et al.'s released generator) |
|-------------|----------------------------|-----------------------------------------|
| C2, C_n     | add 0, add 1               | add i for i < n_actions (default 2)     |
| D_2n        | r (rotate), s (reflect)    | flip, move (one step in the current direction) |
| Q8          | i, j                       | 1, i, j, k                              |
| A_n         | (012), an n- or (n-1)-cycle| the identity and the 3-cycles (1 2 x)   |
| S_n         | (01), the n-cycle          | identity, shift by one, swap the first two (n_actions = 3; more: the other permutations in itertools order) |
| gridworld   | L, R clamped, start at 0   | the same                                |

Their generator has no C2³ or Dyck (nor car), and draws flip-flop's reads with probability 1/2 from a
different state set; "liu" keeps mechsynth's definitions of these. "all": every group element.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Literal, Optional

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.config import MAX_CTX, check, check_fields, doc, validates_itself
from mechsynth.tasks.base import TASKS, Batch, Latent, Task, TaskSpec

GROUPS = ("parity", "cyclic", "dihedral", "quaternion", "alternating", "symmetric", "c2_cubed")
AUTOMATA = GROUPS + ("flipflop", "gridworld", "dyck", "car")


@validates_itself
@dataclass(frozen=True)
class AutomataConfig:
    automaton: Literal[
        "parity",
        "cyclic",
        "dihedral",
        "quaternion",
        "alternating",
        "symmetric",
        "c2_cubed",
        "flipflop",
        "gridworld",
        "dyck",
        "car",
    ] = doc("which automaton to simulate", "parity")
    n: int = doc("size: C_n, D_2n (n-gon), A_n, S_n, gridworld cells, Dyck max depth", 3, lo=1, hi=64)
    alphabet: Literal["generators", "liu", "all"] = doc(
        "inputs: mechsynth's generating sets, Liu et al.'s alphabets, or every group element (see the module docstring)",
        "generators",
    )
    n_actions: Optional[int] = doc(
        "liu alphabet of cyclic (add 0..n_actions-1) and symmetric (the first n_actions "
        "permutations); unset = their default, 2 and 3",
        None,
        lo=2,
        hi=720,
    )
    length: int = doc("T, the training (and eval) sequence length", 20, lo=1, hi=MAX_CTX)
    eval_length: Optional[int] = doc(
        "length of the out-of-distribution eval_long split; unset = 2 * length", None, lo=1, hi=MAX_CTX
    )

    def __post_init__(self):
        check_fields(self)  # bounds and finite floats first
        check(
            self.eval_length is not None or 2 * self.length <= MAX_CTX,
            "length",
            f"with eval_length unset (= 2 * length) must be ≤ {MAX_CTX // 2}, got {self.length}; allowed: "
            f"1 to {MAX_CTX // 2}, or set eval_length ≤ {MAX_CTX}",
        )
        check(
            self.eval_length is None or self.eval_length >= self.length,
            "eval_length",
            f"must be ≥ length={self.length} or unset, got {self.eval_length}",
        )
        lo, hi = {
            "cyclic": (2, 64),
            "dihedral": (3, 32),
            "alternating": (3, 6),
            "symmetric": (3, 6),
            "gridworld": (2, 64),
            "dyck": (1, 64),
        }.get(self.automaton, (None, None))
        if lo is not None:
            check(lo <= self.n <= hi, "n", f"{self.automaton} needs {lo} ≤ n ≤ {hi}, got {self.n}")
        check(
            self.alphabet != "all" or self.automaton in GROUPS,
            "alphabet",
            f"'all' is for groups ({', '.join(GROUPS)}); {self.automaton!r} allows 'generators' or 'liu'",
        )
        if self.n_actions is not None:
            most = {"cyclic": self.n, "symmetric": math.factorial(self.n)}.get(self.automaton)
            check(
                self.alphabet == "liu" and most is not None,
                "n_actions",
                f"is for alphabet 'liu' with cyclic or symmetric, not {self.alphabet!r} with {self.automaton!r}; leave it unset",
            )
            check(
                self.n_actions <= most,
                "n_actions",
                f"{self.automaton} n={self.n} has {most} actions, got {self.n_actions}",
            )

    @property
    def long_length(self) -> int:
        return self.eval_length if self.eval_length is not None else 2 * self.length

    # For the memory estimate (mechsynth/training/budget.py) before anything is built.
    @property
    def context_field(self) -> str:
        return "task.eval_length" if self.eval_length is not None else "task.length"

    def sample_bytes(self, n_seqs: int, split: str) -> tuple[int, int]:
        """(bytes of `sample(n_seqs, split=split)`'s batch, peak bytes while making it): int64 inputs and
        states (targets are the states), a bool mask and up to 3 factor labels; while sampling, each
        step's state (Dyck: its draws and symbols too)."""
        T = self.long_length if split == "eval_long" else self.length
        batch = n_seqs * T * (8 + 8 + 1 + 3 * 8)
        return batch, batch + n_seqs * T * (8 + 4 + 8 + 8)


@dataclass
class Table:
    delta: list[list[int]]  # delta[state][symbol] -> next state, -1 = symbol not allowed there
    states: list[str]
    symbols: list[str]
    start: int = 0
    factors: Optional[dict[str, list[int]]] = None  # name -> the factor's value in each state


def closure(start: Hashable, moves: dict[str, Callable], name=str) -> Table:
    """Breadth-first: every state reachable from `start`, with its transition table."""
    order, index, rows = [start], {start: 0}, []
    for s in order:
        row = []
        for move in moves.values():
            t = move(s)
            if t is None:
                row.append(-1)
                continue
            if t not in index:
                index[t] = len(order)
                order.append(t)
            row.append(index[t])
        rows.append(row)
    return Table(rows, [name(s) for s in order], list(moves))


def group(identity, gens: dict[str, Hashable], mul, alphabet: str, name=str) -> Table:
    """A group acting on itself by right multiplication: state g, input a -> g·a."""
    table = closure(identity, {k: (lambda g, a=a: mul(g, a)) for k, a in gens.items()}, name)
    if alphabet == "all":
        elements = _elements(identity, gens, mul)
        idx = {e: i for i, e in enumerate(elements)}
        table = Table(
            [[idx[mul(g, a)] for a in elements] for g in elements],
            [name(e) for e in elements],
            [name(e) for e in elements],
        )
    return table


def _elements(identity, gens, mul) -> list:
    out, seen = [identity], {identity}
    for g in out:
        for a in gens.values():
            h = mul(g, a)
            if h not in seen:
                seen.add(h)
                out.append(h)
    return out


def compose(p: tuple[int, ...], q: tuple[int, ...]) -> tuple[int, ...]:
    """Apply p, then q."""
    return tuple(q[i] for i in p)


def cycle(n: int, points: list[int]) -> tuple[int, ...]:
    perm = list(range(n))
    for a, b in zip(points, points[1:] + points[:1]):
        perm[a] = b
    return tuple(perm)


# Quaternions as (sign, unit), unit in "1ijk"; unit products follow i·j = k, j·k = i, k·i = j.
_Q = (
    {("1", u): (1, u) for u in "1ijk"}
    | {(u, "1"): (1, u) for u in "ijk"}
    | {(u, u): (-1, "1") for u in "ijk"}
    | {
        ("i", "j"): (1, "k"),
        ("j", "k"): (1, "i"),
        ("k", "i"): (1, "j"),
        ("j", "i"): (-1, "k"),
        ("k", "j"): (-1, "i"),
        ("i", "k"): (-1, "j"),
    }
)


def qmul(a: tuple[int, str], b: tuple[int, str]) -> tuple[int, str]:
    sign, unit = _Q[(a[1], b[1])]
    return (a[0] * b[0] * sign, unit)


def liu(cfg: AutomataConfig) -> Optional[Table]:
    """Liu et al.'s alphabets (their generator, synthseq automata.py, as ported in ClaraBing/shortcut); None
    where mechsynth's generating set is theirs too (C2, gridworld) or they define none. Permutation states
    act as theirs do: input a takes state p to p[a[j]] at each j (`compose(a, p)`)."""
    a, n = cfg.automaton, cfg.n
    if a == "cyclic":
        return group(0, {str(i): i for i in range(cfg.n_actions or 2)}, lambda x, y: (x + y) % n, "generators")
    if a == "dihedral":  # state (flip, position); move steps one vertex in the current direction
        t = closure(
            (0, 0),
            {"flip": lambda s: (1 - s[0], s[1]), "move": lambda s: (s[0], (s[1] + 1 - 2 * s[0]) % n)},
            name=lambda s: f"{'s' if s[0] else 'r'}{s[1]}",
        )
        t.factors = {"flip": [int(s[0] == "s") for s in t.states], "rotation": [int(s[1:]) for s in t.states]}
        return t
    if a == "quaternion":
        return group(
            (1, "1"), {u: (1, u) for u in "1ijk"}, qmul, "generators", name=lambda q: ("" if q[0] > 0 else "-") + q[1]
        )
    identity = tuple(range(n))
    if a == "alternating":
        gens = {"id": identity} | {f"(12{x + 1})": _three_cycle(n, x) for x in range(2, n)}
        return group(identity, gens, _their_action, "generators", name=lambda p: "".join(map(str, p)))
    if a == "symmetric":
        shift, swap = tuple(range(1, n)) + (0,), (1, 0) + tuple(range(2, n))
        first = [identity, shift, swap]
        actions = (first + [p for p in itertools.permutations(range(n)) if p not in first])[: cfg.n_actions or 3]
        names = ["id", "shift", "swap"] + ["".join(map(str, p)) for p in actions[3:]]
        return group(
            identity, dict(zip(names, actions)), _their_action, "generators", name=lambda p: "".join(map(str, p))
        )
    return None


def _their_action(p: tuple[int, ...], a: tuple[int, ...]) -> tuple[int, ...]:
    return compose(a, p)


def _three_cycle(n: int, x: int) -> tuple[int, ...]:
    """Their (1 2 x+1), 1-based, as an index array: idx[0], idx[1], idx[x] = 1, x, 0."""
    idx = list(range(n))
    idx[0], idx[1], idx[x] = 1, x, 0
    return tuple(idx)


def build(cfg: AutomataConfig) -> Table:
    a, n, alpha = cfg.automaton, cfg.n, cfg.alphabet
    if alpha == "liu":
        table = liu(cfg)
        if table is not None:
            return table
        alpha = "generators"
    if a in ("parity", "cyclic"):
        m = 2 if a == "parity" else n
        return group(0, {"0": 0, "1": 1}, lambda x, y: (x + y) % m, alpha)
    if a == "dihedral":  # symmetries of the n-gon as permutations of its vertices
        t = group(
            tuple(range(n)),
            {"r": cycle(n, list(range(n))), "s": tuple((-i) % n for i in range(n))},
            compose,
            alpha,
            name=lambda p: f"{'s' if (p[1] - p[0]) % n == n - 1 else 'r'}{p[0]}",
        )
        t.factors = {"flip": [int(s[0] == "s") for s in t.states], "rotation": [int(s[1:]) for s in t.states]}
        return t
    if a == "quaternion":
        return group(
            (1, "1"), {"i": (1, "i"), "j": (1, "j")}, qmul, alpha, name=lambda q: ("" if q[0] > 0 else "-") + q[1]
        )
    if a == "alternating":
        second = list(range(n)) if n % 2 else list(range(1, n))  # an even cycle of n or n-1 points
        return group(
            tuple(range(n)),
            {"(012)": cycle(n, [0, 1, 2]), "cycle": cycle(n, second)},
            compose,
            alpha,
            name=lambda p: "".join(map(str, p)),
        )
    if a == "symmetric":
        return group(
            tuple(range(n)),
            {"(01)": cycle(n, [0, 1]), "cycle": cycle(n, list(range(n)))},
            compose,
            alpha,
            name=lambda p: "".join(map(str, p)),
        )
    if a == "c2_cubed":
        gens = {f"e{i}": tuple(int(i == j) for j in range(3)) for i in range(3)}
        t = group(
            (0, 0, 0),
            gens,
            lambda x, y: tuple((u + v) % 2 for u, v in zip(x, y)),
            alpha,
            name=lambda b: "".join(map(str, b)),
        )
        t.factors = {f"bit{i}": [int(s[i]) for s in t.states] for i in range(3)}
        return t
    if a == "flipflop":
        return closure(0, {"ignore": lambda s: s, "write0": lambda s: 0, "write1": lambda s: 1})
    if a == "gridworld":
        t = closure(0, {"L": lambda s: max(s - 1, 0), "R": lambda s: min(s + 1, n - 1)})
        return _sorted(t)
    if a == "dyck":
        t = closure(0, {"(": lambda d: d + 1 if d < n else None, ")": lambda d: d - 1 if d > 0 else None})
        return _sorted(t)
    # Car on a circle of 4 cells: D drives one cell in the current direction, U turns around.
    t = closure(
        (1, 0),
        {"D": lambda s: (s[0], (s[1] + s[0]) % 4), "U": lambda s: (-s[0], s[1])},
        name=lambda s: f"{'+' if s[0] > 0 else '-'}{s[1]}",
    )
    t.factors = {"direction": [int(s[0] == "-") for s in t.states], "position": [int(s[1:]) for s in t.states]}
    return t


def _sorted(t: Table) -> Table:
    """Number integer states by value (gridworld cell, Dyck depth) so that label = value."""
    order = sorted(range(len(t.states)), key=lambda i: int(t.states[i]))
    new = {old: i for i, old in enumerate(order)}
    return Table(
        [[new[x] if x >= 0 else -1 for x in t.delta[old]] for old in order],
        [t.states[old] for old in order],
        t.symbols,
        new[t.start],
    )


def automaton_truth(
    states: Int[Tensor, "batch pos"], factors: dict[str, Int[Tensor, "state"]]
) -> dict[str, Int[Tensor, "batch pos"]]:
    """Batch.truth of automata: `states` [batch, pos], the state after each symbol (the targets too); for a
    decomposable automaton `factor:<name>` [batch, pos], that factor of the state (D_2n: `factor:flip`,
    `factor:rotation`), from `factors[name]`, the factor's value in each state."""
    return {"states": states} | {f"factor:{k}": v.to(states.device)[states] for k, v in factors.items()}


@TASKS.register("automata")
class Automata(Task):
    Config = AutomataConfig
    splits = ("train", "eval", "eval_long")
    patch_metric = "logit_diff"

    def __init__(self, cfg: AutomataConfig):
        super().__init__(cfg)
        self.table = build(cfg)
        self.delta = torch.tensor(self.table.delta, dtype=torch.long)
        self.factors = {k: torch.tensor(v) for k, v in (self.table.factors or {}).items()}

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec(
            d_vocab=len(self.table.symbols),
            d_vocab_out=len(self.table.states),
            n_ctx=self.cfg.long_length,
            token_names=tuple(self.table.symbols),
            target_names=tuple(self.table.states),
        )

    @property
    def truth_keys(self) -> tuple[str, ...]:  # type: ignore[override]
        """The state after each symbol, and for decomposable automata each factor of it (`factor:flip`, ...);
        their shapes: `automaton_truth`."""
        return ("states",) + tuple(f"factor:{k}" for k in self.factors)

    @property
    def latents(self) -> tuple[Latent, ...]:  # type: ignore[override]
        """The state after each symbol, and each factor of a decomposable automaton's state under its own name."""
        state = Latent(
            "state",
            "categorical",
            "states",
            len(self.table.states),
            about="the state after each symbol: what Liu et al.'s shortcuts compute at every position",
        )
        return (state,) + tuple(
            Latent(
                k,
                "categorical",
                f"factor:{k}",
                int(v.max()) + 1,
                about=f"the {k} factor of the state: a component of its decomposition (Liu et al.'s Krohn–Rhodes)",
                of="state",
            )
            for k, v in self.factors.items()
        )

    def token_labels(self, tokens) -> list[str]:
        """Each input symbol with the state it leads to ("s→r2"): the state is what the model must
        output there; a symbol not allowed in the current state (Dyck) leaves the state unknown."""
        labels, state = [], self.table.start
        for x in tokens.tolist():
            symbol = self.table.symbols[x] if 0 <= x < len(self.table.symbols) else str(x)
            state = self.table.delta[state][x] if state is not None and 0 <= x < len(self.table.symbols) else None
            state = None if state == -1 else state
            labels.append(f"{symbol}→{self.table.states[state] if state is not None else '?'}")
        return labels

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        self.check_split(split)
        T = self.cfg.long_length if split == "eval_long" else self.cfg.length
        delta = self.delta.to(device)
        state = torch.full((batch_size,), self.table.start, dtype=torch.long, device=device)
        states = []
        if bool((self.delta >= 0).all()):  # inputs independent of the state: draw them all at once
            x = torch.randint(delta.shape[1], (batch_size, T), generator=generator, device=device)
            for t in range(T):  # a loop over time only, one gather per step
                state = delta[state, x[:, t]]
                states.append(state)
        else:  # Dyck: a uniform choice among the symbols allowed in the current state
            u = torch.rand(batch_size, T, generator=generator, device=device)
            allowed = delta >= 0
            xs = []
            for t in range(T):
                ok = allowed[state]
                pick = (u[:, t : t + 1] * ok.sum(-1, keepdim=True)).long()
                sym = (ok.cumsum(-1) <= pick).sum(-1)  # the pick-th allowed symbol
                state = delta[state, sym]
                xs.append(sym)
                states.append(state)
            x = torch.stack(xs, 1)
        states_t = torch.stack(states, 1)
        return Batch(x, states_t, torch.ones_like(x, dtype=torch.bool), automaton_truth(states_t, self.factors))

    def run(self, x: Int[Tensor, "batch pos"]) -> Int[Tensor, "batch pos"]:
        """The state after each symbol; -1 from the first symbol its state does not allow (Dyck) on."""
        delta = torch.cat([self.delta, torch.full_like(self.delta[:1], -1)]).to(x.device)  # row -1: stuck
        state = torch.full_like(x[:, 0], self.table.start)
        states = []
        for t in range(x.shape[1]):
            state = delta[state, x[:, t]]
            states.append(state)
        return torch.stack(states, 1)

    def counterfactual(self, batch, generator, control=False) -> Optional[Batch]:
        """One symbol changed per sequence, at a uniform position to a uniform other symbol; the states from it on
        are recomputed. Dyck: uniform among the changes that keep the word valid (depth within 0..n), and a word
        with none (n = 1 forces "()()...") is left as it is. No control: every symbol can move the state."""
        if control:
            return None
        x, device = batch.tokens, batch.tokens.device
        (B, T), V = x.shape, self.delta.shape[1]
        rows = torch.arange(B, device=device)
        if bool((self.delta >= 0).all()):
            pos = torch.randint(T, (B,), generator=generator).to(device)
            shift = torch.randint(1, V, (B,), generator=generator).to(device)
            x = x.clone()
            x[rows, pos] = (x[rows, pos] + shift) % V
        else:  # try every (position, symbol) at once, a step at a time
            delta = torch.cat([self.delta, torch.full_like(self.delta[:1], -1)]).to(device)
            before = torch.cat([torch.full_like(x[:, :1], self.table.start), self.run(x)[:, :-1]], 1)
            state = before[:, :, None].expand(B, T, V)  # [batch, changed pos, new symbol]
            at, symbols = torch.arange(T, device=device)[:, None], torch.arange(V, device=device)
            for t in range(T):
                state = torch.where(at <= t, delta[state, torch.where(at == t, symbols, x[:, t, None, None])], state)
            ok = ((state >= 0) & (x[..., None] != symbols)).flatten(1)
            change = (torch.rand(B, T * V, generator=generator).to(device) + ok).argmax(-1)
            pos = change // V
            x = x.clone()
            x[rows, pos] = torch.where(ok.any(-1), change % V, x[rows, pos])
        states = self.run(x)
        return Batch(x, states, torch.ones_like(x, dtype=torch.bool), automaton_truth(states, self.factors))

    def position_accuracy(self, logits: Float[Tensor, "batch pos d_vocab_out"], batch: Batch) -> Float[Tensor, "pos"]:
        return (logits.argmax(-1) == batch.targets).float().mean(0)

    def metrics(self, logits, batch) -> dict[str, float]:
        """Adds acc_last, the accuracy at the last position (the hardest for a shortcut), and
        acc_by_position, a list (kept in metrics.jsonl; W&B gets the scalars)."""
        out = super().metrics(logits, batch)
        by_position = self.position_accuracy(logits, batch)
        out["acc_last"] = by_position[-1].item()
        out["acc_by_position"] = [round(v, 4) for v in by_position.tolist()]
        return out
