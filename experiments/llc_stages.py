"""LLC stages beside statistical-induction stages: does the local learning coefficient, read with no
circuit in mind (Hoogland et al. 2024), find the stages the in-context strategies and the heads show?

The runs are statistical_induction's k = 3 condition (Edelman et al. 2024; experiments/statistical_induction.py:
a 2-layer attention-only transformer on in-context Markov chains, Dirichlet prior), trained here with their
own seeds. On each, at log-spaced checkpoints, the `llc` probe (devinterp's SGLD on the training loss); at
every checkpoint the strategy KLs, the nearest strategy (uniform → unigram → bigram) and the layer-0
previous-token and layer-1 induction heads. Each behavioural event is matched with the nearest LLC stage
boundary, under two readings of the LLC (change points of a piecewise-linear fit in log-step; the LLC's
turns, Hoogland et al.'s reading), several definitions of the bigram transition (statistical_induction's
TRANSITIONS), and two tolerances (within 1.5× and 2× in step).

    python -m experiments.llc_stages            # 3 seeds (300–302), LLC at 20 checkpoints (~15 min on 2 cores)
    python -m experiments.llc_stages --full     # 5 seeds (300–304), longer chains, 32 checkpoints
    python -m experiments.llc_stages --smoke    # seconds; checks the pipeline only

The negative control: the same readings of each seed's LLC with its estimates in a shuffled order (over the same
valid checkpoints, seeded by the run's seed), which keeps the LLC's values and breaks their tie to training time.

Runs already in --runs are reused, and so is each run's probes.json when it holds the same LLC options.
Writes OUT/llc_stages.json and OUT/llc_stages.png."""

from __future__ import annotations

import inspect
import math
import sys
import warnings
from pathlib import Path
from typing import Any, Optional

from experiments import harness
from experiments import statistical_induction as si
from mechsynth.analysis import stages, timeline
from mechsynth.runs.run import Run
from mechsynth.sweep.plan import read_with_base

NAME = "llc_stages"
SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(
        toml="statistical_induction_smoke.toml",
        seeds=3,
        kl_batch=32,
        probe_batch=8,
        llc=dict(checkpoints=6, draws=20, chains=2, pool=64, batch=8),
    ),
    "cpu": dict(
        toml="statistical_induction.toml", seeds=[300, 301, 302], kl_batch=256, probe_batch=64, llc=dict(checkpoints=20)
    ),
    "full": dict(
        toml="statistical_induction_full.toml",
        seeds=[300, 301, 302, 303, 304],
        kl_batch=512,
        probe_batch=64,
        llc=dict(checkpoints=32, draws=400),
    ),
}
TOLERANCES = (1.5, 2.0)  # an LLC boundary "at" an event: within this factor of its step
# The seeds (smoke: a count, 0..S-1): fresh ones (from 300) for the runs experiments/rules/llc_stages.py judges,
# rewritten for issue 46 after the earlier runs (seeds 0–2, 100–102) were seen. Seeds that are not 0..S-1 train one run each, not
# side by side.


def config_of(toml: str) -> dict[str, Any]:
    """The k = 3 condition of the statistical_induction sweep file (its base tables: task, model, train)."""
    data = read_with_base(harness.EXPERIMENTS / toml)  # the smoke and full files are overrides of the CPU one
    return {k: dict(data[k]) for k in ("task", "model", "train")} | {"task": {**data["task"], "k": 3}}


def llc_timeline(run: Run, size: dict[str, Any]) -> timeline.Timeline:
    """The run's LLC at log-spaced checkpoints (probes.json when it holds the same options, else estimated now)."""
    try:
        tl = timeline.load(run.path)
        if (
            "llc" in tl.metrics
            and tl.options.get("llc") == {**tl.options["llc"], **size["llc"]}
            and tl.steps == run.steps
        ):
            return tl
    except (FileNotFoundError, ValueError):
        pass
    tl = timeline.probe_run(run, ["llc"], options={"llc": size["llc"]})
    timeline.save(tl, run.path)
    return tl


def ratio(a: Optional[int], b: Optional[int]) -> Optional[float]:
    """How far apart two steps are, as a factor (steps are log-spaced); None when either is missing."""
    if a is None or b is None:
        return None
    return max(a, b, 1) / max(min(a, b), 1)


def nearest(event: Optional[int], boundaries: list[int]) -> Optional[dict[str, Any]]:
    if event is None or not boundaries:
        return None
    b = min(boundaries, key=lambda s: abs(math.log1p(s) - math.log1p(event)))
    return {"event": event, "boundary": b, "factor": ratio(event, b)}


def analyse(run: Run, size: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    behaviour = si.analyse(run, size)
    tl = llc_timeline(run, size)
    steps, llc = tl.steps, tl.metrics["llc"]["llc"]
    valid = stages.series(tl)[
        "llc"
    ]  # negative estimates (not at a minimum: the first steps) left out, as in a run's stages
    readings = {"change_points": stages.change_points(steps, valid), "turns": stages.turns(steps, valid)}
    shuffled = shuffle_valid(valid, seed)
    control = {"change_points": stages.change_points(steps, shuffled), "turns": stages.turns(steps, shuffled)}
    kept = [s for s, v in zip(steps, valid) if v is not None and math.isfinite(v)]
    margin = inspect.signature(stages.change_points).parameters["min_size"].default
    # where each reading could have put a boundary: the null of experiments/rules/llc_stages.py places them there
    candidates = {"change_points": kept[margin : len(kept) - margin + 1], "turns": kept[1:-1]}
    unigram_from = next((s["from"] for s in behaviour["segments"] if s["strategy"] == "unigram"), None)
    events = {
        "unigram_starts": unigram_from,
        **{f"bigram_{d}": behaviour["transitions"][d] for d in si.TRANSITIONS},
        "induction_rise50": behaviour["heads"]["induction"]["rise50"],
        "previous_token_rise50": behaviour["heads"]["previous_token"]["rise50"],
        "loss_drop": behaviour["loss_drop_step"],
    }
    measured = [(s, v) for s, v in zip(steps, llc) if math.isfinite(v)]
    diagnostics = {
        k: [s for s, v in zip(steps, tl.metrics["llc"][k]) if v == v and v > 0]
        for k in ("diverged", "rising", "negative")
    }
    return {
        "steps": steps,
        "loss": behaviour["loss"],
        "kl": behaviour["kl"],
        "stages": behaviour["stages"],
        "segments": behaviour["segments"],
        "heads": behaviour["heads"],
        "series": behaviour["series"],
        "llc": {
            "steps": [s for s, _ in measured],
            "mean": [v for _, v in measured],
            "std": [tl.metrics["llc"]["llc_std"][steps.index(s)] for s, _ in measured],
        },
        "llc_boundaries": readings,
        "boundary_candidates": candidates,
        "control": {"note": "the LLC estimates in a shuffled order", "llc_boundaries": control},
        "events": events,
        "diagnostics": diagnostics,
        "matches": {name: {e: nearest(t, b) for e, t in events.items()} for name, b in readings.items()},
        "llc_in_stage": llc_by_stage(behaviour["segments"], measured),
    }


def shuffle_valid(values: list[Optional[float]], seed: int) -> list[Optional[float]]:
    """The valid (finite) values in a random order over the same checkpoints; the others stay where they are."""
    import random

    at = [i for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    order = [values[i] for i in at]
    random.Random(seed).shuffle(order)
    out = list(values)
    for i, v in zip(at, order):
        out[i] = v
    return out


def llc_by_stage(segments: list[dict[str, Any]], measured: list[tuple[int, float]]) -> list[dict[str, Any]]:
    """The LLC at the first and last measured checkpoint of each nearest-strategy stage: does it rise?"""
    out = []
    for seg in segments:
        inside = [(s, v) for s, v in measured if seg["from"] <= s <= seg["to"]]
        if inside:
            out.append(
                {
                    "strategy": seg["strategy"],
                    "from": seg["from"],
                    "to": seg["to"],
                    "llc_first": inside[0][1],
                    "llc_last": inside[-1][1],
                    "points": len(inside),
                }
            )
    return out


def summary(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per reading of the LLC, event and tolerance: in how many seeds an LLC boundary lies within it (no
    verdict: experiments/rules/llc_stages.py gives it, against chance)."""
    out: dict[str, Any] = {}
    for reading in ("change_points", "turns"):
        table = {}
        for event in seeds[0]["events"]:
            found = [r["matches"][reading][event] for r in seeds]
            table[event] = {f"within_{t}x": sum(1 for f in found if f and f["factor"] <= t) for t in TOLERANCES}
            table[event] |= {"of": len(seeds), "factors": [f and round(f["factor"], 2) for f in found]}
        out[reading] = table
    out["llc_rises_in_stage"] = {
        s: sum(
            1
            for r in seeds
            for st in r["llc_in_stage"]
            if st["strategy"] == s and st["points"] > 1 and st["llc_last"] > st["llc_first"]
        )
        for s in ("uniform", "unigram", "bigram")
    }
    out["negative_estimates"] = sum(len(r["diagnostics"]["negative"]) for r in seeds)
    return out


def plot(seeds: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, len(seeds), figsize=(5 * len(seeds), 10), sharex="col", squeeze=False)
    for col, r in enumerate(seeds):
        x = [max(s, 1) for s in r["steps"]]
        ax = axes[0, col]
        ax.plot(x, r["loss"], color="black")
        ax.set_title(f"seed {r['seed']}: {' → '.join(r['stages'])}", fontsize=9)
        ax = axes[1, col]
        for name, kl in r["kl"].items():
            ax.plot(x, kl, label=name, color=si.COLOURS[name])
        ax.set_yscale("log")
        ax.legend(fontsize=7)
        ax = axes[2, col]
        for name, colour in (("previous_token", "tab:green"), ("induction", "tab:red")):
            ax.plot(
                x, r["series"][name][r["heads"][name]["head"]], color=colour, label=f"{name} {r['heads'][name]['head']}"
            )
        ax.legend(fontsize=7)
        ax = axes[3, col]
        lx = [max(s, 1) for s in r["llc"]["steps"]]
        ax.errorbar(lx, r["llc"]["mean"], yerr=r["llc"]["std"], fmt="o-", color="tab:purple", markersize=3, capsize=2)
        ax.set_xlabel("training step")
        for row in range(4):
            a = axes[row, col]
            a.set_xscale("log")
            for s in r["llc_boundaries"]["change_points"]:
                a.axvline(max(s, 1), color="tab:purple", linewidth=1, alpha=0.7)
            for s in r["llc_boundaries"]["turns"]:
                a.axvline(max(s, 1), color="tab:purple", linewidth=1, linestyle="-.")
            for seg in r["segments"][1:]:
                a.axvline(max(seg["from"], 1), color=si.COLOURS[seg["strategy"]], linestyle=":", linewidth=1.5)
    for row, label in enumerate(("held-out loss", "KL(strategy ‖ model)", "head score", "LLC (± chains' sd)")):
        axes[row, 0].set_ylabel(label)
    fig.suptitle(
        "LLC stage boundaries (purple: change points solid, turns dash-dotted) vs the nearest strategy's "
        "changes (dotted, the new strategy's colour)",
        fontsize=10,
    )
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    warnings.filterwarnings("ignore", message="llc: ")  # each estimate's diagnostics are in the JSON
    size = SIZES[args.size]
    cfg = config_of(size["toml"])
    runs = session.train_runs([({"condition": "k3"}, seed, cfg) for seed in harness.seeds(size["seeds"])])
    seeds = []
    for job in runs.plan.jobs:
        r = {"seed": job.seed, "run": str(args.runs / job.dir), **analyse(runs.load(job), size, job.seed)}
        seeds.append(r)
        print(
            f"seed {job.seed}: stages {' -> '.join(r['stages'])}; LLC boundaries {r['llc_boundaries']}; "
            f"events {r['events']}",
            file=sys.stderr,
        )
    figures = [plot(seeds, args.out / f"{NAME}.png")]
    session.finish(
        {"size": size, "run": cfg, "tolerances": TOLERANCES, "transitions": si.TRANSITIONS},
        {"summary": summary(seeds), "seeds": seeds},
        figures,
    )
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
