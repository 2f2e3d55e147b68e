"""Each reproduction script in experiments/ runs end to end at its smoke size and writes a results JSON
and figures that hold what they should (not the papers' findings: at this size they mean nothing)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from mechsynth.config import ConfigError

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"experiment_{name}", EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", autouse=True)
def keep_threads():
    """The scripts set torch's thread count for the process; give the rest of the suite its own back (a
    run's float results, and so the bit-exact resume tests, depend on the thread count)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def run_smoke(name: str, tmp_path: Path) -> dict:
    assert load(name).main(["--smoke", "--out", str(tmp_path), "--runs", str(tmp_path / "runs")]) == 0
    out = json.loads((tmp_path / f"{name}.json").read_text())
    assert out["experiment"] == name and out["size"] == "smoke" and out["wall_time_s"] > 0
    assert out["command"] == f"python experiments/{name}.py --smoke" and out["device"].startswith("CPU")
    assert set(out["versions"]) >= {"mechsynth", "torch", "transformer_lens"} and out["runs_trained"] > 0
    for fig in out["figures"]:
        data = (tmp_path / fig).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, fig
    return out


def test_statistical_induction_smoke(tmp_path):
    out = run_smoke("statistical_induction", tmp_path)
    conds = out["results"]["conditions"]
    assert set(conds) == {"k3", "k2", "ds", "trigram"}
    for cond, c in conds.items():
        assert c["seeds"], cond
        for r in c["seeds"]:
            steps = r["steps"]
            assert steps[0] == 0 and steps == sorted(steps) and len(steps) >= 5
            want = {"uniform", "unigram", "bigram"} | ({"trigram"} if cond == "trigram" else set())
            assert set(r["kl"]) == want
            assert all(len(v) == len(steps) and min(v) > -1e-4 for v in r["kl"].values())
            assert all(0 < loss < 2 for loss in r["loss"])
            # The segments are the nearest strategy at each checkpoint, recomputed here from the KL curves.
            nearest = [min(r["kl"], key=lambda s: r["kl"][s][i]) for i in range(len(steps))]
            collapsed = [s for i, s in enumerate(nearest) if i == 0 or nearest[i - 1] != s]
            assert r["stages"] == collapsed and r["segments"][0]["from"] == 0 and r["segments"][-1]["to"] == steps[-1]
            final = "trigram" if cond == "trigram" else "bigram"
            if r["transition_step"] is not None:
                assert all(s == final for s, step in zip(nearest, steps) if step >= r["transition_step"])
            heads = r["heads"]
            assert heads["previous_token"]["head"].startswith("L0H") and heads["induction"]["head"].startswith("L1H")
            assert all(0 <= x <= 1 for series in r["series"]["induction"].values() for x in series)
    tri = conds["trigram"]["seeds"][0]["heads"]
    assert tri["back1"]["head"] != tri["back2"]["head"]
    assert set(out["results"]["claims"]) >= {"phases_k3", "doubly_stochastic", "trigram"}


def test_sparse_parity_hidden_progress_smoke(tmp_path):
    out = run_smoke("sparse_parity_hidden_progress", tmp_path)
    res, size = out["results"], out["config"]["sizes"]
    for k, ns in size["scaling"].items():
        for n in ns:
            row = res["scaling"][k]["by_n"][str(n)]
            assert row["of"] == size["seeds"] and len(row["steps"]) == size["seeds"]
            assert all(t is None or 0 < t <= size["cap"] for t in row["steps"])
    assert res["scaling"]["2"]["by_n"]["6"]["n"] >= 1, "a 2-sparse parity of 6 bits is learned in 256 steps"
    for r in res["hidden_progress_mlp"]["runs"] + res["hidden_progress_transformer"]["runs"]:
        assert len(r["drift_inf"]) == len(r["steps"]) == len(r["loss"]) and r["steps"][0] == 0
        # step 0 against itself: nothing has moved yet
        assert r["drift_inf"][0] == 0 and r["drift_ratio"][0] == 1.0
        assert max(r["drift_inf"]) > 0
    noisy = res["noisy_labels"]["runs"]
    assert len(noisy) == size["noise_seeds"] and all(0 <= r["final_eval_acc"] <= 1 for r in noisy)

    # Run again: every run is on disk already, so nothing trains and the numbers are the same.
    again = load("sparse_parity_hidden_progress")
    assert again.main(["--smoke", "--out", str(tmp_path / "again"), "--runs", str(tmp_path / "runs")]) == 0
    out2 = json.loads((tmp_path / "again" / "sparse_parity_hidden_progress.json").read_text())
    assert out2["runs_trained"] == 0 and out2["runs_reused"] > 0
    assert out2["results"]["scaling"] == res["scaling"]


def test_a_run_directory_with_another_config_is_refused(tmp_path):
    harness = load("harness")
    args = harness.parse_args("x", "", ["--smoke", "--runs", str(tmp_path)])
    session = harness.Session("x", args)
    cfg = {"task": {"name": "sparse_parity", "n": 6, "k": 2}, "model": {"kind": "mlp", "width": 8},
           "train": {"steps": 10, "batch_size": 8, "eval_every": 5, "eval_batch_size": 16, "checkpoints": 2,
                     "optimizer": "sgd", "lr": 0.1}}
    run = session.train(cfg, tmp_path / "r")
    assert run.steps[-1] == 10
    longer = session.train({**cfg, "train": {**cfg["train"], "steps": 20}}, tmp_path / "r")  # continues it
    assert longer.steps[-1] == 20 and session.trained == 2
    with pytest.raises(ConfigError, match="train.lr cannot change when a run is continued"):
        session.train({**cfg, "train": {**cfg["train"], "lr": 0.2}}, tmp_path / "r")


def test_statistics_helpers():
    harness = load("harness")
    fit = harness.power_fit([10, 20, 40], [3 * 10**2.5, 3 * 20**2.5, 3 * 40**2.5])
    assert fit["exponent"] == pytest.approx(2.5) and fit["prefactor"] == pytest.approx(3) and fit["r2"] == pytest.approx(1)
    assert harness.spearman([1, 2, 3, 4], [10, 20, 15, 40]) == pytest.approx(0.8)
    assert harness.spread([3, None, 1, 2]) == {"median": 2, "min": 1, "max": 3, "n": 3, "of": 4}
    steps, scores = [0, 10, 20, 30, 40], [0.1, 0.2, 0.6, 0.5, 0.9]
    assert harness.rise_step(steps, scores, 0.5) == 20  # stays above 0.1 + 0.5 * (0.9 - 0.1) = 0.5 from step 20
    assert harness._finite({"a": [math.nan, 1 / 3]}) == {"a": [None, 0.33333]}


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
