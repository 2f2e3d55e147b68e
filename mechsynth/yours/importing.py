"""Checkpoints from elsewhere into a run directory, so `mechsynth probe` and `report` read them unchanged.

What it reads, each checked by comparing the imported model's logits with the source's:
- state dicts in HookedTransformer's layout (`embed.W_E`, `blocks.0.attn.W_Q`, ...) or a TL 4
  TransformerBridge's (`embed.weight`, `blocks.0.attn.q.weight`, ...), as .safetensors or torch files
  (also inside {"state_dict": ...} or {"model_state_dict": ...}); the architecture is read off the
  shapes, and what shapes cannot say (act_fn, LN vs LNPre vs none) comes from `model` (TransformerConfig
  fields) or a TransformerLens config saved beside them;
- nanoGPT checkpoints (ckpt.pt: "model", "model_args", "iter_num"), converted here: TransformerLens 4
  dropped TL 3's nanoGPT converter, so one small function serves both;
- a tracr-compiled program as mechsynth stores one (NAME.json + NAME.safetensors: experiments/tracr_programs.py);
- models you hold, as (step, model) pairs (`import_models`, `probe_models`).
The step of a file is the last number in its name (nanoGPT: its iter_num).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import tempfile
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Optional

import einops
import torch
import torch.nn as nn
from torch import Tensor

from mechsynth import models
from mechsynth.config import check, from_dict, show
from mechsynth.errors import ConfigError, CorruptFileError, RunFileError, one_line
from mechsynth.models import ModelKind, TransformerConfig
from mechsynth.models.tl_compat import BUFFERS, from_bridge_layout
from mechsynth.runs import io, rundir
from mechsynth.tasks.base import Task
from mechsynth.training.train import TrainConfig, held_out_batches, held_out_metrics
from mechsynth.yours import external
from mechsynth.yours.monitor import as_dir, check_int, check_new, probe_names, random_tokens, resolve_task, start_run

SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt")
FIELD = "checkpoints"  # how errors name the sources


# ---- reading one file ---------------------------------------------------------------------------


def read(path: Path) -> tuple[dict[str, Tensor], Optional[int], dict[str, Any]]:
    """(state dict in HookedTransformer layout or as found, step if the file says, what the file says of its
    architecture: {"nanogpt": model_args} or {"tracr": json}); RunFileError naming the file it cannot read."""
    if not path.is_file():
        raise RunFileError(path, "no such file")
    if path.stat().st_size == 0:  # said plainly: torch.load's error for it is a bare EOFError
        raise CorruptFileError(path, "it is empty (0 bytes)")
    if path.suffix == ".json":
        return _read_tracr(path)
    if path.suffix == ".safetensors":
        return io.tensors_from_bytes(path.read_bytes(), path, "cpu"), None, {}
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickles fail in many ways; each is a file we cannot read
        raise CorruptFileError(path, f"not a torch checkpoint of tensors ({one_line(e)})") from None
    if isinstance(obj, dict) and "model_args" in obj and "model" in obj:
        return _nanogpt(obj["model"], obj["model_args"], path), obj.get("iter_num"), {"nanogpt": obj["model_args"]}
    for key in ("state_dict", "model_state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, Tensor) for v in obj.values()):
        raise CorruptFileError(path, "not a state dict (a mapping of names to tensors)")
    return {k.removeprefix("_orig_mod.").removeprefix("model."): v for k, v in obj.items()}, None, {}


def _read_tracr(path: Path) -> tuple[dict[str, Tensor], Optional[int], dict[str, Any]]:
    info = io.read_json(path)
    weights = path.with_suffix(".safetensors")
    if not isinstance(info, dict) or not {"config", "V", "V_out", "N"} <= set(info):
        raise CorruptFileError(path, "not a tracr program as mechsynth stores one (config, V, V_out, N)")
    if not weights.is_file():
        raise RunFileError(weights, "missing: the weights of the tracr program beside it")
    return io.tensors_from_bytes(weights.read_bytes(), weights, "cpu"), None, {"tracr": info}


def _nanogpt(sd: dict[str, Tensor], args: dict[str, Any], path: Path) -> dict[str, Tensor]:
    """nanoGPT's GPT state dict in HookedTransformer's layout: the fused c_attn split into per-head W_Q/W_K/W_V,
    nn.Linear weights ([out, in]) transposed, the tied lm_head as W_U, zeros for the biases a `bias=False`
    model lacks."""
    sd = {k.removeprefix("_orig_mod."): v for k, v in sd.items()}
    try:
        d, h = args["n_embd"], args["n_head"]
        zeros = lambda n: torch.zeros(n, dtype=sd["transformer.wte.weight"].dtype)  # noqa: E731
        get = lambda k, n: sd[k] if k in sd else zeros(n)  # noqa: E731  (bias=False: none stored)
        out = {"embed.W_E": sd["transformer.wte.weight"], "pos_embed.W_pos": sd["transformer.wpe.weight"]}
        for i in range(args["n_layer"]):
            p = f"transformer.h.{i}."
            w = sd[p + "attn.c_attn.weight"].T  # [d_model, 3 d_model]
            b = get(p + "attn.c_attn.bias", 3 * d)
            for j, name in enumerate("QKV"):
                out[f"blocks.{i}.attn.W_{name}"] = einops.rearrange(w[:, j * d:(j + 1) * d], "m (h e) -> h m e", h=h)
                out[f"blocks.{i}.attn.b_{name}"] = einops.rearrange(b[j * d:(j + 1) * d], "(h e) -> h e", h=h)
            out[f"blocks.{i}.attn.W_O"] = einops.rearrange(sd[p + "attn.c_proj.weight"].T, "(h e) m -> h e m", h=h)
            out[f"blocks.{i}.attn.b_O"] = get(p + "attn.c_proj.bias", d)
            for ln, ours in (("ln_1", "ln1"), ("ln_2", "ln2")):
                out[f"blocks.{i}.{ours}.w"], out[f"blocks.{i}.{ours}.b"] = sd[p + f"{ln}.weight"], get(p + f"{ln}.bias", d)
            out[f"blocks.{i}.mlp.W_in"] = sd[p + "mlp.c_fc.weight"].T.contiguous()
            out[f"blocks.{i}.mlp.b_in"] = get(p + "mlp.c_fc.bias", 4 * d)
            out[f"blocks.{i}.mlp.W_out"] = sd[p + "mlp.c_proj.weight"].T.contiguous()
            out[f"blocks.{i}.mlp.b_out"] = get(p + "mlp.c_proj.bias", d)
        out["ln_final.w"], out["ln_final.b"] = sd["transformer.ln_f.weight"], get("transformer.ln_f.bias", d)
        out["unembed.W_U"] = sd.get("lm_head.weight", sd["transformer.wte.weight"]).T.contiguous()
        out["unembed.b_U"] = zeros(out["unembed.W_U"].shape[1])
    except KeyError as e:
        raise CorruptFileError(path, f"a nanoGPT checkpoint without {e.args[0]!r}") from None
    return {k: v.contiguous() for k, v in out.items()}


# ---- the architecture ---------------------------------------------------------------------------


def hooked_layout(sd: dict[str, Tensor], n_heads: Optional[int] = None) -> dict[str, Tensor]:
    """A state dict in HookedTransformer's layout, whichever of the two TransformerLens layouts it is in (a
    TransformerBridge's fuses the heads, so it needs `n_heads`)."""
    if "embed.W_E" in sd:
        return {k: v for k, v in sd.items() if not k.endswith(BUFFERS)}
    if "embed.weight" in sd:
        if n_heads is None:
            raise ConfigError("model.n_heads", "missing: a TransformerBridge state dict does not say how many heads "
                                               "it has; give it (e.g. --set model.n_heads=4)")
        return from_bridge_layout(sd, n_heads)
    raise ConfigError(FIELD, f"weights in an unknown layout (first keys: {', '.join(list(sd)[:3])}); allowed: "
                             "HookedTransformer's (embed.W_E, ...), TransformerBridge's (embed.weight, ...), nanoGPT's")


def architecture(sd: dict[str, Tensor], told: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """TransformerConfig fields read off the shapes of a HookedTransformer-layout state dict, then what the
    file says (nanoGPT: GELU, LN), then `told` (the user's, which wins)."""
    W_Q = sd.get("blocks.0.attn.W_Q")
    if W_Q is None:
        raise ConfigError(FIELD, "weights without blocks.0.attn.W_Q: not a transformer")
    n_layers = 1 + max(int(m.group(1)) for k in sd if (m := re.match(r"blocks\.(\d+)\.", k)))
    n_heads, d_model, d_head = W_Q.shape
    mlp = sd.get("blocks.0.mlp.W_in")
    found: dict[str, Any] = {"n_layers": n_layers, "n_heads": n_heads, "d_model": d_model, "d_head": d_head,
                             "attn_only": mlp is None, "d_mlp": None if mlp is None else mlp.shape[1],
                             "positional": "standard" if "pos_embed.W_pos" in sd else "rotary",
                             **({"normalization": "LN"} if "blocks.0.ln1.w" in sd else {})}
    if "pos_embed.W_pos" in sd:
        found["n_ctx"] = sd["pos_embed.W_pos"].shape[0]
    if "nanogpt" in info:
        found["act_fn"] = "gelu"  # nanoGPT's MLP: nn.GELU() (exact erf)
    if "tracr" in info:
        found |= info["tracr"]["config"]
    found |= told
    # What shapes cannot say is asked for, never guessed: a wrong guess would import a different model.
    if "normalization" not in found:
        raise ConfigError("model.normalization", "missing: the weights have no layer-norm weights, which is LNPre or none; "
                                                 "give it (--set model.normalization=none)")
    if not found["attn_only"] and "act_fn" not in found:
        raise ConfigError("model.act_fn", "missing: the weights have MLPs and do not say their activation; give it "
                                          "(--set model.act_fn=gelu); allowed: relu, gelu, gelu_new, silu")
    return found


def _task_for(info: dict[str, Any], task: Task | str | None, sd: dict[str, Tensor]) -> Task:
    """The task given; else a tracr program's vocabulary and length, or the weights' (64 positions where they
    have no positional embedding to say), as random tokens."""
    if task is not None:
        return resolve_task(task, None)
    if "tracr" in info:
        t = info["tracr"]
        return random_tokens(t["V"], t["V_out"], t["N"])
    n_ctx = sd["pos_embed.W_pos"].shape[0] if "pos_embed.W_pos" in sd else 64
    return random_tokens(sd["embed.W_E"].shape[0], sd["unembed.W_U"].shape[1], n_ctx)


# ---- writing the run ----------------------------------------------------------------------------


def write_run(run_dir: Path | str, task: Task, kind: ModelKind, checkpoints: Iterable[tuple[int, dict[str, Tensor]]],
              origin: dict[str, Any], seed: int = 0, eval_batch_size: int = 512) -> Path:
    """A run directory holding `checkpoints` ((step, weights in HookedTransformer layout), steps increasing),
    each with the task's held-out metrics. Nothing is written until every checkpoint has been read."""
    run_dir = as_dir(run_dir, "--out")
    check_new(run_dir, "--out")
    items = list(checkpoints)
    if not items:
        raise ConfigError(FIELD, "no checkpoint given")
    for step, _ in items:  # (a nanoGPT file's iter_num is whatever its pickle holds)
        check_int(step, f"{FIELD} (step)", 0)
    items.sort(key=lambda c: c[0])
    steps = [s for s, _ in items]
    if len(set(steps)) != len(steps):
        raise ConfigError(FIELD, f"two checkpoints have the same step ({sorted(s for s in steps if steps.count(s) > 1)[0]}); "
                                 "name the files by step (the last number in each name)")
    built = [external.rebuild(kind, task.spec, w) for _, w in items]  # every checkpoint fits before any is written
    train = TrainConfig(steps=max(1, steps[-1]), checkpoints=max(2, len(steps)), eval_batch_size=eval_batch_size,
                        seed=seed, device="cpu")
    run_dir.mkdir(parents=True, exist_ok=True)
    with rundir.RunLock([run_dir]):
        start_run(run_dir, kind, task, train, origin, "--out")
        batches = held_out_batches(task, seed, eval_batch_size, torch.device("cpu"))
        writer = rundir.MetricsWriter(run_dir)
        try:
            for (step, weights), model in zip(items, built):
                metrics = held_out_metrics(model, task, batches)
                writer.write(step, metrics)
                rundir.write_checkpoint(run_dir, step, model.state_dict(), metrics, {"step": step})
        finally:
            writer.close()
    return run_dir


def step_of(path: Path) -> Optional[int]:
    numbers = re.findall(r"\d+", path.stem)
    return int(numbers[-1]) if numbers else None


def sources(paths: Sequence[Path | str]) -> list[Path]:
    """The checkpoint files named: files as given, directories as the checkpoint files inside them."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.suffix in SUFFIXES or (q.suffix == ".json" and q.with_suffix(".safetensors").exists()))
            found = [q for q in found if not (q.suffix == ".safetensors" and q.with_suffix(".json").exists())]
            if not found:
                raise RunFileError(p, f"holds no checkpoint file ({', '.join(SUFFIXES)})")
            out += found
        elif p.exists():
            out.append(p)
        else:
            raise RunFileError(p, "no such file or directory")
    return out


@typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
def import_checkpoints(paths: Sequence[Path | str] | Path | str, run_dir: Path | str, task: Task | str | None = None,
                       model: Optional[dict[str, Any]] = None) -> Path:
    """Checkpoint files (or directories of them) into a new run directory. `task`: a Task or a task name (None:
    random tokens the model's size; a tracr program brings its own); `model`: TransformerConfig fields the
    weights cannot say (act_fn, normalization), e.g. {"act_fn": "gelu"}."""
    run_dir = as_dir(run_dir, "--out")
    task = resolve_task(task, None) if task is not None else None  # a wrong name is said before any file is read
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    check(isinstance(paths, Iterable) and not isinstance(paths, bytes), FIELD,
          f"expected a path or a list of paths, got {show(paths)}")
    paths = list(paths)
    for p in paths:
        check(isinstance(p, (str, os.PathLike)), FIELD, f"expected a path or a list of paths, got {show(p)} among them")
    check(bool(paths), FIELD, "no checkpoint given")
    check(model is None or isinstance(model, dict), "model", f"expected a table of model fields such as "
                                                             f"{{'act_fn': 'gelu'}}, got {show(model)}")
    files = sources(paths)
    read_all = [read(f) for f in files]
    layouts = [hooked_layout(sd, (model or {}).get("n_heads")) for sd, _, _ in read_all]
    for f, weights in zip(files, layouts):  # the first such file, before anything is written
        if (bad := external.nonfinite(weights)) is not None:
            raise RunFileError(f, f"its weights are not finite ({bad} holds NaN or inf); {external.NONFINITE}: "
                                  "import the checkpoints before it")
    info = read_all[0][2]
    fields = architecture(layouts[0], dict(model or {}), info)
    the_task = _task_for(info, task, layouts[0])
    fields.setdefault("n_ctx", the_task.spec.n_ctx)
    kind = from_dict(TransformerConfig, fields, "model")
    models.validate(kind, the_task.spec)
    steps = [s if s is not None else step_of(f) for (_, s, _), f in zip(read_all, files)]
    if None in steps:
        if len(files) > 1:
            raise ConfigError(FIELD, f"{files[steps.index(None)]}: no step in its name; name each file by its step")
        steps = [0]
    origin = {"by": "mechsynth import", "files": [f.name for f in files], "format": next(iter(info), "state dict")}
    return write_run(run_dir, the_task, kind, zip(steps, layouts), origin)


@typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
def import_models(checkpoints: Iterable[tuple[int, nn.Module]], run_dir: Path | str, task: Task | str | None = None) -> Path:
    """(step, model) pairs you hold (TransformerLens transformers of either version, or mechsynth models) into a
    new run directory; each conversion is checked against the model's own logits."""
    items = _pairs(checkpoints)
    the_task = resolve_task(task, items[0][1])
    converted = []
    for step, m in items:
        try:
            converted.append((step, *external.convert(m, the_task)))
        except ConfigError as e:  # which of the models, when there are several
            raise ConfigError(e.field, f"the model at step {step}: {e.why}" if len(items) > 1 else e.why) from None
    kinds = {json.dumps(models.to_dict(k), sort_keys=True) for _, k, _ in converted}
    if len(kinds) > 1:
        raise ConfigError(FIELD, "the models differ in architecture; a run holds checkpoints of one model")
    origin = {"by": "mechsynth.import_models", "model": type(items[0][1]).__name__}
    return write_run(run_dir, the_task, converted[0][1], [(s, w) for s, _, w in converted], origin)


def _pairs(checkpoints: Any) -> list[tuple[int, nn.Module]]:
    """(step, model) pairs, each checked: a step an integer ≥ 0, a model a torch module."""
    check(isinstance(checkpoints, Iterable), FIELD, f"expected (step, model) pairs, got {show(checkpoints)}")
    items = list(checkpoints)
    check(bool(items), FIELD, "no (step, model) given")
    for item in items:
        check(isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[1], nn.Module), FIELD,
              f"expected (step, model) pairs, got {show(item)} among them")
        check_int(item[0], f"{FIELD} (step)", 0)
    return [(item[0], item[1]) for item in items]


@typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
def probe_models(checkpoints: Iterable[tuple[int, nn.Module]], task: Task | str | None = None,
                 run_dir: Path | str | None = None, probes: Optional[Sequence[str]] = None, **probe_args: Any):
    """The timeline `mechsynth probe` writes — per-head scores, formation steps, stages — for (step, model)
    pairs you hold. They are stored as a run first (in `run_dir`, or a new temporary directory: the timeline's
    `run_dir`), so that `mechsynth report RUN_DIR` (or `mechsynth.analysis.report.write(tl.run_dir)`) draws it afterwards."""
    from mechsynth import probes as probe_lib
    from mechsynth.analysis import timeline
    from mechsynth.runs.run import load_run

    # What probing will be asked is checked before the run is written, so that a mistake leaves no run behind.
    items, names = _pairs(checkpoints), probe_names(probes)
    the_task = resolve_task(task, items[0][1])
    allowed = list(inspect.signature(timeline.probe_run).parameters)[2:]  # after (run, names)
    for key in probe_args:
        check(key in allowed, key, f"not an argument of probe_models; allowed: {', '.join(allowed)}")
    if "batch_size" in probe_args:
        check_int(probe_args["batch_size"], "batch_size", 1)
    options = probe_args.get("options") or {}
    check(isinstance(options, dict), "options", f"expected {{probe: {{option: value}}}}, got {show(options)}")
    for name, table in options.items():
        probe_lib.options(name, table)
    if names:  # read off the model a checkpoint rebuilds, as `mechsynth probe` reads it
        first = external.trainable(items[0][1], the_task)
        for name in names:
            why = timeline.why_not_model(first, the_task, name)
            check(why is None, "probes", f"{name!r} does not apply: {why}")
    path, made = (as_dir(run_dir), None) if run_dir is not None else (None, Path(tempfile.mkdtemp(prefix="mechsynth-models-")))
    try:
        run = load_run(import_models(items, path or made / "run", the_task))
    except BaseException:
        if made is not None:  # the temporary directory is ours alone, and no run of the user's is in it yet
            shutil.rmtree(made, ignore_errors=True)
        raise
    tl = timeline.probe_run(run, names, **probe_args)
    timeline.save(tl, run.path)
    return tl


__all__ = ["import_checkpoints", "import_models", "probe_models", "read", "write_run"]
