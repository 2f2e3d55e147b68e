"""Sparse variable selection (Edelman et al. 2022): attention from the readout position onto the
hidden support S, and whether the most-attended positions are exactly S. Applies to the tasks whose
batches carry `support` and `readout` (sparse_parity, sparse_boolean).

`chance`: what a uniform head puts on S from the readout, |S| / (readout + 1); with few input bits it is
high (2 of 6 bits: 0.29), so formation needs the score clearly above it too (`mechsynth.probes._formation`)."""

from __future__ import annotations

from mechsynth import hooks
from mechsynth.probes import FormationOptions, ProbeResult, View, attention_hooks, register, uniform_attention


@register("sparse_selection", reads={"data": attention_hooks}, truth=("support", "readout"), options=FormationOptions)
def sparse_selection(view: View) -> ProbeResult:
    batch = view.batch("data")
    support, readout = batch.truth["support"], batch.truth["readout"]
    pattern = view.patterns("data")[:, :, :, readout]  # [layer, batch, head_index, key_pos]
    mean = pattern.mean(1)  # [layer, head_index, key_pos]
    per_head = mean[..., support].sum(-1)
    layer, head = divmod(int(per_head.flatten().argmax()), per_head.shape[1])
    top = set(mean[layer, head].topk(len(support)).indices.tolist())
    chance = uniform_attention(pattern.shape[-1], pattern.device)[readout, support].sum()
    metrics = {
        "max": float(per_head.max()),
        "support_recovered": float(top == set(support.tolist())),
        "chance": float(chance),
    }
    render = {
        "tokens": batch.tokens[0].cpu(),
        "support": support.cpu(),
        "readout": readout,
        "heads": {hooks.head_label(layer, head): pattern[layer, 0, head].cpu()},
    }
    return ProbeResult("sparse_selection", per_head.cpu(), metrics, render)
