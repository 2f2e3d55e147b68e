"""Probe every checkpoint of a run and find when each circuit forms, next to the loss curve."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
import torch.nn as nn

from mechsynth import io, models, probes
from mechsynth.run import Run


@dataclass
class Timeline:
    steps: list[int]
    loss: list[Optional[float]]  # held-out loss at each probed step
    per_head: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # probe -> "L1H0" -> series
    metrics: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # probe -> metric -> series
    formation: dict[str, dict[str, Optional[int]]] = field(default_factory=dict)  # probe -> head -> step
    loss_drop_step: Optional[int] = None

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "loss": self.loss, "loss_drop_step": self.loss_drop_step,
                "probes": {name: {"per_head": self.per_head[name], "metrics": self.metrics[name],
                                  "formation": self.formation[name]} for name in self.per_head}}

    def formed(self) -> list[tuple[str, str, int]]:
        """(probe, head, step) for every head that formed a circuit, earliest first."""
        out = [(p, h, s) for p, heads in self.formation.items() for h, s in heads.items() if s is not None]
        return sorted(out, key=lambda x: x[2])


def formation_step(steps: Sequence[int], scores: Sequence[float], threshold: float) -> Optional[int]:
    """The first step after which the score stays at or above `threshold` (None if it never settles there)."""
    formed = None
    for step, score in zip(steps, scores):
        if score >= threshold:
            formed = step if formed is None else formed
        else:
            formed = None
    return formed


def steepest_drop(steps: Sequence[int], loss: Sequence[Optional[float]], window: float = 1.5) -> Optional[int]:
    """The step ending the largest loss decrease per unit of log(step), each decrease measured over at
    least a `window`-fold span of steps: log scale because checkpoints are log-spaced early and the
    first steps always fall fast; the span keeps noise between close checkpoints from winning."""
    pairs = [(s, l) for s, l in zip(steps, loss) if s > 0 and l is not None]
    best, best_rate = None, 0.0
    for s1, l1 in pairs:
        earlier = [(s, l) for s, l in pairs if s * window <= s1]
        if earlier:
            s0, l0 = earlier[-1]
            rate = (l0 - l1) / math.log(s1 / s0)
            if rate > best_rate:
                best, best_rate = s1, rate
    return best


def applicable(run: Run) -> list[str]:
    """Probes that make sense for this run: its task, and the hooks its model has (no attention probes on an MLP)."""
    model = run.trainable(run.steps[0]) if run.steps else None
    return [name for name in probes.names() if model is not None and probes.can_run(name, model, run.task)]


def chunk_size(model: nn.Module, batch_size: int, device: torch.device) -> int:
    """Checkpoints per batched forward. On a CPU, few: the attention patterns of a chunk should stay
    near the caches (4 x 64 sequences of 64 tokens measured fastest for the demo model; 32 took twice
    as long). On a GPU, many: one launch does the work of many."""
    budget = 2**30 if device.type == "cuda" else 2**22
    n_heads, n_ctx = getattr(model.cfg, "n_heads", 1), model.n_ctx
    return max(1, min(64, budget // (4 * batch_size * n_heads * n_ctx * n_ctx)))


def probe_run(run: Run, names: Optional[Sequence[str]] = None, steps: Optional[Sequence[int]] = None,
              batch_size: int = 64, seed: int = 0, device: str | torch.device = "cpu") -> Timeline:
    """Probe checkpoints `steps` (default: all). Checkpoints are loaded side by side into one model with
    a leading checkpoint axis (`n_models`), so each chunk of checkpoints costs one forward per input."""
    names = list(names) if names is not None else applicable(run)
    steps = list(steps) if steps is not None else run.steps
    loss = [run.meta(s)["metrics"].get(f"{run.task.main_eval}/loss") for s in steps]
    tl = Timeline(steps, loss, {n: {} for n in names}, {n: {} for n in names})
    init = run.trainable(run.steps[0], device)  # step 0: what hidden-progress probes compare with
    size = min(len(steps), chunk_size(init, batch_size, torch.device(device)))
    stacked = models.build(run.config.model, run.task.spec, n_models=size).to(device)
    params = dict(stacked.named_parameters())
    for start in range(0, len(steps), size):
        chunk = steps[start:start + size]
        weights = [run.weights(s) for s in chunk]
        weights += [weights[-1]] * (size - len(chunk))  # pad the last chunk; its extra results are dropped
        stacked.load_state_dict({k: torch.stack([w[k] for w in weights]) if k in params else weights[0][k]
                                 for k in weights[0]})  # buffers (e.g. the MLP's token values) are shared
        for results in probes.run_many(names, stacked, run.task, batch_size=batch_size, seed=seed, init=init)[:len(chunk)]:
            for name, result in results.items():
                if result.per_head is not None:
                    for layer in range(result.per_head.shape[0]):
                        for head in range(result.per_head.shape[1]):
                            tl.per_head[name].setdefault(f"L{layer}H{head}", []).append(float(result.per_head[layer, head]))
                for key, value in result.metrics.items():
                    tl.metrics[name].setdefault(key, []).append(value)
    for name in names:
        threshold = probes.PROBES.get(name).threshold
        tl.formation[name] = {h: formation_step(steps, series, threshold) for h, series in tl.per_head[name].items()}
    tl.loss_drop_step = steepest_drop(steps, loss)
    return tl


def stages(tl: Timeline) -> list[tuple[str, int]]:
    """icl_strategy's nearest strategy as (name, first step) for each change of stage."""
    series = tl.metrics.get("icl_strategy", {}).get("stage")
    if not series:
        return []
    out: list[tuple[str, int]] = []
    for step, stage in zip(tl.steps, series):
        if not out or out[-1][0] != int(stage):
            out.append((int(stage), step))
    return out


def summary(tl: Timeline, strategies: Sequence[str] = ()) -> list[str]:
    """Human-readable lines: when each circuit formed, beside the loss drop."""
    lines = [f"loss falls fastest at step {tl.loss_drop_step}"]
    for probe, head, step in tl.formed():
        lines.append(f"{probe:<16} {head} formed at step {step} (score ≥ {probes.PROBES.get(probe).threshold})")
    if stages(tl):
        lines.append("icl_strategy     stages: " + " -> ".join(
            f"{strategies[i] if i < len(strategies) else i} (step {s})" for i, s in stages(tl)))
    hidden = tl.metrics.get("hidden_progress")
    if hidden:
        recovered = formation_step(tl.steps, hidden["support_recovered"], 1.0)
        drop = tl.steps.index(tl.loss_drop_step) if tl.loss_drop_step in tl.steps else -1
        lines.append(f"hidden_progress  the support's weights lead the rest {hidden['drift_ratio'][drop]:.1f}x at the "
                     f"loss drop; the support is readable from the weights from step {recovered}")
    if not tl.formed() and not hidden:
        lines.append("no circuit stayed above its threshold")
    return lines


def log_to_wandb(tl: Timeline, logger) -> None:
    rows = []
    for i, step in enumerate(tl.steps):
        row: dict[str, Any] = {"probe_step": step}
        for name, heads in tl.per_head.items():
            row |= {f"probe/{name}/{h}": series[i] for h, series in heads.items()}
        for name, metrics in tl.metrics.items():
            row |= {f"probe/{name}/{m}": series[i] for m, series in metrics.items()}
        rows.append(row)
    logger.log_against("probe_step", rows)
    logger.summary({f"formation/{p}/{h}": s for p, heads in tl.formation.items() for h, s in heads.items()}
                   | {"formation/loss_drop_step": tl.loss_drop_step})


def write_table(tl: Timeline, path: Path) -> None:
    """The tidy table: one row per (step, probe, layer, head, metric, value)."""

    def fill(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "probe", "layer", "head", "metric", "value"])
            for name, heads in tl.per_head.items():
                for head, series in heads.items():
                    layer, h = head[1:].split("H")
                    w.writerows([s, name, layer, h, "score", v] for s, v in zip(tl.steps, series))
            for name, metrics in tl.metrics.items():
                for metric, series in metrics.items():
                    w.writerows([s, name, "", "", metric, v] for s, v in zip(tl.steps, series))

    io.atomic_write(path, fill)
