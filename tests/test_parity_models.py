"""The scalar parity models of Barak et al. 2022 (the `sin` and `polynet` kinds), the MLP's sparse init,
and the support-free hidden-progress measure: each against a hand computation or a planted answer."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math

import pytest
import torch

from mechsynth import models, probes, tasks
from mechsynth.errors import ConfigError
from mechsynth.models import MLPConfig, build
from mechsynth.models.polynet import PolyNetConfig
from mechsynth.models.sin import SinConfig
from mechsynth.tasks.base import TaskSpec
from mechsynth.tasks.sparse_parity import parity_labels

# 3 bits then a readout; token 0 is the bit value +1, token 1 is −1 (sparse_parity's ±1 encoding)
SPEC3 = TaskSpec(3, 2, 4, ("+1", "-1", "?"), ("+1", "-1"), token_values=(1.0, -1.0, 0.0))


def set_weights(model, W, b=None):
    with torch.no_grad():
        model.W_in.copy_(torch.tensor(W))
        if b is not None:
            model.b_in.copy_(torch.tensor(b))
    return model


def all_inputs(n: int) -> torch.Tensor:
    """Every n-bit input as tokens, with the readout token (2) last: [2**n, n + 1]."""
    bits = torch.tensor(list(itertools.product([0, 1], repeat=n)))
    return torch.cat([bits, torch.full((len(bits), 1), 2)], 1)


def test_sin_neuron_forward_by_hand():
    model = set_weights(build(SinConfig(), SPEC3), [[0.5], [-1.0], [2.0]])
    tokens = torch.tensor([[0, 1, 1, 2], [1, 0, 0, 2], [0, 0, 0, 2]])  # x = (1,-1,-1), (-1,1,1), (1,1,1)
    f = [math.sin(0.5 + 1.0 - 2.0), math.sin(-0.5 - 1.0 + 2.0), math.sin(0.5 - 1.0 + 2.0)]
    want = torch.tensor([[[v / 2, -v / 2]] for v in f])
    torch.testing.assert_close(model(tokens), want)
    with_bias = set_weights(build(SinConfig(bias=True), SPEC3), [[0.5], [-1.0], [2.0]], [0.25])
    torch.testing.assert_close(with_bias(tokens[:1])[0, 0, 0], torch.tensor(math.sin(-0.5 + 0.25) / 2))


def test_polynet_forward_by_hand():
    model = set_weights(build(PolyNetConfig(degree=2), SPEC3), [[1.0, 0.5], [2.0, -1.0], [0.0, 3.0]])
    tokens = torch.tensor([[0, 1, 1, 2], [0, 0, 0, 2]])  # x = (1,-1,-1), (1,1,1)
    f = [(1 - 2 + 0) * (0.5 + 1 - 3), (1 + 2 + 0) * (0.5 - 1 + 3)]  # (w1·x)(w2·x)
    torch.testing.assert_close(model(tokens), torch.tensor([[[v / 2, -v / 2]] for v in f]))
    _, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(cache["hook_pre"], torch.tensor([[-1.0, -1.5], [3.0, 2.5]]))
    torch.testing.assert_close(cache["hook_out"], torch.tensor(f))
    with_bias = set_weights(
        build(PolyNetConfig(degree=2, bias=True), SPEC3), [[1.0, 0.5], [2.0, -1.0], [0.0, 3.0]], [2.0, -0.5]
    )
    torch.testing.assert_close(with_bias(tokens[:1])[0, 0, 0], torch.tensor((1 - 2 + 2) * (0.5 + 1 - 3 - 0.5) / 2))


@pytest.mark.parametrize("kind", ["sin", "polynet"])
@pytest.mark.parametrize("k", [2, 3])
def test_the_planted_solution_answers_every_input_with_the_tasks_label(kind, k):
    """The weights the module docstrings name represent the parity exactly: argmax of the logits is the
    task's own label on all 2**n inputs (which also pins which logit is which class)."""
    task = tasks.make("sparse_parity", {"n": 6, "k": k, "seed": 3})
    S = task.support.tolist()
    n = task.cfg.n
    if kind == "sin":  # sin((π/2) Σ_S x) = ±parity for odd k; a bias π/2 turns it into a cosine for even k
        cfg = SinConfig(bias=k % 2 == 0)
        W = torch.zeros(n, 1)
        W[S, 0] = math.pi / 2 * (-1 if k % 4 == 3 else 1)  # the sign that makes f = +parity
        b = [math.pi / 2 * (1 if k % 4 == 0 else -1)] if cfg.bias else None
    else:
        cfg = PolyNetConfig(degree=k)
        W, b = torch.zeros(n, k), None
        W[S, range(k)] = 1.0  # form i reads bit S[i]
    model = set_weights(build(cfg, task.spec), W.tolist(), b)
    tokens = all_inputs(n)
    logits = model(tokens)[:, 0]
    labels = parity_labels(tokens[:, :n], task.support)
    assert torch.equal(logits.argmax(-1), labels)
    # |f| = 1 everywhere: the margin the logistic loss sees is exactly ±1
    torch.testing.assert_close((logits[:, 0] - logits[:, 1]).abs(), torch.ones(len(tokens)), atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "cfg",
    [
        SinConfig(init_seed=5),
        SinConfig(bias=True, init_seed=5),
        PolyNetConfig(init_seed=5),
        PolyNetConfig(degree=2, bias=True, init_range=0.3, init_seed=5),
        MLPConfig(width=8, init_sparsity=3, init_seed=5),
    ],
    ids=str,
)
def test_side_by_side_models_equal_separate_ones(cfg):
    spec = TaskSpec(3, 2, 9, ("+1", "-1", "?"), ("+1", "-1"), token_values=(1.0, -1.0, 0.0))
    stacked = build(cfg, spec, n_models=3)
    singles = [build(dataclasses.replace(cfg, init_seed=5 + i), spec) for i in range(3)]
    for name, p in stacked.named_parameters():
        assert all(torch.equal(p[i], s.get_parameter(name)) for i, s in enumerate(singles)), name
    g = torch.Generator().manual_seed(2)
    shared = torch.randint(0, 2, (4, spec.n_ctx), generator=g)
    own = torch.randint(0, 2, (3, 4, spec.n_ctx), generator=g)
    logits, cache = stacked.run_with_cache(shared)
    for i, s in enumerate(singles):
        ref_logits, ref = s.run_with_cache(shared)
        torch.testing.assert_close(logits[i], ref_logits)
        torch.testing.assert_close(cache["hook_pre"][4 * i : 4 * (i + 1)], ref["hook_pre"])
    out = stacked(own)
    for i, s in enumerate(singles):
        torch.testing.assert_close(out[i], s(own[i]))


@pytest.mark.parametrize(
    "table, task, field, message",
    [
        ({"kind": "polynet", "degree": 0}, None, "model.degree", "must be ≥ 1"),
        ({"kind": "polynet", "degree": 65}, None, "model.degree", "must be ≤ 64"),
        ({"kind": "sin", "init_range": -1.0}, None, "model.init_range", "must be > 0"),
        ({"kind": "sin", "degree": 3}, None, "model.degree", "is a field of kinds 'neuron', 'polynet', not 'sin'"),
        ({"kind": "polynet", "width": 3}, None, "model.width", "is a field of kind 'mlp', not 'polynet'"),
        ({"kind": "sin"}, ("markov_icl", {"k": 3, "length": 16}), "model.kind", "needs a task with numeric inputs"),
        ({"kind": "polynet"}, ("automata", {"automaton": "parity", "length": 8}), "model.kind", "numeric inputs"),
        ({"kind": "mlp", "init_sparsity": 0}, None, "model.init_sparsity", "must be ≥ 1"),
        (
            {"kind": "mlp", "init_sparsity": 7},
            ("sparse_parity", {"n": 6, "k": 2}),
            "model.init_sparsity",
            "allowed: 1 to 6",
        ),
    ],
)
def test_config_errors_name_the_field(table, task, field, message):
    with pytest.raises(ConfigError) as e:
        cfg = models.parse(table)
        if task:
            build(cfg, tasks.make(*task).spec)
    assert e.value.field == field and message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_two_class_outputs_only():
    spec = TaskSpec(3, 3, 4, ("a", "b", "?"), ("a", "b", "c"), token_values=(1.0, -1.0, 0.0))
    with pytest.raises(ConfigError, match="^model.kind: 'sin' predicts one number"):
        build(SinConfig(), spec)


# ---- sparse init ("lottery tickets") -------------------------------------------------------------------


def test_sparse_init_gives_each_unit_s_uniformly_chosen_inputs():
    n, s, width = 10, 3, 20000
    spec = TaskSpec(3, 2, n + 1, ("+1", "-1", "?"), ("+1", "-1"), token_values=(1.0, -1.0, 0.0))
    W = build(MLPConfig(width=width, init_sparsity=s, init_seed=1), spec).W_in.detach()
    nonzero = W != 0
    assert torch.equal(nonzero.sum(0), torch.full((width,), s))
    assert W.abs().max() <= 1 / math.sqrt(s) and W.abs().max() > 0.99 / math.sqrt(s)  # fan_in s
    # Each 3-subset is a unit's subset with probability 1 / C(10, 3): the units whose subset is exactly
    # {0, 1, 2} (a planted support) number width / 120 on average, binomially spread.
    hits = int(nonzero[:3].all(0).sum())
    mean, sd = width / math.comb(n, s), math.sqrt(width / math.comb(n, s) * (1 - 1 / math.comb(n, s)))
    assert abs(hits - mean) < 4 * sd, (hits, mean)
    # every input is used about equally: s / n of the units each
    per_input = nonzero.float().mean(1)
    assert (per_input - s / n).abs().max() < 0.02, per_input
    # a dense init (unset) is the unchanged default
    dense = build(MLPConfig(width=8, init_seed=1), spec).W_in
    assert bool((dense != 0).all())


# ---- the support-free progress measure ----------------------------------------------------------------


def test_topk_drift_ratio_uses_the_top_rows_not_the_support():
    """A decoy bit outside S moves more than one bit of S: the oracle ratio counts the decoy among the
    rest, the support-free one among the top k; both as computed by hand."""
    task = tasks.make("sparse_parity", {"n": 10, "k": 3, "seed": 2})
    S = task.support.tolist()
    decoy = next(i for i in range(10) if i not in S)
    for cfg in (MLPConfig(width=16), SinConfig(), PolyNetConfig()):
        init = build(cfg, task.spec)
        model = copy.deepcopy(init)
        with torch.no_grad():
            model.W_in[:10] += 0.01
            model.W_in[S[:2], 0] += 0.5
            model.W_in[decoy, 0] += 0.3
        m = probes.run("hidden_progress", model, task, init=init).metrics
        top, rest = (0.51 + 0.51 + 0.31) / 3, 0.01
        on, off = (0.51 + 0.51 + 0.01) / 3, (0.31 + 6 * 0.01) / 7
        assert abs(m["topk_drift_ratio"] - top / rest) < 1e-3 * top / rest, (cfg, m)
        assert abs(m["drift_ratio"] - on / off) < 1e-3 * on / off, (cfg, m)
        assert m["support_recovered"] == 0.0
        assert probes.run("hidden_progress", init, task, init=init).metrics["topk_drift_ratio"] == 1.0


# ---- the experiment's width × samples summary, on planted cells ------------------------------------------


def _experiment():
    from experiments import sparse_parity_hidden_progress

    return sparse_parity_hidden_progress


def test_wilson_interval_known_values():
    wilson = _experiment().wilson
    assert wilson(0, 10)[0] == 0 and abs(wilson(0, 10)[1] - 0.2775) < 1e-4
    lo, hi = wilson(5, 10)
    assert abs(lo - 0.2366) < 1e-4 and abs(hi - 0.7634) < 1e-4


def test_width_samples_summary_counts_cells_and_states_the_claim():
    """Planted outcomes: width 10 converges only online, width 100 from 1000 samples on (half of the
    runs at 100 samples), the sparse width-100 row from 100 samples: the table, the smallest training
    set with half converged, and the claim's two conditions follow by hand."""
    module = _experiment()
    grid = dict(
        n=8, k=3, widths=[10, 100], sparse=dict(widths=[100], s=3), samples=[100, 1000, None], data=2, seeds=2, cap=500
    )
    wins = {
        ("10", "dense", "online"): 4,
        ("100", "dense", "100"): 2,
        ("100", "dense", "1000"): 4,
        ("100", "dense", "online"): 4,
        ("100", "s3", "100"): 4,
        ("100", "s3", "1000"): 4,
        ("100", "s3", "online"): 3,
    }
    cells = []
    for _, w, sparsity in module.grid_rows(grid):
        for m in grid["samples"]:
            won = wins.get((str(w), module.init_label(sparsity), module.samples_label(m)), 0)
            for d in range(2):
                first = min(2, max(0, won - 2 * d))  # data set 0 takes the first two wins
                cells.append(
                    {
                        "labels": {
                            "width": w,
                            "init": module.init_label(sparsity),
                            "samples": module.samples_label(m),
                            "data": d,
                        },
                        "converged_at": {s: (100 if s < first else None) for s in range(2)},
                    }
                )
    out = module.grid_summary(cells, grid)
    assert out["rows"] == ["10", "100", "100, sparse 3"]
    assert [out["table"]["100"][m]["percent"] for m in ("100", "1000", "online")] == [50.0, 100.0, 100.0]
    assert out["table"]["100"]["100"]["by_data_set"] == [2, 0] and out["table"]["10"]["online"]["converged"] == 4
    assert out["samples_for_half_converged"] == {"10": None, "100": 100}
    assert out["wider_is_more_sample_efficient"] == {
        "never_worse_with_width": True,
        "widest_beats_narrowest": True,
        "ranks": [2, 0],
    }
    assert out["sparse_minus_dense_percent"] == {"100, sparse 3": {"100": 50.0, "1000": 0.0, "online": -25.0}}


def test_prediction_rewards_a_measure_that_crosses_at_a_fixed_fraction():
    """A measure crossing at 80 % of each run's convergence predicts every held-out seed exactly; one
    crossing at the same step in every run does no better than the other seeds' median."""
    module = _experiment()
    runs = []
    for conv in (1000, 2000, 4000, 3000):
        steps = list(range(0, 5001, 100))
        r = {
            "converged_at": conv,
            "steps": steps,
            "loss": [0.69] * len(steps),
            "drift_inf": [s / 100 for s in steps],
            "drift_ratio": [1 + s / conv for s in steps],
            "topk_drift_ratio": [2.0] * len(steps),
        }
        for m in module.MEASURES:
            for th in module.THRESHOLDS:
                r[f"{m}_{th}_at"] = int(0.8 * conv) if m == "drift_ratio" else 100
                r[f"loss_at_{m}_{th}"] = 0.69
        runs.append(r)
    out = module.prediction(runs)
    assert out["drift_ratio_2.0"]["predicted_error_factor"]["max"] == 1.0
    assert out["topk_drift_ratio_2.0"]["predicted_error_factor"] == out["naive_median_error_factor"]
    assert out["naive_median_error_factor"]["max"] > 1.5
    assert out["fixed_step"]["step"] == 500 and abs(out["fixed_step"]["spearman_drift_ratio_vs_steps_left"] + 1) < 1e-9
