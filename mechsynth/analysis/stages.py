"""Stages of training found without knowing the circuit: change points of the loss, LLC, sharpness and
probe timelines in log-step, and the LLC's turns (Hoogland et al. 2024 bound their stages by the
critical points of the LLC curve: where it stops rising or falling).

A change point is where a piecewise-linear fit in log(step + 1) changes segment: the fit with the fewest
segments a (doubled) Bayesian information criterion allows (at most `max_segments`, each of at least `min_size`
checkpoints), found exactly by dynamic programming. Series are standardised first, so one criterion
serves every scale."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

# the series of costly probes whose stages `detect` reads, besides each head-scoring probe's best head
MEASURED = {
    "llc": ("llc", "llc"),
    "sharpness": ("sharpness", "lambda_max"),
    "circuit": ("circuit", "final_faithfulness"),
}


def _measured(steps: Sequence[int], values: Sequence[Optional[float]]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    kept = [(s, float(v)) for s, v in zip(steps, values) if v is not None and math.isfinite(v)]
    return (np.log1p([s for s, _ in kept]), np.array([v for _, v in kept]), [s for s, _ in kept])


def _segment_costs(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """cost[i, j]: the squared error of the least-squares line through points i..j-1."""
    n = len(x)
    cost = np.full((n + 1, n + 1), np.inf)
    for i in range(n):
        sx = sy = sxx = sxy = syy = 0.0
        for j in range(i, n):
            sx, sy, sxx, sxy, syy = sx + x[j], sy + y[j], sxx + x[j] ** 2, sxy + x[j] * y[j], syy + y[j] ** 2
            m = j - i + 1
            vx, vy, cxy = sxx - sx * sx / m, syy - sy * sy / m, sxy - sx * sy / m
            cost[i, j + 1] = max(vy - (cxy * cxy / vx if vx > 1e-12 else 0.0), 0.0)
    return cost


def change_points(
    steps: Sequence[int], values: Sequence[Optional[float]], max_segments: int = 5, min_size: int = 3
) -> list[int]:
    """The checkpoints where a new segment of the best piecewise-linear fit in log(step + 1) begins
    (NaN and None values are skipped; empty when one line fits best or there are too few points)."""
    x, y, kept = _measured(steps, values)
    n = len(y)
    if n < 2 * min_size or float(np.std(y)) == 0.0:
        return []
    y = (y - y.mean()) / y.std()
    cost = _segment_costs(x, y)
    most = min(max_segments, n // min_size)
    best = np.full((most + 1, n + 1), np.inf)
    back = np.zeros((most + 1, n + 1), dtype=int)
    best[0, 0] = 0.0
    for k in range(1, most + 1):
        for j in range(k * min_size, n + 1):
            starts = np.arange((k - 1) * min_size, j - min_size + 1)
            totals = best[k - 1, starts] + cost[starts, j]
            back[k, j] = starts[int(np.argmin(totals))]
            best[k, j] = totals.min()
    # BIC with each segment's slope, intercept and boundary costing twice BIC's log n, for the many boundaries
    # tried: on Gaussian noise at 22 checkpoints, 1% of series get a change point (BIC's own: 30%). The floor
    # keeps a perfect fit finite.
    bic = [
        n * math.log(best[k, n] / n + 1e-4) + 6 * k * math.log(n) if math.isfinite(best[k, n]) else math.inf
        for k in range(1, most + 1)
    ]
    k = 1 + int(np.argmin(bic))
    starts, j = [], n
    for level in range(k, 0, -1):
        j = back[level, j]
        starts.append(j)
    return [kept[i] for i in sorted(starts)[1:]]


@dataclass(frozen=True)
class Segment:
    """One piece of the piecewise-linear fit in log(step + 1): its first and last checkpoints, how much its line
    falls over them, and how fast (per unit of log(step + 1))."""

    start: int
    end: int
    fall: float
    rate: float


def segments(
    steps: Sequence[int], values: Sequence[Optional[float]], max_segments: int = 5, min_size: int = 3
) -> list[Segment]:
    """The pieces `change_points` splits the series into, each with its own least-squares line in the series'
    own units (one piece when no change point is found; none when nothing was measured)."""
    x, y, kept = _measured(steps, values)
    if len(y) < 2:
        return []
    cuts = [0] + [kept.index(s) for s in change_points(steps, values, max_segments, min_size)] + [len(kept)]
    out = []
    for i, j in zip(cuts, cuts[1:]):
        slope = float(np.polyfit(x[i:j], y[i:j], 1)[0]) if j - i > 1 and np.ptp(x[i:j]) > 0 else 0.0
        out.append(Segment(kept[i], kept[j - 1], -slope * float(x[j - 1] - x[i]), -slope))
    return out


# A plateau ends where the loss starts falling this many times faster (per log-step) than it did, by at least
# this share of its whole range: the demo's exit (step ~105) speeds up ~4.6x, the own-loop tutorial's (~170)
# ~2.6x; a loss that falls from the start and then flattens only slows down; noise on a flat stretch, split off
# by a change point, moves a few percent of the range at most.
SPEEDUP, MATERIAL = 2.0, 0.1


def plateau_exit(steps: Sequence[int], loss: Sequence[Optional[float]]) -> Optional[int]:
    """The loss change point where a plateau ends: the first segment boundary after which the loss falls
    materially and `SPEEDUP` times faster per log-step than before it. The first segment is never an exit:
    it starts the run, and its fall (from the initialisation) is the transient a plateau follows. "Materially": the
    segments that fall that fast from there fall by `MATERIAL` of the loss's range in all. None when no
    boundary qualifies (a loss that falls from the start and then flattens has no plateau to leave)."""
    pieces = segments(steps, loss)
    measured = [v for v in loss if v is not None and math.isfinite(v)]
    spread = max(measured) - min(measured) if measured else 0.0
    for i in range(1, len(pieces)):
        floor = SPEEDUP * max(pieces[i - 1].rate, 0.0)
        # A transition may take more than one segment (the demo's: two): its fall is that of the run of segments
        # falling that fast.
        fall = 0.0
        for piece in pieces[i:]:
            if piece.rate < floor or piece.rate <= 0:
                break
            fall += piece.fall
        if spread > 0 and fall >= MATERIAL * spread:
            return pieces[i].start
    return None


def turns(steps: Sequence[int], values: Sequence[Optional[float]], prominence: float = 0.1) -> list[int]:
    """The checkpoints where the curve turns (a local maximum or minimum, after a 3-point moving average in
    log-step) by at least `prominence` of its range on each side: where the LLC stops rising or falling."""
    _, y, kept = _measured(steps, values)
    if len(y) < 3 or np.ptp(y) == 0:
        return []
    smooth = np.convolve(np.pad(y, 1, mode="edge"), np.ones(3) / 3, mode="valid")
    need = prominence * float(np.ptp(smooth))
    out, last = [], 0  # last: the index of the previous turn (or the start)
    for i in range(1, len(smooth) - 1):
        for curve in (smooth, -smooth):  # a maximum, then a minimum (a maximum of the negated curve)
            before, after = curve[last : i + 1], curve[i:]
            if (
                curve[i] >= max(before.max(), after.max())
                and min(curve[i] - before.min(), curve[i] - after.min()) >= need
            ):
                out.append(i)
                last = i
                break
    return [kept[i] for i in out]


def series(tl: Any) -> dict[str, list[Optional[float]]]:
    """The timelines stages are read from: the held-out loss, the LLC, sharpness and the final causal
    circuit's faithfulness where measured, and each head-scoring probe's best head at every checkpoint. An LLC estimate the probe flagged negative is
    left out: SGLD was not sampling around a minimum there (early in training), so it is no LLC; so is one whose
    chains all diverged (NaN)."""
    out: dict[str, list[Optional[float]]] = {"loss": list(tl.loss)}
    for name, (probe, metric) in MEASURED.items():
        if metric in tl.metrics.get(probe, {}):
            flagged = tl.metrics[probe].get("negative", [0.0] * len(tl.steps))
            out[name] = [
                None if f == 1.0 or not math.isfinite(v) else v for v, f in zip(tl.metrics[probe][metric], flagged)
            ]
    for probe, heads in tl.per_head.items():
        if heads:
            out[probe] = [max(v[i] for v in heads.values()) for i in range(len(tl.steps))]
    return out


def detect(tl: Any) -> dict[str, list[int]]:
    """Stage boundaries per timeline (`series`): its change points; and "llc turns", the LLC's turns."""
    read = series(tl)
    found = {name: change_points(tl.steps, values) for name, values in read.items()}
    if "llc" in read:
        found["llc turns"] = turns(tl.steps, read["llc"])
    return found


def summary(found: dict[str, list[int]]) -> list[str]:
    """One line: each timeline's stage boundaries."""
    if not found:
        return []
    parts = [f"{name} {', '.join(map(str, steps)) if steps else '—'}" for name, steps in found.items()]
    return ["stages           boundaries (change points in log-step): " + " · ".join(parts)]
