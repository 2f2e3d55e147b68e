"""Factual recall through associative memories (Nichani, Lee & Bietti 2024): how many facts a model stores,
against its parameter count.

Four families, each a ladder of sizes, seeds side by side:
  - linear_memory: F(x) = argmax_y u_yᵀ W e_x over fixed random unit embeddings, N inputs -> N outputs
    (a random bijection), W d x d: d² parameters (their first result: N log N ∝ d²);
  - mlp_memory: F(x) = argmax_y u_yᵀ V relu(W e_x), hidden width m: 2md parameters;
  - attention: the factual_recall task (S subjects x R relations, the subject and relation among noise,
    answered at the end token) in a 1-layer attention-only transformer with frozen random embeddings and
    unembedding (as theirs): the value matrices are the only memory; their count 4·H·d_h·d;
  - mlp: the same with one head and a ReLU MLP of width m: 4·H·d_h·d + 2·m·d.
For each size, a search over the number of facts N: start from a guess, double (or halve) until the median
seed stops (or starts) storing all of them — accuracy ≥ 0.99 on held-out queries at the end of a fixed
budget — then bisections, until the capacity is known within a factor 2^(1/4). Capacity under three
definitions (DEFINITIONS), then a power-law fit of capacity against parameters per family: the paper's claim
is an exponent near 1 (facts ∝ parameters, up to log factors), with the attention and MLP families both
storing facts (the transformer trades value matrices against the MLP).

    python -m experiments.factual_capacity            # CPU size (~30 min on 2 cores)
    python -m experiments.factual_capacity --full     # larger ladders, the paper's T = 32, longer budgets
    python -m experiments.factual_capacity --smoke    # seconds; checks the pipeline only

Writes OUT/factual_capacity.json and OUT/factual_capacity.png.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Optional

from experiments import harness, stats
from mechsynth.runs.run import Run

NAME = "factual_capacity"
FAMILIES = ("linear_memory", "mlp_memory", "attention", "mlp")
# Stored: every seed's accuracy ≥ 0.99; the median seed's ≥ 0.99 (what the search follows); median ≥ 0.9.
DEFINITIONS = {"all_seeds_0.99": (min, 0.99), "median_0.99": ("median", 0.99), "median_0.9": ("median", 0.9)}

SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(
        seeds=2,
        rounds=2,
        ladders={"linear_memory": [4, 8], "mlp_memory": [8], "attention": [1], "mlp": [8]},
        memory=dict(d_mlp=8, steps=200),
        transformer=dict(d_model=16, d_head=4, length=8, steps=60, batch=64),
        relations=2,
        answers=4,
    ),
    # seeds 300-: the rules (experiments/rules/factual_capacity.py) were revised (issue 46) after seeds 0-2 and
    # 100-102 had been seen
    "cpu": dict(
        seeds=[300, 301, 302],
        rounds=7,
        ladders={
            "linear_memory": [8, 12, 16, 24, 32, 48],
            "mlp_memory": [16, 32, 64, 128],
            "attention": [1, 2, 4, 8],
            "mlp": [16, 32, 64, 128],
        },
        memory=dict(d_mlp=16, steps=2000),
        transformer=dict(d_model=32, d_head=8, length=8, steps=6000, batch=128),
        relations=4,
        answers=8,
    ),
    "full": dict(
        seeds=[300, 301, 302, 303, 304],
        rounds=8,
        ladders={
            "linear_memory": [8, 16, 32, 64, 128],
            "mlp_memory": [16, 32, 64, 128, 256],
            "attention": [2, 4, 8, 16, 32],
            "mlp": [16, 32, 64, 128, 256],
        },
        memory=dict(d_mlp=32, steps=4000),
        transformer=dict(d_model=64, d_head=8, length=32, steps=8000, batch=512),
        relations=8,
        answers=16,
    ),
}


def params(family: str, size: int, c: dict[str, Any]) -> int:
    """The paper's parameter count of the trained memory (embeddings are fixed and not counted)."""
    t = c["transformer"]
    if family == "linear_memory":
        return size * size
    if family == "mlp_memory":
        return 2 * size * c["memory"]["d_mlp"]
    attention = 4 * (size if family == "attention" else 1) * t["d_head"] * t["d_model"]
    return attention + (2 * size * t["d_model"] if family == "mlp" else 0)


def first_guess(family: str, size: int, c: dict[str, Any]) -> int:
    """Where the search starts: memories store a few facts per 10 parameters, the transformers about one per
    50 in a short budget (pilots at the CPU size)."""
    n = params(family, size, c) / (6 if "memory" in family else 48)
    return snap(family, n, c)


def snap(family: str, n: float, c: dict[str, Any]) -> int:
    """A number of facts the family can have: a memory any N ≥ 2; the transformer tasks S·R."""
    if "memory" in family:
        return max(2, round(n))
    return max(1, round(n / c["relations"])) * c["relations"]


def config(family: str, size: int, n: int, c: dict[str, Any]) -> dict[str, Any]:
    if "memory" in family:
        m = c["memory"]
        model = (
            {"kind": family, "d": size} if family == "linear_memory" else {"kind": family, "d": m["d_mlp"], "m": size}
        )
        # their training: full batch over all N inputs, Adam, no decay or clipping
        return {
            "task": {"name": "associative_memory", "inputs": n},
            "model": model,
            "train": {
                "steps": m["steps"],
                "data": "fixed",
                "batch_size": n,
                "optimizer": "adam",
                "lr": 0.1 if family == "linear_memory" else 0.03,
                "grad_clip": 0,
                "eval_every": m["steps"] // 10,
                "checkpoints": 2,
            },
        }
    t = c["transformer"]
    # their TF_one_layer: frozen N(0, 1/d) embeddings and unembedding, no LayerNorm
    model = {
        "n_layers": 1,
        "d_model": t["d_model"],
        "d_head": t["d_head"],
        "normalization": "none",
        "freeze_embeddings": True,
        "init_range": round(t["d_model"] ** -0.5, 6),
    }
    model |= {"n_heads": size, "attn_only": True} if family == "attention" else {"n_heads": 1, "d_mlp": size}
    return {
        "task": {
            "name": "factual_recall",
            "subjects": n // c["relations"],
            "relations": c["relations"],
            "answers": c["answers"],
            "length": t["length"],
        },
        "model": model,
        # cosine decay: the accuracy at the end of the budget, not a noisy step of constant-lr Adam
        "train": {
            "steps": t["steps"],
            "batch_size": t["batch"],
            "optimizer": "adam",
            "lr": 1e-2,
            "schedule": "cosine",
            "eval_every": t["steps"] // 10,
            "eval_batch_size": 1024,
            "checkpoints": 2,
        },
    }


def final_acc(run: Run) -> float:
    return [r["eval/acc"] for r in run.metrics if "eval/acc" in r][-1]


def search(session: harness.Session, c: dict[str, Any]) -> dict[tuple[str, int], dict[int, list[float]]]:
    """Round by round, each size's next N until its capacity is bracketed within √2 (or the rounds run
    out). Returns (family, size) -> N -> each seed's final accuracy."""
    tried: dict[tuple[str, int], dict[int, list[float]]] = {(f, s): {} for f in FAMILIES for s in c["ladders"][f]}
    nxt = {key: first_guess(*key, c) for key in tried}
    for r in range(c["rounds"]):
        todo = {key: n for key, n in nxt.items() if n is not None and n not in tried[key]}
        if not todo:
            break
        harness.log(f"round {r + 1}: {len(todo)} sizes")
        specs = [
            ({"family": f, "size": s, "n": n}, seed, config(f, s, n, c))
            for (f, s), n in todo.items()
            for seed in harness.seeds(c["seeds"])
        ]
        runs = session.train_runs(specs)
        for (f, s), n in todo.items():
            tried[(f, s)][n] = [final_acc(runs.run(seed, family=f, size=s, n=n)) for seed in harness.seeds(c["seeds"])]
            nxt[(f, s)] = next_n(f, tried[(f, s)], c)
    return tried


def stored(accs: list[float], definition: str) -> bool:
    how, level = DEFINITIONS[definition]
    value = min(accs) if how is min else sorted(accs)[len(accs) // 2]
    return value >= level


def next_n(family: str, tried: dict[int, list[float]], c: dict[str, Any]) -> Optional[int]:
    """Double past the largest stored N, halve below the smallest failed one, then bisect the bracket
    while it is wider than 2^(1/4); None when done."""
    ok = [n for n, a in tried.items() if stored(a, "median_0.99")]
    bad = [n for n, a in tried.items() if not stored(a, "median_0.99")]
    if not ok:
        n = snap(family, min(bad) / 2, c)
        return n if n < min(bad) else None
    lo = max(ok)
    above = [n for n in bad if n > lo]
    if not above:
        return snap(family, 2 * lo, c)
    hi = min(above)
    mid = snap(family, math.sqrt(lo * hi), c)
    return mid if hi / lo > 2**0.25 * 1.02 and lo < mid < hi else None


def capacity(tried: dict[int, list[float]], definition: str) -> Optional[int]:
    """The largest N stored under `definition` (None: not even the smallest tried)."""
    ok = [n for n, a in tried.items() if stored(a, definition)]
    return max(ok) if ok else None


def summarise(tried: dict[tuple[str, int], dict[int, list[float]]], c: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seeds": harness.seeds(c["seeds"])
    }  # each "tried" list: these seeds' accuracies, in this order
    for f in FAMILIES:
        rows = []
        for s in c["ladders"][f]:
            t = tried[(f, s)]
            caps = {d: capacity(t, d) for d in DEFINITIONS}
            p = params(f, s, c)
            # the mlp family's MLP share of its parameters (the rest: its one head's attention)
            part = {"mlp_params": 2 * s * c["transformer"]["d_model"]} if f == "mlp" else {}
            rows.append(
                {
                    "size": s,
                    "params": p,
                    **part,
                    "capacity": caps,
                    "facts_per_param": {d: (v / p if v else None) for d, v in caps.items()},
                    "bracketed": any(not stored(a, "median_0.99") for a in t.values()),
                    "tried": {str(n): [round(a, 4) for a in accs] for n, accs in sorted(t.items())},
                }
            )
        fits = {}
        for d in DEFINITIONS:
            pts = [(r["params"], r["capacity"][d]) for r in rows if r["capacity"][d]]
            fits[d] = stats.power_fit(*zip(*pts)) if len({p for p, _ in pts}) >= 2 else None
        # their linear-memory law, N log N ∝ d²: the exponent of N·ln N against parameters
        pts = [(r["params"], r["capacity"]["median_0.99"]) for r in rows if (r["capacity"]["median_0.99"] or 0) > 1]
        fits["median_0.99_NlnN"] = (
            stats.power_fit([p for p, _ in pts], [n * math.log(n) for _, n in pts])
            if len({p for p, _ in pts}) >= 2
            else None
        )
        out[f] = {"sizes": rows, "fit": fits}
    return out


def plot(res: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for f, color in zip(FAMILIES, ("tab:blue", "tab:green", "tab:red", "tab:purple")):
        rows = [r for r in res[f]["sizes"] if r["capacity"]["median_0.99"]]
        if not rows:
            continue
        x = [r["params"] for r in rows]
        ax.plot(x, [r["capacity"]["median_0.99"] for r in rows], "o-", color=color, label=f)
        lo = [r["capacity"]["all_seeds_0.99"] or 0 for r in rows]
        hi = [r["capacity"]["median_0.9"] for r in rows]
        ax.fill_between(x, [max(v, 1) for v in lo], hi, color=color, alpha=0.15)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("parameters (the paper's count)")
    ax.set_ylabel("facts stored (median seed ≥ 0.99; band: all seeds ≥ 0.99 … median ≥ 0.9)")
    ax.legend()
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    c = SIZES[args.size]
    tried = search(session, c)
    res = summarise(tried, c)
    for f in FAMILIES:
        caps = [(r["params"], r["capacity"]["median_0.99"]) for r in res[f]["sizes"]]
        fit = res[f]["fit"]["median_0.99"]
        print(
            f"{f:14s} (params, facts) {caps}"
            + (f"  exponent {fit['exponent']:.2f} (R² {fit['r2']:.2f})" if fit else "")
        )
    figures = [plot(res, args.out / f"{NAME}.png")]
    examples = {f: config(f, c["ladders"][f][0], first_guess(f, c["ladders"][f][0], c), c) for f in FAMILIES}
    session.finish(
        {
            "sizes": c,
            "definitions": {k: [v[0] if isinstance(v[0], str) else "min", v[1]] for k, v in DEFINITIONS.items()},
            "examples": examples,
        },
        res,
        figures,
    )
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
