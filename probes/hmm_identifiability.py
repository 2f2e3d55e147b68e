"""Can the HMM be read back out of a masked predictor? (Liu et al. 2022, "Masked prediction tasks: a parameter
identifiability view"; the task hmm_masked, whose module docstring has the algebra.)

On the task's listed inputs (input "all": each x_{t1} with every other slot masked; for mlm also each
(x_{t1}, x_{t2})), the model's answer distributions are weighted by P(x_{t1}) = (Oπ)_{x_{t1}} into a joint:
P(x_{t1}, x_{t2}, x_{t3}) for triplet (the d² answer classes reshaped to d×d), by the chain rule
P(x_{t1}) P(x_{t2} | x_{t1}) P(x_{t3} | x_{t1}, x_{t2}) for mlm, and P(x_{t1}, x_{t2}) for pairwise. Its rank-k
non-negative CP decomposition (tensorly's HALS from Jennrich, SVD and random starts; the best fit is kept:
`cp_decompose`) has, for the exact predictor, the weights π and one factor per position: O for the middle time m
of the positions (the earlier for pairwise), O (Tᵀ)^{t−m} after it, O diag(π) T^{m−t} diag(π)⁻¹ before it
(`hmm_factors`). Factor columns are scaled to sum 1 and matched to the true O by the best permutation
(scipy's linear_sum_assignment on L1 distances); then Ô is the middle factor, π̂ the weights, and T^g (g the
gap to the nearest other position, `T_power`; g = 1 for adjacent positions) solves F = Ô (T^g)ᵀ for a later
factor F, or F = Ô diag(π̂) T^g diag(π̂)⁻¹ for an earlier one, by non-negative least squares (`recover`).
Of the truth, only the data's own marginal P(x_{t1}) and the matching's order enter the recovery. Metrics:

- `kl_joint`: KL(exact joint ‖ the model's joint), nats; `cp_fit`: ‖W − CP_k(W)‖_F / ‖W‖_F of the model's W;
- `O_err`, `T_err`, `pi_err`: the largest absolute error of Ô, T̂^g, π̂ against O, T^g, π; `O_rel_err`,
  `T_rel_err`: Frobenius errors relative to ‖O‖_F, ‖T^g‖_F; `T_power`: g;
- `floor_O_err`, `floor_T_err`, `floor_cp_fit`: the same from the exact predictor: what a perfect model gets
  (about 1e-6 where the task is identifiable; large where it is not);
- triplet and mlm: `kruskal_margin` = k_a + k_b + k_c − (2k + 2) of the true factors' Kruskal ranks (≥ 0: the
  decomposition is unique, Kruskal 1977; NaN where the ranks were too costly to count);
- pairwise, where a rank-k matrix factorisation is not unique (the O_err above is whatever non-negative
  factorisation the decomposition landed on): the alternative HMM (Õ, T̃) of `rotated_alternative`, whose
  pairwise predictor equals the true one; `alt_O_diff`, `alt_T_diff`: max |Õ − O|, |T̃^g − T^g|;
  `alt_O_rel_diff`: ‖Õ − O‖_F / ‖O‖_F;
  `alt_pred_diff`: max |P̃(x_{t2} | x_{t1}) − P(x_{t2} | x_{t1})| (rounding: ~1e-16); `alt_angle`: θ of
  R = exp(θA); `alt_rotation`: 1 where R is a rotation (the talk's), 0 where a mixing of two states' columns
  moved O further (sharp HMMs leave rotations little room);
  `err_true`, `err_alt`: the model's predictor's max absolute error against each (equal up to alt_pred_diff:
  no data tells the two HMMs apart);
- `O_hat/x{i}h{j}`: the recovered emission matrix (in the true states' order), where d·k ≤ 512 (for the
  report's side-by-side figure).
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch
from jaxtyping import Float
from mechsynth.probes import ProbeError, ProbeResult, Section, View, formation_step, no_hooks, register
from scipy.optimize import linear_sum_assignment, nnls
from torch import Tensor

from mechsynth.util.figures import mark_drop, new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from mechsynth.probes import Timeline
    from tensorly.cp_tensor import CPTensor

TRUTH = ("emission", "hidden_transition", "hidden_stationary", "optimal")
RESTARTS = 2  # Jennrich starts and random starts, besides the SVD start
N_ITER, TOL = 300, 1e-10  # HALS's iterations, and the change in relative error that ends them
EXACT = 1e-9  # a relative residual no other start could improve on
MAX_ENTRIES = 512  # O_hat/ metrics are recorded where d·k is at most this
KRANK_BUDGET = 20_000  # column subsets tried per Kruskal rank before giving up
NAME = "hmm_identifiability"


# ---- the numerical core: pure functions of float64 tensors ---------------------------------------------


def _normalised(weights: np.ndarray, factors: list[np.ndarray]) -> tuple[Tensor, list[Tensor]]:
    """Factor columns scaled to sum 1 (a column summing to ~0 is left as it is), the scales moved into the weights."""
    weights = weights.copy()
    out = []
    for f in factors:
        s = f.sum(0)
        s = np.where(np.abs(s) > 1e-12, s, 1.0)
        weights, f = weights * s, f / s
        out.append(torch.from_numpy(np.ascontiguousarray(f)))
    return torch.from_numpy(weights), out


def jennrich(W: np.ndarray, rank: int, seed: int = 0) -> Optional[CPTensor]:
    """Jennrich's simultaneous diagonalisation: exact for an exact rank-`rank` 3-way tensor whose first two factors
    have full column rank. Two random mixtures of W's slices, projected onto the top singular subspaces of its
    first two unfoldings, are M_i = Ã diag(λ ∘ Cᵀw_i) B̃ᵀ; the eigenvectors of M_1 M_2⁻¹ give A, those of
    (M_2⁻¹ M_1)ᵀ give B (paired by their common eigenvalues), and least squares gives C. Started here, the
    iterative decomposition avoids the swamps it falls into from an SVD or random start when the factors' columns
    are nearly collinear (as probability vectors are): it converges in a few iterations where an SVD start takes
    thousands. None where it does not apply."""
    if W.ndim != 3 or rank > min(W.shape[:2]):
        return None
    I, J, K = W.shape
    g = np.random.default_rng(seed)
    U = np.linalg.svd(W.reshape(I, -1), full_matrices=False)[0][:, :rank]
    V = np.linalg.svd(W.transpose(1, 0, 2).reshape(J, -1), full_matrices=False)[0][:, :rank]
    P = np.einsum("ijl,ia,jb->abl", W, U, V)
    M1, M2 = P @ g.standard_normal(K), P @ g.standard_normal(K)
    try:
        ea, Ea = np.linalg.eig(M1 @ np.linalg.inv(M2))
        eb, Eb = np.linalg.eig((np.linalg.inv(M2) @ M1).T)
    except np.linalg.LinAlgError:
        return None
    A, B = U @ Ea[:, np.argsort(ea.real)].real, V @ Eb[:, np.argsort(eb.real)].real
    C = np.linalg.lstsq(np.einsum("ir,jr->ijr", A, B).reshape(I * J, rank), W.reshape(I * J, K), rcond=None)[0].T
    from tensorly.cp_tensor import CPTensor  # (tensorly is imported by the first decomposition: 0.3 s)

    return CPTensor((np.ones(rank), [A, B, C]))


def _non_negative(cp: Optional[CPTensor]) -> Optional[CPTensor]:
    """A start for the non-negative decomposition: each column's sign flipped to sum positive, then clipped."""
    if cp is None:
        return None
    factors = []
    for f in cp.factors:
        sign = np.where(f.sum(0) < 0, -1.0, 1.0)
        factors.append(np.clip(f * sign, 1e-6, None))
    from tensorly.cp_tensor import CPTensor

    return CPTensor((np.ones(len(cp.weights)), factors))


def cp_decompose(
    W: Tensor, rank: int, restarts: int = RESTARTS, seed: int = 0
) -> tuple[Float[Tensor, "rank"], list[Tensor], float]:
    """The best non-negative rank-`rank` CP decomposition of W (2- or 3-way) that tensorly's HALS finds from
    `restarts` Jennrich starts (`jennrich`, 3-way only, made non-negative), an SVD start and `restarts` random
    starts, in that order, stopping at an exact fit. Non-negative because W and its true factors are: the
    unconstrained best fit of a noisy tensor need not exist, and ALS then drifts to large components of opposite
    signs that cancel (CP degeneracy), which no column scaling turns into probabilities. Returns (weights,
    factors [dim, rank] per axis with columns summing to 1, relative residual ‖W − CP‖_F / ‖W‖_F)."""
    import tensorly
    from tensorly.decomposition import non_negative_parafac_hals

    X = W.double().cpu().numpy()
    norm = float(np.linalg.norm(X)) or 1.0
    starts = [_non_negative(jennrich(X, rank, seed + i)) for i in range(restarts)] if X.ndim == 3 else []
    tries = (
        [(s, seed) for s in starts if s is not None] + [("svd", seed)] + [("random", seed + i) for i in range(restarts)]
    )
    best: Optional[tuple[float, Any]] = None
    for init, state in tries:
        try:
            with warnings.catch_warnings():  # an SVD start with rank > a dimension: tensorly pads it, and says so
                warnings.simplefilter("ignore", UserWarning)
                cp = non_negative_parafac_hals(
                    tensorly.tensor(X), rank, n_iter_max=N_ITER, init=init, tol=TOL, random_state=state
                )
        except (ValueError, np.linalg.LinAlgError):
            continue
        fit = float(np.linalg.norm(tensorly.cp_to_tensor(cp) - X)) / norm
        if np.isfinite(fit) and (best is None or fit < best[0]):
            best = (fit, cp)
        if best is not None and best[0] < EXACT:
            break
    if best is None:
        raise ProbeError(f"probe {NAME!r}: no rank-{rank} CP decomposition converged")
    weights, factors = _normalised(
        np.asarray(best[1].weights, dtype=float), [np.asarray(f, dtype=float) for f in best[1].factors]
    )
    return weights, factors, best[0]


def match_columns(found: Float[Tensor, "obs rank"], true: Float[Tensor, "obs hidden"]) -> Tensor:
    """perm with found[:, perm[h]] the column matched to true[:, h], by the least total L1 distance."""
    cost = (found[:, :, None] - true[:, None, :]).abs().sum(0)
    rows, cols = linear_sum_assignment(cost.numpy())
    perm = np.empty(true.shape[1], dtype=np.int64)
    perm[cols] = rows
    return torch.from_numpy(perm)


def reference_axes(times: Sequence[int]) -> tuple[int, int, int]:
    """(the axis whose factor is O: the middle time, or the earlier of two; the nearest other axis, a later
    one where tied; their time gap g)."""
    order = sorted(range(len(times)), key=lambda i: times[i])
    ref = order[len(order) // 2] if len(times) == 3 else order[0]
    others = [i for i in range(len(times)) if i != ref]
    other = min(others, key=lambda i: (abs(times[i] - times[ref]), times[i] < times[ref]))
    return ref, other, abs(times[other] - times[ref])


def hmm_factors(
    O: Float[Tensor, "obs hidden"], T: Float[Tensor, "hidden hidden"], pi: Float[Tensor, "hidden"], times: Sequence[int]
) -> tuple[Float[Tensor, "hidden"], list[Tensor]]:
    """The exact CP decomposition of P(x_{times[0]}, ...) given the hidden state h at the reference time r
    (`reference_axes`): weights π, and per axis P(x_t | h_r): O (Tᵀ)^{t−r} for t > r, O for t = r,
    O diag(π) T^{r−t} diag(π)⁻¹ for t < r (the reversed chain)."""
    r = times[reference_axes(times)[0]]
    out = []
    for t in times:
        power = torch.linalg.matrix_power(T, abs(t - r))
        out.append(O @ power.T if t >= r else O @ (pi[:, None] * power / pi[None, :]))
    return pi, out


def nonneg_solve(O: Float[Tensor, "obs hidden"], F: Float[Tensor, "obs rank"]) -> Float[Tensor, "hidden rank"]:
    """X ≥ 0 minimising ‖O X − F‖_F, column by column (scipy's NNLS): the exact solution where one exists."""
    return torch.stack([torch.from_numpy(nnls(O.numpy(), F[:, h].numpy())[0]) for h in range(F.shape[1])], 1)


def recover(
    weights: Tensor, factors: list[Tensor], times: Sequence[int], O_true: Float[Tensor, "obs hidden"]
) -> dict[str, Tensor]:
    """Ô, π̂ and T̂^g from a CP decomposition (see the module docstring), its components put in the true states'
    order by matching the O factor's columns to `O_true`. T̂^g solves the neighbouring factor F's equation with
    non-negative least squares, (T^g)ᵀ = X for F = Ô X (a later F), or diag(π̂) T^g diag(π̂)⁻¹ = X (an earlier
    one), its rows then scaled to sum 1; exact for an exact decomposition with Ô of full column rank."""
    ref, other, gap = reference_axes(times)
    perm = match_columns(factors[ref], O_true)
    O, F, lam = factors[ref][:, perm], factors[other][:, perm], weights[perm]
    pi = lam / lam.sum()
    X = nonneg_solve(O, F)
    T = X.T if times[other] > times[ref] else X * pi[None, :] / pi[:, None]
    T = T / T.sum(1, keepdim=True).clamp_min(1e-300)
    return {"O": O, "T": T, "pi": pi, "power": torch.tensor(gap)}


def k_rank(M: Float[Tensor, "rows cols"], tol: float = 1e-8, budget: int = KRANK_BUDGET) -> Optional[int]:
    """Kruskal's rank: the largest r such that every r columns are linearly independent (None past `budget`
    subsets)."""
    n = M.shape[1]
    r = int(torch.linalg.matrix_rank(M, rtol=tol))
    tried = 0
    for size in range(r, 0, -1):
        ok = True
        for cols in itertools.combinations(range(n), size):
            tried += 1
            if tried > budget:
                return None
            if int(torch.linalg.matrix_rank(M[:, list(cols)], rtol=tol)) < size:
                ok = False
                break
        if ok:
            return size
    return 0


def kruskal_margin(factors: list[Tensor]) -> Optional[int]:
    """k_a + k_b + k_c − (2k + 2) for three factors of k columns: ≥ 0 makes the CP decomposition unique."""
    ranks = [k_rank(f) for f in factors]
    return None if None in ranks else sum(ranks) - 2 * factors[0].shape[1] - 2  # type: ignore[arg-type]


def _generators(k: int, planes: int, seed: int, max_mixings: int = 64) -> list[tuple[Tensor, bool]]:
    """(A, is a rotation) with 1ᵀA = 0, so that R = exp(θA) keeps 1ᵀR = 1ᵀ (Õ's columns still sum to 1): for
    k ≥ 3 the talk's rotations, in planes orthogonal to 1 (the one plane for k = 3, else `planes` random ones);
    and column mixings A = (e_i − e_j) e_jᵀ, which move state j's emission toward state i's (at most
    `max_mixings` of the k(k−1), drawn with `seed`). Where O or T has entries near 0 (sharp HMMs) a rotation has
    almost no room before some entry turns negative; a mixing of columns keeps Õ non-negative."""
    g = torch.Generator().manual_seed(seed)
    out = []
    if k >= 3:
        basis = torch.linalg.qr(torch.eye(k, dtype=torch.float64) - 1.0 / k)[0][:, : k - 1]  # orthonormal, ⊥ 1
        for _ in range(1 if k == 3 else planes):
            q = torch.linalg.qr(torch.randn(k - 1, 2, generator=g, dtype=torch.float64))[0]
            u, v = basis @ q[:, 0], basis @ q[:, 1]
            out.append((torch.outer(u, v) - torch.outer(v, u), True))
    pairs = [(i, j) for i in range(k) for j in range(k) if i != j]
    for n in torch.randperm(len(pairs), generator=g)[:max_mixings].sort().values.tolist():
        i, j = pairs[n]
        A = torch.zeros(k, k, dtype=torch.float64)
        A[i, j], A[j, j] = 1.0, -1.0
        out.append((A, False))
    return out


def alternative_for(
    O: Float[Tensor, "obs hidden"], M: Float[Tensor, "hidden hidden"], R: Float[Tensor, "hidden hidden"]
) -> tuple[Tensor, Tensor, Tensor]:
    """(Õ, T̃, π̃) = (OR, row-normalised R⁻¹ M R⁻ᵀ, its row sums) for the joint M = diag(π) T^g of two hidden
    states g apart: Õ (R⁻¹MR⁻ᵀ) Õᵀ = O M Oᵀ. For orthogonal R this is the talk's (OR, RᵀTR) with the joint in
    place of T (T̃ = RᵀTR exactly where π is uniform)."""
    Ri = torch.linalg.inv(R)
    J = Ri @ M @ Ri.T
    pi = J.sum(1)
    return O @ R, J / pi[:, None], pi


def rotated_alternative(
    O: Float[Tensor, "obs hidden"],
    T: Float[Tensor, "hidden hidden"],
    pi: Float[Tensor, "hidden"],
    gap: int = 1,
    margin: float = 0.9,
    planes: int = 16,
    seed: int = 0,
) -> dict[str, Any]:
    """A different valid HMM with the same pairwise predictor at time gap `gap`: (Õ, T̃_g) = (OR, R⁻¹ diag(π) T^g
    R⁻ᵀ row-normalised), R = exp(θA) for the generator A (`_generators`: rotations, column mixings) and sign whose
    largest θ keeping Õ and T̃_g non-negative (bisection, up to π/4) moves O most; θ is `margin` of that. Returns
    O, T (the g-step transition T̃_g), pi, R, angle (θ) and rotation (whether R is a rotation)."""
    M = pi[:, None] * torch.linalg.matrix_power(T, gap)

    def valid(R: Tensor) -> bool:
        Ot, Tt, pt = alternative_for(O, M, R)
        return bool((Ot >= 0).all() and (Tt >= 0).all() and (pt > 0).all())

    best: Optional[tuple[float, float, Tensor, bool]] = None
    for A, rotation in _generators(O.shape[1], planes, seed):
        for sign in (1.0, -1.0):
            lo, hi = 0.0, math.pi / 4
            if valid(torch.linalg.matrix_exp(hi * sign * A)):
                lo = hi
            else:
                for _ in range(40):
                    mid = (lo + hi) / 2
                    lo, hi = (mid, hi) if valid(torch.linalg.matrix_exp(mid * sign * A)) else (lo, mid)
            theta = margin * lo
            R = torch.linalg.matrix_exp(theta * sign * A)
            moved = float((O @ R - O).abs().max())
            if valid(R) and (best is None or moved > best[0]):
                best = (moved, theta, R, rotation)
    moved, theta, R, rotation = best if best is not None else (0.0, 0.0, torch.eye(O.shape[1], dtype=O.dtype), True)
    Ot, Tt, pt = alternative_for(O, M, R)
    return {"O": Ot, "T": Tt, "pi": pt, "R": R, "angle": theta, "rotation": rotation}


def pairwise_predictor(
    O: Float[Tensor, "obs hidden"], T: Float[Tensor, "hidden hidden"], pi: Float[Tensor, "hidden"], t1: int, t2: int
) -> Float[Tensor, "obs obs"]:
    """P(x_{t2} | x_{t1}) [x_{t1}, x_{t2}] of the stationary HMM (T: the one-step transition, or the g-step
    one with t2 − t1 = ±1): rows of O diag(π) T^g Oᵀ normalised, transposed first where t2 < t1."""
    joint = O @ (pi[:, None] * torch.linalg.matrix_power(T, abs(t2 - t1))) @ O.T
    joint = joint if t2 > t1 else joint.T
    return joint / joint.sum(1, keepdim=True)


# ---- reading the model ---------------------------------------------------------------------------------


def _at(logits: Tensor, n_ctx: int, pos: int) -> Tensor:
    """The answer distributions at absolute position `pos`, float64 (models may answer at the last few only)."""
    if logits.shape[1] < n_ctx - pos:
        raise ProbeError(
            f"probe {NAME!r} reads the answer at position {pos}; the model answers at the last "
            f"{logits.shape[1]} of {n_ctx} positions only"
        )
    return logits[:, pos - n_ctx].double().softmax(-1)


def joints(view: View) -> tuple[Tensor, Tensor, tuple[int, ...]]:
    """(the model's joint, the exact one, their axes' positions) on the listed inputs (module docstring)."""
    cfg = view.task.cfg
    batch, logits = view.batch("all"), view.logits("all")
    d, L, n_ctx = cfg.d, cfg.length, view.task.spec.n_ctx
    O, pi = batch.truth["emission"].double().cpu(), batch.truth["hidden_stationary"].double().cpu()
    optimal = batch.truth["optimal"].double().cpu()
    p1 = O @ pi
    if cfg.objective == "mlm":
        if len(logits) != d + d * d:
            raise ProbeError(f"probe {NAME!r} reads {d + d * d} listed inputs, got {len(logits)}")
        model2, model3 = _at(logits[:d], n_ctx, L + cfg.t2).cpu(), _at(logits[d:], n_ctx, L + cfg.t3).cpu()
        exact2, exact3 = optimal[:d, cfg.t2], optimal[d:, cfg.t3]
        chain = lambda two, three: p1[:, None, None] * two[:, :, None] * three.view(d, d, d)  # noqa: E731
        return chain(model2, model3), chain(exact2, exact3), (cfg.t1, cfg.t2, cfg.t3)
    model, exact = _at(logits, n_ctx, n_ctx - 1).cpu(), optimal[:, -1]
    shape = (d, d) if cfg.objective == "pairwise" else (d, d, d)
    return (p1[:, None] * model).view(shape), (p1[:, None] * exact).view(shape), cfg.positions


def errors(rec: dict[str, Tensor], O: Tensor, T: Tensor, pi: Tensor, prefix: str = "") -> dict[str, float]:
    """Max and relative Frobenius errors of a recovery against the truth (T to the recovery's power)."""
    Tg = torch.linalg.matrix_power(T, int(rec["power"]))
    out = {
        "O_err": float((rec["O"] - O).abs().max()),
        "T_err": float((rec["T"] - Tg).abs().max()),
        "pi_err": float((rec["pi"] - pi).abs().max()),
        "O_rel_err": float((rec["O"] - O).norm() / O.norm()),
        "T_rel_err": float((rec["T"] - Tg).norm() / Tg.norm()),
    }
    return {prefix + k: v if math.isfinite(v) else math.nan for k, v in out.items()}


_FLOORS: dict[bytes, dict[str, float]] = {}  # the exact predictor's recovery, the same at every checkpoint


def floor(exact: Tensor, times: tuple[int, ...], O: Tensor, T: Tensor, pi: Tensor) -> dict[str, float]:
    """floor_O_err, floor_T_err, floor_cp_fit: the recovery from the exact joint (computed once per joint)."""
    key = exact.numpy().tobytes() + repr(times).encode()
    if key not in _FLOORS:
        weights, factors, fit = cp_decompose(exact, O.shape[1])
        found = errors(recover(weights, factors, times, O), O, T, pi)
        if len(_FLOORS) > 16:
            _FLOORS.clear()
        _FLOORS[key] = {"floor_O_err": found["O_err"], "floor_T_err": found["T_err"], "floor_cp_fit": fit}
    return _FLOORS[key]


# ---- how it shows itself: summary lines, report section, W&B plots ------------------------------------


def summary(tl: "Timeline", task: Any) -> list[str]:
    m = tl.metrics.get(NAME)
    if not m or not tl.steps:
        return []
    last, g = tl.steps[-1], int(m["T_power"][-1])
    Tg = "T" if g == 1 else f"T^{g}"
    if "alt_O_diff" in m:
        how = "a rotation" if m["alt_rotation"][-1] else "a mixing of two states"
        return [
            f"{NAME} pairwise: not identifiable: another valid HMM (Õ = OR, R {how}) is {m['alt_O_diff'][-1]:.3g} "
            f"from O and {m['alt_T_diff'][-1]:.3g} from {Tg} with the same predictor (to {m['alt_pred_diff'][-1]:.1g}); "
            f"at step {last} the model's predictor is {m['err_true'][-1]:.3g} from the true HMM's and "
            f"{m['err_alt'][-1]:.3g} from the other's"
        ]
    objective = task.cfg.objective if task is not None else "triplet"
    margin = m["kruskal_margin"][-1]
    unique = "unknown" if math.isnan(margin) else f"{margin:+.0f}, {'unique' if margin >= 0 else 'not guaranteed'}"
    within = formation_step(tl.steps, [-v for v in m["O_err"]], -0.05)
    within_text = f"from step {within}" if within is not None else "not reached"
    # a recovery that failed (its decomposition not finite) is recorded as NaN: say so, not "nan"
    err = lambda key, spec: format(m[key][-1], spec) if math.isfinite(m[key][-1]) else "— (no recovery)"  # noqa: E731
    return [
        f"{NAME} {objective}: at step {last} O recovered to {err('O_err', '.3g')} (max abs), {Tg} to "
        f"{err('T_err', '.3g')}; the exact predictor gives O {err('floor_O_err', '.2g')}, {Tg} {err('floor_T_err', '.2g')} "
        f"(Kruskal margin {unique}); O within 0.05 {within_text}; KL {m['kl_joint'][-1]:.3g}"
    ]


def o_hat(m: dict[str, list[float]], i: int = -1) -> Optional[Tensor]:
    """The recovered emission matrix recorded at checkpoint i (None where it was not recorded)."""
    keys = [k for k in m if k.startswith("O_hat/x")]
    if not keys:
        return None
    d = 1 + max(int(k[7:].split("h")[0]) for k in keys)
    k = 1 + max(int(k.split("h")[-1]) for k in keys)
    return torch.tensor([[m[f"O_hat/x{x}h{h}"][i] for h in range(k)] for x in range(d)])


ERRORS = {"O_err": ("O", "tab:blue"), "T_err": ("T", "tab:orange"), "pi_err": ("π", "tab:green")}


def figure(tl: "Timeline", task: Any) -> Optional[Figure]:
    """Left: the recovery errors over checkpoints, the exact predictor's as dashed floors (and, for pairwise, how
    far the alternative HMM lies: as far as O can be wrong with a perfect predictor). Right: the true and the
    recovered emission matrices at the last checkpoint."""
    m = tl.metrics.get(NAME, {})
    if not set(ERRORS) <= set(m) or not tl.steps:
        return None
    recovered = o_hat(m)
    true = getattr(task, "emission", None)
    panels = 1 + (recovered is not None) + (recovered is not None and true is not None)
    fig, axes = new_figure(1, panels, height=3.4, width=5 + 3 * (panels - 1))
    ax, g = axes[0, 0], int(m["T_power"][-1])
    for key, (label, colour) in ERRORS.items():
        label = f"{label}^{g}" if key == "T_err" and g > 1 else label
        ax.plot(tl.steps, [max(v, 1e-12) for v in m[key]], color=colour, label=f"{label} (max abs error)")
    for key, colour in (("floor_O_err", "tab:blue"), ("floor_T_err", "tab:orange")):
        ax.axhline(
            max(m[key][-1], 1e-12), color=colour, linestyle="--", linewidth=0.9, label=f"exact predictor: {key[6]}"
        )
    if "alt_O_diff" in m:
        ax.axhline(m["alt_O_diff"][-1], color="tab:red", linestyle=":", label="other HMM, same predictor: |Õ − O|")
    ax.set_yscale("log")
    ax.set_ylabel("recovery error")
    ax.legend(fontsize=7)
    mark_drop(ax, tl.loss_drop_step)
    steps_axis(ax)
    shown = [("true O", true.double() if true is not None else None), (f"recovered Ô (step {tl.steps[-1]})", recovered)]
    for ax, (title, matrix) in zip(axes[0, 1:], [(t, M) for t, M in shown if M is not None]):
        image = ax.imshow(matrix.numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(matrix.shape[1]))
        ax.set_yticks(range(matrix.shape[0]))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("hidden state h")
        ax.set_ylabel("observation x")
    if panels > 1:
        fig.colorbar(image, ax=list(axes[0, 1:]), shrink=0.8, label="P(x | h)")
    return fig


def wandb_plots(tl: "Timeline", logger: Any) -> None:
    m = tl.metrics.get(NAME, {})
    series = {k: m[k] for k in ("O_err", "T_err", "pi_err", "floor_O_err", "floor_T_err") if k in m}
    if series:
        logger.line_series(
            f"plots/{NAME}", tl.steps, series, "HMM parameters recovered from the predictor: max abs error", "step"
        )


SECTION = Section(
    NAME,
    "HMM identifiability (masked prediction)",
    "Left: how far the HMM's emission O, transition T (to the power g of the positions' gap) and "
    "stationary distribution π, read back from the model's predictor by a rank-k CP decomposition (Liu "
    "et al. 2022), lie from the truth at each checkpoint; dashed, the same from the exact optimal "
    "predictor: near 0 where the task identifies the HMM (triplet), large where it does not (pairwise: "
    "the dotted line is how far a different HMM (OR, ...) with the very same predictor lies from O). "
    "Right: the true and the recovered emission matrices at the last checkpoint, hidden states in the "
    "true order.",
    figure,
)


@register(
    NAME,
    reads={"all": no_hooks},
    truth=TRUTH,
    threshold=float("inf"),
    summary=summary,
    section=SECTION,
    wandb=wandb_plots,
)
def hmm_identifiability(view: View) -> ProbeResult:
    truth = view.batch("all").truth
    O, T = truth["emission"].double().cpu(), truth["hidden_transition"].double().cpu()
    pi = truth["hidden_stationary"].double().cpu()
    model, exact, times = joints(view)
    d, k = O.shape
    weights, factors, fit = cp_decompose(model, k)
    rec = recover(weights, factors, times, O)
    q = exact.clamp_min(1e-300)
    kl = float((exact * (q.log() - model.clamp_min(1e-300).log())).sum())
    metrics = {"kl_joint": max(kl, 0.0), "cp_fit": fit}  # (rounding can make a perfect model's KL −1e-12)
    metrics |= errors(rec, O, T, pi) | {"T_power": float(rec["power"])}
    metrics |= floor(exact, times, O, T, pi)
    if len(times) == 3:
        margin = kruskal_margin(hmm_factors(O, T, pi, times)[1])
        metrics["kruskal_margin"] = math.nan if margin is None else float(margin)
    else:
        t1, t2 = times
        gap, step = abs(t2 - t1), (0, 1) if t2 > t1 else (1, 0)
        alt = rotated_alternative(O, T, pi, gap)
        true_pred, predicted = pairwise_predictor(O, T, pi, t1, t2), model / model.sum(1, keepdim=True)
        alt_pred = pairwise_predictor(alt["O"], alt["T"], alt["pi"], *step)  # alt["T"] is the g-step transition
        Tg = torch.linalg.matrix_power(T, gap)
        metrics |= {
            "alt_O_diff": float((alt["O"] - O).abs().max()),
            "alt_O_rel_diff": float((alt["O"] - O).norm() / O.norm()),
            "alt_T_diff": float((alt["T"] - Tg).abs().max()),
            "alt_pred_diff": float((alt_pred - true_pred).abs().max()),
            "alt_angle": float(alt["angle"]),
            "alt_rotation": float(alt["rotation"]),
            "err_true": float((predicted - true_pred).abs().max()),
            "err_alt": float((predicted - alt_pred).abs().max()),
        }
    if d * k <= MAX_ENTRIES:
        metrics |= {f"O_hat/x{i}h{h}": float(rec["O"][i, h]) for i in range(d) for h in range(k)}
    return ProbeResult(NAME, None, metrics, {"O_hat": rec["O"], "T_hat": rec["T"], "pi_hat": rec["pi"]})
