"""Sweeps: grid expansion and validation, local and Ray backends, skip/resume, a real kill, the report."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mechsynth import load_run, parse_config, train_run
from mechsynth.cli import main
from mechsynth.runs import io
from mechsynth.runs.rundir import ckpt_dir, is_complete
from mechsynth.sweep import load_plan, load_sweep, state
from mechsynth.sweep.local_pool import cpu_count
from mechsynth.sweep.units import batch_config, plan_units

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
checkpoints = 4
device = "cpu"
[wandb]
mode = "disabled"
"""


def sweep_file(tmp_path: Path, sweep: str, base: str = BASE, name: str = "sweep.toml") -> str:
    p = tmp_path / name
    p.write_text(base + "\n" + sweep)
    return str(p)


def tree_digest(run_dir: Path) -> dict[str, tuple[float, str]]:
    """Every file's mtime and content hash: a run that was redone would change both."""
    return {
        str(p.relative_to(run_dir)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


def wandb_run_record(wandb_file: Path) -> dict:
    """The run record of an offline W&B log, as W&B's own reader prints it."""
    wandb_bin = shutil.which("wandb") or str(Path(sys.executable).parent / "wandb")
    out = subprocess.run(
        [wandb_bin, "leet", "inspect", "--json", str(wandb_file)], capture_output=True, text=True, check=True
    ).stdout
    return next(r["run"] for r in map(json.loads, out.splitlines()) if r.get("type") == "run")


def train_with_threads(cfg, run_dir: Path, threads: int) -> Path:
    """A reference run with a sweep worker's torch thread count (it changes the order of float sums)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return train_run(cfg, run_dir, progress=False)
    finally:
        torch.set_num_threads(before)


# --- expansion and validation ------------------------------------------------------------------


def test_grid_expands_to_product_times_seeds_with_readable_names(tmp_path):
    (tmp_path / "base.toml").write_text(BASE)
    path = sweep_file(
        tmp_path,
        """
base = "base.toml"
[model]
d_model = 16
[sweep]
name = "demo"
seeds = [3, 7]
[sweep.grid]
"task.n" = [6, 8]
model.n_layers = [1, 2, 3]
automaton = [{label = "wide", "model.n_heads" = 4}, {"model.n_heads" = 1, "train.lr" = 0.01}]
""",
        base="",
    )
    plan = load_sweep(path)
    assert [a.key for a in plan.axes] == ["task.n", "model.n_layers", "automaton"]
    assert len(plan.jobs) == 2 * 3 * 2 * 2
    assert len({j.dir for j in plan.jobs}) == len(plan.jobs)
    job = next(j for j in plan.jobs if j.dir == "runs/n=8,n_layers=3,automaton=1-0.01/seed_7")
    cfg = parse_config(job.config)
    assert (cfg.task_params["n"], cfg.model.n_layers, cfg.model.n_heads, cfg.train.lr) == (8, 3, 1, 0.01)
    assert cfg.train.seed == 7 and cfg.model.init_seed == 7, "a seed sets the data stream and the init"
    assert cfg.model.d_model == 16 and cfg.task_params["k"] == 2, "the sweep file overrides its base"
    # `<sweep>/<point>-seed_<s>`: the name seeds side by side give each seed, so either way a run's config is the same
    assert cfg.wandb.group == "demo" and cfg.wandb.name == "demo/n=8,n_layers=3,automaton=1-0.01-seed_7"
    assert {j.labels["automaton"] for j in plan.jobs} == {"wide", "1-0.01"}


@pytest.mark.parametrize(
    "sweep, field",
    [
        ("[sweep]\nseeds = 0", "sweep.seeds"),
        ("[sweep]\nseeds = [1, 1]", "sweep.seeds"),
        ("[sweep]\ncolour = 1", "sweep.colour"),
        ('[sweep]\n[sweep.grid]\n"task.k" = []', "sweep.grid.task.k"),
        ('[sweep]\n[sweep.grid]\n"train.seed" = [1, 2]', "sweep.grid.train.seed"),
        ('[sweep]\n[sweep.grid]\n"nope.x" = [1, 2]', "sweep.grid.nope.x"),
        ('[sweep]\n[sweep.grid]\n"task.k" = [2, 9]', "task.k"),
        ('[sweep]\n[sweep.grid]\n"model.d_model" = [32, "big"]', "model.d_model"),
        ('[sweep]\n[sweep.grid]\n"task.colour" = [1]', "task.colour"),
        ("", "sweep"),
    ],
)
def test_bad_sweep_reports_one_line_before_any_run(tmp_path, capsys, sweep, field):
    out = tmp_path / "out"
    assert main(["sweep", sweep_file(tmp_path, sweep), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mechsynth: error: {field}:"), err
    assert not out.exists(), "no work may start on bad input"


def test_bad_grid_value_names_the_point(tmp_path, capsys):
    path = sweep_file(tmp_path, '[sweep]\n[sweep.grid]\n"task.k" = [2, 9]')
    assert main(["sweep", path, "--out", str(tmp_path / "out")]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "mechsynth: error: task.k: must be between 1 and n=6, got 9 (sweep point k=9, seed 0)"
    )


def test_bad_flags(tmp_path, capsys):
    path = sweep_file(tmp_path, "[sweep]\nseeds = 1")
    assert main(["sweep", path, "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err
    assert main(["sweep", path, "--address", "auto"]) == 2
    assert "--backend ray" in capsys.readouterr().err


def test_ray_missing_gives_install_hint(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` sees when it is not installed
    assert (
        main(["sweep", sweep_file(tmp_path, "[sweep]\nseeds = 1"), "--backend", "ray", "--out", str(tmp_path / "o")])
        == 2
    )
    assert (
        capsys.readouterr().err.strip()
        == "mechsynth: error: --backend: ray is not installed; install it with: pip install 'mechsynth[ray]'"
    )


# --- running, skipping, resuming, reporting ----------------------------------------------------


@pytest.mark.smoke
def test_local_sweep_skips_complete_runs_refuses_other_plans_and_reports(tmp_path, capsys):
    # lr 1e-7 cannot move the weights: its seeds stay at chance; lr 3e-3 learns n=6, k=2 within 60 steps.
    path = sweep_file(tmp_path, '[sweep]\nname = "lr"\nseeds = 2\n[sweep.grid]\n"train.lr" = [3e-3, 1e-7]')
    out = tmp_path / "out"
    assert main(["sweep", path, "--out", str(out), "--workers", "2", "--wandb", "offline"]) == 0
    plan = load_plan(out)
    assert [j.dir for j in plan.jobs] == [
        "runs/lr=0.003/seed_0",
        "runs/lr=0.003/seed_1",
        "runs/lr=1e-7/seed_0",
        "runs/lr=1e-7/seed_1",
    ]
    for job in plan.jobs:
        run = load_run(out / job.dir)
        assert is_complete(run.path) and run.steps[-1] == 60 and run.config.train.seed == job.seed
    # Every run of the sweep is one real W&B run in the sweep's group (the group W&B itself recorded).
    records = [wandb_run_record(next((out / j.dir / "wandb").glob("offline-run-*/run-*.wandb"))) for j in plan.jobs]
    assert {r["run_group"] for r in records} == {"lr"} and len({r["run_id"] for r in records}) == 4
    assert [r["display_name"] for r in records] == [f"lr/{j.point}-seed_{j.seed}" for j in plan.jobs]
    assert (out / "runs/lr=0.003/config.json").exists(), "each point's two seeds trained side by side"

    before = {j.dir: tree_digest(out / j.dir) for j in plan.jobs}
    capsys.readouterr()
    assert main(["sweep", path, "--out", str(out), "--wandb", "offline"]) == 0
    assert "4 complete, 0 to resume, 0 to start" in capsys.readouterr().err
    assert {j.dir: tree_digest(out / j.dir) for j in plan.jobs} == before, "complete runs are not touched"

    assert main(["sweep", path, "--out", str(out), "--dry-run"]) == 0
    assert capsys.readouterr().out.count("complete ") == 4

    other = sweep_file(
        tmp_path, '[sweep]\nname = "lr"\nseeds = 2\n[sweep.grid]\n"train.lr" = [3e-3, 1e-2]', name="other.toml"
    )
    assert main(["sweep", other, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds a different sweep" in err and "train.lr: [0.003, 1e-7]" in err and "[0.003, 0.01]" in err
    assert main(["sweep", other, "--out", str(out), "--dry-run"]) == 2
    assert "holds a different sweep" in capsys.readouterr().err

    # The report against the runs' own metrics: converged = final eval/acc ≥ 0.99, step = first eval there.
    assert main(["sweep-report", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = {r["point"]: r for r in _csv(out / "sweep_report.csv")}
    for point, lr in (("lr=0.003", 3e-3), ("lr=1e-7", 1e-7)):
        metrics = [load_run(out / f"runs/{point}/seed_{s}").metrics for s in (0, 1)]
        finals = [m[-1]["eval/acc"] for m in metrics]
        firsts = [next(r["step"] for r in m if r["eval/acc"] >= 0.99) for m, f in zip(metrics, finals) if f >= 0.99]
        row = rows[point]
        assert int(row["n_runs"]) == int(row["n_complete"]) == 2
        assert float(row["final_acc_mean"]) == pytest.approx(sum(finals) / 2)
        assert float(row["frac_converged"]) == len(firsts) / 2
        if firsts:
            assert float(row["conv_step_median"]) == pytest.approx(sum(firsts) / 2)
            assert float(row["conv_step_min"]) == min(firsts) and float(row["conv_step_max"]) == max(firsts)
        else:
            assert row["conv_step_median"] == ""
    assert float(rows["lr=0.003"]["frac_converged"]) == 1.0 and float(rows["lr=1e-7"]["frac_converged"]) == 0.0
    assert "train.lr" in printed and "2/2" in printed
    png = (out / "sweep_report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000

    assert main(["sweep-report", str(out), "--rows", "nope"]) == 2
    assert "--rows: 'nope' is not an axis of this sweep; allowed: train.lr" in capsys.readouterr().err


def _csv(path: Path) -> list[dict[str, str]]:
    import csv

    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.smoke
def test_partial_runs_resume_new_ones_restart_and_failures_are_reported(tmp_path, capsys):
    path = sweep_file(tmp_path, "[sweep]\nseeds = 3\nside_by_side = false")
    out = tmp_path / "out"
    assert main(["sweep", path, "--out", str(out), "--workers", "1"]) == 0
    plan = load_plan(out)
    runs = [out / j.dir for j in plan.jobs]
    finished = {p: io.read_tensors(ckpt_dir(p, 60) / "model.safetensors") for p in runs}
    steps = load_run(runs[0]).steps
    # Run 0: cut back to a middle checkpoint. Run 1: its start only (no checkpoint: continued from step 0).
    # Run 2: a damaged optimizer state, so its resume fails and names the file.
    for p, keep in ((runs[0], 2), (runs[1], 0), (runs[2], 2)):
        for s in steps[keep:]:
            shutil.rmtree(ckpt_dir(p, s))
    (ckpt_dir(runs[2], steps[1]) / "state.pt").write_bytes(b"not a torch file")
    assert [state(p) for p in runs] == ["partial", "partial", "partial"]

    assert main(["sweep", path, "--out", str(out), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert "0 complete, 3 to resume, 0 to start" in err
    assert f"{plan.jobs[2].dir} FAILED: CorruptFileError" in err and "state.pt" in err
    failures = io.read_json(out / "failures.json")
    assert [f["run"] for f in failures] == [plan.jobs[2].dir] and "state.pt" in failures[0]["error"]
    for p in runs[:2]:  # resumed and restarted runs end exactly where the uninterrupted ones did
        w = io.read_tensors(ckpt_dir(p, 60) / "model.safetensors")
        assert all(torch.equal(w[k], finished[p][k]) for k in w)
        assert [r["step"] for r in load_run(p).metrics] == sorted({r["step"] for r in load_run(p).metrics})


# --- seeds side by side ------------------------------------------------------------------------


def _files(run_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())


@pytest.mark.smoke
def test_side_by_side_seeds_write_the_run_directories_separate_runs_would(tmp_path, capsys):
    path = sweep_file(tmp_path, '[sweep]\nname = "s"\nseeds = 3\n[sweep.grid]\n"model.n_layers" = [1, 2]')
    batched, separate = tmp_path / "batched", tmp_path / "separate"
    assert main(["sweep", path, "--out", str(batched), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "= 6 runs" in dry and "6 runs in 2 jobs of seeds side by side" in dry
    assert dry.count("(side by side in runs/n_layers=1)") == 3
    assert main(["sweep", path, "--out", str(batched), "--workers", "1"]) == 0
    assert "6 runs in 2 jobs" in capsys.readouterr().err
    assert main(["sweep", path, "--out", str(separate), "--workers", "1", "--set", "sweep.side_by_side=false"]) == 0
    assert "side by side" not in capsys.readouterr().err

    plan = load_plan(batched)
    assert load_plan(separate).jobs == plan.jobs and len(plan.jobs) == 6
    for point in ("n_layers=1", "n_layers=2"):  # the batched job itself, beside its seeds
        assert io.read_json(batched / "runs" / point / "config.json")["train"]["seeds"] == 3
        assert (
            not (separate / "runs" / point / "config.json").exists() and state(batched / "runs" / point) == "complete"
        )
    for job in plan.jobs:
        a, b = batched / job.dir, separate / job.dir
        assert _files(a) == _files(b), job.dir  # the same checkpoints, metrics and config files
        assert (
            io.read_json(a / "config.json")
            == io.read_json(b / "config.json")
            == {**job.config, **{k: io.read_json(b / "config.json")[k] for k in ("versions", "threads")}, "plugins": []}
        )
        ra, rb = load_run(a), load_run(b)
        assert ra.config == rb.config and ra.config.train.seed == ra.config.model.init_seed == job.seed
        assert ra.steps == rb.steps and ra.steps[-1] == 60
        # The same run up to float rounding: equal early on; parity's sharp drop in the loss amplifies the
        # rounding later (tests/test_seeds.py checks side-by-side trajectories against separate runs).
        for x, y in zip(ra.metrics, rb.metrics, strict=True):
            assert x["step"] == y["step"]
            assert x["eval/loss"] == pytest.approx(y["eval/loss"], rel=1e-4 if x["step"] <= 10 else 0.2)
        assert ra.metrics[-1]["eval/acc"] == pytest.approx(rb.metrics[-1]["eval/acc"], abs=0.1)
        assert ra.model(60) is not None
    for out in (batched, separate):
        assert main(["sweep-report", str(out)]) == 0
    capsys.readouterr()
    rows = [[(r["n_runs"], r["n_complete"]) for r in _csv(d / "sweep_report.csv")] for d in (batched, separate)]
    assert rows[0] == rows[1] == [("3", "3"), ("3", "3")]


@pytest.mark.smoke
def test_a_sweep_of_separate_runs_from_before_resumes_them_separately(tmp_path, capsys):
    """A sweep directory written before side by side existed (each seed its own run, no batch config)
    is continued seed by seed: nothing is batched over its runs, a finished run is not touched."""
    path = sweep_file(tmp_path, '[sweep]\nname = "old"\nseeds = 3')
    out = tmp_path / "out"
    assert main(["sweep", path, "--out", str(out), "--workers", "1", "--set", "sweep.side_by_side=false"]) == 0
    # As the sweep of before wrote it: no side_by_side or seed_keys in sweep.json, W&B names .../seed_<s>.
    data = io.read_json(out / "sweep.json")
    del data["side_by_side"], data["seed_keys"]
    for r in data["runs"]:
        r["config"]["wandb"]["name"] = f"old/{r['point']}/seed_{r['seed']}"
        stored = io.read_json(out / r["dir"] / "config.json")
        io.write_json(out / r["dir"] / "config.json", {**stored, "wandb": r["config"]["wandb"]})
    io.write_json(out / "sweep.json", data)
    runs = [out / f"runs/base/seed_{s}" for s in range(3)]
    finished = {p: io.read_tensors(ckpt_dir(p, 60) / "model.safetensors") for p in runs}
    steps = load_run(runs[1]).steps
    for s in steps[2:]:  # seed 1 killed mid-run; seed 2 never started
        shutil.rmtree(ckpt_dir(runs[1], s))
    shutil.rmtree(runs[2])
    done = tree_digest(runs[0])
    capsys.readouterr()

    assert main(["sweep", path, "--out", str(out), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "0 runs in 0 jobs of seeds side by side" in dry and "trained separately" in dry
    assert main(["sweep", path, "--out", str(out), "--workers", "1"]) == 0
    assert "1 complete, 1 to resume, 1 to start" in capsys.readouterr().err
    assert not (out / "runs/base/config.json").exists(), "no batch over separate runs"
    assert tree_digest(runs[0]) == done
    for p in runs:  # continued and restarted alone, each ends where it did the first time
        w = io.read_tensors(ckpt_dir(p, 60) / "model.safetensors")
        assert is_complete(p) and all(torch.equal(w[k], finished[p][k]) for k in w)
    before = {p: tree_digest(p) for p in runs}
    assert main(["sweep", path, "--out", str(out)]) == 0
    assert "3 complete, 0 to resume, 0 to start" in capsys.readouterr().err
    assert {p: tree_digest(p) for p in runs} == before


@pytest.mark.smoke
def test_more_steps_continue_a_finished_batch_and_fewer_keep_it(tmp_path, capsys):
    path = sweep_file(tmp_path, "[sweep]\nseeds = 2")
    out = tmp_path / "out"
    threads = torch.get_num_threads()
    torch.set_num_threads(7)  # not what a job takes (the CPU count), which it must give back
    try:
        assert main(["sweep", path, "--out", str(out), "--workers", "1"]) == 0
        assert torch.get_num_threads() == 7
    finally:
        torch.set_num_threads(threads)
    assert main(["sweep", path, "--out", str(out), "--set", "train.steps=80"]) == 0
    assert "0 complete, 2 to resume, 0 to start" in capsys.readouterr().err
    assert io.read_json(out / "runs/base/config.json")["train"]["steps"] == 80
    for s in range(2):
        run = load_run(out / f"runs/base/seed_{s}")
        assert run.steps[-1] == 80 and run.config.train.steps == 80 and is_complete(run.path)
    digest = tree_digest(out / "runs")
    assert main(["sweep", path, "--out", str(out)]) == 0  # 60 steps again: a run trained longer is kept
    assert "2 complete, 0 to resume, 0 to start" in capsys.readouterr().err
    assert tree_digest(out / "runs") == digest


def test_seed_keys_make_each_seed_its_own_run(tmp_path, capsys):
    path = sweep_file(tmp_path, '[sweep]\nseeds = 2\nseed_keys = ["task.seed"]')
    plan = load_sweep(path)
    assert [parse_config(j.config).task_params["seed"] for j in plan.jobs] == [0, 1]
    units = plan_units(plan, tmp_path / "out")
    assert [u.side_by_side for u in units] == [False, False] and "task.seed" in units[0].separate_why
    bad = sweep_file(
        tmp_path, '[sweep]\nseed_keys = ["task.seed"]\n[sweep.grid]\n"task.seed" = [1, 2]', name="bad.toml"
    )
    assert main(["sweep", bad, "--dry-run"]) == 2
    assert "sweep.grid.task.seed: 'task.seed' is set by the seed" in capsys.readouterr().err
    # Seeds not 0..S-1 cannot share a batch's seed directories: they train separately.
    units = plan_units(load_sweep(sweep_file(tmp_path, "[sweep]\nseeds = [1, 2]", name="s12.toml")), tmp_path / "o")
    assert [u.dir for u in units] == ["runs/base/seed_1", "runs/base/seed_2"] and "not 0..1" in units[0].separate_why


# --- a real kill -------------------------------------------------------------------------------


@pytest.mark.smoke
def test_sigkilled_sweep_restarts_without_redoing_or_corrupting(tmp_path, capsys):
    """SIGKILL the whole sweep (driver and pool workers) mid-run; the same command then finishes it."""
    path = sweep_file(
        tmp_path,
        "[sweep]\nseeds = 3\nside_by_side = false",
        base=BASE.replace("steps = 60", "steps = 300")
        .replace("checkpoints = 4", "checkpoints = 30")
        .replace("eval_every = 5", "eval_every = 50"),
    )
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mechsynth.cli", "sweep", path, "--out", str(out), "--workers", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    runs = [out / f"runs/base/seed_{s}" for s in range(3)]
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        states = [state(p) for p in runs]
        if (
            "complete" in states
            and "partial" in states
            and len(list((runs[states.index("partial")] / "checkpoints").glob("step_*"))) >= 8
        ):
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its pool workers, no chance to clean up
    proc.wait()
    states = [state(p) for p in runs]
    assert "complete" in states and "partial" in states, f"the kill should land mid-sweep: {states}"

    # Nothing is corrupt: every checkpoint that a loader sees is whole (temporary ones may remain).
    for p in runs:
        for s in load_run(p).steps if (p / "config.json").exists() else []:
            io.read_tensors(ckpt_dir(p, s) / "model.safetensors")
            io.read_json(ckpt_dir(p, s) / "meta.json")
            io.read_state(ckpt_dir(p, s) / "state.pt")
    done_before = {p: tree_digest(p) for p, s in zip(runs, states) if s == "complete"}
    cut = runs[states.index("partial")]

    capsys.readouterr()
    assert main(cmd[3:]) == 0
    assert f"{len(done_before)} complete, {states.count('partial')} to resume" in capsys.readouterr().err
    for p, digest in done_before.items():
        assert tree_digest(p) == digest, f"{p.name} was redone"
    for p in runs:
        run = load_run(p)
        assert is_complete(p) and run.steps[-1] == 300 and run.metrics[-1]["step"] == 300
        assert not list((p / "checkpoints").glob(".*")), "leftovers of the killed write are cleared"
    # The cut run ends exactly where an uninterrupted run of the same config does (two workers on two
    # cores: one torch thread each).
    ref = train_with_threads(load_run(cut).config, tmp_path / "ref", max(1, cpu_count() // 2))
    wa, wb = (io.read_tensors(ckpt_dir(d, 300) / "model.safetensors") for d in (ref, cut))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.smoke
def test_sigkilled_side_by_side_sweep_resumes_its_batches(tmp_path, capsys):
    """SIGKILL a sweep whose points train their seeds side by side, with one point done and the next
    mid-run; the same command continues that batch and leaves the finished one as it was."""
    path = sweep_file(
        tmp_path,
        '[sweep]\nseeds = 3\n[sweep.grid]\n"model.n_layers" = [1, 2]',
        base=BASE.replace("steps = 60", "steps = 300")
        .replace("checkpoints = 4", "checkpoints = 30")
        .replace("eval_every = 5", "eval_every = 50"),
    )
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mechsynth.cli", "sweep", path, "--out", str(out), "--workers", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    first, second = out / "runs/n_layers=1", out / "runs/n_layers=2"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (
            state(first) == "complete"
            and state(second) == "partial"
            and len(list((second / "seed_0" / "checkpoints").glob("step_*"))) >= 8
        ):
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (state(first), state(second)) == ("complete", "partial"), "the kill should land mid-sweep"
    done = tree_digest(first)

    capsys.readouterr()
    assert main(cmd[3:]) == 0
    err = capsys.readouterr().err
    assert "3 complete, 3 to resume, 0 to start" in err and "runs/n_layers=2 (seeds 0-2 side by side) resumed" in err
    assert tree_digest(first) == done, "the finished batch was redone"
    # The continued batch ends exactly where an uninterrupted one does (one job: it trains in the sweep's
    # process with every core's thread).
    jobs = [j for j in load_plan(out).jobs if j.point == "n_layers=2"]
    ref = train_with_threads(parse_config(batch_config(jobs)), tmp_path / "ref", cpu_count())
    for job in jobs:
        run = load_run(out / job.dir)
        assert is_complete(run.path) and run.metrics[-1]["step"] == 300
        wa, wb = (io.read_tensors(ckpt_dir(d, 300) / "model.safetensors") for d in (ref / f"seed_{job.seed}", run.path))
        assert all(torch.equal(wa[k], wb[k]) for k in wa)


# --- Ray -----------------------------------------------------------------------------------------


@pytest.mark.smoke
def test_ray_sweep_on_a_local_ray_instance(tmp_path, capsys):
    pytest.importorskip("ray")  # installed by the dev extra; see README for mechsynth[ray]
    path = sweep_file(tmp_path, '[sweep]\nname = "r"\nseeds = 2\n[sweep.grid]\n"model.n_layers" = [1, 2]')
    out = tmp_path / "out"
    assert main(["sweep", path, "--out", str(out), "--backend", "ray", "--cpus-per-run", "1"]) == 0
    err = capsys.readouterr().err
    assert "0 complete, 0 to resume, 4 to start" in err and "4 runs in 2 jobs" in err
    import ray

    assert not ray.is_initialized(), "the local Ray instance the sweep started is shut down"
    plan = load_plan(out)
    assert len(plan.jobs) == 4
    for job in plan.jobs:
        assert is_complete(out / job.dir)
    # A Ray task computes exactly what an in-process run of the same config does (with the task's
    # one torch thread: a different thread count changes the order of float sums): here the batch of
    # point n_layers=2's two seeds.
    jobs = [j for j in plan.jobs if j.point == "n_layers=2"]
    ref = train_with_threads(parse_config(batch_config(jobs)), tmp_path / "ref", 1)
    for job in jobs:
        wa, wb = (
            io.read_tensors(ckpt_dir(d, 60) / "model.safetensors") for d in (ref / f"seed_{job.seed}", out / job.dir)
        )
        assert all(torch.equal(wa[k], wb[k]) for k in wa)


def _pool_workers() -> list[int]:
    """Pids of this process's spawned pool workers."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and b"spawn_main" in cmdline:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.smoke
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the pool's workers through /proc")
def test_a_worker_killed_mid_run_costs_its_runs_one_retry_not_the_sweep(tmp_path, capsys):
    """One pool worker SIGKILLed mid-run breaks the pool; the runs it cut off continue in a fresh one."""
    import threading

    path = sweep_file(
        tmp_path,
        "[sweep]\nseeds = 2\nside_by_side = false",
        base=BASE.replace("steps = 60", "steps = 400")
        .replace("checkpoints = 4", "checkpoints = 20")
        .replace("eval_every = 5", "eval_every = 50"),
    )
    out, killed = tmp_path / "out", []

    def kill_one_worker() -> None:
        deadline = time.time() + 240
        while time.time() < deadline:
            if all(len(list((out / f"runs/base/seed_{s}/checkpoints").glob("step_*"))) >= 4 for s in range(2)):
                workers = _pool_workers()
                if workers:
                    os.kill(workers[0], signal.SIGKILL)
                    killed.append(workers[0])
                    return
            time.sleep(0.02)

    watcher = threading.Thread(target=kill_one_worker)
    watcher.start()
    code = main(["sweep", path, "--out", str(out), "--workers", "2"])
    watcher.join()
    err = capsys.readouterr().err
    assert killed, "the kill should land while the runs train"
    assert code == 0, err
    for s in range(2):
        run = out / f"runs/base/seed_{s}"
        assert is_complete(run) and load_run(run).metrics[-1]["step"] == 400  # (load_run checks step order)


def test_a_run_stored_before_a_field_existed_is_the_same_run():
    """A config.json written before `train.decay` and `task.start` existed trained as their defaults say:
    continuing it, or reusing it in a sweep, sees no change; another value is a change."""
    from mechsynth import sweep
    from mechsynth.runs import rundir
    from mechsynth.runs.runconfig import complete

    current = parse_config({"task": {"name": "markov_icl", "k": 3, "length": 8}, "model": {"n_layers": 1}}).to_dict()
    stored = {
        **current,
        "task": {k: v for k, v in current["task"].items() if k != "start"},
        "train": {k: v for k, v in current["train"].items() if k != "decay"},
    }
    assert rundir.changed_keys(complete(stored), current) == [] and sweep._fixed(stored) == sweep._fixed(current)
    assert rundir.changed_keys(complete(stored), {**current, "train": {**current["train"], "decay": "matrices"}}) == [
        "train.decay"
    ]


def test_converged_is_the_tasks_own_criterion_and_none_converging_says_which_flags_set_it(tmp_path, capsys):
    from mechsynth.sweep import report as sweep_report

    # markov_icl's accuracy tops out near 0.58 (its next token is random): its criterion is the Bayes predictor's KL
    assert sweep_report.criterion({"name": "markov_icl"}, None, None).text() == "eval/kl_bayes ≤ 0.02"
    assert sweep_report.criterion({"name": "sparse_parity"}, None, None).text() == "eval/acc ≥ 0.99"
    assert sweep_report.criterion({"name": "markov_icl"}, None, 0.5).text() == "eval/acc ≥ 0.5"
    base = (
        BASE.replace('name = "sparse_parity"\nn = 6\nk = 2', 'name = "markov_icl"\nk = 3\nlength = 16')
        .replace("steps = 60", "steps = 10")
        .replace("n_heads = 2", "n_heads = 1")
    )
    path = sweep_file(tmp_path, '[sweep]\nname = "icl"\nseeds = 1\n[sweep.grid]\n"train.lr" = [3e-3]', base=base)
    out = tmp_path / "out"
    assert main(["sweep", path, "--out", str(out), "--workers", "1"]) == 0
    capsys.readouterr()
    assert main(["sweep-report", str(out)]) == 0
    said = capsys.readouterr()
    assert "converged: eval/kl_bayes ≤ 0.02" in said.out
    assert (
        "no run converged (eval/kl_bayes ≤ 0.02); set the criterion with --acc-key KEY and --acc THRESHOLD" in said.err
    )
    assert main(["sweep-report", str(out), "--acc", "0.01"]) == 0  # any accuracy: converged, and no hint
    said = capsys.readouterr()
    assert "converged: eval/acc ≥ 0.01" in said.out and "no run converged" not in said.err
