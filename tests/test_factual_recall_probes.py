"""The factual-recall probes (fact_storage, answer_type) beyond their planted known answers (tests/planted.py):
mean ablation side by side and on every model class, their summary lines, figures and W&B plots, and a
trained run probed in chunks equal to each checkpoint probed alone."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from planted import RECALL, planted_recall_weights

from mechsynth import load_run, models, parse_config, probes, tasks, train_run
from mechsynth.analysis import timeline
from mechsynth.analysis.report import probe_figures
from mechsynth.analysis.timeline import Timeline
from mechsynth.models.tl_compat import hooked_transformer
from mechsynth.probes import ProbeError
from mechsynth.probes._run import mean_ablated

NAMES = ["fact_storage", "answer_type"]


@pytest.fixture(scope="module")
def task():
    return tasks.make("factual_recall", RECALL)


def close(a: dict[str, float], b: dict[str, float], tol: float = 1e-5) -> bool:
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) <= tol * max(1.0, abs(b[k])) for k in a)


def test_mean_ablation_replaces_the_hook_by_its_batch_mean(task):
    """On a 1-layer model without LayerNorm the logits are linear in the MLP's output, so mean-ablating it
    subtracts (mlp_out - its batch mean) @ W_U: checked on our model, TransformerLens's and side by side,
    where each model's mean is over its own batch only."""
    cfg = models.TransformerConfig(n_layers=1, n_heads=2, d_model=16, normalization="none")
    fused = models.build(cfg, task.spec, n_models=2)
    tokens = task.sample(32, torch.Generator().manual_seed(0)).tokens
    with torch.no_grad():
        logits, cache = fused.run_with_cache(tokens, names_filter=lambda n: n == "blocks.0.hook_mlp_out")
        ablated = mean_ablated(fused, tokens, cache, ["blocks.0.hook_mlp_out"], m=2)
        for i in range(2):
            out = cache["blocks.0.hook_mlp_out"][32 * i : 32 * (i + 1)]
            want = logits[i] - (out - out.mean(0)) @ fused.unembed.W_U[i]
            torch.testing.assert_close(ablated[i], want, atol=1e-5, rtol=1e-5)
            single = models.build(dataclasses.replace(cfg, init_seed=i), task.spec)
            hooked = models.hooked(single)
            clean, own = hooked.run_with_cache(tokens, names_filter=lambda n: n == "blocks.0.hook_mlp_out")
            torch.testing.assert_close(
                mean_ablated(hooked, tokens, own, ["blocks.0.hook_mlp_out"]), ablated[i], atol=1e-5, rtol=1e-4
            )
            assert not torch.allclose(clean, ablated[i], atol=1e-3)  # the ablation did something


def test_side_by_side_planted_models_are_probed_each_with_its_own_means(task):
    """The MLP-stored and the attention-stored planted models side by side in one FusedTransformer give
    what each gives alone: every ablation's mean is taken over its own model's batch."""
    weights = [planted_recall_weights(task, where) for where in ("mlp", "attn")]
    cfg = weights[0][0]
    stacked = models.build(cfg, task.spec, n_models=2)
    stacked.load_state_dict({k: torch.stack([sd[k] for _, sd in weights]) for k in weights[0][1]})
    together = probes.run_many(NAMES, stacked, task)
    for (cfg, sd), result in zip(weights, together):
        alone = probes.run_many(
            NAMES, hooked_transformer(cfg, task.spec.d_vocab, task.spec.d_vocab_out, task.spec.n_ctx, sd), task
        )[0]
        for name in NAMES:
            assert close(result[name].metrics, alone[name].metrics), (name, result[name].metrics, alone[name].metrics)
    assert (
        together[0]["fact_storage"].metrics["acc_no_mlp"] < 0.6 < together[1]["fact_storage"].metrics["acc_no_mlp"] == 1
    )


def test_where_the_probes_apply(task):
    attn_only = models.hooked(models.build(models.TransformerConfig(n_layers=1, attn_only=True, d_model=16), task.spec))
    assert probes.why_not("fact_storage", attn_only, task) == (
        f"{type(attn_only).__name__} is attention-only; probe 'fact_storage' compares ablating its MLP and its attention"
    )
    assert probes.can_run("answer_type", attn_only, task)  # logits only
    parity = tasks.make("sparse_parity", {"n": 6, "k": 2})
    model = models.hooked(models.build(models.TransformerConfig(n_layers=1, d_model=16), parity.spec))
    for name in NAMES:
        assert "needs truth relation, answer_set, facts" in probes.why_not(name, model, parity)
    with pytest.raises(ProbeError, match="pass the task"):
        probes.run("answer_type", model)
    with pytest.raises(ValueError, match="ablates on inputs \\['random'\\] it does not read"):
        probes.register("bad_ablation", reads={"data": probes.no_hooks}, ablations={"random": {"x": probes.no_hooks}})


def hand_timeline() -> Timeline:
    """Five checkpoints of a model that learns the type by step 10 and the facts by step 40."""
    steps = [0, 10, 20, 40, 80]
    answer = {
        "type_acc": [0.3, 0.95, 0.97, 1.0, 1.0],
        "acc": [0.05, 0.2, 0.5, 0.95, 1.0],
        "type_gap": [0.25, 0.75, 0.47, 0.05, 0.0],
        "loss": [3.0, 1.5, 1.0, 0.2, 0.1],
        "type_loss": [1.0, 0.1, 0.05, 0.01, 0.0],
        "fact_loss": [2.0, 1.4, 0.95, 0.19, 0.1],
        "type_only_acc": [0.4] * 5,
    }
    storage = {
        "acc": [0.05, 0.2, 0.5, 0.95, 1.0],
        "acc_no_mlp": [0.05, 0.2, 0.45, 0.5, 0.55],
        "acc_no_attn": [0.05, 0.1, 0.1, 0.1, 0.1],
        "type_acc_no_mlp": [0.3, 0.9, 0.95, 1.0, 1.0],
        "type_acc_no_attn": [0.3, 0.33, 0.33, 0.33, 0.33],
        "type_only_acc": [0.4] * 5,
    }
    return Timeline(
        steps,
        answer["loss"],
        {"answer_type": {}, "fact_storage": {}},
        {"answer_type": answer, "fact_storage": storage},
        {"answer_type": {}, "fact_storage": {}},
        40,
    )


def test_summary_lines_say_when_and_where(task):
    tl = hand_timeline()
    lines = timeline.summary(tl, task)
    assert (
        "answer_type      type known at step 10, facts at step 40 (type_acc, acc ≥ 0.9 from then on); widest "
        "gap type_acc - acc 0.75 at step 10 (fact loss 1.4 nats)"
    ) in lines
    assert (
        "fact_storage     step 80: acc 1; MLP mean-ablated 0.55 (type 1), attention mean-ablated 0.1 (type 0.33); "
        "best guess from the relation alone 0.4: facts in the MLP"
    ) in lines
    tl.metrics["fact_storage"]["acc_no_mlp"][-1] = 0.9  # most of the accuracy survives the MLP's ablation
    assert timeline.summary(tl, task)[-2].endswith("facts in attention (OV)")
    tl.metrics["fact_storage"]["acc"][-1] = 0.8
    assert timeline.summary(tl, task)[-2].endswith("facts in attention (OV) (so far: acc < 0.9)")
    tl.metrics["fact_storage"]["acc"][-1] = 0.4
    assert timeline.summary(tl, task)[-2].endswith("no facts beyond the guess from the relation")
    tl.metrics["answer_type"]["acc"][-1] = 0.5  # the facts drop again: not learned for good
    assert "type known at step 10, facts: not reached (type_acc, acc ≥ 0.9" in timeline.summary(tl, task)[-3]


def test_figures_and_wandb_plots(task, wandb_plots):
    tl = hand_timeline()
    figs = probe_figures(tl, task)
    assert set(figs) >= set(NAMES)
    labels = {name: [line.get_label() for ax in figs[name].axes for line in ax.get_lines()] for name in NAMES}
    assert {"type_acc (right answer set)", "acc (the fact)", "fact loss (-log p(answer | type))"} <= set(
        labels["answer_type"]
    )
    assert {"MLP mean-ablated", "attention mean-ablated", "as trained"} <= set(labels["fact_storage"])

    for name in NAMES:
        probes.PROBES.get(name).wandb(tl, wandb_plots)
    assert set(wandb_plots.plots) == {"plots/answer_type", "plots/answer_type_loss", "plots/fact_storage"}
    assert wandb_plots.plots["plots/answer_type"]["type_gap"] == tl.metrics["answer_type"]["type_gap"]
    assert wandb_plots.plots["plots/fact_storage"]["MLP mean-ablated"] == tl.metrics["fact_storage"]["acc_no_mlp"]


def test_a_trained_run_probed_in_chunks_equals_each_checkpoint_alone(tmp_path, tiny):
    """A tiny run with frozen embeddings: the probes on chunks of checkpoints side by side (the timeline)
    equal the probes on each checkpoint's TransformerLens model, and agree with the trainer's own metrics
    where both measure the same thing (acc on the held-out split is another batch: only the ranges)."""
    data = tiny(
        {"name": "factual_recall", **RECALL},
        {"n_layers": 1, "n_heads": 2, "d_model": 16, "d_mlp": 32, "normalization": "none", "freeze_embeddings": True},
        {"steps": 12, "checkpoints": 4, "eval_every": 6, "lr": 0.01},
    )
    run = load_run(train_run(parse_config(data), tmp_path / "run", progress=False))
    tl = timeline.probe_run(run, NAMES, batch_size=32)
    assert tl.steps == run.steps and len(tl.steps) >= 3
    for i, step in enumerate(run.steps):
        alone = probes.run_many(NAMES, run.model(step), run.task, batch_size=32)[0]
        for name in NAMES:
            assert close({k: v[i] for k, v in tl.metrics[name].items()}, alone[name].metrics, 1e-4), (step, name)
    assert set(tl.metrics["fact_storage"]) == {
        f"{k}{s}" for k in ("acc", "loss", "type_acc", "type_loss") for s in ("", "_no_mlp", "_no_attn")
    } | {"type_only_acc"}
    assert all(0 <= v <= 1 for v in tl.metrics["answer_type"]["type_acc"])
    lines = timeline.summary(tl, run.task)
    assert any(line.startswith("answer_type") for line in lines) and any(
        line.startswith("fact_storage") for line in lines
    )
