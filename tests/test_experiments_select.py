"""The sparse-selection and automata-depth experiments at smoke size: each runs end to end into tmp
paths and writes a JSON with the expected numbers and its figures. (The scientific outcome needs the
CPU or full size; here we check the pipeline and the bookkeeping.)"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from mechsynth.config import ConfigError

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"experiment_{name}", EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", autouse=True)
def keep_threads():
    """The experiments use one torch thread; give the rest of the suite back what it had (a run's float
    results, and so the bit-exact resume tests, depend on the thread count)."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


@pytest.fixture(scope="module")
def sparse(tmp_path_factory):
    out = tmp_path_factory.mktemp("sparse")
    module = load("sparse_selection")
    assert module.main(["--smoke", "--out", str(out / "assets"), "--runs", str(out / "runs")]) == 0
    written = json.loads((out / "assets" / "sparse_selection.json").read_text())
    return module, out, written


def test_sparse_selection_smoke_writes_results(sparse):
    module, out, written = sparse
    data, c = written["results"], module.SIZES["smoke"]
    assert written["size"] == "smoke" and set(data["n_star"]) == {str(T) for T in c["lengths"]}
    for key in ("fits", "support_at_end", "support_timelines", "threshold"):
        assert key in data
    assert written["wall_time_s"] > 0 and written["versions"]["torch"] and written["config"] == c
    runs = data["runs"]
    assert {(r["T"], r["seed"]) for r in runs} == {(T, s) for T in c["lengths"] for s in c["seeds"]}
    for r in runs:
        assert 0.0 <= r["acc"] <= 1.0 and r["generalized"] == (r["acc"] >= data["threshold"])
        assert 0.0 <= r["attention_on_support"] <= 1.0 + 1e-6 and math.isfinite(r["train_loss"])
    for name in written["figures"]:
        assert is_png(out / "assets" / name)


def test_sparse_selection_search_finds_the_smallest_generalizing_size(sparse):
    """n* is a size that generalized, and every smaller size tried for that (T, seed) did not."""
    data = sparse[2]["results"]
    for T, row in data["n_star"].items():
        for seed, n_star in row["n_star"].items():
            tried = [r for r in data["runs"] if r["T"] == int(T) and r["seed"] == int(seed)]
            if n_star is None:
                assert not any(r["generalized"] for r in tried)
            else:
                assert any(r["n_train"] == n_star and r["generalized"] for r in tried)
                assert not any(r["generalized"] for r in tried if r["n_train"] < n_star)
    for tl in data["support_timelines"]:
        assert len(tl["steps"]) == len(tl["attention_on_support"]) == len(tl["support_recovered"]) >= 2
        assert tl["steps"][0] == 0


def test_experiment_reuses_finished_runs_and_refuses_a_different_one(sparse):
    module, out, written = sparse
    before = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("model.safetensors")}
    assert module.main(["--smoke", "--out", str(out / "again"), "--runs", str(out / "runs")]) == 0
    again = json.loads((out / "again" / "sparse_selection.json").read_text())
    assert again["results"]["n_star"] == written["results"]["n_star"] and again["runs_trained"] == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("model.safetensors")} == before  # nothing retrained
    harness = module.harness
    s = harness.Session("sparse_selection", harness.parse_args("sparse_selection", "", ["--smoke", "--runs", str(out / "runs")]))
    run = written["results"]["runs"][0]
    other = module.config(module.SIZES["smoke"], run["T"], run["n_train"], run["seed"])
    other["train"]["lr"] = 0.5
    with pytest.raises(ConfigError, match="--runs"):
        s.train(other, out / "runs" / f"T{run['T']}_n{run['n_train']}_seed{run['seed']}")


def test_automata_depth_smoke_writes_results(tmp_path):
    module = load("automata_depth")
    assert module.main(["--smoke", "--out", str(tmp_path / "assets"), "--runs", str(tmp_path / "runs")]) == 0
    out = json.loads((tmp_path / "assets" / "automata_depth.json").read_text())
    written, c = out["results"], module.SIZES["smoke"]
    assert len(written["runs"]) == len(c["groups"]) * len(c["depths"]) * len(c["seeds"])
    for g in c["groups"]:
        for d in c["depths"]:
            cell = written["table"][g][str(d)]
            assert 0 <= cell["min"] <= cell["mean"] <= cell["max"] <= 100
            assert cell["paper_T100"] == module.PAPER[g][d]
    for r in written["runs"]:
        assert len(r["linear_state"]) == r["depth"] + 1 and all(0 <= a <= 1 for a in r["linear_state"])
        assert len(r["acc_long_by_position"]) == 2 * c["length"]
        assert len(r["entropy_per_head"]) == r["depth"] * c["n_heads"]
    # S5 has 120 states: chance is < 1%, so even a smoke run is far above zero and far below C2's chance of 50%.
    assert written["table"]["S5"]["1"]["mean"] < written["table"]["C2"]["1"]["mean"]
    for name in out["figures"]:
        assert is_png(tmp_path / "assets" / name)


def test_grid_and_linear_fit():
    module = load("sparse_selection")
    assert module.grid(16, 64, 2) == [16, 23, 32, 45, 64]
    fit = module.harness.linear_fit([1.0, 2.0, 3.0, 4.0], [5.0, 7.0, 9.0, 11.0])
    assert fit["slope"] == pytest.approx(2.0) and fit["intercept"] == pytest.approx(3.0) and fit["r2"] == pytest.approx(1.0)
    assert module.harness.linear_fit([2.0, 2.0], [1.0, 3.0]) is None
