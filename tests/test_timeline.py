"""Probing a run's checkpoints: formation steps, the loss drop, the CLI, W&B series, and the demo model."""

from __future__ import annotations

import json
import math

import pytest

from mechsynth import load_run, parse_config, train_run
from mechsynth import configs
from mechsynth.analysis.timeline import Timeline, formation_step, load, probe_run, rows, save, steepest_drop, summary
from mechsynth.cli import main
from mechsynth.errors import CorruptFileError
from mechsynth.analysis import stages as stages_of_loss
from mechsynth.probes.icl_strategy import stages


def test_formation_is_the_first_step_after_which_the_score_stays_up():
    steps = [0, 1, 2, 5, 10, 20]
    assert formation_step(steps, [0.1, 0.6, 0.2, 0.7, 0.8, 0.9], 0.5) == 5
    assert formation_step(steps, [0.1, 0.6, 0.7, 0.7, 0.8, 0.4], 0.5) is None
    assert formation_step(steps, [0.9] * 6, 0.5) == 0


def test_steepest_drop_ignores_noise_between_close_checkpoints():
    steps = [0, 1, 2, 4, 8, 16, 32, 64, 100, 101, 102]
    loss = [2.0, 1.5, 1.45, 1.4, 1.38, 1.37, 1.0, 0.9, 0.89, 0.85, 0.88]
    assert steepest_drop(steps, loss) == 32


def small_timeline() -> Timeline:
    return Timeline(
        [0, 10, 20],
        [1.1, None, 0.5],
        {"induction": {"L1H0": [0.1, 0.6, 0.9]}, "icl_strategy": {}},
        {"induction": {"max": [0.1, 0.6, 0.9]}, "icl_strategy": {"kl/uniform": [0.0, 0.2, float("nan")]}},
        {"induction": {"L1H0": 10}, "icl_strategy": {}},
        loss_drop_step=20,
    )


def test_one_tidy_table_saved_and_loaded_back(tmp_path):
    tl = small_timeline()
    assert rows(tl)[:2] == [[0, "induction", 1, 0, "score", 0.1], [10, "induction", 1, 0, "score", 0.6]]
    assert rows(tl)[3] == [0, "induction", None, None, "max", 0.1] and len(rows(tl)) == 9
    save(tl, tmp_path)
    table = (tmp_path / "probes.csv").read_text().splitlines()
    assert table[0] == "step,probe,layer,head,metric,value" and table[1] == "0,induction,1,0,score,0.1"
    assert table[4] == "0,induction,,,max,0.1" and len(table) == 1 + len(rows(tl))
    back = load(tmp_path)
    assert (back.steps, back.loss, back.loss_drop_step) == ([0, 10, 20], [1.1, None, 0.5], 20)
    assert back.per_head == tl.per_head and back.formation == tl.formation
    assert back.metrics["induction"] == tl.metrics["induction"] and math.isnan(
        back.metrics["icl_strategy"]["kl/uniform"][2]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probes.csv", "probes.json"], "no temporary files left"


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "[1, 2]",
        '{"steps": [0, 1], "loss": [1.0]}',
        '{"steps": [0], "loss": [1.0], "probes": {"p": {"per_head": {}}}}',
    ],
)
def test_a_damaged_timeline_is_named(tmp_path, text):
    (tmp_path / "probes.json").write_text(text)
    with pytest.raises(CorruptFileError, match="probes.json"):
        load(tmp_path)


def _demo(tmp_path_factory, steps: int, checkpoints: int, wandb: str):
    """The demo configuration, trained for `steps` steps (the full demo trains 2000)."""
    data = configs.load("demo")
    data["train"] |= {"steps": steps, "checkpoints": checkpoints, "device": "cpu"}
    data["wandb"] = {"mode": wandb}
    return train_run(parse_config(data), tmp_path_factory.mktemp(f"demo{steps}") / "run", progress=False)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    return _demo(tmp_path_factory, 600, 24, "offline")


@pytest.mark.slow
def test_demo_model_forms_previous_token_then_induction_around_the_loss_drop(demo_run):
    run = load_run(demo_run)
    tl = probe_run(run, ["previous_token", "induction", "icl_strategy"], batch_size=32)
    prev = {h: s for h, s in tl.formation["previous_token"].items() if s is not None}
    ind = {h: s for h, s in tl.formation["induction"].items() if s is not None}
    assert prev and all(h.startswith("L0") for h in prev), tl.formation
    assert ind and all(h.startswith("L1") for h in ind), tl.formation
    drop = tl.loss_drop_step
    assert drop is not None and drop / 4 <= min(ind.values()) <= drop * 4
    # then the in-context bigram counts and Bayes' predictor as one stage: they lie closer together than the model
    # comes to either (Bayes weighs the first token too), so which of them is nearer is noise, not a stage
    m = tl.metrics["icl_strategy"]
    assert all(gap < min(a, b) for gap, a, b in zip(m["apart/ngram/bayes"], m["kl/ngram"], m["kl/bayes"]))
    names = [name for name, _ in stages(tl)]
    assert names == ["uniform", "unigram", "ngram≈bayes"], stages(tl)  # the README's three stages
    lines = summary(tl, run.task)
    # the headline names the transition the loss change points find, not the first steps' fall from the init
    exit, found = stages_of_loss.plateau_exit(tl.steps, tl.loss), stages_of_loss.change_points(tl.steps, tl.loss)
    assert exit in found and drop >= exit, (lines[0], found)
    assert lines[0].startswith(f"loss falls fastest at step {drop}, after leaving its plateau at step {exit}"), lines[0]
    assert lines[-2].startswith("icl_strategy     stages: " + " -> ".join(f"{n} (step {s})" for n, s in stages(tl)))
    assert lines[-1].startswith("stages           boundaries (change points in log-step): loss ")


@pytest.mark.slow
def test_probe_cli_json_table_and_wandb(demo_run, capsys):
    assert main(["probe", str(demo_run), "--probes", "induction,previous_token", "--json", "--batch-size", "16"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"steps", "loss", "probes"} and out["steps"] == load_run(demo_run).steps
    ind = out["probes"]["induction"]
    assert set(ind) == {"per_head", "metrics", "formation", "options"} and len(ind["per_head"]["L1H0"]) == len(
        out["steps"]
    )
    assert ind["options"] == {"threshold": 0.5, "over_chance": 3.0}  # what ran, defaults too
    table = (demo_run / "probes.csv").read_text().splitlines()
    assert table[0] == "step,probe,layer,head,metric,value" and len(table) > 4 * len(out["steps"])

    from test_wandb import inspect

    files = sorted((demo_run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len({inspect(f)["run_id"] for f in files}) == 1, "probing continues the training run's W&B run"
    summary = inspect(files[-1])["summary"]
    assert "formation/induction/L1H0" in summary and "probe/induction/L1H0" in summary

    assert main(["probe", str(demo_run), "--steps", "7,9999"]) == 2
    assert "--steps" in capsys.readouterr().err
    assert main(["probe", str(demo_run), "--probes", "sparse_selection"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "mechsynth: error: --probes: 'sparse_selection' does not apply to this run: probe "
        "'sparse_selection' needs truth support, readout, which task 'markov_icl' does not provide"
    )
    assert "\n" not in err


@pytest.fixture(scope="module")
def short_demo_run(tmp_path_factory):
    """60 steps: enough for the probes to read heads that differ (the fast tier's; demo_run is the slow tier's)."""
    return _demo(tmp_path_factory, 60, 6, "disabled")


def test_batched_probing_equals_probing_each_checkpoint_in_transformer_lens(short_demo_run):
    """probe_run loads checkpoints side by side into our fused model; the same probes on each checkpoint's
    TransformerLens model, one at a time, give the same numbers."""
    from mechsynth import probes
    from mechsynth.analysis.timeline import applicable

    run = load_run(short_demo_run)
    steps = run.steps
    names = applicable(run)
    assert {"previous_token", "induction", "duplicate_token", "icl_strategy"} <= set(names)
    tl = probe_run(run, names, steps, batch_size=16)
    for i, (step, model) in enumerate(run.models(steps)):
        for name in names:
            one = probes.run(name, model, run.task, batch_size=16)
            if one.per_head is not None:
                for head, series in tl.per_head[name].items():
                    layer, h = map(int, head[1:].split("H"))
                    assert series[i] == pytest.approx(float(one.per_head[layer, h]), abs=1e-4), (step, name, head)
            for key, value in one.metrics.items():
                assert tl.metrics[name][key][i] == pytest.approx(value, abs=1e-3), (step, name, key)
