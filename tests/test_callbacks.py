"""The Monitor as a callback of the HuggingFace Trainer and of Lightning: a short real run of each writes a
normal run directory whose steps, losses and last weights are the Trainer's own."""

from __future__ import annotations

import builtins
import json
import re

import pytest
import torch

import mechsynth
from mechsynth import load_run, tasks
from mechsynth.cli import main
from mechsynth.errors import ConfigError
from mechsynth.models import external
from mechsynth.runs import rundir
from mechsynth.tasks.base import Batch, masked_loss
from mechsynth.yours import callbacks

STEPS = 40


def _task():
    return tasks.make("markov_icl", {"k": 3, "order": 2, "length": 16})


def _model(task):
    torch.manual_seed(0)
    return mechsynth.hooked_model(
        n_layers=2,
        d_model=16,
        n_heads=1,
        d_head=16,
        n_ctx=task.spec.n_ctx,
        d_vocab=task.spec.d_vocab,
        act_fn="relu",
        attn_only=True,
    )


class Samples(torch.utils.data.Dataset):
    """Task sequences as the dicts both Trainers collate: the wrappers' forward takes these names."""

    def __init__(self, task, n):
        b = task.sample(n, torch.Generator().manual_seed(1))
        self.tokens, self.targets, self.mask = b.tokens, b.targets, b.mask

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, i):
        return {"tokens": self.tokens[i], "targets": self.targets[i], "mask": self.mask[i]}


def _loss(model, tokens, targets, mask):
    return masked_loss(model(tokens), Batch(tokens, targets, mask))


def _records_with_loss(run):
    """{step: train/loss} of each record, and the record steps in order."""
    return {m["step"]: m.get("train/loss") for m in run.metrics}, [m["step"] for m in run.metrics]


def _expected_means(record_steps, losses):
    """The Monitor's train/loss at each record: the mean of the losses given since the previous record."""
    out, prev = {}, 0
    for s in record_steps:
        given = [loss for step, loss in losses.items() if prev < step <= s]
        out[s] = sum(given) / len(given) if given else None
        prev = s
    return out


def _check_run(run_dir, model, initial, losses):
    run = load_run(run_dir)
    assert run.steps[0] == 0 and run.steps[-1] == STEPS and len(run.steps) > 5
    got, record_steps = _records_with_loss(run)
    expected = _expected_means(record_steps, losses)
    assert sum(v is not None for v in expected.values()) >= 5, "losses were given at several records"
    for s in record_steps:
        assert (got[s] is None) == (expected[s] is None), s
        if expected[s] is not None:
            assert got[s] == pytest.approx(expected[s], rel=1e-5), s
    final = external.weights_of(model)
    stored = run.weights(STEPS)
    assert final.keys() == stored.keys() and all(torch.equal(final[k], stored[k]) for k in final)
    assert all(torch.equal(initial[k], v) for k, v in run.weights(0).items())
    assert any(not torch.equal(initial[k], final[k]) for k in final), "the Trainer trained the monitor's model"
    assert main(["report", str(run_dir)]) == 0
    return run


class _HFWrapper(torch.nn.Module):
    """The HF Trainer wants a module whose forward returns {"loss": ...}."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens, targets, mask):
        return {"loss": _loss(self.model, tokens, targets, mask)}


@pytest.mark.slow
def test_the_hf_trainer_with_the_callback_writes_a_normal_run(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")

    task = _task()
    model = _model(task)
    initial = external.weights_of(model)
    args = transformers.TrainingArguments(
        str(tmp_path / "hf"),
        use_cpu=True,
        max_steps=STEPS,
        per_device_train_batch_size=16,
        learning_rate=3e-3,
        logging_steps=3,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    with mechsynth.Monitor(
        model, tmp_path / "run", task, steps=STEPS, checkpoints=10, eval_every=5, probes=["previous_token"]
    ) as monitor:
        trainer = transformers.Trainer(
            _HFWrapper(model), args, train_dataset=Samples(task, 16 * STEPS), callbacks=[callbacks.hf_callback(monitor)]
        )
        trainer.train()
    assert trainer.state.global_step == STEPS and monitor.timeline is not None
    logged = {e["step"]: e["loss"] for e in trainer.state.log_history if "loss" in e}
    assert len(logged) == STEPS // 3  # steps 3, 6, ..., 39: the last step has no loss of its own
    _check_run(tmp_path / "run", model, initial, logged)


@pytest.mark.slow
def test_lightning_with_the_callback_writes_a_normal_run_one_step_per_update(tmp_path):
    lightning = pytest.importorskip("lightning.pytorch")
    task = _task()
    model = _model(task)
    initial = external.weights_of(model)
    losses = {}

    class Module(lightning.LightningModule):
        def __init__(self, model):
            super().__init__()
            self.model = model
            self.batch_losses = []

        def training_step(self, batch, batch_idx):
            loss = _loss(self.model, batch["tokens"], batch["targets"], batch["mask"])
            self.batch_losses.append(loss.item())
            if len(self.batch_losses) % 2 == 0:  # two batches per update: the update's loss is their mean
                losses[len(self.batch_losses) // 2] = sum(self.batch_losses[-2:]) / 2
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    loader = torch.utils.data.DataLoader(
        Samples(task, 8 * 2 * STEPS), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    with mechsynth.Monitor(
        model, tmp_path / "run", task, steps=STEPS, checkpoints=10, eval_every=5, probes=[]
    ) as monitor:
        trainer = lightning.Trainer(
            max_steps=STEPS,
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            accumulate_grad_batches=2,
            callbacks=[callbacks.lightning_callback(monitor)],
        )
        trainer.fit(Module(model), loader)
    assert trainer.global_step == STEPS and len(losses) == STEPS
    _check_run(tmp_path / "run", model, initial, losses)


def test_a_trainer_of_another_model_is_refused_in_one_line(tmp_path):
    lightning = pytest.importorskip("lightning.pytorch")
    task = _task()

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = _model(task)  # a second model, not the one the monitor watches

        def training_step(self, batch, batch_idx):
            return _loss(self.model, batch["tokens"], batch["targets"], batch["mask"])

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    with pytest.raises(ConfigError, match="does not hold the monitor's model") as e:
        with mechsynth.Monitor(_model(task), tmp_path / "run", task, steps=3, probes=[]) as monitor:
            trainer = lightning.Trainer(
                max_steps=3,
                accelerator="cpu",
                devices=1,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                callbacks=[callbacks.lightning_callback(monitor)],
            )
            trainer.fit(Module(), torch.utils.data.DataLoader(Samples(task, 32), batch_size=8))
    assert "\n" not in str(e.value)
    assert load_run(tmp_path / "run").steps == [0]  # what was written stays, and the run is released
    assert not (tmp_path / "run" / rundir.LOCK).exists()


@pytest.mark.parametrize(
    "make, hint", [(callbacks.hf_callback, "mechsynth[hf]"), (callbacks.lightning_callback, "mechsynth[lightning]")]
)
def test_a_missing_package_names_the_extra_to_install(tmp_path, monkeypatch, make, hint):
    real_import = builtins.__import__

    def without(name, *args, **kwargs):
        if name.split(".")[0] in ("transformers", "lightning", "pytorch_lightning"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    task = _task()
    monkeypatch.setattr(builtins, "__import__", without)
    callbacks._hf_class.cache_clear()
    callbacks._lightning_class.cache_clear()
    monitor = mechsynth.Monitor(_model(task), tmp_path / "run", task, steps=3, probes=[])
    try:
        with pytest.raises(ConfigError, match=re.escape(f"pip install '{hint}'")) as e:
            make(monitor)
        assert "\n" not in str(e.value)
    finally:
        monkeypatch.undo()
        callbacks._hf_class.cache_clear()
        callbacks._lightning_class.cache_clear()
        monitor.finish()


# ---- what the Trainer says of the loop is recorded; what it does not stays not recorded ----------------


def _recorded(run_dir):
    stored = json.loads((run_dir / "config.json").read_text())
    return stored["train"], set(stored["origin"]["not_recorded"]), stored["origin"]


def test_the_hf_callback_records_the_trainers_lr_batch_seed_clip_schedule_and_optimizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")

    task = _task()
    model = _model(task)
    args = transformers.TrainingArguments(
        str(tmp_path / "hf"),
        use_cpu=True,
        max_steps=4,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        learning_rate=3e-3,
        seed=1234,
        max_grad_norm=0.5,
        lr_scheduler_type="cosine",
        warmup_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        logging_steps=1,
    )
    with mechsynth.Monitor(
        model, tmp_path / "run", task, steps=4, checkpoints=2, eval_batch_size=8, probes=[]
    ) as monitor:
        transformers.Trainer(
            _HFWrapper(model), args, train_dataset=Samples(task, 64), callbacks=[callbacks.hf_callback(monitor)]
        ).train()
    train, unknown, origin = _recorded(tmp_path / "run")
    assert (train["lr"], train["batch_size"], train["seed"], train["grad_clip"]) == (3e-3, 16, 1234, 0.5)
    assert (train["schedule"], train["warmup_steps"], train["min_lr_frac"]) == ("cosine", 1, 0.0)
    assert train["optimizer"] == "adamw" and origin["optimizer"].endswith("AdamW")  # HF's default optim
    assert "model.init_seed" in unknown and not {"train.lr", "train.batch_size", "train.seed"} & unknown
    assert load_run(tmp_path / "run").config.train.batch_size == 16


def test_the_lightning_callback_records_the_loader_batch_the_seed_and_the_optimizer(tmp_path, monkeypatch):
    lightning = pytest.importorskip("lightning.pytorch")
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    lightning.seed_everything(1234, verbose=False)
    task = _task()
    model = _model(task)

    class Module(lightning.LightningModule):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            return _loss(self.model, batch["tokens"], batch["targets"], batch["mask"])

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=3e-3)

    with mechsynth.Monitor(
        model, tmp_path / "run", task, steps=3, checkpoints=2, eval_batch_size=8, probes=[]
    ) as monitor:
        trainer = lightning.Trainer(
            max_steps=3,
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            accumulate_grad_batches=2,
            callbacks=[callbacks.lightning_callback(monitor)],
        )
        trainer.fit(Module(model), torch.utils.data.DataLoader(Samples(task, 64), batch_size=8))
    train, unknown, origin = _recorded(tmp_path / "run")
    assert (train["optimizer"], train["lr"], train["batch_size"], train["seed"]) == ("adam", 3e-3, 16, 1234)
    assert train["grad_clip"] is None and (train["schedule"], train["warmup_steps"]) == ("constant", 0)
    assert {"model.init_seed", "train.data", "train.min_lr_frac"} <= unknown and origin["optimizer"].endswith("Adam")
