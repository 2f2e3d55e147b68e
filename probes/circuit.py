"""The causal circuit of each probed checkpoint: which edges of the model's graph (`mechsynth.circuits`)
the task's answer depends on, found by patching, not by what attention looks like.

On the task's held-out batch and its counterfactual (`Task.counterfactual`: the same batch with what the
answer depends on changed), every edge is scored by `method`, and the circuit is the smallest set of
top-scoring edges that alone keeps `level` of the clean-vs-ablated gap of the task's patch metric (its
faithfulness). Metrics per checkpoint:

- `edges`, `edge_share`: the circuit's size; `faithfulness`: its faithfulness (≥ level unless no set is);
- `cpr`, `cmd`: MIB's areas under the faithfulness curve of the top-scoring edges over its edge budgets (0.1 % ...
  100 % of the edges), and between that curve and 1 (`circuits.mib_curve`);
- `gap`: m(clean) - m(every edge patched), how much the answer depends on the change at all (a model that
  ignores its input has no circuit to find: faithfulness is then NaN);
- `final_faithfulness`: the faithfulness here of the circuit found at the run's last checkpoint. The causal
  circuit has formed from the first step after which it stays ≥ level while the gap is at least half its
  final value;
- `control`: what the task's control counterfactual (changed only where the answer must not depend) moves
  the metric, as a share of the gap: near 0 for a model that reads what the task says it should;
- `auc_positions`: where the task's truth names the positions the answer reads (`support`: sparse parity
  and Boolean functions; the query's `parents`: causal_icl), the ROC AUC of each input position's effect
  (its embedding replaced by the batch mean) separating those positions from the others;
- `effect/<position>`, `known/<position>` (1 or 0): each input position's effect and whether the truth names it,
  where it names positions;
- `score/<edge>` and `in/<edge>` (1 or 0) for every edge ("L0H1->L1H0.k").

Each method's result is kept: probing again with other options (`--set circuit.method=eap`) keeps the earlier
result beside the new one in probes.json (`variants`, keyed as "eap" or "eap_ig, ablation=mean"), and the summary
gives each its line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import torch
from mechsynth.probes import ProbeError, ProbeResult, Section, View, no_hooks, register
from mechsynth.probes._landscape import finite, log_spaced
from torch import Tensor

from mechsynth import circuits
from mechsynth.config import check, check_fields, doc, validates_itself
from mechsynth.tasks.base import Batch
from mechsynth.util.figures import mark_drop, new_figure, steps_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@validates_itself
@dataclass(frozen=True)
class CircuitOptions:
    method: str = doc(
        "how edges are scored: a registered circuit method (built in: patching, exact, one forward per "
        "edge; eap, one forward and backward; eap_ig and eap_ig_activations, ig_steps of them; "
        "clean_corrupted, two; acdc, greedy pruning; yours through MECHSYNTH_PLUGINS)",
        "eap_ig",
    )
    ablation: str = doc(
        f"what a patched edge carries: {', '.join(circuits.ABLATIONS)} (the sender's output on the "
        "counterfactual input, its batch mean at each position, nothing)",
        "resample",
    )
    level: float = doc(
        "faithfulness a circuit must reach: the share of the clean-vs-ablated metric gap it keeps "
        "with every other edge patched",
        0.9,
    )
    ig_steps: int = doc("eap_ig: points on the path from the ablated to the clean input", 8, lo=2, hi=1024)
    threshold: float = doc("acdc: an edge stays when removing it costs at least this share of the gap", 0.02)
    select: str = doc(
        "which edges come first into a circuit: absolute (largest |score|) or signed (largest score: an "
        "edge whose patching raises the metric comes last)",
        "absolute",
    )
    checkpoints: int = doc(
        "checkpoints to probe, log-spaced (first and last included); 0 = every one", 16, lo=0, hi=100_000
    )
    seed: int = doc("seed of the counterfactuals", 0, lo=0, hi=2**31)

    def __post_init__(self) -> None:
        check_fields(self)
        check(self.method in circuits.METHODS, "method", f"{self.method!r}; allowed: {', '.join(circuits.METHODS)}")
        check(self.select in ("absolute", "signed"), "select", f"{self.select!r}; allowed: absolute, signed")
        check(
            self.ablation in circuits.ABLATIONS,
            "ablation",
            f"{self.ablation!r}; allowed: {', '.join(circuits.ABLATIONS)}",
        )
        check(0 < self.level <= 1, "level", f"must be in (0, 1], got {self.level}")
        check(0 <= self.threshold < 1, "threshold", f"must be in [0, 1), got {self.threshold}")


def known_positions(batch: Batch) -> Optional[Tensor]:
    """The input positions the answer reads, where the task's truth names them for every sequence alike."""
    if "support" in batch.truth:
        return batch.truth["support"].cpu()
    if "parents" in batch.truth and not batch.mask[:, :-1].any():  # causal_icl answering its query only
        parents = batch.truth["parents"][0, batch.tokens.shape[1]].cpu()
        return parents[parents >= 0]
    return None


def task_check(task: Any) -> Optional[str]:
    if getattr(task, "patch_metric", None) is None:
        return f"probe 'circuit' needs counterfactual inputs, which task {task.name!r} does not make"
    return None


# ---- how it shows itself ----------------------------------------------------------------------------


def formed(tl: Any, level: float) -> Optional[int]:
    """The first step after which the final circuit keeps ≥ level of a gap at least half the final one."""
    m = tl.metrics.get("circuit", {})
    steps, final = finite(tl.steps, m.get("final_faithfulness", []))
    _, gap = finite(tl.steps, m.get("gap", []))
    if not steps or len(gap) != len(steps):
        return None
    at = None
    for step, f, g in zip(steps, final, gap):
        ok = f >= level and g >= 0.5 * gap[-1] > 0
        at = (step if at is None else at) if ok else None
    return at


def _level(tl: Any) -> float:
    return tl.options.get("circuit", {}).get("level", CircuitOptions().level)


# What the summary says the gap measures: the task's patch metric m, and what a patched edge carries.
METRIC_WORDS = {
    "logit_diff": "the clean answer's logit minus the counterfactual answer's, where the two differ",
    "loss": "minus the cross-entropy of the clean targets",
}
ABLATION_WORDS = {
    "resample": "its sender's output on the counterfactual input",
    "mean": "its sender's batch mean",
    "zero": "nothing",
}


def _kept(m: dict[str, list[float]], i: int) -> list[str]:
    """The circuit's edges at checkpoint index `i`, strongest (by |score|) first."""
    return sorted((k[3:] for k in m if k.startswith("in/") and m[k][i] == 1), key=lambda e: -abs(m[f"score/{e}"][i]))


def _edges_text(edges: list[str]) -> str:
    return (", ".join(edges[:8]) + (" …" if len(edges) > 8 else "")) if edges else "none"


def _result_lines(tl: Any, key: str, result: dict[str, Any], latest: bool) -> list[str]:
    """One method's circuit at its last measured step (its key: "eap_ig", "eap, ablation=mean"): its size and
    faithfulness, its edges, and for the latest when the final circuit formed."""
    m, opts = result["metrics"], result["options"]
    steps, faith = finite(tl.steps, m.get("faithfulness", []))
    if not steps:
        return []
    i = tl.steps.index(steps[-1])
    total = len([k for k in m if k.startswith("in/")])
    head = (
        f"{'circuit':<16} {key} ({opts.get('ablation', 'resample')} ablation): {int(m['edges'][i])} of {total} edges "
        f"keep {faith[-1]:.2f} of the gap at step {steps[-1]}"
    )
    if latest:
        level = opts.get("level", CircuitOptions().level)
        step = formed(tl, level)
        head += (
            f"; formed at step {step} (the final circuit keeps ≥ {level} from then on)"
            if step is not None
            else "; the final circuit never keeps that much earlier"
        )
    return [head, f"{'circuit':<16} {key} edges, strongest first: {_edges_text(_kept(m, i))}"]


def _definition(tl: Any, task: Any) -> str:
    """What "gap" and "faithfulness" are, in words, for the task's metric."""
    kind = getattr(task, "patch_metric", None)
    metric = f"{kind} ({METRIC_WORDS[kind]})" if kind in METRIC_WORDS else "the task's patch metric"
    ablation = tl.options.get("circuit", {}).get("ablation", "resample")
    return (
        f"{'circuit':<16} gap: m(clean) - m(every edge patched), m = {metric}; a patched edge carries "
        f"{ABLATION_WORDS.get(ablation, ablation)}; faithfulness: the share of the gap a circuit keeps with every "
        "edge outside it patched"
    )


def _against_truth(tl: Any, task: Any) -> str:
    """The circuit found against the task's known one, as far as the task's truth names it: the input positions
    the answer reads (`known_positions`), beside the positions whose patching moves the metric most."""
    m = tl.metrics.get("circuit", {})
    steps, _ = finite(tl.steps, m.get("faithfulness", []))
    i = tl.steps.index(steps[-1])
    known = sorted(int(k[6:]) for k in m if k.startswith("known/") and m[k][i] == 1)
    name = getattr(task, "name", None) or "this task"
    if not known:
        return (
            f"{'circuit':<16} against the task's known circuit: {name}'s truth names none (no positions the answer "
            "must read) to compare with"
        )
    effect = {int(k[7:]): m[k][i] for k in m if k.startswith("effect/")}
    found = sorted(sorted(effect, key=lambda p: -effect[p])[: len(known)])
    auc = m.get("auc_positions", [math.nan])[i]
    same = "the same" if found == known else f"{len(set(found) & set(known))} of {len(known)} the same"
    return (
        f"{'circuit':<16} against the task's known circuit: its truth says the answer reads positions "
        f"{', '.join(map(str, known))}; patching each position, the {len(known)} that move the metric most are "
        f"{', '.join(map(str, found))} ({same}; AUC {auc:.2f})"
    )


def summary(tl: Any, task: Any) -> list[str]:
    """Each method's circuit kept (the latest first), what the gap is, the circuit against the task's known one,
    and the control."""
    kept = tl.results("circuit") if hasattr(tl, "results") else {}
    lines = [line for n, (key, result) in enumerate(kept.items()) for line in _result_lines(tl, key, result, n == 0)]
    if not lines:
        return []
    lines += [_definition(tl, task), _against_truth(tl, task)]
    m = tl.metrics["circuit"]
    steps, _ = finite(tl.steps, m.get("faithfulness", []))
    _, control = finite(tl.steps, m.get("control", []))
    if control:
        lines.append(
            f"{'circuit':<16} the control counterfactual moves the metric by {control[-1]:+.2f} of the gap "
            f"(step {steps[-1]})"
        )
    return lines


# A head's query, key and value inputs enter it apart, each in a colour of its own.
PORT_OFFSET = {"q": 0.08, "k": 0.0, "v": -0.08}
PORT_COLOURS = {"q": "tab:blue", "k": "tab:orange", "v": "tab:green"}


def _graph_axes(ax: Any, names: list[str], scores: list[float], kept: list[float], title: str) -> None:
    """The residual graph, senders left to right by layer: an edge's width is its |score|; its colour, the input it
    feeds (`PORT_COLOURS`: a head's q, k or v; black: an MLP or the logits), faint outside the circuit; each circuit
    edge into a head carries its input's letter."""
    nodes: dict[str, tuple[float, float]] = {}

    def place(node: str) -> tuple[float, float]:
        base = node.split(".")[0]
        if base not in nodes:
            layer = (
                -1.0
                if base == "input"
                else len(set(n.split("->")[0] for n in names))
                if base == "logits"
                else (float(base[3:]) + 0.5 if base.startswith("MLP") else float(base[1:].split("H")[0]))
            )
            row = 0.0 if base in ("input", "logits") or base.startswith("MLP") else float(base.split("H")[1]) + 1
            nodes[base] = (layer, row)
        return nodes[base]

    top = max([abs(s) for s in scores] + [1e-12])
    for name, s, k in sorted(zip(names, scores, kept), key=lambda x: x[2]):
        sender, receiver = name.split("->")
        a, b = place(sender), place(receiver)
        port = receiver.split(".")[-1] if "." in receiver else None
        end = (b[0] - 0.08 * bool(port), b[1] + PORT_OFFSET.get(port, 0.0))
        colour = PORT_COLOURS.get(port, "black")
        ax.plot(
            [a[0], end[0]],
            [a[1], end[1]],
            color=colour,
            alpha=1.0 if k else 0.2,
            linewidth=0.3 + 3 * abs(s) / top,
            zorder=k,
        )
        if port and k:  # each circuit edge names the input it feeds, on the edge itself: several enter one head
            x, y = a[0] + 0.7 * (end[0] - a[0]), a[1] + 0.7 * (end[1] - a[1])
            ax.annotate(
                port,
                (x, y),
                fontsize=6,
                ha="center",
                va="center",
                color=colour,
                zorder=3,
                bbox=dict(boxstyle="round,pad=0.1", facecolor="white", edgecolor="none"),
            )
    for node, (x, y) in nodes.items():
        ax.annotate(
            node,
            (x, y),
            ha="center",
            va="center",
            fontsize=7,
            bbox=dict(boxstyle="round", facecolor="white", edgecolor="0.5"),
        )
    ax.set_title(title, fontsize=9)
    ax.set_axis_off()


def figure(tl: Any, task: Any) -> Optional[Figure]:
    """Faithfulness over training (the circuit found at each step, the final circuit's), then the graph at
    three measured steps."""
    m = tl.metrics.get("circuit", {})
    steps, faith = finite(tl.steps, m.get("faithfulness", []))
    if not steps:
        return None
    fig, axes = new_figure(1, 4, height=3.2, width=14)
    ax = axes[0, 0]
    ax.plot(steps, faith, "o-", markersize=3, label="circuit found at the step")
    s2, final = finite(tl.steps, m["final_faithfulness"])
    ax.plot(s2, final, "o-", markersize=3, label="the final circuit")
    s3, gap = finite(tl.steps, m["gap"])
    if gap and gap[-1] > 0:  # faithfulness divides by the gap: where it is small, it says little
        ax.plot(s3, [g / gap[-1] for g in gap], color="0.6", linestyle=":", label="gap / its final value")
    ax.axhline(_level(tl), color="0.5", linestyle="--", linewidth=0.8)
    step = formed(tl, _level(tl))
    if step is not None:
        ax.axvline(step, color="tab:green", linewidth=1, label=f"formed (step {step})")
    mark_drop(ax, tl.loss_drop_step, label=True)
    ax.set_ylabel("faithfulness")
    ax.set_ylim(max(-0.5, min([-0.05] + final + faith)), 1.15)
    ax.legend(fontsize=7)
    steps_axis(ax)
    edges = [k[6:] for k in m if k.startswith("score/")]
    for ax_g, s in zip(axes[0, 1:], log_spaced(steps, 3)):
        i = tl.steps.index(s)
        _graph_axes(
            ax_g,
            edges,
            [m[f"score/{e}"][i] for e in edges],
            [m[f"in/{e}"][i] for e in edges],
            f"step {s}: {int(m['edges'][i])} edges",
        )
    return fig


def wandb_plots(tl: Any, logger: Any) -> None:
    m = tl.metrics.get("circuit", {})
    steps, faith = finite(tl.steps, m.get("faithfulness", []))
    if not steps:
        return
    _, final = finite(tl.steps, m["final_faithfulness"])
    _, size = finite(tl.steps, m["edge_share"])
    logger.line_series(
        "plots/circuit_faithfulness",
        steps,
        {"circuit at the step": faith, "final circuit": final, "edge share": size},
        "causal circuit",
        "step",
    )
    last = tl.steps.index(steps[-1])
    rows = sorted(
        ([k[6:], m[k][last], int(m[f"in/{k[6:]}"][last])] for k in m if k.startswith("score/")),
        key=lambda r: -abs(r[1]),
    )
    logger.table("circuit/edges", ["edge", "score", "in circuit"], rows)


SECTION = Section(
    "circuit",
    "The causal circuit",
    "Left: the faithfulness of the circuit found at each probed step (the fewest top-scoring edges that "
    "keep the level's share of the clean-vs-counterfactual gap of the task's metric, every other edge "
    "patched) and of the circuit found at the last step, evaluated at each earlier one; the circuit "
    "has formed once the latter stays above the dashed level. Right: the model's graph at three steps, "
    "senders from the input (left) to the logits (right), each edge as wide as its score and coloured "
    "by the input it feeds (a head's query q blue, key k orange, value v green; an MLP or the logits "
    "black), the circuit's edges solid and lettered q, k or v, the others faint.",
    figure,
)


@register(
    "circuit",
    reads={"data": no_hooks},
    threshold=math.inf,
    costly=True,
    hooked=True,
    options=CircuitOptions,
    model_check=circuits.why_not,
    task_check=task_check,
    summary=summary,
    section=SECTION,
    wandb=wandb_plots,
)
def circuit(view: View) -> ProbeResult:
    o: CircuitOptions = view.options
    model, task, clean = view.model, view.task, view.batch("data")
    g = torch.Generator().manual_seed(o.seed)
    corrupted = task.counterfactual(clean, g)
    graph = circuits.Graph.of(model)
    try:
        metric = circuits.patch_metric(task.patch_metric, clean, corrupted)
    except ValueError as e:
        raise ProbeError(f"probe 'circuit': {e} (a batch of {clean.tokens.shape[0]}; try a larger one)") from None
    src = circuits.source(model, graph, clean.tokens, corrupted.tokens, o.ablation)
    scores = circuits.discover(
        o.method,
        model,
        graph,
        clean.tokens,
        src,
        metric,
        **circuits.declared(o.method, {"ig_steps": o.ig_steps, "threshold": o.threshold}),
    ).cpu()
    absolute = o.select == "absolute"
    found = circuits.circuit(model, graph, clean.tokens, src, metric, scores, o.level, absolute)
    names = [graph.edge_name(e) for e in graph.edge_list]
    out = {
        "edges": float(found.edges.sum()),
        "edge_share": float(found.edges.float().mean()),
        "faithfulness": found.faithfulness,
    }
    mib = circuits.mib_curve(model, graph, clean.tokens, src, metric, scores, absolute)
    out |= {"cpr": mib.cpr, "cmd": mib.cmd}
    clean_m, ablated_m = circuits.ends(model, graph, clean.tokens, src, metric)
    out["gap"] = clean_m - ablated_m
    final = view.last.render["circuit"] if view.last is not None else found.edges
    out["final_faithfulness"] = float(circuits.faithfulness(model, graph, clean.tokens, src, metric, final[None])[0])
    control = task.counterfactual(clean, torch.Generator().manual_seed(o.seed), control=True)
    if control is not None and out["gap"] != 0:
        control_src = circuits.source(model, graph, clean.tokens, control.tokens, "resample")
        out["control"] = (clean_m - circuits.ends(model, graph, clean.tokens, control_src, metric)[1]) / out["gap"]
    known = known_positions(clean)
    if known is not None and len(known):
        effects = circuits.position_patching(model, clean.tokens, metric)
        truth = torch.zeros(len(effects), dtype=torch.bool)
        truth[known] = True
        out["auc_positions"] = circuits.auc(effects, truth)
        # kept per position, so the summary can name the positions found beside those the truth names
        out |= {f"effect/{i}": float(e) for i, e in enumerate(effects)} | {
            f"known/{i}": float(t) for i, t in enumerate(truth)
        }
    out |= {f"score/{n}": float(s) for n, s in zip(names, scores)}
    out |= {f"in/{n}": float(i) for n, i in zip(names, found.edges)}
    return ProbeResult("circuit", None, out, {"circuit": found.edges, "scores": scores, "edges": names})
