"""The loss landscape probes (llc, sharpness) on runs through the CLI, beside the circuit probes; their options
refused before any work; and stage detection against planted stages. Their known answers (an explicit
Hessian; a regular model's learning coefficient) are in planted.py."""

from __future__ import annotations

import json
import math

import pytest
import torch

from mechsynth import models, probes, tasks
from mechsynth.analysis import report, stages, timeline
from mechsynth.cli import main
from mechsynth.probes import ProbeError
from mechsynth.runs.run import load_run

CONFIG = {
    "task": {"name": "markov_icl", "k": 3, "length": 12},
    "model": {"n_layers": 2, "n_heads": 1, "d_model": 16, "attn_only": True},
}
SMALL = [
    "--set",
    "llc.draws=20",
    "--set",
    "llc.chains=2",
    "--set",
    "llc.checkpoints=4",
    "--set",
    "llc.pool=64",
    "--set",
    "llc.batch=16",
    "--set",
    "sharpness.checkpoints=5",
    "--set",
    "sharpness.batch=32",
]


def _train(tmp_path, tiny, name: str, train: dict) -> str:
    cfg = tmp_path / f"{name}.toml"
    data = tiny(CONFIG["task"], CONFIG["model"], {"steps": 40, "checkpoints": 8, **train})
    lines = [
        f"[{section}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in table.items())
        for section, table in data.items()
    ]
    cfg.write_text("\n".join(lines) + "\n")
    assert main(["train", str(cfg), "--out", str(tmp_path / name), "--no-progress"]) == 0
    return str(tmp_path / name)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from conftest import tiny_config

    return _train(tmp_path_factory.mktemp("landscape"), tiny_config, "run", {})


@pytest.mark.slow
def test_llc_and_sharpness_on_a_run_join_its_circuit_timelines_and_report(run_dir, capsys):
    assert main(["probe", run_dir]) == 0
    circuits = timeline.load(run_dir)
    assert "llc" not in circuits.metrics and "sharpness" not in circuits.metrics  # only when named
    capsys.readouterr()
    assert main(["probe", run_dir, "--probes", "llc,sharpness", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "llc " in out and "sharpness " in out and "stages " in out, out
    tl = timeline.load(run_dir)
    assert set(circuits.metrics) < set(tl.metrics) and tl.per_head["induction"] == circuits.per_head["induction"]
    measured = [s for s, v in zip(tl.steps, tl.metrics["llc"]["llc"]) if math.isfinite(v)]
    assert len(measured) == 4 and measured[0] == tl.steps[0] and measured[-1] == tl.steps[-1]
    assert sum(math.isfinite(v) for v in tl.metrics["sharpness"]["lambda_max"]) == 5
    assert all(v > 0 for v in tl.metrics["sharpness"]["lambda_max"] if math.isfinite(v))
    assert tl.options["llc"]["draws"] == 20 and tl.options["llc"]["n_beta"] == 100.0  # as run, defaults too
    assert len(tl.metrics["llc"]["trace/chain1/9"]) == len(tl.steps)
    stored = json.loads((load_run(run_dir).path / timeline.JSON).read_text())
    assert stored["stages"] == stages.detect(tl) and "llc turns" in stored["stages"]
    page = report.write(run_dir).path.read_text()
    for heading in ("Local learning coefficient", "Sharpness", "Stages", "Induction"):
        assert heading.lower() in page.lower(), heading


@pytest.mark.parametrize(
    "assignment, field",
    [
        ("llc.draws=-1", "llc.draws"),
        ("llc.colour=1", "llc.colour"),
        ('sharpness.lr="fast"', "sharpness.lr"),
        ("llc.lr=0", "llc.lr"),
        ("induction.x=1", "--set induction"),
        ("llc", "--set"),
    ],
)
def test_bad_probe_options_are_one_line_before_any_work(run_dir, capsys, assignment, field):
    before = (
        (load_run(run_dir).path / timeline.JSON).read_bytes()
        if (load_run(run_dir).path / timeline.JSON).exists()
        else None
    )
    assert main(["probe", run_dir, "--probes", "llc,sharpness", "--set", assignment]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err and "Traceback" not in err, err
    after = (load_run(run_dir).path / timeline.JSON).read_bytes() if before is not None else None
    assert after == before


def test_landscape_probes_run_only_when_named_and_on_one_model(run_dir):
    run = load_run(run_dir)
    assert not {"llc", "sharpness"} & set(timeline.applicable(run))
    assert {"llc", "sharpness"} <= set(timeline.applicable(run, costly=True))
    stacked = models.build(run.config.model, run.task.spec, n_models=2)
    with pytest.raises(ProbeError, match="one model at a time"):
        probes.run("sharpness", stacked, run.task)


@pytest.mark.slow
def test_sharpness_of_a_full_batch_run_is_taken_on_its_training_set(tmp_path, tiny):
    """With train.data = fixed, the probe differentiates the loss on the run's own training set: its loss
    there is the train_set/loss the trainer recorded at that checkpoint."""
    run_dir = _train(
        tmp_path,
        tiny,
        "fixed",
        {"data": "fixed", "n_train": 24, "batch_size": 24, "optimizer": "sgd", "lr": 0.1, "grad_clip": 0},
    )
    run = load_run(run_dir)
    tl = timeline.probe_run(run, ["sharpness"], options={"sharpness": {"checkpoints": 0}})
    for step, loss, limit in zip(
        tl.steps, tl.metrics["sharpness"]["train_loss"], tl.metrics["sharpness"]["stability_limit"]
    ):
        assert abs(loss - run.meta(step)["metrics"]["train_set/loss"]) < 1e-5 and limit == pytest.approx(20.0)


# ---- stage detection ----------------------------------------------------------------------------

STEPS = [0, 1, 2, 3, 5, 8, 12, 18, 27, 40, 60, 90, 135, 200, 300, 450, 675, 1000, 1500, 2250, 3375, 5000]


def _planted(knots: list[int], slopes: list[float]) -> list[float]:
    """Continuous piecewise-linear in log(step + 1), turning at `knots`."""
    out = []
    for s in STEPS:
        x, y, start = math.log1p(s), 0.0, 0.0
        for knot, slope in zip(knots + [math.inf], slopes):
            end = min(x, math.log1p(knot))
            y += slope * max(0.0, end - start)
            start = math.log1p(knot)
            if x <= start:
                break
        out.append(y)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_change_points_find_planted_stages_and_nothing_in_noise(seed):
    g = torch.Generator().manual_seed(seed)
    clean = _planted([60, 1000], [0.0, -0.8, 0.0])
    noisy = [v + 0.02 * float(torch.randn(1, generator=g)) for v in clean]
    found = stages.change_points(STEPS, noisy)
    assert len(found) == 2 and all(abs(STEPS.index(f) - STEPS.index(k)) <= 1 for f, k in zip(found, [60, 1000])), found
    assert stages.change_points(STEPS, [float(torch.randn(1, generator=g)) for _ in STEPS]) == []
    assert stages.change_points(STEPS, [1.0] * len(STEPS)) == []
    gaps = [v if i % 3 else math.nan for i, v in enumerate(noisy)]  # measured at some checkpoints only
    assert all(s in STEPS for s in stages.change_points(STEPS, gaps))


def test_turns_find_where_a_curve_stops_rising():
    peak = _planted([300], [1.0, -0.6])
    found = stages.turns(STEPS, peak)
    assert len(found) == 1 and abs(STEPS.index(found[0]) - STEPS.index(300)) <= 1, found
    assert stages.turns(STEPS, _planted([], [1.0])) == []


@pytest.mark.slow
def test_negative_llc_estimates_are_no_stage_evidence(run_dir):
    tl = timeline.load(run_dir)
    tl.metrics["llc"]["negative"] = [1.0] * len(tl.steps)
    assert all(v is None for v in stages.series(tl)["llc"])


def test_log_spaced_checkpoints():
    picked = probes.log_spaced(STEPS, 6)
    assert len(picked) == 6 and picked == sorted(set(picked)) and picked[0] == 0 and picked[-1] == 5000
    assert probes.log_spaced(STEPS, 0) == STEPS and probes.log_spaced(STEPS[:4], 6) == STEPS[:4]
    assert probes.log_spaced(STEPS, 1) == [5000] and probes.log_spaced(STEPS, 2) == [0, 5000]


def test_every_task_trains_sharpness_on_its_own_loss():
    """The sharpness probe applies wherever a task has a training split (every task), on the default model."""
    for name in tasks.names():
        task = tasks.make(name, {})
        assert probes.can_run("sharpness", models.build(models.parse({}), task.spec), task), name
