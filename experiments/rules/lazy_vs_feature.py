"""The claims of experiments/lazy_vs_feature.py (lazy training against feature learning: Chizat, Oyallon & Bach
2019, "On lazy training in differentiable programming"; the NTK regime that Bai & Lee 2020 (QuadNTK) and Nichani,
Damian & Lee 2022 start from, as seed 004 states it: "the network is coupled with its first order Taylor expansion
at initialization ... [the NTK] cannot learn features") and the rules that judge them.

Four claims on in-context Markov chains: (a) the real network learns a feature — an induction head — and beats the
in-context unigram strategy; (b) its linearization at initialization (the NTK model) forms no induction head and stays
worse; (c) in the lazy regime (the centred network scaled by a large α) the weights barely move, relative to the real
network's; (d) the lazy network tracks its linearization (Chizat et al.'s theorem: the trajectories meet as α grows).
Two on sparse parity (n = 15, k = 3): (e) the real one-layer transformer learns it and attends from the readout to
the support S; (f) its linearization forms no such head and does not learn it in the same budget. (e) and (f) were
added before any of their runs (and before any CPU-size run of the others).

The rules were written with the script, before any of its runs at the CPU or full size. The papers are theory:
they fix no budget. Ours is measured against the CPU size (1200 steps × 32 sequences), the setup of
experiments/statistical_induction.py's k3 condition, whose real network formed its induction head by step ~200 in
every seed; a run with under a tenth of that cannot say "does not" (verdicts.BUDGET_FLOOR).

Rewritten for issue 46 after the runs of seeds 0-4 had been seen (the next run uses 300-304):
  - lazy_weights_barely_move could not fail: the lazy and linearized models train with Adam at lr/α, and Adam's
    step size alone bounds their movement (0.0037 against 0.616). The claim is that the weights barely move *while
    the function learns*: the rule now also asks that the lazy (and linearized) model's loss fall at least
    LEARNED of the way from its initial loss to the in-context unigram strategy's; its control is the real network
    stopped at the last checkpoint where its weights had moved no more than the lazy one's (no α: it learns
    nothing there).
  - linearized_no_circuit and parity_linearized_no_circuit: the circuit half was probed in the network at θ, which
    moves ~0.4 % for the linearized model, so it could not fail; it is now reported, not judged. The rules judge
    behaviour: on Markov chains the linearized loss above the real network's and not below the in-context unigram
    strategy's (beating it needs the induction feature); on parity its accuracy never reaching SOLVED_ACC. Their
    controls: another seed's real network in the linearized model's place.
  - feature_learning and parity_feature_learning: control the step-0 checkpoint; lazy_tracks_linearization also
    asks that the lazy model learned (as above), control: the real and lazy networks swapped.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from experiments import verdicts

ODDS = 3.0  # a head "formed": odds on its targets ≥ 3× a uniform head's (the probes' over_chance)
MOVE_RATIO = 0.2  # lazy: relative weight movement at most this fraction of the real network's, same seed
LEARNED = 0.5  # a model learned: its loss fell at least this share of the way to the in-context unigram strategy's
KL_RATIO = 0.25  # tracks: KL(linearized ‖ lazy) at most this fraction of KL(linearized ‖ real), same seed
BUDGET_NOTE = (
    "steps × batch of the real network's runs over the CPU size's (1200 × 32: statistical_induction's k3 "
    "setup, whose induction head forms by step ~200); the papers fix none"
)


def budget(results: Mapping[str, Any]) -> Optional[float]:
    return results["budget"]


# ---- per-seed readings ------------------------------------------------------------------------------


def _seeds(results: Mapping[str, Any], cond: str) -> dict[int, Mapping[str, Any]]:
    return {r["seed"]: r for r in results["conditions"][cond]["seeds"]}


def _above_chance(chance: float, odds: float = ODDS) -> float:
    """The score of a head whose odds on the targets are `odds` times a uniform head's (which scores `chance`)."""
    return odds * chance / (1 - chance + odds * chance) if chance < 1 else 1.0


def _settles(steps: Sequence[int], scores: Sequence[float], level: float) -> Optional[int]:
    """The first step after which the score stays ≥ level (mechsynth's formation_step)."""
    formed = None
    for step, score in zip(steps, scores):
        formed = (step if formed is None else formed) if score >= level else None
    return formed


def _formed(r: Mapping[str, Any], probe: str = "induction") -> Optional[int]:
    """When the run's best head for `probe` (L1 induction, L0 previous-token) reached and held odds ≥ 3× chance."""
    h = r["heads"][probe]
    return _settles(r["steps"], r["series"][probe], _above_chance(h["chance"]))


def _peak(r: Mapping[str, Any], probe: str = "induction") -> float:
    return max(r["series"][probe])


def _learned(results: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    """The real network's seeds that formed their induction head: the others leave nothing to compare with."""
    return {s: r for s, r in _seeds(results, "real").items() if _formed(r) is not None}


def _lazy(results: Mapping[str, Any]) -> str:
    """The lazy condition of the largest α."""
    return max(
        (c for c in results["conditions"] if c.startswith("lazy")), key=lambda c: results["conditions"][c]["scale"]
    )


def learned_share(r: Mapping[str, Any]) -> float:
    """How far the run's loss fell from its start towards the in-context unigram strategy's (1: reached it)."""
    start, uni = r["loss"][0], r["strategies"]["unigram"]
    return (start - r["final"]["loss"]) / (start - uni) if start > uni else 0.0


def _count(good: int, n: int) -> str:
    return "matches" if n and good == n else "partly" if n and 2 * good >= n else "does not"


# ---- (a) the real network learns a feature ----------------------------------------------------------


def judge_feature(results: Mapping[str, Any]) -> verdicts.Judgement:
    seeds = list(_seeds(results, "real").values())
    formed = [_formed(r) for r in seeds]
    beats = [r["final"]["loss"] < r["strategies"]["unigram"] for r in seeds]
    good = sum(f is not None and b for f, b in zip(formed, beats))
    why = (
        f"{good}/{len(seeds)} seeds: L1 induction head formed at {verdicts.span(formed)} (score "
        f"{verdicts.span([r['heads']['induction']['final'] for r in seeds])}, chance "
        f"{verdicts.span([r['heads']['induction']['chance'] for r in seeds])}); final loss "
        f"{verdicts.span([r['final']['loss'] for r in seeds])} against the unigram strategy's "
        f"{verdicts.span([r['strategies']['unigram'] for r in seeds])} (below it in {sum(beats)}/{len(seeds)}; "
        f"bigram's {verdicts.span([r['strategies']['bigram'] for r in seeds])})"
    )
    return verdicts.Judgement(_count(good, len(seeds)), why, len(seeds))


# ---- (b) the linearized model does not ----------------------------------------------------------------


def judge_linearized(results: Mapping[str, Any]) -> verdicts.Judgement:
    learned, lin = _learned(results), _seeds(results, "linearized")
    paired = [s for s in learned if s in lin]
    if not paired:
        return verdicts.Judgement(
            "inconclusive",
            f"the real network formed no induction head in any of its "
            f"{len(_seeds(results, 'real'))} seeds: nothing to compare with",
            0,
        )
    none = [_formed(lin[s]) is None for s in paired]  # reported only: probed at θ, which barely moves
    worse = [lin[s]["final"]["loss"] > learned[s]["final"]["loss"] for s in paired]
    no_feature = [lin[s]["final"]["loss"] >= lin[s]["strategies"]["unigram"] for s in paired]
    good = sum(a and b for a, b in zip(worse, no_feature))
    why = (
        f"{good}/{len(paired)} seeds whose real network formed its head: final loss "
        f"{verdicts.span([lin[s]['final']['loss'] for s in paired])} against the real network's "
        f"{verdicts.span([learned[s]['final']['loss'] for s in paired])} (above it in {sum(worse)}/{len(paired)}) "
        f"and the unigram strategy's {verdicts.span([lin[s]['strategies']['unigram'] for s in paired])} (not below "
        f"it in {sum(no_feature)}/{len(paired)}); not judged: an induction head in the weights θ formed in "
        f"{len(paired) - sum(none)} (peak score {verdicts.span([_peak(lin[s]) for s in paired])})"
    )
    return verdicts.Judgement(_count(good, len(paired)), why, len(paired))


# ---- (c) lazy weights barely move -------------------------------------------------------------------------


def judge_movement(results: Mapping[str, Any]) -> verdicts.Judgement:
    real, lazy_name = _seeds(results, "real"), _lazy(results)
    lazy, lin = _seeds(results, lazy_name), _seeds(results, "linearized")
    paired = [s for s in real if s in lazy and s in lin]
    ratio = {
        name: [runs[s]["final"]["movement"] / real[s]["final"]["movement"] for s in paired]
        for name, runs in ((lazy_name, lazy), ("linearized", lin))
    }
    learnt = {name: [learned_share(runs[s]) for s in paired] for name, runs in ((lazy_name, lazy), ("linearized", lin))}
    good = sum(
        a <= MOVE_RATIO and b <= MOVE_RATIO and la >= LEARNED and lb >= LEARNED
        for a, b, la, lb in zip(ratio[lazy_name], ratio["linearized"], learnt[lazy_name], learnt["linearized"])
    )
    others = [c for c in results["conditions"] if c.startswith("lazy") and c != lazy_name]
    why = (
        f"{good}/{len(paired)} seeds: ‖θ − θ₀‖/‖θ₀‖ of the real network "
        f"{verdicts.span([real[s]['final']['movement'] for s in paired])}, {lazy_name} "
        f"{verdicts.span([lazy[s]['final']['movement'] for s in paired])} ({verdicts.span(ratio[lazy_name])}× the "
        f"real one's), linearized {verdicts.span([lin[s]['final']['movement'] for s in paired])} "
        f"({verdicts.span(ratio['linearized'])}×); their loss fell {verdicts.span(learnt[lazy_name])} and "
        f"{verdicts.span(learnt['linearized'])} of the way to the unigram strategy's (≥ {LEARNED:g} needed)"
        + "".join(
            f"; {c} {verdicts.span([r['final']['movement'] for r in _seeds(results, c).values()])}" for c in others
        )
    )
    return verdicts.Judgement(_count(good, len(paired)), why, len(paired))


# ---- (d) the lazy network tracks its linearization -------------------------------------------------------


def judge_tracking(results: Mapping[str, Any]) -> verdicts.Judgement:
    lazy_name = _lazy(results)
    rows = [
        r for r in results["agreement"] if lazy_name in r["kl_from_linearized"] and "real" in r["kl_from_linearized"]
    ]
    lazy = [r["kl_from_linearized"][lazy_name] for r in rows]
    real = [r["kl_from_linearized"]["real"] for r in rows]
    runs = _seeds(results, lazy_name)
    learnt = [learned_share(runs[r["seed"]]) for r in rows]
    good = sum(a <= KL_RATIO * b and la >= LEARNED for a, b, la in zip(lazy, real, learnt))
    why = (
        f"{good}/{len(rows)} seeds: KL(linearized ‖ {lazy_name}) {verdicts.span(lazy)} nats against "
        f"KL(linearized ‖ real) {verdicts.span(real)} (ratio {verdicts.span([a / b for a, b in zip(lazy, real) if b > 0])}); "
        f"{lazy_name}'s loss fell {verdicts.span(learnt)} of the way to the unigram strategy's (≥ {LEARNED:g} needed)"
    )
    return verdicts.Judgement(_count(good, len(rows)), why, len(rows))


# ---- (e), (f) sparse parity -------------------------------------------------------------------------------

SOLVED_ACC = 0.99  # parity learned: held-out accuracy ≥ 0.99 at an evaluation (parity_search's convergence)
PARITY_BUDGET_NOTE = (
    "steps × batch of the real network's sparse-parity runs over the CPU size's (4000 × 32: parity_search's cap)"
)


def parity_budget(results: Mapping[str, Any]) -> Optional[float]:
    return results["parity"]["budget"]


def _parity(results: Mapping[str, Any], cond: str) -> dict[int, Mapping[str, Any]]:
    return {r["seed"]: r for r in results["parity"]["conditions"][cond]["seeds"]}


def _selects(r: Mapping[str, Any]) -> Optional[int]:
    """When the best head's attention onto S from the readout reached and held odds ≥ 3× a uniform head's."""
    return _settles(r["steps"], r["series"], _above_chance(r["head"]["chance"]))


def _solved(r: Mapping[str, Any]) -> bool:
    return max(r["acc"]) >= SOLVED_ACC


def judge_parity_feature(results: Mapping[str, Any]) -> verdicts.Judgement:
    seeds = list(_parity(results, "real").values())
    good = [_solved(r) and _selects(r) is not None and r["support_recovered"][-1] == 1 for r in seeds]
    why = (
        f"{sum(good)}/{len(seeds)} seeds: held-out accuracy ≥ {SOLVED_ACC:g} in "
        f"{sum(_solved(r) for r in seeds)} (first at steps {verdicts.span([r['solved'] for r in seeds])}; final "
        f"{verdicts.span([r['final']['acc'] for r in seeds])}, chance 0.5); attention onto S formed at "
        f"{verdicts.span([_selects(r) for r in seeds])} (score {verdicts.span([r['head']['final'] for r in seeds])}, "
        f"a uniform head's {verdicts.span([r['head']['chance'] for r in seeds])}); S the top-k positions at the end "
        f"in {sum(r['support_recovered'][-1] == 1 for r in seeds)}"
    )
    return verdicts.Judgement(_count(sum(good), len(seeds)), why, len(seeds))


def judge_parity_linearized(results: Mapping[str, Any]) -> verdicts.Judgement:
    real, lin = _parity(results, "real"), _parity(results, "linearized")
    paired = [s for s, r in real.items() if _solved(r) and s in lin]
    if not paired:
        return verdicts.Judgement(
            "inconclusive",
            f"the real network learned parity in none of its {len(real)} seeds: nothing to compare with",
            0,
        )
    none = [_selects(lin[s]) is None for s in paired]  # reported only: probed at θ, which barely moves
    unsolved = [not _solved(lin[s]) for s in paired]
    good = sum(unsolved)
    why = (
        f"{good}/{len(paired)} seeds whose real network learned parity: the linearized model's best held-out "
        f"accuracy {verdicts.span([max(lin[s]['acc']) for s in paired])} (≥ {SOLVED_ACC:g} in "
        f"{len(paired) - sum(unsolved)}) against the real network's {verdicts.span([real[s]['final']['acc'] for s in paired])}; "
        f"not judged: attention onto S in the weights θ formed in {len(paired) - sum(none)} (peak "
        f"{verdicts.span([max(lin[s]['series']) for s in paired])})"
    )
    return verdicts.Judgement(_count(good, len(paired)), why, len(paired))


# ---- negative controls ----------------------------------------------------------------------------------


def _with(
    results: Mapping[str, Any], cond: str, rows: Sequence[Mapping[str, Any]], parity: bool = False
) -> dict[str, Any]:
    if parity:
        p = results["parity"]
        return {
            **results,
            "parity": {**p, "conditions": {**p["conditions"], cond: {**p["conditions"][cond], "seeds": list(rows)}}},
        }
    return {
        **results,
        "conditions": {**results["conditions"], cond: {**results["conditions"][cond], "seeds": list(rows)}},
    }


def step0(results: Mapping[str, Any]) -> dict[str, Any]:
    """The real network's step-0 checkpoint."""
    rows = [
        {
            **r,
            "steps": r["steps"][:1],
            "series": {k: v[:1] for k, v in r["series"].items()},
            "final": {**r["final"], "loss": r["loss"][0]},
        }
        for r in _seeds(results, "real").values()
    ]
    return _with(results, "real", rows)


def parity_step0(results: Mapping[str, Any]) -> dict[str, Any]:
    """The real network's step-0 checkpoint (its first evaluation)."""
    rows = [
        {
            **r,
            "steps": r["steps"][:1],
            "series": r["series"][:1],
            "acc": r["acc"][:1],
            "support_recovered": r["support_recovered"][:1],
            "final": {**r["final"], "acc": r["acc"][0]},
        }
        for r in _parity(results, "real").values()
    ]
    return _with(results, "real", rows, parity=True)


def _rotated(rows: dict[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each seed's row replaced by the next seed's (its own seed number kept)."""
    seeds = sorted(rows)
    return [{**rows[seeds[(i + 1) % len(seeds)]], "seed": s} for i, s in enumerate(seeds)]


def real_as_linearized(results: Mapping[str, Any]) -> dict[str, Any]:
    """Another seed's real network in the linearized model's place."""
    return _with(results, "linearized", _rotated(_seeds(results, "real")))


def parity_real_as_linearized(results: Mapping[str, Any]) -> dict[str, Any]:
    return _with(results, "linearized", _rotated(_parity(results, "real")), parity=True)


def real_stopped(results: Mapping[str, Any]) -> dict[str, Any]:
    """The real network stopped at its last checkpoint whose movement is at most the lazy (or linearized) one's."""
    real = _seeds(results, "real")

    def stopped(r: Mapping[str, Any]) -> dict[str, Any]:
        x = real[r["seed"]]
        i = max(j for j, m in enumerate(x["movement"]) if m <= r["final"]["movement"] or j == 0)
        return {
            **x,
            "loss": x["loss"][: i + 1],
            "movement": x["movement"][: i + 1],
            "final": {"loss": x["loss"][i], "movement": x["movement"][i]},
        }

    out = dict(results)
    for cond in (_lazy(results), "linearized"):
        out = _with(out, cond, [stopped(r) for r in _seeds(results, cond).values() if r["seed"] in real])
    return out


def real_lazy_swapped(results: Mapping[str, Any]) -> dict[str, Any]:
    """The real and the lazy network swapped (in the KL and in the runs)."""
    lazy = _lazy(results)
    agreement = [
        {
            **r,
            "kl_from_linearized": {
                **r["kl_from_linearized"],
                "real": r["kl_from_linearized"][lazy],
                lazy: r["kl_from_linearized"]["real"],
            },
        }
        for r in results["agreement"]
    ]
    out = _with(results, lazy, list(_seeds(results, "real").values()))
    return {**out, "agreement": agreement}


CLAIMS = [
    verdicts.Claim(
        id="feature_learning",
        claim="A network trained away from the lazy regime learns features: on in-context Markov chains a 2-layer "
        "attention-only transformer forms an induction head and beats the in-context unigram strategy.",
        paper="Chizat et al. 2019 contrast lazy training with feature learning; Edelman et al. 2024 show the "
        "induction head forming on this task (k = 3, T = 100)",
        rule=f"Per seed of the real network (the centred network at α = 1: f(θ) − f(θ₀)): its best layer-1 "
        f"induction head forms — its score reaches and holds odds ≥ {ODDS:g}× a uniform head's (the probe's "
        f"chance) — and its final held-out loss is below the in-context unigram predictor's on the same "
        f"sequences. matches: every seed; partly: at least half; does not: fewer.",
        judge=judge_feature,
        min_n=3,
        budget=budget,
        budget_note=BUDGET_NOTE,
        scale=False,
        control=step0,
        control_note="the step-0 checkpoint",
    ),
    verdicts.Claim(
        id="linearized_no_circuit",
        claim="The first-order Taylor expansion at initialization (the NTK model) cannot learn features: it forms no "
        "induction head and stays worse than the real network.",
        paper="Nichani, Damian & Lee 2022 (seed 004): in the NTK regime 'the network is coupled with its first "
        "order Taylor expansion at initialization', which 'cannot learn features'",
        rule="Per seed whose real network formed its induction head (none: inconclusive): the linearized model's final "
        "held-out loss is above the real network's of the same seed and not below the in-context unigram "
        "strategy's (which needs no induction feature). matches: every such seed; partly: at least half; does not: "
        "fewer. Reported, not judged: a head in the network at the linearized model's weights θ (which barely move).",
        judge=judge_linearized,
        min_n=3,
        budget=budget,
        budget_note=BUDGET_NOTE,
        scale=True,
        control=real_as_linearized,
        control_note="another seed's real network as the linearized model",
    ),
    verdicts.Claim(
        id="lazy_weights_barely_move",
        claim="In the lazy regime the weights barely move: the relative change ‖θ − θ₀‖/‖θ₀‖ is small (O(1/α)) "
        "where a feature-learning network's is not.",
        paper="Chizat et al. 2019: scaling the output by α (lr ∝ 1/α² under gradient descent; here Adam, lr ∝ 1/α) "
        "makes the relative change of the weights O(1/α)",
        rule=f"Per seed: the final ‖θ − θ₀‖/‖θ₀‖ over the weight matrices (W_*) of the lazy network of the largest α "
        f"and of the linearized model (same α and lr) are each at most {MOVE_RATIO:g}× the real network's of the "
        f"same seed. matches: every seed; partly: at least half; does not: fewer. Reported: the smaller α's.",
        judge=judge_movement,
        min_n=3,
        budget=budget,
        budget_note=BUDGET_NOTE,
        scale=True,
        control=real_stopped,
        control_note="the real network stopped where its weights had moved as little",
    ),
    verdicts.Claim(
        id="lazy_tracks_linearization",
        claim="As α grows the scaled network's training follows its linearization's (lazy training).",
        paper="Chizat et al. 2019: for large α (lr scaled to match) the trajectory of the scaled model stays close to that "
        "of its linearized model",
        rule=f"Per seed, on held-out sequences at the last checkpoint: KL(linearized ‖ lazy network of the largest α) "
        f"— the mean over positions of the KL between their predicted next-token distributions, both at the same "
        f"α and lr — is at most {KL_RATIO:g}× KL(linearized ‖ real network), and the lazy network's loss fell ≥ {LEARNED:g} of "
        f"the way to the unigram strategy's. matches: every seed; partly: at least "
        f"half; does not: fewer.",
        judge=judge_tracking,
        min_n=3,
        budget=budget,
        budget_note=BUDGET_NOTE,
        scale=True,
        control=real_lazy_swapped,
        control_note="the real and the lazy network swapped",
    ),
    verdicts.Claim(
        id="parity_feature_learning",
        claim="On sparse parity (n = 15, k = 3) a one-layer transformer trained away from the lazy regime learns the "
        "task by a feature: attention from the readout position onto the support S.",
        paper="Edelman et al. 2022 (seed 000): a one-layer transformer learns sparse parity online, its attention "
        "selecting the relevant bits; Barak et al. 2022: its hidden progress is feature learning",
        rule=f"Per seed of the real network (centred, α = 1): held-out accuracy reaches ≥ {SOLVED_ACC:g}; its best head's "
        f"attention onto S from the readout reaches and holds odds ≥ {ODDS:g}× a uniform head's; and S is that "
        f"head's k most-attended positions at the last checkpoint. matches: every seed; partly: at least half; "
        f"does not: fewer.",
        judge=judge_parity_feature,
        min_n=3,
        budget=parity_budget,
        budget_note=PARITY_BUDGET_NOTE,
        scale=False,
        control=parity_step0,
        control_note="the step-0 checkpoint",
    ),
    verdicts.Claim(
        id="parity_linearized_no_circuit",
        claim="The NTK model of the same transformer forms no head that selects S and does not learn sparse parity in "
        "the budget in which the real network does.",
        paper="Nichani, Damian & Lee 2022 (seed 004): the NTK 'cannot learn features'; kernels need ~n^k samples for a "
        "k-sparse parity where feature learning needs fewer",
        rule=f"Per seed whose real network reached held-out accuracy ≥ {SOLVED_ACC:g} (none: inconclusive): the "
        f"linearized model's held-out accuracy never reaches {SOLVED_ACC:g}. matches: every such seed; partly: at "
        f"least half; does not: fewer. Reported, not judged: attention onto S in the network at θ (which barely "
        f"moves).",
        judge=judge_parity_linearized,
        min_n=3,
        budget=parity_budget,
        budget_note=PARITY_BUDGET_NOTE,
        scale=True,
        control=parity_real_as_linearized,
        control_note="another seed's real network as the linearized model",
    ),
]
