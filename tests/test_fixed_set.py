"""A fixed training set (train.data = "fixed") for any task: drawn once from the training split, trained on
in epochs (every example once per epoch, a fresh order each), evaluated whole as `train_set`, resumed
bit for bit mid-epoch; the config mistakes around it are one line naming the field."""

from __future__ import annotations

import collections

import pytest
import torch

from mechsynth import load_run, models, parse_config, tasks, train_run
from mechsynth.errors import ConfigError
from mechsynth.runs import io
from mechsynth.runs.rundir import ckpt_dir
from mechsynth.training.train import TrainConfig, Trainer


def rows(tokens: torch.Tensor) -> collections.Counter:
    return collections.Counter(tuple(r) for r in tokens.tolist())


def trainer(n_train: int, batch_size: int, set_seed: int = 0, seed: int = 0) -> Trainer:
    task = tasks.make("sparse_parity", {"n": 12, "k": 2})
    cfg = TrainConfig(data="fixed", n_train=n_train, set_seed=set_seed, seed=seed, batch_size=batch_size, device="cpu")
    return Trainer(models.build(models.TransformerConfig(n_layers=1, d_model=8), task.spec), task, cfg)


def test_every_example_once_per_epoch_in_a_fresh_order():
    t = trainer(n_train=50, batch_size=16)
    the_set = rows(t.data.set.tokens)
    assert sum(the_set.values()) == 50
    epochs = []
    for _ in range(3):  # 16 + 16 + 16 + 2: the last batch of an epoch is short
        batches = [t._next_batch() for _ in range(4)]
        assert [len(b.tokens) for b in batches] == [16, 16, 16, 2]
        tokens = torch.cat([b.tokens for b in batches])
        assert rows(tokens) == the_set
        epochs.append(tokens)
    assert not torch.equal(epochs[0], epochs[1]) and not torch.equal(epochs[1], epochs[2])


def test_full_batch_and_the_set_is_fixed_by_its_own_seed():
    full = trainer(n_train=50, batch_size=64)
    assert all(rows(full._next_batch().tokens) == rows(full.data.set.tokens) for _ in range(3))
    # train.seed changes the order, not the set; set_seed changes the set.
    assert torch.equal(trainer(50, 16, seed=1).data.set.tokens, full.data.set.tokens)
    assert not torch.equal(trainer(50, 16, set_seed=1).data.set.tokens, full.data.set.tokens)


def test_train_set_metrics_are_the_whole_set_and_resume_mid_epoch_is_bit_exact(tmp_path, tiny, ctrl_c_at):
    data = tiny(
        {"name": "sparse_parity", "n": 8, "k": 2},
        train={"steps": 30, "data": "fixed", "n_train": 40, "batch_size": 16, "checkpoints": 6},
    )
    cfg = parse_config(data)
    full = load_run(train_run(cfg, tmp_path / "full", progress=False))
    last = full.metrics[-1]
    assert {"train_set/loss", "train_set/acc", "eval/loss", "eval/acc"} <= last.keys()
    # train_set/acc is the accuracy on all 40 examples: a multiple of 1/40
    assert round(last["train_set/acc"] * 40, 4) == pytest.approx(round(last["train_set/acc"] * 40))

    undo = ctrl_c_at(Trainer, 7)  # step 7 is mid-epoch (epochs of 3 batches)
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, tmp_path / "cut", progress=False)
    undo()
    train_run(cfg, tmp_path / "cut", resume=True, progress=False)
    a, b = (
        io.read_tensors(ckpt_dir(full.path, 30) / "model.safetensors"),
        io.read_tensors(ckpt_dir(tmp_path / "cut", 30) / "model.safetensors"),
    )
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "train, field, message",
    [
        ({"n_train": 10}, "train.n_train", "train.data is 'online'"),
        ({"data": "fixed"}, "train.n_train", "missing: task sparse_parity samples"),
        ({"data": "fixed", "n_train": 0}, "train.n_train", ""),
        ({"data": "fixed!"}, "train.data", ""),
    ],
)
def test_fixed_set_mistakes_name_the_field(tiny, train, field, message):
    with pytest.raises(ConfigError, match=field) as e:
        parse_config(tiny({"name": "sparse_parity", "n": 8, "k": 2}, train=train))
    assert message in str(e.value)


def test_a_listed_task_trains_on_its_whole_split_and_is_evaluated_on_every_held_out_input(tiny):
    task = tasks.make("modular_arithmetic", {"p": 7, "train_frac": 0.5})
    cfg = TrainConfig(data="fixed", batch_size=4096, device="cpu")
    t = Trainer(models.build(models.TransformerConfig(n_layers=1, d_model=8), task.spec), task, cfg)
    assert rows(t.data.set.tokens) == rows(task.enumerate("train").tokens)  # all 24 training pairs, full batch
    assert rows(t._next_batch().tokens) == rows(task.enumerate("train").tokens)
    held_out = t.eval_batches()
    assert rows(held_out["eval"].tokens) == rows(task.enumerate("eval").tokens)
    assert rows(held_out["train_set"].tokens) == rows(task.enumerate("train").tokens)
    with pytest.raises(ConfigError, match="train.n_train: 100 is more than the 24 examples"):
        parse_config(
            tiny({"name": "modular_arithmetic", "p": 7, "train_frac": 0.5}, train={"data": "fixed", "n_train": 100})
        )
    # n_train of a listed split: that many distinct examples of it
    some = Trainer(
        models.build(models.TransformerConfig(n_layers=1, d_model=8), task.spec),
        task,
        TrainConfig(data="fixed", n_train=10, device="cpu"),
    ).data.set
    assert len(rows(some.tokens)) == 10 and set(rows(some.tokens)) <= set(rows(task.enumerate("train").tokens))
