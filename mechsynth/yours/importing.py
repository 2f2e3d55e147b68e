"""Checkpoints from elsewhere into a run directory, so `mechsynth probe` and `report` read them unchanged.

What it reads:
- checkpoints `save_checkpoint` wrote: the weights with the architecture, task and the logits of a fixed input
  beside them, which the rebuilt model must reproduce;
- state dicts in HookedTransformer's layout (`embed.W_E`, `blocks.0.attn.W_Q`, ...) or a TL 4
  TransformerBridge's (`embed.weight`, `blocks.0.attn.q.weight`, ...), as .safetensors or torch files
  (also inside {"state_dict": ...} or {"model_state_dict": ...}, with a TransformerLens config as "cfg");
  the architecture is read off the shapes, and what shapes cannot say (act_fn, LN vs LNPre vs none, a
  bridge's head count) comes from a TransformerLens config (`tl_config`) or `model` (TransformerConfig
  fields). Whatever is declared must agree with the shapes (a wrong head count contradicts W_Q's
  [n_heads, d_model, d_head]); a bridge's head count given alone is a guess, said and recorded;
- nanoGPT checkpoints (ckpt.pt: "model", "model_args", "iter_num"), converted here: TransformerLens 4
  dropped TL 3's nanoGPT converter, so one small function serves both;
- a tracr-compiled program as mechsynth stores one (NAME.json + NAME.safetensors: experiments/tracr_programs.py);
- models you hold, as (step, model) pairs (`import_models`, `probe_models`).
The step of a file is the last number in its name (nanoGPT: its iter_num; save_checkpoint: its step). What no
checkpoint records (how the model was trained) is listed in the run's origin["not_recorded"], not stored as
mechsynth's defaults. The architecture is read off the weights in `architecture`; the writing side of
save_checkpoint's files, and the check of a rebuilt model against their logits, is `saving`.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import tempfile
import typing
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Optional

import einops
import torch
import torch.nn as nn
from safetensors import safe_open
from torch import Tensor

from mechsynth import models, tasks
from mechsynth.config import check, from_dict, show, to_dict
from mechsynth.errors import ConfigError, CorruptFileError, RunFileError, one_line
from mechsynth.models import ModelKind, TransformerConfig, external
from mechsynth.runs import io, rundir
from mechsynth.runs.runconfig import RunConfig
from mechsynth.runs.wandb_log import WandbConfig
from mechsynth.tasks.base import Task, TaskSpec
from mechsynth.training.train import TrainConfig, held_out_batches, held_out_metrics
from mechsynth.yours.architecture import (
    FIELD,
    GIVEN,
    SAVED,
    TL_CONFIG,
    Found,
    architecture,
    bridge_heads,
    hooked_layout,
    read_tl_config,
    tl_fields,
)
from mechsynth.yours.monitor import as_dir, check_int, check_new, probe_names, random_tokens, resolve_task, start_run
from mechsynth.yours.saving import ENTRY, verify_saved

SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt")


# ---- reading one file ---------------------------------------------------------------------------


def read(path: Path) -> tuple[dict[str, Tensor], Optional[int], dict[str, Any]]:
    """(state dict in HookedTransformer layout or as found, step if the file says, what the file says of its
    architecture: {"mechsynth": save_checkpoint's entry}, {"tl_cfg": a TransformerLens config}, {"nanogpt":
    model_args} or {"tracr": json}); RunFileError naming the file it cannot read."""
    if not path.is_file():
        raise RunFileError(path, "no such file")
    if path.stat().st_size == 0:  # said plainly: torch.load's error for it is a bare EOFError
        raise CorruptFileError(path, "it is empty (0 bytes)")
    if path.suffix == ".json":
        return _read_tracr(path)
    if path.suffix == ".safetensors":
        sd = io.tensors_from_bytes(path.read_bytes(), path, "cpu")
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
        logits = sd.pop(f"{ENTRY}.check_logits", None)  # save_checkpoint's, beside the weights: not one of them
        if ENTRY in meta:
            entry = _entry(json.loads(meta[ENTRY]), path)
            return sd, entry["step"], {ENTRY: {**entry, "check_logits": logits}}
        return sd, None, {}
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickles fail in many ways; each is a file we cannot read
        raise CorruptFileError(path, f"not a torch checkpoint of tensors ({one_line(e)})") from None
    if isinstance(obj, dict) and "model_args" in obj and "model" in obj:
        return _nanogpt(obj["model"], obj["model_args"], path), obj.get("iter_num"), {"nanogpt": obj["model_args"]}
    info: dict[str, Any] = {}
    if isinstance(obj, dict) and isinstance(obj.get(ENTRY), dict) and isinstance(obj.get("state_dict"), dict):
        info[ENTRY] = _entry(obj[ENTRY], path)
    elif isinstance(
        obj, dict
    ):  # a TransformerLens config saved beside the weights, as {"cfg": {...}, "state_dict": ...}
        cfg = next((obj[k] for k in ("cfg", "config") if isinstance(obj.get(k), dict) and "d_model" in obj[k]), None)
        info = {"tl_cfg": cfg} if cfg is not None else {}
    step = info[ENTRY]["step"] if ENTRY in info else None
    for key in ("state_dict", "model_state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, Tensor) for v in obj.values()):
        raise CorruptFileError(path, "not a state dict (a mapping of names to tensors)")
    return {k.removeprefix("_orig_mod.").removeprefix("model."): v for k, v in obj.items()}, step, info


def _entry(entry: Any, path: Path) -> dict[str, Any]:
    """save_checkpoint's entry, checked for what import reads of it."""
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("model"), dict)
        or not isinstance(entry.get("step"), int)
    ):
        raise CorruptFileError(path, f"its {ENTRY!r} entry is not one mechsynth.save_checkpoint writes (model, step)")
    return entry


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
                out[f"blocks.{i}.attn.W_{name}"] = einops.rearrange(w[:, j * d : (j + 1) * d], "m (h e) -> h m e", h=h)
                out[f"blocks.{i}.attn.b_{name}"] = einops.rearrange(b[j * d : (j + 1) * d], "(h e) -> h e", h=h)
            out[f"blocks.{i}.attn.W_O"] = einops.rearrange(sd[p + "attn.c_proj.weight"].T, "(h e) m -> h e m", h=h)
            out[f"blocks.{i}.attn.b_O"] = get(p + "attn.c_proj.bias", d)
            for ln, ours in (("ln_1", "ln1"), ("ln_2", "ln2")):
                out[f"blocks.{i}.{ours}.w"], out[f"blocks.{i}.{ours}.b"] = (
                    sd[p + f"{ln}.weight"],
                    get(p + f"{ln}.bias", d),
                )
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


# ---- the task -----------------------------------------------------------------------------------


def _task_for(info: dict[str, Any], task: Task | str | None, sd: dict[str, Tensor]) -> Task:
    """The task given; else the one a mechsynth checkpoint names; else a tracr program's vocabulary and length, or
    the weights' (64 positions where they have no positional embedding to say), as random tokens."""
    if task is not None:
        return resolve_task(task, None)
    if "mechsynth" in info and isinstance(info["mechsynth"].get("task"), dict):
        table = dict(info["mechsynth"]["task"])
        return tasks.make(table.pop("name"), table)
    if "tracr" in info:
        t = info["tracr"]
        return random_tokens(t["V"], t["V_out"], t["N"])
    n_ctx = sd["pos_embed.W_pos"].shape[0] if "pos_embed.W_pos" in sd else 64
    return random_tokens(sd["embed.W_E"].shape[0], sd["unembed.W_U"].shape[1], n_ctx)


def task_fix(task: Task, ok: Callable[[TaskSpec], bool], target: int) -> Optional[str]:
    """The `--set task.KEY=VALUE` (one integer parameter, near `target`) that makes the task's spec `ok`, if one does."""
    params = to_dict(task.cfg)
    for key, value in params.items():
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        for v in sorted(
            {target + d for d in range(-3, 4)} | {target // 2 + d for d in range(-1, 2)}, key=lambda v: abs(v - target)
        ):
            if v < 1 or v == value:
                continue
            try:
                if ok(tasks.make(task.name, {**params, key: v}).spec):
                    return f"--set task.{key}={v}"
            except (ConfigError, ValueError, TypeError):
                continue
    return None


def check_task(sd: dict[str, Tensor], task: Task) -> None:
    """The weights against the task's sizes (vocabulary, classes, sequence length), one line naming both sizes and
    the --set (or --task) that fixes it, before a model is built."""
    spec, E, U, P = task.spec, sd["embed.W_E"], sd.get("unembed.W_U"), sd.get("pos_embed.W_pos")
    fits = lambda s: s.d_vocab == E.shape[0] and (U is None or s.d_vocab_out == U.shape[1])  # noqa: E731
    fix = lambda ok, target: task_fix(task, ok, target) or "the task's parameters"  # noqa: E731
    if spec.d_input is None and E.shape[0] != spec.d_vocab:
        raise ConfigError(
            "task",
            f"the checkpoint's vocabulary is {E.shape[0]} tokens (embed.W_E is {external.shape_text(E)}) and "
            f"task {task.name}'s is {spec.d_vocab} (d_vocab); give {fix(fits, E.shape[0])}, or "
            "the --task they learned",
        )
    if U is not None and U.shape[1] != spec.d_vocab_out:
        raise ConfigError(
            "task",
            f"the checkpoint has {U.shape[1]} outputs (unembed.W_U is {external.shape_text(U)}) and task "
            f"{task.name} has {spec.d_vocab_out} target classes (d_vocab_out); give "
            f"{fix(fits, U.shape[1])}, or the --task they learned",
        )
    if P is not None and P.shape[0] < spec.n_ctx:
        length = task_fix(task, lambda s: s.n_ctx == P.shape[0], P.shape[0])
        raise ConfigError(
            length.split("=")[0].removeprefix("--set ") if length else "task",
            f"the checkpoint has {P.shape[0]} positions (pos_embed.W_pos is {external.shape_text(P)}) and task "
            f"{task.name}'s sequences are {spec.n_ctx} tokens; give the length it was trained at: "
            f"{length or f'a task of at most {P.shape[0]} tokens'}",
        )


# ---- writing the run ----------------------------------------------------------------------------

# What a checkpoint does not record of how the model was trained or began: left out of config.json's tables and
# listed in origin["not_recorded"] (rundir.unknown_keys), which the report shows as "not recorded" rather than as
# the defaults a reader parses there.
UNKNOWN_TRAIN = (
    "batch_size",
    "data",
    "n_train",
    "set_seed",
    "lr",
    "optimizer",
    "betas",
    "momentum",
    "weight_decay",
    "decay",
    "warmup_steps",
    "schedule",
    "min_lr_frac",
    "grad_clip",
    "seed",
    "init_from",
    "params",
)
UNKNOWN_MODEL = ("init_seed", "init_range")  # how the weights began: no checkpoint says
NOT_RECORDED = tuple(f"train.{k}" for k in UNKNOWN_TRAIN) + tuple(f"model.{k}" for k in UNKNOWN_MODEL)


def _rebuild(kind: ModelKind, task: Task, weights: dict[str, Tensor]) -> nn.Module:
    """The mechsynth model of `kind` for `task` holding `weights`, or one line on the first parameter that does
    not fit and what to give instead."""
    hint = (
        f" (task {task.name}); give the model fields (--set model.KEY=VALUE) and --task the weights were trained with"
    )
    return external.rebuild(kind, task.spec, weights, hint)


def write_run(
    run_dir: Path | str,
    task: Task,
    kind: ModelKind,
    checkpoints: Iterable[tuple[int, dict[str, Tensor]]],
    origin: dict[str, Any],
    seed: int = 0,
    eval_batch_size: int = 512,
    unknown: Sequence[str] = NOT_RECORDED,
) -> Path:
    """A run directory holding `checkpoints` ((step, weights in HookedTransformer layout), steps increasing),
    each with the task's held-out metrics; `unknown`: the dotted config keys its source does not record (left out
    of config.json's tables, listed in its origin). Nothing is written until every checkpoint has been read."""
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
        raise ConfigError(
            FIELD,
            f"two checkpoints have the same step ({sorted(s for s in steps if steps.count(s) > 1)[0]}); "
            "name the files by step (the last number in each name)",
        )
    built = [_rebuild(kind, task, w) for _, w in items]  # every checkpoint fits before any is written
    train = TrainConfig(
        steps=max(1, steps[-1]),
        checkpoints=max(2, len(steps)),
        eval_batch_size=eval_batch_size,
        seed=seed,
        device="cpu",
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    with rundir.RunLock([run_dir]):
        tables = rundir.flatten(RunConfig.of(task, kind, train, WandbConfig(mode="disabled")).to_dict())
        start_run(
            run_dir,
            kind,
            task,
            train,
            origin,
            "--out",  # (a model kind without init_range: not listed)
            not_recorded=[k for k in unknown if k in tables],
        )
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
            found = sorted(
                q
                for q in p.iterdir()
                if q.suffix in SUFFIXES or (q.suffix == ".json" and q.with_suffix(".safetensors").exists())
            )
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
def import_checkpoints(
    paths: Sequence[Path | str] | Path | str,
    run_dir: Path | str,
    task: Task | str | None = None,
    model: Optional[dict[str, Any]] = None,
    tl_config: Path | str | dict[str, Any] | None = None,
) -> Path:
    """Checkpoint files (or directories of them) into a new run directory. `task`: a Task or a task name (None:
    the one a save_checkpoint file names, else random tokens the model's size; a tracr program brings its own);
    `model`: TransformerConfig fields the weights cannot say (act_fn, normalization), e.g. {"act_fn": "gelu"};
    `tl_config`: the model's TransformerLens config (a JSON file or dict of HookedTransformerConfig fields). What
    is declared must agree with the weights' shapes; what was guessed is recorded in the run's origin ("guessed")
    and said by `summary`."""
    run_dir = as_dir(run_dir, "--out")
    task = resolve_task(task, None) if task is not None else None  # a wrong name is said before any file is read
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    check(
        isinstance(paths, Iterable) and not isinstance(paths, bytes),
        FIELD,
        f"expected a path or a list of paths, got {show(paths)}",
    )
    paths = list(paths)
    for p in paths:
        check(isinstance(p, (str, os.PathLike)), FIELD, f"expected a path or a list of paths, got {show(p)} among them")
    check(bool(paths), FIELD, "no checkpoint given")
    check(
        model is None or isinstance(model, dict),
        "model",
        f"expected a table of model fields such as {{'act_fn': 'gelu'}}, got {show(model)}",
    )
    tl = read_tl_config(tl_config) if tl_config is not None else None
    files = sources(paths)
    read_all = [read(f) for f in files]
    info = read_all[0][2]
    if ENTRY in info:
        kind, the_task, found, weights = _saved(files, read_all, task, dict(model or {}), tl)
    else:
        kind, the_task, found, weights = _inferred(files, read_all, task, dict(model or {}), tl, tl_config is not None)
    steps = [s if s is not None else step_of(f) for (_, s, _), f in zip(read_all, files)]
    if None in steps:
        if len(files) > 1:
            raise ConfigError(FIELD, f"{files[steps.index(None)]}: no step in its name; name each file by its step")
        steps = [0]
    fmt = (
        "mechsynth.save_checkpoint"
        if ENTRY in info
        else "nanoGPT"
        if "nanogpt" in info
        else "tracr"
        if "tracr" in info
        else "TransformerBridge state dict"
        if "embed.weight" in read_all[0][0]
        else "HookedTransformer state dict"
    )
    origin = {
        "by": "mechsynth import",
        "files": [f.name for f in files],
        "format": fmt,
        "architecture": found.source,
        "guessed": found.guessed,
    }
    return write_run(run_dir, the_task, kind, zip(steps, weights), origin)


def _saved(
    files: list[Path], read_all: list, task: Optional[Task], told: dict[str, Any], tl: Optional[dict[str, Any]]
) -> tuple[ModelKind, Task, Found, list[dict[str, Tensor]]]:
    """The architecture and task a save_checkpoint file stores: what is declared besides must agree with it, and
    each file's rebuilt model must compute the logits stored with it."""
    entry = read_all[0][2][ENTRY]
    kind = models.parse(entry["model"], "model")
    stored = models.to_dict(kind)
    declared = {
        **({k: (v, TL_CONFIG) for k, v in tl_fields(tl, "--tl-config").items()} if tl is not None else {}),
        **{k: (v, GIVEN) for k, v in told.items()},
    }
    for key, (value, whence) in declared.items():
        if key in stored and stored[key] != value:
            raise ConfigError(
                f"model.{key}",
                f"{value} (from {whence}), but {files[0].name} stores its architecture "
                f"({key} {stored[key]}); leave the {whence} out: the file says it",
            )
    sizes = entry.get("sizes", {})
    if task is not None or isinstance(entry.get("task"), dict):
        the_task = _task_for(read_all[0][2], task, read_all[0][0])
    else:  # random tokens of the model's own sizes
        the_task = random_tokens(sizes["d_vocab"], sizes["d_vocab_out"] or sizes["d_vocab"], sizes["n_ctx"])
    weights = [sd for sd, _, _ in read_all]
    if "embed.W_E" in weights[0] and isinstance(kind, TransformerConfig):
        check_task(weights[0], the_task)
    models.validate(kind, the_task.spec)
    for f, (sd, _, inf) in zip(files, read_all):
        if ENTRY in inf:
            verify_saved(_rebuild(kind, the_task, sd), inf[ENTRY], inf[ENTRY].get("check_logits"), f)
    said = {k: SAVED for k in stored if k != "kind" and f"model.{k}" not in NOT_RECORDED}  # (init: not said)
    return kind, the_task, Found(stored, said), weights


def _inferred(
    files: list[Path],
    read_all: list,
    task: Optional[Task],
    told: dict[str, Any],
    tl: Optional[dict[str, Any]],
    tl_given: bool,
) -> tuple[ModelKind, Task, Found, list[dict[str, Tensor]]]:
    """The architecture read off the weights' shapes, checked against what is declared (a TransformerLens config
    given or stored beside the weights, then --set), with the guesses said."""
    info = read_all[0][2]
    tl = tl if tl is not None else info.get("tl_cfg")
    declared: dict[str, Any] = tl_fields(tl, "--tl-config" if tl_given else f"{files[0].name} (its cfg)") if tl else {}
    source = {k: TL_CONFIG for k in declared}
    for key, value in told.items():
        if key in declared and declared[key] != value:
            raise ConfigError(
                f"model.{key}",
                f"{value} (from --set), but the TransformerLens config says {declared[key]}; give one of them",
            )
        declared[key], source[key] = value, GIVEN
    n_heads = bridge_heads(read_all[0][0], declared, source)
    layouts = [hooked_layout(sd, n_heads) for sd, _, _ in read_all]
    for f, weights in zip(files, layouts):  # the first such file, before anything is written
        if (bad := external.nonfinite(weights)) is not None:
            raise RunFileError(
                f,
                f"its weights are not finite ({bad} holds NaN or inf); {external.NONFINITE}: "
                "import the checkpoints before it",
            )
    found = architecture(layouts[0], declared, source, info)
    q = read_all[0][0].get("blocks.0.attn.q.weight")
    if q is not None and "embed.W_E" not in read_all[0][0] and source.get("n_heads") == GIVEN:
        rows = q.shape[0]
        fits = [n for n in range(1, rows + 1) if rows % n == 0]
        found.guessed["n_heads"] = (
            f"{n_heads} from --set, which the weights cannot confirm: a TransformerBridge state "
            f"dict fuses the heads (blocks.0.attn.q.weight is {external.shape_text(q)}), and "
            f"{', '.join(map(str, fits))} heads fit it alike, each a different model; give "
            "--tl-config FILE, or save with mechsynth.save_checkpoint"
        )
    the_task = _task_for(info, task, layouts[0])
    check_task(layouts[0], the_task)
    found.fields.setdefault("n_ctx", the_task.spec.n_ctx)
    found.source.setdefault("n_ctx", "the task")
    kind = from_dict(TransformerConfig, found.fields, "model")
    models.validate(kind, the_task.spec)
    return kind, the_task, found, layouts


def summary(run_dir: Path | str) -> list[str]:
    """What an import inferred, as `mechsynth import` prints it: the checkpoints and architecture (with what was
    guessed on that line), where each field came from, the task, and what the run does not record."""
    from mechsynth.runs.run import load_run

    config = rundir.read_config(run_dir)
    origin, run = config.get("origin", {}), load_run(run_dir)
    steps = run.steps
    shown = ", ".join(map(str, steps[:5])) + (
        f", …, {steps[-1]}" if len(steps) > 6 else f", {steps[-1]}" if len(steps) == 6 else ""
    )
    guessed = origin.get("guessed") or {}
    first = (
        f"imported {len(steps)} checkpoint{'s' if len(steps) > 1 else ''} (step{'s' if len(steps) > 1 else ''} "
        f"{shown}; {origin.get('format')}) as a {models.describe(run.config.model)}"
        + (f"; GUESSED: {', '.join(guessed)} (see below)" if guessed else "")
    )
    by_source: dict[str, list[str]] = {}
    table = models.to_dict(run.config.model)
    for key, whence in (origin.get("architecture") or {}).items():
        by_source.setdefault(whence, []).append(f"{key} {table.get(key)}")
    lines = [first, *(f"  from {whence}: {', '.join(items)}" for whence, items in by_source.items())]
    params = ", ".join(f"{k}={v}" for k, v in run.config.task_params.items())
    lines.append(f"  task: {run.config.task_name} ({params})")
    lines += [f"  guessed {key}: {why}" for key, why in guessed.items()]
    if run.not_recorded:
        lines.append(
            f"  not recorded (the checkpoints do not say how they were trained): {', '.join(sorted(run.not_recorded))}"
        )
    return lines


# ---- models you hold ---------------------------------------------------------------------------


@typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
def import_models(
    checkpoints: Iterable[tuple[int, nn.Module]], run_dir: Path | str, task: Task | str | None = None
) -> Path:
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
        check(
            isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[1], nn.Module),
            FIELD,
            f"expected (step, model) pairs, got {show(item)} among them",
        )
        check_int(item[0], f"{FIELD} (step)", 0)
    return [(item[0], item[1]) for item in items]


@typing.no_type_check  # it checks its arguments: tests see the user's error, not the test-time checker's
def probe_models(
    checkpoints: Iterable[tuple[int, nn.Module]],
    task: Task | str | None = None,
    run_dir: Path | str | None = None,
    probes: Optional[Sequence[str]] = None,
    **probe_args: Any,
):
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
    path, made = (
        (as_dir(run_dir), None) if run_dir is not None else (None, Path(tempfile.mkdtemp(prefix="mechsynth-models-")))
    )
    try:
        run = load_run(import_models(items, path or made / "run", the_task))
    except BaseException:
        if made is not None:  # the temporary directory is ours alone, and no run of the user's is in it yet
            shutil.rmtree(made, ignore_errors=True)
        raise
    tl = timeline.probe_run(run, names, **probe_args)
    timeline.save(tl, run.path)
    return tl


__all__ = ["import_checkpoints", "import_models", "probe_models", "read", "summary", "write_run"]
