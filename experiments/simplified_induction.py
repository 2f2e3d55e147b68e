"""The two phases of Edelman et al. 2024's simplified transformer (seed 001, "What is happening under the hood?"):
in f(E) = mask(E W_k (M E)ᵀ) E (model kind minimal_induction), W_k's diagonal forms first and the relative-position
vector v's second entry (the previous token) after it; the full transformer beside it on the same data.

    python -m experiments.simplified_induction            # their setting: ~10 min on 2 cores
    python -m experiments.simplified_induction --full     # 20 + 10 seeds
    python -m experiments.simplified_induction --smoke    # seconds; checks the pipeline only

The simplified model trains in their setting, as their code has it (EzraEdelman/Evolution-of-Statistical-Induction-
Heads, min_model.py in its first, linear form): `markov_icl` with k = 2, t = 100, Dirichlet(1) rows, the first token
from the stationary distribution; W_k = 0.01·11ᵀ, v = 0; plain SGD without clipping, W_k at lr 1e-2 and v at lr 1
(v_lr_ratio 100), batch 128, 200 steps, a checkpoint at every step, so that v's update between two checkpoints is
exactly −lr · that step's gradient. Beside it, their full transformer on the same task
(experiments/statistical_induction.py's paper_k2: 2 layers, attention only, learned relative positions, d_model 16,
AdamW lr 5e-4). Besides the runs the script takes gradients at set states (mean over GRAD_BATCHES batches of 128):
  - state C, a diagonal bias set by hand: W_k = 0.01·(11ᵀ + I), v = 0 — which v_d gets the largest gradient;
  - the near-init state W_k = c·11ᵀ, v = c·1 (c = 1e-3) at t = 25…400: r(t), the diagonal bias's gradient over
    v_2's (and, as a second reading not judged, the same after a small step along the first update).
The negative control (group "control"): the same simplified model, seeds and SGD on chains without bigram structure
(`markov_icl`'s prior "unigram": one Dirichlet row shared by every state, so each token is an iid draw and the
previous token says nothing about the next), and r(t) on those chains for CONTROL_RATIO_SEEDS seeds.
The claims and their rules are experiments/rules/simplified_induction.py.

Writes OUT/simplified_induction.json and OUT/simplified_induction.png.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import torch

from experiments import harness, stats
from experiments.statistical_induction import segments, strategy_kls
from mechsynth import models, tasks
from mechsynth.analysis.timeline import probe_run
from mechsynth.runs.run import Run
from mechsynth.tasks.base import masked_loss

NAME = "simplified_induction"
GROUPS = ("minimal", "transformer", "control")
CONTROL_PRIOR = "unigram"  # the control's chains: iid tokens, no bigram structure
CONTROL_RATIO_SEEDS = 3  # r(t) on the control's chains for this many seeds (the rule's min_n)
C_NEAR_INIT = 1e-3  # the near-init state of r(t)
C_DIAGONAL = 0.01  # state C: W_k = C_DIAGONAL·(11ᵀ + I)
SHOWN = 12  # v's entries in the JSON and the figure

SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(
        minimal_seeds=3,
        transformer_seeds=2,
        t=16,
        steps=12,
        transformer_steps=30,
        ts=[8, 16, 32],
        grad_batches=4,
        kl_batch=32,
    ),
    "cpu": dict(
        minimal_seeds=list(range(300, 310)),
        transformer_seeds=list(range(300, 305)),
        t=100,
        steps=200,
        transformer_steps=6000,
        ts=[25, 50, 100, 200, 400],
        grad_batches=64,
        kl_batch=512,
    ),
    "full": dict(
        minimal_seeds=list(range(300, 320)),
        transformer_seeds=list(range(300, 310)),
        t=100,
        steps=200,
        transformer_steps=6000,
        ts=[25, 50, 100, 200, 400, 800],
        grad_batches=64,
        kl_batch=512,
    ),
}


def task_config(c: dict[str, Any], t: Optional[int] = None, prior: str = "dirichlet") -> dict[str, Any]:
    return {"name": "markov_icl", "k": 2, "length": t or c["t"], "prior": prior, "start": "stationary"}


def run_config(c: dict[str, Any], group: str) -> dict[str, Any]:
    if group in ("minimal", "control"):
        # every step a checkpoint: checkpoint_steps(200, 402) is 0..200 (half of them log-spaced, half linear)
        prior = CONTROL_PRIOR if group == "control" else "dirichlet"
        return {
            "task": task_config(c, prior=prior),
            "model": {"kind": "minimal_induction"},
            "train": {
                "steps": c["steps"],
                "batch_size": 128,
                "optimizer": "sgd",
                "lr": 1e-2,
                "grad_clip": 0,
                "eval_every": max(c["steps"] // 20, 1),
                "eval_batch_size": 256,
                "checkpoints": 2 * c["steps"] + 2,
            },
        }
    return {
        "task": task_config(c),
        "model": {
            "n_layers": 2,
            "n_heads": 1,
            "d_model": 16,
            "attn_only": True,
            "positional": "relative",
            "init_range": 0.02,
        },
        "train": {
            "steps": c["transformer_steps"],
            "batch_size": 64,
            "lr": 5e-4,
            "betas": [0.9, 0.95],
            "weight_decay": 0.1,
            "decay": "matrices",
            "eval_every": max(c["transformer_steps"] // 40, 1),
            "checkpoints": 80,
        },
    }


def minimal_model(t: int, W: torch.Tensor, v: torch.Tensor, prior: str = "dirichlet") -> tuple[Any, torch.nn.Module]:
    task = tasks.make("markov_icl", {k: x for k, x in task_config({}, t, prior).items() if k != "name"})
    model = models.build(models.parse({"kind": "minimal_induction"}), task.spec)
    with torch.no_grad():
        model.W_k.copy_(W)
        model.u.copy_(v / model.v_scale)
    return task, model


def gradients(task: Any, model: torch.nn.Module, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """−∂L/∂W_k and −∂L/∂v, each the mean over n batches of 128 sequences."""
    g = torch.Generator().manual_seed(seed)
    gW, gv = torch.zeros_like(model.W_k), torch.zeros_like(model.u)
    for _ in range(n):
        batch = task.sample(128, g)
        model.zero_grad()
        masked_loss(model(batch.tokens), batch).backward()
        gW -= model.W_k.grad / n
        gv -= model.u.grad / model.v_scale / n  # v = scale·u: ∂L/∂v = ∂L/∂u / scale
    return gW, gv


def diag_bias(W: torch.Tensor) -> float:
    k = W.shape[-1]
    return float(W.diagonal().mean() - (W.sum() - W.diagonal().sum()) / (k * k - k))


def profile_fit(v: torch.Tensor, shape: torch.Tensor) -> dict[str, float]:
    """v ≈ a·shape by least squares: a and R²."""
    a = float((v @ shape) / (shape @ shape))
    resid = float(((v - a * shape) ** 2).sum())
    total = float(((v - v.mean()) ** 2).sum())
    return {"a": a, "r2": 1 - resid / total if total > 0 else 0.0}


def ratio(t: int, seed: int, c: dict[str, Any], prior: str = "dirichlet") -> dict[str, float]:
    """r(t) at the near-init state, and after a small step along the first update (a second reading)."""
    task, model = minimal_model(t, C_NEAR_INIT * torch.ones(2, 2), C_NEAR_INIT * torch.ones(t), prior)
    gW, gv = gradients(task, model, c["grad_batches"], seed * 10_000 + t)
    _, first = gradients(
        *minimal_model(t, 0.01 * torch.ones(2, 2), torch.zeros(t), prior), c["grad_batches"], seed * 10_000 + t
    )
    task2, stepped = minimal_model(t, 0.01 * torch.ones(2, 2), C_NEAR_INIT * first / first[0], prior)
    gW2, gv2 = gradients(task2, stepped, c["grad_batches"], seed * 10_000 + t + 1)
    return {
        "t": t,
        "diag": diag_bias(gW),
        "v2": float(gv[1]),
        "r": diag_bias(gW) / float(gv[1]),
        "r_after_step": diag_bias(gW2) / float(gv2[1]),
    }


def slope(ts: list[int], rs: list[float]) -> Optional[float]:
    if any(r <= 0 for r in rs):
        return None
    return stats.power_fit(ts, rs)["exponent"]


def analyse_minimal(run: Run, seed: int, c: dict[str, Any]) -> dict[str, Any]:
    steps = run.steps
    assert steps == list(range(c["steps"] + 1)), "the simplified model needs a checkpoint at every step"
    weights = [run.trainable(s) for s in steps]
    W = [m.W_k.detach() for m in weights]
    v = [m.v.detach() for m in weights]
    t = v[0].shape[-1]
    d = torch.arange(t, dtype=torch.float32)
    quad, lin = profile_fit(v[1], (1 - d / t) ** 2), profile_fit(v[1], 1 - d / t)
    bias = [diag_bias(w) for w in W]
    final_v2 = float(v[-1][1])
    v2_half = next((s for s in steps if float(v[s][1]) >= 0.5 * final_v2), None) if final_v2 > 0 else None
    diag_from = next((s for s in steps if bias[s] > 0), None)
    window = list(range(diag_from, v2_half)) if diag_from is not None and v2_half is not None else []
    leads = [int((v[s + 1] - v[s]).argmax()) == 1 for s in window]
    peak = max(bias)
    _, c_model = minimal_model(t, C_DIAGONAL * (torch.ones(2, 2) + torch.eye(2)), torch.zeros(t))
    _, gv_c = gradients(run.task, c_model, c["grad_batches"], seed)
    loss, kls = strategy_kls(run, c["kl_batch"])
    kls = {k: x for k, x in kls.items() if k != "bayes"}  # the strategies; Bayes' predictor is their limit
    segs = segments(steps, kls)
    tl = probe_run(run, ["position_mixing"], batch_size=8)
    return {
        "seed": seed,
        "first_step": {
            "r2_quadratic": quad["r2"],
            "r2_linear": lin["r2"],
            "a": quad["a"],
            "w_moved_step1": not torch.equal(W[0], W[1]),
            "diag_bias_step2": bias[2],
            "v_step1": v[1][:SHOWN].tolist(),
        },
        "state_c": {"argmax": int(gv_c.argmax()), "gradient": gv_c[:SHOWN].tolist()},
        "window": {
            "from": diag_from,
            "to": v2_half,
            "steps": len(window),
            "share_v2": sum(leads) / len(leads) if leads else 0.0,
        },
        "phase": {
            "diag_half": next((s for s in steps if bias[s] >= 0.5 * peak), None) if peak > 0 else None,
            "v2_half": v2_half,
            "diag_peak": peak,
            "diag_peak_step": bias.index(peak),
        },
        "series": {
            "steps": steps,
            "diag_bias": tl.metrics["position_mixing"]["diag_bias"],
            "v": [[float(x[i]) for x in v] for i in range(min(SHOWN, t))],
        },
        "loss": loss,
        "kl": kls,
        "segments": segs,
        "stages": [s["strategy"] for s in segs],
        "train_time_s": round(harness.train_seconds(run), 2),
    }


def analyse_transformer(run: Run, seed: int, c: dict[str, Any]) -> dict[str, Any]:
    loss, kls = strategy_kls(run, c["kl_batch"])
    kls = {k: x for k, x in kls.items() if k != "bayes"}
    segs = segments(run.steps, kls)
    return {
        "seed": seed,
        "steps": run.steps,
        "loss": loss,
        "kl": kls,
        "segments": segs,
        "stages": [s["strategy"] for s in segs],
        "train_time_s": round(harness.train_seconds(run), 1),
    }


def plot(c: dict[str, Any], results: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    ax = axes[0]
    for i, r in enumerate(results["minimal"]):
        s = r["series"]
        ax.plot(
            s["steps"],
            [x / max(r["phase"]["diag_peak"], 1e-12) for x in s["diag_bias"]],
            color="C0",
            alpha=0.6,
            linewidth=0.8,
            label="W_k diagonal bias / its peak" if i == 0 else None,
        )
        v2 = s["v"][1]
        ax.plot(
            s["steps"],
            [x / max(v2[-1], 1e-12) for x in v2],
            color="C1",
            alpha=0.6,
            linewidth=0.8,
            label="v_2 / its final value" if i == 0 else None,
        )
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("SGD step")
    ax.set_title("the two phases (every seed)")
    ax.legend(fontsize=7)
    ax = axes[1]
    t = c["t"]
    for i, r in enumerate(results["minimal"]):
        v1 = r["first_step"]["v_step1"]
        ax.plot(
            range(len(v1)),
            [x / v1[0] for x in v1],
            "o",
            color="C0",
            alpha=0.5,
            markersize=3,
            label="v after the first step / v_1" if i == 0 else None,
        )
    d = list(range(SHOWN))
    ax.plot(d, [(1 - x / t) ** 2 for x in d], "k-", linewidth=1, label="(1 − d/t)²")
    ax.plot(d, [1 - x / t for x in d], "k:", linewidth=1, label="1 − d/t")
    ax.set_xlabel("d (positions back; 0 = v_1)")
    ax.set_title("v's first update: a quadratic decay")
    ax.legend(fontsize=7)
    ax = axes[2]
    rt = results["ratio"]
    for i, r in enumerate(rt["per_seed"]):
        ax.plot(
            rt["t"], r["r"], "o-", color="C2", alpha=0.5, linewidth=0.8, label="r(t), near init" if i == 0 else None
        )
        ax.plot(
            rt["t"],
            r["r_after_step"],
            "s--",
            color="C4",
            alpha=0.4,
            linewidth=0.8,
            label="after a small first step" if i == 0 else None,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("t (sequence length)")
    ax.set_title("diagonal-bias gradient / v_2 gradient")
    ax.legend(fontsize=7)
    ax = axes[3]
    for gi, group in enumerate(("minimal", "transformer")):
        r = results[group][0]
        steps = r["series"]["steps"] if group == "minimal" else r["steps"]
        frac = [s / max(steps[-1], 1) for s in steps]
        for j, (name, kl) in enumerate(r["kl"].items()):
            ax.plot(
                frac,
                kl,
                color=f"C{j}",
                linestyle="-" if gi == 0 else "--",
                linewidth=1,
                label=f"{name} ({'simplified' if gi == 0 else 'transformer'})",
            )
    ax.set_yscale("log")
    ax.set_xlabel("fraction of training")
    ax.set_ylabel("KL(strategy ‖ model)")
    ax.set_title(f"stages, seed {results['minimal'][0]['seed']}")
    ax.legend(fontsize=6)
    fig.suptitle(
        f"Edelman et al. 2024's simplified transformer, k = 2, t = {t}, SGD as theirs "
        f"({len(results['minimal'])} seeds); the full transformer: {len(results['transformer'])} seeds"
    )
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    c = SIZES[args.size]
    seeds = {"minimal": harness.seeds(c["minimal_seeds"]), "transformer": harness.seeds(c["transformer_seeds"])}
    seeds["control"] = seeds["minimal"]
    # Plain SGD at v's lr 1, without clipping (their setup), sends some runs' loss to infinity, more of them on the
    # control's iid chains: those runs are counted and left out of what the rules read, not retried.
    runs = session.train_runs(
        [({"group": g}, seed, run_config(c, g)) for g in GROUPS for seed in seeds[g]], diverged_ok=True
    )
    diverged = {
        g: [
            {"seed": s, "last_finite_step": runs.run(s, group=g).steps[-1]}
            for s in seeds[g]
            if not runs.finished(s, group=g)
        ]
        for g in GROUPS
    }
    kept = {g: [s for s in seeds[g] if runs.finished(s, group=g)] for g in GROUPS}
    results: dict[str, Any] = {
        "minimal": [analyse_minimal(runs.run(s, group="minimal"), s, c) for s in kept["minimal"]],
        "transformer": [analyse_transformer(runs.run(s, group="transformer"), s, c) for s in kept["transformer"]],
        "diverged": {g: {"count": len(d), "of": len(seeds[g]), "runs": d} for g, d in diverged.items()},
    }

    def ratios(ss: list[int], prior: str = "dirichlet") -> dict[str, Any]:
        per_seed = []
        for s in ss:
            rows = [ratio(t, s, c, prior) for t in c["ts"]]
            per_seed.append(
                {
                    "seed": s,
                    "r": [r["r"] for r in rows],
                    "r_after_step": [r["r_after_step"] for r in rows],
                    "slope": slope(c["ts"], [r["r"] for r in rows]),
                    "slope_after_step": slope(c["ts"], [r["r_after_step"] for r in rows]),
                }
            )
        return {"t": c["ts"], "per_seed": per_seed}

    results["ratio"] = ratios(seeds["minimal"][: max(3, len(seeds["minimal"]) // 2)])
    # the negative control: the same model and seeds on chains without bigram structure
    results["control"] = {
        "prior": CONTROL_PRIOR,
        "minimal": [analyse_minimal(runs.run(s, group="control"), s, c) for s in kept["control"]],
        "ratio": ratios(seeds["minimal"][:CONTROL_RATIO_SEEDS], CONTROL_PRIOR),
    }
    for r in results["minimal"]:
        harness.log(
            f"seed {r['seed']}: diagonal half-way at step {r['phase']['diag_half']}, v_2 at "
            f"{r['phase']['v2_half']}; stages {' → '.join(r['stages'])}"
        )
    figures = [plot(c, results, args.out / f"{NAME}.png")]
    session.finish({"size": c, "runs": {g: run_config(c, g) for g in GROUPS}}, results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
