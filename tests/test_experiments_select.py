"""The sparse-selection and automata-depth experiments at smoke size: each runs end to end into tmp
paths and writes a JSON with the expected numbers and its figures. (The scientific outcome needs the
CPU or full size; here we check the pipeline and the bookkeeping.)"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
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
    data = module.main(["--smoke", "--out", str(out / "assets"), "--runs", str(out / "runs")])
    return module, out, data


def test_sparse_selection_smoke_writes_results(sparse):
    module, out, data = sparse
    written = json.loads((out / "assets" / "sparse_selection_smoke.json").read_text())
    assert written["n_star"] == data["n_star"] and written["size"] == "smoke"
    c = module.SIZES["smoke"]
    assert set(written["n_star"]) == {str(T) for T in c["lengths"]}
    for key in ("fits", "support_at_end", "support_timelines", "threshold", "device", "wall_time_s", "versions", "config"):
        assert key in written
    assert written["wall_time_s"] > 0 and written["versions"]["torch"]
    runs = written["runs"]
    assert {(r["T"], r["seed"]) for r in runs} == {(T, s) for T in c["lengths"] for s in c["seeds"]}
    for r in runs:
        assert 0.0 <= r["acc"] <= 1.0 and r["generalized"] == (r["acc"] >= written["threshold"])
        assert 0.0 <= r["attention_on_support"] <= 1.0 + 1e-6 and math.isfinite(r["train_loss"])
    for name in written["figures"]:
        assert is_png(out / "assets" / name)


def test_sparse_selection_search_finds_the_smallest_generalizing_size(sparse):
    """n* is a size that generalized, and every smaller size tried for that (T, seed) did not."""
    _, _, data = sparse
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
    module, out, data = sparse
    before = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("model.safetensors")}
    again = module.main(["--smoke", "--out", str(out / "again"), "--runs", str(out / "runs")])
    assert again["n_star"] == data["n_star"]
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("model.safetensors")} == before  # nothing retrained
    common = sys.modules["_select_common"]
    s = common.setup("sparse_selection", common.parser("").parse_args(["--smoke", "--runs", str(out / "runs")]))
    run = data["runs"][0]
    other = module.config(module.SIZES["smoke"], run["T"], run["n_train"], run["seed"])
    other["train"]["lr"] = 0.5
    with pytest.raises(ConfigError, match="--runs"):
        common.train(s, other, f"T{run['T']}_n{run['n_train']}_seed{run['seed']}")


def test_automata_depth_smoke_writes_results(tmp_path):
    module = load("automata_depth")
    data = module.main(["--smoke", "--out", str(tmp_path / "assets"), "--runs", str(tmp_path / "runs")])
    written = json.loads((tmp_path / "assets" / "automata_depth_smoke.json").read_text())
    c = module.SIZES["smoke"]
    assert written["table"] == json.loads(json.dumps(data["table"]))
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
    for name in written["figures"]:
        assert is_png(tmp_path / "assets" / name)


def test_grid_and_fit_line():
    module = load("sparse_selection")
    common = sys.modules["_select_common"]
    assert module.grid(16, 64, 2) == [16, 23, 32, 45, 64]
    fit = common.fit_line([1.0, 2.0, 3.0, 4.0], [5.0, 7.0, 9.0, 11.0])
    assert fit["slope"] == pytest.approx(2.0) and fit["intercept"] == pytest.approx(3.0) and fit["r2"] == pytest.approx(1.0)
    assert common.fit_line([2.0, 2.0], [1.0, 3.0]) is None
