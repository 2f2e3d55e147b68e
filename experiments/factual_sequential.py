"""Sequential learning in factual recall (Nichani, Lee & Bietti 2024; seed 004's first abstract): the model first
learns the answer's type — which relation's answer set the answer lies in — and only later the fact itself;
between the two the loss sits at the type-level loss log D (the model names a uniformly guessed answer of the
right type: "hallucination").

    python -m experiments.factual_sequential            # CPU size: 5 seeds side by side (~2-3 min on 2 shared cores)
    python -m experiments.factual_sequential --full     # the paper's T = 32, more facts, 8 seeds (a GPU)
    python -m experiments.factual_sequential --smoke    # seconds; checks the pipeline only

The task is factual_recall (S subjects × R relations, each relation's D answers its own set), trained in
experiments/factual_capacity.py's transformer: one layer, one head and a ReLU MLP over frozen random embeddings
and unembedding (init std 1/√d), no LayerNorm, Adam with a cosine schedule, fresh sequences every step. The
seeds train side by side on one fact table (they differ in initialization and data order). Every checkpoint
(log-spaced early) is probed with `answer_type` on a held-out batch of PROBE_BATCH sequences: acc (the fact),
type_acc (an answer of the right relation), loss, type_loss and fact_loss = loss - type_loss (log D on the
plateau). Per seed: the step after which type_acc, and the step after which acc, stay ≥ 0.99; how long the loss
dwells within ±10 % of log D once the type is known (type_acc ≥ 0.9) and before the facts are, in ln steps
with the loss interpolated linearly in ln step between checkpoints; and, as the null, how long it dwells in an
equally wide band around 0.5·log D, which a loss falling without a plateau crosses in about the same time.
The claim and its rule are experiments/rules/factual_sequential.py.

Sizes (pilots on 2 shared cores, seeds 0-2, not the CPU size's seeds): with the CPU size's config a seed learns the
type (type_acc ≥ 0.99 from then on) by step ~20 and the facts by ~875-1000 of the 3000 steps; 3 seeds side by
side trained in ~30 s of CPU, and probing their 48 checkpoints took ~6 s a seed. With T = 8 (64 noise types) or
S = 128 the facts stalled at 0.7-0.94 at this width, and at width 32 at 0.6-0.8. Estimate for the CPU size (5
seeds): ~1 min of training and ~30 s of probing, ~2-3 min of wall time with the machine shared.

Writes OUT/factual_sequential.json and OUT/factual_sequential.png.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from experiments import harness, stats
from mechsynth.analysis import timeline
from mechsynth.runs.run import Run

NAME = "factual_sequential"
THRESHOLD = 0.99  # type_acc / acc learned: stays at or above from then on (the rule's)
KNOWN = 0.9  # the type is known from here on (the answer_type probe's KNOWN): the plateau is measured after
BAND = 0.1  # the plateau band: loss within ±BAND·log D of log D
CONTROL = 0.5  # the null band's centre, as a fraction of log D (same width)
PROBE_BATCH = 2048

SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(
        seeds=3,
        subjects=8,
        relations=2,
        answers=4,
        length=4,
        d_model=16,
        d_mlp=32,
        steps=200,
        batch=32,
        lr=1e-2,
        eval_every=50,
        checkpoints=10,
    ),
    # seeds 300-: fresh after issue 46's revision of the rules (seeds 0-2 piloted, 100-104 judged before it)
    "cpu": dict(
        seeds=[300, 301, 302, 303, 304],
        subjects=64,
        relations=2,
        answers=8,
        length=4,
        d_model=64,
        d_mlp=128,
        steps=3000,
        batch=128,
        lr=2e-3,
        eval_every=100,
        checkpoints=50,
    ),
    "full": dict(
        seeds=list(range(300, 308)),
        subjects=256,
        relations=4,
        answers=16,
        length=32,
        d_model=128,
        d_mlp=512,
        steps=20000,
        batch=512,
        lr=1e-3,
        eval_every=500,
        checkpoints=120,
    ),
}


def run_config(c: dict[str, Any]) -> dict[str, Any]:
    d = c["d_model"]
    return {
        "task": {
            "name": "factual_recall",
            "subjects": c["subjects"],
            "relations": c["relations"],
            "answers": c["answers"],
            "length": c["length"],
        },
        # factual_capacity's "mlp" family: frozen N(0, 1/d) embeddings and unembedding, no LayerNorm
        "model": {
            "n_layers": 1,
            "n_heads": 1,
            "d_model": d,
            "d_head": d // 4,
            "d_mlp": c["d_mlp"],
            "normalization": "none",
            "freeze_embeddings": True,
            "init_range": round(d**-0.5, 6),
        },
        "train": {
            "steps": c["steps"],
            "batch_size": c["batch"],
            "optimizer": "adam",
            "lr": c["lr"],
            "schedule": "cosine",
            "eval_every": c["eval_every"],
            "eval_batch_size": 1024,
            "checkpoints": c["checkpoints"],
        },
    }


# ---- the measurements ------------------------------------------------------------------------------------


def learned_step(steps: Sequence[int], scores: Sequence[float], level: float = THRESHOLD) -> Optional[int]:
    """The first checkpoint after which the score stays ≥ level (None: it does not by the end)."""
    return timeline.formation_step(list(steps), list(scores), level)


def dwell(
    steps: Sequence[int],
    loss: Sequence[float],
    lo: float,
    hi: float,
    start: Optional[int] = None,
    stop: Optional[int] = None,
) -> float:
    """How long, in ln steps, the loss lies in [lo, hi] between `start` and `stop` (default: the first nonzero
    checkpoint and the last), the loss interpolated linearly in ln step between checkpoints (step 0 left out)."""
    pts = [(math.log(s), v) for s, v in zip(steps, loss) if s > 0 and v is not None]
    a = math.log(start) if start else -math.inf
    b = math.log(stop) if stop else math.inf
    total = 0.0
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        u0, u1 = max(x0, a), min(x1, b)
        if u1 <= u0:
            continue
        # the loss at the clipped ends, on the segment's line
        f = lambda x: y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        v0, v1 = f(u0), f(u1)
        if v0 == v1:
            total += (u1 - u0) if lo <= v0 <= hi else 0.0
            continue
        t_lo, t_hi = sorted(((lo - v0) / (v1 - v0), (hi - v0) / (v1 - v0)))
        total += max(0.0, min(1.0, t_hi) - max(0.0, t_lo)) * (u1 - u0)
    return total


def analyse(run: Run, seed: int, D: int) -> dict[str, Any]:
    tl = timeline.probe_run(run, ["answer_type"], batch_size=PROBE_BATCH)
    m = tl.metrics["answer_type"]
    steps = list(tl.steps)
    type_step, fact_step = learned_step(steps, m["type_acc"]), learned_step(steps, m["acc"])
    known = next((s for s, v in zip(steps, m["type_acc"]) if v >= KNOWN), None)
    log_d = math.log(D)
    stop = fact_step if fact_step is not None else steps[-1]
    start = known if known is not None else stop
    plateau = dwell(steps, m["loss"], (1 - BAND) * log_d, (1 + BAND) * log_d, max(start, 1), stop)
    control = dwell(steps, m["loss"], (CONTROL - BAND) * log_d, (CONTROL + BAND) * log_d, max(start, 1), stop)
    on = [i for i, s in enumerate(steps) if start <= s <= stop and abs(m["loss"][i] - log_d) <= BAND * log_d]
    return {
        "seed": seed,
        "steps": steps,
        "loss": m["loss"],
        "type_acc": m["type_acc"],
        "acc": m["acc"],
        "type_loss": m["type_loss"],
        "fact_loss": m["fact_loss"],
        "type_only_acc": m["type_only_acc"][-1],
        "type_step": type_step,
        "fact_step": fact_step,
        "type_known_step": known,
        "plateau_dwell": plateau,
        "control_dwell": control,
        "plateau_checkpoints": [steps[i] for i in on],
        # on the plateau: the model knows the type (type_loss ~ 0) and guesses the fact (fact_loss ~ log D)
        "plateau_fact_loss": [m["fact_loss"][i] for i in on],
        "plateau_type_acc": [m["type_acc"][i] for i in on],
        "final_acc": m["acc"][-1],
        "final_type_acc": m["type_acc"][-1],
        "train_time_s": round(harness.train_seconds(run), 2),
    }


def plot(c: dict[str, Any], rows: list[dict[str, Any]], log_d: float, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, (ax_l, ax_a) = plt.subplots(1, 2, figsize=(12, 4.3))
    for i, r in enumerate(rows):
        x = [max(s, 1) for s in r["steps"]]
        ax_l.plot(x, r["loss"], color=f"C{i}", label=f"seed {r['seed']}")
        ax_a.plot(x, r["type_acc"], color=f"C{i}", linestyle="--")
        ax_a.plot(x, r["acc"], color=f"C{i}", label=f"seed {r['seed']}")
        for step, style in ((r["type_step"], ":"), (r["fact_step"], "-.")):
            if step is not None:
                ax_a.axvline(max(step, 1), color=f"C{i}", linestyle=style, linewidth=0.7)
    ax_l.axhspan((1 - BAND) * log_d, (1 + BAND) * log_d, color="0.6", alpha=0.3, label=f"log D ± {BAND:.0%}")
    ax_l.axhspan(
        (CONTROL - BAND) * log_d,
        (CONTROL + BAND) * log_d,
        color="tab:orange",
        alpha=0.15,
        label=f"control band ({CONTROL:g}·log D)",
    )
    ax_l.axhline(
        math.log(c["relations"] * c["answers"]), color="0.3", linewidth=0.7, linestyle=":", label="log(R·D), chance"
    )
    ax_l.set_ylabel("held-out loss (nats)")
    ax_a.set_ylabel("held-out accuracy: fact (solid), type (dashed)")
    ax_a.axhline(THRESHOLD, color="0.5", linewidth=0.7)
    for ax in (ax_l, ax_a):
        ax.set_xscale("log")
        ax.set_xlabel("training step")
        ax.legend(fontsize=7)
    fig.suptitle(
        f"factual recall, S={c['subjects']} R={c['relations']} D={c['answers']} T={c['length']}: "
        "type first (dotted lines), then the facts (dash-dot)"
    )
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    c = SIZES[args.size]
    cfg = run_config(c)
    runs = session.train_runs(
        [({"S": c["subjects"], "R": c["relations"]}, seed, cfg) for seed in harness.seeds(c["seeds"])]
    )
    rows = [
        analyse(runs.run(seed, S=c["subjects"], R=c["relations"]), seed, c["answers"])
        for seed in harness.seeds(c["seeds"])
    ]
    log_d = math.log(c["answers"])
    results = {
        "log_D": log_d,
        "log_RD": math.log(c["relations"] * c["answers"]),
        "threshold": THRESHOLD,
        "known": KNOWN,
        "band": BAND,
        "control": CONTROL,
        "probe_batch": PROBE_BATCH,
        "seeds": rows,
        "summary": {
            "type_step": stats.spread([r["type_step"] for r in rows]),
            "fact_step": stats.spread([r["fact_step"] for r in rows]),
            "plateau_span": stats.spread([math.exp(r["plateau_dwell"]) for r in rows]),
            "control_span": stats.spread([math.exp(r["control_dwell"]) for r in rows]),
        },
    }
    for r in rows:
        print(
            f"seed {r['seed']}: type at {r['type_step']}, fact at {r['fact_step']}, loss within {BAND:.0%} of log D "
            f"for ×{math.exp(r['plateau_dwell']):.2f} of steps (control band ×{math.exp(r['control_dwell']):.2f}); "
            f"final acc {r['final_acc']:.3f}"
        )
    figures = [plot(c, rows, log_d, args.out / f"{NAME}.png")]
    session.finish({"size": c, "run": cfg}, results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
