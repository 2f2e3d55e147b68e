"""`train.params`: only the named parameters train, the others keep their initial (or init_from's) values bit for bit —
alone, resumed, seeds side by side, in a sweep — and layerwise training is two such runs chained with init_from; a
name that matches no parameter is one line naming train.params before any work."""

from __future__ import annotations

import pytest
import torch

from mechsynth import load_run, parse_config, train_run
from mechsynth.cli import main
from mechsynth.errors import ConfigError
from mechsynth.runs import io
from mechsynth.runs.rundir import ckpt_dir, seed_dir
from mechsynth.sweep.plan import plan_of_runs
from mechsynth.sweep.units import plan_units
from mechsynth.training.train import Trainer

TASK = {"name": "hierarchical_polynomial", "d": 5, "linear": 1.0}
MODEL = {"kind": "mlp", "width": 8, "depth": 2, "init_seed": 3}


def weights(run_dir, step) -> dict[str, torch.Tensor]:
    return io.read_tensors(ckpt_dir(run_dir, step) / "model.safetensors")


def config(tiny, params, **train):
    return tiny(
        TASK,
        MODEL,
        {
            "steps": 8,
            "checkpoints": 3,
            "eval_every": 4,
            "optimizer": "adamw",
            "lr": 1e-2,
            "weight_decay": 0.1,
            "params": params,
            **train,
        },
    )


@pytest.mark.parametrize(
    "params, trained",
    [
        (["W_hidden"], {"W_hidden"}),
        (["W_out", "b_out"], {"W_out", "b_out"}),
        (["W_in", "b_hidden"], {"W_in", "b_hidden"}),
    ],
)
def test_only_the_named_parameters_move(tmp_path, tiny, params, trained):
    """Weight decay and clipping too touch only those: the others stay bit-identical to step 0."""
    run = train_run(parse_config(config(tiny, params)), tmp_path / "run", progress=False)
    start, end = weights(run, 0), weights(run, 8)
    for name in start:
        if name in trained:
            assert not torch.equal(start[name], end[name]), f"{name} did not train"
        else:
            assert torch.equal(start[name], end[name]), f"{name} moved"


def test_a_prefix_takes_a_module_and_stops_at_a_dot(tmp_path, tiny):
    model = {"n_layers": 2, "n_heads": 1, "d_model": 8}
    cfg = tiny({"name": "sparse_parity", "n": 6, "k": 2}, model, {"steps": 3, "checkpoints": 2, "params": ["blocks.1"]})
    run = train_run(parse_config(cfg), tmp_path / "run", progress=False)
    start, end = weights(run, 0), weights(run, 3)
    moved = {k for k in start if not torch.equal(start[k], end[k])}
    assert moved and all(k.startswith("blocks.1.") for k in moved)
    assert all(torch.equal(start[k], end[k]) for k in start if k.startswith(("blocks.0.", "embed.", "unembed.")))


def test_resume_with_params_is_bit_exact(tmp_path, tiny, ctrl_c_at):
    cfg = parse_config(config(tiny, ["W_hidden", "b_hidden"], steps=10, checkpoints=4))
    full = train_run(cfg, tmp_path / "full", progress=False)
    undo = ctrl_c_at(Trainer, 8)  # at a record, so the running training loss spans the same steps in both
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, tmp_path / "cut", progress=False)
    undo()
    train_run(cfg, tmp_path / "cut", resume=True, progress=False)
    a, b = weights(full, 10), weights(tmp_path / "cut", 10)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert load_run(full).metrics == load_run(tmp_path / "cut").metrics
    # what trains is fixed for the run: a resume may not change it
    other = parse_config(config(tiny, ["W_out"], steps=12, checkpoints=4))
    with pytest.raises(ConfigError, match="train.params"):
        train_run(other, tmp_path / "cut", resume=True, progress=False)


@pytest.mark.parametrize("passes", ["stacked", "per_seed"])
def test_seeds_side_by_side_equal_separate_runs(tmp_path, tiny, passes):
    data = config(tiny, ["W_hidden", "b_out"], seeds=2, seed=4, seed_passes=passes, grad_clip=0.05)
    batched = train_run(parse_config(data), tmp_path / "batched", progress=False)
    for i in range(2):
        alone = {**data, "model": {**MODEL, "init_seed": 3 + i}, "train": {**data["train"], "seed": 4 + i, "seeds": 1}}
        ref = train_run(parse_config(alone), tmp_path / f"alone_{i}", progress=False)
        ours, theirs, start = weights(seed_dir(batched, i), 8), weights(ref, 8), weights(ref, 0)
        for k in ours:
            torch.testing.assert_close(ours[k], theirs[k], atol=2e-6, rtol=1e-5, msg=f"seed {i} {k}")
            if k not in ("W_hidden", "b_out"):
                assert torch.equal(ours[k], start[k]), f"seed {i}: {k} moved"


def test_layerwise_training_chains_two_runs(tmp_path, tiny):
    """Stage 1 trains the hidden layer; stage 2 starts from its last checkpoint and trains the last layer only. The
    random-features baseline is stage 2 from the initialization."""
    first = train_run(parse_config(config(tiny, ["W_hidden"])), tmp_path / "stage1", progress=False)
    second = train_run(
        parse_config(config(tiny, ["W_out", "b_out"], init_from=str(first))), tmp_path / "stage2", progress=False
    )
    init, learned, end = weights(first, 0), weights(first, 8), weights(second, 8)
    assert not torch.equal(init["W_hidden"], learned["W_hidden"])
    assert torch.equal(end["W_hidden"], learned["W_hidden"]) and torch.equal(end["W_in"], init["W_in"])
    assert not torch.equal(end["W_out"], learned["W_out"])
    baseline = train_run(parse_config(config(tiny, ["W_out", "b_out"])), tmp_path / "features", progress=False)
    assert torch.equal(weights(baseline, 8)["W_hidden"], init["W_hidden"])


def test_a_sweep_with_params_trains_its_seeds_side_by_side(tmp_path, tiny):
    data = config(tiny, ["W_hidden"])
    plan = plan_of_runs("p", [({"stage": 1}, seed, data) for seed in (0, 1, 2)], wandb_mode="disabled")
    [unit] = plan_units(plan, tmp_path)
    assert unit.side_by_side and unit.config["train"]["params"] == ["W_hidden"]


@pytest.mark.parametrize(
    "params, says",
    [
        (
            ["W_hiden"],
            "'W_hiden' names no parameter of this model .*allowed: W_in, b_in, W_out, b_out, W_hidden, b_hidden",
        ),
        (["W_hidden.0"], "'W_hidden.0' names no parameter"),
        ([], r"\[\] names nothing to train"),
    ],
)
def test_a_name_that_matches_nothing_is_one_line_before_any_work(tmp_path, tiny, capsys, params, says):
    with pytest.raises(ConfigError, match=f"^train.params: {says}"):
        parse_config(config(tiny, params))
    toml = tmp_path / "bad.toml"
    toml.write_text(
        '[task]\nname = "hierarchical_polynomial"\nd = 5\n[model]\nkind = "mlp"\ndepth = 2\nwidth = 8\n'
        f'[train]\nsteps = 2\ndevice = "cpu"\nparams = {params!r}\n'.replace("'", '"')
    )
    assert main(["train", str(toml), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mechsynth: error: train.params: ") and not (tmp_path / "run").exists()


def test_a_kind_that_keeps_weights_fixed_keeps_them(tiny):
    with pytest.raises(
        ConfigError, match="^train.params: .* selects only parameters this model kind keeps fixed; allowed: W_mem"
    ):
        parse_config(
            tiny({"name": "associative_memory", "inputs": 16}, {"kind": "linear_memory", "d": 8}, {"params": ["W_E"]})
        )
