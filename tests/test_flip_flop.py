"""Flip-flop language modeling (tasks/flip_flop.py), the recurrent kind (models/recurrent.py) and the read_attention
probe on trained runs: each against a reference written from the definition, one sequence or one step at a time."""

from __future__ import annotations

import math

import pytest
import torch

from mechsynth import load_run, models, parse_config, probes, tasks, train_run
from mechsynth.analysis import stages, timeline
from mechsynth.errors import ConfigError
from mechsynth.models.recurrent import step_by_step
from mechsynth.tasks.base import latent_values
from mechsynth.tasks.flip_flop import BIT0, I, R, W


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def reference_sequence_truth(seq: list[int]) -> tuple[list[int], list[bool]]:
    """(source, written) at each input position of one whole sequence (instruction, bit, ...), walking it pair by
    pair: a read's source is the bit position of the most recent write."""
    n = len(seq) - 1
    source, written, last = [-1] * n, [False] * n, None
    for p in range(0, len(seq), 2):
        instr = seq[p]
        if instr == W:
            last = p + 1
            written[p + 1] = True
        elif instr == R:
            source[p] = last
    return source, written


@pytest.mark.reference("flip_flop")
@pytest.mark.parametrize("split", ["train", "eval", "eval_sparse", "eval_dense"])
def test_sequences_follow_the_definition(split):
    """First a write, last a read, every read bit the latest written bit, the truth as a walk finds it; the
    instructions between in proportions (p_w, p_r, p_i) = ((1 − p_i)/2, (1 − p_i)/2, p_i) and the free bits
    uniform, within 5 standard errors over 4000 sequences."""
    task = tasks.make("flip_flop", {"length": 40})
    b = task.sample(4000, gen(1), split=split)
    seqs = torch.cat([b.tokens, b.targets[:, -1:]], 1)
    assert torch.equal(b.tokens[:, 1:], b.targets[:, :-1])
    counts, free_bits = {W: 0, R: 0, I: 0}, []
    for row, seq in enumerate(seqs.tolist()):
        assert (
            seq[0] == W
            and seq[-2] == R
            and all(t in (W, R, I) for t in seq[0::2])
            and all(t >= BIT0 for t in seq[1::2])
        )
        last = None
        for p in range(0, len(seq), 2):
            if seq[p] == W:
                last = seq[p + 1]
            elif seq[p] == R:
                assert seq[p + 1] == last
            if seq[p] != R:
                free_bits.append(seq[p + 1] - BIT0)
            if 0 < p < len(seq) - 2:
                counts[seq[p]] += 1
        source, written = reference_sequence_truth(seq)
        assert b.truth["source"][row].tolist() == source and b.truth["written"][row].tolist() == written
        assert b.mask[row].tolist() == [s >= 0 for s in source]  # the clean setting: read bits only
    n, p_i = sum(counts.values()), task.p_ignore(split)
    for instr, p in ((W, (1 - p_i) / 2), (R, (1 - p_i) / 2), (I, p_i)):
        assert abs(counts[instr] / n - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-9, (split, instr, counts)
    assert abs(sum(free_bits) / len(free_bits) - 0.5) <= 5 * math.sqrt(0.25 / len(free_bits))


@pytest.mark.reference("flip_flop")
def test_diverse_training_mixes_the_three_distributions_and_all_scores_every_token():
    task = tasks.make("flip_flop", {"length": 64, "diverse": True, "loss_on": "all"})
    b = task.sample(3000, gen(2))
    assert b.mask.all()
    ignores = (b.tokens[:, 2:-1:2] == I).float().mean(1)  # per sequence, the instructions between first and last
    # each sequence comes from one of p_i = 0.8, 0.98, 0.1: its share of ignores clusters near one of them
    near = torch.stack([(ignores - p).abs() for p in (0.8, 0.98, 0.1)]).argmin(0)
    shares = torch.bincount(near, minlength=3).float() / len(near)
    assert (shares - 1 / 3).abs().max() < 0.05, shares
    assert tasks.make("flip_flop", {"length": 64}).sample(8, gen(2)).mask.sum() < 8 * 63  # default: reads only


def test_metrics_count_wrong_reads_and_sequences_with_one():
    """A model that always answers the first write's bit: its errors, counted one read at a time."""
    task = tasks.make("flip_flop", {"length": 24})
    b = task.sample(500, gen(3), split="eval_dense")
    logits = torch.zeros(*b.tokens.shape, 5)
    first = b.tokens[:, 1]
    logits[torch.arange(len(b.tokens))[:, None], torch.arange(b.tokens.shape[1]), first[:, None]] = 1.0
    m = task.metrics(logits, b)
    wrong = reads = seqs = 0
    for tokens, targets in zip(b.tokens.tolist(), b.targets.tolist()):
        bad = [targets[p] != tokens[1] for p, t in enumerate(tokens) if t == R]
        wrong, reads, seqs = wrong + sum(bad), reads + len(bad), seqs + any(bad)
    assert m["error"] == pytest.approx(wrong / reads) and m["seq_error"] == pytest.approx(seqs / len(b.tokens))
    assert m["acc"] == pytest.approx(1 - wrong / reads) and 0.1 < m["error"] < 0.6


@pytest.mark.parametrize(
    "field, value, says", [("length", 7, "even"), ("p_ignore", 1.5, "[0, 1]"), ("loss_on", "bits", "loss_on")]
)
def test_bad_config_names_the_field(field, value, says):
    with pytest.raises(ConfigError) as e:
        tasks.make("flip_flop", {field: value})
    assert f"task.{field}" in str(e.value) and says in str(e.value)


# ---- the recurrent kind --------------------------------------------------------------------------------


def reference_logits(model, tokens: torch.Tensor) -> torch.Tensor:
    """The same weights in PyTorch's own multi-layer nn.LSTM / nn.GRU."""
    cfg = model.cfg
    rnn = torch.nn.LSTM if cfg.cell == "lstm" else torch.nn.GRU
    net = rnn(cfg.d_model, cfg.d_model, num_layers=cfg.n_layers, batch_first=True)
    net.load_state_dict(
        {
            f"{name}_l{layer}": getattr(block, name)
            for layer, block in enumerate(model.blocks)
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        }
    )
    return net(model.W_E[tokens])[0] @ model.W_U + model.b_U


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_recurrent_kind_is_pytorchs_cell_and_side_by_side_models_are_single_ones(cell):
    """Against nn.LSTM / nn.GRU with the same weights; the step-by-step path (forward-mode AD) against the fused one."""
    task = tasks.make("flip_flop", {"length": 16})
    cfg = models.parse({"kind": "recurrent", "cell": cell, "n_layers": 2, "d_model": 12, "init_seed": 5})
    model = models.build(cfg, task.spec)
    tokens = task.sample(6, gen(4)).tokens
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), reference_logits(model, tokens), atol=1e-5, rtol=1e-5)
        block, x = model.blocks[0], model.W_E[tokens]
        weights = {f"{name}_l0": getattr(block, name) for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
        torch.testing.assert_close(step_by_step(cell, weights, x), model._layer(weights, x), atol=1e-5, rtol=1e-5)
        stacked = models.build(cfg, task.spec, n_models=3)
        for i in range(3):
            single = models.build(
                models.parse({"kind": "recurrent", "cell": cell, "n_layers": 2, "d_model": 12, "init_seed": 5 + i}),
                task.spec,
            )
            torch.testing.assert_close(stacked(tokens)[i], single(tokens), atol=1e-6, rtol=1e-6)
    assert sum(p.numel() for p in model.parameters()) == cfg.param_count(task.spec)
    assert models.describe(cfg) == f"2-layer {cell.upper()}, d_model 12"


def test_attention_probes_refuse_a_recurrent_model_in_one_line():
    task = tasks.make("flip_flop", {"length": 16})
    model = models.build(models.parse({"kind": "recurrent", "d_model": 8}), task.spec)
    for name in ("read_attention", "induction", "previous_token"):
        why = probes.why_not(name, model, task)
        assert why is not None and "attention heads" in why and "\n" not in why, why


# ---- trained runs: the probes, LLC and stages apply ----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "model",
    [{"n_layers": 2, "d_model": 16, "n_heads": 2}, {"kind": "recurrent", "d_model": 16}],
    ids=["transformer", "lstm"],
)
def test_flip_flop_runs_train_and_every_applicable_probe_llc_and_stages_run(model, tmp_path, tiny):
    cfg = tiny({"name": "flip_flop", "length": 16}, model, {"steps": 30, "checkpoints": 4, "eval_every": 10})
    run = load_run(train_run(parse_config(cfg), tmp_path / "run", progress=False))
    metrics = run.meta(run.steps[-1])["metrics"]
    assert {f"{s}/{m}" for s in ("eval", "eval_sparse", "eval_dense") for m in ("error", "seq_error")} <= set(metrics)
    names = timeline.applicable(run)
    assert ("read_attention" in names) == (model.get("kind") != "recurrent")
    tl = timeline.probe_run(
        run,
        names + ["llc"],
        batch_size=16,
        options={"llc": {"draws": 10, "chains": 2, "pool": 16, "batch": 8, "checkpoints": 2}},
    )
    assert math.isfinite(tl.metrics["llc"]["llc"][-1])
    if "read_attention" in names:
        m = tl.metrics["read_attention"]
        assert all(0 <= v <= 1 for v in m["eval/error"]) and all(0 <= v <= 1 for v in m["eval/source_mass"])
    assert isinstance(stages.detect(tl), dict)


@pytest.mark.reference("flip_flop")
@pytest.mark.parametrize("split", ["eval", "eval_dense"])
def test_latents_match_a_slow_reference(split):
    """The memory at each input position: the last bit shown after a `w`, tracked token by token; undefined
    before the first one."""
    task = tasks.make("flip_flop", {"length": 40})
    batch = task.sample(16, gen(4), split=split)
    values, defined = latent_values(task, batch)["memory"]
    for i, row in enumerate(batch.tokens.tolist()):
        memory, want = None, []
        for p, x in enumerate(row):
            if p % 2 == 1 and row[p - 1] == W:
                memory = x - BIT0
            want.append(memory)
        assert defined[i].tolist() == [m is not None for m in want]
        assert [v for v, m in zip(values[i].tolist(), want) if m is not None] == [m for m in want if m is not None]
        reads = [p + 1 for p in range(0, len(row) - 1, 2) if row[p] == R]  # a read returns the memory
        assert all(row[p] - BIT0 == want[p - 1] for p in reads)
