"""The claims of experiments/depth_risk.py and the rules that judge them.

Nichani, Radhakrishnan & Uhler 2020, "Increasing depth leads to U-shaped test risk in over-parameterized
convolutional networks" (seed 004): unlike width, depth past a critical value worsens the test risk of networks
trained to fit their training set, so the risk against depth is U-shaped.

Rewritten for issue 46 after the runs with seeds 0, 1, 2 had been seen: the shape is now judged per seed, not on
the median of the seeds (that median made a U at width 32 from 1 U-shaped seed of 3), and the claim has a
negative control: each seed's risks with the depths permuted (a fixed permutation drawn from a seeded generator),
which keeps the noise and breaks the dependence on depth. The runs to judge use seeds from 300. The first rules
were written before the script's runs. Pilots (one seed each; their training-set loss only was read) checked that
the CPU size's steps fit the training set at its narrowest, shallowest and widest, deepest networks. The judge reads `results`: "depths", "widths", and per width
(as a string) per depth (as a string) "risk" (each seed's test risk: squared error on held-out samples over the
targets' variance) and "fit" (each seed's training-set loss over the targets' variance at the end).
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping

from experiments import verdicts

MIN_SEEDS = 3
SEED_SHARE = 2 / 3  # of a width's seeds whose own curve must have the shape for the width to have it
PERMUTE_SEED = 0  # the generator of the control's permutations
WORSE = 1.1  # a depth's median risk this many times the best one's is worse than it
FITTED = 0.01  # training loss / Var y below this: the network interpolates its training set
SHARE = 2 / 3  # of the runs that must fit their training set for the regime to be the paper's


def curve(results: Mapping[str, Any], width: str) -> list[float]:
    return [statistics.median(results[width][str(d)]["risk"]) for d in results["depths"]]


def seed_curves(results: Mapping[str, Any], width: str) -> list[list[float]]:
    """Each seed's test risk at each depth."""
    cells = [results[width][str(d)]["risk"] for d in results["depths"]]
    return [list(rs) for rs in zip(*cells)]


def shape(risks: list[float]) -> str:
    """ "U" (the best depth inside, both ends worse), "rising" (the best not the deepest, the deepest worse), or "flat
    or falling"."""
    best = min(range(len(risks)), key=risks.__getitem__)
    deeper_worse = best < len(risks) - 1 and risks[-1] > WORSE * risks[best]
    if deeper_worse and best > 0 and risks[0] > WORSE * risks[best]:
        return "U"
    return "rising" if deeper_worse else "flat or falling"


def width_shape(shapes: list[str]) -> str:
    """A width's shape from its seeds': "U" when ≥ SEED_SHARE of them are U-shaped, "rising" when ≥ SEED_SHARE
    rise past a depth (U or rising), "flat or falling" otherwise."""
    need = SEED_SHARE * len(shapes)
    if sum(s == "U" for s in shapes) >= need:
        return "U"
    return "rising" if sum(s != "flat or falling" for s in shapes) >= need else "flat or falling"


def judge_u(results: Mapping[str, Any]) -> verdicts.Judgement:
    widths, depths = [str(w) for w in results["widths"]], results["depths"]
    n = min(len(results[w][str(d)]["risk"]) for w in widths for d in depths)
    fits = [f for w in widths for d in depths for f in results[w][str(d)]["fit"]]
    fitted = sum(f < FITTED for f in fits)
    per_seed = {w: [shape(c) for c in seed_curves(results, w)] for w in widths}
    shapes = {w: width_shape(per_seed[w]) for w in widths}
    line = "; ".join(
        f"width {w}: U-shaped in {sum(s == 'U' for s in per_seed[w])}/{len(per_seed[w])} seeds, rising past a depth in "
        f"{sum(s != 'flat or falling' for s in per_seed[w])}, lowest at the deepest in "
        f"{sum(min(range(len(c)), key=c.__getitem__) == len(c) - 1 for c in seed_curves(results, w))} ({shapes[w]}; "
        f"median risk {', '.join(f'{r:.3g}' for r in curve(results, w))} at depths {', '.join(map(str, depths))})"
        for w in widths
    )
    line += f"; {fitted}/{len(fits)} runs fit their training set (loss < {FITTED} Var y)"
    if fitted < SHARE * len(fits):
        return verdicts.Judgement("inconclusive", line + ": not the interpolating regime of the claim", n)
    u = sum(s == "U" for s in shapes.values())
    worse = sum(s != "flat or falling" for s in shapes.values())
    verdict = "matches" if u == len(widths) else "partly" if worse else "does not"
    return verdicts.Judgement(verdict, line, n)


def permuted(results: Mapping[str, Any]) -> dict[str, Any]:
    """The control: each seed's risks reassigned to the depths by a fixed random permutation (one per width and
    seed, from a generator seeded PERMUTE_SEED), so the noise stays and the dependence on depth goes."""
    import numpy as np

    rng = np.random.default_rng(PERMUTE_SEED)
    depths = [str(d) for d in results["depths"]]
    out: dict[str, Any] = {k: v for k, v in results.items()}
    for w in [str(w) for w in results["widths"]]:
        curves = seed_curves(results, w)
        moved = []
        for c in curves:
            order = rng.permutation(len(c))
            while len(c) > 2 and list(order) in (list(range(len(c))), list(range(len(c)))[::-1]):
                order = rng.permutation(len(c))  # neither the order itself nor its reverse (a U reversed is a U)
            moved.append([c[i] for i in order])
        out[w] = {d: {**results[w][d], "risk": [m[j] for m in moved]} for j, d in enumerate(depths)}
    return out


CLAIMS = [
    verdicts.Claim(
        id="u_shaped_in_depth",
        claim="In over-parameterized networks trained to fit their data, test risk is U-shaped in depth: past a "
        "critical depth, deeper is worse",
        paper="CIFAR-10 and ImageNet32 with ResNets and fully convolutional networks, trained to fit the training set; "
        "theory for linear convolutional networks",
        rule=f"per width and per seed (≥ {MIN_SEEDS}), the seed's test risk at each depth: U-shaped when its best "
        f"depth is neither the shallowest nor the deepest and both ends are ≥ {WORSE}× its risk, rising when the "
        f"best is not the deepest and the deepest is ≥ {WORSE}× it; a width is U-shaped (rising) when ≥ "
        f"{SEED_SHARE:.2g} of its seeds are (U-shaped or rising); matches when U-shaped at every width, partly "
        f"when some width is U-shaped or rising, does not otherwise; inconclusive when fewer than {SHARE:.2g} of the runs fit their training "
        f"set (loss < {FITTED} of the targets' variance)",
        judge=judge_u,
        min_n=MIN_SEEDS,
        scale=True,
        kind="paper",
        budget_note="none comparable: theirs are ResNets on CIFAR-10 and ImageNet32, ours MLPs on a synthetic task",
        control=permuted,
        control_note="each seed's risks with the depths permuted",
    ),
]
