"""`mechsynth.build_model`: the fused model `mechsynth train` trains, for a loop of one's own. A plain Adam loop over it
learns; its state_dict has TransformerLens's names and layout; the Monitor takes it; its checkpoints probe exactly
as TransformerLens's model with the same weights does; a RunConfig or a task name builds it too, every field checked."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import mechsynth
from mechsynth import configs, models, tasks
from mechsynth.errors import ConfigError
from mechsynth.models import external
from mechsynth.tasks.base import masked_loss

TASK = tasks.make("markov_icl", {"k": 3, "order": 2, "length": 16})
FIELDS = dict(n_layers=2, d_model=16, n_heads=1, attn_only=True)


def _loop(model, steps: int, monitor=None) -> list[float]:
    """A user's plain loop: Adam, batch 32, their own data seed."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data, losses = torch.Generator().manual_seed(1234), []
    for step in range(1, steps + 1):
        batch = TASK.sample(32, data)
        loss = masked_loss(model(batch.tokens), batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if monitor is not None:
            monitor.step(step, loss)
    return losses


def test_a_plain_adam_loop_over_the_fused_model_learns():
    torch.manual_seed(0)
    model = mechsynth.build_model(TASK, **FIELDS)
    assert isinstance(model, models.FusedTransformer) and model.training
    losses = _loop(model, 30)
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.92 * first and last < math.log(3), losses  # below uniform guessing over the 3 tokens


def test_its_parameters_have_transformer_lens_names_and_shapes():
    model = mechsynth.build_model(TASK, **FIELDS)
    tl = mechsynth.hooked_model(
        n_layers=2,
        d_model=16,
        n_heads=1,
        d_head=16,
        n_ctx=TASK.spec.n_ctx,
        d_vocab=TASK.spec.d_vocab,
        act_fn="relu",
        attn_only=True,
    )
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in external.weights_of(tl).items()}  # HookedTransformer's layout on TL 3 and 4
    assert ours == theirs
    hooked = models.hooked(model)  # TransformerLens's own model with these weights computes the same logits
    tokens = TASK.sample(4, torch.Generator().manual_seed(0)).tokens
    torch.testing.assert_close(hooked(tokens), model(tokens), atol=1e-5, rtol=1e-5)


def test_the_monitor_takes_it_and_its_checkpoints_probe_as_transformer_lens_models_do(tmp_path):
    torch.manual_seed(0)
    model = mechsynth.build_model(TASK, **FIELDS)
    kept = [(0, copy.deepcopy(model))]
    with mechsynth.Monitor(
        model, tmp_path / "run", TASK, schedule=[4, 12], eval_batch_size=8, probes=["previous_token"]
    ) as monitor:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        data = torch.Generator().manual_seed(1234)
        for step in range(1, 13):
            batch = TASK.sample(32, data)
            loss = masked_loss(model(batch.tokens), batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            monitor.step(step, loss)
            if step in (4, 12):
                kept.append((step, copy.deepcopy(model)))
    assert mechsynth.load_run(tmp_path / "run").steps == [0, 4, 12]
    # The Monitor's checkpoints of the fused model and TransformerLens's models of the same weights: the same scores.
    tl = mechsynth.probe_models(
        [(s, models.hooked(m)) for s, m in kept], TASK, tmp_path / "tl", probes=["previous_token"]
    )
    a, b = monitor.timeline.per_head["previous_token"], tl.per_head["previous_token"]
    assert a.keys() == b.keys() and a
    for head in a:
        assert a[head] == pytest.approx(b[head], abs=1e-5)


def test_a_run_config_or_a_task_name_builds_it_and_every_field_is_checked():
    cfg = mechsynth.parse_config(configs.load("demo"), resources=False)
    model = mechsynth.build_model(cfg)
    assert model.cfg == cfg.model and model.d_vocab == cfg.build_task().spec.d_vocab
    assert mechsynth.build_model(cfg, d_model=8).cfg.d_model == 8  # fields override the config's [model] table
    assert mechsynth.build_model("markov_icl", n_layers=1).cfg.n_layers == 1
    assert mechsynth.build_model(TASK, n_models=3, **FIELDS)(TASK.sample(2, torch.Generator()).tokens).shape[0] == 3
    with pytest.raises(ConfigError, match="model.n_layerz: unknown key"):
        mechsynth.build_model(TASK, n_layerz=2)
    with pytest.raises(ConfigError, match="model.n_ctx: 4 is shorter than the task's sequences"):
        mechsynth.build_model(TASK, n_ctx=4)
    with pytest.raises(ConfigError, match="^task: expected a Task"):
        mechsynth.build_model(3)
