"""Contracts over the registries: what every task, model kind and probe must keep, checked for each one
registered (optimizers: tests/test_train.py; planted known answers for every probe: tests/test_probes.py).
And the claim the layout makes: a task, a probe with its own figure and summary line, a model kind and an
optimizer are one new file each (tests/toy/), with nothing else edited."""

from __future__ import annotations

import ast
import functools
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
import torch

from mechsynth import hooks, load_run, models, parse_config, probes, tasks, train_run
from mechsynth.analysis import stages, timeline
from mechsynth.config import read_toml
from mechsynth.errors import ConfigError
from mechsynth.tasks.base import latent_values, masked_loss

ROOT = Path(__file__).resolve().parents[1]
TOY = Path(__file__).resolve().parent / "toy"


def _tasks_named(nodes: Iterable[ast.AST]) -> set[str]:
    """The tasks named by the `pytest.mark.reference("<task>")` calls among `nodes`."""
    return {
        node.args[0].value
        for node in nodes
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "reference"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


@functools.cache  # parsed once: each task's parameter of two tests asks
def _test_trees() -> tuple[ast.Module, ...]:
    return tuple(ast.parse(path.read_text()) for path in Path(__file__).parent.glob("test_*.py"))


def _reference_markers() -> set[str]:
    """Tasks named by `@pytest.mark.reference("<task>")` on a test in tests/."""
    return set().union(*(_tasks_named(ast.walk(tree)) for tree in _test_trees()))


@pytest.mark.parametrize("name", tasks.names())
def test_every_task_has_a_slow_reference_test(name):
    assert name in _reference_markers(), f"no test marked @pytest.mark.reference({name!r}) checks {name}'s generator"


@pytest.mark.parametrize("name", tasks.names())
def test_every_task_has_an_experiment_config(name):
    configs = {p.name: read_toml(p) for p in (ROOT / "examples").glob("*.toml")}
    assert any(c.get("task", {}).get("name") == name for c in configs.values()), f"no examples/*.toml trains {name}"


@pytest.mark.parametrize("name", tasks.names())
def test_every_task_carries_the_truth_it_declares(name):
    """Probes apply by `truth_keys`, so an evaluation batch must carry every one of them."""
    task = tasks.make(name)
    batch = task.sample(4, torch.Generator().manual_seed(0), split=task.main_eval)
    assert set(task.truth_keys) <= set(batch.truth), f"{name} declares {task.truth_keys}, carries {sorted(batch.truth)}"
    assert any(probes.can_run(p, models.build(models.parse({}), task.spec), task) for p in probes.names())


def _latent_reference_tests() -> set[str]:
    """Tasks named by `@pytest.mark.reference("<task>")` on a test named `test_latents_match_a_slow_reference`."""
    return set().union(
        *(
            _tasks_named(node.decorator_list)
            for tree in _test_trees()
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name == "test_latents_match_a_slow_reference"
        )
    )


@pytest.mark.parametrize("name", tasks.names())
def test_every_latent_reads_truth_an_evaluation_batch_carries(name):
    """Each of `Task.latents` reads keys of `truth_keys` that an evaluation batch carries, under a unique name, with
    values of its kind where it is defined (categorical: ids 0..n_values−1; real, vector: finite floats), defined
    somewhere in a batch of 8; and a task that declares latents checks them against a slow reference."""
    task = tasks.make(name)
    if not task.latents:
        return
    batch = task.sample(8, torch.Generator().manual_seed(0), split=task.main_eval)
    names = [latent.name for latent in task.latents]
    assert len(set(names)) == len(names), f"{name}: latent names repeat: {names}"
    for latent in task.latents:
        keys = (latent.truth,) + (() if latent.where in ("all", "scored") else (latent.where,))
        for key in keys:
            assert key in task.truth_keys, f"{name}: latent {latent.name!r} reads {key!r}, not in truth_keys"
            assert key in batch.truth, f"{name}: latent {latent.name!r} reads {key!r}, not in an evaluation batch"
    values = latent_values(task, batch)
    for latent in task.latents:
        v, defined = values[latent.name]
        assert defined.dtype == torch.bool and defined.shape == batch.tokens.shape[:2]
        assert defined.any(), f"{name}: latent {latent.name!r} is defined nowhere in a batch of 8"
        if latent.kind == "categorical":
            assert latent.n_values is not None, f"{name}: categorical latent {latent.name!r} has no n_values"
            assert not v.is_floating_point(), f"{name}: categorical latent {latent.name!r} has {v.dtype} values"
            at = v[defined]
            assert 0 <= int(at.min()) and int(at.max()) < latent.n_values, (name, latent.name)
        else:
            assert v.is_floating_point() and v[defined].isfinite().all(), (name, latent.name)
            assert v.dim() == (3 if latent.kind == "vector" else 2), (name, latent.name, v.shape)
    assert name in _latent_reference_tests(), (
        f"no test_latents_match_a_slow_reference marked @pytest.mark.reference({name!r}) checks {name}'s latents"
    )


@pytest.mark.parametrize("name", tasks.names())
def test_the_circuit_probe_runs_on_every_task_that_makes_counterfactuals(name, tmp_path, tiny):
    """On a few steps of a small transformer, through the timeline as `mechsynth probe --probes circuit` runs
    it; a task without counterfactuals is refused in one line."""
    small = {
        "associative_memory": {"inputs": 16},
        "modular_arithmetic": {"p": 7},
        "causal_icl": {"length": 8},
        "factual_recall": {"subjects": 8},
    }.get(name, {})
    run = load_run(
        train_run(
            parse_config(
                tiny(
                    {"name": name, **small},
                    {"n_layers": 2, "d_model": 16},
                    {"steps": 4, "checkpoints": 2, "eval_every": 4},
                )
            ),
            tmp_path / "run",
            progress=False,
        )
    )
    why = timeline.why_not(run, "circuit")
    if tasks.make(name, small).patch_metric is None:
        assert why is not None and "counterfactual" in why and "\n" not in why
        return
    assert why is None, why
    tl = timeline.probe_run(run, ["circuit"], batch_size=32, options={"circuit": {"method": "eap", "checkpoints": 2}})
    m = tl.metrics["circuit"]
    assert all(math.isfinite(v) for v in m["edges"]) and m["edges"][-1] >= 1, name


@pytest.mark.slow  # a run trained per task: the planted known answers (tests/planted_features.py) are the fast check
@pytest.mark.parametrize("name", tasks.names())
def test_the_feature_probes_run_on_every_task_that_declares_latents(name, tmp_path, tiny):
    """`mechsynth probe --probes latents,dictionary` on a few steps of a small transformer: a score for every latent
    and place, a dictionary's match for every latent; a task without latents is refused in one line."""
    small = {"associative_memory": {"inputs": 16}, "modular_arithmetic": {"p": 7}, "factual_recall": {"subjects": 8}}
    config = tiny({"name": name, **small.get(name, {})}, {"n_layers": 2, "d_model": 16}, {"steps": 4, "checkpoints": 2})
    run = load_run(train_run(parse_config(config), tmp_path / "run", progress=False))
    why = timeline.why_not(run, "latents")
    if not run.task.latents:
        assert why is not None and "declares no latent variables" in why and "\n" not in why
        return
    assert why is None, why
    sae = {"steps": 20, "seeds": 1, "sequences": 16, "checkpoints": 1}
    tl = timeline.probe_run(run, ["latents", "dictionary"], batch_size=32, options={"dictionary": sae})
    for latent in run.task.latents:
        for place in ("embed", "L0", "L1"):
            assert len(tl.metrics["latents"][f"{latent.name}/{place}"]) == len(run.steps)
        assert math.isfinite(tl.metrics["dictionary"][f"{latent.name}/mcc"][-1]), (name, latent.name)
    assert any(line.startswith("latents ") for line in timeline.summary(tl, run.task))


# A kind's model table where its defaults are too large for a few steps, and the task it is checked on first.
KIND_TABLES = {"linearized": {"base": {"n_layers": 2, "n_heads": 1, "d_model": 16, "attn_only": True}}}
FIRST_TASK = {"linearized": {"name": "markov_icl", "k": 3, "length": 16}}  # a 2-layer induction task: its probes apply


def _task_for(kind: str) -> dict:
    """sparse_parity, or markov_icl for a kind that cannot read it (the minimal induction model copies tokens), or
    single_index (the neuron reads one vector)."""
    for task in ([FIRST_TASK[kind]] if kind in FIRST_TASK else []) + [
        {"name": "sparse_parity", "n": 6, "k": 2},
        {"name": "markov_icl", "k": 3, "length": 16},
        {"name": "single_index", "d": 6, "k_star": 2},
    ]:
        try:
            models.validate(
                models.parse({"kind": kind, **KIND_TABLES.get(kind, {})}),
                tasks.make(task["name"], {k: v for k, v in task.items() if k != "name"}).spec,
            )
            return task
        except ConfigError:
            continue
    raise AssertionError(f"no contract task fits kind {kind!r}")


@pytest.mark.parametrize("kind", models.names())
def test_every_kind_trains_checkpoints_resumes_exactly_and_probes(kind, tmp_path, tiny):
    """8 steps in one go equal 4 steps, then a restart from that checkpoint for 4 more; the hooked view answers
    as the module probes read (`models.probed`: the trained module, or the network a linearized one expands);
    then every checkpoint is probed by the probes that apply."""
    data = tiny(
        _task_for(kind), {"kind": kind, **KIND_TABLES.get(kind, {})}, {"steps": 8, "checkpoints": 3, "eval_every": 4}
    )
    whole = load_run(train_run(parse_config(data), tmp_path / "whole", progress=False))
    half = {**data, "train": {**data["train"], "steps": 4}}
    train_run(parse_config(half), tmp_path / "cut", progress=False)
    cut = load_run(train_run(parse_config(data), tmp_path / "cut", resume=True, progress=False))
    assert whole.steps[-1] == cut.steps[-1] == 8
    a, b = whole.weights(8), cut.weights(8)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f"{kind}: a restart changed the weights"
    tokens = whole.task.sample(4, torch.Generator().manual_seed(1)).tokens
    torch.testing.assert_close(whole.model(8)(tokens), models.probed(whole.trainable(8))(tokens), atol=2e-5, rtol=1e-4)
    names = timeline.applicable(whole)
    blind = not hooks.attention_layers(whole.model(8)) and whole.config.model.input_weights() is None
    assert names or blind, f"no probe applies to a {kind} on {data['task']['name']}"  # blind: a recurrent model
    tl = timeline.probe_run(whole, names, batch_size=8)
    assert tl.steps == whole.steps and all(len(v) == len(tl.steps) for n in names for v in tl.metrics[n].values())
    # the loss landscape probes apply to every kind too (named, as they run only then)
    small = {
        "llc": {"draws": 10, "chains": 2, "pool": 16, "batch": 8, "checkpoints": 2},
        "sharpness": {"batch": 8, "iterations": 4},
    }
    tl = timeline.probe_run(whole, ["llc", "sharpness"], options=small)
    assert all(math.isfinite(tl.metrics[p][m][-1]) for p, m in (("llc", "llc"), ("sharpness", "lambda_max"))), kind


CONTINUOUS = [n for n in tasks.names() if tasks.make(n).spec.d_input is not None]


@pytest.mark.parametrize("name", CONTINUOUS)
def test_every_continuous_task_trains_resumes_exactly_and_is_probed(name, tmp_path, tiny):
    """A task of vectors (continuous inputs, its own loss) through the transformer: 8 steps in one go equal 4, a
    restart and 4 more, bit for bit; the hooked TransformerLens model answers as the trained one; every applicable
    probe runs on every checkpoint, those that compare token ids are refused in one line; the loss landscape
    probes and the stages read its loss."""
    data = tiny({"name": name}, {"n_layers": 2, "d_model": 16}, {"steps": 8, "checkpoints": 3, "eval_every": 4})
    whole = load_run(train_run(parse_config(data), tmp_path / "whole", progress=False))
    train_run(parse_config({**data, "train": {**data["train"], "steps": 4}}), tmp_path / "cut", progress=False)
    cut = load_run(train_run(parse_config(data), tmp_path / "cut", resume=True, progress=False))
    a, b = whole.weights(8), cut.weights(8)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f"{name}: a restart changed the weights"
    assert whole.metrics == cut.metrics
    tokens = whole.task.sample(4, torch.Generator().manual_seed(1)).tokens
    assert tokens.is_floating_point() and tokens.shape[-1] == whole.task.spec.d_input
    torch.testing.assert_close(whole.model(8)(tokens), whole.trainable(8)(tokens), atol=2e-5, rtol=1e-4)
    names = timeline.applicable(whole)
    assert any(probes.PROBES.get(n).truth for n in names), names  # probes of the task's own truth
    for refused in (n for n in probes.names() if probes.PROBES.get(n).token_ids):
        why = timeline.why_not(whole, refused)
        assert why is not None and "token ids" in why and "\n" not in why, (refused, why)
    tl = timeline.probe_run(whole, names, batch_size=8)
    assert all(
        len(v) == len(tl.steps) and all(math.isfinite(x) for x in v) for n in names for v in tl.metrics[n].values()
    )
    small = {
        "llc": {"draws": 10, "chains": 2, "pool": 16, "batch": 8, "checkpoints": 2},
        "sharpness": {"batch": 8, "iterations": 4},
    }
    tl = timeline.probe_run(whole, ["llc", "sharpness"], options=small)
    assert all(math.isfinite(tl.metrics[p][m][-1]) for p, m in (("llc", "llc"), ("sharpness", "lambda_max"))), name
    batch = whole.task.sample(8, torch.Generator().manual_seed(0))  # sharpness's batch (its seed 0)
    with torch.no_grad():
        own = float(masked_loss(whole.trainable(8)(batch.tokens), batch, whole.task.loss_kind))
    assert own > 0 and tl.metrics["sharpness"]["train_loss"][-1] == pytest.approx(own, rel=1e-4)  # the task's loss
    assert {"loss", "llc", "sharpness"} <= set(stages.detect(tl))


# ---- one new file each -------------------------------------------------------------------------------

TOY_CONFIG = """
[task]
name = "toy_first_token"

[model]
kind = "toy_attention"

[train]
steps = 300
batch_size = 32
lr = 0.01
optimizer = "toy_sign"
eval_every = 50
checkpoints = 8
device = "cpu"
"""


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mechsynth.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.smoke
def test_a_toy_task_probe_kind_and_optimizer_plug_in_from_one_file_each(tmp_path):
    """tests/toy/ holds a task (recall the first token), a probe of attention to the token to recall, with
    its own summary line and report figure, a one-layer attention model kind, and sign descent. Named in
    MECHSYNTH_PLUGINS, they train, probe and report through the CLI, seeds side by side in pool workers
    too; the probe finds the circuit the task needs."""
    env = {
        **os.environ,
        "MECHSYNTH_PLUGINS": os.pathsep.join(str(TOY / f"toy_{k}.py") for k in ("task", "probe", "kind", "optimizer")),
    }
    (tmp_path / "toy.toml").write_text(TOY_CONFIG + '\n[wandb]\nmode = "disabled"\n')

    listed = _cli("tasks", "--json", env=env, cwd=tmp_path)
    assert listed.returncode == 0 and "toy_first_token" in json.loads(listed.stdout), listed.stderr
    trained = _cli("train", "toy.toml", "--out", "run", "--no-progress", env=env, cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    run = tmp_path / "run"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["eval/acc"] > 0.99, metrics[-1]  # sign descent trained the toy model on the toy task

    probed = _cli("probe", "run", "--json", env=env, cwd=tmp_path)
    assert probed.returncode == 0, probed.stderr
    tl = json.loads(probed.stdout)
    scores = tl["probes"]["toy_source"]["per_head"]
    assert max(series[-1] for series in scores.values()) > 0.9  # a head attends to the first token
    assert min(series[0] for series in scores.values()) < 0.5  # and did not at step 0
    refused = _cli("probe", "run", "--probes", "induction", env=env, cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "W_O" in refused.stderr, refused.stderr

    reported = _cli("report", "run", env=env, cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    page = (run / "report.html").read_text()
    section = page[page.index('<section id="toy_source">') :]
    assert "Attention to the source" in section and "<img" in section.split("</section>")[0]
    assert "attends" in page.split('<section id="summary">')[1].split("</section>")[0]  # its summary line

    (tmp_path / "sweep.toml").write_text(
        'base = "toy.toml"\n[train]\nsteps = 20\n[sweep]\nname = "toy"\nseeds = 2\n'
        '[sweep.grid]\n"model.n_heads" = [1, 2]\n'
    )
    swept = _cli(
        "sweep", "sweep.toml", "--out", "sweep", "--workers", "2", "--wandb", "disabled", env=env, cwd=tmp_path
    )
    assert swept.returncode == 0, swept.stderr
    for point in ("n_heads=1", "n_heads=2"):
        assert json.loads((tmp_path / "sweep/runs" / point / "config.json").read_text())["train"]["seeds"] == 2
        for seed in (0, 1):
            last = sorted((tmp_path / "sweep/runs" / point / f"seed_{seed}" / "checkpoints").iterdir())[-1]
            assert json.loads((last / "meta.json").read_text())["step"] == 20  # (this process has no toy plugins)


@pytest.mark.smoke
def test_a_plugin_that_fails_to_import_is_one_line(tmp_path):
    bad = tmp_path / "bad_task.py"
    bad.write_text("import no_such_module_here\n")
    env = {**os.environ, "MECHSYNTH_PLUGINS": str(bad)}
    out = _cli("tasks", env=env, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "MECHSYNTH_PLUGINS" in out.stderr and "bad_task.py" in out.stderr and "no_such_module_here" in out.stderr
