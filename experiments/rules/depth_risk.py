"""The claims of experiments/depth_risk.py and the rules that judge them.

Nichani, Radhakrishnan & Uhler 2020, "Increasing depth leads to U-shaped test risk in over-parameterized
convolutional networks" (seed 004): unlike width, depth past a critical value worsens the test risk of networks
trained to fit their training set, so the risk against depth is U-shaped.

Written before the script's runs. Pilots (one seed each; their training-set loss only was read) checked that
the CPU size's steps fit the training set at its narrowest, shallowest and widest, deepest networks. The judge reads `results`: "depths", "widths", and per width
(as a string) per depth (as a string) "risk" (each seed's test risk: squared error on held-out samples over the
targets' variance) and "fit" (each seed's training-set loss over the targets' variance at the end).
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping

import verdicts

MIN_SEEDS = 3
WORSE = 1.1        # a depth's median risk this many times the best one's is worse than it
FITTED = 0.01      # training loss / Var y below this: the network interpolates its training set
SHARE = 2 / 3      # of the runs that must fit their training set for the regime to be the paper's


def curve(results: Mapping[str, Any], width: str) -> list[float]:
    return [statistics.median(results[width][str(d)]["risk"]) for d in results["depths"]]


def shape(risks: list[float]) -> str:
    """"U" (the best depth inside, both ends worse), "rising" (the best not the deepest, the deepest worse), or "flat
    or falling"."""
    best = min(range(len(risks)), key=risks.__getitem__)
    deeper_worse = best < len(risks) - 1 and risks[-1] > WORSE * risks[best]
    if deeper_worse and best > 0 and risks[0] > WORSE * risks[best]:
        return "U"
    return "rising" if deeper_worse else "flat or falling"


def judge_u(results: Mapping[str, Any]) -> verdicts.Judgement:
    widths, depths = [str(w) for w in results["widths"]], results["depths"]
    n = min(len(results[w][str(d)]["risk"]) for w in widths for d in depths)
    fits = [f for w in widths for d in depths for f in results[w][str(d)]["fit"]]
    fitted = sum(f < FITTED for f in fits)
    shapes = {w: shape(curve(results, w)) for w in widths}
    line = "; ".join(f"width {w}: median test risk {', '.join(f'{r:.3g}' for r in curve(results, w))} at depths "
                     f"{', '.join(map(str, depths))} ({shapes[w]})" for w in widths)
    line += f"; {fitted}/{len(fits)} runs fit their training set (loss < {FITTED} Var y)"
    if fitted < SHARE * len(fits):
        return verdicts.Judgement("inconclusive", line + ": not the interpolating regime of the claim", n)
    u = sum(s == "U" for s in shapes.values())
    worse = sum(s != "flat or falling" for s in shapes.values())
    verdict = "matches" if u == len(widths) else "partly" if worse else "does not"
    return verdicts.Judgement(verdict, line, n)


CLAIMS = [
    verdicts.Claim(
        id="u_shaped_in_depth",
        claim="In over-parameterized networks trained to fit their data, test risk is U-shaped in depth: past a "
              "critical depth, deeper is worse",
        paper="CIFAR-10 and ImageNet32 with ResNets and fully convolutional networks, trained to fit the training set; "
              "theory for linear convolutional networks",
        rule=f"per width, the median over seeds (≥ {MIN_SEEDS}) of the test risk at each depth: U-shaped when the best "
             f"depth is neither the shallowest nor the deepest and both ends are ≥ {WORSE}× its risk; matches when "
             f"U-shaped at every width, partly when at some width the deepest is ≥ {WORSE}× the best (risk rises past "
             f"a depth), does not otherwise; inconclusive when fewer than {SHARE:.2g} of the runs fit their training "
             f"set (loss < {FITTED} of the targets' variance)",
        judge=judge_u, min_n=MIN_SEEDS),
]
