"""A run's probe results over its checkpoints: every probe's per-head series, metrics and formation steps, next to
the held-out loss (mechsynth.analysis.timeline probes a run into one, writes it and reads it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from mechsynth.config import to_dict
from mechsynth.errors import UserError
from mechsynth.probes import _run


@dataclass
class Timeline:
    steps: list[int]
    loss: list[Optional[float]]  # held-out loss at each probed step
    per_head: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # probe -> "L1H0" -> series
    metrics: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # probe -> metric -> series
    formation: dict[str, dict[str, Optional[int]]] = field(default_factory=dict)  # probe -> head -> step
    loss_drop_step: Optional[int] = None
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # probe -> the options it ran with
    run_dir: Optional[Path] = field(
        default=None, compare=False
    )  # the run it was probed from (not stored in probes.json)
    # probe -> `variant_key` -> {"per_head", "metrics", "formation", "options"}: the probe's earlier results with
    # other options (the circuit probe's other methods), kept beside the latest, which the fields above hold
    variants: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The timeline as probes.json stores it (mechsynth.analysis.timeline.as_json adds the stages found in it)."""
        return {
            "steps": self.steps,
            "loss": self.loss,
            "loss_drop_step": self.loss_drop_step,
            "probes": {
                name: {
                    "per_head": self.per_head[name],
                    "metrics": self.metrics[name],
                    "formation": self.formation[name],
                }
                | ({"options": self.options[name]} if name in self.options else {})
                | ({"variants": self.variants[name]} if self.variants.get(name) else {})
                for name in self.per_head
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Timeline":
        """The inverse of `to_json`; KeyError, TypeError or ValueError when `data` is not a timeline."""
        probed = data.get("probes", {})
        tl = cls(
            list(data["steps"]),
            list(data["loss"]),
            {n: dict(p["per_head"]) for n, p in probed.items()},
            {n: dict(p["metrics"]) for n, p in probed.items()},
            {n: dict(p["formation"]) for n, p in probed.items()},
            data.get("loss_drop_step"),
            {n: dict(p["options"]) for n, p in probed.items() if "options" in p},
            variants={
                n: {k: _variant(v) for k, v in p["variants"].items()} for n, p in probed.items() if p.get("variants")
            },
        )
        n = len(tl.steps)  # (probes.json files written before variants have none: they load as they are)
        kept = [v[part] for d in tl.variants.values() for v in d.values() for part in ("per_head", "metrics")]
        lengths = [len(tl.loss)] + [
            len(v) for d in [*tl.per_head.values(), *tl.metrics.values(), *kept] for v in d.values()
        ]
        if any(length != n for length in lengths):
            raise ValueError(f"a series does not have one value per step ({n} steps)")
        return tl

    def results(self, name: str) -> dict[str, dict[str, Any]]:
        """Every result of probe `name` kept, by `variant_key`: the latest first, then the others with other options
        (empty when it did not run); each {"per_head", "metrics", "formation", "options"}."""
        if name not in self.metrics:
            return {}
        latest = {
            "per_head": self.per_head.get(name, {}),
            "metrics": self.metrics[name],
            "formation": self.formation.get(name, {}),
            "options": self.options.get(name, {}),
        }
        return {variant_key(name, latest["options"]): latest} | {
            k: v for k, v in sorted(self.variants.get(name, {}).items()) if k != variant_key(name, latest["options"])
        }

    def formed(self) -> list[tuple[str, str, int]]:
        """(probe, head, step) for every head that formed a circuit, earliest first."""
        out = [(p, h, s) for p, heads in self.formation.items() for h, s in heads.items() if s is not None]
        return sorted(out, key=lambda x: x[2])


def _variant(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "per_head": dict(entry.get("per_head", {})),
        "metrics": dict(entry["metrics"]),
        "formation": dict(entry.get("formation", {})),
        "options": dict(entry.get("options", {})),
    }


def variant_key(name: str, options: dict[str, Any]) -> str:
    """What tells a probe's results with different options apart, for a person: its `method` first, then each
    option that differs from its default ("eap", "eap_ig, ablation=mean"); "defaults" when none does."""
    try:
        found = _run.options(name)
        defaults = to_dict(found) if found is not None else {}
    except (UserError, KeyError):  # a probe since removed, or renamed options: every option it ran with
        defaults = {}
    method = [str(options["method"])] if "method" in options else []
    # `checkpoints` says where a costly probe ran, not what it measures: a rerun on more of them replaces the result
    changed = [
        f"{k}={v}"
        for k, v in sorted(options.items())
        if k not in ("method", "checkpoints") and defaults.get(k, object()) != v
    ]
    return ", ".join(method + changed) or "defaults"
