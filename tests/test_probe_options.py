"""Options of the attention probes (previous_token's offset, every attention probe's threshold) and chance: on
hand-set attention patterns whose scores are known, on uniform heads whose score is chance (checked against a
slow loop), and on a tiny run through the CLI, where the options are recorded in probes.json."""

from __future__ import annotations

import json

import pytest
import torch
from planted import _config, _embeddings, _layer, planted_induction_model

from mechsynth import hooks, probes
from mechsynth.analysis import report, timeline
from mechsynth.analysis.timeline import Timeline
from mechsynth.cli import main
from mechsynth.errors import ConfigError
from mechsynth.models.tl_compat import hooked_transformer
from mechsynth.probes import FormationOptions, View
from mechsynth.runs.run import load_run
from mechsynth.tasks.base import Batch


def hand_set(
    name: str, tokens: torch.Tensor, heads: list[torch.Tensor], option: dict | None = None
) -> probes.ProbeResult:
    """Probe `name` on a one-layer model whose heads' attention is `heads` ([batch, query_pos, key_pos] each),
    on `tokens`, with no task (its data input is random tokens: these)."""
    cache = {hooks.attn_pattern(0): torch.stack(heads, 1)}  # [batch, head_index, query_pos, key_pos]
    batch = Batch(tokens, torch.zeros_like(tokens), torch.zeros_like(tokens, dtype=torch.bool))
    view = View(
        None,
        1,
        len(heads),
        {"random": (batch, torch.zeros(*tokens.shape, 2), cache)},
        weight=lambda w: None,
        options=probes.options(name, option),
    )
    return probes.PROBES.get(name).fn(view)


def back(n: int, offset: int, batch: int = 4) -> torch.Tensor:
    """Each query attends exactly `offset` tokens back; the first `offset` queries, which cannot, attend to themselves."""
    pattern = torch.zeros(n, n)
    for q in range(n):
        pattern[q, q - offset if q >= offset else q] = 1.0
    return pattern.expand(batch, n, n)


def uniform(n: int, batch: int = 4) -> torch.Tensor:
    pattern = torch.zeros(n, n)
    for q in range(n):
        pattern[q, : q + 1] = 1.0 / (q + 1)
    return pattern.expand(batch, n, n)


def slow_target_chance(targets_of) -> float:
    """The mean, over queries with at least one target key, of the share of its keys 0..q that are targets."""
    shares = []
    for q, keys in targets_of:
        if keys:
            shares.append(len(keys) / (q + 1))
    return sum(shares) / len(shares)


def test_offset_picks_the_key_the_per_head_score_reads():
    tokens = torch.randint(5, (4, 16), generator=torch.Generator().manual_seed(0))
    three_back = [back(16, 3), back(16, 1)]  # L0H0 looks 3 back, L0H1 1 back
    at3 = hand_set("previous_token", tokens, three_back, {"offset": 3})
    at1 = hand_set("previous_token", tokens, three_back)
    assert at3.per_head[0].tolist() == pytest.approx([1.0, 0.0]) and at1.per_head[0].tolist() == pytest.approx(
        [0.0, 1.0]
    )
    # The further offsets stay metrics whatever the offset; the random-token scores follow it.
    for result in (at3, at1):
        assert result.metrics["offset3/L0H0"] == pytest.approx(1.0) and result.metrics["offset2/L0H0"] == 0.0
    assert at3.metrics["random/L0H0"] == pytest.approx(1.0) and at1.metrics["random/L0H1"] == pytest.approx(1.0)


def test_a_planted_head_three_back_scores_with_offset_3_through_run():
    model, head, _ = planted_induction_model(vocab=10, n_ctx=40, n_heads=3, seed=5, offset=3)
    at3 = probes.run("previous_token", model, option={"offset": 3})
    at1 = probes.run("previous_token", model)
    assert at3.top_heads(1)[0][:2] == (0, head) and float(at3.per_head[0, head]) >= 0.9, at3.per_head
    assert float(at1.per_head[0, head]) < 0.1, at1.per_head
    assert float(at3.per_head[0, head]) == pytest.approx(at3.metrics[f"offset3/L0H{head}"])


@pytest.mark.parametrize("n, offset", [(16, 1), (16, 3), (3, 1)])
def test_a_uniform_heads_previous_token_score_is_chance(n, offset):
    tokens = torch.zeros(4, n, dtype=torch.long)
    result = hand_set("previous_token", tokens, [uniform(n)], {"offset": offset})
    slow = sum(1.0 / (q + 1) for q in range(offset, n)) / (n - offset)
    assert result.metrics["chance"] == pytest.approx(slow) and float(result.per_head[0, 0]) == pytest.approx(slow)


def test_in_a_three_token_context_a_uniform_head_reaches_0_4_yet_does_not_form():
    result = hand_set("previous_token", torch.zeros(4, 3, dtype=torch.long), [uniform(3), back(3, 1)])
    chance = (1 / 2 + 1 / 3) / 2
    raised = 3 * chance / (1 - chance + 3 * chance)
    assert float(result.per_head[0, 0]) >= 0.4  # the bare threshold would say "formed"
    assert probes.formation_threshold("previous_token", None, result.metrics["chance"]) == pytest.approx(raised)
    assert float(result.per_head[0, 0]) < raised <= float(result.per_head[0, 1])


def binary_heads(tokens: torch.Tensor) -> list[torch.Tensor]:
    """Uniform; a perfect duplicate-token head (its earlier copies alike, itself where it has none); one all on
    key 0 (which, with two symbols, holds the query's token more often than not)."""
    b, n = tokens.shape
    dup = torch.zeros(b, n, n)
    for i in range(b):
        for q in range(n):
            copies = [k for k in range(q) if tokens[i, k] == tokens[i, q]]
            for k in copies or [q]:
                dup[i, q, k] = 1.0 / len(copies or [q])
    first = torch.zeros(b, n, n)
    first[..., 0] = 1.0
    return [uniform(n, b), dup, first]


def test_on_two_tokens_a_uniform_or_first_key_head_does_not_form_duplicate_token_and_a_perfect_one_does():
    tokens = torch.randint(2, (64, 12), generator=torch.Generator().manual_seed(1))
    result = hand_set("duplicate_token", tokens, binary_heads(tokens))
    slow = slow_target_chance(
        (q, [k for k in range(q) if tokens[i, k] == tokens[i, q]])
        for i in range(tokens.shape[0])
        for q in range(tokens.shape[1])
    )
    assert result.metrics["chance"] == pytest.approx(slow) and float(result.per_head[0, 0]) == pytest.approx(slow)
    assert 0.4 < slow < 0.5 and float(result.per_head[0, 1]) == pytest.approx(1.0)
    first = float(result.per_head[0, 2])
    assert first >= 0.5  # at the bare 0.5 threshold this head would form

    steps = [0, 10, 20]
    tl = Timeline(
        steps,
        [1.0] * 3,
        {"duplicate_token": {f"L0H{h}": [float(result.per_head[0, h])] * 3 for h in range(3)}},
        {"duplicate_token": {"chance": [result.metrics["chance"]] * 3}},
        options={"duplicate_token": {"threshold": 0.5, "over_chance": 3.0}},
    )
    threshold, chance = timeline.formation_threshold(tl, "duplicate_token")
    assert threshold == pytest.approx(3 * slow / (1 + 2 * slow)) and chance == pytest.approx(slow)
    assert first < threshold
    tl.formation["duplicate_token"] = {
        h: probes.formation_step(steps, s, threshold) for h, s in tl.per_head["duplicate_token"].items()
    }
    assert tl.formation["duplicate_token"] == {"L0H0": None, "L0H1": 0, "L0H2": None}
    lines = timeline.summary(tl)
    formed = [line for line in lines if "formed at step" in line]
    assert formed == [f"duplicate_token  L0H1 formed at step 0 (score ≥ {threshold:.3g}; chance {slow:.2g})"], lines
    # over_chance = 1: the threshold alone, as before chance was counted.
    tl.options["duplicate_token"]["over_chance"] = 1.0
    assert timeline.formation_threshold(tl, "duplicate_token") == (0.5, None)


def uniform_model(vocab: int, n_ctx: int, n_heads: int = 2):
    """One attention layer whose queries are zero: every head attends uniformly to the keys it can see."""
    d_model = vocab + n_ctx
    a = _layer(n_heads, d_model, 4, torch.Generator().manual_seed(0))
    a["W_Q"].zero_()
    sd = _embeddings(vocab, n_ctx, d_model, vocab) | {f"blocks.0.attn.{k}": v for k, v in a.items()}
    return hooked_transformer(_config(1, n_heads, d_model, 4), vocab, vocab, n_ctx, sd)


@pytest.mark.parametrize("vocab", [2, 10])
def test_a_uniform_models_heads_score_chance_on_every_attention_probe(vocab):
    model = uniform_model(vocab, 12)
    results = probes.run_many(["previous_token", "duplicate_token", "induction"], model, batch_size=16)[0]
    data = probes.draw("random", model, None, 16, 0).tokens
    rep = probes.draw("repeated", model, None, 16, 0).tokens
    half = rep.shape[1] // 2
    slow = {
        "previous_token": sum(1.0 / (q + 1) for q in range(1, 12)) / 11,
        "duplicate_token": slow_target_chance(
            (q, [k for k in range(q) if data[i, k] == data[i, q]]) for i in range(len(data)) for q in range(12)
        ),
        "induction": slow_target_chance(
            (q, [k for k in range(1, q + 1) if rep[i, k - 1] == rep[i, q]])
            for i in range(len(rep))
            for q in range(half, rep.shape[1])
        ),
    }
    for name, result in results.items():
        assert result.metrics["chance"] == pytest.approx(slow[name], abs=1e-6), name
        assert result.per_head.flatten().tolist() == pytest.approx([slow[name]] * 2, abs=1e-5), name
        assert result.per_head.max() < probes.formation_threshold(name, None, result.metrics["chance"]), name


@pytest.mark.parametrize(
    "option, field",
    [
        ({"offset": 0}, "previous_token.offset"),
        ({"colour": 1}, "previous_token.colour"),
        ({"threshold": 1.5}, "previous_token.threshold"),
        ({"threshold": -0.1}, "previous_token.threshold"),
        ({"over_chance": 0.5}, "previous_token.over_chance"),
        ({"offset": 40}, "previous_token.offset"),
    ],
)  # the whole 40-token context
def test_bad_options_are_one_line_naming_the_field(option, field):
    model, _, _ = planted_induction_model(vocab=10, n_ctx=40, n_heads=2, seed=3)
    with pytest.raises(ConfigError) as err:
        probes.run("previous_token", model, option=option)
    assert str(err.value).startswith(f"{field}: ") and "\n" not in str(err.value), str(err.value)


def test_a_threshold_is_said_once_by_the_options():
    with pytest.raises(ValueError, match="threshold"):
        probes.register(
            "not_registered", reads={"data": probes.attention_hooks}, threshold=0.3, options=FormationOptions
        )
    assert "not_registered" not in probes.names()
    assert probes.PROBES.get("previous_token").threshold == 0.4 and probes.PROBES.get("induction").threshold == 0.5


# ---- through the CLI --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from conftest import tiny_config

    tmp = tmp_path_factory.mktemp("options")
    data = tiny_config({"name": "markov_icl", "k": 3, "length": 12}, {"n_heads": 2, "attn_only": True})
    cfg = tmp / "run.toml"
    cfg.write_text(
        "\n".join(
            f"[{section}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in table.items())
            for section, table in data.items()
        )
        + "\n"
    )
    assert main(["train", str(cfg), "--out", str(tmp / "run"), "--no-progress"]) == 0
    return tmp / "run"


def test_probe_cli_sets_offset_and_threshold_and_records_them(run_dir, capsys):
    sets = ["--set", "previous_token.offset=2", "--set", "previous_token.threshold=0.3"]
    assert main(["probe", str(run_dir), "--probes", "previous_token,duplicate_token", *sets]) == 0
    out = capsys.readouterr().out
    stored = json.loads((run_dir / timeline.JSON).read_text())["probes"]
    assert stored["previous_token"]["options"] == {"threshold": 0.3, "over_chance": 3.0, "offset": 2}
    assert stored["duplicate_token"]["options"] == {"threshold": 0.5, "over_chance": 3.0}  # defaults, as run
    prev = stored["previous_token"]
    assert prev["per_head"] and all(
        series == pytest.approx(prev["metrics"][f"offset2/{h}"]) for h, series in prev["per_head"].items()
    )
    run = load_run(run_dir)
    n = probes.draw("data", run.trainable(run.steps[0]), run.task, 64, 0).tokens.shape[1]
    chance = sum(1.0 / (q + 1) for q in range(2, n)) / (n - 2)
    assert prev["metrics"]["chance"] == pytest.approx([chance] * len(run.steps))
    threshold = max(0.3, 3 * chance / (1 - chance + 3 * chance))
    tl = timeline.load(run_dir)
    assert timeline.formation_threshold(tl, "previous_token") == (
        pytest.approx(threshold),
        None if threshold == 0.3 else pytest.approx(chance),
    )
    assert prev["formation"] == {h: probes.formation_step(run.steps, s, threshold) for h, s in prev["per_head"].items()}
    assert "table:" in out

    page = report.build(run_dir).html  # probes what probes.json lacks; keeps what it has, options included
    assert "<h2>In-context strategies (probe icl_strategy)</h2>" in page
    assert timeline.load(run_dir).options["previous_token"]["offset"] == 2


@pytest.mark.parametrize(
    "assignment, field",
    [
        ("previous_token.offset=0", "previous_token.offset"),
        ("previous_token.colour=1", "previous_token.colour"),
        ("previous_token.threshold=1.5", "previous_token.threshold"),
        ("duplicate_token.threshold=-1", "duplicate_token.threshold"),
        ("previous_token.offset=99", "previous_token.offset"),
    ],
)  # longer than the run's sequences: found when probing
def test_bad_options_through_the_cli_exit_2_in_one_line(run_dir, capsys, assignment, field):
    path = run_dir / timeline.JSON
    before = path.read_bytes() if path.exists() else None
    assert main(["probe", str(run_dir), "--probes", "previous_token,duplicate_token", "--set", assignment]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"mechsynth: error: {field}:") and "Traceback" not in err, err
    assert (path.read_bytes() if path.exists() else None) == before
