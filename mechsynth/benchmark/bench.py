"""Every registered circuit-discovery method on every zoo case at every checkpoint, scored against the case's truth.

Per method and checkpoint (with the case's ablation; the circuit is the fewest top-|score| edges keeping `LEVEL` of
the clean-vs-ablated gap):
- `auroc`: ROC AUC of |score| separating the truth's edges from the others (`circuits.auc`); `auroc_task` against
  the task's own circuit, where it names one;
- `cpr`, `cmd`: MIB's areas under the faithfulness curve over its edge budgets and between it and 1
  (`circuits.mib_curve`);
- `faithfulness`, `edges`: the circuit's; `false_edges`: those of its edges outside the exact-patching circuit at
  this checkpoint; `rank_exact`: Spearman's ρ between |score| and exact patching's |effect| over the edges;
- `seconds`, `edges_per_s`: the method's own time on this checkpoint.

Over training (`over_training`), where a case has several checkpoints:
- `detected`: the first checkpoint from which the method's top K edges keep ≥ LEVEL for good, K the size of the
  final exact-patching circuit; `lag`: that checkpoint's index minus exact patching's (0: on time; None: never);
- `false_transient`: the share of the method's circuit outside the exact one, averaged over the checkpoints before
  exact patching detects the final circuit (while a transient circuit, such as markov_icl's unigram stage, does
  the work);
- `rank_transition`: `rank_exact` averaged over the checkpoints around exact patching's detection (one before to
  one after).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, Optional

import torch
from scipy.stats import spearmanr

from mechsynth import circuits
from mechsynth.benchmark.zoo import LEVEL, Case

EXACT = "patching"


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    kept = [v for v in values if v is not None and not math.isnan(v)]
    return sum(kept) / len(kept) if kept else None


def _rank(a: torch.Tensor, b: torch.Tensor) -> Optional[float]:
    if bool((a.abs() == a.abs()[0]).all()) or bool((b.abs() == b.abs()[0]).all()):
        return None  # a constant ranking agrees with nothing
    return float(spearmanr(a.abs().double().numpy(), b.abs().double().numpy()).statistic)


def score_checkpoint(
    model: Any, case: Case, methods: Sequence[str], options: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Every method on one checkpoint of `case`: its row per method, and what the truth was."""
    graph = circuits.Graph.of(model)
    src = circuits.source(model, graph, case.clean, case.corrupted, case.ablation)
    clean_m, ablated_m = circuits.ends(model, graph, case.clean, src, case.metric)
    t0 = time.perf_counter()
    exact = circuits.discover(EXACT, model, graph, case.clean, src, case.metric).detach().cpu().float()
    exact_seconds = time.perf_counter() - t0
    exact_found = circuits.circuit(model, graph, case.clean, src, case.metric, exact, LEVEL)
    exact_circuit = exact_found.edges
    truth = graph.mask(case.truth) if case.truth is not None else exact_circuit
    task_truth = graph.mask(case.task_truth()) if case.task_truth is not None else None
    rows: dict[str, Any] = {}
    for name in methods:
        if name == EXACT:  # the reference, computed above
            scores, seconds, found = exact, exact_seconds, exact_found
        else:
            t0 = time.perf_counter()
            scores = circuits.discover(name, model, graph, case.clean, src, case.metric, **options.get(name, {}))
            seconds = time.perf_counter() - t0
            scores = scores.detach().cpu().float()
            found = circuits.circuit(model, graph, case.clean, src, case.metric, scores, LEVEL)
        mib = circuits.mib_curve(model, graph, case.clean, src, case.metric, scores)
        rows[name] = {
            "auroc": circuits.auc(scores, truth),
            "auroc_task": circuits.auc(scores, task_truth) if task_truth is not None else None,
            "cpr": mib.cpr,
            "cmd": mib.cmd,
            "mib_faithfulness": mib.faithfulness,
            "faithfulness": found.faithfulness,
            "edges": int(found.edges.sum()),
            "false_edges": int((found.edges & ~exact_circuit).sum()),
            "rank_exact": _rank(scores, exact),
            "seconds": seconds,
            "edges_per_s": len(scores) / seconds if seconds > 0 else None,
            "curve": found.curve,
        }
    return {
        "gap": clean_m - ablated_m,
        "n_edges": len(graph.edge_list),
        "truth_edges": int(truth.sum()),
        "exact_edges": int(exact_circuit.sum()),
        "methods": rows,
    }


def detected(curve_at_k: Sequence[float]) -> Optional[int]:
    """The first index from which the values stay ≥ LEVEL (None: never)."""
    at = None
    for i, f in enumerate(curve_at_k):
        at = (i if at is None else at) if f >= LEVEL else None
    return at


def over_training(points: list[dict[str, Any]], methods: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Detection, lag, false circuits in the transient phase and rank agreement over the transition, per method."""
    K = points[-1]["exact_edges"]
    at_k = {m: [p["methods"][m]["curve"][K - 1] for p in points] for m in methods}
    exact_curve = [p["methods"][EXACT]["curve"][K - 1] for p in points] if EXACT in methods else None
    reference = detected(exact_curve) if exact_curve is not None else None
    out = {}
    for m in methods:
        rows = [p["methods"][m] for p in points]
        found = detected(at_k[m])
        before = rows[:reference] if reference is not None else []
        window = rows[max(0, reference - 1) : reference + 2] if reference is not None else []
        out[m] = {
            "detected": found,
            "lag": found - reference if found is not None and reference is not None else None,
            "false_transient": _mean([r["false_edges"] / r["edges"] for r in before if r["edges"]]),
            "rank_transition": _mean([r["rank_exact"] for r in window]),
            "top_k": K,
        }
    return out


def run_case(case: Case, methods: Sequence[str], options: dict[str, dict[str, Any]], log: Any = None) -> dict[str, Any]:
    """Every method on every checkpoint of `case`, and what training adds."""
    points = []
    for step, model in case.checkpoints():
        point = score_checkpoint(model, case, methods, options)
        points.append({"step": step, **point})
        if log is not None:
            shown = ", ".join(f"{m} AUROC {point['methods'][m]['auroc']:.2f}" for m in methods)
            log(f"{case.name} step {step}: {shown}")
    out: dict[str, Any] = {"kind": case.kind, "truth": case.truth_says, "checkpoints": points, "notes": case.notes}
    if len(points) > 1:
        out["over_training"] = over_training(points, methods)
    return out


def leaderboard(results: dict[str, Any], methods: Sequence[str]) -> list[dict[str, Any]]:
    """One row per (method, case), then one per method over every case: means over checkpoints."""
    rows = []
    for case, r in results["cases"].items():
        for m in methods:
            per = [p["methods"][m] for p in r["checkpoints"]]
            trained = r.get("over_training", {}).get(m, {})
            rows.append(
                {
                    "method": m,
                    "case": case,
                    "checkpoints": len(per),
                    "auroc": _mean([x["auroc"] for x in per]),
                    "cpr": _mean([x["cpr"] for x in per]),
                    "cmd": _mean([x["cmd"] for x in per]),
                    "lag": trained.get("lag"),
                    "false_transient": trained.get("false_transient"),
                    "rank_transition": trained.get("rank_transition"),
                    "seconds": _mean([x["seconds"] for x in per]),
                    "edges_per_s": _mean([x["edges_per_s"] for x in per]),
                }
            )
    for m in methods:
        mine = [r for r in rows if r["method"] == m and r["case"] != "all"]
        rows.append(
            {
                "method": m,
                "case": "all",
                "checkpoints": sum(r["checkpoints"] for r in mine),
                **{
                    k: _mean([r[k] for r in mine])
                    for k in (
                        "auroc",
                        "cpr",
                        "cmd",
                        "lag",
                        "false_transient",
                        "rank_transition",
                        "seconds",
                        "edges_per_s",
                    )
                },
            }
        )
    return rows
