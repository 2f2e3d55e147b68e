"""The measures the latents and dictionary probes report, against brute-force references (their planted known answers:
tests/planted_features.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from mechsynth.probes import _decode, _match


# ---- the measures against brute force ----------------------------------------------------------------------------


def test_auroc_is_the_probability_a_hit_outranks_a_miss():
    rng = np.random.default_rng(0)
    acts = np.where(rng.random((60, 5)) < 0.6, 0.0, rng.random((60, 5)))  # many tied zeros, as a sparse code has
    hit = (rng.random((60, 3)) < 0.4).astype(float)
    got = _match.auroc(acts, hit)
    for j, v in itertools.product(range(5), range(3)):
        pos, neg = acts[hit[:, v] == 1, j], acts[hit[:, v] == 0, j]
        pairs = [(a > b) + 0.5 * (a == b) for a in pos for b in neg]
        assert got[j, v] == pytest.approx(np.mean(pairs))


def test_the_matched_correlation_is_the_best_one_to_one_assignment():
    rng = np.random.default_rng(1)
    corr = rng.uniform(-1, 1, (5, 3))
    best = max(np.mean([abs(corr[p[i], i]) for i in range(3)]) for p in itertools.permutations(range(5), 3))
    assert _match.matched_correlation(corr) == pytest.approx(best)


def test_one_penalty_for_all_targets_is_the_leave_one_out_minimiser():
    """`ridge_predict(per_target=False)` against explicit leave-one-out refits of the summed error."""
    rng = np.random.default_rng(2)
    X, Y = rng.normal(size=(30, 6)), rng.normal(size=(30, 3))
    Xs = (X - X.mean(0)) / X.std(0)

    def loo(lam: float) -> float:
        err = 0.0
        for i in range(30):
            keep = np.arange(30) != i
            ym = Y[keep].mean(0)
            xk = Xs[keep]
            coef = np.linalg.solve(xk.T @ xk + lam * 30 * np.eye(6), xk.T @ (Y[keep] - ym))
            err += np.square(Y[i] - ym - Xs[i] @ coef).sum()
        return err

    # the closed form centres on all the fit rows: the same minimiser as the refits on these well-spread rows
    want = min(_decode.PENALTIES, key=loo)
    _, (lam,) = _decode.ridge_predict(torch.tensor(X), torch.tensor(Y), torch.tensor(X), per_target=False)
    assert lam == want


def test_a_transcoder_reads_across_an_mlp_and_an_attention_only_model_is_refused():
    from mechsynth import models, probes, tasks
    from mechsynth.probes import ProbeError

    task = tasks.make("automata", {"automaton": "dihedral", "n": 4, "length": 8})
    option = {"kind": "transcoder", "steps": 30, "seeds": 2, "sequences": 16}
    with_mlp = models.hooked(models.build(models.parse({"n_layers": 1, "d_model": 16}), task.spec))
    m = probes.run("dictionary", with_mlp, task, option=option).metrics
    assert m["explained"] <= 1 and 0 <= m["dead"] <= 1 and {"state/auroc", "flip/mcc"} <= set(m)
    attn_only = models.hooked(models.build(models.parse({"n_layers": 1, "d_model": 16, "attn_only": True}), task.spec))
    with pytest.raises(ProbeError, match="transcoder reads an MLP's input and output"):
        probes.run("dictionary", attn_only, task, option=option)


def test_absorption_is_the_share_of_a_parents_rows_a_childs_feature_takes():
    """Four child values, the parent = child // 2. Latent 0 detects parent 1 on all of child 2 and half of child 3;
    latent 1 fires on the other half of child 3 (it has absorbed parent 1 there); latent 2 detects parent 0 everywhere.
    Parent 1 loses a quarter of its rows to latent 1, parent 0 none: absorption (0.25 + 0) / 2."""
    child = np.repeat(np.arange(4), 6)
    parent = child // 2
    third = np.isin(np.arange(24), [18, 19, 20])  # half of child 3's rows
    acts = np.stack([(child == 2) | ((child == 3) & third), (child == 3) & ~third, parent == 0], 1).astype(float)
    assert _match.absorption(acts, parent, child) == pytest.approx(0.125)
    assert _match.absorption(np.stack([parent == 1, parent == 0], 1).astype(float), parent, child) == 0
