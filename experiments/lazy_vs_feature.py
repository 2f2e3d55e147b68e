"""Lazy training against feature learning (Chizat, Oyallon & Bach 2019; the NTK regime of seed 004's Bai & Lee,
Nichani, Damian & Lee): a 2-layer attention-only transformer on in-context Markov chains (`markov_icl`, k = 3,
T = 100, as experiments/statistical_induction.py's k3), trained four ways from the same initialisation θ₀:

  real        the network itself, centred: f(θ) − f(θ₀) (α = 1, Adam lr 3e-3)
  linearized  its first-order Taylor expansion at θ₀, α·J f(θ₀)·(θ − θ₀) (the NTK model; α = 100, lr 3e-5)
  lazy10      the network centred and scaled, α·(f(θ) − f(θ₀)), α = 10 (lr 3e-4)
  lazy100     the same at α = 100 (lr 3e-5)

(`[model] kind = "linearized"`: mechsynth/models/linearized.py.) Under Adam, whose steps do not grow with the
gradient, lr ∝ 1/α keeps the function moving as fast at every α (under plain gradient descent it would be 1/α²);
for the linearized model α then only rescales θ − θ₀. Every checkpoint of every run is probed for the layer-0
previous-token and layer-1 induction heads, in the network at its current weights θ (for the linearized model too:
its own activations cannot be hooked), and its held-out loss is measured against the in-context unigram and
bigram strategies'. The weights' relative movement ‖θ − θ₀‖/‖θ₀‖ is read off the checkpoints.

The same four conditions train experiments/parity_search.py's one-layer transformer on sparse parity (n = 15,
k = 3, seed 000's setup; lazy_vs_feature_parity.toml): its held-out accuracy, and at every checkpoint the
`sparse_selection` circuit — attention from the readout position onto the support S — in the network at θ.

    python -m experiments.lazy_vs_feature            # the CPU size: 5 seeds (300-304; 70 min on 2 cores shared with 3 other jobs when seeds 0-4 trained side by side)
    python -m experiments.lazy_vs_feature --full     # d_model 64, 10 000 steps, α up to 1000, 10 seeds
    python -m experiments.lazy_vs_feature --smoke    # seconds; checks the pipeline only

The runs are the sweeps experiments/lazy_vs_feature.toml and lazy_vs_feature_parity.toml (_smoke.toml, _full.toml
for the other sizes), trained into --runs (runs/condition=real/seed_0, runs/task=sparse_parity,condition=real/...)
on a local process pool, each condition's seeds side by side; runs already there are reused. This script analyses
them.

Writes OUT/lazy_vs_feature.json, OUT/lazy_vs_feature.png and OUT/lazy_vs_feature_parity.png.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Optional

import torch

from experiments import harness, stats
from mechsynth.analysis.timeline import formation_step, probe_run
from mechsynth.runs.run import Run

NAME = "lazy_vs_feature"

# The runs are experiments/lazy_vs_feature.toml (CPU size; _smoke.toml, _full.toml). What follows is the analysis:
# its own sizes only.
SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(eval_batch=32, probe_batch=8),
    "cpu": dict(eval_batch=256, probe_batch=64),
    "full": dict(eval_batch=512, probe_batch=64),
}
ODDS = 3.0  # a head forms at odds ≥ 3× a uniform head's on its targets (the probes' over_chance; the rules' too)
EVAL_SEED = 12345
SOLVED_ACC = 0.99  # sparse parity is learned at held-out accuracy ≥ 0.99 (parity_search's convergence)


def base_key(name: str) -> Optional[str]:
    """A weight matrix of the network (W_E, W_Q, ...) under the name the base kind gives it; None for θ₀'s copy and
    for norms and biases (whose init is 1 or 0: no scale to move relative to)."""
    if name.startswith("init."):
        return None
    name = name.removeprefix("base.")
    return name if name.rsplit(".", 1)[-1].startswith("W_") else None


def movement(start: dict[str, torch.Tensor], now: dict[str, torch.Tensor]) -> float:
    """‖θ − θ₀‖ / ‖θ₀‖ over the weight matrices."""
    keys = [k for k in now if base_key(k) is not None]
    moved = math.sqrt(sum(float((now[k] - start[k]).double().square().sum()) for k in keys))
    return moved / math.sqrt(sum(float(start[k].double().square().sum()) for k in keys))


@torch.no_grad()
def losses(run: Run, n_seqs: int) -> tuple[dict[str, float], list[float], torch.Tensor, list[float]]:
    """On a fixed held-out batch: the in-context strategies' losses (uniform, unigram, bigram, Bayes), the model's
    loss at every checkpoint (its own forward: the linearized model's for it), its log-probabilities at the last,
    and the relative weight movement at every checkpoint."""
    task = run.task
    batch = task.sample(n_seqs, torch.Generator().manual_seed(EVAL_SEED), "cpu", task.main_eval)
    target = batch.targets[..., None]
    strategies = {
        name: float(-batch.truth[key].clamp_min(1e-30).log().gather(-1, target).mean())
        for name, key in (("uniform", "uniform"), ("unigram", "unigram"), ("bigram", "ngram"), ("bayes", "bayes"))
        if key in batch.truth
    }
    start = run.weights(run.steps[0])
    loss, moved, logp = [], [], None
    for step in run.steps:
        logp = run.trainable(step)(batch.tokens).float().log_softmax(-1)
        loss.append(float(-logp.gather(-1, target).mean()))
        moved.append(movement(start, run.weights(step)))
    return strategies, loss, logp, moved


def best_head(steps: list[int], series: dict[str, list[float]], layer: int, chance: Optional[float]) -> dict[str, Any]:
    """The head of `layer` that ends highest on a probe's score: its start, end and peak, the probe's chance (a
    uniform head's score) and when it formed (reached and held odds ≥ 3× chance)."""
    name = max((h for h in series if h.startswith(f"L{layer}H")), key=lambda h: series[h][-1])
    s = series[name]
    c = chance if chance is not None else s[0]
    level = ODDS * c / (1 - c + ODDS * c) if c < 1 else 1.0
    return {
        "head": name,
        "start": s[0],
        "final": s[-1],
        "peak": max(s),
        "chance": c,
        "level": level,
        "formed": formation_step(steps, s, level),
    }


def chance_of(tl: Any, probe: str) -> Optional[float]:
    values = [v for v in tl.metrics.get(probe, {}).get("chance", []) if math.isfinite(v)]
    return max(values) if values else None


def analyse(run: Run, size: dict[str, Any]) -> tuple[dict[str, Any], torch.Tensor]:
    strategies, loss, logp, moved = losses(run, size["eval_batch"])
    steps = run.steps
    tl = probe_run(run, ["previous_token", "induction"], batch_size=size["probe_batch"])
    heads = {
        "previous_token": best_head(steps, tl.per_head["previous_token"], 0, chance_of(tl, "previous_token")),
        "induction": best_head(steps, tl.per_head["induction"], 1, chance_of(tl, "induction")),
    }
    out = {
        "steps": steps,
        "loss": loss,
        "movement": moved,
        "strategies": strategies,
        "heads": heads,
        "series": {p: tl.per_head[p][h["head"]] for p, h in heads.items()},
        "below_unigram": stats.stays_below(steps, loss, strategies["unigram"]),
        "final": {"loss": loss[-1], "movement": moved[-1]},
    }
    return out, logp


def analyse_parity(run: Run, size: dict[str, Any]) -> dict[str, Any]:
    """Held-out accuracy over training (the model's own forward), the readout's attention onto S in the network at
    θ at every checkpoint (its best head), and the relative weight movement."""
    steps = run.steps
    evals = [r for r in run.metrics if "eval/acc" in r]
    tl = probe_run(run, ["sparse_selection"], batch_size=size["probe_batch"])
    head = best_head(steps, tl.per_head["sparse_selection"], 0, chance_of(tl, "sparse_selection"))
    start = run.weights(steps[0])
    moved = [movement(start, run.weights(step)) for step in steps]
    acc = [r["eval/acc"] for r in evals]
    return {
        "steps": steps,
        "eval_steps": [r["step"] for r in evals],
        "acc": acc,
        "movement": moved,
        "head": head,
        "series": tl.per_head["sparse_selection"][head["head"]],
        "support_recovered": tl.metrics["sparse_selection"]["support_recovered"],
        "solved": next((r["step"] for r in evals if r["eval/acc"] >= SOLVED_ACC), None),
        "final": {"acc": acc[-1], "movement": moved[-1]},
    }


def at(step: Optional[int], what: str) -> str:
    """ "formed at step 200", or "never formed"."""
    return f"{what} at step {step}" if step is not None else f"never {what}"


def kl(p_log: torch.Tensor, q_log: torch.Tensor) -> float:
    """Mean over sequences and positions of KL(p ‖ q), from log-probabilities."""
    return float((p_log.exp() * (p_log - q_log)).sum(-1).mean())


def summarise(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "final_loss": stats.spread([r["final"]["loss"] for r in per_seed]),
        "final_movement": stats.spread([r["final"]["movement"] for r in per_seed]),
        "induction_final": stats.spread([r["heads"]["induction"]["final"] for r in per_seed]),
        "induction_formed": stats.spread([r["heads"]["induction"]["formed"] for r in per_seed]),
        "previous_token_final": stats.spread([r["heads"]["previous_token"]["final"] for r in per_seed]),
        "below_unigram": stats.spread([r["below_unigram"] for r in per_seed]),
        "train_time_s": stats.spread([r["train_time_s"] for r in per_seed]),
    }


# ---- the figure ---------------------------------------------------------------------------------------

COLOURS = {
    "real": "black",
    "linearized": "tab:red",
    "lazy10": "tab:orange",
    "lazy100": "tab:purple",
    "lazy1000": "tab:brown",
}


def _logx(steps: list[int], *series: list[float]) -> list[list]:
    keep = [i for i, s in enumerate(steps) if s > 0]
    return [[steps[i] for i in keep]] + [[s[i] for i in keep] for s in series]


def _figure(
    conditions: dict[str, Any], curves: Any, ylabels: tuple[str, str, str], decorate: Any, title: str, path: Path
) -> Path:
    """Three panels against the training step (log): `curves(seed's result)` gives each panel's (steps, values) for
    every seed of every condition, the first seed solid; the last panel, the weights' movement, on a log scale too.
    `decorate(axes)` adds the reference lines."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    for cond, data in conditions.items():
        for j, r in enumerate(data["seeds"]):
            kw = dict(color=COLOURS.get(cond), alpha=1.0 if j == 0 else 0.3, label=cond if j == 0 else None)
            for ax, (steps, values) in zip(axes, curves(r)):
                ax.plot(*_logx(steps, values), **kw)
    decorate(axes)
    for ax, label in zip(axes, ylabels):
        ax.set_ylabel(label)
        ax.set_xscale("log")
        ax.set_xlabel("training step")
        ax.legend(fontsize=8)
    axes[2].set_yscale("log")
    fig.suptitle(title)
    return harness.save_figure(fig, path)


MOVED = "‖θ − θ₀‖ / ‖θ₀‖ (weight matrices)"


def plot(res: dict[str, Any], path: Path) -> Path:
    real = res["conditions"]["real"]["seeds"][0]

    def decorate(axes: Any) -> None:
        for name, style in (("unigram", "--"), ("bigram", ":")):
            axes[0].axhline(
                real["strategies"][name], color="gray", linestyle=style, linewidth=1, label=f"in-context {name}"
            )
        axes[1].axhline(
            real["heads"]["induction"]["level"],
            color="gray",
            linestyle="--",
            linewidth=1,
            label="formed (odds 3× chance)",
        )

    return _figure(
        res["conditions"],
        lambda r: [(r["steps"], r["loss"]), (r["steps"], r["series"]["induction"]), (r["steps"], r["movement"])],
        ("held-out loss (nats)", "best L1 induction score (network at θ)", MOVED),
        decorate,
        "Lazy training against feature learning: 2-layer attention-only transformer, in-context Markov chains (k = 3)",
        path,
    )


def plot_parity(res: dict[str, Any], path: Path) -> Path:
    head = res["conditions"]["real"]["seeds"][0]["head"]

    def decorate(axes: Any) -> None:
        axes[0].axhline(0.5, color="gray", linestyle="--", linewidth=1, label="chance")
        axes[1].axhline(head["chance"], color="gray", linestyle=":", linewidth=1, label="a uniform head")
        axes[1].axhline(head["level"], color="gray", linestyle="--", linewidth=1, label="formed (odds 3× chance)")

    return _figure(
        res["conditions"],
        lambda r: [(r["eval_steps"], r["acc"]), (r["steps"], r["series"]), (r["steps"], r["movement"])],
        ("held-out accuracy", "best head's attention onto S from the readout (network at θ)", MOVED),
        decorate,
        "Lazy training against feature learning: 1-layer transformer, sparse parity (n = 15, k = 3)",
        path,
    )


def condition(jobs: list[Any]) -> dict[str, Any]:
    """A condition's α, whether it is linearized, and its learning rate (its seeds, filled in by the caller)."""
    model = jobs[0].config["model"]
    return {"scale": model["scale"], "linearize": model["linearize"], "lr": jobs[0].config["train"]["lr"], "seeds": []}


def parity_sweep_file(size: str) -> Path:
    return harness.EXPERIMENTS / (f"{NAME}_parity.toml" if size == "cpu" else f"{NAME}_parity_{size}.toml")


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    size = SIZES[args.size]
    runs = session.sweep()
    conditions = list(dict.fromkeys(j.labels["condition"] for j in runs.plan.jobs))
    res: dict[str, Any] = {"conditions": {}, "agreement": []}
    final_logp: dict[int, dict[str, torch.Tensor]] = {}
    for cond in conditions:
        jobs = runs.jobs(condition=cond)
        res["conditions"][cond] = condition(jobs)
        for job in jobs:
            run = runs.load(job)
            r, logp = analyse(run, size)
            res["conditions"][cond]["seeds"].append(
                {
                    "seed": job.seed,
                    "train_time_s": round(harness.train_seconds(run), 1),
                    "run": str(args.runs / job.dir),
                    **r,
                }
            )
            final_logp.setdefault(job.seed, {})[cond] = logp
            h = r["heads"]["induction"]
            print(
                f"{cond} seed {job.seed}: loss {r['final']['loss']:.3f} (unigram {r['strategies']['unigram']:.3f}), "
                f"induction {h['final']:.2f} ({at(h['formed'], 'formed')}), movement {r['final']['movement']:.3g}",
                file=sys.stderr,
            )
        res["conditions"][cond]["summary"] = summarise(res["conditions"][cond]["seeds"])
    for seed, logps in sorted(final_logp.items()):
        if "linearized" in logps:
            res["agreement"].append(
                {
                    "seed": seed,
                    "kl_from_linearized": {
                        c: kl(logps["linearized"], lp) for c, lp in logps.items() if c != "linearized"
                    },
                }
            )
    real = runs.jobs(condition="real")[0].config["train"]
    res["budget"] = real["steps"] * real["batch_size"] / (1200 * 32)

    parity = session.sweep(file=parity_sweep_file(args.size))
    res["parity"] = {"conditions": {}}
    for cond in dict.fromkeys(j.labels["condition"] for j in parity.plan.jobs):
        jobs = parity.jobs(condition=cond)
        res["parity"]["conditions"][cond] = condition(jobs)
        for job in jobs:
            run = parity.load(job)
            r = analyse_parity(run, size)
            res["parity"]["conditions"][cond]["seeds"].append(
                {
                    "seed": job.seed,
                    "train_time_s": round(harness.train_seconds(run), 1),
                    "run": str(args.runs / job.dir),
                    **r,
                }
            )
            print(
                f"sparse_parity {cond} seed {job.seed}: accuracy {r['final']['acc']:.3f} ({at(r['solved'], f'≥ {SOLVED_ACC}')}), "
                f"attention onto S {r['head']['final']:.2f} (chance {r['head']['chance']:.2f}, "
                f"{at(r['head']['formed'], 'formed')}), movement {r['final']['movement']:.3g}",
                file=sys.stderr,
            )
    p_real = parity.jobs(condition="real")[0].config["train"]
    res["parity"]["budget"] = p_real["steps"] * p_real["batch_size"] / (4000 * 32)

    figures = [plot(res, args.out / f"{NAME}.png"), plot_parity(res["parity"], args.out / f"{NAME}_parity.png")]
    config = {
        "sizes": size,
        "sweep": session.sweep_file().name,
        "seeds": list(runs.plan.seeds),
        "runs": {c: runs.jobs(condition=c)[0].config for c in conditions},
        "parity_sweep": parity_sweep_file(args.size).name,
        "parity_runs": {c: parity.jobs(condition=c)[0].config for c in res["parity"]["conditions"]},
    }
    session.finish(config, res, figures)
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
