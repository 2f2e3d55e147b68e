"""The circuit probe on runs through the CLI: on log-spaced checkpoints, the last first; beside the other
probes in the summary, the report (rendered in Chromium) and W&B; refused, in one line, on a task that makes
no counterfactuals and for bad options. Its known answer (a planted majority circuit) is in planted.py."""

from __future__ import annotations

import json
import math

import pytest

from mechsynth import probes
from mechsynth.analysis import report, timeline
from mechsynth.cli import main
from mechsynth.runs.run import load_run
from mechsynth.util import browser

SMALL = ["--set", "circuit.checkpoints=4", "--set", "circuit.method=eap", "--batch-size", "16"]


def _train(tmp_path, task: dict, model: dict, name: str) -> str:
    from conftest import tiny_config

    cfg = tmp_path / f"{name}.toml"
    data = tiny_config(task, model, {"steps": 40, "checkpoints": 8})
    cfg.write_text(
        "\n".join(
            f"[{section}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in table.items())
            for section, table in data.items()
        )
        + "\n"
    )
    assert main(["train", str(cfg), "--out", str(tmp_path / name), "--no-progress"]) == 0
    return str(tmp_path / name)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return _train(
        tmp_path_factory.mktemp("circuit"),
        {"name": "markov_icl", "k": 3, "length": 12},
        {"n_layers": 2, "n_heads": 1, "d_model": 16, "attn_only": True},
        "run",
    )


@pytest.mark.slow
def test_circuit_on_a_run_joins_its_timelines_summary_and_report(run_dir, capsys, tmp_path):
    assert main(["probe", run_dir]) == 0
    assert "circuit" not in timeline.load(run_dir).metrics  # only when named
    capsys.readouterr()
    assert main(["probe", run_dir, "--probes", "circuit", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "eap (resample ablation):" in out and "eap edges, strongest first:" in out and "gap: m(clean)" in out, out
    tl = timeline.load(run_dir)
    m = tl.metrics["circuit"]
    measured = [s for s, v in zip(tl.steps, m["faithfulness"]) if math.isfinite(v)]
    assert len(measured) == 4 and measured[0] == tl.steps[0] and measured[-1] == tl.steps[-1]
    assert "induction" in tl.metrics and tl.options["circuit"]["method"] == "eap"
    last = tl.steps.index(measured[-1])
    assert m["final_faithfulness"][last] == pytest.approx(m["faithfulness"][last])  # the last circuit, at the last step
    edges = [k[3:] for k in m if k.startswith("in/")]
    assert len(edges) == 12 and "L0H0->L1H0.k" in edges  # 2 layers × 1 head: input, L0H0, L1H0 -> q, k, v, logits
    assert m["edges"][last] == sum(m[f"in/{e}"][last] for e in edges) >= 1
    page = report.write(run_dir)
    assert "The causal circuit" in page.path.read_text()
    if browser.find_chromium() is not None:
        opened = browser.open_page(page.path, fragment="circuit", screenshot=tmp_path / "circuit.png")
        assert opened.requests == [] and 'id="circuit"' in opened.dom


@pytest.mark.parametrize(
    "assignment, field",
    [
        ("circuit.method=magic", "circuit.method"),
        ("circuit.level=1.5", "circuit.level"),
        ("circuit.ablation=half", "circuit.ablation"),
        ("circuit.ig_steps=1", "circuit.ig_steps"),
        ("circuit.checkpoints=-2", "circuit.checkpoints"),
    ],
)
def test_bad_options_are_one_line_before_any_work(run_dir, capsys, assignment, field):
    path = load_run(run_dir).path / timeline.JSON
    before = path.read_bytes() if path.exists() else None
    assert main(["probe", run_dir, "--probes", "circuit", "--set", assignment]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err and "Traceback" not in err, err
    assert (path.read_bytes() if before is not None else None) == before


def test_a_task_without_counterfactuals_is_refused_in_one_line(tmp_path, capsys):
    run_dir = _train(
        tmp_path,
        {"name": "hmm_masked", "k": 3, "d": 4, "length": 6},
        {"n_layers": 1, "n_heads": 1, "d_model": 16},
        "hmm",
    )
    assert "circuit" not in timeline.applicable(load_run(run_dir), costly=True)
    capsys.readouterr()
    assert main(["probe", run_dir, "--probes", "circuit"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "counterfactual" in err and "hmm_masked" in err, err


@pytest.mark.slow
def test_summary_section_and_wandb_read_the_timeline(run_dir, wandb_plots):
    tl = timeline.load(run_dir)
    if "circuit" not in tl.metrics:
        pytest.skip("needs the run probed above")
    probe = probes.PROBES.get("circuit")
    assert probe.section.figure(tl, None) is not None
    probe.wandb(tl, wandb_plots)
    assert set(wandb_plots.plots) == {"plots/circuit_faithfulness", "circuit/edges"}
    rows = wandb_plots.plots["circuit/edges"]
    assert len(rows) == 12 and abs(rows[0]["score"]) >= abs(rows[-1]["score"])
