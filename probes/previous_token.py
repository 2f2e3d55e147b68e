"""Previous-token heads: attention mass at offset −1 (the first half of an induction circuit).

Also the mass at offsets −2 and −3 (`offset2/L*H*`, `offset3/L*H*`): a model of in-context trigrams
needs a second layer-0 head that looks two tokens back (Edelman et al. 2024). The option `offset` makes
the per-head score (and so formation) the mass that many tokens back: `--set previous_token.offset=3` on
a lag-3 copy task. `chance`: the score of a uniform head at that offset, which formation must clearly beat
(`mechsynth.probes._formation`)."""

from __future__ import annotations

from dataclasses import dataclass

from jaxtyping import Float
from torch import Tensor

from mechsynth.config import MAX_CTX, doc, validates_itself
from mechsynth.errors import ConfigError
from mechsynth.probes import (
    FormationOptions,
    ProbeResult,
    View,
    attention_hooks,
    head_metrics,
    register,
    render_heads,
    threshold_field,
    uniform_attention,
)

FURTHER_OFFSETS = (2, 3)


@validates_itself
@dataclass(frozen=True)
class PreviousTokenOptions(FormationOptions):
    # 0.4: in-context bigram models keep some attention on the current token (Edelman et al. 2024).
    threshold: float = threshold_field(0.4)
    offset: int = doc(
        "how far back the per-head score looks: the attention mass on the key `offset` tokens back", 1, lo=1, hi=MAX_CTX
    )


def offset_score(
    pattern: Float[Tensor, "layer batch head_index query_pos key_pos"], offset: int = 1
) -> Float[Tensor, "layer head_index"]:
    """Mean attention from each query to the key `offset` positions back (queries that have one)."""
    return pattern.diagonal(offset=-offset, dim1=-2, dim2=-1).mean(dim=(1, 3))


@register("previous_token", reads={"random": attention_hooks, "data": attention_hooks}, options=PreviousTokenOptions)
def previous_token(view: View) -> ProbeResult:
    offset = view.options.offset
    pattern = view.patterns("data")  # the task's data; random tokens again without a task
    n = pattern.shape[-1]
    if offset >= n:  # no query has a key that far back: the score would be the mean of nothing
        raise ConfigError(
            "previous_token.offset",
            f"{offset} reaches before the first of the {n} tokens the probe reads; allowed: 1 to {n - 1}",
        )
    random_score = offset_score(view.patterns("random"), offset)
    per_head = offset_score(pattern, offset)
    chance = offset_score(uniform_attention(n, pattern.device)[None, None, None], offset)
    metrics = {
        "max": float(per_head.max()),
        "max_random": float(random_score.max()),
        "chance": float(chance),
        **head_metrics("random/", random_score),
    }
    for further in FURTHER_OFFSETS:  # whatever `offset` is: experiments read offset2/ beside the default score
        if n > further:
            metrics.update(head_metrics(f"offset{further}/", offset_score(pattern, further)))
    return ProbeResult("previous_token", per_head.cpu(), metrics, render_heads(view.tokens("data"), pattern, per_head))
