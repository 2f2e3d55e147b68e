"""The statistics the experiments share, on scipy.stats where it has them: spreads over seeds, fits, correlations,
and when a series crosses a level for good."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any, Optional

from scipy import stats as sp

from mechsynth.probes import formation_step


def spread(values: Sequence[Optional[float]]) -> dict[str, Any]:
    """Median, min, max and count of the values that exist (None = did not happen)."""
    xs = [float(v) for v in values if v is not None]
    return {
        "median": statistics.median(xs) if xs else None,
        "min": min(xs) if xs else None,
        "max": max(xs) if xs else None,
        "n": len(xs),
        "of": len(values),
    }


def linear_fit(x: Sequence[float], y: Sequence[float]) -> Optional[dict[str, float]]:
    """Least squares y = a + b x, with R² and the root-mean-square residual (None: x has one value)."""
    if len(set(x)) < 2:
        return None
    fit = sp.linregress(x, y)
    residuals = [v - fit.intercept - fit.slope * u for u, v in zip(x, y)]
    return {
        "intercept": float(fit.intercept),
        "slope": float(fit.slope),
        "r2": float(fit.rvalue**2) if len(set(y)) > 1 else 1.0,  # (a constant y is fitted exactly)
        "rms_residual": math.sqrt(sum(r * r for r in residuals) / len(x)),
    }


def power_fit(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """Least squares of log y = a + b log x: the exponent b, the prefactor e^a, and R²."""
    fit = linear_fit([math.log(v) for v in x], [math.log(v) for v in y])
    return {"exponent": fit["slope"], "prefactor": math.exp(fit["intercept"]), "r2": fit["r2"]}


def pearson(x: Sequence[float], y: Sequence[float]) -> Optional[float]:
    """Pearson's r; None below 3 points or when either side is constant (r is not defined)."""
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    return float(sp.pearsonr(x, y).statistic)


def spearman(x: Sequence[float], y: Sequence[float]) -> Optional[float]:
    """Spearman's ρ (ties share their mean rank); None where `pearson` of the ranks would be."""
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    return float(sp.spearmanr(x, y).statistic)


def stays_below(steps: Sequence[int], series: Sequence[float], level: float) -> Optional[int]:
    """The first step after which `series` stays ≤ level (None: it does not by the end)."""
    return formation_step(steps, [-v for v in series], -level)


def rise_step(steps: Sequence[int], scores: Sequence[float], fraction: float = 0.5) -> Optional[int]:
    """The first step after which a score stays above start + fraction × (end − start): when a head
    forms, measured against its own start and end rather than a fixed threshold (chance levels differ:
    a uniform head already scores 0.5 on the induction probe with two tokens)."""
    start, end = scores[0], max(scores[-3:]) if len(scores) >= 3 else scores[-1]
    if end <= start:
        return None
    return formation_step(steps, scores, start + fraction * (end - start))
