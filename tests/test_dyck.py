"""Bounded Dyck (tasks/bounded_dyck.py) and the dyck_balance probe: the generator against a stack machine walked
one sequence and one bracket at a time, the metrics against a count by hand, the balance violation against a
loop-by-loop implementation of its definition, and a trained run that every applicable probe reads."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from mechsynth import hooks, load_run, models, parse_config, probes, tasks, train_run
from mechsynth.analysis import timeline
from mechsynth.errors import ConfigError
from mechsynth.tasks.base import latent_values


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def reference_walk(u: list[float], types: list[int], k: int, D: int) -> list[int]:
    """One sequence of the walk from its draws, a Python list as the stack: empty -> an open of the drawn type;
    full -> the close of the top; else the close of the top when the draw is below 1/2, the open otherwise."""
    stack, out = [], []
    for x, t in zip(u, types):
        if stack and (len(stack) == D or x < 0.5):
            out.append(k + stack.pop())
        else:
            stack.append(t)
            out.append(t)
    return out


def stack_walk(tokens: list[int], k: int) -> tuple[list[int], list[int]]:
    """(depth after each token, position of the open on top of the stack or −1) along one input sequence
    (START first), with no knowledge of the generator; asserts every close matches its open."""
    stack, depth, match = [], [], []
    for p, x in enumerate(tokens):
        if x < k:
            stack.append((x, p))
        elif x < 2 * k:
            assert stack and stack[-1][0] == x - k, (tokens, p)
            stack.pop()
        else:
            assert p == 0, "START only first"
        depth.append(len(stack))
        match.append(stack[-1][1] if stack else -1)
    return depth, match


@pytest.mark.reference("bounded_dyck")
@pytest.mark.parametrize("split", ["train", "eval_long"])
def test_the_walk_is_a_stack_machine_fed_the_same_draws(split):
    """Bit for bit: the task's draws (uniforms, then types), replayed through reference_walk per sequence."""
    task = tasks.make("bounded_dyck", {"k": 3, "depth": 3, "length": 20, "eval_long_length": 50})
    n = 50 if split == "eval_long" else 20
    b = task.sample(64, gen(5), split=split)
    g = gen(5)
    u, types = torch.rand(64, n, generator=g), torch.randint(3, (64, n), generator=g)
    for row in range(64):
        seq = reference_walk(u[row].tolist(), types[row].tolist(), 3, 3)
        assert b.targets[row].tolist() == seq and b.tokens[row].tolist() == [6] + seq[:-1]
    again = task.sample(64, gen(5), split=split)
    tensors = lambda batch: (batch.tokens, batch.targets, batch.mask, *batch.truth.values())  # noqa: E731
    assert all(torch.equal(x, y) for x, y in zip(tensors(b), tensors(again)))


@pytest.mark.reference("bounded_dyck")
@pytest.mark.parametrize("k, D", [(2, 4), (3, 2)])
def test_sequences_are_bounded_dyck_prefixes_drawn_as_defined(k, D):
    """Every sequence a valid prefix of depth ≤ D; the truth as a stack walk finds it; the scored targets the closes.
    Transitions within 5 standard errors: at depth 0 always an open, at depth D always a close, in between an open
    half the time; opens uniform over the types at every depth."""
    task = tasks.make("bounded_dyck", {"k": k, "depth": D, "length": 30})
    b = task.sample(2000, gen(1), split="eval")
    opens = closes = 0
    type_counts = [0] * k
    for row, (tokens, targets) in enumerate(zip(b.tokens.tolist(), b.targets.tolist())):
        whole = tokens + targets[-1:]
        depth, match = stack_walk(whole, k)
        assert max(depth) <= D and whole[0] == 2 * k
        assert b.truth["depth"][row].tolist() == depth[:-1] and b.truth["match"][row].tolist() == match[:-1]
        assert b.mask[row].tolist() == [t >= k for t in targets]
        for before, nxt in zip(depth[:-1], targets):
            if before == 0:
                assert nxt < k
            elif before == D:
                assert nxt >= k
            else:
                opens, closes = opens + (nxt < k), closes + (nxt >= k)
            if nxt < k:
                type_counts[nxt] += 1
    n = opens + closes
    assert abs(opens / n - 0.5) <= 5 * math.sqrt(0.25 / n), (opens, closes)
    total = sum(type_counts)
    for c in type_counts:
        assert abs(c / total - 1 / k) <= 5 * math.sqrt((1 / k) * (1 - 1 / k) / total) + 1e-12, type_counts


def test_sizes_splits_and_what_is_scored():
    task = tasks.make("bounded_dyck", {"k": 2, "depth": 3, "length": 12, "eval_long_length": 40})
    spec = task.spec
    assert (spec.d_vocab, spec.d_vocab_out, spec.n_ctx) == (5, 4, 40) and spec.token_names[-1] == "START"
    assert [task.sample(3, gen(), split=s).tokens.shape[1] for s in task.splits] == [12, 12, 40]
    every = tasks.make("bounded_dyck", {"length": 12, "loss_on": "all"})
    assert every.sample(8, gen(2)).mask.all()
    held_out = every.sample(8, gen(2), split="eval")
    assert torch.equal(held_out.mask, held_out.targets >= 2)  # held-out splits score the closes
    assert tuple(held_out.truth) == task.truth_keys


def test_close_acc_is_yaos_rule():
    """1 for logits that put the mass on the right close, 0 for uniform logits (share 1/k ≤ 0.8), and on random
    logits the share of stack-non-empty positions whose right close has more than 0.8 of the closes' softmax."""
    k = 3
    task = tasks.make("bounded_dyck", {"k": k, "depth": 4, "length": 24})
    b = task.sample(300, gen(3), split="eval")
    right = torch.where(b.truth["match"] >= 0, b.tokens.gather(1, b.truth["match"].clamp_min(0)) + k, 0)
    perfect = 10 * F.one_hot(right, 2 * k).float()
    assert task.metrics(perfect, b)["close_acc"] == 1.0
    assert task.metrics(torch.zeros(*b.tokens.shape, 2 * k), b)["close_acc"] == 0.0
    logits = 3 * torch.randn(*b.tokens.shape, 2 * k, generator=gen(4))
    good = scored = 0
    for row in range(len(b.tokens)):
        for p in range(b.tokens.shape[1]):
            m = int(b.truth["match"][row, p])
            if m < 0:
                continue
            closes = [math.exp(float(logits[row, p, k + t])) for t in range(k)]
            good += closes[int(b.tokens[row, m])] / sum(closes) > 0.8
            scored += 1
    assert task.metrics(logits, b)["close_acc"] == pytest.approx(good / scored) and 0.05 < good / scored < 0.95


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("eval_long_length", 10, "≥ length"),
        ("k", 0, "task.k"),
        ("depth", 0, "task.depth"),
        ("loss_on", "opens", "loss_on"),
    ],
)
def test_bad_config_names_the_field(field, value, says):
    with pytest.raises(ConfigError) as e:
        tasks.make("bounded_dyck", {"length": 12, field: value})
    assert f"task.{field}" in str(e.value) and says in str(e.value)


# ---- dyck_balance against its definition, one class and one query at a time ------------------------------


def reference_balance(model, batch, k: int, D: int) -> dict[str, float]:
    """BV per head and per layer (heads summed) from each layer's input — the residual stream through ln1's
    LayerNorm, not the probe's q/k/v hooks — averaged per (token, depth) class by a loop over positions, then the
    definition with explicit softmaxes, pairs and stacks."""
    _, cache = model.run_with_cache(batch.tokens)
    out = {}
    o = lambda t, d: ("o", t, d)  # noqa: E731
    c = lambda t, d: ("c", t, d)  # noqa: E731
    for layer in range(model.cfg.n_layers):
        x = cache[hooks.resid_pre(layer)]
        ln = model.blocks[layer].ln1
        x = F.layer_norm(x, (x.shape[-1],), ln.w, ln.b, eps=1e-5)
        rows: dict = {}
        for b in range(len(batch.tokens)):
            for p in range(batch.tokens.shape[1]):
                tok, dep = int(batch.tokens[b, p]), int(batch.truth["depth"][b, p])
                name = "S" if tok == 2 * k else o(tok, dep) if tok < k else c(tok - k, dep + 1)
                rows.setdefault(name, []).append(x[b, p])
        e = {name: torch.stack(v).mean(0) for name, v in rows.items()}
        a = model.blocks[layer].attn
        weighted = []  # per head: {query: {key: A(q, key) P u(key)}}
        for h in range(model.cfg.n_heads):
            qs = {n: v @ a.W_Q[h] + a.b_Q[h] for n, v in e.items()}
            ks = {n: v @ a.W_K[h] + a.b_K[h] for n, v in e.items()}
            us = {n: (v @ a.W_V[h] + a.b_V[h]) @ a.W_O[h] for n, v in e.items()}
            w = {}
            for q in e:
                z = sum(math.exp(float(qs[q] @ ks[n]) / math.sqrt(a.W_Q.shape[-1])) for n in e)
                w[q] = {
                    n: math.exp(float(qs[q] @ ks[n]) / math.sqrt(a.W_Q.shape[-1])) / z * (us[n] - us[n].mean())
                    for n in e
                }
            weighted.append(w)
        summed = {q: {n: sum(w[q][n] for w in weighted) for n in e} for q in e}
        for label, w in [
            *((hooks.head_label(layer, h), weighted[h]) for h in range(len(weighted))),
            (f"L{layer}", summed),
        ]:
            ratios = []
            for t1, d1 in itertools.product(range(k), range(1, D + 1)):
                q = c(t1, d1)
                if q not in e:
                    continue
                get = lambda n: w[q].get(n, torch.zeros_like(w[q]["S"]))  # noqa: E731  (an unseen class adds nothing)
                num = max(
                    float((get(o(t, d)) + get(c(t, d))).norm())
                    for t in range(k)
                    for d in range(1, D + 1)
                    if o(t, d) in e and c(t, d) in e
                )
                den = min(
                    float(
                        (
                            get("S")
                            + get(o(t1, d1))
                            + get(q)
                            + sum((get(o(tau[j], j + 1)) for j in range(d1 - 1)), torch.zeros_like(get("S")))
                        ).norm()
                    )
                    for tau in itertools.product(range(k), repeat=d1 - 1)
                )
                ratios.append(num / den)
            out[f"bv/{label}"] = sum(ratios) / len(ratios)
    return out


def test_balance_violation_is_its_definition_on_a_random_model():
    """A random 2-layer model with LayerNorm, 2 heads (the second layer's classes differ by depth): every head's and
    layer's BV as the reference finds it, on the fused model and on TransformerLens's with the same weights; the
    matching-open mass as attention gathered one query at a time."""
    task = tasks.make("bounded_dyck", {"k": 2, "depth": 3, "length": 16, "eval_long_length": 16})
    cfg = models.TransformerConfig(n_layers=2, n_heads=2, d_model=12, init_seed=3, init_range=0.5)
    fused = models.build(cfg, task.spec).eval()
    batch = probes.draw("data", fused, task, 32, 0)
    with torch.no_grad():
        want = reference_balance(fused, batch, 2, 3)
        got = probes.run("dyck_balance", fused, task, batch_size=32).metrics
        hooked = probes.run("dyck_balance", models.hooked(fused), task, batch_size=32).metrics
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-4) and hooked[key] == pytest.approx(value, rel=1e-3), key
    assert got["bv"] == got["bv/L1"] and all(v > 0.01 for v in want.values())
    _, cache = fused.run_with_cache(batch.tokens)
    for layer, head in itertools.product(range(2), range(2)):
        pattern = cache[hooks.attn_pattern(layer)][:, head]
        masses = [
            float(pattern[b, p, m]) for b in range(32) for p, m in enumerate(batch.truth["match"][b].tolist()) if m >= 0
        ]
        assert got[f"match_mass/L{layer}H{head}"] == pytest.approx(sum(masses) / len(masses), rel=1e-5)


# ---- a trained run ----------------------------------------------------------------------------------------


def test_bounded_dyck_trains_and_its_probes_run_on_every_checkpoint(tmp_path, tiny):
    cfg = tiny(
        {"name": "bounded_dyck", "length": 12, "eval_long_length": 24},
        {"n_layers": 2, "d_model": 16},
        {"steps": 30, "checkpoints": 3, "eval_every": 10},
    )
    run = load_run(train_run(parse_config(cfg), tmp_path / "run", progress=False))
    metrics = run.meta(run.steps[-1])["metrics"]
    assert {"eval/close_acc", "eval_long/close_acc", "eval/loss"} <= set(metrics)
    names = timeline.applicable(run)
    assert "dyck_balance" in names
    tl = timeline.probe_run(run, names, batch_size=16)
    m = tl.metrics["dyck_balance"]
    assert len(m["bv"]) == len(run.steps) and all(math.isfinite(v) and v >= 0 for v in m["bv"])


# ---- Wen et al.'s contrastive regulariser ---------------------------------------------------------------


def reference_prefix(block: int, d: int, k: int, D: int) -> list[int]:
    """Their construction, written out: D opens and D closes of type 0, then of type 1, with one more pair of the
    block's type after the block's d-th open."""
    out = []
    for j, t in enumerate((0, min(1, k - 1))):
        opens = [t] * D
        if j == block:
            opens[d:d] = [t, k + t]
        out += opens + [k + t] * D
    return out


@pytest.mark.parametrize("k, D", [(2, 4), (1, 3), (3, 2)])
def test_balanced_prefix_is_their_string_and_balanced(k, D):
    from mechsynth.tasks.bounded_dyck import balanced_prefix

    rows = balanced_prefix(400, k, D, gen(5), "cpu").tolist()
    allowed = {tuple(reference_prefix(b, d, k, D)) for b in range(2) for d in range(D)}
    assert {tuple(r) for r in rows} == allowed  # every (block, d) drawn, nothing else
    for r in rows:
        depths, _ = stack_walk(r, k)  # raises on a wrong close
        assert len(r) == 4 * D + 2 and depths[-1] == 0 and max(depths) == D


def test_contrastive_term_is_the_prefixed_logits_mse_and_leaves_sampling_alone():
    on = tasks.make("bounded_dyck", {"length": 12, "eval_long_length": 40, "contrastive": 0.3})
    off = tasks.make("bounded_dyck", {"length": 12, "eval_long_length": 40})
    b_on, b_off = on.sample(16, gen(6)), off.sample(16, gen(6))
    assert torch.equal(b_on.tokens, b_off.tokens) and "prefix" not in b_off.truth  # the prefix is drawn last
    assert "prefix" not in on.sample(4, gen(6), split="eval").truth
    model = models.build(
        parse_config(
            {
                "task": {"name": "bounded_dyck", "length": 12, "eval_long_length": 40},
                "model": {"n_layers": 1, "d_model": 16, "positional": "none"},
            }
        ).model,
        on.spec,
    )
    logits = model(b_on.tokens)
    assert on.regularised and not off.regularised and off.regulariser(model, b_off, logits) is None
    P = b_on.truth["prefix"].shape[1]
    want = (
        sum(
            float(((model(torch.cat([b_on.truth["prefix"][i], b_on.tokens[i]])[None])[0, P:] - logits[i]) ** 2).sum())
            for i in range(16)
        )
        / logits.numel()
    )
    assert float(on.regulariser(model, b_on, logits)) == pytest.approx(0.3 * want, rel=1e-4) and want > 0
    # A model whose outputs ignore its input (all weights but the unembedding bias zero) pays nothing.
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) if name.endswith("b_U") else torch.zeros_like(p))
    assert float(on.regulariser(model, b_on, model(b_on.tokens))) == pytest.approx(0.0, abs=1e-10)


def test_contrastive_training_differs_resumes_bit_exact_and_refuses_what_it_cannot(tmp_path, tiny, ctrl_c_at):
    from mechsynth.runs import io
    from mechsynth.runs.rundir import ckpt_dir
    from mechsynth.training.train import Trainer

    task = {"name": "bounded_dyck", "length": 12, "eval_long_length": 32, "contrastive": 0.3}
    cfg = tiny(task, {"n_layers": 1, "d_model": 16, "positional": "none"}, {"steps": 12, "checkpoints": 2})
    with_it = train_run(parse_config(cfg), tmp_path / "with", progress=False)
    without = train_run(
        parse_config({**cfg, "task": {**task, "contrastive": 0.0}}), tmp_path / "without", progress=False
    )
    weights = lambda d: io.read_tensors(ckpt_dir(d, 12) / "model.safetensors")  # noqa: E731
    a, b = weights(with_it), weights(without)
    assert any(not torch.equal(a[k], b[k]) for k in a)  # the term changes training
    undo = ctrl_c_at(Trainer, 7)
    with pytest.raises(KeyboardInterrupt):
        train_run(parse_config(cfg), tmp_path / "cut", progress=False)
    undo()
    train_run(parse_config(cfg), tmp_path / "cut", resume=True, progress=False)
    c = weights(tmp_path / "cut")
    assert all(torch.equal(a[k], c[k]) for k in a)
    for change, field in (({"seeds": 2}, "train.seeds"), ({"data": "fixed", "n_train": 64}, "train.data")):
        with pytest.raises(ConfigError, match=field):
            parse_config({**cfg, "train": {**cfg["train"], **change}})
    with pytest.raises(ConfigError, match="task.eval_long_length"):
        tasks.make("bounded_dyck", {"length": 12, "eval_long_length": 20, "contrastive": 0.3})


@pytest.mark.reference("bounded_dyck")
@pytest.mark.parametrize("split", ["eval", "eval_long"])
def test_latents_match_a_slow_reference(split):
    """The depth (counted bracket by bracket) at every position, and the type of the open on top of a Python list
    stack where it is non-empty."""
    task = tasks.make("bounded_dyck", {"k": 3, "depth": 3, "length": 16, "eval_long_length": 40})
    k = task.cfg.k
    batch = task.sample(16, gen(5), split=split)
    got = latent_values(task, batch)
    assert {latent.name: latent.n_values for latent in task.latents} == {"depth": 4, "top": 3}
    for i, row in enumerate(batch.tokens.tolist()):
        depth, stack, top, nonempty = 0, [], [], []
        counted = []
        for x in row:
            if x < k:
                depth += 1
                stack.append(x)
            elif x < 2 * k:
                depth -= 1
                stack.pop()
            counted.append(depth)
            top.append(stack[-1] if stack else None)
            nonempty.append(bool(stack))
        assert got["depth"][0][i].tolist() == counted and got["depth"][1][i].all()
        assert got["top"][1][i].tolist() == nonempty
        assert [t for t, on in zip(got["top"][0][i].tolist(), nonempty) if on] == [t for t in top if t is not None]
