"""How a sparse dictionary's latents line up with a task's known latent variables (the dictionary probe's scores),
each a standard measure of SAE evaluation on ground truth: the AUROC of each dictionary latent as a detector of each
value, the mean correlation after a one-to-one (Hungarian) assignment, and how many latents split one value."""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Int
from scipy.optimize import linear_sum_assignment
from scipy.stats import rankdata


def auroc(
    acts: Float[np.ndarray, "row latent"], hit: Float[np.ndarray, "row target"]
) -> Float[np.ndarray, "latent target"]:
    """The area under the ROC curve of each latent's activation as a score for each binary target (1: the row has
    the value), by the Mann–Whitney rank sum with tied activations (the many exact zeros) sharing their mean rank:
    0.5 for a latent that tells nothing, 1 for one that is higher on every hit than on every miss. NaN for a
    target with no hits or no misses among the rows."""
    ranks = rankdata(acts, axis=0)  # [row, latent]
    n_hit = hit.sum(0)  # [target]
    n_miss = len(hit) - n_hit
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (ranks.T @ hit - n_hit * (n_hit + 1) / 2) / (n_hit * n_miss)
    out[:, (n_hit == 0) | (n_miss == 0)] = np.nan
    return out


def correlation(
    acts: Float[np.ndarray, "row latent"], y: Float[np.ndarray, "row target"]
) -> Float[np.ndarray, "latent target"]:
    """Pearson correlation of every latent with every target column; 0 where either does not vary."""
    a = acts - acts.mean(0)
    b = y - y.mean(0)
    norm = np.outer(np.sqrt((a**2).sum(0)), np.sqrt((b**2).sum(0)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, (a.T @ b) / norm, 0.0)


def matched_correlation(corr: Float[np.ndarray, "latent target"]) -> float:
    """The mean |correlation| over the targets when each target gets its own latent, the assignment that maximises
    the total (scipy's Hungarian solver; the mean correlation coefficient of the identifiability literature); a
    target left without a latent (more targets than latents) counts 0."""
    rows, cols = linear_sum_assignment(-np.abs(corr))
    return float(np.abs(corr[rows, cols]).sum() / corr.shape[1])


def one_hot(values: Int[np.ndarray, "row"], n_values: int) -> Float[np.ndarray, "row value"]:
    return (values[:, None] == np.arange(n_values)[None]).astype(np.float64)


def absorption(
    acts: Float[np.ndarray, "row latent"], parent: Int[np.ndarray, "row"], child: Int[np.ndarray, "row"]
) -> float:
    """Feature absorption (Chanin et al. 2024) where the task's truth says a parent variable is a function of a child
    (a factor of a state): for each parent value, the share of its rows where the latent that best detects it (AUROC)
    is silent while a latent that best detects one of its child values fires instead: the child's feature has
    absorbed the parent's. Averaged over the parent's values; 0: no absorption."""
    parents, children = np.unique(parent), np.unique(child)
    area_p = auroc(acts, (parent[:, None] == parents[None]).astype(np.float64))
    area_c = auroc(acts, (child[:, None] == children[None]).astype(np.float64))
    rates = []
    for i, v in enumerate(parents):
        rows = parent == v
        if np.isnan(area_p[:, i]).all():
            continue
        best = int(np.nanargmax(area_p[:, i]))
        kids = {
            int(np.nanargmax(area_c[:, j]))
            for j, c in enumerate(children)
            if (child[rows] == c).any() and not np.isnan(area_c[:, j]).all()
        } - {best}
        silent = rows & (acts[:, best] <= 0)
        fired = acts[:, sorted(kids)].max(1) > 0 if kids else np.zeros(len(acts), dtype=bool)
        rates.append((silent & fired).sum() / rows.sum())
    return float(np.mean(rates)) if rates else float("nan")
