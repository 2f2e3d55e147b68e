"""Which in-context strategy the model follows (Edelman et al. 2024): KL from each reference
predictor (uniform, unigram, n-gram, Bayes) to the model's next-token distribution. The nearest
strategy names the stage: uniform -> unigram -> bigram."""

from __future__ import annotations

from mechsynth.probes import ProbeResult, View, no_hooks, register


@register("icl_strategy", reads={"data": no_hooks}, truth=("uniform", "unigram", "ngram"), needs_task=True,
          threshold=float("inf"), tasks=("markov_icl",))
def icl_strategy(view: View) -> ProbeResult:
    batch, strategies = view.batch("data"), view.task.strategies
    logp = view.logits("data").float().log_softmax(-1)
    metrics, curves = {}, {}
    for name in strategies:
        q = batch.truth[name]
        kl = (q * (q.clamp_min(1e-30).log() - logp)).sum(-1)  # [batch, pos]
        curves[name] = kl.mean(0).cpu()
        metrics[f"kl/{name}"] = float(kl.mean())
    nearest = min(strategies, key=lambda s: metrics[f"kl/{s}"])
    metrics["stage"] = float(strategies.index(nearest))  # index into `strategies`
    return ProbeResult("icl_strategy", None, metrics, {"kl_per_position": curves, "nearest": nearest,
                                                       "strategies": list(strategies)})
