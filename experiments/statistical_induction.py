"""Statistical induction heads (Edelman et al. 2024), side by side with the paper.

A 2-layer attention-only transformer learns in-context Markov chains (`markov_icl`, T = 100):
  1. k = 3 and k = 2 states, Dirichlet prior: the phases uniform -> unigram -> bigram in the
     strategy-KL curves, and when the layer-0 previous-token head and the layer-1 induction head form,
     against the step of the bigram transition;
  2. a doubly-stochastic prior (uniform stationary distribution, so in-context unigram statistics carry
     no information): no unigram plateau, and whether the transition comes sooner — under several
     definitions of "the transition" (TRANSITIONS), since the answer depends on it;
  3. in-context trigrams (order 3) with two heads per layer: two layer-0 heads, looking back 1 and 2;
  4. a negative control, k3_1layer: k = 3 with one layer, which cannot form the induction circuit (no layer
     to read a previous-token head's output), for the rules' phases and heads claims.
Each in mechsynth's configuration (k3, k2, ds, trigram: learned absolute positions, d_model 32, Adam lr
3e-3) and 1–2 also in the paper's (paper_k2, paper_ds: learned relative positions, d_model 16, AdamW lr
5e-4; experiments/statistical_induction.toml says what is theirs and what is not). The final distance to
Bayes' predictor is measured against the true posterior predictive of the generator as sampled (first
token from the stationary distribution: `markov_icl`'s `bayes`), not against the count estimate.

    python -m experiments.statistical_induction            # the CPU configuration (~30 min on 2 cores)
    python -m experiments.statistical_induction --full     # bigger models, longer, more seeds
    python -m experiments.statistical_induction --smoke    # seconds; checks the pipeline only

The runs are the sweep experiments/statistical_induction.toml (_smoke.toml, _full.toml for the other
sizes), trained into --runs (a sweep directory: runs/condition=k3/seed_0, ...) on a local process pool
(--workers; --backend ray, --device cuda), each condition's seeds side by side; runs already there are
reused. This script analyses them.

Writes OUT/statistical_induction.json and OUT/statistical_induction_{stages,priors,trigram}.png.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Optional

import torch

from experiments import harness, stats
from mechsynth import tasks
from mechsynth.analysis.timeline import formation_step, probe_run, steepest_drop
from mechsynth.runs.run import Run

NAME = "statistical_induction"

# The runs are experiments/statistical_induction.toml (CPU size; _smoke.toml, _full.toml): the seven
# conditions below × 5 seeds, 300–304 (smoke 2, side by side; full 10: 300–309). Seeds that are not
# 0..S-1 train one run each, not side by side (mechsynth.sweep.units.why_separate). What follows is the
# analysis: its own sizes only.
SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(kl_batch=32, probe_batch=8),
    "cpu": dict(kl_batch=256, probe_batch=64),
    "full": dict(kl_batch=512, probe_batch=64),
}

# the sweep's `condition` axis: k3 and k2 (Dirichlet prior), ds (doubly stochastic, k = 3), trigram; the
# paper's setup with k = 2, Dirichlet and doubly-stochastic priors; and k3_1layer, the negative control of the
# phases and heads claims (one layer: no induction circuit)
CONDITIONS = ("k3", "k2", "ds", "trigram", "paper_k2", "paper_ds", "k3_1layer")
GRAM = {2: "bigram", 3: "trigram"}
# (Dirichlet prior, doubly-stochastic prior) pairs, same seeds
PRIOR_PAIRS = {"ours": ("k3", "ds"), "paper": ("paper_k2", "paper_ds")}
# "Converges": as Edelman et al. compare the two priors (their graphing_pipeline.py tests every model on the
# Dirichlet chains, datasets.ngrams("test", ...)), both runs of a pair are read on the Dirichlet condition's held-out
# chains; a run has converged at the first checkpoint from which its KL(Bayes ‖ model) there stays within
# CONVERGED of the way from its start to its own end (so a higher end, "but gets lower error", does not count)
CONVERGED = 0.1

# When the model has "switched to" the n-gram solution: the first checkpoint from which, for good, ...
TRANSITIONS = {
    "nearest": "the n-gram predictor is the nearest strategy (relative to the others)",
    "kl<=0.1": "KL(n-gram ‖ model) ≤ 0.1 nats (absolute)",
    "kl<=0.05": "KL(n-gram ‖ model) ≤ 0.05 nats (absolute)",
    "drop90": "KL(n-gram ‖ model) has fallen 90% of the way from its start to its end (relative to the run)",
}


@torch.no_grad()
def strategy_kls(
    run: Run, n_seqs: int, seed: int = 12345, task: Any = None
) -> tuple[list[float], dict[str, list[float]]]:
    """Held-out loss and KL(strategy ‖ model) at every checkpoint — the icl_strategy probe's quantity, on
    more sequences, plus the in-context bigram estimate for higher-order chains (a stage the model may
    pass through on the way to trigrams), and Bayes' predictor where the prior has one. `task`: read the
    run on another task's chains (same k) instead of its own."""
    task = task or run.task
    batch = task.sample(n_seqs, torch.Generator().manual_seed(seed), "cpu", task.main_eval)
    refs = {"uniform": batch.truth["uniform"], "unigram": batch.truth["unigram"]}
    if task.cfg.order > 2:
        lower = tasks.make("markov_icl", {"k": task.cfg.k, "order": 2, "length": task.cfg.length})
        refs["bigram"] = lower.predictors(batch.tokens)["ngram"]
    refs[GRAM.get(task.cfg.order, f"{task.cfg.order}-gram")] = batch.truth["ngram"]
    if "bayes" in batch.truth:
        refs["bayes"] = batch.truth["bayes"]
    loss, kls = [], {name: [] for name in refs}
    for step in run.steps:
        logp = run.trainable(step)(batch.tokens).float().log_softmax(-1)
        loss.append(float(-logp.gather(-1, batch.targets[..., None]).mean()))
        for name, q in refs.items():
            kls[name].append(float((q * (q.clamp_min(1e-30).log() - logp)).sum(-1).mean()))
    return loss, kls


def transitions(steps: list[int], kls: dict[str, list[float]], gram: str) -> dict[str, Optional[int]]:
    """The step of the switch to the n-gram solution under each definition in TRANSITIONS (None: not by
    the end of training)."""
    kl = kls[gram]
    nearest = [1.0 if min(kls, key=lambda s: kls[s][i]) == gram else 0.0 for i in range(len(steps))]
    below = lambda level: stats.stays_below(steps, kl, level)  # noqa: E731
    return {
        "nearest": formation_step(steps, nearest, 1.0),
        "kl<=0.1": below(0.1),
        "kl<=0.05": below(0.05),
        "drop90": below(kl[-1] + 0.1 * (kl[0] - kl[-1])),
    }


def segments(steps: list[int], kls: dict[str, list[float]]) -> list[dict[str, Any]]:
    """The nearest strategy over training, as runs of checkpoints: [{strategy, from, to}]."""
    out: list[dict[str, Any]] = []
    for i, step in enumerate(steps):
        nearest = min(kls, key=lambda s: kls[s][i])
        if out and out[-1]["strategy"] == nearest:
            out[-1]["to"] = step
        else:
            out.append({"strategy": nearest, "from": step, "to": step})
    return out


def head(
    steps: list[int],
    series: dict[str, list[float]],
    layer: int,
    threshold: float,
    exclude: Optional[str] = None,
    chance: Optional[float] = None,
) -> dict[str, Any]:
    """The head of `layer` that ends highest on a score, and when it formed: at the probe's threshold,
    and when it had risen 10% / 50% of the way from its start to its end; `chance`: a uniform head's score
    (the probe's metric), which experiments/rules/statistical_induction.py judges formation against."""
    cands = {h: s for h, s in series.items() if h.startswith(f"L{layer}H") and h != exclude}
    if not cands:  # a model with fewer layers (the 1-layer control): its last layer's heads
        last = max(int(h[1 : h.index("H")]) for h in series)
        cands = {h: s for h, s in series.items() if h.startswith(f"L{last}H") and h != exclude}
    name = max(cands, key=lambda h: cands[h][-1])
    s = cands[name]
    return {
        "head": name,
        "start": s[0],
        "final": s[-1],
        "threshold": threshold,
        "formed": formation_step(steps, s, threshold),
        "rise10": stats.rise_step(steps, s, 0.1),
        "rise50": stats.rise_step(steps, s, 0.5),
        **({"chance": chance} if chance is not None else {}),
    }


def chance_of(tl: Any, probe: str) -> Optional[float]:
    """A uniform head's score on the probe's inputs (its metric `chance`, the same at every checkpoint: the
    highest taken, as mechsynth.analysis.timeline.formation_threshold does)."""
    values = [v for v in tl.metrics.get(probe, {}).get("chance", []) if math.isfinite(v)]
    return max(values) if values else None


def analyse(run: Run, size: dict[str, Any]) -> dict[str, Any]:
    loss, every = strategy_kls(run, size["kl_batch"])
    kls = {k: v for k, v in every.items() if k != "bayes"}  # the strategies; Bayes' predictor is their limit
    steps = run.steps
    final = GRAM.get(run.task.cfg.order, "ngram")
    segs = segments(steps, kls)
    switch = transitions(steps, kls, final)
    unigram = [seg for seg in segs if seg["strategy"] == "unigram"]
    on_unigram = [i for i in range(len(steps)) if min(kls, key=lambda s: kls[s][i]) == "unigram"]
    tl = probe_run(run, ["previous_token", "induction"], batch_size=size["probe_batch"])
    prev = tl.per_head["previous_token"]
    out = {
        "steps": steps,
        "loss": loss,
        "kl": kls,
        "segments": segs,
        "stages": [seg["strategy"] for seg in segs],
        "transition_step": switch["nearest"],
        "transitions": switch,
        "loss_drop_step": steepest_drop(steps, loss),
        "unigram_plateau": {
            "from": unigram[0]["from"],
            "to": unigram[-1]["to"],
            "checkpoints": len(on_unigram),
            "min_kl": min(kls["unigram"][i] for i in on_unigram),
        }
        if on_unigram
        else None,
        "kl_bayes": every.get("bayes"),
        "final": {"loss": loss[-1], **{f"kl_{k}": v[-1] for k, v in every.items()}},
        "heads": {
            "previous_token": head(steps, prev, 0, 0.4, chance=chance_of(tl, "previous_token")),
            "induction": head(steps, tl.per_head["induction"], 1, 0.5, chance=chance_of(tl, "induction")),
        },
        "series": {"previous_token": prev, "induction": tl.per_head["induction"]},
    }
    if run.task.cfg.order > 2:  # a second layer-0 head looking two back
        offset2 = {h[len("offset2/") :]: s for h, s in tl.metrics["previous_token"].items() if h.startswith("offset2/")}
        offset3 = {h[len("offset3/") :]: s for h, s in tl.metrics["previous_token"].items() if h.startswith("offset3/")}
        back1 = head(steps, prev, 0, 0.4)
        back2 = head(steps, offset2, 0, 0.4, exclude=back1["head"])
        out["heads"] |= {
            "back1": back1,
            "back2": back2,
            "back2_of_back1_head": offset2[back1["head"]][-1],
            "back1_of_back2_head": prev[back2["head"]][-1],
            "back3_max": max(s[-1] for h, s in offset3.items() if h.startswith("L0")),
        }
        out["series"] |= {"offset2": offset2}
    return out


def summarise(cond: str, per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    s = {
        "transition_step": stats.spread([r["transition_step"] for r in per_seed]),
        "transitions": {d: stats.spread([r["transitions"][d] for r in per_seed]) for d in TRANSITIONS},
        **{f"final_kl_{k}": stats.spread([r["final"].get(f"kl_{k}") for r in per_seed]) for k in ("bigram", "bayes")},
        "loss_drop_step": stats.spread([r["loss_drop_step"] for r in per_seed]),
        "stages": [r["stages"] for r in per_seed],
        "unigram_plateau_checkpoints": stats.spread(
            [(r["unigram_plateau"] or {}).get("checkpoints", 0) for r in per_seed]
        ),
        "final_loss": stats.spread([r["final"]["loss"] for r in per_seed]),
        "train_time_s": stats.spread([r["train_time_s"] for r in per_seed]),
    }
    for name in per_seed[0]["heads"]:
        if isinstance(per_seed[0]["heads"][name], dict):
            s[name] = {
                key: stats.spread([r["heads"][name][key] for r in per_seed])
                for key in ("final", "formed", "rise10", "rise50")
            }
            s[name]["heads"] = [r["heads"][name]["head"] for r in per_seed]
    return s


def claims(res: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The paper's claims, measured."""
    out: dict[str, Any] = {}
    for cond in ("k3", "k2", "paper_k2"):
        seeds = res[cond]["seeds"]
        out[f"phases_{cond}"] = {
            "seeds_with_uniform_unigram_bigram": sum(
                _ordered(r["stages"], ["uniform", "unigram", "bigram"]) for r in seeds
            ),
            "of": len(seeds),
        }
        out[f"heads_vs_transition_{cond}"] = [
            {
                "seed": r["seed"],
                "transition": r["transition_step"],
                "induction_L1": {k: r["heads"]["induction"][k] for k in ("head", "rise10", "rise50", "formed")},
                "previous_token_L0": {
                    k: r["heads"]["previous_token"][k] for k in ("head", "rise10", "rise50", "formed")
                },
            }
            for r in seeds
        ]
    out["doubly_stochastic"] = {
        setup: prior_effect(res[a]["seeds"], res[b]["seeds"]) for setup, (a, b) in PRIOR_PAIRS.items()
    }
    out["trigram"] = [
        {
            "seed": r["seed"],
            "stages": r["stages"],
            "transition": r["transition_step"],
            "back1": {k: r["heads"]["back1"][k] for k in ("head", "final", "rise50")},
            "back2": {k: r["heads"]["back2"][k] for k in ("head", "final", "rise50")},
            "two_distinct_heads": r["heads"]["back1"]["head"] != r["heads"]["back2"]["head"]
            and r["heads"]["back1"]["final"] >= 0.4
            and r["heads"]["back2"]["final"] >= 0.4,
        }
        for r in res["trigram"]["seeds"]
    ]
    return out


def prior_effect(dirichlet: list[dict[str, Any]], ds: list[dict[str, Any]]) -> dict[str, Any]:
    """Does the doubly-stochastic prior switch to the bigram solution sooner? Per definition of the switch,
    the same seeds paired: both steps, the ratio Dirichlet / doubly stochastic where both switched, and
    how many runs never did (a run that never switches is later than any that did)."""
    by_seed = {r["seed"]: r for r in ds}
    pairs = [(r, by_seed[r["seed"]]) for r in dirichlet if r["seed"] in by_seed]
    out: dict[str, Any] = {}
    # converged on the Dirichlet condition's chains (CONVERGED): the judged reading of "converges faster"
    curves = [(a["common_test"]["kl_bayes"], b["common_test"]["kl_bayes"]) for a, b in pairs]
    out["converged"] = {
        "test_on": dirichlet[0]["common_test"]["on"] if dirichlet else None,
        "paired_steps": [
            (converged(a["steps"], ca), converged(b["steps"], cb)) for (a, b), (ca, cb) in zip(pairs, curves)
        ],
        "final_kl_bayes_dirichlet": [ca[-1] for ca, _ in curves],
        "final_kl_bayes_doubly_stochastic": [cb[-1] for _, cb in curves],
    }
    for d in TRANSITIONS:
        steps = [(a["transitions"][d], b["transitions"][d]) for a, b in pairs]
        out[d] = {
            "paired_steps": steps,
            "ratio": stats.spread([a / b for a, b in steps if a and b]),
            "doubly_stochastic_sooner": sum(1 for a, b in steps if b is not None and (a is None or b < a)),
            "dirichlet_sooner": sum(1 for a, b in steps if a is not None and (b is None or a < b)),
            "never_dirichlet": sum(a is None for a, _ in steps),
            "never_doubly_stochastic": sum(b is None for _, b in steps),
            "of": len(steps),
        }
    for name, runs in (("dirichlet", dirichlet), ("doubly_stochastic", ds)):
        out[f"final_kl_bigram_{name}"] = stats.spread([r["final"]["kl_bigram"] for r in runs])
        out[f"unigram_plateau_checkpoints_{name}"] = [(r["unigram_plateau"] or {}).get("checkpoints", 0) for r in runs]
        out[f"min_kl_unigram_{name}"] = [(r["unigram_plateau"] or {}).get("min_kl") for r in runs]
        out[f"uniform_stage_ends_{name}"] = [r["segments"][0]["to"] for r in runs]
    return out


def converged(steps: list[int], kl: list[float]) -> Optional[int]:
    """The first checkpoint from which the curve stays within CONVERGED of the way from its start to its end."""
    return stats.stays_below(steps, kl, kl[-1] + CONVERGED * (kl[0] - kl[-1]))


def _ordered(stages: list[str], want: list[str]) -> bool:
    """`want` appears in order (not necessarily adjacent) in `stages`, and the last stage is want[-1]."""
    it = iter(stages)
    return all(w in it for w in want) and stages[-1] == want[-1]


# ---- figures ------------------------------------------------------------------------------------

COLOURS = {"uniform": "tab:gray", "unigram": "tab:orange", "bigram": "tab:blue", "trigram": "tab:purple"}


def _logx(steps: list[int], *series: list[float]) -> list[list]:
    """Drop step 0, which a log axis cannot show."""
    keep = [i for i, s in enumerate(steps) if s > 0]
    return [[steps[i] for i in keep]] + [[s[i] for i in keep] for s in series]


def plot_stages(res: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    conds = [c for c in ("k3", "k2", "paper_k2") if res[c]["seeds"]]
    fig, axes = plt.subplots(3, len(conds), figsize=(6 * len(conds), 8), sharex="col", squeeze=False)
    for col, cond in enumerate(conds):
        r = res[cond]["seeds"][0]
        ax = axes[0, col]
        ax.plot(*_logx(r["steps"], r["loss"]), color="black")
        setup = "paper's setup" if cond.startswith("paper") else "ours"
        ax.set_title(f"k = {res[cond]['task']['k']}, Dirichlet prior, {setup} (seed {r['seed']})")
        ax.set_ylabel("held-out loss (nats)")
        ax = axes[1, col]
        for name, kl in r["kl"].items():
            ax.plot(*_logx(r["steps"], kl), label=name, color=COLOURS[name])
        ax.set_yscale("log")
        ax.set_ylabel("KL(strategy ‖ model)")
        ax.legend(title="in-context strategy", fontsize=8)
        ax = axes[2, col]
        p, i = r["heads"]["previous_token"], r["heads"]["induction"]
        ax.plot(
            *_logx(r["steps"], r["series"]["previous_token"][p["head"]]),
            color="tab:green",
            label=f"previous-token score, {p['head']}",
        )
        ax.plot(
            *_logx(r["steps"], r["series"]["induction"][i["head"]]),
            color="tab:red",
            label=f"induction score, {i['head']}",
        )
        ax.set_ylabel("head score")
        ax.set_xlabel("training step")
        ax.legend(fontsize=8)
        for row in range(3):
            axes[row, col].set_xscale("log")
            if r["transition_step"]:
                axes[row, col].axvline(r["transition_step"], color="tab:blue", linestyle=":", linewidth=1)
    fig.suptitle("Statistical induction heads: uniform → unigram → bigram (dotted: bigram transition)")
    return harness.save_figure(fig, path)


def plot_priors(res: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.4), sharey=True)
    for row, (setup, pair) in enumerate(PRIOR_PAIRS.items()):
        for ax, cond, title in zip(axes[row], pair, ("Dirichlet prior", "doubly-stochastic prior")):
            for j, r in enumerate(res[cond]["seeds"]):
                for name in ("uniform", "unigram", "bigram"):
                    ax.plot(
                        *_logx(r["steps"], r["kl"][name]),
                        color=COLOURS[name],
                        alpha=1.0 if j == 0 else 0.35,
                        label=name if j == 0 else None,
                    )
                if r["transition_step"]:
                    ax.axvline(r["transition_step"], color="tab:blue", linestyle=":", linewidth=1)
            for level in (0.1, 0.05):
                ax.axhline(level, color="black", linestyle="--", linewidth=0.6)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"k = {res[cond]['task']['k']}, {title}, {setup} ({len(res[cond]['seeds'])} seeds)")
        axes[row, 0].set_ylabel("KL(strategy ‖ model)")
    for ax in axes[1]:
        ax.set_xlabel("training step")
    axes[0, 0].legend(title="in-context strategy", fontsize=8)
    fig.suptitle(
        "Dirichlet against doubly-stochastic prior (dotted: nearest strategy becomes bigram; dashed: KL 0.1 and 0.05)"
    )
    return harness.save_figure(fig, path)


def plot_trigram(res: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    r = res["trigram"]["seeds"][0]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True)
    for name, kl in r["kl"].items():
        a1.plot(*_logx(r["steps"], kl), label=name, color=COLOURS[name])
    a1.set_yscale("log")
    a1.set_ylabel("KL(strategy ‖ model)")
    a1.legend(title="in-context strategy", fontsize=8)
    b1, b2 = r["heads"]["back1"]["head"], r["heads"]["back2"]["head"]
    for h in sorted(r["series"]["previous_token"]):
        if h.startswith("L0"):
            a2.plot(
                *_logx(r["steps"], r["series"]["previous_token"][h]),
                color="tab:green",
                linestyle="-" if h == b1 else "--",
                label=f"{h}: attention 1 back",
            )
            a2.plot(
                *_logx(r["steps"], r["series"]["offset2"][h]),
                color="tab:brown",
                linestyle="-" if h == b2 else "--",
                label=f"{h}: attention 2 back",
            )
    a2.set_ylabel("layer-0 head score")
    a2.set_xlabel("training step")
    a2.set_xscale("log")
    a2.legend(fontsize=8)
    for ax in (a1, a2):
        if r["transition_step"]:
            ax.axvline(r["transition_step"], color="tab:purple", linestyle=":", linewidth=1)
    fig.suptitle(f"In-context trigrams, k = {res['trigram']['task']['k']}, 2 heads per layer (seed {r['seed']})")
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    size = SIZES[args.size]
    runs = session.sweep()
    res: dict[str, Any] = {}
    tests: dict[str, Any] = {}  # the Dirichlet conditions' tasks: both arms of a prior pair are read on their chains
    common_on = {b: a for a, b in PRIOR_PAIRS.values()}
    for cond in CONDITIONS:
        jobs = runs.jobs(condition=cond)
        res[cond] = {"task": jobs[0].config["task"], "seeds": []}
        for job in jobs:
            run = runs.load(job)
            # side by side, a seed's training time is its batch's: all the condition's seeds together
            r = {
                "seed": job.seed,
                "train_time_s": round(harness.train_seconds(run), 1),
                "run": str(args.runs / job.dir),
                **analyse(run, size),
            }
            if cond in common_on.values():
                tests.setdefault(cond, run.task)
                r["common_test"] = {"on": cond, "kl_bayes": r["kl_bayes"]}
            elif cond in common_on:
                r["common_test"] = {
                    "on": common_on[cond],
                    "kl_bayes": strategy_kls(run, size["kl_batch"], task=tests[common_on[cond]])[1]["bayes"],
                }
            res[cond]["seeds"].append(r)
            switch = f"at step {r['transition_step']}" if r["transition_step"] is not None else "not reached"
            print(f"{cond} seed {job.seed}: stages {' -> '.join(r['stages'])}, transition {switch}", file=sys.stderr)
        res[cond]["summary"] = summarise(cond, res[cond]["seeds"])
    figures = [
        plot_stages(res, args.out / f"{NAME}_stages.png"),
        plot_priors(res, args.out / f"{NAME}_priors.png"),
        plot_trigram(res, args.out / f"{NAME}_trigram.png"),
    ]
    config = {
        "sizes": size,
        "sweep": session.sweep_file().name,
        "seeds": list(runs.plan.seeds),
        "runs": {c: runs.jobs(condition=c)[0].config for c in CONDITIONS},
    }
    session.finish(config, {"claims": claims(res), "conditions": res}, figures)
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
