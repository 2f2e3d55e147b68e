"""Probes that find circuits in checkpoints (installed as `mechsynth.probes`); one file per probe.

A probe declares which inputs it reads and which hooks it needs on each, and the task truth it uses;
it applies to exactly the tasks whose batches carry that truth (`Task.truth_keys`). `run` draws each
input once, runs the model once per input with `run_with_cache` caching only the declared hooks, and
hands the probe a `View` of the results. Inputs are shared: probes that read the same input share one
forward pass, and `run_many` probes M side-by-side models (checkpoints of a run, or seeds) with one
batched forward per input. A probe file may also bring its own summary lines, report section and W&B
plots (`register(summary=, section=, wandb=)`); the timeline, report and W&B iterate over the probes.

Probes work on any TransformerLens-hooked model; a probe whose hooks a model lacks (attention on an
MLP) raises ProbeError saying what it needs.

Costly probes read one model at a time — the loss landscape probes (llc, sharpness) differentiate the
training loss through it, the circuit probe patches it — and run only when named, on a log-spaced subset
of checkpoints (`register(costly=True)`).

Layout: `_base` (Probe, register, View, ProbeResult), `_inputs` (drawing the inputs), `_run` (checking
and running), `_landscape` (what the landscape probes share), `_formation` (when a head forms: threshold
and chance, and the options that set them), `_timeline` (a run's results over its checkpoints); every module without a leading underscore
is a probe and is imported here.
"""

from __future__ import annotations

import importlib
import pkgutil

from mechsynth.probes._base import (
    PROBES,
    ModelHooks,
    OptionHooks,
    Probe,
    ProbeError,
    ProbeResult,
    Section,
    View,
    attention_hooks,
    formation_step,
    head_metrics,
    input_weights,
    no_hooks,
    register,
    render_heads,
    resolve,
)
from mechsynth.probes._formation import FormationOptions, threshold_field, uniform_attention
from mechsynth.probes._inputs import dims, draw
from mechsynth.probes._landscape import log_spaced
from mechsynth.probes._run import can_run, check_known, formation_threshold, names, options, run, run_many, why_not
from mechsynth.probes._timeline import Timeline, variant_key

for _m in pkgutil.iter_modules(__path__):
    if not _m.name.startswith("_"):  # _base, _inputs, _run: the machinery, not probes
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = [
    "PROBES",
    "FormationOptions",
    "ModelHooks",
    "OptionHooks",
    "Probe",
    "ProbeError",
    "ProbeResult",
    "Section",
    "Timeline",
    "View",
    "attention_hooks",
    "can_run",
    "check_known",
    "dims",
    "draw",
    "formation_step",
    "formation_threshold",
    "head_metrics",
    "threshold_field",
    "uniform_attention",
    "input_weights",
    "log_spaced",
    "names",
    "no_hooks",
    "options",
    "register",
    "render_heads",
    "resolve",
    "run",
    "run_many",
    "variant_key",
    "why_not",
]
