"""Which in-context strategy the model follows (Edelman et al. 2024): KL from each reference
predictor (uniform, unigram, n-gram, Bayes) to the model's next-token distribution. The nearest
strategy names the stage: uniform -> unigram -> bigram."""

from __future__ import annotations

import torch

from mechsynth.probes import ProbeResult, register, task_tokens


def no_hooks(n_layers: int) -> list[str]:
    return []  # reads only the logits


@register("icl_strategy", hooks=no_hooks, truth=("uniform", "unigram", "ngram"), needs_task=True,
          threshold=float("inf"), tasks=("markov_icl",))
@torch.no_grad()
def icl_strategy(model, task, generator, batch_size) -> ProbeResult:
    batch = task_tokens(model, task, batch_size, generator)
    logp = model(batch.tokens).float().log_softmax(-1)
    metrics, curves = {}, {}
    for name in task.strategies:
        q = batch.truth[name]
        kl = (q * (q.clamp_min(1e-30).log() - logp)).sum(-1)  # [batch, pos]
        curves[name] = kl.mean(0).cpu()
        metrics[f"kl/{name}"] = float(kl.mean())
    nearest = min(task.strategies, key=lambda s: metrics[f"kl/{s}"])
    metrics["stage"] = float(task.strategies.index(nearest))  # index into `strategies`
    return ProbeResult("icl_strategy", None, metrics, {"kl_per_position": curves, "nearest": nearest,
                                                       "strategies": list(task.strategies)})
