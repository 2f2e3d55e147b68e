"""The hmm_identifiability probe on known answers: the CP factors of the HMM's window against the task's own joint,
recovery of (O, T, π) from exact tensors for several position orders, the rotated (or mixed) HMM whose pairwise predictor
(summed over hidden paths in plain Python) equals the true one, Kruskal ranks of hand-made matrices, recovery
degrading with the predictor, and the summary, figure and W&B plots. The planted end-to-end check is
tests/planted.py's known_hmm_identifiability."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from planted import HMMPredictorModel

from mechsynth import models, probes, tasks
from mechsynth.analysis.timeline import Timeline
from mechsynth.probes import hmm_identifiability as hi
from mechsynth.tasks.hmm_masked import window_joint


def hmm(params: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    task = tasks.make("hmm_masked", params)
    return task.emission, task.transition, task.stationary


ORDERS = [(0, 1, 2), (2, 0, 1), (1, 0, 3), (0, 2, 4), (5, 3, 4)]


@pytest.mark.parametrize("times", ORDERS)
def test_the_cp_factors_make_the_window_joint(times):
    """Σ_h π_h a_h ⊗ b_h ⊗ c_h (conditioning on the middle hidden state) is the joint the task walks forward."""
    O, T, pi = hmm({"k": 3, "d": 5, "seed": 2})
    weights, factors = hi.hmm_factors(O, T, pi, times)
    assert all(torch.allclose(f.sum(0), torch.ones(3, dtype=torch.float64)) for f in factors)
    built = torch.einsum("h,ah,bh,ch->abc", weights, *factors)
    torch.testing.assert_close(built, window_joint(O, T, pi, times), rtol=0, atol=1e-15)


@pytest.mark.parametrize("times", ORDERS)
def test_exact_tensors_give_the_hmm_back(times):
    O, T, pi = hmm({"k": 3, "d": 6, "seed": 4})
    weights, factors, fit = hi.cp_decompose(window_joint(O, T, pi, times), 3)
    rec = hi.recover(weights, factors, times, O)
    gap = int(rec["power"])
    assert gap == min(abs(t - sorted(times)[1]) for t in times if t != sorted(times)[1]) and fit < 1e-6
    e = hi.errors(rec, O, T, pi)
    assert max(e["O_err"], e["T_err"], e["pi_err"]) < 1e-4, (times, e)
    torch.testing.assert_close(rec["T"], torch.linalg.matrix_power(T, gap), rtol=0, atol=1e-4)


def test_columns_are_matched_by_the_best_permutation():
    O = torch.tensor([[0.7, 0.1, 0.2], [0.2, 0.8, 0.1], [0.1, 0.1, 0.7]], dtype=torch.float64)
    shuffled = O[:, [2, 0, 1]] + 0.01
    perm = hi.match_columns(shuffled, O)
    assert perm.tolist() == [1, 2, 0] and torch.equal(shuffled[:, perm], O + 0.01)


def brute_joint(O: torch.Tensor, T: torch.Tensor, pi: torch.Tensor, gap: int) -> list[list[float]]:
    """P(x_t, x_{t+gap}) [x_t][x_{t+gap}] summed over every hidden path of gap + 1 steps, in plain Python."""
    O, T, pi = O.tolist(), T.tolist(), pi.tolist()
    d, k = len(O), len(pi)
    joint = [[0.0] * d for _ in range(d)]
    for h in itertools.product(range(k), repeat=gap + 1):
        w = pi[h[0]] * math.prod(T[a][b] for a, b in zip(h, h[1:]))
        for x, y in itertools.product(range(d), repeat=2):
            joint[x][y] += w * O[x][h[0]] * O[y][h[-1]]
    return joint


def rows(joint: list[list[float]]) -> list[list[float]]:
    """The conditionals of the column given the row."""
    return [[v / sum(row) for v in row] for row in joint]


@pytest.mark.parametrize("k, gap", [(3, 1), (4, 1), (2, 1), (3, 2)])
def test_a_rotated_hmm_has_the_same_pairwise_predictor(k, gap):
    """(Õ, T̃) = (OR, R⁻¹ diag(π) T^g R⁻ᵀ row-normalised) is a valid HMM far from (O, T^g), not a relabelling of
    it, and every hidden path's sum gives it the very same P(x_{t+g} | x_t)."""
    O, T, pi = hmm({"k": k, "d": 6, "concentration": 5.0, "seed": 1})
    alt = hi.rotated_alternative(O, T, pi, gap)
    Ot, Tt, pt = alt["O"], alt["T"], alt["pi"]
    assert (Ot >= 0).all() and (Tt >= 0).all() and torch.allclose(Ot.sum(0), torch.ones(k, dtype=torch.float64))
    assert torch.allclose(Tt.sum(1), torch.ones(k, dtype=torch.float64)) and torch.allclose(pt @ Tt, pt)
    R, ones = alt["R"], torch.ones(k, dtype=torch.float64)
    torch.testing.assert_close(ones @ R, ones)  # Õ's columns still sum to 1
    if alt["rotation"]:  # the talk's: R orthogonal, fixing the all-ones vector
        torch.testing.assert_close(R @ R.T, torch.eye(k, dtype=torch.float64))
        torch.testing.assert_close(R @ ones, ones)
    joint = brute_joint(O, T, pi, gap)
    for true, other in (
        (joint, brute_joint(Ot, Tt, pt, 1)),  # (Tt is already the g-step chain)
        (list(map(list, zip(*joint))), list(map(list, zip(*brute_joint(Ot, Tt, pt, 1))))),
    ):
        assert max(abs(a - b) for r, s in zip(rows(true), rows(other)) for a, b in zip(r, s)) < 1e-12
    relabelled = min(float((Ot[:, list(p)] - O).abs().max()) for p in itertools.permutations(range(k)))
    assert relabelled > 0.02 and float((Tt - torch.linalg.matrix_power(T, gap)).abs().max()) > 0.02, relabelled
    torch.testing.assert_close(hi.pairwise_predictor(O, T, pi, 0, gap), torch.tensor(rows(joint), dtype=torch.float64))
    backward = rows(list(map(list, zip(*joint))))  # P(x_t | x_{t+g})
    torch.testing.assert_close(hi.pairwise_predictor(O, T, pi, gap, 0), torch.tensor(backward, dtype=torch.float64))


def test_kruskal_ranks_of_hand_made_matrices():
    eye = torch.eye(4, dtype=torch.float64)
    assert hi.k_rank(eye) == 4
    assert hi.k_rank(torch.cat([eye[:, :3], eye[:, :1]], 1)) == 1  # a repeated column
    assert hi.k_rank(torch.tensor([[1.0, 0, 1], [0, 1, 1]], dtype=torch.float64)) == 2  # 3 columns in the plane
    assert hi.k_rank(torch.tensor([[1.0, 0, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]], dtype=torch.float64)) == 2
    for params, unique in (({}, True), ({"emission": "repeated"}, False), ({"k": 5, "d": 3}, False)):
        O, T, pi = hmm(params)
        assert (hi.kruskal_margin(hi.hmm_factors(O, T, pi, (0, 1, 2))[1]) >= 0) == unique, params


class NoisyPredictor(HMMPredictorModel):
    """The exact predictor mixed with the uniform distribution: weight `eps` on uniform."""

    def __init__(self, task, eps: float):
        super().__init__(task)
        self.eps = eps

    def forward(self, tokens):
        p = super().forward(tokens).exp()
        return ((1 - self.eps) * p + self.eps / p.shape[-1]).log()


@pytest.mark.slow
def test_recovery_degrades_with_the_predictor():
    task = tasks.make("hmm_masked", {"objective": "triplet", "d": 6})
    errors = [probes.run("hmm_identifiability", NoisyPredictor(task, eps), task).metrics for eps in (0.0, 0.02, 0.3)]
    o = [m["O_err"] for m in errors]
    assert o[0] < 1e-3 < o[1] < o[2] and errors[0]["kl_joint"] < errors[1]["kl_joint"] < errors[2]["kl_joint"], o
    assert errors[0]["floor_O_err"] == errors[2]["floor_O_err"] < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["pairwise", "triplet", "mlm"])
def test_probe_reads_an_untrained_transformer(objective):
    task = tasks.make("hmm_masked", {"objective": objective, "d": 4, "length": 5})
    model = models.hooked(models.build(models.TransformerConfig(n_layers=1, n_heads=1, d_model=16), task.spec))
    assert probes.can_run("hmm_identifiability", model, task)
    markov = tasks.make("markov_icl", {"k": 3, "length": 8})
    assert "needs truth emission" in probes.why_not("hmm_identifiability", model, markov)
    m = probes.run("hmm_identifiability", model, task).metrics  # its own numbers, all finite, far from the HMM
    assert all(math.isfinite(v) for k, v in m.items() if k != "kruskal_margin") and m["kl_joint"] > 0.01, m
    assert ("alt_O_diff" in m) == (objective == "pairwise") and len([k for k in m if k.startswith("O_hat/")]) == 4 * 3


def timeline(task, eps: list[float]) -> Timeline:
    runs = [probes.run("hmm_identifiability", NoisyPredictor(task, e), task).metrics for e in eps]
    steps = [0, 10, 100][: len(eps)]
    tl = Timeline(steps, [1.0] * len(steps), {"hmm_identifiability": {}})
    tl.metrics["hmm_identifiability"] = {k: [m[k] for m in runs] for k in runs[0]}
    return tl


@pytest.mark.slow
def test_summary_figure_and_wandb_plots(wandb_plots):
    probe = probes.PROBES.get("hmm_identifiability")
    task = tasks.make("hmm_masked", {"objective": "triplet", "d": 5})
    tl = timeline(task, [0.6, 0.0])
    (line,) = probe.summary(tl, task)
    m = tl.metrics["hmm_identifiability"]
    assert m["O_err"][0] > 0.05 > m["O_err"][1], m["O_err"]
    assert line.startswith("hmm_identifiability triplet: at step 10") and f"{m['O_err'][-1]:.3g}" in line
    assert "O within 0.05 from step 10;" in line and "Kruskal margin +" in line
    fig = probe.section.figure(tl, task)
    assert len(fig.axes) == 4  # errors, true O, recovered Ô, the colour bar
    probe.wandb(tl, wandb_plots)
    assert wandb_plots.plots["plots/hmm_identifiability"]["O_err"] == m["O_err"]
    pair = tasks.make("hmm_masked", {"objective": "pairwise", "d": 5})
    (line,) = probe.summary(timeline(pair, [0.0]), pair)
    assert "pairwise: not identifiable: another valid HMM (Õ = OR, R a" in line and "from the other's" in line
    assert probe.summary(Timeline([], [], {}), task) == []
