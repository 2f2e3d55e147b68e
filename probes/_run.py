"""Running probes: check that each applies, draw each distinct input once, run the model once per
input caching only the declared hooks (and once per declared ablation, with those hooks mean-ablated),
and hand each probe a View."""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from numbers import Integral
from typing import Any, Optional

import torch
from mechsynth.probes._base import (
    PROBES,
    OptionHooks,
    Probe,
    ProbeError,
    ProbeResult,
    View,
    hook_names,
    input_weights,
    resolve,
)
from mechsynth.probes._formation import FormationOptions, raised
from mechsynth.probes._inputs import dims, draw, vector_width
from torch import Tensor

from mechsynth import hooks
from mechsynth.config import check, from_dict, show
from mechsynth.errors import ConfigError


def names() -> list[str]:
    return PROBES.names()


def check_known(asked: Sequence[Any], field: str) -> None:
    """A ConfigError naming `field` for the first of `asked` (a user's values, of any type) that is no probe."""
    for n in asked:
        check(n in names(), field, f"unknown probe {show(n)}; allowed: {', '.join(names())}")


def problem(probe: Probe, model: Any, task: Any, init: Any, options: Any = None) -> Optional[str]:
    """Why `probe` cannot run on this model and task (with `options`, its options; None: the defaults), in one line;
    None when it can."""
    if not isinstance(model, torch.nn.Module):
        return (
            f"probe {probe.name!r} reads a model (TransformerLens's HookedTransformer or TransformerBridge, or "
            f"mechsynth.hooked_model), got {show(model)}"
        )
    if probe.needs_task and task is None:
        needs = f"the task's ground truth ({', '.join(probe.truth)})" if probe.truth else "the task's own inputs"
        return f"probe {probe.name!r} reads {needs}; pass the task"
    if task is not None:
        provided = tuple(getattr(task, "truth_keys", ()))
        missing = [k for k in probe.truth if k not in provided]
        if missing:
            return (
                f"probe {probe.name!r} needs truth {', '.join(missing)}, which task {task.name!r} does not "
                f"provide (it provides: {', '.join(provided) or 'none'})"
            )
        for input in probe.reads:
            split = input[5:] if input.startswith("task:") else None
            if split is not None and split not in task.splits:
                return (
                    f"probe {probe.name!r} reads split {split!r}, which task {task.name!r} does not have "
                    f"(splits: {', '.join(task.splits)})"
                )
    if task is not None and not getattr(model, "n_models", None):
        from mechsynth.models.external import task_misfit  # (here: `mechsynth probes` lists without TransformerLens)

        why = task_misfit(model, task.spec, task.name)  # sizes first: every later check assumes they fit
        if why is not None:
            return f"probe {probe.name!r} cannot read this model: {why}"
    width = vector_width(model, task)
    if probe.token_ids and width is not None:
        feeds = f"task {task.name!r} feeds" if task is not None else "this model reads"
        return (
            f"probe {probe.name!r} compares input token ids, and {feeds} {width}-wide vectors instead "
            "(continuous inputs)"
        )
    if task is not None and probe.task_check is not None:
        why = probe.task_check(task)
        if why is not None:
            return why
    if probe.costly and getattr(model, "n_models", None):
        return f"probe {probe.name!r} differentiates one model at a time; pass one model, not {model.n_models} side by side"
    if probe.needs_init and init is None:
        return f"probe {probe.name!r} compares with the initial weights; pass init= (the step-0 model)"
    why = probe.model_check(model) if probe.model_check is not None else None  # the probe's own reason first
    if why is not None:
        return why
    n_layers = max(1, dims(model)[0])  # at least one layer, so a model without attention misses its hooks
    reads_attention = any(
        hooks.attn_pattern(0) in hook_names(h, model, n_layers, options) for h in probe.reads.values()
    )
    if reads_attention and dims(model)[0] and dims(model)[3] < 2:
        return (
            f"probe {probe.name!r} reads attention between positions, and this model's context has "
            f"{dims(model)[3]} position (a one-token task such as associative_memory)"
        )
    have = getattr(model, "hook_dict", {})
    for names_of in list(probe.reads.values()) + [h for named in probe.ablations.values() for h in named.values()]:
        missing = [h for h in hook_names(names_of, model, n_layers, options) if h not in have]
        if missing and isinstance(names_of, OptionHooks) and options is not None:
            named = [h for h in missing if h not in hook_names(names_of, model, n_layers, None)]
            if named:
                return f"probe {probe.name!r}: its options name hook {named[0]!r}, which {type(model).__name__} lacks"
        if missing:
            kind = "attention heads" if hooks.attn_pattern(0) in missing else f"hook {missing[0]!r}"
            return f"{type(model).__name__} has no {kind}; probe {probe.name!r} needs a transformer"
    lacking = [w for w in probe.weights if not hasattr(model, w)]
    if lacking:
        return f"probe {probe.name!r} reads weights {', '.join(lacking)}, which {type(model).__name__} lacks"
    return None


def why_not(name: str, model: Any, task: Any = None, options: Any = None) -> Optional[str]:
    """Why probe `name` does not apply to this model and task (None: it does), without running it; `options`: its
    options (a table of overrides, or the options), where they name what it reads."""
    return problem(PROBES.get(name), model, task, init=True, options=_run_options(name, options) if options else None)


def can_run(name: str, model: Any, task: Any = None) -> bool:
    """Whether probe `name` applies to this model and task (without running it)."""
    return why_not(name, model, task) is None


@typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
def options(name: str, table: Optional[dict[str, Any]] = None) -> Any:
    """Probe `name`'s options from a table of overrides (`{"n_beta": 30}`), every other field at its
    default; ConfigError naming `<probe>.<field>` for a bad one. None for a probe without options."""
    probe = PROBES.get(name)
    check(
        table is None or isinstance(table, Mapping),
        name,
        f"expected a table of options ({{option: value}}), got {show(table)}",
    )
    if probe.options is None:
        if table:
            raise ConfigError(name, f"probe {name!r} takes no options; got {', '.join(map(str, table))}")
        return None
    return from_dict(probe.options, dict(table or {}), name)


def formation_threshold(name: str, option: Any = None, chance: Optional[float] = None) -> float:
    """The score a head must reach and hold for probe `name`'s circuit to count as formed: its threshold, as
    `option` sets it (overrides, or its options), raised where `chance` (what a uniform head scores on the
    probe's inputs) is high, for probes with FormationOptions (`_formation`); else the registered threshold."""
    opts = _run_options(name, option)
    if not isinstance(opts, FormationOptions):
        return PROBES.get(name).threshold
    return raised(opts.threshold, opts.over_chance, chance)


@typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
def run(
    name: str,
    model: Any,
    task: Any = None,
    *,
    batch_size: int = 64,
    seed: int = 0,
    init: Any = None,
    option: Optional[dict[str, Any]] = None,
    train_set: Any = None,
    train: Any = None,
    last: Optional[ProbeResult] = None,
) -> ProbeResult:
    """Run probe `name` on a hooked model; same seed, same result. `init`: the model at step 0, for
    probes that measure how far the weights moved; `option`: overrides of the probe's options; `last`: its
    result on the last checkpoint, for probes that compare with it (the circuit probe)."""
    return run_many(
        [name],
        model,
        task,
        batch_size=batch_size,
        seed=seed,
        init=init,
        options={name: option or {}},
        train_set=train_set,
        train=train,
        last={name: last} if last is not None else None,
    )[0][name]


@typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
@torch.no_grad()  # costly probes turn gradients back on for themselves
def run_many(
    probe_names: Sequence[str],
    model: Any,
    task: Any = None,
    *,
    batch_size: int = 64,
    seed: int = 0,
    init: Any = None,
    options: Optional[dict[str, Any]] = None,
    train_set: Any = None,
    train: Any = None,
    last: Optional[dict[str, ProbeResult]] = None,
) -> list[dict[str, ProbeResult]]:
    """Run several probes, one forward pass per distinct input. `model` may hold M models side by side
    (`n_models=M`, e.g. M checkpoints of a run): the result is then one {probe: result} per model.
    `options`: {probe: overrides of its options (a table), or its options}; for the costly probes, `train_set`: the run's fixed
    training set, if any (the loss they differentiate), and `train`: the run's TrainConfig; `last`: {probe: its
    result at the run's last checkpoint}, for the probes that compare with it."""
    for field, value, lo in (("batch_size", batch_size, 1), ("seed", seed, None)):  # before any input is drawn
        check(
            isinstance(value, Integral) and not isinstance(value, bool),
            field,
            f"expected an integer, got {show(value)}",
        )
        check(lo is None or value >= lo, field, f"must be ≥ {lo}, got {value}")
    chosen = [PROBES.get(n) for n in probe_names]
    opts = {p.name: _run_options(p.name, (options or {}).get(p.name)) for p in chosen}
    for probe in chosen:
        why = problem(probe, model, task, init, opts[probe.name])
        if why is not None:
            raise ProbeError(why)
    n_layers, n_heads = dims(model)[:2]
    wanted: dict[str, set[str]] = {}
    for probe in chosen:
        for input, hooks_of in probe.reads.items():
            wanted.setdefault(resolve(input, task), set()).update(
                hook_names(hooks_of, model, n_layers, opts[probe.name])
            )
        for input, named in probe.ablations.items():  # the unablated run gives the means
            for hooks_of in named.values():
                wanted[resolve(input, task)].update(hook_names(hooks_of, model, n_layers))
    device = next(model.parameters()).device
    batches = {i: draw(i, model, task, batch_size, seed).to(device) for i in wanted}
    m = getattr(model, "n_models", None)
    was_training = model.training
    if was_training:  # toggling is not free on a TransformerBridge, so only when needed
        model.eval()
    try:
        outputs = {
            i: model.run_with_cache(batches[i].tokens, names_filter=lambda n, h=names: n in h)
            for i, names in wanted.items()
        }
        ablated = _ablate(chosen, model, task, n_layers, batches, outputs, m)
    finally:
        if was_training:
            model.train()

    facing = input_weights(model)
    from mechsynth.models.external import trainable
    from mechsynth.models.tl_compat import is_hooked_transformer

    # The landscape probes differentiate the plain model: a TransformerLens one is converted (external.trainable).
    plain = (
        trainable(model, task)
        if any(p.costly and not p.hooked for p in chosen) and is_hooked_transformer(model)
        else model
    )
    results = []
    for index in range(m) if m else [None]:
        pick = (lambda t: t) if index is None else (lambda t: t.unflatten(0, (m, -1))[index])
        view = View(
            task,
            n_layers,
            n_heads,
            {
                i: (batches[i], logits if index is None else logits[index], {k: pick(v) for k, v in cache.items()})
                for i, (logits, cache) in outputs.items()
            },
            _weights(model, index),
            _weights(init, None),
            facing,
            model=model if index is None else None,
            train_set=train_set,
            train=train,
        )
        own = {p.name: {k: v if index is None else v[index] for k, v in ablated[p.name].items()} for p in chosen}
        results.append(
            {
                p.name: p.fn(
                    replace(
                        view,
                        ablated=own[p.name],
                        options=opts[p.name],
                        last=(last or {}).get(p.name),
                        model=plain if view.model is not None and p.costly and not p.hooked else view.model,
                    )
                )
                for p in chosen
            }
        )
    return results


def _run_options(name: str, given: Any) -> Any:
    """Options as given: an options instance is used as is, a table is parsed (`options`), anything else refused."""
    kind = PROBES.get(name).options
    return given if kind is not None and isinstance(given, kind) else options(name, given)


def _ablate(
    chosen: Sequence[Probe],
    model: Any,
    task: Any,
    n_layers: int,
    batches: dict[str, Any],
    outputs: dict[str, Any],
    m: Optional[int],
) -> dict[str, dict[tuple[str, str], Tensor]]:
    """Each probe's declared ablations: {probe: {(input, ablation): logits}}, one forward per distinct
    (input, hooks) however many probes declare it."""
    done: dict[tuple[str, tuple[str, ...]], Tensor] = {}
    out: dict[str, dict[tuple[str, str], Tensor]] = {}
    for probe in chosen:
        out[probe.name] = {}
        for input, named in probe.ablations.items():
            i = resolve(input, task)
            for name, hooks_of in named.items():
                key = (i, tuple(sorted(set(hook_names(hooks_of, model, n_layers)))))
                if key not in done:
                    done[key] = mean_ablated(model, batches[i].tokens, outputs[i][1], key[1], m)
                out[probe.name][(i, name)] = done[key]
    return out


def mean_ablated(model: Any, tokens: Tensor, cache: Any, names: Sequence[str], m: Optional[int] = None) -> Tensor:
    """The model's logits with each hook in `names` replaced by its mean over the batch in `cache` (the
    unablated forward), per position; with M models side by side (`m`), each model's over its own batch."""

    def mean(t: Tensor) -> Tensor:
        if m is None:
            return t.mean(0, keepdim=True).expand_as(t).contiguous()
        return t.unflatten(0, (m, -1)).mean(1, keepdim=True).expand(m, t.shape[0] // m, *t.shape[1:]).reshape(t.shape)

    means = {n: mean(cache[n]) for n in names}
    return model.run_with_hooks(tokens, fwd_hooks=[(n, lambda act, hook, v=means[n]: v) for n in names])


def _weights(model: Any, index: Optional[int]) -> Optional[Callable[[str], Tensor]]:
    if model is None:
        return None
    return lambda name: getattr(model, name).detach() if index is None else getattr(model, name).detach()[index]
