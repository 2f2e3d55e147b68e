"""Masked prediction on a hidden Markov model (Liu, Hsu, Ravikumar, Risteski 2022, "Masked prediction tasks:
a parameter identifiability view"): which masked tasks let the optimal predictor reveal the HMM?

The HMM has k hidden states and d observations: transition T (k×k, row h is P(h_{t+1} | h_t = h)) and
emission O (d×k, column h is P(x_t | h_t = h)), both drawn once from the task seed; every sequence starts from
T's stationary distribution π, so every window of the chain has the same law wherever it sits. Objectives:

- `pairwise`: the model sees x_{t1} alone and predicts x_{t2}. Its optimum P(x_{t2} | x_{t1}) is the matrix
  O diag(π) T^g Oᵀ (g = t2 − t1 > 0; for t2 < t1 the transpose) normalised by rows, and a rank-k matrix
  factorisation is not unique: (Õ, J̃) = (OR, R⁻¹ diag(π) T^g R⁻ᵀ) gives the same matrix for any invertible R
  with 1ᵀR = 1ᵀ, a valid HMM for small rotations R fixing the all-ones vector, or small mixings of two states'
  emissions (the probe hmm_identifiability builds one). Not identifiable.
- `triplet`: the model sees x_{t1} alone and predicts the pair (x_{t2}, x_{t3}) as one class x_{t2}·d + x_{t3}
  of d² (so d_vocab_out = d²), whose optimum is the joint conditional E[x_{t2} ⊗ x_{t3} | x_{t1}]. Weighted by
  P(x_{t1}) it is the joint P(x_{t1}, x_{t2}, x_{t3}) = Σ_h π_h a_h ⊗ b_h ⊗ c_h: given the hidden state h at the
  middle time m of the three positions, the three tokens are independent, and the factor of the token at time
  t is O (Tᵀ)^{t−m} for t > m (P(x_t | h_m): forward through T), O itself for t = m, and O diag(π) T^{m−t}
  diag(π)⁻¹ for t < m (backward through the reversed chain P(h_t | h_m)). For the default positions
  (t1, t2, t3) = (0, 1, 2): a = O diag(π) T diag(π)⁻¹, b = O, c = O Tᵀ, weights π; every column sums to 1.
  With O of full column rank and T invertible (generic draws with d ≥ k), Kruskal's condition
  k_a + k_b + k_c ≥ 2k + 2 holds, the rank-k CP decomposition is unique up to permutation and scaling, and
  (O, T) are identifiable: O from the middle factor, T from O⁺ and a neighbouring factor (Liu et al.: any
  order of the three positions).
- `mlm`: BERT-style masked language modelling: every position is masked independently with probability
  `mask_ratio` (where none is, the one with the smallest draw is), and the model predicts each masked token
  from all visible ones. Its optimum at a masked position is the marginal P(x_t | visible tokens), by
  forward–backward. How much masking is enough? Only masks that hide all but x_{t1} (and all but x_{t1}, x_{t2})
  show the model the conditionals from which the triplet tensor is assembled by the chain rule,
  P(x_{t1}, x_{t2}, x_{t3}) = P(x_{t1}) P(x_{t2} | x_{t1}) P(x_{t3} | x_{t1}, x_{t2}).

In pairwise and triplet modes the model sees ONLY x_{t1} (every other position masked): the tensor W of
Liu et al. is built from the conditional given x_{t1} alone, and a model that also saw other tokens would
learn a different conditional, from which W could not be read. Training uses cross-entropy on the one-hot
target; its optimum, like that of the squared loss ‖f(x) − e_target‖² that Liu et al. analyse, is the
conditional distribution of the target given the input (both are proper scoring rules), so the trained
predictor estimates the same E[one-hot target | input].

Token layout. Observations are tokens 0..d−1, then MASK (id d, shown "_") and QUERY (id d+1, shown "?"). A
sequence is the L observation slots, each x_t or MASK, then the question: for pairwise and triplet one QUERY
(n_ctx = L + 1) where the answer is scored; for mlm L QUERY tokens (n_ctx = 2L), the one at L + t answering
slot t, scored where slot t is masked. The questions come after the slots because the models are causal: a
position sees only what precedes it, and every answer must see every visible token.

Truth (`hmm_truth`): `emission` O, `hidden_transition` T, `hidden_stationary` π, `hidden`, the sampled chain
h_t under each slot (the latent `hidden`), and, in evaluation batches, `optimal`, the exact optimal predictor at
the answer positions (the last 1 or L), computed from O, T, π.
`enumerate("all")` lists the inputs the probe hmm_identifiability reads: the d sequences with x_{t1} alone
visible (for pairwise and triplet every input the task has), and for mlm also the d² with x_{t1} and x_{t2}
visible; their targets are the most likely answers (every listed input has a distribution of answers).

Emission options (`emission`): "generic", columns iid Dirichlet(`concentration`): full column rank when d ≥ k,
Kruskal's condition holds (with d < k it cannot: O has rank d < k); "repeated": the same, then hidden state 1
emits exactly as state 0 (O has rank k − 1), which breaks Kruskal's condition and T's recovery through O⁺.

Shape names beyond base.py's: `obs` (d), `hidden` (k), `answer` (the answer positions), `slot` (the L slots).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Optional

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.config import MAX_SEED, check, check_fields, doc, validates_itself
from mechsynth.tasks.base import TASKS, Batch, Latent, Task, TaskSpec, align, task_generator
from mechsynth.tasks.markov_icl import dirichlet, stationary

MAX_LENGTH = 2**12  # forward–backward runs one step per position


@validates_itself
@dataclass(frozen=True)
class HMMMaskedConfig:
    k: int = doc("hidden states", 3, lo=2, hi=32, why="the probe's CP decomposition has rank k")
    d: int = doc(
        "observations (tokens 0..d-1)",
        8,
        lo=2,
        hi=64,
        why="triplet answers are d² classes; the probe reads a d×d×d tensor",
    )
    length: int = doc("L, observation slots per sequence", 8, lo=2, hi=MAX_LENGTH, why="forward–backward steps")
    objective: Literal["pairwise", "triplet", "mlm"] = doc(
        "predict x_{t2} from x_{t1}; the pair (x_{t2}, x_{t3}) from x_{t1}; or every masked token from the "
        "visible ones (BERT-style)",
        "triplet",
    )
    t1: int = doc(
        "the visible position (pairwise, triplet; mlm: the probe's)", 0, lo=0, hi=MAX_LENGTH - 1, why="< length"
    )
    t2: int = doc("the (first) predicted position", 1, lo=0, hi=MAX_LENGTH - 1, why="< length")
    t3: int = doc(
        "the second predicted position (triplet; mlm: the probe's; unused by pairwise)",
        2,
        lo=0,
        hi=MAX_LENGTH - 1,
        why="< length",
    )
    mask_ratio: float = doc(
        "mlm: each position is masked with this probability, in (0, 1] (where none is, the one "
        "with the smallest draw is)",
        0.5,
    )
    emission: Literal["generic", "repeated"] = doc(
        "O's columns iid Dirichlet (Kruskal's condition holds when d ≥ k), or the same with hidden state 1 "
        "emitting exactly as state 0 (rank k-1: it fails)",
        "generic",
    )
    concentration: float = doc(
        "Dirichlet concentration of O's columns and T's rows, in (0, 10**4]: small = sharp, large = near uniform", 1.0
    )
    seed: int = doc("seed of O and T", 0, lo=0, hi=MAX_SEED, why="torch seeds are 64-bit")

    def __post_init__(self):
        check_fields(self)
        for name in ("t1", "t2") + (("t3",) if self.objective != "pairwise" else ()):
            check(
                getattr(self, name) < self.length,
                name,
                f"must be < length={self.length}, got {getattr(self, name)}; allowed: 0 to {self.length - 1}",
            )
        used = self.positions
        check(
            len(set(used)) == len(used),
            "t2" if self.t2 == self.t1 else "t3",
            f"the positions must be distinct, got {', '.join(f't{i + 1}={t}' for i, t in enumerate(used))}",
        )
        check(0 < self.mask_ratio <= 1, "mask_ratio", f"must be in (0, 1], got {self.mask_ratio}")
        check(0 < self.concentration <= 1e4, "concentration", f"must be in (0, 10**4], got {self.concentration}")

    @property
    def positions(self) -> tuple[int, ...]:
        """(t1, t2) for pairwise, else (t1, t2, t3): the positions of the probe's tensor, input first."""
        return (self.t1, self.t2) if self.objective == "pairwise" else (self.t1, self.t2, self.t3)

    @property
    def d_out(self) -> int:
        return self.d * self.d if self.objective == "triplet" else self.d

    @property
    def n_answers(self) -> int:
        """Answer positions at the end of a sequence: L for mlm, else 1."""
        return self.length if self.objective == "mlm" else 1

    # For the memory estimate (mechsynth/training/budget.py) before anything is built.
    context_field: ClassVar[str] = "task.length"

    def sample_bytes(self, n_seqs: int, split: str) -> tuple[int, int]:
        """(bytes of `sample(n_seqs, split=split)`'s batch, peak bytes while making it): int64 tokens and targets
        and a bool mask, the int64 hidden chain; in evaluation batches `optimal` (float32, answers × d_out); the
        draws, hidden states and, for mlm, forward–backward's float64 messages."""
        n_ctx = self.length + self.n_answers
        kept = n_ctx * 17 + self.length * 8 + (0 if split == "train" else self.n_answers * self.d_out * 4)
        work = self.length * (3 * 4 + 2 * 8) + (
            0 if split == "train" or self.objective != "mlm" else self.length * (4 * self.k + self.d) * 8
        )
        return n_seqs * kept, n_seqs * (kept + work)


def window_joint(
    O: Float[Tensor, "obs hidden"], T: Float[Tensor, "hidden hidden"], pi: Float[Tensor, "hidden"], times: Sequence[int]
) -> Tensor:
    """P(x_{times[0]}, x_{times[1]}, ...) of the stationary HMM as a tensor [obs] * len(times), axes in the order
    of `times` (distinct): walked forward in time, P(x_a, .., h_b) = P(x_a, .., h_a) T^{b−a} ∘ O[x_b]."""
    order = sorted(range(len(times)), key=lambda i: times[i])
    joint = O * pi  # [x, h]: P(x_first, h_first)
    for prev, i in zip(order, order[1:]):
        step = torch.linalg.matrix_power(T, times[i] - times[prev])
        joint = (joint @ step)[..., None, :] * O  # [.., x, h]: append x at the new time
    joint = joint.sum(-1)
    return joint.permute(*[order.index(i) for i in range(len(times))])


def posterior_predictive(
    O: Float[Tensor, "obs hidden"],
    T: Float[Tensor, "hidden hidden"],
    pi: Float[Tensor, "hidden"],
    slots: Int[Tensor, "batch pos"],
    visible: Tensor,
) -> Float[Tensor, "batch pos obs"]:
    """P(x_t | the visible x's) at every slot t by forward–backward (a masked slot's emission likelihood is 1),
    messages normalised at each step; at a visible slot, the prediction of x_t from the other visible slots."""
    like = torch.where(visible[..., None], O[slots.clamp_max(O.shape[0] - 1)], torch.ones_like(O[:1]))  # [b, t, h]
    L = slots.shape[1]
    alpha, beta = [pi * like[:, 0]], [torch.ones_like(like[:, 0])]
    for t in range(1, L):
        a = (alpha[-1] @ T) * like[:, t]
        alpha.append(a / a.sum(-1, keepdim=True))
    for t in range(L - 2, -1, -1):
        b = (like[:, t + 1] * beta[0]) @ T.T
        beta.insert(0, b / b.sum(-1, keepdim=True))
    alpha[0] = alpha[0] / alpha[0].sum(-1, keepdim=True)
    # A slot's own likelihood sits in alpha; divide it back out to predict the slot itself.
    gamma = torch.stack(alpha, 1) * torch.stack(beta, 1) / like
    gamma = gamma / gamma.sum(-1, keepdim=True)
    return gamma @ O.T


def hmm_truth(
    emission: Float[Tensor, "obs hidden"],
    hidden_transition: Float[Tensor, "hidden hidden"],
    hidden_stationary: Float[Tensor, "hidden"],
    optimal: Optional[Float[Tensor, "batch answer d_vocab_out"]] = None,
    hidden: Optional[Int[Tensor, "batch slot"]] = None,
) -> dict[str, Any]:
    """Batch.truth of hmm_masked: `emission` O [obs, hidden] (column h: P(x | h)); `hidden_transition` T
    [hidden, hidden] (row h: P(h_{t+1} | h_t = h)); `hidden_stationary` π [hidden]; in evaluation batches
    `optimal` [batch, answer, d_vocab_out], the exact optimal predictor (the conditional distribution of the
    answer given the visible tokens) at the last `answer` positions (1, or L for mlm), zero where unscored; in
    sampled batches (not `enumerate`'s, whose inputs are listed, not drawn) `hidden` [batch, slot], the hidden
    state h_t (0..k-1) under each of the L observation slots."""
    out = {"emission": emission, "hidden_transition": hidden_transition, "hidden_stationary": hidden_stationary}
    return out | ({} if optimal is None else {"optimal": optimal}) | ({} if hidden is None else {"hidden": hidden})


@TASKS.register("hmm_masked")
class HMMMasked(Task):
    Config = HMMMaskedConfig
    truth_keys = ("emission", "hidden_transition", "hidden_stationary", "optimal", "hidden")  # hmm_truth

    @property
    def latents(self) -> tuple[Latent, ...]:  # type: ignore[override]
        """The hidden state h_t at each of the L slots (not under the answer positions after them)."""
        return (
            Latent(
                "hidden",
                "categorical",
                "hidden",
                self.cfg.k,
                about="the HMM's hidden state h_t under each slot, which the optimal predictor's posterior tracks",
            ),
        )

    def __init__(self, cfg: HMMMaskedConfig):
        super().__init__(cfg)
        g = task_generator(cfg.seed)
        O = dirichlet(cfg.concentration, (cfg.k, cfg.d), g, "cpu").double().T  # [obs, hidden]
        if cfg.emission == "repeated":
            O[:, 1] = O[:, 0]
        T = dirichlet(cfg.concentration, (cfg.k, cfg.k), g, "cpu").double()
        O, T = O / O.sum(0), T / T.sum(1, keepdim=True)
        self.emission, self.transition = O, T  # float64, on the CPU
        self.stationary = stationary(T[None])[0]
        # pairwise / triplet: the answer's distribution for each x_{t1}, the only visible token
        joint = window_joint(O, T, self.stationary, cfg.positions)
        self.table = (joint / joint.sum(tuple(range(1, joint.dim())), keepdim=True)).reshape(cfg.d, -1)
        self._tables: dict[torch.device, tuple[Tensor, ...]] = {}

    @property
    def mask_token(self) -> int:
        return self.cfg.d

    @property
    def query_token(self) -> int:
        return self.cfg.d + 1

    @property
    def spec(self) -> TaskSpec:
        d = self.cfg.d
        obs = tuple(str(i) for i in range(d))
        out = tuple(f"{i},{j}" for i in range(d) for j in range(d)) if self.cfg.objective == "triplet" else obs
        return TaskSpec(
            d_vocab=d + 2,
            d_vocab_out=self.cfg.d_out,
            n_ctx=self.cfg.length + self.cfg.n_answers,
            token_names=obs + ("_", "?"),
            target_names=out,
        )

    def tables(self, device: torch.device | str) -> tuple[Tensor, ...]:
        """(O, T, π as float32; the cumulative sums of π, T's rows, O's columns; the answer table) on `device`."""
        device = torch.empty(0, device=device).device
        if device not in self._tables:
            O, T, pi = self.emission, self.transition, self.stationary
            self._tables[device] = tuple(
                t.float().to(device) for t in (O, T, pi, pi.cumsum(0), T.cumsum(1), O.T.cumsum(1), self.table)
            )
        return self._tables[device]

    def truth(
        self, device: torch.device | str, optimal: Optional[Tensor] = None, hidden: Optional[Tensor] = None
    ) -> dict[str, Any]:
        O, T, pi = self.tables(device)[:3]
        return hmm_truth(O, T, pi, optimal, hidden)

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        """The chain and its emissions from uniforms drawn in this order: the hidden steps [batch, L], the
        emissions [batch, L], and for mlm the mask draws [batch, L]."""
        self.check_split(split)
        cfg, B, L = self.cfg, batch_size, self.cfg.length
        _, _, _, pi_cdf, T_cdf, O_cdf, _ = self.tables(device)
        u_h = torch.rand(B, L, generator=generator, device=device)
        u_x = torch.rand(B, L, generator=generator, device=device)
        h = [(pi_cdf < u_h[:, :1]).sum(-1).clamp_max(cfg.k - 1)]
        for t in range(1, L):
            h.append((T_cdf[h[-1]] < u_h[:, t : t + 1]).sum(-1).clamp_max(cfg.k - 1))
        hidden = torch.stack(h, 1)
        x = (O_cdf[hidden] < u_x[..., None]).sum(-1).clamp_max(cfg.d - 1)  # [batch, L]
        if cfg.objective == "mlm":
            u_m = torch.rand(B, L, generator=generator, device=device)
            masked = (u_m < cfg.mask_ratio) | (torch.arange(L, device=device) == u_m.argmin(1, keepdim=True))
            return self.batch(x, ~masked, x, split != "train", hidden)
        visible = torch.zeros(B, L, dtype=torch.bool, device=device)
        visible[:, cfg.t1] = True
        answer = x[:, cfg.t2] * cfg.d + x[:, cfg.t3] if cfg.objective == "triplet" else x[:, cfg.t2]
        return self.batch(x, visible, answer[:, None], split != "train", hidden)

    def batch(
        self,
        x: Int[Tensor, "batch pos"],
        visible: Tensor,
        answers: Int[Tensor, "batch answer"],
        with_optimal: bool = True,
        hidden: Optional[Int[Tensor, "batch pos"]] = None,
    ) -> Batch:
        """The sequences of slots `x` shown where `visible` (else MASK), then the question(s); `answers` are the
        targets at the answer positions (mlm: the slots themselves, scored where masked); `hidden`, the chain
        under the slots, where it was drawn."""
        cfg = self.cfg
        B, P = x.shape[0], cfg.n_answers
        slots = torch.where(visible, x, self.mask_token)
        tokens = torch.cat([slots, torch.full((B, P), self.query_token, dtype=x.dtype, device=x.device)], 1)
        targets = torch.cat([torch.zeros_like(slots), answers], 1)
        scored = ~visible if cfg.objective == "mlm" else torch.ones(B, 1, dtype=torch.bool, device=x.device)
        mask = torch.cat([torch.zeros_like(visible), scored], 1)
        optimal = self.optimal(slots) * scored[..., None] if with_optimal else None
        return Batch(tokens, targets, mask, self.truth(x.device, optimal, hidden))

    def optimal(self, slots: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch answer d_vocab_out"]:
        """The exact optimal predictor at the answer positions for these slots (MASK where hidden)."""
        cfg = self.cfg
        if cfg.objective != "mlm":
            return self.tables(slots.device)[-1][slots[:, cfg.t1].clamp_max(cfg.d - 1)][:, None]
        exact = torch.float32 if slots.device.type == "mps" else torch.float64  # (MPS has no float64)
        O, T, pi = (t.to(slots.device, exact) for t in (self.emission, self.transition, self.stationary))
        return posterior_predictive(O, T, pi, slots, slots != self.mask_token).float()

    def enumerate(self, split: str) -> Optional[Batch]:
        """For "all": the inputs the probe hmm_identifiability reads, on the CPU: the d sequences with x_{t1} = 0..d−1
        alone visible, then for mlm the d² with (x_{t1}, x_{t2}) visible (x_{t1}-major); the targets are each
        input's most likely answer. Other splits: None (the task samples)."""
        if split != "all":
            return None
        cfg, d = self.cfg, self.cfg.d
        x = torch.zeros(d, cfg.length, dtype=torch.long)
        x[:, cfg.t1] = torch.arange(d)
        visible = torch.zeros(d, cfg.length, dtype=torch.bool)
        visible[:, cfg.t1] = True
        if cfg.objective == "mlm":
            pairs = torch.zeros(d * d, cfg.length, dtype=torch.long)
            pairs[:, cfg.t1], pairs[:, cfg.t2] = torch.arange(d).repeat_interleave(d), torch.arange(d).repeat(d)
            shown = torch.zeros(d * d, cfg.length, dtype=torch.bool)
            shown[:, [cfg.t1, cfg.t2]] = True
            x, visible = torch.cat([x, pairs]), torch.cat([visible, shown])
        slots = torch.where(visible, x, self.mask_token)
        answers = self.optimal(slots).argmax(-1)
        return self.batch(x, visible, answers)

    def metrics(self, logits, batch) -> dict[str, float]:
        """Adds, where the batch carries `optimal`: kl_optimal, KL(optimal ‖ model) averaged over scored answers,
        and optimal_loss, the optimal predictor's entropy there: the lowest expected loss (loss − optimal_loss
        estimates kl_optimal)."""
        out = super().metrics(logits, batch)
        if "optimal" not in batch.truth:  # a fixed training set's batches carry no truth
            return out
        logits, _, mask = align(logits, batch)
        q = batch.truth["optimal"]
        P = q.shape[1]
        scored = mask[:, -P:]
        q, logp = q[scored].double(), logits[:, -P:][scored].double().log_softmax(-1)
        qlogq = torch.where(q > 0, q * q.clamp_min(1e-300).log(), torch.zeros_like(q)).sum(-1)
        out["kl_optimal"] = float((qlogq - (q * logp).sum(-1)).mean())
        out["optimal_loss"] = float(-qlogq.mean())
        return out
