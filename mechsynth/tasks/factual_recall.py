"""Factual recall (Nichani, Lee, Bietti 2024, "Understanding factual recall in transformers via associative
memories"): a sequence names a subject and a relation among noise; the answer is a fixed fact about them.

A hidden fact table, drawn once from the task seed, gives each (subject s, relation r) an answer a*(s, r),
drawn uniformly from relation r's own answer set of D answers (the sets of different relations are disjoint:
a relation's answers are a "type"). Nothing in a sequence says what the answer is; the model has to store
the S·R facts in its weights (their associative memories: attention gathers the subject and the relation
to the end position, the MLP or the value matrices map the pair to its answer).

Layout (their task.py and run.py). Input tokens, d_vocab = S + R + N + 1:

    0 .. S-1                subjects, s
    S .. S+R-1              relations, S + r
    S+R .. S+R+N-1          noise tokens (N = `noise`; unset: S + R, as their run.py)
    S+R+N                   the end token (their EOS)

Answers are output classes only (they never appear in the input), d_vocab_out = R·D: relation r's answer
set is D·r .. D·r + D - 1. A sequence is T = `length` tokens (their T = 32): positions 0 .. T-2 hold noise
tokens drawn uniformly, except the subject at one uniformly drawn position and the relation at another,
uniform over the remaining T-2; position T-1 is the end token, where the answer a*(s, r) is the target and
the only scored position. Subjects and relations are drawn uniformly.

Splits: "train" and "eval" draw from the same distribution. Factual recall is memorization: every
(subject, relation) pair is seen in training, and a held-out sequence differs from training ones only in
its noise tokens and positions. The inputs include random noise, so the task only samples (no `enumerate`).

Metrics: besides loss and acc, `type_acc`, the fraction of predictions in the right relation's answer set,
and `type_loss`, -log of the probability the model puts on that set (their sequential-learning.ipynb:
`rel_accuracy`, `rel_loss`). The paper's "sequential learning": a model first learns the answer's type from
the relation alone (type_acc near 1 while acc is near 1/D, loss near log D: "hallucination"), then the facts.

From their code: the vocabulary layout, the positions and the end token (task.py, `EOS_token=True`), the
default N = S + R and T = 32, and the fact table (run.py: `fact_dict`, for relation i S draws from
D·i .. D·(i+1)-1). Left out: task.py's Zipf weights of subjects and relations (`alpha`, `beta`: 0, uniform,
in all their runs) and its variant without an end token (the relation last). The draws are torch's, not JAX's.

Shape names beyond base.py's: `subject` (S), `relation` (R), `answer` (D, one relation's answer set).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Optional

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.config import MAX_CTX, MAX_SEED, check, check_fields, doc, validates_itself
from mechsynth.tasks.base import TASKS, Batch, Latent, Task, TaskSpec, align, task_generator

# Each part of the vocabulary; far beyond the paper's sweeps (S, R ≤ 512), and the embedding and the
# fact table stay within memory.
MAX_TOKENS = 2**20
MAX_FACTS = 2**24  # S·R entries of the fact table (int64: 128 MiB), drawn when the task is built


@validates_itself
@dataclass(frozen=True)
class FactualRecallConfig:
    subjects: int = doc(
        "S, the number of subjects (subject tokens)",
        64,
        lo=1,
        hi=MAX_TOKENS,
        why="a vocabulary part; with relations, S·R ≤ 2**24 facts",
    )
    relations: int = doc(
        "R, the number of relations (relation tokens)",
        4,
        lo=1,
        hi=MAX_TOKENS,
        why="a vocabulary part; with answers, R·D ≤ 2**20 output classes",
    )
    answers: int = doc(
        "D, the size of each relation's answer set; the sets are disjoint, so there are R·D answer classes",
        8,
        lo=1,
        hi=MAX_TOKENS,
        why="R·D ≤ 2**20 output classes",
    )
    noise: Optional[int] = doc(
        "N, the number of noise token types; unset = subjects + relations (as the paper's code)",
        None,
        lo=1,
        hi=MAX_TOKENS,
        why="a vocabulary part",
    )
    length: int = doc(
        "T, tokens per sequence, the end token included (the paper: 32); at least 3: the subject, "
        "the relation and the end token",
        32,
        lo=3,
        hi=MAX_CTX,
        why="attention costs T²",
    )
    seed: int = doc("seed of the fact table", 0, lo=0, hi=MAX_SEED, why="torch seeds are 64-bit")

    def __post_init__(self):
        check_fields(self)  # bounds first: S·R below never sees 2**64
        check(
            self.subjects * self.relations <= MAX_FACTS,
            "subjects",
            f"subjects · relations = {self.subjects * self.relations} facts is too many; allowed: ≤ 2**24 "
            "(the fact table is drawn in memory when the task is built)",
        )
        check(
            self.relations * self.answers <= MAX_TOKENS,
            "answers",
            f"relations · answers = {self.relations * self.answers} output classes is too many; allowed: ≤ 2**20",
        )

    @property
    def n_noise(self) -> int:
        """N: `noise`, or S + R where unset."""
        return self.noise if self.noise is not None else self.subjects + self.relations

    # For the memory estimate (mechsynth/training/budget.py) before anything is built.
    context_field: ClassVar[str] = "task.length"

    @property
    def fixed_bytes(self) -> int:
        """The fact table [S, R] and the answer sets [R, D], int64."""
        return (self.subjects * self.relations + self.relations * self.answers) * 8

    def sample_bytes(self, n_seqs: int, split: str) -> tuple[int, int]:
        """(bytes of `sample(n_seqs, split=split)`'s batch, peak bytes while making it)."""
        batch = n_seqs * (self.length * 19 + 4 * 8)  # int64 tokens, targets; bool mask, seen masks; 4 int64 vectors
        return batch, batch + n_seqs * (self.length * 8 + 4 * 8)  # the noise draw, index temporaries


def recall_truth(
    subject: Int[Tensor, "batch"],
    relation: Int[Tensor, "batch"],
    subject_pos: Int[Tensor, "batch"],
    relation_pos: Int[Tensor, "batch"],
    answer_set: Int[Tensor, "relation answer"],
    facts: Int[Tensor, "subject relation"],
    length: int,
) -> dict[str, Any]:
    """Batch.truth of factual_recall: `subject` [batch], each sequence's subject s (0..S-1; its token is s);
    `relation` [batch], its relation r (0..R-1; its token is S + r); `subject_pos` [batch] and `relation_pos`
    [batch], where they stand (distinct, both in 0..T-2); `answer_set` [relation, answer], row r the output
    classes of relation r's answers (D·r .. D·r + D - 1), so answer_set[relation] is each sequence's
    right type; `facts` [subject, relation], the whole fact table (target = facts[subject, relation]);
    `subject_seen` [batch, pos] and `relation_seen` [batch, pos], True from the subject's (relation's) position on
    (the sequences are `length` tokens): where a causal model can hold it."""
    at = torch.arange(length, device=subject_pos.device)
    return {
        "subject_seen": at >= subject_pos[:, None],
        "relation_seen": at >= relation_pos[:, None],
        "subject": subject,
        "relation": relation,
        "subject_pos": subject_pos,
        "relation_pos": relation_pos,
        "answer_set": answer_set,
        "facts": facts,
    }


@TASKS.register("factual_recall")
class FactualRecall(Task):
    Config = FactualRecallConfig
    truth_keys = (  # recall_truth
        "subject",
        "relation",
        "subject_pos",
        "relation_pos",
        "answer_set",
        "facts",
        "subject_seen",
        "relation_seen",
    )

    @property
    def latents(self) -> tuple[Latent, ...]:  # type: ignore[override]
        """The subject and the relation, from the positions where they stand on."""
        return (
            Latent(
                "subject",
                "categorical",
                "subject",
                self.cfg.subjects,
                where="subject_seen",
                about="the sequence's subject, which attention gathers to the end token (Nichani et al.)",
            ),
            Latent(
                "relation",
                "categorical",
                "relation",
                self.cfg.relations,
                where="relation_seen",
                about="the sequence's relation, gathered to the end token; alone it gives the answer's type",
            ),
        )

    patch_metric = "logit_diff"

    def __init__(self, cfg: FactualRecallConfig):
        super().__init__(cfg)
        S, R, D = cfg.subjects, cfg.relations, cfg.answers
        # For each (s, r) an answer uniform in relation r's set D·r .. D·r + D - 1.
        facts = D * torch.arange(R) + torch.randint(D, (S, R), generator=task_generator(cfg.seed))
        answer_set = torch.arange(R * D).view(R, D)
        self._tables: dict[torch.device, tuple[Tensor, Tensor]] = {torch.device("cpu"): (facts, answer_set)}

    @property
    def facts(self) -> Int[Tensor, "subject relation"]:
        """The fact table (on the CPU): facts[s, r] is the answer class of (s, r)."""
        return self._tables[torch.device("cpu")][0]

    @property
    def end_token(self) -> int:
        return self.cfg.subjects + self.cfg.relations + self.cfg.n_noise

    @cached_property
    def spec(self) -> TaskSpec:  # type: ignore[override]  # (cached: up to millions of token names)
        """Token names `s3` (subject 3), `r1` (relation 1), `n7` (noise type 7), `EOS`; answer class D·r + d
        is named `a{r}.{d}`, relation r's d-th answer."""
        cfg = self.cfg
        names = (
            tuple(f"s{i}" for i in range(cfg.subjects))
            + tuple(f"r{i}" for i in range(cfg.relations))
            + tuple(f"n{i}" for i in range(cfg.n_noise))
            + ("EOS",)
        )
        answers = tuple(f"a{r}.{d}" for r in range(cfg.relations) for d in range(cfg.answers))
        return TaskSpec(
            d_vocab=len(names), d_vocab_out=len(answers), n_ctx=cfg.length, token_names=names, target_names=answers
        )

    def tables(
        self, device: torch.device | str
    ) -> tuple[Int[Tensor, "subject relation"], Int[Tensor, "relation answer"]]:
        """(the fact table, the answer sets) on `device`, copied there once (the table is up to 128 MiB)."""
        device = torch.empty(0, device=device).device  # "cuda" and "cuda:0" are one device: one copy
        if device not in self._tables:
            facts, answer_set = self._tables[torch.device("cpu")]
            self._tables[device] = (facts.to(device), answer_set.to(device))
        return self._tables[device]

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        """Sequences with uniform subjects, relations, positions and noise. "train" and "eval" are the same
        distribution (recall is memorization: only noise and positions are new in held-out sequences).
        Drawn in this order: subjects, relations, subject positions, relation positions, noise."""
        self.check_split(split)
        cfg, B = self.cfg, batch_size
        S, R, T = cfg.subjects, cfg.relations, cfg.length
        facts, answer_set = self.tables(device)
        subject = torch.randint(S, (B,), generator=generator, device=device)
        relation = torch.randint(R, (B,), generator=generator, device=device)
        subject_pos = torch.randint(T - 1, (B,), generator=generator, device=device)
        relation_pos = torch.randint(T - 2, (B,), generator=generator, device=device)
        relation_pos = relation_pos + (relation_pos >= subject_pos).long()  # uniform over the other T-2
        tokens = S + R + torch.randint(cfg.n_noise, (B, T), generator=generator, device=device)
        rows = torch.arange(B, device=device)
        tokens[rows, subject_pos] = subject
        tokens[rows, relation_pos] = S + relation
        tokens[:, -1] = self.end_token
        targets = torch.zeros_like(tokens)
        targets[:, -1] = facts[subject, relation]
        mask = torch.zeros_like(tokens, dtype=torch.bool)
        mask[:, -1] = True
        return Batch(
            tokens, targets, mask, recall_truth(subject, relation, subject_pos, relation_pos, answer_set, facts, T)
        )

    def counterfactual(self, batch, generator, control=False) -> Optional[Batch]:
        """The subject swapped for one whose fact for the sequence's relation differs, uniform among those (any
        other subject where none does; the answer then stays). Checks every subject: O(batch · S). `control`:
        one noise token, at a uniform position that is neither subject, relation nor end, changed to a uniform
        other noise type (None where there is no such position or type)."""
        cfg, t, device = self.cfg, batch.truth, batch.tokens.device
        B, T, S = len(batch.tokens), cfg.length, cfg.subjects
        rows = torch.arange(B, device=device)
        tokens, subject = batch.tokens.clone(), t["subject"]
        if control:
            if T == 3 or cfg.n_noise == 1:
                return None
            lo, hi = t["subject_pos"].minimum(t["relation_pos"]), t["subject_pos"].maximum(t["relation_pos"])
            pos = torch.randint(T - 3, (B,), generator=generator).to(device)
            pos = pos + (pos >= lo).long()
            pos = pos + (pos >= hi).long()  # uniform over 0..T-2 but lo and hi
            shift = torch.randint(1, cfg.n_noise, (B,), generator=generator).to(device)
            noise = S + cfg.relations
            tokens[rows, pos] = noise + (tokens[rows, pos] - noise + shift) % cfg.n_noise
        else:
            facts = self.tables(device)[0][:, t["relation"]].T  # [batch, subject]: each subject's fact for the relation
            other = torch.arange(S, device=device) != subject[:, None]
            differs = other & (facts != facts[rows, subject, None])
            score = torch.rand(B, S, generator=generator).to(device) + other + differs
            subject = torch.where(other.any(-1), score.argmax(-1), subject)
            tokens[rows, t["subject_pos"]] = subject
        targets = batch.targets.clone()
        targets[:, -1] = self.tables(device)[0][subject, t["relation"]]
        truth = recall_truth(
            subject, t["relation"], t["subject_pos"], t["relation_pos"], t["answer_set"], t["facts"], T
        )
        return Batch(tokens, targets, batch.mask.clone(), truth)

    def metrics(self, logits: Float[Tensor, "batch out_pos d_vocab_out"], batch: Batch) -> dict[str, float]:
        """Adds type_acc, the fraction of predictions (argmax) in the right relation's answer set, and
        type_loss, -log of the probability on that set: the answer's type, learned before the facts."""
        out = super().metrics(logits, batch)
        logits, _, mask = align(logits, batch)
        allowed = batch.truth["answer_set"][batch.truth["relation"][mask.nonzero()[:, 0]]]  # [scored, answer]
        scored = logits[mask].float()  # [scored, d_vocab_out], rows in the order of mask.nonzero()
        out["type_acc"] = (allowed == scored.argmax(-1)[:, None]).any(-1).float().mean().item()
        out["type_loss"] = -scored.log_softmax(-1).gather(1, allowed).logsumexp(-1).mean().item()
        return out
