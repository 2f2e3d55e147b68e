"""Every bad config is one line on stderr, exit 2, before any work (no run directory): a fuzz corpus.

The cases come from two places:

- tests/fuzz_configs.jsonl, hand-picked: what a fuzz campaign found (tracebacks, hangs, NaN runs),
  the bounds of every size, cross-field checks, unreadable TOML, device names, configs too large for
  any machine's memory. Each line: an id, a base config (`base`, one of BASES; `drop` leaves sections
  out, `prefix`/`append` add raw TOML before/after it) or a whole raw TOML file (`toml`), `--set`
  overrides (`set`), the field the error must name (`field`), and optionally `requires` (a case that
  only fails where CUDA / MPS is absent, or on TransformerLens 4). `<<X*N>>` in TOML text or a --set
  value stands for X repeated N times (a 5000-deep array without a 10 kB line).
- generated here: every field of every config dataclass (each registered task's Config, each model kind's,
  TrainConfig, WandbConfig) with values wrong for its type (a string, a bool for a number, a float
  for an int, a list, a table, inf/nan for a float) and, where the field declares a range, just past
  each end and 2**64. W&B's fields get type errors only.

Each case runs `mechsynth.cli.main(["train", ...])` in-process. The base configs train for 2 steps on
the CPU without W&B, so a case that wrongly passes validation fails in a second instead of hanging.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
import torch

from mechsynth import models, tasks
from mechsynth.cli import main
from mechsynth.config import describe, read_toml
from mechsynth.errors import ConfigError
from mechsynth.models import MLPConfig, TransformerConfig
from mechsynth.models.tl_compat import TL_MAJOR
from mechsynth.runs.runconfig import parse_config
from mechsynth.runs.wandb_log import WandbConfig
from mechsynth.training import budget
from mechsynth.training.seeds import saved_activation_bytes
from mechsynth.training.train import TrainConfig, resolve_device

CORPUS = Path(__file__).with_name("fuzz_configs.jsonl")
ROOT = Path(__file__).parents[1]

TRAIN = {"steps": 2, "batch_size": 8, "eval_every": 1, "eval_batch_size": 16, "checkpoints": 2, "device": "cpu"}
SMALL = {"n_layers": 1, "d_model": 16}
BASES: dict[str, dict[str, dict[str, Any]]] = {
    "sparse_parity": {"task": {"name": "sparse_parity", "n": 6, "k": 2}, "model": SMALL},
    "sparse_boolean": {"task": {"name": "sparse_boolean", "length": 8, "s": 2}, "model": SMALL},
    "markov_icl": {"task": {"name": "markov_icl", "k": 3, "length": 16}, "model": SMALL},
    "automata": {"task": {"name": "automata", "automaton": "parity", "length": 8}, "model": SMALL},
    "modular_arithmetic": {"task": {"name": "modular_arithmetic", "p": 7}, "model": SMALL},
    "factual_recall": {
        "task": {"name": "factual_recall", "subjects": 8, "relations": 2, "answers": 3, "length": 8},
        "model": SMALL,
    },
    "causal_icl": {"task": {"name": "causal_icl", "k": 3, "length": 8}, "model": SMALL},
    "associative_memory": {"task": {"name": "associative_memory", "inputs": 16}, "model": SMALL},
    "hmm_masked": {"task": {"name": "hmm_masked", "k": 2, "d": 3, "length": 4}, "model": SMALL},
    "random_tokens": {"task": {"name": "random_tokens", "d_vocab": 4, "n_ctx": 4}, "model": SMALL},
    "flip_flop": {"task": {"name": "flip_flop", "length": 8}, "model": SMALL},
    "bounded_dyck": {"task": {"name": "bounded_dyck", "length": 8, "eval_long_length": 8}, "model": SMALL},
    "linear_regression": {"task": {"name": "linear_regression", "d": 3, "k": 4, "n_tasks": 4}, "model": SMALL},
    "single_index": {"task": {"name": "single_index", "d": 4, "k_star": 2}, "model": {"kind": "mlp", "width": 4}},
    "hierarchical_polynomial": {
        "task": {"name": "hierarchical_polynomial", "d": 4},
        "model": {"kind": "mlp", "width": 4},
    },
    "mlp": {"task": {"name": "sparse_parity", "n": 6, "k": 2}, "model": {"kind": "mlp", "width": 8}},
    "sin": {"task": {"name": "sparse_parity", "n": 6, "k": 3}, "model": {"kind": "sin"}},
    "polynet": {"task": {"name": "sparse_parity", "n": 6, "k": 3}, "model": {"kind": "polynet", "degree": 3}},
    "disentangled": {"task": {"name": "causal_icl", "k": 3, "length": 8}, "model": {"kind": "disentangled"}},
    "linear_memory": {"task": {"name": "associative_memory", "inputs": 16}, "model": {"kind": "linear_memory", "d": 8}},
    "mlp_memory": {
        "task": {"name": "associative_memory", "inputs": 16},
        "model": {"kind": "mlp_memory", "d": 8, "m": 8},
    },
    "recurrent": {"task": {"name": "flip_flop", "length": 8}, "model": {"kind": "recurrent", "d_model": 8}},
    "minimal_induction": {"task": {"name": "markov_icl", "k": 3, "length": 16}, "model": {"kind": "minimal_induction"}},
    "neuron": {
        "task": {"name": "single_index", "d": 4, "k_star": 3, "loss": "correlation"},
        "model": {"kind": "neuron", "degree": 3, "smoothing": 1.0},
    },
    "linearized": {
        "task": {"name": "markov_icl", "k": 3, "length": 16},
        "model": {"kind": "linearized", "base": {"n_layers": 1, "d_model": 16, "attn_only": True}},
    },
}
KIND_BASES = {
    "transformer": "sparse_parity",
    "mlp": "mlp",
    "sin": "sin",
    "polynet": "polynet",
    "disentangled": "disentangled",
    "linear_memory": "linear_memory",
    "mlp_memory": "mlp_memory",
    "recurrent": "recurrent",
    "minimal_induction": "minimal_induction",
    "neuron": "neuron",
    "linearized": "linearized",
}  # a base config whose model is of that kind
REQUIRES = {
    "no_cuda": lambda: not torch.cuda.is_available(),
    "no_mps": lambda: not torch.backends.mps.is_available(),
    "tl4": lambda: TL_MAJOR >= 4,
}


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    text: str  # the TOML file
    sets: tuple[str, ...]  # --set overrides
    field: str  # the field the one-line error must name
    requires: str = ""
    more: bool = False  # a field's second and later wrong values


def toml_value(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(map(toml_value, v)) + "]"
    if isinstance(v, dict):  # an inline table (the linearized kind's base)
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(v)  # strings, ints, bools and finite floats are written alike in TOML


def base_toml(name: str, drop: tuple[str, ...] = ()) -> str:
    sections = {**BASES[name], "train": TRAIN, "wandb": {"mode": "disabled"}}
    return "".join(
        f"[{s}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in table.items())
        for s, table in sections.items()
        if s not in drop
    )


def expand(text: str) -> str:
    """`<<X*N>>` -> X repeated N times."""
    return re.sub(r"<<(.+?)\*(\d+)>>", lambda m: m.group(1) * int(m.group(2)), text)


def corpus_cases() -> list[Case]:
    out = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        e = json.loads(line)
        if "toml" in e:
            text = e["toml"]
        else:
            text = e.get("prefix", "") + base_toml(e["base"], tuple(e.get("drop", ()))) + e.get("append", "")
        out.append(Case(e["id"], expand(text), tuple(expand(s) for s in e["set"]), e["field"], e.get("requires", "")))
    return out


# ---- generated: every field of every config dataclass, with values wrong for its type --------------

NOT_FINITE = ["inf", "-inf", "nan", "1" + "0" * 400]  # (the last: an integer past float's range)


def wrong_values(tp: Any, meta: Any, types_only: bool) -> list[str]:
    """TOML literals that are invalid for a field of type `tp` (with `doc(...)` metadata `meta`)."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Union:  # Optional[X]: TOML has no null, so X's wrong values are the wrong values
        return wrong_values(next(a for a in args if a is not type(None)), meta, types_only)
    if origin is Literal:
        return ['"not-one-of-the-choices"', "5", "true", '["a"]', "{a = 1}"]
    if origin in (tuple, list):
        inner = [v for v in wrong_values(args[0], {}, True) if not v.startswith(("[", "{"))][:3]
        return ['"x"', "5", "{a = 1}", *(f"[{v}]" for v in inner), *(f"[{v}, {v}]" for v in inner[:1])]
    if tp is bool:
        return ["1", '"true"', "1.5", "[true]", "{a = 1}"]
    if tp is int:
        out = ['"1"', "true", "1.5", "inf", "[1]", "{a = 1}"]
        lo, hi = meta.get("lo"), meta.get("hi")
        if not types_only:
            out += [str(lo - 1)] if lo is not None else []
            out += [str(hi + 1), str(2**64)] if hi is not None else []
        return out
    if tp is float:
        return ['"1.0"', "true", "[1.0]", "{a = 1}", *([] if meta.get("nonfinite") else NOT_FINITE)]
    if tp is str:
        return ["5", "true", "1.5", '["a"]', "{a = 1}"]
    if isinstance(tp, type) and issubclass(tp, models.ModelKind):  # another kind's table (the linearized kind's base)
        return ["5", '"transformer"', "true", "1.5", "[1]"]  # (a wrong table names its own key: the corpus has those)
    raise AssertionError(f"no wrong values for {tp}: add them")


def config_classes() -> list[tuple[str, type, str, bool]]:
    """(section, dataclass, base config, type errors only) for every config dataclass."""
    out = [("task", tasks.TASKS.get(name).Config, name if name in BASES else "", False) for name in tasks.names()]
    out += [("model", models.MODEL_KINDS.get(kind), KIND_BASES.get(kind, ""), False) for kind in models.names()]
    out += [
        ("train", TrainConfig, "sparse_parity", False),
        ("wandb", WandbConfig, "sparse_parity", True),
    ]  # WandbConfig is another module's: its types only
    return out


def generated_cases() -> list[Case]:
    out = []
    for section, cls, base, types_only in config_classes():
        assert base, f"{cls.__name__}: add a base config for it to BASES (its task) or KIND_BASES (its model kind)"
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            for i, v in enumerate(wrong_values(hints[f.name], f.metadata, types_only)):
                out.append(
                    Case(
                        f"gen-{base}-{section}.{f.name}={v[:12]}",
                        base_toml(base),
                        (f"{section}.{f.name}={v}",),
                        f"{section}.{f.name}",
                        more=i > 0,
                    )
                )
    return out


CASES = corpus_cases() + generated_cases()
# `make test` runs the corpus and one wrong value per field; `make test-all` every generated value too
PARAMS = [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.more else []) for c in CASES]


def names_field(line: str, field: str) -> bool:
    """`mechsynth: error: FIELD: ...` (or `FIELD[i]: ...` for an element of a list)."""
    head = f"mechsynth: error: {field}"
    return line.startswith(head) and line[len(head) : len(head) + 1] in (":", "[")


@pytest.mark.parametrize("case", PARAMS)
def test_bad_config_is_one_line_exit_2_before_any_work(case: Case, tmp_path, capsys):
    if case.requires and not REQUIRES[case.requires]():
        pytest.skip(f"valid here ({case.requires} does not hold)")
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(case.text, encoding="utf-8")
    args = ["train", str(cfg), "--no-progress", "--out", str(tmp_path / "run")]
    for s in case.sets:
        args += ["--set", s]
    code = main(args)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code == 2, f"exit {code}: {err[-500:]}"
    assert len(lines) == 1 and names_field(lines[0], case.field), f"wanted one line naming {case.field}: {err[:500]!r}"
    assert not (tmp_path / "run").exists(), "no work may start on bad input"


def test_corpus_is_large_and_has_every_reported_failure():
    entries = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    ids = [e["id"] for e in entries]
    assert len(entries) >= 200 and len(set(ids)) == len(ids)
    reported = [
        "section-task-is-int",
        "section-model-is-list",
        "section-train-is-int",
        "section-wandb-is-list",
        "device-cpu:abc",
        "device-mps-unavailable",
        "device-cuda-unavailable",
        "seed-train.seed-sparse_parity-2**64",
        "seed-model.init_seed-sparse_parity-2**64",
        "seed-task.seed-sparse_parity-2**64",
        "seeds-2**64",
        "toml-deep-array-5000",
        "size-train.steps-100000000000000000000",
        "size-train.checkpoints-1000000000",
        "size-model.n_layers-100000000",
        "alpha-inf",
        "float-train.weight_decay-inf",
        "float-model.init_range-inf",
        "memory-sparse_parity-model.n_layers",
        "memory-sparse_parity-train.batch_size",
    ]
    assert set(reported) <= set(ids), set(reported) - set(ids)
    assert len(CASES) >= len(entries) + 300  # the generated cases


# ---- the memory estimate ---------------------------------------------------------------------------

TASKS = [
    ("markov_icl", {"k": 3, "length": 32}),
    ("sparse_parity", {"n": 20, "k": 2}),
    ("automata", {"automaton": "dihedral", "n": 4, "length": 12}),
    ("sparse_boolean", {"length": 10, "s": 2}),
]
VARIANTS = [
    {},
    {"attn_only": True},
    {"n_heads": 4, "d_model": 32, "d_mlp": 48},
    {"normalization": "none"},
    {"normalization": "LNPre", "d_head": 6},
    {"positional": "rotary", "n_heads": 2},
    {"n_layers": 3, "d_model": 64},
    {"n_ctx": 100},
]


@pytest.mark.parametrize("task_name, params", TASKS, ids=[t for t, _ in TASKS])
@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "default")
def test_parameter_count_is_exact(task_name, params, kw):
    task = tasks.make(task_name, params)
    cfg = TransformerConfig(**{"n_layers": 2, "d_model": 16, **kw})
    assert budget.param_count(cfg, task) == sum(p.numel() for p in models.build(cfg, task.spec).parameters())
    side_by_side = models.build(cfg, task.spec, n_models=3)
    assert 3 * budget.param_count(cfg, task) == sum(p.numel() for p in side_by_side.parameters())


@pytest.mark.parametrize("width", [8, 100])
def test_parameter_count_is_exact_for_the_mlp(width):
    task = tasks.make("sparse_parity", {"n": 30, "k": 3})
    cfg = MLPConfig(width=width)
    assert budget.param_count(cfg, task) == sum(p.numel() for p in models.build(cfg, task.spec).parameters())


@pytest.mark.parametrize("task_name, params", TASKS, ids=[t for t, _ in TASKS])
@pytest.mark.parametrize("kw", VARIANTS[:7], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "default")
def test_activation_estimate_is_in_the_ballpark(task_name, params, kw):
    """Against what a forward really keeps for its backward pass, on sequences of the longest split."""
    task = tasks.make(task_name, params)
    cfg = TransformerConfig(**{"n_layers": 2, "d_model": 16, **kw})
    split = task.splits[-1]
    tokens = task.sample(32, torch.Generator().manual_seed(0), "cpu", split).tokens
    assert tokens.shape[1] == task.spec.n_ctx
    real = saved_activation_bytes(models.build(cfg, task.spec), tokens)
    estimate, _ = budget.activation_bytes(cfg, task, 32)
    assert 0.5 < estimate / real < 3, (estimate, real)


def test_estimate_scales_with_seeds_and_counts_the_data():
    task = tasks.make("markov_icl", {"k": 3, "length": 32})
    one = budget.estimate(TransformerConfig(), TrainConfig(), task)
    four = budget.estimate(TransformerConfig(), TrainConfig(seeds=4), task)
    assert four.total > 3.9 * one.total
    bigger_chunk = budget.estimate(TransformerConfig(), TrainConfig(data_chunk=64), task)
    assert budget.describe(bigger_chunk)["data"] == 4 * budget.describe(one)["data"]


@pytest.mark.parametrize(
    "model, train, task_params, available, field",
    [
        ({"n_layers": 8, "d_model": 512}, {"batch_size": 1, "eval_batch_size": 1}, {}, 2**20, "model.n_layers"),
        ({"n_layers": 1, "d_model": 512}, {"batch_size": 1, "eval_batch_size": 1}, {}, 2**20, "model.d_model"),
        (
            {"n_layers": 1, "d_model": 64, "d_mlp": 65536},
            {"batch_size": 1, "eval_batch_size": 1},
            {},
            2**20,
            "model.d_mlp",
        ),
        ({"n_layers": 1, "d_model": 64, "n_ctx": 60000}, {"eval_batch_size": 1}, {}, 2**24, "model.n_ctx"),
        ({"d_model": 64}, {"batch_size": 4096, "eval_batch_size": 16}, {}, 2**26, "train.batch_size"),
        ({"d_model": 16}, {"batch_size": 8, "eval_batch_size": 4096}, {}, 2**26, "train.eval_batch_size"),
        (
            {"d_model": 16, "n_heads": 16},
            {"batch_size": 8, "eval_batch_size": 8},
            {"length": 4096},
            2**30,
            "task.length",
        ),
        ({"d_model": 64}, {"seeds": 64}, {}, 2**27, "train.seeds"),
        ({"d_model": 16}, {"data_chunk": 4096, "batch_size": 64}, {"k": 64, "order": 2}, 2**33, "train.data_chunk"),
    ],
)
def test_the_error_names_what_drives_the_estimate(model, train, task_params, available, field):
    task = tasks.make("markov_icl", {"k": 3, "length": 64, **task_params})
    model_cfg, train_cfg = TransformerConfig(**model), TrainConfig(**train)
    with pytest.raises(ConfigError) as e:
        budget.check(model_cfg, train_cfg, task, torch.device("cpu"), available=available)
    assert e.value.field == field, str(e.value)
    assert "\n" not in str(e.value) and budget.fmt_bytes(available) in str(e.value)


@pytest.mark.slow
def test_every_experiment_config_fits():
    from mechsynth.sweep import load_sweep

    configs = sorted(ROOT.glob("e[xm]*/*.toml"))  # examples/ and experiments/
    assert len(configs) >= 4
    for path in configs:
        data = read_toml(path)
        if "sweep" in data:  # every run the sweep expands to is parsed, memory check included
            assert len(load_sweep(path).jobs) > 1
            continue
        cfg = parse_config(data)
        est = budget.estimate(cfg.model, cfg.train, cfg.build_task())
        assert est.total < 2**30, f"{path.name}: {budget.describe(est)}"  # normal runs are nowhere near a limit


def test_cuda_devices_and_memory_are_this_machines(monkeypatch):
    """(Checked without a GPU: CUDA's answers are faked.) cuda:N must exist here, and the memory the
    estimate is held against is the GPU's, not the host's."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(total_memory=2**30))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "Fake GPU")
    assert resolve_device("cuda:1") == torch.device("cuda:1") and resolve_device("auto").type == "cuda"
    with pytest.raises(ConfigError, match="^train.device: 'cuda:2' but this machine has 2 CUDA device"):
        resolve_device("cuda:2")
    task = tasks.make("markov_icl", {"k": 3, "length": 64})
    small, large = TransformerConfig(d_model=64), TransformerConfig(n_layers=16, d_model=1024)
    budget.check(small, TrainConfig(), task, torch.device("cuda:1"))
    with pytest.raises(ConfigError, match="^train.batch_size: .* more than the 1.0 GiB cuda:1 \\(Fake GPU\\) has"):
        budget.check(large, TrainConfig(), task, torch.device("cuda:1"))


def test_a_finished_run_opens_without_its_device():
    """`resources=False` (opening a run trained elsewhere) checks the config but not this machine."""
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    data = {**BASES["sparse_parity"], "train": {**TRAIN, "device": "cuda:3"}}
    with pytest.raises(ConfigError, match="^train.device:"):
        parse_config(data)
    assert parse_config(data, resources=False).train.device == "cuda:3"


# ---- bounds hold however a config is made, and say so ----------------------------------------------


def test_bounds_hold_for_configs_built_in_python():
    with pytest.raises(ConfigError, match="^steps: must be ≤ 10\\*\\*9"):
        dataclasses.replace(TrainConfig(), steps=10**20)
    with pytest.raises(ConfigError, match="^init_range: must be a finite number"):
        TransformerConfig(init_range=float("inf"))
    with pytest.raises(ConfigError, match="^order:"):
        tasks.TASKS.get("markov_icl").Config(order=10**20)  # bounded before k**(order-1) is computed


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: TrainConfig(checkpoints=2.5), "checkpoints"),
        (lambda: TrainConfig(lr="0.1"), "lr"),
        (lambda: TrainConfig(betas=0.9), "betas"),
        (lambda: TransformerConfig(n_heads=True), "n_heads"),
        (lambda: tasks.TASKS.get("markov_icl").Config(k=3.0), "k"),
        (lambda: WandbConfig(tags="a,b"), "tags"),
    ],
)
def test_types_hold_for_configs_built_in_python(make, field):
    """A config built in Python is checked as TOML's is: a wrong type is one line naming the field."""
    with pytest.raises(ConfigError, match=f"^{field}: "):
        make()


def test_configs_built_in_python_keep_the_types_toml_gives():
    import numpy as np

    cfg = TrainConfig(steps=np.int64(10), lr=np.float32(0.5), betas=[0.9, 0.99], params=["embed.W_E"])
    assert (type(cfg.steps), type(cfg.lr), cfg.betas, cfg.params) == (int, float, (0.9, 0.99), ("embed.W_E",))
    assert (
        cfg
        == parse_config(
            {
                "task": {"name": "markov_icl"},
                "train": {"steps": 10, "lr": 0.5, "betas": [0.9, 0.99], "params": ["embed.W_E"]},
            },
            resources=False,
        ).train
    )


def test_help_strings_give_the_bounds():
    helps = {p["name"]: p["help"] for p in describe(TrainConfig)}
    assert "1 to 10**9" in helps["steps"] and "2 to 10000" in helps["checkpoints"] and "2**63 - 1" in helps["seed"]
    assert "1 to 256" in {p["name"]: p["help"] for p in describe(TransformerConfig)}["n_layers"]
