"""Sparse variable selection (Edelman et al. 2022): attention from the readout position onto the
hidden support S, and whether the most-attended positions are exactly S. Applies to the tasks whose
batches carry `support` and `readout` (sparse_parity, sparse_boolean)."""

from __future__ import annotations

from mechsynth import hooks
from mechsynth.probes import ProbeResult, View, attention_hooks, register


@register("sparse_selection", reads={"data": attention_hooks}, truth=("support", "readout"), threshold=0.5)
def sparse_selection(view: View) -> ProbeResult:
    batch = view.batch("data")
    support, readout = batch.truth["support"], batch.truth["readout"]
    pattern = view.patterns("data")[:, :, :, readout]  # [layer, batch, head_index, key_pos]
    mean = pattern.mean(1)  # [layer, head_index, key_pos]
    per_head = mean[..., support].sum(-1)
    layer, head = divmod(int(per_head.flatten().argmax()), per_head.shape[1])
    top = set(mean[layer, head].topk(len(support)).indices.tolist())
    metrics = {"max": float(per_head.max()), "support_recovered": float(top == set(support.tolist()))}
    render = {"tokens": batch.tokens[0].cpu(), "support": support.cpu(), "readout": readout,
              "heads": {hooks.head_label(layer, head): pattern[layer, 0, head].cpu()}}
    return ProbeResult("sparse_selection", per_head.cpu(), metrics, render)
