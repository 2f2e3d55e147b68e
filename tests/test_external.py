"""Models, checkpoints and loops from outside mechsynth: `hooked_model` on either TransformerLens version,
conversion checked against the source's logits, `mechsynth import` of each format, `probe_models`, the
`Monitor` of a plain PyTorch loop, landscape probes on a model you hold, and the one-line refusals."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import mechsynth
from mechsynth import load_run, parse_config, probes, tasks, train_run
from mechsynth.analysis import timeline
from mechsynth.cli import main
from mechsynth.errors import ConfigError, UserError
from mechsynth.models import external, tl_compat
from mechsynth.tasks.base import masked_loss
from mechsynth.yours import importing
from tests.nanogpt_ref import GPT

TRACR = Path(__file__).parent.parent / "mechsynth" / "benchmark" / "tracr"  # the zoo's compiled programs
ARCHITECTURES = [
    dict(attn_only=True),
    dict(d_mlp=32, act_fn="gelu"),
    dict(positional_embedding_type="rotary", attn_only=True),
    dict(normalization_type=None, d_mlp=16),
    dict(normalization_type="LNPre", d_mlp=16, act_fn="gelu_new"),
]


def _task():
    return tasks.make("markov_icl", {"k": 3, "order": 2, "length": 16})


def _model(task, seed=0, **kw):
    torch.manual_seed(seed)
    kw.setdefault("act_fn", "relu")
    model = mechsynth.hooked_model(
        n_layers=2, d_model=16, n_heads=2, d_head=8, n_ctx=task.spec.n_ctx, d_vocab=task.spec.d_vocab, **kw
    )
    with torch.no_grad():  # off the init's symmetric values, so every weight (LN too) matters
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


@torch.no_grad()
def _logits(model, task, n=8):
    tokens = torch.randint(task.spec.d_vocab, (n, task.spec.n_ctx), generator=torch.Generator().manual_seed(1))
    return model(tokens).float()


@pytest.mark.reference("random_tokens")
def test_random_tokens_are_uniform_and_each_target_is_the_next_token():
    task = tasks.make("random_tokens", {"d_vocab": 4, "n_ctx": 50})
    b = task.sample(400, torch.Generator().manual_seed(0))
    assert b.tokens.shape == b.targets.shape == (400, 50) and b.mask.all()
    assert torch.equal(b.targets[:, :-1], b.tokens[:, 1:])
    counts = torch.bincount(b.tokens.flatten(), minlength=4).float() / b.tokens.numel()
    assert (counts - 0.25).abs().max() < 0.01


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()))
def test_a_transformerlens_model_converts_to_the_same_function(arch):
    task = _task()
    model = _model(task, **arch)
    kind, weights = external.convert(model, task)
    rebuilt = external.rebuild(kind, task.spec, weights)
    assert (_logits(model, task) - _logits(rebuilt, task)).abs().max() <= 1e-5
    # and back: the run's hooked model (HookedTransformer or TransformerBridge) of those weights
    hooked = tl_compat.hooked_transformer(kind, task.spec.d_vocab, task.spec.d_vocab_out, task.spec.n_ctx, weights)
    assert (_logits(model, task) - _logits(hooked, task)).abs().max() <= 1e-5


def test_a_model_that_does_not_fit_the_task_is_one_line_naming_both_sizes():
    task = _task()
    wide = mechsynth.hooked_model(n_layers=1, d_model=8, n_heads=1, d_head=8, n_ctx=16, d_vocab=20, act_fn="relu")
    short = mechsynth.hooked_model(n_layers=1, d_model=8, n_heads=1, d_head=8, n_ctx=4, d_vocab=3, act_fn="relu")
    with pytest.raises(probes.ProbeError, match=r"vocabulary has 20 tokens and task markov_icl's has 3"):
        probes.run("previous_token", wide, task)
    with pytest.raises(probes.ProbeError, match=r"context is 4 positions and task markov_icl's sequences are 16"):
        probes.run("induction", short, task)
    with pytest.raises(ConfigError, match="d_vocab") as e:
        external.convert(wide, task)
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_a_landscape_probe_runs_on_the_hooked_model_of_a_run(tmp_path, tiny):
    """`probes.run("llc", run.model(step), task)` with two chains: TL 4's bridge kept graph-attached tensors that
    devinterp's per-chain deepcopy refused; it now differentiates the plain model, as `mechsynth probe` does."""
    run = load_run(
        train_run(
            parse_config(tiny({"name": "markov_icl", "k": 3, "order": 2, "length": 16}, train={"steps": 10})),
            tmp_path / "run",
            progress=False,
        )
    )
    option = {"chains": 2, "draws": 10, "checkpoints": 1}
    on_hooked = probes.run("llc", run.model(), run.task, option=option).metrics
    on_plain = probes.run("llc", run.trainable(), run.task, option=option).metrics
    assert math.isfinite(on_hooked["llc"]) and on_hooked["llc"] == pytest.approx(on_plain["llc"], rel=1e-4)
    held = _model(run.task, **{"attn_only": True})  # a TL model built by the helper
    assert math.isfinite(probes.run("sharpness", held, run.task).metrics["lambda_max"])


def _save_checkpoints(model, task, folder: Path, steps=(0, 10, 100)) -> list[torch.Tensor]:
    folder.mkdir()
    logits = []
    for step in steps:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        save_file(external.weights_of(model), folder / f"step_{step}.safetensors")
        torch.save(model.state_dict(), folder / f"native_{step}.pt")  # the TL version's own layout
        logits.append(_logits(model, task))
    return logits


def test_import_state_dicts_in_either_layout_gives_the_sources_logits(tmp_path):
    task = _task()
    logits = _save_checkpoints(_model(task, d_mlp=32, act_fn="gelu"), task, tmp_path / "ckpts")
    hooked_layout = importing.import_checkpoints(
        sorted((tmp_path / "ckpts").glob("step_*")), tmp_path / "a", task, {"act_fn": "gelu"}
    )
    native = importing.import_checkpoints(
        sorted((tmp_path / "ckpts").glob("native_*")), tmp_path / "b", task, {"act_fn": "gelu", "n_heads": 2}
    )
    for run_dir in (hooked_layout, native):
        run = load_run(run_dir)
        assert run.steps == [0, 10, 100] and run.metrics[0]["eval/loss"] > 0
        for step, expected in zip(run.steps, logits):
            assert (_logits(run.trainable(step), task) - expected).abs().max() <= 1e-5
            assert (_logits(run.model(step), task) - expected).abs().max() <= 1e-5


def test_import_a_nanogpt_checkpoint(tmp_path):
    task = _task()
    for bias in (True, False):
        torch.manual_seed(0)
        gpt = GPT(n_layer=2, n_head=2, n_embd=16, block_size=task.spec.n_ctx, vocab_size=3, bias=bias)
        torch.save(gpt.checkpoint(iter_num=250), tmp_path / f"ckpt_{bias}.pt")
        run = load_run(importing.import_checkpoints(tmp_path / f"ckpt_{bias}.pt", tmp_path / f"run_{bias}", task))
        assert run.steps == [250]  # nanoGPT's iter_num, not the number in the file name
        assert (_logits(run.trainable(), task) - _logits(gpt, task)).abs().max() <= 1e-5


def test_import_a_tracr_program_and_probe_it(tmp_path):
    info = json.loads((TRACR / "detect_pattern.json").read_text())
    run = load_run(importing.import_checkpoints(TRACR / "detect_pattern.json", tmp_path / "run"))
    assert run.task.name == "random_tokens" and run.task.spec.d_vocab == info["V"]
    from mechsynth.models import TransformerConfig
    from mechsynth.runs.io import tensors_from_bytes

    path = TRACR / "detect_pattern.safetensors"
    compiled = tl_compat.hooked_transformer(
        TransformerConfig(**info["config"], n_ctx=info["N"]),
        info["V"],
        info["V_out"],
        info["N"],
        tensors_from_bytes(path.read_bytes(), path),
    )
    clean = torch.tensor(info["clean"])
    assert (run.trainable()(clean) - compiled(clean)).abs().max() <= 1e-5
    # L1H0 moves is_a one position on: an exact previous-token head, which the probe must find
    assert main(["probe", str(run.path), "--probes", "previous_token"]) == 0
    tl = timeline.load(run.path)
    assert max(tl.per_head["previous_token"], key=lambda h: tl.per_head["previous_token"][h][-1]) == "L1H0"


@pytest.mark.slow
def test_probe_models_gives_the_timeline_of_models_you_hold(tmp_path):
    task = _task()
    held = [(step, _model(task, seed=step, attn_only=True)) for step in (0, 5, 50)]
    tl = mechsynth.probe_models(held, task, tmp_path / "run", probes=["previous_token", "induction"])
    assert tl.steps == [0, 5, 50] and set(tl.per_head) == {"previous_token", "induction"}
    for i, (_, model) in enumerate(held):  # each checkpoint's score is the probe's score on that model
        direct = probes.run("previous_token", model, task).per_head
        assert tl.per_head["previous_token"]["L0H1"][i] == pytest.approx(float(direct[0, 1]), abs=1e-5)
    assert timeline.load(tmp_path / "run").per_head == tl.per_head and tl.run_dir == tmp_path / "run"
    assert mechsynth.probe_models(held[:1], task, probes=["induction"]).run_dir.is_dir()  # a temporary run of its own
    assert main(["report", str(tmp_path / "run")]) == 0 and (tmp_path / "run" / "report.html").stat().st_size > 10_000


@pytest.mark.parametrize(
    "args, field",
    [
        (["--task", "markov_icl"], "model.act_fn"),  # MLP weights without their activation: asked, never guessed
        (["--task", "no_such_task"], "task"),
        (["--set", "task.k=3"], "--set task"),
        (["--set", "train.lr=1"], "--set train"),
    ],
)
def test_import_mistakes_are_one_line(tmp_path, capsys, args, field):
    task = _task()
    _save_checkpoints(_model(task, d_mlp=32), task, tmp_path / "ckpts", steps=(0,))
    (tmp_path / "ckpts" / "native_0.pt").unlink()
    assert main(["import", str(tmp_path / "ckpts"), "--out", str(tmp_path / "run"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err and not (tmp_path / "run").exists()


def test_import_refuses_damaged_files_and_a_used_directory(tmp_path, capsys):
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    assert main(["import", str(tmp_path / "bad.pt"), "--out", str(tmp_path / "run")]) == 2
    assert "bad.pt" in capsys.readouterr().err
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "mine.txt").write_text("keep")
    shutil.copy(TRACR / "frac_prevs.json", tmp_path / "p.json")
    shutil.copy(TRACR / "frac_prevs.safetensors", tmp_path / "p.safetensors")
    assert main(["import", str(tmp_path / "p.json"), "--out", str(tmp_path / "used")]) == 2
    assert "not empty" in capsys.readouterr().err and (tmp_path / "used" / "mine.txt").read_text() == "keep"
    assert main(["import", str(tmp_path / "missing.pt"), "--out", str(tmp_path / "run")]) == 2
    assert "missing.pt" in capsys.readouterr().err
    assert main(["import", "tracr:nope", "--out", str(tmp_path / "run")]) == 2
    assert "no tracr program 'nope' in the zoo; allowed: tracr:count_so_far" in capsys.readouterr().err
    for out in (tmp_path / "p.json" / "sub", Path("/proc/mechsynth-run")):  # a file as parent; nowhere to write
        assert main(["import", str(tmp_path / "p.json"), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and str(out) in err


def _one_head(task, folder: Path):
    """A 1-head TransformerLens model saved three ways: its own layout (TL 4: a TransformerBridge's, whose fused q
    rows fit any head count), HookedTransformer's (whose W_Q says the count) and save_checkpoint's."""
    model = _model(task, attn_only=True)  # 2 heads of 8: n_heads=4 would fit a bridge's fused rows as well
    folder.mkdir()
    for step in (0, 10):
        torch.save(model.state_dict(), folder / f"native_{step}.pt")
        save_file(external.weights_of(model), folder / f"step_{step}.safetensors")
    return model


def _import(capsys, *args):
    rc = main(["import", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out.strip(), out.err.strip()


def test_a_wrong_head_count_is_refused_where_the_weights_say_it_and_flagged_where_they_cannot(tmp_path, capsys):
    task = _task()
    model = _one_head(task, tmp_path / "c")
    length = ["--task", "markov_icl", "--set", "task.k=3", "--set", "task.order=2", "--set", "task.length=16"]
    # HookedTransformer layout: W_Q is [n_heads, d_model, d_head], so a wrong count contradicts it: refused
    rc, _, err = _import(
        capsys, tmp_path / "c" / "step_0.safetensors", *length, "--set", "model.n_heads=4", "--out", tmp_path / "a"
    )
    assert rc == 2 and err.count("\n") == 0 and not (tmp_path / "a").exists()
    assert "model.n_heads: 4 (from --set), but blocks.0.attn.W_Q is 2×16×8" in err and "--set model.n_heads=2" in err
    # the bridge's layout with the model's TransformerLens config: d_head known, so a wrong count is refused too
    tl = tmp_path / "tl.json"
    tl.write_text(
        json.dumps({k: v for k, v in model.cfg.to_dict().items() if isinstance(v, (int, str, bool, type(None)))})
    )
    rc, _, err = _import(
        capsys,
        tmp_path / "c" / "native_0.pt",
        *length,
        "--tl-config",
        tl,
        "--set",
        "model.n_heads=4",
        "--out",
        tmp_path / "b",
    )
    assert rc == 2 and err.count("\n") == 0 and "model.n_heads: 4 (from --set)" in err and "says 2" in err
    # (imports that succeed use random tokens: markov_icl's held-out Bayes predictors cost seconds per import)
    rc, out, _ = _import(capsys, tmp_path / "c" / "native_0.pt", "--tl-config", tl, "--out", tmp_path / "b")
    assert rc == 0 and "from the TransformerLens config: n_layers 2, n_heads 2" in out
    assert (_logits(load_run(tmp_path / "b").trainable(), task) - _logits(model, task)).abs().max() <= 1e-5
    rc, out, err = _import(capsys, tmp_path / "c" / "native_0.pt", "--set", "model.n_heads=4", "--out", tmp_path / "g")
    if tl_compat.TL_MAJOR < 4:  # TL 3's own layout is HookedTransformer's: its W_Q says the count
        assert rc == 2 and "but blocks.0.attn.W_Q is 2×16×8" in err and not (tmp_path / "g").exists()
        return
    # the bridge's layout alone cannot say the count: the one given is loaded, and flagged on the summary line and in the run
    first = out.splitlines()[0]
    assert rc == 0 and "4 heads" in first and "GUESSED: n_heads" in first and "1, 2, 4, 8" in out
    origin = json.loads((tmp_path / "g" / "config.json").read_text())["origin"]
    assert "cannot confirm" in origin["guessed"]["n_heads"] and origin["architecture"]["n_heads"] == "--set"


@pytest.mark.parametrize(
    "sets, field, says",
    [
        (
            ["--set", "task.k=5"],
            "task",
            "vocabulary is 3 tokens (embed.W_E is 3×16) and task markov_icl's is 5 (d_vocab); give --set task.k=3",
        ),
        (
            ["--set", "task.length=100"],
            "task.length",
            "the checkpoint has 16 positions (pos_embed.W_pos is 16×16) and task "
            "markov_icl's sequences are 100 tokens; give the length it was trained "
            "at: --set task.length=16",
        ),
        (["--set", "model.d_model=32"], "model.d_model", "32 (from --set), but blocks.0.attn.W_Q is 2×16×8"),
        (
            ["--set", "model.normalization=LNPre"],
            "model.normalization",
            "LNPre (from --set), but the checkpoint has layer-norm weights",
        ),
    ],
)
def test_each_import_mismatch_is_one_line_naming_both_sizes_and_the_fix(tmp_path, capsys, sets, field, says):
    task = _task()
    _one_head(task, tmp_path / "c")
    base = ["--task", "markov_icl", "--set", "task.k=3", "--set", "task.order=2", "--set", "task.length=16"]
    rc, _, err = _import(capsys, tmp_path / "c" / "step_0.safetensors", *base, *sets, "--out", tmp_path / "run")
    assert rc == 2 and err.count("\n") == 0 and not (tmp_path / "run").exists()
    assert err.startswith(f"mechsynth: error: {field}: ") and says in err, err
    assert "FusedTransformer" not in err


def test_save_checkpoint_round_trips_with_nothing_to_tell(tmp_path, capsys):
    task = tasks.make("random_tokens", {"d_vocab": 3, "n_ctx": 16})  # stored with the weights (cheap to evaluate)
    tl_model = _model(task, d_mlp=16, act_fn="gelu")
    kind, weights = external.convert(tl_model, task)
    ours = external.rebuild(kind, task.spec, weights)  # a model mechsynth built
    for name, model in (("tl", tl_model), ("ours", ours)):
        for step, suffix in ((0, ".pt"), (20, ".safetensors")):
            assert mechsynth.save_checkpoint(model, tmp_path / name / f"ckpt{suffix}", step=step, task=task).is_file()
        rc, out, err = _import(capsys, tmp_path / name, "--out", tmp_path / f"run_{name}")  # no --task, no --set
        assert rc == 0, err
        run = load_run(tmp_path / f"run_{name}")
        assert run.steps == [0, 20] and run.config.task_name == "random_tokens" and run.task.spec == task.spec
        assert (_logits(run.trainable(), task) - _logits(model, task)).abs().max() <= 1e-5
        assert "(steps 0, 20; mechsynth.save_checkpoint) as a 2-layer transformer, 2 heads, d_model 16" in out
        assert "from the checkpoint's stored architecture: n_layers 2" in out and "act_fn gelu" in out
    # a --set the stored architecture contradicts is refused, naming both
    rc, _, err = _import(capsys, tmp_path / "tl", "--set", "model.n_heads=4", "--out", tmp_path / "bad")
    assert rc == 2 and err.count("\n") == 0 and "4 (from --set), but ckpt.pt stores its architecture (n_heads 2)" in err
    # weights that no longer compute what was saved are refused by the stored check logits
    saved = torch.load(tmp_path / "tl" / "ckpt.pt", weights_only=True)
    saved["state_dict"]["blocks.0.attn.W_V"] += 1.0
    (tmp_path / "edited").mkdir()
    torch.save(saved, tmp_path / "edited" / "ckpt_0.pt")
    rc, _, err = _import(capsys, tmp_path / "edited", "--out", tmp_path / "bad")
    assert rc == 2 and "computes differently from the model saved" in err and not (tmp_path / "bad").exists()


def test_an_import_records_what_it_does_not_know_and_prints_what_it_inferred(tmp_path, capsys):
    task = _task()
    _save_checkpoints(_model(task, d_mlp=32, act_fn="gelu"), task, tmp_path / "ckpts")
    rc, out, _ = _import(
        capsys,
        *sorted((tmp_path / "ckpts").glob("step_*")),
        "--task",
        "random_tokens",
        "--set",
        "task.d_vocab=3",
        "--set",
        "task.n_ctx=16",
        "--set",
        "model.act_fn=gelu",
        "--out",
        tmp_path / "run",
    )
    lines = out.splitlines()
    assert rc == 0 and lines[-1] == str(tmp_path / "run")
    assert lines[0] == (
        "imported 3 checkpoints (steps 0, 10, 100; HookedTransformer state dict) as a 2-layer "
        "transformer, 2 heads, d_model 16"
    )
    assert (
        "  from the weights' shapes: n_layers 2, n_heads 2, d_model 16, d_head 8, attn_only False, d_mlp 32" in lines[1]
    )
    assert "  from --set: act_fn gelu" in lines and any(
        line.startswith("  task: random_tokens (d_vocab=3, n_ctx=16") for line in lines
    )
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    for key in ("train.batch_size", "train.lr", "train.optimizer", "train.seed", "model.init_seed"):
        assert key in stored["origin"]["not_recorded"] and key in load_run(tmp_path / "run").not_recorded
        section, name = key.split(".")
        assert name not in stored[section]  # never written as the run's own
    assert "train.lr" in out and "not recorded" in out


# ---- the monitor ----------------------------------------------------------------------------------


def _plain_loop(model, task, run_dir, steps, seed=0, lr=3e-3, **monitor):
    """A training loop as a researcher writes it, with the monitor's one call per update."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    with mechsynth.Monitor(model, run_dir, task, steps=steps, seed=seed, **monitor) as mon:
        for step in range(1, steps + 1):
            batch = task.sample(64, g)
            loss = masked_loss(model(batch.tokens), batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            mon.step(step, loss)
    return mon


@pytest.mark.slow
def test_a_plain_pytorch_loop_forms_its_circuits_at_the_steps_mechsynth_train_finds(tmp_path):
    """The same model, init, data stream and optimizer as `mechsynth train` (data_chunk 1, no clipping): the
    monitored run's formation steps equal those of `mechsynth train` + `mechsynth probe` on the same seed."""
    config = {
        "task": {"name": "markov_icl", "k": 3, "order": 2, "length": 32},
        "model": {"n_layers": 2, "n_heads": 1, "d_model": 16, "attn_only": True},
        "train": {
            "steps": 400,
            "batch_size": 64,
            "lr": 3e-3,
            "eval_every": 50,
            "checkpoints": 24,
            "data_chunk": 1,
            "grad_clip": 0,
            "device": "cpu",
        },
        "wandb": {"mode": "disabled"},
    }
    cfg = parse_config(config)
    ours = load_run(train_run(cfg, tmp_path / "train", progress=False))
    assert main(["probe", str(ours.path)]) == 0
    task = cfg.build_task()
    init = ours.weights(0)  # the same initial weights, in the TL model the loop trains
    model = mechsynth.hooked_model(
        n_layers=2, d_model=16, n_heads=1, d_head=16, n_ctx=task.spec.n_ctx, d_vocab=3, act_fn="relu", attn_only=True
    )
    tl_compat.load_weights(model, cfg.model, init)
    mon = _plain_loop(model, task, tmp_path / "loop", 400, checkpoints=24)
    expected = timeline.load(ours.path)
    assert load_run(tmp_path / "loop").steps == ours.steps
    assert mon.timeline.formed(), "the run is long enough for circuits to form"
    assert mon.timeline.formation == expected.formation
    assert main(["report", str(tmp_path / "loop")]) == 0


@pytest.mark.slow
def test_the_monitor_writes_a_normal_run_and_logs_to_your_wandb_run(tmp_path):
    import wandb

    from tests.test_wandb import inspect

    task = _task()
    user_run = wandb.init(mode="offline", project="mine", dir=str(tmp_path), reinit="create_new")
    mon = _plain_loop(
        _model(task, attn_only=True),
        task,
        tmp_path / "run",
        40,
        wandb=user_run,
        checkpoints=8,
        probes=["previous_token"],
    )
    user_run.log({"mine/after": 1.0})  # still open: the monitor never finishes the user's run
    user_run.finish()
    run = load_run(tmp_path / "run")
    assert run.steps[0] == 0 and run.steps[-1] == 40 and run.metrics[-1]["train/loss"] > 0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["origin"]["by"] == "mechsynth.Monitor"
    summary = inspect(next((tmp_path / "wandb").glob("offline-run-*/run-*.wandb")))["summary"]
    assert "mechsynth/eval/loss" in summary and "mine/after" in summary
    assert "stages/previous_token" in summary and "probe/previous_token/L0H0" in summary
    assert mon.timeline.steps == run.steps


def test_the_monitor_without_a_task_or_a_total_checkpoints_log_spaced(tmp_path):
    model = mechsynth.hooked_model(
        n_layers=1, d_model=8, n_heads=1, d_head=8, n_ctx=12, d_vocab=5, act_fn="relu", attn_only=True
    )
    with mechsynth.Monitor(model, tmp_path / "run", probes=[]) as mon:
        for step in range(1, 31):
            mon.step(step, loss=1.0, mine=float(step))
    run = load_run(tmp_path / "run")
    assert run.task.name == "random_tokens" and run.task.spec.d_vocab == 5
    assert run.steps == sorted({round(10 ** (i / 20)) for i in range(30) if 10 ** (i / 20) < 29.5} | {0, 30})
    assert run.metrics[-1]["mine"] == 30.0


def test_the_monitor_takes_a_model_mechsynth_built(tmp_path):
    from mechsynth import models

    task = _task()
    model = models.build(models.parse({"n_layers": 1, "n_heads": 1, "d_model": 8}), task.spec)
    with mechsynth.Monitor(model, tmp_path / "with", task, steps=5, probes=["previous_token"]) as mon:
        for step in range(1, 6):
            mon.step(step, loss=1.0)
    assert load_run(tmp_path / "with").steps[-1] == 5 and mon.timeline.steps[0] == 0
    with mechsynth.Monitor(model, tmp_path / "without", probes=[]) as mon:  # random tokens of its sizes
        mon.step(1)
    assert load_run(tmp_path / "without").task.spec == tasks.make("random_tokens", {"d_vocab": 3, "n_ctx": 16}).spec
    other = tasks.make("markov_icl", {"k": 5, "order": 2, "length": 16})
    with pytest.raises(probes.ProbeError, match=r"vocabulary has 3 tokens and task markov_icl's has 5"):
        probes.run("previous_token", model, other)


def test_monitor_mistakes_are_one_line_before_anything_is_written(tmp_path):
    task = _task()
    (tmp_path / "file").write_text("mine")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("mine")
    wide = mechsynth.hooked_model(n_layers=1, d_model=8, n_heads=1, d_head=8, n_ctx=16, d_vocab=20, act_fn="relu")
    for model, run_dir, why in [
        (wide, tmp_path / "a", "vocabulary has 20 tokens"),
        (_model(task), tmp_path / "file" / "sub", "file"),
        (_model(task), tmp_path / "used", "not empty"),
        (torch.nn.Linear(3, 3), tmp_path / "b", "neither a TransformerLens transformer"),
    ]:
        with pytest.raises(UserError, match=why) as e:
            mechsynth.Monitor(model, run_dir, task)
        assert "\n" not in str(e.value)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert (tmp_path / "used" / "x").read_text() == "mine" and (tmp_path / "file").read_text() == "mine"
    mon = mechsynth.Monitor(_model(task), tmp_path / "c", task, steps=10, probes=[])
    with pytest.raises(ConfigError, match="does not follow"):
        mon.step(0)
    mon.finish()
