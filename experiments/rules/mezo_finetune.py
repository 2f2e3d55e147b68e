"""The claims of experiments/mezo_finetune.py and the rules that judge them.

Malladi et al. 2023, "Fine-tuning language models with just forward passes" (seed 004): MeZO, zeroth-order SGD
that regenerates its random direction from a seed, fine-tunes with the memory footprint of inference, and reaches
the performance of fine-tuning by backpropagation (their MeZO runs take 100k steps against 1k for Adam).

Written before any run of the script; no pilot was seen (one of an earlier draft was stopped before it printed).
The judge reads `results["seeds"]`: per seed, "pretrained"
(the pretrained model's held-out loss on the fine-tuning task) and per arm ("adam", "sgd", "mezo") its "final"
held-out loss and "memory": bytes kept for the backward pass ("saved"), gradients ("grads") and optimizer state
("state") over one training step; and `results["steps"]` (each arm's fine-tuning steps).
"""

from __future__ import annotations

from typing import Any, Mapping

import verdicts

MIN_SEEDS = 3
SHARE = 2 / 3     # of the seeds, for "matches"
CLOSE = 0.75      # MeZO's improvement at least this share of SGD's: "comparable"
SOME = 0.25       # ... at least this share: partly
PAPER_MEZO_STEPS = 100_000


def gain(s: Mapping[str, Any], arm: str) -> float:
    return s["pretrained"] - s[arm]["final"]


def judge_memory(results: Mapping[str, Any]) -> verdicts.Judgement:
    seeds = results["seeds"]
    kept = lambda s, arm: sum(s[arm]["memory"].values())  # noqa: E731
    mezo_none = sum(kept(s, "mezo") == 0 for s in seeds)
    backprop = sum(kept(s, "adam") > 0 and kept(s, "sgd") > 0 for s in seeds)
    n = len(seeds)
    verdict = "matches" if mezo_none == backprop == n else "partly" if mezo_none else "does not"
    spans = {arm: verdicts.span([kept(s, arm) / 2 ** 10 for s in seeds]) for arm in ("mezo", "sgd", "adam")}
    return verdicts.Judgement(verdict, f"bytes a training step keeps beyond inference (activations saved for backward, "
                                       f"gradients, optimizer state): MeZO 0 in {mezo_none}/{n} seeds; SGD "
                                       f"{spans['sgd']} KiB, Adam {spans['adam']} KiB", n)


def judge_lowers_loss(results: Mapping[str, Any]) -> verdicts.Judgement:
    seeds = results["seeds"]
    n = len(seeds)
    k = sum(gain(s, "mezo") > 0.1 * gain(s, "adam") > 0 for s in seeds)
    verdict = "matches" if k >= SHARE * n else "partly" if k else "does not"
    return verdicts.Judgement(verdict, f"MeZO's held-out loss on the new task fell by more than a tenth of Adam's fall in "
                                       f"{k}/{n} seeds: from {verdicts.span([s['pretrained'] for s in seeds])} to "
                                       f"{verdicts.span([s['mezo']['final'] for s in seeds])} (Adam "
                                       f"{verdicts.span([s['adam']['final'] for s in seeds])})", n)


def judge_comparable(results: Mapping[str, Any]) -> verdicts.Judgement:
    seeds = results["seeds"]
    n = len(seeds)
    shares = [gain(s, "mezo") / gain(s, "sgd") if gain(s, "sgd") > 0 else None for s in seeds]
    close = sum(x is not None and x >= CLOSE for x in shares)
    some = sum(x is not None and x >= SOME for x in shares)
    verdict = "matches" if close >= SHARE * n else "partly" if some >= SHARE * n else "does not"
    steps = results["steps"]
    return verdicts.Judgement(verdict, f"MeZO's fall in loss ({steps['mezo']} steps) as a share of SGD's "
                                       f"({steps['sgd']} steps): {verdicts.span(shares)}; ≥ {CLOSE:g} in {close}/{n} "
                                       f"seeds, ≥ {SOME:g} in {some}/{n}", n)


PAPER = ("RoBERTa-large and OPT (up to 66B) fine-tuned on SST-2, RTE, SQuAD and others; MeZO with ε = 1e-3, 100k "
         "steps, constant lr; fine-tuning by Adam, 1k steps; memory measured on GPUs")

CLAIMS = [
    verdicts.Claim(
        id="inference_memory",
        claim="MeZO fine-tunes with the memory footprint of inference: it keeps no activations for a backward pass, "
              "no gradients and no optimizer state",
        paper=PAPER,
        rule=f"per seed (≥ {MIN_SEEDS}), the bytes one training step keeps beyond a forward pass (tensors autograd "
             f"saves for backward, gradients, optimizer state): matches when MeZO's are 0 and SGD's and Adam's are "
             f"not in every seed, partly when MeZO's are 0 in some, does not otherwise",
        judge=judge_memory, min_n=MIN_SEEDS),
    verdicts.Claim(
        id="forward_passes_fine_tune",
        claim="With forward passes only, MeZO fine-tunes a pretrained model to a new task",
        paper=PAPER,
        rule=f"per seed (≥ {MIN_SEEDS}): MeZO's held-out loss on the new task falls from the pretrained model's by "
             f"more than a tenth of what Adam's falls; matches in ≥ 2/3 of the seeds, partly in at least one, does "
             f"not otherwise",
        judge=judge_lowers_loss, min_n=MIN_SEEDS,
        budget=lambda r: r["steps"]["mezo"] / PAPER_MEZO_STEPS, budget_note="MeZO steps against their 100k"),
    verdicts.Claim(
        id="comparable_to_backprop",
        claim="Given more steps, MeZO's fine-tuning is comparable to fine-tuning with backpropagation",
        paper=PAPER,
        rule=f"per seed (≥ {MIN_SEEDS}): MeZO's fall in held-out loss as a share of SGD's (SGD at fewer steps); "
             f"matches when ≥ {CLOSE:g} in ≥ 2/3 of the seeds, partly when ≥ {SOME:g} in ≥ 2/3, does not otherwise",
        judge=judge_comparable, min_n=MIN_SEEDS,
        budget=lambda r: r["steps"]["mezo"] / PAPER_MEZO_STEPS, budget_note="MeZO steps against their 100k"),
]
