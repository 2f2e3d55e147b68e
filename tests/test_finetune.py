"""Fine-tuning (`train.init_from`): a run starts from another run's last checkpoint or from a named checkpoint,
bit for bit, alone or seeds side by side; what cannot be read or does not fit is one line before any work."""

from __future__ import annotations

import pytest
import torch

from mechsynth import load_run, parse_config, train_run
from mechsynth.cli import main
from mechsynth.errors import UserError
from mechsynth.runs import io
from mechsynth.runs.rundir import ckpt_dir

TASK = {"name": "markov_icl", "k": 3, "length": 12}
MODEL = {"n_layers": 1, "n_heads": 1, "d_model": 16, "attn_only": True}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    from conftest import tiny_config

    out = tmp_path_factory.mktemp("pre") / "run"
    return train_run(parse_config(tiny_config(TASK, MODEL, {"steps": 12, "checkpoints": 3})), out, progress=False)


def weights(run_dir, step):
    return io.read_tensors(ckpt_dir(run_dir, step) / "model.safetensors")


def test_a_run_starts_from_the_last_checkpoint_or_a_named_one(pretrained, tmp_path, tiny):
    last = load_run(pretrained).steps[-1]
    for source, step in ((pretrained, last), (ckpt_dir(pretrained, 0), 0)):
        cfg = tiny(
            TASK, MODEL, {"steps": 6, "checkpoints": 2, "seed": 5, "optimizer": "mezo", "init_from": str(source)}
        )
        out = train_run(parse_config(cfg), tmp_path / f"from_{step}", progress=False)
        start, want = weights(out, 0), weights(pretrained, step)
        assert set(start) == set(want) and all(torch.equal(start[k], want[k]) for k in want)
        assert load_run(out).config.train.init_from == str(source)


def test_seeds_side_by_side_all_start_from_it(pretrained, tmp_path, tiny):
    cfg = tiny(TASK, MODEL, {"steps": 4, "checkpoints": 2, "seeds": 2, "init_from": str(pretrained)})
    out = train_run(parse_config(cfg), tmp_path / "batch", progress=False)
    want = weights(pretrained, load_run(pretrained).steps[-1])
    for i in range(2):
        got = weights(out / f"seed_{i}", 0)
        assert all(torch.equal(got[k], want[k]) for k in want)


def test_what_cannot_start_a_run_is_one_line_and_leaves_nothing(pretrained, tmp_path, tiny, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (tmp_path / "missing", MODEL, "not a run or checkpoint directory"),
        (empty, MODEL, "has no checkpoint"),
        (pretrained, {**MODEL, "d_model": 32}, "do not fit this run's model"),
    ]
    for i, (source, model, says) in enumerate(cases):
        cfg = tiny(TASK, model, {"steps": 4, "init_from": str(source)})
        with pytest.raises(UserError, match=says):
            train_run(parse_config(cfg), tmp_path / f"bad{i}", progress=False)
        assert not (tmp_path / f"bad{i}").exists()
    toml = tmp_path / "bad.toml"
    toml.write_text(
        f'[task]\nname = "markov_icl"\nk = 3\nlength = 12\n[train]\nsteps = 4\ninit_from = "{tmp_path / "missing"}"\n'
    )
    assert main(["train", str(toml), "--out", str(tmp_path / "cli"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train.init_from" in err[0] and not (tmp_path / "cli").exists()


def test_a_fine_tuning_run_resumes_from_its_own_checkpoint(pretrained, tmp_path, tiny, ctrl_c_at):
    """Bit-exact, and without the run it started from: that may be gone by then."""
    import shutil

    from mechsynth.training.train import Trainer

    source = shutil.copytree(pretrained, tmp_path / "source")
    train = {"steps": 10, "checkpoints": 4, "seed": 5}
    full = train_run(
        parse_config(tiny(TASK, MODEL, {**train, "init_from": str(pretrained)})), tmp_path / "full", progress=False
    )
    cfg = parse_config(tiny(TASK, MODEL, {**train, "init_from": str(source)}))
    undo = ctrl_c_at(Trainer, 6)
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, tmp_path / "cut", progress=False)
    undo()
    shutil.rmtree(source)
    train_run(cfg, tmp_path / "cut", resume=True, progress=False)
    a, b = weights(full, 10), weights(tmp_path / "cut", 10)
    assert all(torch.equal(a[k], b[k]) for k in a)
