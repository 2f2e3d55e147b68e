"""Seeds side by side: a batched run of S seeds equals S separate runs, each seed is an ordinary run
directory, and a batched run resumes bit for bit."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from mechsynth import load_run, models, optimizers, parse_config, tasks, train_run
from mechsynth.cli import main
from mechsynth.errors import ConfigError
from mechsynth.runs import io
from mechsynth.runs.rundir import ckpt_dir, seed_dir
from mechsynth.training import seeds as seeds_module
from mechsynth.training import train as train_module
from mechsynth.training.seeds import SeedsTrainer, clip_per_model_, saved_activation_bytes, seed_view
from mechsynth.training.train import TrainConfig

CASES = {
    # MLP layers, AdamW with weight decay, a warmup and cosine schedule, clipping far below the gradient norm.
    "transformer": (
        {"name": "markov_icl", "k": 3, "length": 16},
        {"n_layers": 2, "n_heads": 2, "d_model": 16, "init_seed": 4},
        {"steps": 30, "grad_clip": 0.05, "weight_decay": 0.1, "warmup_steps": 5, "schedule": "cosine"},
    ),
    # Edelman et al.'s setup: relative positions, decay on the matrices only (two param groups).
    "relative": (
        {"name": "markov_icl", "k": 2, "length": 16},
        {"n_layers": 2, "d_model": 16, "attn_only": True, "positional": "relative", "init_range": 0.02, "init_seed": 4},
        {"steps": 30, "betas": [0.9, 0.95], "weight_decay": 0.1, "decay": "matrices"},
    ),
    # A fixed training set of 40 examples in epochs of 3 batches (the last short): the seeds share the set.
    "fixed": (
        {"name": "sparse_parity", "n": 8, "k": 2},
        {"n_layers": 1, "d_model": 16, "init_seed": 4},
        {"steps": 30, "data": "fixed", "n_train": 40, "set_seed": 3, "batch_size": 16},
    ),
    # Continuous inputs and the squared error: in-context linear regression over a pool of tasks, with clipping.
    "vectors": (
        {"name": "linear_regression", "d": 3, "k": 6, "n_tasks": 8, "noise": 0.1},
        {"n_layers": 2, "n_heads": 2, "d_model": 16, "init_seed": 4},
        {"steps": 30, "grad_clip": 0.05, "warmup_steps": 5, "schedule": "cosine"},
    ),
    # The MLP baseline with SGD + momentum on sparse parity (scored at the readout only).
    "mlp": (
        {"name": "sparse_parity", "n": 8, "k": 2},
        {"kind": "mlp", "width": 32, "init_seed": 4},
        {"steps": 30, "optimizer": "sgd", "momentum": 0.9, "lr": 0.05, "grad_clip": 0.5},
    ),
}


def alone(data: dict, i: int) -> dict:
    """The config of seed i as a separate run."""
    return {
        **data,
        "model": {**data["model"], "init_seed": data["model"].get("init_seed", 0) + i},
        "train": {**data["train"], "seed": data["train"].get("seed", 0) + i, "seeds": 1},
    }


def weights(run_dir, step) -> dict[str, torch.Tensor]:
    return io.read_tensors(ckpt_dir(run_dir, step) / "model.safetensors")


def assert_records_close(a: list[dict], b: list[dict]) -> None:
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        for k in ra:
            assert ra[k] == pytest.approx(rb[k], rel=1e-4, abs=1e-5), (ra["step"], k)


@pytest.mark.parametrize("passes", ["stacked", "per_seed"])
@pytest.mark.parametrize("kind", list(CASES))
def test_batched_seeds_equal_separate_runs(tmp_path, tiny, kind, passes):
    task, model, train = CASES[kind]
    # data_chunk 4: every seed crosses several chunks of its own data stream.
    data = tiny(task, model, {**train, "seeds": 3, "seed": 7, "data_chunk": 4, "eval_every": 5, "seed_passes": passes})
    batched = train_run(parse_config(data), tmp_path / "batched", progress=False)
    assert sorted(p.name for p in batched.iterdir()) == ["config.json", "seed_0", "seed_1", "seed_2"]
    for i in range(3):
        ref = load_run(train_run(parse_config(alone(data, i)), tmp_path / f"alone_{i}", progress=False))
        run = load_run(seed_dir(batched, i))
        # seeds = 1, data seed 7 + i, init seed 4 + i; only the W&B name and group tell it is part of a batch
        assert (run.config.model, run.config.train) == (ref.config.model, ref.config.train)
        assert (run.config.wandb.name, run.config.wandb.group) == (f"batched-seed_{i}", "batched")
        assert run.steps == ref.steps
        assert_records_close(run.metrics, ref.metrics)
        for step in (ref.steps[1], 30):
            ours, theirs = weights(run.path, step), weights(ref.path, step)
            assert ours.keys() == theirs.keys()
            for k in ours:
                # A key bias gets no gradient in exact arithmetic (softmax ignores a shift shared by all
                # keys), so Adam scales float noise up to ±lr steps; every other weight agrees to rounding.
                if not k.endswith("b_K"):
                    torch.testing.assert_close(
                        ours[k], theirs[k], atol=2e-6, rtol=1e-5, msg=f"seed {i} {k} step {step}"
                    )
    # The seeds are independent models, not copies of one.
    a, b = weights(seed_dir(batched, 0), 30), weights(seed_dir(batched, 1), 30)
    assert not any(torch.equal(a[k], b[k]) for k in a if k.startswith(("W_", "blocks.0.attn.W_")))
    assert load_run(seed_dir(batched, 0)).metrics[-1] != load_run(seed_dir(batched, 1)).metrics[-1]


def test_clip_per_model_is_clip_grad_norm_of_each_model():
    g = torch.Generator().manual_seed(0)
    shapes = [(4, 3, 5), (4, 7), (4,)]
    grads = [
        torch.randn(s, generator=g) * torch.tensor([0.01, 1.0, 10.0, 0.3]).view(-1, *(1,) * (len(s) - 1))
        for s in shapes
    ]
    stacked = [torch.zeros(s, requires_grad=True) for s in shapes]
    for p, gr in zip(stacked, grads):
        p.grad = gr.clone()
    norms = clip_per_model_(stacked, 0.5)
    for i in range(4):
        single = [torch.zeros(s[1:], requires_grad=True) for s in shapes]
        for p, gr in zip(single, grads):
            p.grad = gr[i].clone()
        norm = torch.nn.utils.clip_grad_norm_(single, 0.5)
        torch.testing.assert_close(norms[i], norm)
        for p, q in zip(stacked, single):
            torch.testing.assert_close(p.grad[i], q.grad)
    assert norms[0] < 0.5 < norms[1], "one model below the limit (untouched), others clipped"


def test_seed_view_shares_its_slice_of_the_stacked_weights():
    task = tasks.make("markov_icl", {"k": 3, "length": 8})
    stacked = models.build(models.TransformerConfig(n_layers=1, d_model=8, init_seed=5), task.spec, n_models=3)
    view = seed_view(stacked, 1)
    alone = models.build(models.TransformerConfig(n_layers=1, d_model=8, init_seed=6), task.spec)
    tokens = task.sample(4, torch.Generator().manual_seed(0)).tokens
    torch.testing.assert_close(view(tokens), alone(tokens), atol=0, rtol=0)
    with torch.no_grad():  # what the optimizer's in-place step does
        stacked.unembed.b_U.add_(1.0)
    torch.testing.assert_close(view(tokens), alone(tokens) + 1.0)
    assert all(p.data_ptr() == q[1].data_ptr() for p, q in zip(view.parameters(), stacked.parameters()))


def test_saved_activation_bytes_counts_what_backward_keeps():
    w = torch.randn(5, 7, requires_grad=True)
    # x @ w keeps x [3, 5] for w's gradient (not w: x needs none); relu keeps its output [3, 7]
    assert saved_activation_bytes(lambda x: torch.relu(x @ w), torch.randn(3, 5)) == (15 + 21) * 4
    assert (
        saved_activation_bytes(lambda x: torch.relu(x @ w), torch.randn(3, 5, requires_grad=True)) == (15 + 35 + 21) * 4
    )


@pytest.mark.parametrize(
    "task, model, batch, expected",
    [
        # the demo model: 8 MiB of activations per seed, past a core's cache: per-seed passes
        ({"name": "markov_icl", "k": 3, "length": 64}, {"n_layers": 2, "d_model": 32, "attn_only": True}, 64, False),
        # the parity MLP: 31 KiB per seed, overhead-bound: one stacked pass
        ({"name": "sparse_parity", "n": 50, "k": 3}, {"kind": "mlp", "width": 100}, 32, True),
    ],
)
def test_auto_seed_passes_on_cpu(task, model, batch, expected):
    t = tasks.make(task.pop("name"), task)
    m = models.build(models.parse(model), t.spec, n_models=2)
    trainer = SeedsTrainer(m, t, TrainConfig(seeds=2, batch_size=batch, device="cpu"), "cpu")
    assert trainer.stacked_passes is expected
    assert len(trainer.views) == (0 if expected else 2)


@pytest.mark.slow
def test_batched_resume_is_bit_exact(tmp_path, tiny, ctrl_c_at):
    data = tiny(
        {"name": "markov_icl", "k": 3, "length": 16},
        {"n_layers": 2, "n_heads": 2, "d_model": 16, "attn_only": True},
        {"steps": 40, "checkpoints": 8, "warmup_steps": 5, "schedule": "cosine", "seeds": 3, "data_chunk": 3},
    )
    cfg = parse_config(data)
    full = train_run(cfg, tmp_path / "full", progress=False)

    undo = ctrl_c_at(SeedsTrainer, 23)  # Ctrl-C part-way, mid data chunk
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, tmp_path / "cut", progress=False)
    undo()
    cut = tmp_path / "cut"
    assert all(load_run(seed_dir(cut, i)).steps[-1] == 23 for i in range(3)), "the interrupt checkpointed every seed"
    # A kill while the seeds' checkpoints were being written: seed 2 never got its step-23 checkpoint.
    shutil.rmtree(ckpt_dir(seed_dir(cut, 2), 23))
    train_run(cfg, cut, resume=True, progress=False)

    held_out = lambda rs: [{k: v for k, v in r.items() if not k.startswith("train/")} for r in rs]  # noqa: E731
    for i in range(3):
        a, b = load_run(seed_dir(full, i)), load_run(seed_dir(cut, i))
        assert a.steps == sorted(set(b.steps) - {23})
        wa, wb = weights(a.path, 40), weights(b.path, 40)
        assert all(torch.equal(wa[k], wb[k]) for k in wa), f"seed {i}"
        assert held_out(a.metrics) == held_out(b.metrics)


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [1, 3])
def test_ctrl_c_midway_through_a_step_finishes_it_first(tmp_path, tiny, monkeypatch, seeds):
    """A real SIGINT raised inside step 23's loss (on a worker thread, side by side): the step completes,
    the run stops with a checkpoint at 24, and resuming it ends exactly where an uncut run does."""
    data = tiny(
        {"name": "markov_icl", "k": 3, "length": 16},
        {"n_layers": 2, "n_heads": 2, "d_model": 16},
        {"steps": 40, "checkpoints": 8, "seeds": seeds, "data_chunk": 5, "seed_passes": "per_seed"},
    )
    cfg = parse_config(data)
    full = train_run(cfg, tmp_path / "full", progress=False)
    module = train_module if seeds == 1 else seeds_module
    original, calls = module.masked_loss, []

    def loss_then_ctrl_c(*args):
        calls.append(1)
        if len(calls) == 23 * seeds + seeds:  # in step 23 (calls count from 1)
            signal.raise_signal(signal.SIGINT)
        return original(*args)

    monkeypatch.setattr(module, "masked_loss", loss_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, tmp_path / "cut", progress=False)
    monkeypatch.setattr(module, "masked_loss", original)
    dirs = [tmp_path / "cut"] if seeds == 1 else [seed_dir(tmp_path / "cut", i) for i in range(seeds)]
    assert all(load_run(d).steps[-1] == 24 for d in dirs), "the step under way was finished and checkpointed"
    train_run(cfg, tmp_path / "cut", resume=True, progress=False)
    for d in dirs:
        ref = full / d.relative_to(tmp_path / "cut")
        wa, wb = weights(ref, 40), weights(d, 40)
        assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.smoke
def test_sigkill_then_resume_matches_uninterrupted_batched_run(tmp_path, tiny):
    data = tiny(
        {"name": "automata", "automaton": "cyclic", "n": 3, "length": 12},
        {"n_layers": 1, "n_heads": 2, "d_model": 16},
        {"steps": 150, "checkpoints": 24, "eval_every": 50, "seeds": 2},
    )
    cfg = parse_config(data)
    full = train_run(cfg, tmp_path / "full", progress=False)
    toml = tmp_path / "cfg.toml"
    toml.write_text(
        "\n".join(
            f"[{section}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in table.items() if v is not None)
            for section, table in cfg.to_dict().items()
        )
    )
    cut = tmp_path / "cut"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mechsynth.cli", "train", str(toml), "--out", str(cut), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline and len(list((cut / "seed_1" / "checkpoints").glob("step_*"))) < 8:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 0 < load_run(seed_dir(cut, 1)).steps[-1] < 150, "the kill should land mid-run"
    assert main(["train", "--resume", str(cut), "--no-progress"]) == 0
    for i in range(2):
        wa, wb = weights(seed_dir(full, i), 150), weights(seed_dir(cut, i), 150)
        assert all(torch.equal(wa[k], wb[k]) for k in wa)
        assert load_run(seed_dir(cut, i)).steps == load_run(seed_dir(full, i)).steps


@pytest.mark.slow
def test_seed_directories_are_ordinary_runs(tmp_path, tiny, capsys):
    data = tiny(
        {"name": "markov_icl", "k": 3, "length": 16},
        {"n_layers": 2, "attn_only": True},
        {"seeds": 2, "steps": 12, "checkpoints": 4},
    )
    run_dir = train_run(parse_config(data), tmp_path / "run", progress=False)
    parent = load_run(run_dir)
    assert [r.path for r in parent.seeds] == [run_dir / "seed_0", run_dir / "seed_1"]
    with pytest.raises(ConfigError, match="seed_0"):
        parent.steps
    # The batch's directory probes each seed (tests/test_sweep_probe.py checks what they hold).
    assert main(["probe", str(run_dir), "--workers", "1", "--probes", "previous_token"]) == 0
    assert all((d / "probes.json").exists() for d in (run_dir / "seed_0", run_dir / "seed_1"))
    capsys.readouterr()

    seed = load_run(run_dir / "seed_1")
    assert seed.seeds == [seed]
    tokens = seed.task.sample(4, torch.Generator().manual_seed(0)).tokens
    logits, cache = seed.model(12).run_with_cache(tokens)
    torch.testing.assert_close(logits, seed.trainable(12)(tokens), atol=1e-5, rtol=1e-5)
    assert cache["blocks.1.attn.hook_pattern"].shape == (4, 1, 16, 16)
    assert main(["probe", str(run_dir / "seed_1"), "--probes", "previous_token,induction", "--json"]) == 0
    timeline = json.loads(capsys.readouterr().out)
    assert timeline["steps"] == seed.steps and set(timeline["probes"]) == {"previous_token", "induction"}

    # One seed can be continued on its own; the batch then refuses to resume over its work.
    assert main(["train", "--resume", str(run_dir / "seed_1"), "--set", "train.steps=30", "--no-progress"]) == 0
    assert load_run(run_dir / "seed_1").steps[-1] == 30
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 2
    assert "continued on its own" in capsys.readouterr().err


@pytest.mark.parametrize(
    "value, message", [("0", "must be ≥ 1, got 0"), ("1.5", "expected an integer"), ('"many"', "expected an integer")]
)
def test_bad_seeds_value_is_one_line(tmp_path, capsys, value, message):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text('[task]\nname = "sparse_parity"\nn = 6\nk = 2\n[train]\nsteps = 4\n[wandb]\nmode = "disabled"\n')
    assert main(["train", str(cfg), "--out", str(tmp_path / "run"), "--set", f"train.seeds={value}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mechsynth: error: train.seeds: ") and message in err[0], err
    assert not (tmp_path / "run").exists()


def test_seeds_side_by_side_refuse_an_optimizer_that_is_not_elementwise(monkeypatch, tiny, tmp_path, capsys):
    """An optimizer whose update mixes elements (a norm over the whole tensor, factored moments) would mix
    the seeds stacked in one tensor: refused when the config is parsed, naming train.optimizer; one seed
    is fine. Shown with an optimizer registered here, as a new file in mechsynth/optimizers/ would."""

    class Normalized(optimizers.OptimizerKind):  # SGD on the gradient divided by the tensor's norm
        elementwise = False

        @classmethod
        def state_slots(cls, cfg) -> int:
            return 0

        @classmethod
        def build(cls, params, cfg):
            return torch.optim.SGD(params, lr=cfg.lr)

    monkeypatch.setitem(optimizers.OPTIMIZERS._items, "normalized", Normalized)
    monkeypatch.setattr(Normalized, "name", "normalized", raising=False)
    data = tiny({"name": "sparse_parity", "n": 6, "k": 2}, None, {"seeds": 2, "optimizer": "normalized"})
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert str(e.value) == (
        "train.optimizer: 'normalized' is not elementwise, so seeds side by side would couple the "
        f"seeds; allowed with train.seeds > 1: {', '.join(optimizers.elementwise())}"
    )
    assert "normalized" not in optimizers.elementwise() and {"adam", "adamw", "sgd"} <= set(optimizers.elementwise())
    assert parse_config(tiny(data["task"], None, {"optimizer": "normalized"})).train.optimizer == "normalized"

    toml = tmp_path / "cfg.toml"
    toml.write_text(
        "\n".join(f"[{s}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in t.items()) for s, t in data.items())
    )
    assert main(["train", str(toml), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("mechsynth: error: train.optimizer: 'normalized' is not elementwise")
    assert not (tmp_path / "run").exists()
