"""Training: models learn the tasks, checkpoints are complete and safe, resume is bit-exact."""

from __future__ import annotations

import copy
import json
import sys
import time

import pytest
import torch

from mechsynth import load_run, models, optimizers, parse_config, tasks, train_run
from mechsynth.errors import ConfigError
from mechsynth.runs import io
from mechsynth.runs.rundir import ckpt_dir
from mechsynth.training.train import TrainConfig, Trainer, checkpoint_steps, lr_at, make_optimizer


def test_sparse_parity_learned_to_100_percent(tmp_path, tiny):
    cfg = parse_config(
        tiny(
            {"name": "sparse_parity", "n": 10, "k": 2},
            {"n_layers": 1, "n_heads": 2, "d_model": 64},
            {"steps": 300, "batch_size": 128, "lr": 1e-3, "eval_every": 50, "eval_batch_size": 1024},
        )
    )
    run = load_run(train_run(cfg, tmp_path / "run", progress=False))
    assert run.metrics[-1]["eval/acc"] == 1.0


@pytest.mark.slow
def test_parity_automaton_learned_by_one_layer(tmp_path, tiny):
    cfg = parse_config(
        tiny(
            {"name": "automata", "automaton": "parity", "length": 20},
            {"n_layers": 1, "n_heads": 4, "d_model": 128},
            {
                "steps": 1000,
                "batch_size": 64,
                "lr": 1e-3,
                "eval_every": 250,
                "eval_batch_size": 1024,
                "warmup_steps": 50,
                "schedule": "cosine",
            },
        )
    )
    run = load_run(train_run(cfg, tmp_path / "run", progress=False))
    # Chance is 0.5. The last fraction of a point depends on the CPU's float kernels (0.987 on one
    # machine, 0.998 on another, same seeds): the claim is "learned", not a number.
    assert run.metrics[-1]["eval/acc"] >= 0.98, run.metrics[-1]

    # Liu et al.'s shortcut, seen by the probe: prefix-averaging heads, a state that is linear after
    # the layer but not in the embedding, and chance accuracy beyond the training length.
    from mechsynth import probes

    shortcut = probes.run("automaton_shortcut", run.model(), run.task, batch_size=128).metrics
    assert shortcut["linear/state/L0"] >= 0.9 and shortcut["linear/state/embed"] < 0.65, shortcut
    assert max(v for k, v in shortcut.items() if k.startswith("entropy/")) >= 0.9
    assert shortcut["acc_beyond_train_length"] < 0.8


def test_mlp_baseline_learns_sparse_parity(tmp_path, tiny):
    cfg = parse_config(
        tiny(
            {"name": "sparse_parity", "n": 10, "k": 2},
            {"kind": "mlp", "width": 100},
            {
                "steps": 800,
                "batch_size": 32,
                "lr": 0.1,
                "optimizer": "sgd",
                "grad_clip": None,
                "eval_every": 100,
                "eval_batch_size": 1024,
            },
        )
    )
    run = load_run(train_run(cfg, tmp_path / "run", progress=False))
    assert run.metrics[-1]["eval/acc"] >= 0.95
    model = run.model()
    _, cache = model.run_with_cache(run.task.sample(4, torch.Generator().manual_seed(0)).tokens)
    assert cache["hook_post"].shape == (4, 100)


def test_resume_is_bit_exact(tmp_path, tiny, ctrl_c_at):
    cfg = parse_config(
        tiny(
            {"name": "markov_icl", "k": 3, "length": 16},
            {"n_layers": 2, "n_heads": 2, "d_model": 16, "attn_only": True},
            {"steps": 40, "checkpoints": 8, "warmup_steps": 5, "schedule": "cosine"},
        )
    )
    full = train_run(cfg, tmp_path / "full", progress=False)

    # Interrupt the second run part-way (as Ctrl-C would), then resume it.
    undo = ctrl_c_at(Trainer, 23)
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, tmp_path / "cut", progress=False)
    undo()
    assert load_run(tmp_path / "cut").steps[-1] == 23  # the interrupt checkpointed its step
    time.sleep(1.0)  # the run waits to be continued
    train_run(cfg, tmp_path / "cut", resume=True, progress=False)

    a, b = load_run(full), load_run(tmp_path / "cut")
    assert a.steps == sorted(set(b.steps) - {23})
    # Training time accumulates over the resume and leaves out the wait before it.
    spent = [b.meta(s)["train_s"] for s in b.steps]
    assert spent == sorted(spent) and spent[0] > 0
    assert spent[-1] - b.meta(23)["train_s"] < b.meta(40)["time"] - b.meta(23)["time"] - 0.9
    wa, wb = (
        io.read_tensors(ckpt_dir(full, 40) / "model.safetensors"),
        io.read_tensors(ckpt_dir(tmp_path / "cut", 40) / "model.safetensors"),
    )
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # Held-out metrics match record for record (the train-loss running mean restarts at the resume).
    held_out = lambda rs: [{k: v for k, v in r.items() if not k.startswith("train/")} for r in rs]  # noqa: E731
    assert held_out(a.metrics) == held_out(b.metrics)


def test_run_directory_and_load_run(tmp_path, tiny):
    cfg = parse_config(tiny({"name": "sparse_boolean", "length": 8, "s": 2}, {"n_heads": 2}))
    run = load_run(train_run(cfg, tmp_path / "run", progress=False))
    assert run.steps == checkpoint_steps(20, 6)
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    assert stored["task"]["name"] == "sparse_boolean" and stored["plugins"] == []  # all built in: nothing to import
    # torch with its build as torch itself reports it: PyPI's CUDA wheels say "+cu130" there, not in their metadata
    assert (
        stored["versions"]["torch"] == torch.__version__ and stored["versions"]["transformer_lens"] == models.TL_VERSION
    )
    meta = run.meta(20)
    assert meta["step"] == 20 and "eval/acc" in meta["metrics"]
    tokens = run.task.sample(8, torch.Generator().manual_seed(1)).tokens
    hooked, fused = run.model(4), run.trainable(4)
    logits, cache = hooked.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    assert torch.allclose(logits, fused(tokens), atol=1e-5)
    assert cache["blocks.0.attn.hook_pattern"].shape == (8, 2, 9, 9)
    with pytest.raises(ValueError, match="step"):
        run.model(5)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_checkpoint_error_names_the_file(tmp_path, tiny, damage):
    cfg = parse_config(tiny({"name": "sparse_parity", "n": 6, "k": 2}))
    run = load_run(train_run(cfg, tmp_path / "run", progress=False))

    def spoil(f):
        data = f.read_bytes()
        f.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"\x00garbage" * 10)
        return data

    f = ckpt_dir(run.path, 20) / "model.safetensors"
    good = spoil(f)
    with pytest.raises(io.CorruptFileError, match="step_00000020/model.safetensors"):
        run.model(20)
    f.write_bytes(good)
    spoil(ckpt_dir(run.path, 20) / "state.pt")
    with pytest.raises(io.CorruptFileError, match="state.pt"):
        train_run(cfg, run.path, resume=True, progress=False)


def test_interrupted_writes_leave_no_partial_checkpoint(tmp_path):
    target = tmp_path / "checkpoints" / "step_00000001"

    def fill(tmp):
        (tmp / "model.safetensors").write_bytes(b"partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        io.atomic_dir(target, fill)
    assert not target.exists() and list((tmp_path / "checkpoints").iterdir()) == []


def test_atomic_writes_get_the_permissions_of_plain_writes(tmp_path):
    """Temp files are created private (0600, 0700); the renamed result must look like any other file."""
    (tmp_path / "plain.json").write_text("{}")
    (tmp_path / "plain_dir").mkdir()
    io.write_json(tmp_path / "atomic.json", {})
    io.atomic_dir(tmp_path / "atomic_dir", lambda tmp: (tmp / "x").write_text(""))
    mode = lambda p: p.stat().st_mode & 0o777  # noqa: E731
    assert mode(tmp_path / "atomic.json") == mode(tmp_path / "plain.json")
    assert mode(tmp_path / "atomic_dir") == mode(tmp_path / "plain_dir")


def test_schedules():
    steps = checkpoint_steps(10_000, 100)
    assert steps[0] == 0 and steps[-1] == 10_000 and 80 <= len(steps) <= 101
    assert sum(s < 1000 for s in steps) > 30  # dense early
    cfg = TrainConfig(steps=100, lr=1.0, warmup_steps=10, schedule="cosine")
    assert lr_at(0, cfg) == pytest.approx(0.1) and lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(99, cfg) < 0.01
    linear = TrainConfig(steps=100, lr=1.0, warmup_steps=10, schedule="linear", min_lr_frac=0.2)
    assert [lr_at(s, linear) for s in (9, 10, 55)] == pytest.approx([1.0, 1.0, 0.6])  # halfway: halfway to the floor


@pytest.mark.smoke
def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path, tiny):
    """A real kill (SIGKILL, no chance to clean up) loses nothing that was checkpointed. The thread count is pinned:
    the CLI picks its own from the machine's load, and a sum split over other threads rounds differently."""
    import os
    import signal
    import subprocess
    import sys
    import time

    data = tiny(
        {"name": "automata", "automaton": "cyclic", "n": 3, "length": 12},
        {"n_layers": 1, "n_heads": 2, "d_model": 16},
        {"steps": 400, "checkpoints": 40, "eval_every": 50, "threads": 1},
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
    while time.time() < deadline and len(list((cut / "checkpoints").glob("step_*"))) < 12:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    steps = load_run(cut).steps
    assert 0 < steps[-1] < 400, "the kill should land mid-run"
    train_run(cfg, cut, resume=True, progress=False)
    wa, wb = (io.read_tensors(ckpt_dir(d, 400) / "model.safetensors") for d in (full, cut))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert load_run(cut).steps == load_run(full).steps


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_cpu_training_reuses_freed_memory_instead_of_faulting_it_in_again():
    """A 64 MiB activation allocated step after step stops being paged in afresh by the kernel (under
    glibc's default for blocks over 32 MiB: 16384 page faults of 4 KiB, every time)."""
    # In a fresh interpreter: the count is the whole process's, and a thread another test left running in this
    # worker (a progress bar, a W&B service) adds its own faults.
    code = """if True:
        import resource, torch
        from mechsynth.training.train import keep_freed_memory
        keep_freed_memory()
        for _ in range(2):  # the heap grows to hold it
            torch.empty(2**24).fill_(1.0)
        def faults():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            torch.empty(2**24).fill_(1.0)
            return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        print(min(faults() for _ in range(3)))
    """
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) < 2000


@pytest.mark.smoke
def test_progress_off_a_terminal_is_a_few_plain_lines(tmp_path):
    """A log file or CI gets about one line per 5% of training, not a carriage return per step."""
    import subprocess
    import sys

    cfg = tmp_path / "cfg.toml"
    cfg.write_text(
        '[task]\nname = "sparse_parity"\nn = 6\nk = 2\n[model]\nn_layers = 1\nd_model = 16\n'
        "[train]\nsteps = 200\nbatch_size = 8\neval_every = 5\neval_batch_size = 16\ncheckpoints = 10\n"
        'device = "cpu"\n[wandb]\nmode = "disabled"\n'
    )
    err = subprocess.run(
        [sys.executable, "-m", "mechsynth.cli", "train", str(cfg), "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    lines = [line for line in err.splitlines() if line.startswith("step ")]
    assert "\r" not in err and 15 <= len(lines) <= 21 and lines[-1].startswith("step 200/200  loss "), err


# ---- optimizers: a registry, each declaring whether it is elementwise -----------------------------------


def test_optimizers_are_built_from_the_train_config():
    assert {"adam", "adamw", "sgd"} <= set(optimizers.names())
    model = torch.nn.Linear(3, 2)
    for name in optimizers.names():
        opt = make_optimizer(model, TrainConfig(optimizer=name, lr=0.02, weight_decay=0.1, momentum=0.5))
        group = opt.param_groups[0]
        assert group["lr"] == 0.02 and group["weight_decay"] == 0.1 and len(group["params"]) == 2, name
    with pytest.raises(ConfigError) as e:
        TrainConfig(optimizer="lion")
    assert str(e.value) == f"optimizer: 'lion' is not allowed; allowed: {', '.join(optimizers.names())}"


@pytest.mark.parametrize(
    "name", [n for n in optimizers.names() if not optimizers.get(n).zeroth_order]
)  # mezo: test_mezo.py
def test_elementwise_is_what_the_optimizer_does(name):
    """What seeds side by side rely on, checked against the optimizer itself: declared elementwise, stepping
    two models stacked on a leading axis equals stepping each alone; declared not, stacking changes it."""
    g = torch.Generator().manual_seed(0)
    shapes = [(4, 3), (3,)]
    init = [torch.randn(2, *s, generator=g) for s in shapes]
    grads = [[torch.randn(2, *s, generator=g) for s in shapes] for _ in range(3)]
    cfg = TrainConfig(optimizer=name, lr=0.01, momentum=0.9, weight_decay=0.01)
    stacked = [p.clone().requires_grad_() for p in init]
    alone = [[p[i].clone().requires_grad_() for p in init] for i in range(2)]
    opts = [optimizers.build(name, stacked, cfg)] + [optimizers.build(name, ps, cfg) for ps in alone]
    for step in grads:
        for p, gr in zip(stacked, step):
            p.grad = gr.clone()
        for i, ps in enumerate(alone):
            for p, gr in zip(ps, step):
                p.grad = gr[i].clone()
        for opt in opts:
            opt.step()
    same = all(torch.allclose(stacked[k][i], alone[i][k], atol=1e-6, rtol=1e-5) for i in range(2) for k in range(2))
    assert same == optimizers.get(name).elementwise, f"{name} declares elementwise={optimizers.get(name).elementwise}"


@pytest.mark.parametrize("name", optimizers.names())
def test_every_optimizer_resumes_bit_exact(name):
    """A checkpoint's optimizer state continues the run exactly (state_dict round trip through the trainer)."""
    task = tasks.make("sparse_parity", {"n": 6, "k": 2})
    cfg = TrainConfig(optimizer=name, lr=0.01, momentum=0.9, batch_size=8, data_chunk=2, device="cpu")
    full = Trainer(models.build(models.TransformerConfig(n_layers=1, d_model=8), task.spec), task, cfg)
    for _ in range(5):
        full.train_step()
    weights, state = copy.deepcopy(full.module.state_dict()), copy.deepcopy(full.state())
    cut = Trainer(models.build(models.TransformerConfig(n_layers=1, d_model=8, init_seed=1), task.spec), task, cfg)
    cut.module.load_state_dict(weights)
    cut.load_state(state)
    for _ in range(5):
        full.train_step()
        cut.train_step()
    assert all(torch.equal(a, b) for a, b in zip(full.module.parameters(), cut.module.parameters()))


@pytest.mark.skipif("adafactor" not in optimizers.names(), reason="torch.optim.Adafactor needs torch >= 2.5")
def test_adafactor_trains_a_transformer(tmp_path, tiny):
    """The registered non-elementwise optimizer learns sparse parity as fast as AdamW (~60 steps here)."""
    cfg = parse_config(
        tiny(
            {"name": "sparse_parity", "n": 10, "k": 2},
            {"n_layers": 1, "n_heads": 2, "d_model": 64},
            {
                "steps": 150,
                "batch_size": 128,
                "lr": 1e-2,
                "optimizer": "adafactor",
                "eval_every": 50,
                "eval_batch_size": 1024,
            },
        )
    )
    run = load_run(train_run(cfg, tmp_path / "run", progress=False))
    assert run.metrics[0]["eval/acc"] < 0.6 and run.metrics[-1]["eval/acc"] == 1.0, run.metrics


def test_decay_matrices_leaves_embeddings_norms_and_biases_alone():
    """decay = "matrices" (minGPT's convention, which Edelman et al. train with): one AdamW step with zero
    gradients shrinks exactly the attention, MLP and unembedding matrices, by lr * weight_decay."""
    spec = tasks.make("markov_icl", {"k": 3, "length": 8}).spec
    for positional in ("standard", "relative"):
        model = models.build(models.parse({"n_layers": 1, "d_model": 8, "positional": positional}), spec)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        opt = make_optimizer(model, TrainConfig(lr=0.1, weight_decay=0.5, decay="matrices"))
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            decays = leaf in ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "W_U")
            torch.testing.assert_close(p.detach(), before[name] * (0.95 if decays else 1.0), msg=name)
