"""The causal graph in the attention (Nichani, Damian & Lee 2024): a transformer trained on sequences drawn along
a hidden causal graph (the causal_icl task) learns the graph in its first attention layer, each position
attending to its parents, and in its second layer an induction head along the graph's edges, attending to the
earlier children of the same parent value.

Read on the task's held-out batch ("data"), from the truth `parents` (the graph, the same for every sequence;
node t = token position t, node T = the answer):

- first layer: each head's attention averaged over the batch, A[query_pos, key_pos]. Scored are the positions
  i that have parents (roots are not), over the keys j ≤ i; the self key i counts as a non-parent key, as every
  other key that is no parent: a head that stays on its own token has found no edge (parents are strictly
  earlier, so a parent is never the self key).
  - per head (`per_head`, layer 0 only; its later layers are not scored, so only a first-layer head can
    "form"; threshold 0.9): `edge_recovery`, the fraction of the graph's edges (i, parent) whose parent is
    among the |parents(i)| keys with the most attention from i, pooled over positions; ties at the cut are
    broken at random, and the expected count is taken (uniform attention recovers an edge of i with
    probability |parents(i)| / (i + 1), not 1 because key 0 comes first);
  - `auc/L0H{h}`: ROC AUC of the averaged attention separating i's parent keys from its other keys ≤ i (ties
    count 1/2), per position, then averaged over the positions scored: 0.5 for uniform attention, 1 when
    every parent gets more attention than every non-parent;
  - `edge_recovery_all`, `auc_all`: the same of the layer's heads' attention summed (with several parents one
    head may attend to each: the layer as a whole recovers the graph where no single head does);
  - `max`: the best head's edge recovery; `edges`: the number of edges scored (NaN scores without any).
- second layer (models with at least two layers): `graph_induction/L1H{h}`, the attention from each scored
  query position t (the batch's loss mask: in query mode the last position only, whose target, node T, is a
  child of the query token) on the keys j ≤ t that are earlier children of the same parent value: j has
  parents and its parents' tokens equal those of node t + 1, the node position t predicts, column by column
  (the evidence the Bayes predictor counts). Summed over those keys, averaged over the (sequence, query)
  pairs that have any; `graph_induction_chance` is what uniform attention puts on them (their share of the
  keys ≤ t), and `graph_queries` the share of scored (sequence, query) pairs that have any (NaN scores
  without any).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

import torch
from jaxtyping import Bool, Float, Int
from mechsynth.probes import ProbeResult, Section, View, attention_hooks, register, render_heads
from torch import Tensor

from mechsynth import hooks
from mechsynth.util.figures import mark_drop, new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from mechsynth.probes import Timeline

THRESHOLD = 0.9
TIE = 1e-6  # attention values this close count as tied (uniform rows are equal only up to rounding)


# ---- the numerical core: pure functions of tensors ---------------------------------------------------


def parent_keys(parents: Int[Tensor, "node parent"], n_pos: int) -> Bool[Tensor, "query_pos key_pos"]:
    """[i, j]: token position j is a parent of token position i (-1 pads `parents`; node n_pos, the answer, is
    no query position)."""
    out = torch.zeros(n_pos, n_pos, dtype=torch.bool, device=parents.device)
    rows, cols = torch.nonzero(parents[:n_pos] >= 0, as_tuple=True)
    out[rows, parents[rows, cols]] = True
    return out


def edge_recovery(
    att: Float[Tensor, "head_index query_pos key_pos"], parents: Int[Tensor, "node parent"]
) -> Float[Tensor, "head_index"]:
    """The fraction of edges (i, p) whose parent p is among the |parents(i)| keys j ≤ i that i attends to most,
    expected under random tie-breaking at the cut, pooled over positions; NaN where the graph has no edge."""
    H, T, _ = att.shape
    is_parent = parent_keys(parents, T)
    m = is_parent.sum(-1)  # [query_pos]
    scored = m > 0
    if not scored.any():
        return torch.full((H,), math.nan)
    causal = torch.ones(T, T, dtype=torch.bool, device=att.device).tril()
    a = att.double().masked_fill(~causal, -math.inf)
    cut = a.sort(-1, descending=True).values.gather(-1, (m - 1).clamp_min(0).expand(H, T)[..., None])  # [H, T, 1]
    above = (a > cut + TIE) & causal
    tied = ((a - cut).abs() <= TIE) & causal
    slots = m - above.sum(-1)  # the keys still to pick among the tied ones
    sure = (above & is_parent).sum(-1).double()
    by_chance = (tied & is_parent).sum(-1).double() * slots / tied.sum(-1).clamp_min(1)
    return ((sure + by_chance) * scored).sum(-1) / m.sum()


def parent_auc(
    att: Float[Tensor, "head_index query_pos key_pos"], parents: Int[Tensor, "node parent"]
) -> Float[Tensor, "head_index"]:
    """ROC AUC of attention separating i's parent keys from its other keys j ≤ i (the self key among them),
    P(parent > other) + ½ P(tie), per position i with parents, averaged over them; NaN without any."""
    H, T, _ = att.shape
    own = parents[:T]
    valid = own >= 0  # [query_pos, parent]
    other = torch.ones(T, T, dtype=torch.bool, device=att.device).tril() & ~parent_keys(parents, T)
    scored = valid.any(-1)
    if not scored.any():
        return torch.full((H,), math.nan)
    a = att.double()
    at_parent = a.gather(-1, own.clamp_min(0).expand(H, T, own.shape[1]))  # [head_index, query_pos, parent]
    diff = at_parent[..., None] - a[:, :, None, :]  # [head_index, query_pos, parent, key_pos]
    win = (diff > TIE).double() + 0.5 * (diff.abs() <= TIE).double()
    pairs = valid[:, :, None] & other[:, None, :]
    per_pos = (win * pairs).sum((-1, -2)) / pairs.sum((-1, -2)).clamp_min(1)
    return (per_pos * scored).sum(-1) / scored.sum()


def graph_induction_targets(
    tokens: Int[Tensor, "batch pos"], parents: Int[Tensor, "node parent"], mask: Bool[Tensor, "batch pos"]
) -> Bool[Tensor, "batch query_pos key_pos"]:
    """[b, t, j]: position t is scored, node t + 1 has parents, and key j ≤ t is a node with parents whose parents'
    tokens equal node t + 1's, column by column (an earlier child of the same parent value)."""
    T = tokens.shape[1]
    has = parents[:, 0] >= 0  # [node]
    toks = torch.where(parents >= 0, tokens[:, parents.clamp_min(0)], -1)  # [batch, node, parent]
    same = (toks[:, 1 : T + 1, None, :] == toks[:, None, :T, :]).all(-1)  # [batch, t, j]: node t+1 vs node j
    causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
    return same & causal & has[1 : T + 1, None] & has[None, :T] & mask[:, :, None]


def target_mass(
    pattern: Float[Tensor, "batch head_index query_pos key_pos"], targets: Bool[Tensor, "batch query_pos key_pos"]
) -> Float[Tensor, "head_index"]:
    """Attention on the targets, averaged over the (sequence, query) pairs that have any; NaN without any."""
    has = targets.any(-1)  # [batch, query_pos]
    if not has.any():
        return torch.full((pattern.shape[1],), math.nan)
    mass = (pattern * targets[:, None].float()).sum(-1)  # [batch, head_index, query_pos]
    return (mass * has[:, None]).sum((0, 2)) / has.sum()


def uniform_mass(targets: Bool[Tensor, "batch query_pos key_pos"]) -> float:
    """What attention spread uniformly over the keys ≤ t puts on the targets, averaged as `target_mass`."""
    has = targets.any(-1)
    if not has.any():
        return math.nan
    share = targets.sum(-1).double() / torch.arange(1, targets.shape[1] + 1, device=targets.device)
    return float(share[has].mean())


# ---- how it shows itself: summary lines, report section, W&B plots ------------------------------------


def _heads(m: dict[str, list[float]], prefix: str) -> list[str]:
    return sorted(k[len(prefix) :] for k in m if k.startswith(prefix))


def summary(tl: "Timeline", task: Any) -> list[str]:
    m, heads = tl.metrics.get("causal_graph"), tl.per_head.get("causal_graph", {})
    if not m or not heads or not tl.steps:
        return []
    if not m["edges"][-1] > 0:  # (the scores are NaN then: there is nothing to recover)
        return [f"{'causal_graph':<16} no edges to recover at step {tl.steps[-1]}: the probe's graph has none"]
    per = ", ".join(f"{h} {heads[h][-1]:.2f} (AUC {m[f'auc/{h}'][-1]:.2f})" for h in heads)
    lines = [
        f"{'causal_graph':<16} edges recovered at step {tl.steps[-1]}: {per}; all layer-0 heads together "
        f"{m['edge_recovery_all'][-1]:.2f} of {int(m['edges'][-1])} edges"
    ]
    induction = _heads(m, "graph_induction/")
    if induction and math.isfinite(m["graph_induction_chance"][-1]):  # (NaN: no earlier child of the same value)
        per = ", ".join(f"{h} {m[f'graph_induction/{h}'][-1]:.2f}" for h in induction)
        lines.append(
            f"{'causal_graph':<16} graph induction at step {tl.steps[-1]}: {per} of the attention on earlier "
            f"children of the same parent value (uniform: {m['graph_induction_chance'][-1]:.2f})"
        )
    return lines


def figure(tl: "Timeline", task: Any) -> Optional[Figure]:
    """Edge recovery (and AUC) of each first-layer head and of the layer, then each second-layer head's graph
    induction beside uniform attention's."""
    m, heads = tl.metrics.get("causal_graph", {}), tl.per_head.get("causal_graph", {})
    if not heads or "edge_recovery_all" not in m:
        return None
    induction = _heads(m, "graph_induction/")
    fig, axes = new_figure(1, 2 if induction else 1, height=3.4, width=12 if induction else 7)
    ax = axes[0, 0]
    for i, (h, series) in enumerate(heads.items()):
        ax.plot(tl.steps, series, color=f"C{i}", label=f"{h} edge recovery")
        ax.plot(tl.steps, m[f"auc/{h}"], color=f"C{i}", linestyle=":", label=f"{h} AUC")
    ax.plot(tl.steps, m["edge_recovery_all"], color="black", linestyle="--", label="layer 0, heads summed")
    ax.axhline(THRESHOLD, color="0.5", linewidth=0.8, linestyle="-.")
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("first layer: parents found")
    ax.legend(fontsize=7)
    if induction:
        ax_ind = axes[0, 1]
        for i, h in enumerate(induction):
            ax_ind.plot(tl.steps, m[f"graph_induction/{h}"], color=f"C{i}", label=h)
        ax_ind.plot(tl.steps, m["graph_induction_chance"], color="0.5", linestyle="--", label="uniform attention")
        ax_ind.set_ylim(-0.02, 1.02)
        ax_ind.set_ylabel("second layer: attention on children\nof the same parent value")
        ax_ind.legend(fontsize=7)
    for a in axes[0]:
        mark_drop(a, tl.loss_drop_step)
        steps_axis(a)
    return fig


def wandb_plots(tl: "Timeline", logger: Any) -> None:
    m, heads = tl.metrics.get("causal_graph", {}), tl.per_head.get("causal_graph", {})
    if heads and "edge_recovery_all" in m:
        edges = {f"{h} edge recovery": s for h, s in heads.items()} | {f"{h} AUC": m[f"auc/{h}"] for h in heads}
        logger.line_series(
            "plots/causal_graph_edges",
            tl.steps,
            edges | {"heads summed": m["edge_recovery_all"]},
            "first layer: the graph's edges recovered",
            "step",
        )
    induction = _heads(m, "graph_induction/")
    if induction:
        logger.line_series(
            "plots/causal_graph_induction",
            tl.steps,
            {h: m[f"graph_induction/{h}"] for h in induction} | {"uniform": m["graph_induction_chance"]},
            "second layer: attention on children of the same parent value",
            "step",
        )


SECTION = Section(
    "causal_graph",
    "The causal graph in the attention",
    "Left: for each first-layer head, the fraction of the hidden graph's edges it recovers (each "
    "position's top-|parents| keys by attention averaged over held-out sequences; solid) and the AUC "
    "of that attention separating parents from the other earlier keys (dotted); dashed, the layer's "
    "heads summed. Right: the share of each second-layer head's attention, from the scored position, "
    "on earlier children of the same parent value (an induction head along the graph), beside what "
    "uniform attention puts there.",
    figure,
)


@register(
    "causal_graph",
    reads={"data": attention_hooks},
    truth=("parents",),
    threshold=THRESHOLD,
    summary=summary,
    section=SECTION,
    wandb=wandb_plots,
)
def causal_graph(view: View) -> ProbeResult:
    batch, pattern = view.batch("data"), view.patterns("data")
    parents = batch.truth["parents"][0].to(pattern.device)  # the same graph for every sequence
    att = pattern[0].mean(0)  # [head_index, query_pos, key_pos]
    recovery = edge_recovery(att, parents).float()
    auc = parent_auc(att, parents).float()
    summed = att.sum(0, keepdim=True)
    per_head = recovery[None]  # layer 0 only
    metrics = {f"auc/{hooks.head_label(0, h)}": float(auc[h]) for h in range(len(auc))}
    metrics |= {
        "edge_recovery_all": float(edge_recovery(summed, parents)[0]),
        "auc_all": float(parent_auc(summed, parents)[0]),
        "max": float(recovery.max()),
        "edges": float(parent_keys(parents, att.shape[-1]).sum()),
    }
    if view.n_layers >= 2:
        targets = graph_induction_targets(batch.tokens.to(pattern.device), parents, batch.mask.to(pattern.device))
        mass = target_mass(pattern[1], targets)
        metrics |= {f"graph_induction/{hooks.head_label(1, h)}": float(mass[h]) for h in range(len(mass))}
        scored = batch.mask[:, : targets.shape[1]].sum()
        metrics |= {
            "graph_induction_chance": uniform_mass(targets),
            "graph_queries": float(targets.any(-1).sum() / scored) if scored else math.nan,
        }
    render = render_heads(batch.tokens, pattern[:1], per_head) | {"parents": parents.cpu()}
    return ProbeResult("causal_graph", per_head.cpu(), metrics, render)
