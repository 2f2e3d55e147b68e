"""`mechsynth probe` on a sweep directory and on a run with seeds side by side, formation steps in
`sweep-report`, and `--set` on a sweep's grid axes."""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

import pytest

from mechsynth import load_run, parse_config, train_run
from mechsynth.analysis import timeline
from mechsynth.cli import main
from mechsynth.probes import PROBES
from mechsynth.runs import io
from mechsynth.runs.rundir import ckpt_dir
from mechsynth.sweep import load_plan, load_sweep

# Sparse parity n=6, k=2 learns within 60 steps at lr 3e-3 (its sparse_selection head forms); lr 1e-7 stays
# at chance. Eight checkpoints, so that a formation step is not just the last one.
BASE = """
[task]
name = "sparse_parity"
n = 6
k = 2
[model]
n_layers = 1
n_heads = 2
d_model = 32
[train]
steps = 60
batch_size = 64
lr = 3e-3
eval_every = 5
eval_batch_size = 256
checkpoints = 8
device = "cpu"
[wandb]
mode = "disabled"
"""
GRID = '[sweep]\nname = "lr"\nseeds = 2\n[sweep.grid]\n"train.lr" = [3e-3, 1e-7]\n'


def sweep_file(tmp_path: Path, sweep: str, name: str = "sweep.toml") -> str:
    p = tmp_path / name
    p.write_text(BASE + "\n" + sweep)
    return str(p)


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def earliest(tl: timeline.Timeline, probe: str):
    steps = [s for s in tl.formation[probe].values() if s is not None]
    return min(steps) if steps else None


@pytest.mark.smoke
def test_probe_a_sweep_each_run_as_alone_skip_probed_runs_and_report_formation(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", sweep_file(tmp_path, GRID), "--out", str(out), "--workers", "1"]) == 0
    plan = load_plan(out)
    runs = [out / j.dir for j in plan.jobs]
    assert len(runs) == 4

    # Not probed yet: the report says so in one line and tabulates no formation (nor prints None).
    capsys.readouterr()
    assert main(["sweep-report", str(out)]) == 0
    printed, err = capsys.readouterr()
    assert f"4 complete runs are not probed, so circuit formation leaves them out: mechsynth probe {out}" in err
    assert "None" not in printed + err
    assert not [c for c in read_csv(out / "sweep_report.csv")[0] if c.startswith("formation_")]

    # Every bad flag is one line before any work.
    for args, field in (
        (["--workers", "0"], "--workers"),
        (["--address", "auto"], "--backend"),
        (["--probes", "nope"], "--probes"),
        (["--probes", "induction,sparse_selection", "--steps", "7"], "--steps"),
        (["--set", "llc.draws=10"], "--set llc"),
        (["--batch-size", "0"], "--batch-size"),
    ):
        assert main(["probe", str(out), *args]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"mechsynth: error: {field}"), lines
    assert not any((r / "probes.json").exists() for r in runs)

    assert main(["probe", str(out), "--workers", "2"]) == 0
    err = capsys.readouterr().err
    assert "4 complete runs — 0 probed already, 4 to probe" in err and err.count(" probed in ") == 4
    # Independent truth: each run probed alone, in this process.
    saved = {r: timeline.load(r) for r in runs}
    for r in runs:
        alone = timeline.probe_run(load_run(r))
        assert saved[r].steps == alone.steps and set(saved[r].per_head) == set(alone.per_head)
        assert saved[r].formation == alone.formation, r
        for probe, heads in alone.per_head.items():
            for head, series in heads.items():
                assert saved[r].per_head[probe][head] == pytest.approx(series, abs=1e-4)
    firsts = {r: earliest(saved[r], "sparse_selection") for r in runs}
    assert all(firsts[out / f"runs/lr=0.003/seed_{s}"] is not None for s in (0, 1)), "the learning runs form a circuit"
    assert all(firsts[out / f"runs/lr=1e-7/seed_{s}"] is None for s in (0, 1)), "runs at chance form none"

    # Probed already: nothing is redone.
    stamps = {r: (r / "probes.json").stat().st_mtime_ns for r in runs}
    assert main(["probe", str(out), "--workers", "2"]) == 0
    assert "4 probed already, 0 to probe" in capsys.readouterr().err
    assert {r: (r / "probes.json").stat().st_mtime_ns for r in runs} == stamps

    # The report: per point and probe, the median over seeds of each seed's earliest head, from probes.json.
    assert main(["sweep-report", str(out)]) == 0
    printed, err = capsys.readouterr()
    assert "not probed" not in err and "None" not in printed
    # Probes that score heads against a threshold (hidden_progress scores them without one: no formation).
    tabulated = [p for p, heads in saved[runs[0]].formation.items() if heads and math.isfinite(PROBES.get(p).threshold)]
    assert "sparse_selection" in tabulated and f"circuits: {', '.join(tabulated)}" in printed
    rows = {r["point"]: r for r in read_csv(out / "sweep_report.csv")}
    for point in ("lr=0.003", "lr=1e-7"):
        for probe in tabulated:
            seeds = [earliest(saved[out / f"runs/{point}/seed_{s}"], probe) for s in (0, 1)]
            formed = [s for s in seeds if s is not None]
            row = rows[point]
            assert int(row[f"formation_{probe}_formed"]) == len(formed)
            assert int(row[f"formation_{probe}_probed"]) == 2
            want = statistics.median(formed) if formed else "not reached"
            assert (float(row[f"formation_{probe}"]) if formed else row[f"formation_{probe}"]) == want
    assert rows["lr=0.003"]["formation_sparse_selection"] not in ("", "not reached")
    assert rows["lr=1e-7"]["formation_sparse_selection"] == "not reached"
    for png in (out / "sweep_report.png", out / "sweep_formation_sparse_selection.png"):
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, png

    # A damaged run is one line; the others are probed (or skipped) all the same, and the exit code says 1.
    damaged, redo = out / "runs/lr=1e-7/seed_1", out / "runs/lr=0.003/seed_0"
    for r in (damaged, redo):
        (r / "probes.json").unlink()
    weights = ckpt_dir(damaged, load_run(damaged).steps[3]) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    assert main(["probe", str(out), "--workers", "1"]) == 1
    err = capsys.readouterr().err.splitlines()
    failed = [line for line in err if "FAILED" in line]
    assert (
        len(failed) == 1 and "runs/lr=1e-7/seed_1 FAILED: CorruptFileError" in failed[0] and str(weights) in failed[0]
    )
    assert timeline.load(redo).formation == saved[redo].formation
    assert not (damaged / "probes.json").exists()
    assert [f["run"] for f in io.read_json(out / "probe_failures.json")] == ["runs/lr=1e-7/seed_1"]


def test_probe_the_parent_of_seeds_side_by_side_probes_each_seed(tmp_path, tiny, capsys):
    data = tiny(
        {"name": "sparse_parity", "n": 6, "k": 2},
        {"n_heads": 2, "d_model": 32},
        {"seeds": 2, "steps": 60, "checkpoints": 8, "lr": 3e-3, "batch_size": 64},
    )
    run_dir = train_run(parse_config(data), tmp_path / "run", progress=False)
    capsys.readouterr()
    assert main(["probe", str(run_dir), "--workers", "1", "--probes", "sparse_selection"]) == 0
    err = capsys.readouterr().err
    assert "2 complete runs — 0 probed already, 2 to probe" in err
    formed = []
    for s in (0, 1):
        seed = load_run(run_dir / f"seed_{s}")
        saved, alone = timeline.load(seed.path), timeline.probe_run(seed, ["sparse_selection"])
        assert saved.formation == alone.formation and saved.steps == seed.steps
        assert f"seed_{s} probed in" in err
        formed.append(earliest(saved, "sparse_selection"))
    assert any(f is not None for f in formed), "a learning run forms its circuit"

    # One seed is a single run: the flags for many runs are refused there, in one line.
    assert main(["probe", str(run_dir / "seed_0"), "--workers", "2"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mechsynth: error: --workers:"), lines


@pytest.mark.parametrize("grid", ['"task.n" = [6, 8]', "task.n = [6, 8]"])
@pytest.mark.parametrize("key", ["sweep.grid.task.n", 'sweep.grid."task.n"', "sweep.grid.'task.n'"])
def test_set_on_a_grid_axis_replaces_it_however_spelt(tmp_path, capsys, grid, key):
    path = sweep_file(tmp_path, f'[sweep]\nseeds = 1\n[sweep.grid]\n{grid}\n"model.n_layers" = [1, 2]')
    plan = load_sweep(path, (f"{key}=[10,20]",))
    assert [(a.key, a.labels) for a in plan.axes] == [("task.n", ("10", "20")), ("model.n_layers", ("1", "2"))]
    assert [j.dir for j in plan.jobs] == [
        "runs/n=10,n_layers=1/seed_0",
        "runs/n=10,n_layers=2/seed_0",
        "runs/n=20,n_layers=1/seed_0",
        "runs/n=20,n_layers=2/seed_0",
    ]
    assert [parse_config(j.config).task_params["n"] for j in plan.jobs] == [10, 10, 20, 20]
    assert main(["sweep", path, "--set", f"{key}=[10,20]", "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    assert "runs/n=20,n_layers=2/seed_0" in capsys.readouterr().out
    # A new axis is added after those of the file.
    plan = load_sweep(path, (key.replace("task.n", "task.k") + "=[1, 2]",))
    assert [a.key for a in plan.axes] == ["task.n", "model.n_layers", "task.k"] and len(plan.jobs) == 8

    for value, message in (("[]", "sweep.grid.task.n: must be a non-empty list of values"), ('[10, "x"]', "task.n:")):
        assert main(["sweep", path, "--set", f"{key}={value}", "--out", str(tmp_path / "bad"), "--dry-run"]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"mechsynth: error: {message}"), lines
    assert not (tmp_path / "bad").exists()


def test_grid_keys_that_do_not_parse_are_one_line(tmp_path, capsys):
    both = sweep_file(tmp_path, '[sweep]\n[sweep.grid]\n"task.n" = [6]\ntask.n = [8]', name="both.toml")
    assert main(["sweep", both, "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == (
        'mechsynth: error: sweep.grid.task.n: is given twice (quoted "task.n" '
        "and bare task.n are one axis); give it once"
    )
    path = sweep_file(tmp_path, "[sweep]\nseeds = 1")
    assert main(["sweep", path, "--set", 'sweep.grid."task.n=[10]', "--dry-run"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mechsynth: error: --set:") and "quote" in lines[0], lines
