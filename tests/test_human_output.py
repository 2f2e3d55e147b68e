"""What a person reads: summary lines and report cells that never say None or nan for a missing value,
descriptions cut at the end of a sentence (not at "et al."), one description per probe, and in-context
stages that do not alternate between predictors the model cannot tell apart."""

from __future__ import annotations

import json
import re

import pytest
import torch

from mechsynth import load_run, parse_config, probes, tasks, train_run
from mechsynth.analysis import report, timeline
from mechsynth.analysis.timeline import Timeline, steepest_drop, summary
from mechsynth.cli import first_sentence, main
from mechsynth.probes.icl_strategy import stages

from planted import PredictorModel

MISSING = re.compile(r"\bNone\b|\bnan\b", re.IGNORECASE)  # (fourier's "key frequencies: none" is words, not a value)

# a small run of each task whose probes print summary lines, with a learning rate too small to learn anything
FLAT = {
    "markov_icl": ({"name": "markov_icl", "k": 3, "length": 12}, {"n_layers": 2, "attn_only": True}),
    "factual_recall": (
        {"name": "factual_recall", "subjects": 8, "relations": 2, "answers": 3, "length": 8},
        {"n_layers": 1, "d_mlp": 32},
    ),
    "modular_arithmetic": ({"name": "modular_arithmetic", "p": 7}, {"n_layers": 1, "d_mlp": 32}),
    "sparse_parity": ({"name": "sparse_parity", "n": 6, "k": 2}, {"n_layers": 1}),
    "hmm_masked": ({"name": "hmm_masked", "d": 4}, {"n_layers": 1}),
    "causal_icl": ({"name": "causal_icl", "k": 4, "length": 8}, {"n_layers": 2}),
    "bounded_dyck": ({"name": "bounded_dyck", "length": 8, "eval_long_length": 16}, {"n_layers": 2}),
}


def flat_run(tmp_path, tiny, name: str):
    """The run of FLAT[name] probed at its checkpoints, its held-out loss made flat: nothing forms and
    the loss never drops."""
    task, model = FLAT[name]
    data = tiny(task, model, {"steps": 2, "checkpoints": 3, "eval_every": 1, "lr": 1e-9})
    run = load_run(train_run(parse_config(data), tmp_path / "run", progress=False))
    tl = timeline.probe_run(run, batch_size=16)
    tl.loss = [2.0] * len(tl.steps)
    tl.loss_drop_step = steepest_drop(tl.steps, tl.loss)
    return run, tl


@pytest.mark.parametrize("name", FLAT)
def test_no_summary_line_says_none_or_nan_when_nothing_forms_and_the_loss_never_drops(name, tmp_path, tiny):
    run, tl = flat_run(tmp_path, tiny, name)
    assert len(tl.steps) >= 2 and tl.loss_drop_step is None and not tl.formed(), tl.formation
    assert any(p.summary is not None for p in timeline.shown_probes(tl)), "a probe of this task speaks for itself"
    lines = summary(tl, run.task)
    assert lines[0] == "loss never falls over the probed checkpoints (no drop across a 1.5-fold span of steps)"
    bad = [line for line in lines if MISSING.search(line)]
    assert len(lines) >= 3 and not bad, bad


@pytest.mark.slow
def test_the_report_says_not_reached_where_nothing_formed(tmp_path, tiny):
    run, tl = flat_run(tmp_path, tiny, "markov_icl")
    timeline.save(tl, run.path)  # the report reads this timeline rather than probing again
    page = report.build(run.path).html
    cells = re.findall(r"<td>([^<]*)</td>", page)
    assert "not reached" in cells and not [c for c in cells if MISSING.fullmatch(c.strip())], cells
    box = re.search(r'<section id="summary">.*?<pre>(.*?)</pre>', page, re.S).group(1)
    assert "loss never falls" in box and not MISSING.search(box), box


def test_the_sweep_table_says_not_reached_where_no_seed_converged(tmp_path, capsys):
    from test_cli import GOOD, write

    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'base = "{write(tmp_path, GOOD)}"\n[sweep]\nseeds = [0]\n')  # 4 steps: never at acc 0.99
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "sweep"), "--workers", "1"]) == 0
    capsys.readouterr()
    assert main(["sweep-report", str(tmp_path / "sweep")]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("runs  converged  conv_step median [q25, q75]") and "not reached" in table[1], table
    assert not [line for line in table if MISSING.search(line)], table


def test_no_loss_at_all_is_said_so():
    tl = Timeline([0, 10, 100], [None, None, None], {}, {}, {}, None)
    assert summary(tl)[0] == "loss not measured at the probed checkpoints: no loss drop to show"


# ---- descriptions in `mechsynth tasks` and `mechsynth probes` ---------------------------------------------


def test_a_sentence_ends_at_its_full_stop_not_at_an_abbreviation():
    assert (
        first_sentence('Automata (Liu et al. 2023, "Shortcuts"). More here.')
        == 'Automata (Liu et al. 2023, "Shortcuts").'
    )
    assert first_sentence("Stages as Edelman et al. find them. Then more.") == "Stages as Edelman et al. find them."
    assert first_sentence("Reads e.g. The Pile and i.e. Books. Next one.") == "Reads e.g. The Pile and i.e. Books."
    assert first_sentence("Can it be read back? (Liu 2022.)\n\nSecond paragraph.") == "Can it be read back?"
    assert first_sentence("A first paragraph\nover two lines:\n\nthe second.") == "A first paragraph over two lines."


@pytest.mark.parametrize("command", ["tasks", "probes"])
def test_every_description_is_a_whole_sentence(command, capsys):
    assert main([command, "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table
    for name, info in table.items():
        doc = info["doc"]
        # a question is a whole sentence too (hmm_masked asks which masked tasks reveal the HMM)
        assert doc.endswith((".", "?")) and not doc.endswith(("et al.", "e.g.", "i.e.")), (name, doc)
        assert doc.count("(") == doc.count(")") and doc.count('"') % 2 == 0, (name, doc)
    if command == "tasks":  # cut at "et al." before: "Automata (Liu et al."
        assert table["automata"]["doc"] == 'Automata (Liu et al. 2023, "Transformers learn shortcuts to automata").'
        assert table["markov_icl"]["doc"] == (
            "In-context Markov chains (Edelman et al. 2024): each sequence has its own transition matrix."
        )


def test_every_probe_has_its_own_description(capsys):
    assert main(["probes", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    docs = {name: info["doc"] for name, info in table.items()}
    assert len(set(docs.values())) == len(docs) == len(probes.names()), docs
    assert docs["fact_storage"].startswith("Where a model stores its facts")
    assert docs["answer_type"].startswith("Whether a model learns the answer's type before the fact")
    assert all(info["truth"] == list(probes.PROBES.get(name).truth) for name, info in table.items())
    assert main(["probes"]) == 0
    text = capsys.readouterr().out
    assert f"fact_storage: {docs['fact_storage']} [reads truth {', '.join(table['fact_storage']['truth'])}]" in text
    assert f"llc: {docs['llc']} [reads no truth; runs only when named]" in text


# ---- stages between predictors the model cannot tell apart ----------------------------------------------


def test_the_probe_measures_how_far_apart_the_predictors_are():
    """apart/<a>/<b> is the symmetric KL between the task's reference predictors on the probe's batch,
    computed here with torch's own KL."""
    task = tasks.make("markov_icl", {"k": 3, "length": 32, "alpha": 0.5})
    model = PredictorModel(task, "bayes")
    result = probes.run("icl_strategy", model, task, batch_size=16)
    truth = probes.draw("data", model, task, 16, 0).truth
    for a, b in [("uniform", "unigram"), ("ngram", "bayes"), ("unigram", "bayes")]:
        p, q = truth[a], truth[b]
        kl = lambda x, y: torch.nn.functional.kl_div(y.log(), x, reduction="none").sum(-1).mean()  # noqa: E731 KL(x ‖ y)
        assert result.metrics[f"apart/{a}/{b}"] == pytest.approx(float(kl(p, q) + kl(q, p)) / 2, rel=1e-4)
    assert result.metrics["apart/ngram/bayes"] > 1e-3  # at alpha 0.5 they differ: the model is Bayes alone
    assert stages(
        Timeline(
            [0],
            [1.0],
            {"icl_strategy": {}},
            {"icl_strategy": {k: [v] for k, v in result.metrics.items()}},
            {"icl_strategy": {}},
        )
    ) == [("bayes", 0)]


def strategy_timeline(kl_ngram: list[float], kl_bayes: list[float], apart: float | None) -> Timeline:
    n = len(kl_ngram)
    m = {
        "kl/uniform": [1.0] * n,
        "kl/unigram": [0.5] * n,
        "kl/ngram": kl_ngram,
        "kl/bayes": kl_bayes,
        "stage": [2.0 if a <= b else 3.0 for a, b in zip(kl_ngram, kl_bayes)],
    }
    if apart is not None:
        m |= {
            f"apart/{a}/{b}": [0.3] * n
            for a, b in [
                ("uniform", "unigram"),
                ("uniform", "ngram"),
                ("uniform", "bayes"),
                ("unigram", "ngram"),
                ("unigram", "bayes"),
            ]
        }
        m["apart/ngram/bayes"] = [apart] * n
    return Timeline(
        list(range(0, 10 * n, 10)), [1.0] * n, {"icl_strategy": {}}, {"icl_strategy": m}, {"icl_strategy": {}}
    )


def test_predictors_closer_together_than_the_model_is_to_either_are_one_stage():
    # the demo's numbers: n-gram and Bayes 0.0017 apart, the model about 0.02 from each, nearer one or the other
    near_n, near_b = [0.0239, 0.0194, 0.0169, 0.0180], [0.0243, 0.0190, 0.0170, 0.0179]
    tl = strategy_timeline(near_n, near_b, 0.0017)
    assert stages(tl) == [("ngram≈bayes", 0)]
    line = probes.PROBES.get("icl_strategy").summary(tl, None)
    assert line == [
        "icl_strategy     stages: ngram≈bayes (step 0); ngram≈bayes: closer to each other than the model is to either"
    ]
    # a model that comes closer to Bayes than the n-gram estimate is to it has left the n-gram: a stage of its own
    tl = strategy_timeline(near_n + [0.0030], near_b + [0.0010], 0.0017)
    assert stages(tl) == [("ngram≈bayes", 0), ("bayes", 40)]
    # a timeline probed before the distances were recorded keeps what it measured: the nearest alone
    tl = strategy_timeline(near_n, near_b, None)
    assert stages(tl) == [("ngram", 0), ("bayes", 10), ("ngram", 20), ("bayes", 30)]
