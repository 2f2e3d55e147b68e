"""Known circuits from tracr-compiled RASP programs: models whose circuit is exact, edge by edge, so that
every circuit-discovery method (`mechsynth.circuits`) can be scored against a right answer.

Seven RASP programs are compiled with tracr (Lindner et al. 2023) into causal transformers and written, per
program NAME, as

- mechsynth/benchmark/tracr/NAME.safetensors: the weights in TransformerLens 3's HookedTransformer layout (float32;
  `embed.W_E`, `pos_embed.W_pos`, `blocks.{l}.attn.W_Q/W_K/W_V/W_O` and biases, `blocks.{l}.mlp.W_in/W_out`
  and biases, `unembed.W_U/b_U`; no layer norm, ReLU MLPs), loadable with
  `mechsynth.models.tl_compat.hooked_transformer(TransformerConfig(**cfg), V, V_out, N, state_dict)`;
- mechsynth/benchmark/tracr/NAME.json: the program's RASP "source", the TransformerConfig fields ("config"), "V",
  "V_out", "N", the token id of each vocabulary item and of BOS ("token_ids", "bos_id"), the residual
  stream's "residual_labels", a "clean" and a "corrupted" (counterfactual) batch of 32 token-id
  sequences (BOS first, each of the program's max length, 8 tokens), the program's outputs on both per
  position ("clean_outputs", "corrupted_outputs", from `rasp.evaluate`; null at BOS and where RASP gives
  None), "outputs" (categorical: the output value of each logit), "truth": the true edges in mechsynth's
  naming (`circuits.Graph.edge_name`), "carries": the residual labels each edge carries, "inert": the
  true edges that carry nothing the output uses on the clean batch, each with the reason, and
  "informative": truth minus inert (see below).

The programs (all compile with `causal=True`; their RASP outputs at a position depend on that position
and earlier ones only, so the causal model computes them; a layer is tracr's attention then MLP, and a
head or MLP not named below is all zeros):

- frac_prevs (numerical; 2 layers, 1 head): the fraction of tokens so far that are "x"
  (lib.make_frac_prevs): MLP 0 computes is_x, head L1H0 averages it over select(indices, indices, LEQ).
  One logit, equal to the output.
- detect_pattern (categorical; 2 layers, 1 head): True where the previous token is "a" and this one "b"
  (lib.detect_pattern(tokens, "ab")): MLP 0 computes is_a and is_b, head L1H0 moves is_a one position on,
  MLP 1 ANDs it with is_b. One logit per output value (False, True).
- prev_token (categorical; 1 layer, 1 head, attention only): the previous token (lib.shift_by(1, tokens);
  None at the first): head L0H0 attends from position i to i - 1 (query and key: the positions) and
  copies the token (value). One logit per token.
- pair_balance (numerical; 2 layers, 2 heads in layer 1): the fraction of tokens so far that are "(" minus
  the fraction that are ")" (lib.make_pair_balance): MLP 0 computes is_open and is_close, heads L1H0 and
  L1H1 average them over select(indices, indices, LEQ), MLP 1 subtracts (a LinearSequenceMap). One logit.
- count_so_far (categorical; 2 layers, 1 head): how often the current token has occurred so far, itself
  included (lib.make_hist made causal): MLP 0 computes the (token, index) pair as one categorical value,
  head L1H0 is tracr's SelectorWidth attention over select(pair, pair, same token and key index <= query
  index) (its query also reads "one", its key and value BOS: it attends to BOS and the selected
  positions and writes 1/(width + 1)), MLP 1 turns that into the width. One logit per count 0..8.
- running_max (categorical; 3 layers, 2 heads in layer 1): the largest token so far (a < b < c): MLP 0
  computes is_b and is_c (numerical), heads L1H0 and L1H1 average them over select(indices, indices, LEQ),
  MLP 1 tests each average > 0 (categorical seen_b, seen_c), MLP 2 picks c, b or a. One logit per token.
- dyck2_prefix (categorical; 6 layers, 4 heads in layer 1, 2 in layer 3): True where the prefix so far is a
  balanced shuffle-Dyck-2 word over () and {} (lib.make_shuffle_dyck(["()", "{}"]) made causal: both
  balances 0 now and neither negative anywhere so far): MLP 0 computes is_( is_) is_{ is_}, heads L1H0-3
  average them over select(indices, indices, LEQ), MLP 1 subtracts into the two balances, MLP 2 computes
  per kind whether its balance is negative and whether it is not 0 (numerical, tracr's discretising MLPs;
  compiled with mlp_exactness=250, as tracr's default 100 blurs 0 with the nearest balance 1/7 - 1/8),
  heads L3H0 and L3H1 average the two negative flags over select(indices, indices, LEQ), MLP 3 adds each
  kind's average and not-0 flag, MLP 4 adds the two kinds, MLP 5 tests the sum == 0. One logit per
  output value (False, True).

The truth is structural: sender u -> receiver v is an edge of the circuit when v reads (nonzero rows of
its W_Q / W_K / W_V head slice, of W_in, of W_U) a residual dimension that u writes (nonzero columns of
its W_O head slice, of W_out, of W_E or W_pos for the input), kept only when it lies on a path to the
logits. Biases are all zero (tracr's MLPs take their offsets from a constant "one" dimension that the
token embedding writes, so that dimension is part of what the input sends).

"inert" is measured: a true edge is inert when patching it alone, exactly (as `circuits.forward.run`
patches an edge: that receiver reads that sender from the source run, everything else as it is), moves
no logit at any scored position of the clean batch, under zero ablation and under resample ablation
(the counterfactual batch) alike; it is computed here in float64 (`edge_effects`), compiling fails when
the inert edges found are not those a program's spec explains, and `--check` and tests/test_tracr_zoo.py
confirm it with mechsynth's own patching. Inert edges are those of running_max and dyck2_prefix whose
heads average over select(indices, indices, LEQ) and whose average is only ever tested for > 0 (or == 0):
the query and key carry only positions, the same in the counterfactual, and zeroed they leave a uniform
average over BOS and the whole prefix, which is > 0 exactly when the selected one is. Every other true
edge moves the metric (described at the end) by more than 1e-3 under zero or resample ablation (checked
when compiling).
Under resample ablation alone more edges have no effect (those that carry only positions, BOS or "one",
and what the counterfactual happens to keep); those are not inert.

Run (tracr brings jax, which is no dependency of mechsynth: use a venv of its own):

    python3 -m venv .venv-tracr && .venv-tracr/bin/pip install tracr-pypi torch safetensors numpy
    .venv-tracr/bin/python -m experiments.tracr_programs          # writes mechsynth/benchmark/tracr/*.{json,safetensors}
    .venv/bin/python -m experiments.tracr_programs --check        # the project's venv, no jax: see below

Either takes program names after it to do only those (`... tracr_programs.py --check running_max`).

Regenerating needs no network once installed and gives the same files bit for bit (tracr labels each
expression "name_id" from a global counter, which is reset before each program, so a program's residual
labels and their order do not depend on what was built before it; the batches come from fixed seeds).
The data files are committed so that the tests and experiments that use these circuits need neither jax
nor tracr.

`--check` (mechsynth's own venv; imports no jax) loads each model through `hooked_transformer`, checks
that it reproduces RASP's outputs on the clean batch and that the stored truth is the structural
circuit of the stored weights, and runs exact edge patching (`circuits.activation_patching`) under zero
and resample ablation, printing each true edge's effect and the largest |effect| of any other edge; it
fails unless every other edge has none (|effect| <= 1e-6), every inert edge none under either ablation,
and every informative edge more than 1e-3 under one at least (all edges of dyck2_prefix: about two minutes).
Metric: categorical, `circuits.patch_metric("logit_diff", clean, counterfactual)`; numerical, the share
of the clean-vs-counterfactual output difference kept, sum((out - y_cf)(y_clean - y_cf)) /
sum((y_clean - y_cf)^2) over the scored positions (linear in the output logit: 1 on the clean outputs,
0 on the counterfactual's), as `mechsynth.benchmark.zoo.numerical_metric` builds it.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

DATA = (
    Path(__file__).resolve().parent.parent / "mechsynth" / "benchmark" / "tracr"
)  # the zoo of mechsynth bench-circuits
MAX_SEQ_LEN = 8  # real tokens; the model's n_ctx is one more (BOS)
BATCH = 32
BOS, PAD = "compiler_bos", "compiler_pad"
INERT = 1e-9  # a true edge is inert when patching it moves no logit at a scored position by more (float64)

# Each program's RASP source, run as is (with `rasp` in scope) to build the SOp `program` that is compiled.
PROGRAMS: dict[str, dict[str, Any]] = {
    "frac_prevs": {
        "vocab": ["a", "b", "x"],
        "source": (
            '# lib.make_frac_prevs(rasp.tokens == "x"), every expression named\n'
            'is_x = rasp.numerical(rasp.Map(lambda t: t == "x", rasp.tokens)).named("is_x")\n'
            'prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ).named("prevs")\n'
            'program = rasp.numerical(rasp.Aggregate(prevs, is_x, default=0)).named("frac_prevs")\n'
        ),
        "counterfactual": "every x replaced by a or b at random (a and b kept): the output becomes 0 everywhere",
    },
    "detect_pattern": {
        "vocab": ["a", "b", "c"],
        "source": (
            '# lib.detect_pattern(rasp.tokens, "ab"), every expression named\n'
            'is_a = rasp.Map(lambda t: t == "a", rasp.tokens).named("is_a")\n'
            'is_b = rasp.Map(lambda t: t == "b", rasp.tokens).named("is_b")\n'
            'prev = rasp.Select(rasp.indices, rasp.indices, lambda k, q: q == k + 1).named("prev")\n'
            'prev_is_a = rasp.Aggregate(prev, is_a, default=None).named("prev_is_a")\n'
            'program = rasp.SequenceMap(lambda x, y: x and y, prev_is_a, is_b).named("detect_ab")\n'
        ),
        "counterfactual": "every token mapped a -> b -> c -> a: 'ab' becomes 'bc' (True -> False) and 'ca' becomes 'ab' (False -> True)",
    },
    "prev_token": {
        "vocab": ["a", "b", "c"],
        "source": (
            "# lib.shift_by(1, rasp.tokens): the previous token (None at the first)\n"
            'prev = rasp.Select(rasp.indices, rasp.indices, lambda k, q: q == k + 1).named("prev")\n'
            'program = rasp.Aggregate(prev, rasp.tokens, default=None).named("prev_token")\n'
        ),
        "counterfactual": "every token mapped a -> b -> c -> a: the output changes at every scored position",
    },
    "pair_balance": {
        "vocab": ["(", ")", "x"],
        "source": (
            '# lib.make_pair_balance(rasp.tokens, "(", ")"), every expression named\n'
            'is_open = rasp.numerical(rasp.Map(lambda t: t == "(", rasp.tokens)).named("is_open")\n'
            'is_close = rasp.numerical(rasp.Map(lambda t: t == ")", rasp.tokens)).named("is_close")\n'
            'prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ).named("prevs")\n'
            'opens = rasp.numerical(rasp.Aggregate(prevs, is_open, default=0)).named("opens")\n'
            'closes = rasp.numerical(rasp.Aggregate(prevs, is_close, default=0)).named("closes")\n'
            'program = rasp.numerical(rasp.LinearSequenceMap(opens, closes, 1, -1)).named("pair_balance")\n'
        ),
        "counterfactual": "( and ) swapped (x kept): the balance changes sign, so the output changes wherever it is not 0",
    },
    "count_so_far": {
        "vocab": ["a", "b", "c"],
        "source": (
            "# lib.make_hist made causal: how often the current token has occurred so far (itself included);\n"
            "# tracr compiles no selector And, so the query and key are (token, index) pairs\n"
            'tok_idx = rasp.SequenceMap(lambda t, i: (t, i), rasp.tokens, rasp.indices).named("tok_idx")\n'
            'same_before = rasp.Select(tok_idx, tok_idx, lambda k, q: k[0] == q[0] and k[1] <= q[1]).named("same_before")\n'
            'program = rasp.SelectorWidth(same_before).named("count_so_far")\n'
        ),
        "counterfactual": "every token replaced by one of the other two at random: the count changes at most positions",
    },
    "running_max": {
        "vocab": ["a", "b", "c"],
        "source": (
            "# the largest token so far (a < b < c), from whether b and c have occurred so far\n"
            'is_b = rasp.numerical(rasp.Map(lambda t: t == "b", rasp.tokens)).named("is_b")\n'
            'is_c = rasp.numerical(rasp.Map(lambda t: t == "c", rasp.tokens)).named("is_c")\n'
            'prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ).named("prevs")\n'
            'frac_b = rasp.numerical(rasp.Aggregate(prevs, is_b, default=0)).named("frac_b")\n'
            'frac_c = rasp.numerical(rasp.Aggregate(prevs, is_c, default=0)).named("frac_c")\n'
            'seen_b = rasp.Map(lambda x: x > 0, frac_b).named("seen_b")\n'
            'seen_c = rasp.Map(lambda x: x > 0, frac_c).named("seen_c")\n'
            'program = rasp.SequenceMap(lambda b, c: "c" if c else "b" if b else "a", seen_b, seen_c).named("running_max")\n'
        ),
        "counterfactual": "a and c swapped (b kept): the largest token so far changes wherever it was a or c",
        "inert": {
            f"input->L1H{h}.{c}": f"the {'query' if c == 'q' else 'key'} of prevs (positions only, the same in the "
            f"counterfactual): zeroed, the head averages {v} over BOS and the whole prefix instead, which "
            f"is > 0 exactly when prevs' average is, and MLP1 reads no more than that"
            for c in "qk"
            for h, v in ((0, "is_b"), (1, "is_c"))
        },
    },
    "dyck2_prefix": {
        "vocab": ["(", ")", "{", "}"],
        "source": (
            '# lib.make_shuffle_dyck(["()", "{}"]) made causal: True where the prefix so far is balanced\n'
            "# (both balances 0 now and neither negative at any position so far)\n"
            'prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ).named("prevs")\n'
            "def balance(o, c, name):\n"
            '    is_o = rasp.numerical(rasp.Map(lambda t: t == o, rasp.tokens)).named(f"is_{o}")\n'
            '    is_c = rasp.numerical(rasp.Map(lambda t: t == c, rasp.tokens)).named(f"is_{c}")\n'
            '    frac_o = rasp.numerical(rasp.Aggregate(prevs, is_o, default=0)).named(f"frac_{o}")\n'
            '    frac_c = rasp.numerical(rasp.Aggregate(prevs, is_c, default=0)).named(f"frac_{c}")\n'
            "    return rasp.numerical(rasp.LinearSequenceMap(frac_o, frac_c, 1, -1)).named(name)\n"
            'b1, b2 = balance("(", ")", "balance_round"), balance("{", "}", "balance_curly")\n'
            'neg_a = rasp.numerical(rasp.Map(lambda x: 1 if x < 0 else 0, b1)).named("neg_round")\n'
            'neg_b = rasp.numerical(rasp.Map(lambda x: 1 if x < 0 else 0, b2)).named("neg_curly")\n'
            'nz_a = rasp.numerical(rasp.Map(lambda x: 0 if x == 0 else 1, b1)).named("nonzero_round")\n'
            'nz_b = rasp.numerical(rasp.Map(lambda x: 0 if x == 0 else 1, b2)).named("nonzero_curly")\n'
            'negs_a = rasp.numerical(rasp.Aggregate(prevs, neg_a, default=0)).named("negs_round")\n'
            'negs_b = rasp.numerical(rasp.Aggregate(prevs, neg_b, default=0)).named("negs_curly")\n'
            'bad_a = rasp.numerical(rasp.LinearSequenceMap(negs_a, nz_a, 1, 1)).named("bad_round")\n'
            'bad_b = rasp.numerical(rasp.LinearSequenceMap(negs_b, nz_b, 1, 1)).named("bad_curly")\n'
            'bad = rasp.numerical(rasp.LinearSequenceMap(bad_a, bad_b, 1, 1)).named("bad")\n'
            'program = rasp.Map(lambda x: x == 0, bad).named("dyck2_prefix")\n'
        ),
        # tracr's default 100 makes the MLPs that test "balance == 0" ramp over [1/112 - 1/100, 1/112] (1/112:
        # halfway from 0 to the nearest value the balance could take, 1/7 - 1/8), which holds 0
        "mlp_exactness": 250,
        "inert": {
            f"input->L3H{h}.{c}": f"the {'query' if c == 'q' else 'key'} of prevs (positions only, the same in the "
            f"counterfactual): zeroed, the head averages {v} over BOS and the whole prefix instead, which "
            f"is > 0 exactly when prevs' average is, and nothing after it reads more than whether bad == 0"
            for c in "qk"
            for h, v in ((0, "neg_round"), (1, "neg_curly"))
        },
        "counterfactual": "an independent batch drawn as the clean one is: the output changes both ways (a mirrored batch, "
        "( <-> ) and { <-> }, would keep |balance| and so never test the balance-is-0 path)",
    },
}


# ---- the structural circuit (numpy only: runs in either venv) -------------------------------------------


def _rows(w: np.ndarray) -> set[int]:
    """Residual dimensions a [d_model, out] reader reads."""
    return set(np.flatnonzero(np.abs(w).sum(1)).tolist())


def _cols(w: np.ndarray) -> set[int]:
    """Residual dimensions an [in, d_model] writer writes."""
    return set(np.flatnonzero(np.abs(w).sum(0)).tolist())


def structural_edges(
    sd: dict[str, np.ndarray], n_layers: int, n_heads: int, attn_only: bool
) -> tuple[list[str], list[str], dict[str, list[int]]]:
    """(true edges, structural edges off every path to the logits, the residual dimensions each
    structural edge carries), the edges in `Graph.edge_list` order (senders, then receivers, in compute
    order)."""
    senders: list[tuple[str, float, set[int]]] = [("input", -1, _cols(sd["embed.W_E"]) | _cols(sd["pos_embed.W_pos"]))]
    receivers: list[tuple[str, float, set[int], str]] = []  # name, layer, dims read, node it feeds
    for l in range(n_layers):
        a = f"blocks.{l}.attn."
        senders += [(f"L{l}H{h}", l, _cols(sd[a + "W_O"][h])) for h in range(n_heads)]
        receivers += [
            (f"L{l}H{h}.{c}", l, _rows(sd[a + f"W_{c.upper()}"][h]), f"L{l}H{h}") for c in "qkv" for h in range(n_heads)
        ]
        if not attn_only:
            senders.append((f"MLP{l}", l + 0.5, _cols(sd[f"blocks.{l}.mlp.W_out"])))
            receivers.append((f"MLP{l}", l + 0.5, _rows(sd[f"blocks.{l}.mlp.W_in"]), f"MLP{l}"))
    receivers.append(("logits", n_layers, _rows(sd["unembed.W_U"]), "logits"))
    edges = [(s, r) for s in senders for r in receivers if s[1] < r[1] and s[2] & r[2]]
    live = {"logits"}  # nodes whose output reaches the logits
    for s, r in sorted(edges, key=lambda e: -e[0][1]):  # latest sender first: its receivers' liveness is known
        if r[3] in live:
            live.add(s[0])
    on_path = [f"{s[0]}->{r[0]}" for s, r in edges if r[3] in live and s[0] in live]
    off_path = [f"{s[0]}->{r[0]}" for s, r in edges if not (r[3] in live and s[0] in live)]
    return on_path, off_path, {f"{s[0]}->{r[0]}": sorted(s[2] & r[2]) for s, r in edges}


# ---- compiling (tracr venv) ----------------------------------------------------------------------------


def compile_program(name: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The program compiled causally: its state dict (HookedTransformer layout) and its JSON record."""
    from tracr.compiler import compiling
    from tracr.rasp import rasp

    spec = PROGRAMS[name]
    rasp.RASPExpr._ids = itertools.count(1)  # labels "name_id" number from 1 for each program
    scope: dict[str, Any] = {"rasp": rasp}
    exec(spec["source"], scope)
    program = scope["program"]
    model = compiling.compile_rasp_to_model(
        program,
        vocab=set(spec["vocab"]),
        max_seq_len=MAX_SEQ_LEN,
        causal=True,
        compiler_bos=BOS,
        compiler_pad=PAD,
        mlp_exactness=spec.get("mlp_exactness", 100),
    )
    mc = model.model_config
    assert mc.causal and not mc.layer_norm
    L, H, dh, dmlp = mc.num_layers, mc.num_heads, mc.key_size, mc.mlp_hidden_size
    labels = list(model.residual_labels)
    D = len(labels)
    p = {k: {q: np.asarray(v, dtype=np.float32) for q, v in d.items()} for k, d in model.params.items()}

    sd: dict[str, np.ndarray] = {
        "embed.W_E": p["token_embed"]["embeddings"],
        "pos_embed.W_pos": p["pos_embed"]["embeddings"],
    }
    for l in range(L):
        a, s = f"transformer/layer_{l}/attn/", f"blocks.{l}.attn."
        for w, mod in (("Q", "query"), ("K", "key"), ("V", "value")):
            sd[s + f"W_{w}"] = (
                p[a + mod]["w"].reshape(D, H, dh).transpose(1, 0, 2)
            )  # [d_model, (h d)] -> [h, d_model, d]
            sd[s + f"b_{w}"] = p[a + mod]["b"].reshape(H, dh)
        sd[s + "W_O"] = p[a + "linear"]["w"].reshape(H, dh, D)  # [(h d), d_model] -> [h, d, d_model]
        sd[s + "b_O"] = p[a + "linear"]["b"]
        m = f"transformer/layer_{l}/mlp/"
        sd[f"blocks.{l}.mlp.W_in"], sd[f"blocks.{l}.mlp.b_in"] = p[m + "linear_1"]["w"], p[m + "linear_1"]["b"]
        sd[f"blocks.{l}.mlp.W_out"], sd[f"blocks.{l}.mlp.b_out"] = p[m + "linear_2"]["w"], p[m + "linear_2"]["b"]
    # the unembedding projects the residual stream onto the output space's directions
    categorical = rasp.is_categorical(program)
    if categorical:
        outputs = sorted(model.output_encoder.encoding_map, key=model.output_encoder.encoding_map.get)
        out_dirs = [f"{program.label}:{v}" for v in outputs]
    else:
        outputs, out_dirs = None, [program.label]
    W_U = np.zeros((D, len(out_dirs)), np.float32)
    for j, d in enumerate(out_dirs):
        W_U[labels.index(d), j] = 1
    sd["unembed.W_U"], sd["unembed.b_U"] = W_U, np.zeros(len(out_dirs), np.float32)
    attn_only = not any(np.any(sd[f"blocks.{l}.mlp.W_in"]) for l in range(L))
    if attn_only:
        sd = {k: v for k, v in sd.items() if ".mlp." not in k}
    assert not any(np.any(v) for k, v in sd.items() if k.rsplit(".", 1)[1].startswith("b_")), "tracr sets no biases"
    sd = {k: np.array(v, dtype=np.float32, order="C", copy=True) for k, v in sd.items()}

    ids = dict(model.input_encoder.encoding_map)
    clean, counterfactual = batches(name, spec["vocab"])
    run = lambda seqs: [[None] + [_json_value(v, categorical) for v in rasp.evaluate(program, s)] for s in seqs]  # noqa: E731
    truth, off_path, dims = structural_edges(sd, L, H, attn_only)
    cfg = dict(
        n_layers=L,
        n_heads=H,
        d_model=D,
        d_head=dh,
        d_mlp=None if attn_only else dmlp,
        attn_only=attn_only,
        normalization="none",
        act_fn="relu",
    )
    record = {
        "name": name,
        "source": spec["source"],
        "compiled_with": f"tracr.compiler.compiling.compile_rasp_to_model(program, vocab=set({sorted(spec['vocab'])!r}), "
        f"max_seq_len={MAX_SEQ_LEN}, causal=True"
        + (f", mlp_exactness={spec['mlp_exactness']})" if "mlp_exactness" in spec else ")"),
        "output": "categorical" if categorical else "numerical",
        "outputs": outputs,  # categorical: the output value of each logit, in W_U's column order
        "config": cfg,
        "V": len(ids),
        "V_out": len(out_dirs),
        "N": MAX_SEQ_LEN + 1,
        "vocab": spec["vocab"],
        "token_ids": ids,
        "bos": BOS,
        "bos_id": ids[BOS],
        "pad_id": ids[PAD],
        "residual_labels": labels,
        "counterfactual": spec["counterfactual"],
        "clean": [[ids[BOS]] + [ids[t] for t in s] for s in clean],
        "corrupted": [[ids[BOS]] + [ids[t] for t in s] for s in counterfactual],
        "clean_outputs": run(clean),
        "corrupted_outputs": run(counterfactual),
        "truth": truth,
        "structural_off_path": off_path,
        "carries": {e: [labels[i] for i in d] for e, d in dims.items()},  # the residual dimensions each edge carries
    }
    check_against_tracr(model, sd, record)
    effects = edge_effects(sd, record)
    inert = [e for e in truth if max(logit for logit, _ in effects[e].values()) <= INERT]
    # a clear gap, and the counterfactual batch shows every other edge to the metric under some ablation
    unseen = [e for e in truth if e not in inert and max(m for _, m in effects[e].values()) < 1e-3]
    assert not unseen, (name, "edges the metric does not see", {e: effects[e] for e in unseen})
    reasons = spec.get("inert", {})
    assert sorted(inert) == sorted(reasons), (name, "inert edges found", inert, "documented", sorted(reasons))
    record["inert"] = {e: reasons[e] for e in inert}  # the true edges that carry nothing the output uses, and why
    record["informative"] = [e for e in truth if e not in reasons]
    return sd, record


def _json_value(v: Any, categorical: bool) -> Any:
    """A RASP output as JSON: None stays None (null), a numerical output is a float (RASP's mean of one
    True is True), a categorical one is its value."""
    return v if v is None or categorical else float(v)


def batches(name: str, vocab: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    """A clean batch (tokens uniform over the vocabulary; dyck2_prefix: mostly well-nested brackets, so that
    balanced prefixes are common) and its counterfactual, from a fixed seed."""
    rng = random.Random(f"tracr-{name}")
    if name == "dyck2_prefix":
        clean = [_brackets(rng) for _ in range(BATCH)]
    else:
        clean = [[rng.choice(vocab) for _ in range(MAX_SEQ_LEN)] for _ in range(BATCH)]
    if name == "frac_prevs":
        cf = [[rng.choice(["a", "b"]) if t == "x" else t for t in s] for s in clean]
    elif name in ("detect_pattern", "prev_token"):
        nxt = {"a": "b", "b": "c", "c": "a"}
        cf = [[nxt[t] for t in s] for s in clean]
    elif name == "pair_balance":
        cf = [[{"(": ")", ")": "("}.get(t, t) for t in s] for s in clean]
    elif name == "dyck2_prefix":
        cf = [_brackets(rng) for _ in clean]
    elif name == "count_so_far":
        cf = [[rng.choice([v for v in vocab if v != t]) for t in s] for s in clean]
    elif name == "running_max":
        cf = [[{"a": "c", "c": "a"}.get(t, t) for t in s] for s in clean]
    else:
        raise ValueError(f"no counterfactual for {name!r}")
    return clean, cf


def _brackets(rng: random.Random) -> list[str]:
    """MAX_SEQ_LEN brackets of two kinds, mostly bringing a kind that is off balance back to 0 (closing an
    open one, or opening after a close too many: a quarter of the sequences start with one), sometimes
    opening one, sometimes any bracket at all; so that the prefixes are often balanced, and some of those
    went negative before."""
    out: list[str] = []
    count = {"(": 0, "{": 0}
    closer = {"(": ")", "{": "}"}
    for i in range(MAX_SEQ_LEN):
        off = [o for o, n in count.items() if n]
        if i == 0 and rng.random() < 0.25:
            t = rng.choice([")", "}"])
        elif rng.random() < 0.1:
            t = rng.choice(["(", ")", "{", "}"])
        elif off and rng.random() < 0.6:
            o = rng.choice(off)
            t = closer[o] if count[o] > 0 else o
        else:
            t = rng.choice(["(", "{"])
        if t in count:
            count[t] += 1
        else:
            count[{")": "(", "}": "{"}[t]] -= 1
        out.append(t)
    return out


def forward_numpy(
    sd: dict[str, np.ndarray], tokens: list[int], L: int, H: int, attn_only: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The converted weights run as HookedTransformer runs them (causal, attention scaled by sqrt(d_head)):
    (final residual stream, logits), in float64."""
    sd64 = {k: v.astype(np.float64) for k, v in sd.items()}
    T = len(tokens)
    x = sd64["embed.W_E"][tokens] + sd64["pos_embed.W_pos"][:T]
    causal = np.tril(np.ones((T, T), bool))
    for l in range(L):
        a = f"blocks.{l}.attn."
        q = np.einsum("tm,hmd->htd", x, sd64[a + "W_Q"]) + sd64[a + "b_Q"][:, None]
        k = np.einsum("tm,hmd->htd", x, sd64[a + "W_K"]) + sd64[a + "b_K"][:, None]
        v = np.einsum("tm,hmd->htd", x, sd64[a + "W_V"]) + sd64[a + "b_V"][:, None]
        s = np.where(causal, np.einsum("hqd,hkd->hqk", q, k) / np.sqrt(q.shape[-1]), -np.inf)
        w = np.exp(s - s.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        x = x + np.einsum("hqk,hkd,hdm->qm", w, v, sd64[a + "W_O"]) + sd64[a + "b_O"]
        if not attn_only:
            m = f"blocks.{l}.mlp."
            x = x + np.maximum(x @ sd64[m + "W_in"] + sd64[m + "b_in"], 0) @ sd64[m + "W_out"] + sd64[m + "b_out"]
    return x, x @ sd64["unembed.W_U"] + sd64["unembed.b_U"]


def run_edges(
    sd: dict[str, np.ndarray],
    tokens: np.ndarray,
    L: int,
    H: int,
    attn_only: bool,
    edge: tuple[str, str] | None = None,
    source: dict[str, np.ndarray] | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A batch [batch, pos] through the converted weights in float64, as `circuits.forward.run` patches one
    edge: receiver `edge[1]` ("L1H0.q", "MLP2", "logits") reads sender `edge[0]` ("input", "L0H1", "MLP0")
    from `source` (what each sender writes on the source run) while everything else reads it as it is.
    (logits [batch, pos, V_out], what each sender writes in this run)."""
    sd64 = {k: v.astype(np.float64) for k, v in sd.items()}
    T = tokens.shape[1]
    x = sd64["embed.W_E"][tokens] + sd64["pos_embed.W_pos"][:T]
    outs = {"input": x}
    sender, receiver = edge if edge is not None else (None, None)

    def read(x: np.ndarray, r: str) -> np.ndarray:
        return x + (source[sender] - outs[sender]) if r == receiver else x

    causal = np.tril(np.ones((T, T), bool))
    for l in range(L):
        a = f"blocks.{l}.attn."
        resid, written = x, 0.0
        for h in range(H):
            q, k, v = (
                read(resid, f"L{l}H{h}.{c}") @ sd64[a + f"W_{c.upper()}"][h] + sd64[a + f"b_{c.upper()}"][h]
                for c in "qkv"
            )
            s = np.where(causal, q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]), -np.inf)
            w = np.exp(s - s.max(-1, keepdims=True))
            w /= w.sum(-1, keepdims=True)
            outs[f"L{l}H{h}"] = w @ v @ sd64[a + "W_O"][h]
            written = written + outs[f"L{l}H{h}"]
        x = resid + written + sd64[a + "b_O"]
        if not attn_only:
            m = f"blocks.{l}.mlp."
            hidden = np.maximum(read(x, f"MLP{l}") @ sd64[m + "W_in"] + sd64[m + "b_in"], 0)
            outs[f"MLP{l}"] = hidden @ sd64[m + "W_out"] + sd64[m + "b_out"]
            x = x + outs[f"MLP{l}"]
    return read(x, "logits") @ sd64["unembed.W_U"] + sd64["unembed.b_U"], outs


def edge_effects(sd: dict[str, np.ndarray], record: dict[str, Any]) -> dict[str, dict[str, tuple[float, float]]]:
    """For each true edge and each ablation ("zero"; "resample": the counterfactual's), patching that one
    edge exactly: (the largest change of any logit at any scored position of the clean batch, the change
    of the metric that `check` uses)."""
    cfg = record["config"]
    L, H, attn_only = cfg["n_layers"], cfg["n_heads"], cfg["attn_only"]
    clean, corrupted = np.array(record["clean"]), np.array(record["corrupted"])
    mask = np.array([[v is not None for v in row] for row in record["clean_outputs"]])
    if record["output"] == "categorical":
        ids = lambda rows: np.array([[record["outputs"].index(v) if v is not None else 0 for v in row] for row in rows])  # noqa: E731
        right, wrong = ids(record["clean_outputs"]), ids(record["corrupted_outputs"])
        where = mask & (right != wrong)

        def metric(logits: np.ndarray) -> float:  # circuits.patch_metric("logit_diff", ...)
            pick = lambda t: np.take_along_axis(logits, t[..., None], -1)[..., 0]  # noqa: E731
            return float(((pick(right) - pick(wrong)) * where).sum() / where.sum())
    else:
        values = lambda rows: np.array([[v if v is not None else 0.0 for v in row] for row in rows])  # noqa: E731
        y_cf = values(record["corrupted_outputs"])
        diff = (values(record["clean_outputs"]) - y_cf) * mask

        def metric(logits: np.ndarray) -> float:  # numerical_metric
            return float(((logits[..., 0] - y_cf) * diff).sum() / (diff**2).sum())

    base, outs = run_edges(sd, clean, L, H, attn_only)
    sources = {
        "zero": {k: np.zeros_like(v) for k, v in outs.items()},
        "resample": run_edges(sd, corrupted, L, H, attn_only)[1],
    }
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for e in record["truth"]:
        out[e] = {}
        for ablation, src in sources.items():
            logits = run_edges(sd, clean, L, H, attn_only, tuple(e.split("->")), src)[0]
            out[e][ablation] = (float(np.abs(logits - base)[mask].max()), abs(metric(logits) - metric(base)))
    return out


def check_against_tracr(model: Any, sd: dict[str, np.ndarray], record: dict[str, Any]) -> None:
    """The converted weights compute what tracr's own model computes, and both give RASP's outputs."""
    cfg = record["config"]
    worst = 0.0
    for toks, expected in zip(
        record["clean"] + record["corrupted"], record["clean_outputs"] + record["corrupted_outputs"]
    ):
        ours_resid, logits = forward_numpy(sd, toks, cfg["n_layers"], cfg["n_heads"], cfg["attn_only"])
        names = {i: t for t, i in record["token_ids"].items()}
        out = model.apply([names[i] for i in toks])
        theirs = np.asarray(out.transformer_output[0], np.float64)
        assert np.abs(ours_resid - theirs).max() < 1e-4, np.abs(ours_resid - theirs).max()
        for pos, want in enumerate(expected):
            if want is None:
                continue
            if record["output"] == "categorical":
                got = record["outputs"][int(np.argmax(logits[pos]))]
                assert got == want == out.decoded[pos], (toks, pos, got, want, out.decoded[pos])
            else:
                worst = max(worst, abs(logits[pos, 0] - want))
    assert worst < 1e-2, worst


def dump(record: dict[str, Any]) -> str:
    """JSON, one key a line, and a batch (a list of lists) one sequence a line."""

    def value(v: Any) -> str:
        if isinstance(v, list) and v and all(isinstance(row, list) for row in v):
            return "[\n  " + ",\n  ".join(json.dumps(row) for row in v) + "\n ]"
        if isinstance(v, dict) and v and all(isinstance(x, (list, str)) for x in v.values()):
            return "{\n  " + ",\n  ".join(f"{json.dumps(k)}: {json.dumps(x)}" for k, x in v.items()) + "\n }"
        return json.dumps(v)

    return "{\n" + ",\n".join(f" {json.dumps(k)}: {value(v)}" for k, v in record.items()) + "\n}\n"


def generate(names: list[str]) -> None:
    import torch
    from safetensors.torch import save_file

    DATA.mkdir(parents=True, exist_ok=True)
    for name in names:
        sd, record = compile_program(name)
        save_file({k: torch.from_numpy(v) for k, v in sorted(sd.items())}, str(DATA / f"{name}.safetensors"))
        (DATA / f"{name}.json").write_text(dump(record))
        c = record["config"]
        print(
            f"{name}: {c['n_layers']} layers x {c['n_heads']} heads, d_model {c['d_model']}, d_head {c['d_head']}, "
            f"d_mlp {c['d_mlp']}, V {record['V']}, V_out {record['V_out']}, N {record['N']}"
        )
        print("  truth:", ", ".join(record["truth"]), "| off path:", record["structural_off_path"] or "none")
        print("  inert:", ", ".join(record["inert"]) or "none")


# ---- checking with mechsynth (the project's venv, no jax) ----------------------------------------------


def load(name: str):
    """(model, record, state dict) of a written program, as the zoo loads it (`mechsynth.benchmark.zoo`)."""
    from safetensors.torch import load_file

    from mechsynth.benchmark.zoo import tracr_model

    model, record = tracr_model(name)
    return model, record, load_file(str(DATA / f"{name}.safetensors"))


def patching_case(record: dict[str, Any]):
    """What `check` and tests/test_tracr_zoo.py patch with: `mechsynth.benchmark.zoo.record_case`."""
    from mechsynth.benchmark.zoo import record_case

    return record_case(record)


def check(names: list[str]) -> int:
    import torch

    from mechsynth import circuits

    torch.set_grad_enabled(False)
    failed = False
    for name in names:
        model, record, sd = load(name)
        cfg = record["config"]
        clean, corrupted, mask, expected, metric = patching_case(record)
        logits = model(clean)
        if record["output"] == "categorical":
            right = bool((logits.argmax(-1) == expected)[mask].all())
            print(
                f"{name}: argmax of the loaded model's logits = RASP's output at all {int(mask.sum())} scored positions: {right}"
            )
        else:
            err = float((logits[..., 0] - expected)[mask].abs().max())
            right = err < 1e-2
            print(
                f"{name}: loaded model's output logit vs RASP's output, max |error| over {int(mask.sum())} scored positions: {err:.2e}"
            )
        graph = circuits.Graph.of(model)
        truth, _, _ = structural_edges(
            {k: v.numpy() for k, v in sd.items()}, cfg["n_layers"], cfg["n_heads"], cfg["attn_only"]
        )
        same = truth == record["truth"]
        print(
            f"  stored truth = structural circuit of the stored weights: {same}; metric clean {float(metric(logits[None])[0]):.4f}"
        )
        is_true = graph.mask(record["truth"])
        largest = torch.zeros(len(graph.edge_list))  # each edge's largest |effect| under either ablation
        for ablation in ("zero", "resample"):
            src = circuits.source(model, graph, clean, corrupted, ablation)
            scores = circuits.activation_patching(model, graph, clean, src, metric)
            largest = torch.maximum(largest, scores.abs())
            per_edge = ", ".join(
                f"{graph.edge_name(graph.edge_list[i])} {float(scores[i]):+.3g}"
                for i in is_true.nonzero()[:, 0].tolist()
            )
            other = float(scores[~is_true].abs().max())
            print(
                f"  {ablation:8s}: true edges: {per_edge}; max |effect| of the {int((~is_true).sum())} other edges: {other:.2g}"
            )
            failed |= other > 1e-6
        inert = float(largest[graph.mask(list(record["inert"]))].max()) if record["inert"] else 0.0
        weakest = float(largest[graph.mask(record["informative"])].min())
        print(
            f"  {len(record['inert'])} inert edges, max |effect| under either ablation {inert:.2g}; "
            f"{len(record['informative'])} informative edges, min over them of the larger |effect| {weakest:.3g}"
        )
        failed |= inert > 1e-6 or weakest < 1e-3
        failed |= not (right and same)
    return int(failed)


if __name__ == "__main__":
    args = sys.argv[1:]
    checking = args[:1] == ["--check"]
    names = args[1:] if checking else args
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        sys.exit(f"unknown program(s) {', '.join(unknown)}; known: {', '.join(PROGRAMS)}")
    if checking:
        sys.exit(check(names or list(PROGRAMS)))
    generate(names or list(PROGRAMS))
