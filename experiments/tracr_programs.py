"""Known circuits from tracr-compiled RASP programs: models whose circuit is exact, edge by edge, so that
every circuit-discovery method (`mechsynth.circuits`) can be scored against a right answer.

Two RASP programs are compiled with tracr (Lindner et al. 2023) into causal transformers and written, per
program NAME, as

- tests/data/tracr_NAME.safetensors: the weights in TransformerLens 3's HookedTransformer layout (float32;
  `embed.W_E`, `pos_embed.W_pos`, `blocks.{l}.attn.W_Q/W_K/W_V/W_O` and biases, `blocks.{l}.mlp.W_in/W_out`
  and biases, `unembed.W_U/b_U`; no layer norm, ReLU MLPs), loadable with
  `mechsynth.models.tl_compat.hooked_transformer(TransformerConfig(**cfg), V, V_out, N, state_dict)`;
- tests/data/tracr_NAME.json: the program's RASP "source", the TransformerConfig fields ("config"), "V",
  "V_out", "N", the token id of each vocabulary item and of BOS ("token_ids", "bos_id"), the residual
  stream's "residual_labels", a "clean" and a "corrupted" (counterfactual) batch of 32 token-id
  sequences (BOS first, each of the program's max length, 8 tokens), the program's outputs on both per
  position ("clean_outputs", "corrupted_outputs", from `rasp.evaluate`; null at BOS and where RASP gives
  None), "outputs" (categorical: the output value of each logit), "truth": the true edges in mechsynth's
  naming (`circuits.Graph.edge_name`), and "carries": the residual labels each edge carries.

The programs (both compile with `causal=True`; their RASP outputs at a position depend on that position
and earlier ones only, so the causal model computes them):

- frac_prevs (numerical): the fraction of tokens so far that are "x" (lib.make_frac_prevs): MLP 0 computes
  is_x, head L1H0 averages it over select(indices, indices, LEQ). One logit, equal to the output.
- detect_pattern (categorical): True where the previous token is "a" and this one "b"
  (lib.detect_pattern(tokens, "ab")): MLP 0 computes is_a and is_b, head L1H0 moves is_a one position on,
  MLP 1 ANDs it with is_b. One logit per output value (False, True).

The truth is structural: sender u -> receiver v is an edge of the circuit when v reads (nonzero rows of
its W_Q / W_K / W_V head slice, of W_in, of W_U) a residual dimension that u writes (nonzero columns of
its W_O head slice, of W_out, of W_E or W_pos for the input), kept only when it lies on a path to the
logits. Biases are all zero (tracr's MLPs take their offsets from a constant "one" dimension that the
token embedding writes, so that dimension is part of what the input sends).

Run (tracr brings jax, which is no dependency of mechsynth: use a venv of its own):

    python3 -m venv .venv-tracr && .venv-tracr/bin/pip install tracr-pypi torch safetensors numpy
    .venv-tracr/bin/python experiments/tracr_programs.py          # writes tests/data/tracr_*.{json,safetensors}
    .venv/bin/python experiments/tracr_programs.py --check        # the project's venv, no jax: see below

Regenerating needs no network once installed and gives the same files bit for bit (tracr labels each
expression "name_id" from a global counter, which is reset before each program, so a program's residual
labels and their order do not depend on what was built before it; the batches come from fixed seeds).
The data files are committed so that the tests and experiments that use these circuits need neither jax
nor tracr.

`--check` (mechsynth's own venv; imports no jax) loads each model through `hooked_transformer`, checks
that it reproduces RASP's outputs on the clean batch and that the stored truth is the structural
circuit of the stored weights, and runs exact edge patching (`circuits.activation_patching`) under zero
and resample ablation, printing each true edge's effect and the largest |effect| of any other edge.
Metric: categorical, `circuits.patch_metric("logit_diff", clean, counterfactual)`; numerical, the share
of the clean-vs-counterfactual output difference kept, sum((out - y_cf)(y_clean - y_cf)) /
sum((y_clean - y_cf)^2) over the scored positions (linear in the output logit: 1 on the clean outputs,
0 on the counterfactual's), as `numerical_metric` below builds it.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
MAX_SEQ_LEN = 8  # real tokens; the model's n_ctx is one more (BOS)
BATCH = 32
BOS, PAD = "compiler_bos", "compiler_pad"

# Each program's RASP source, run as is (with `rasp` in scope) to build the SOp `program` that is compiled.
PROGRAMS: dict[str, dict[str, Any]] = {
    "frac_prevs": {
        "vocab": ["a", "b", "x"],
        "source": (
            '# lib.make_frac_prevs(rasp.tokens == "x"), every expression named\n'
            'is_x = rasp.numerical(rasp.Map(lambda t: t == "x", rasp.tokens)).named("is_x")\n'
            'prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ).named("prevs")\n'
            'program = rasp.numerical(rasp.Aggregate(prevs, is_x, default=0)).named("frac_prevs")\n'),
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
            'program = rasp.SequenceMap(lambda x, y: x and y, prev_is_a, is_b).named("detect_ab")\n'),
        "counterfactual": "every token mapped a -> b -> c -> a: 'ab' becomes 'bc' (True -> False) and 'ca' becomes 'ab' (False -> True)",
    },
}


# ---- the structural circuit (numpy only: runs in either venv) -------------------------------------------


def _rows(w: np.ndarray) -> set[int]:
    """Residual dimensions a [d_model, out] reader reads."""
    return set(np.flatnonzero(np.abs(w).sum(1)).tolist())


def _cols(w: np.ndarray) -> set[int]:
    """Residual dimensions an [in, d_model] writer writes."""
    return set(np.flatnonzero(np.abs(w).sum(0)).tolist())


def structural_edges(sd: dict[str, np.ndarray], n_layers: int, n_heads: int,
                     attn_only: bool) -> tuple[list[str], list[str], dict[str, list[int]]]:
    """(true edges, structural edges off every path to the logits, the residual dimensions each
    structural edge carries), the edges in `Graph.edge_list` order (senders, then receivers, in compute
    order)."""
    senders: list[tuple[str, float, set[int]]] = [("input", -1, _cols(sd["embed.W_E"]) | _cols(sd["pos_embed.W_pos"]))]
    receivers: list[tuple[str, float, set[int], str]] = []  # name, layer, dims read, node it feeds
    for l in range(n_layers):
        a = f"blocks.{l}.attn."
        senders += [(f"L{l}H{h}", l, _cols(sd[a + "W_O"][h])) for h in range(n_heads)]
        receivers += [(f"L{l}H{h}.{c}", l, _rows(sd[a + f"W_{c.upper()}"][h]), f"L{l}H{h}")
                      for c in "qkv" for h in range(n_heads)]
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
    model = compiling.compile_rasp_to_model(program, vocab=set(spec["vocab"]), max_seq_len=MAX_SEQ_LEN,
                                            causal=True, compiler_bos=BOS, compiler_pad=PAD)
    mc = model.model_config
    assert mc.causal and not mc.layer_norm
    L, H, dh, dmlp = mc.num_layers, mc.num_heads, mc.key_size, mc.mlp_hidden_size
    labels = list(model.residual_labels)
    D = len(labels)
    p = {k: {q: np.asarray(v, dtype=np.float32) for q, v in d.items()} for k, d in model.params.items()}

    sd: dict[str, np.ndarray] = {"embed.W_E": p["token_embed"]["embeddings"], "pos_embed.W_pos": p["pos_embed"]["embeddings"]}
    for l in range(L):
        a, s = f"transformer/layer_{l}/attn/", f"blocks.{l}.attn."
        for w, mod in (("Q", "query"), ("K", "key"), ("V", "value")):
            sd[s + f"W_{w}"] = p[a + mod]["w"].reshape(D, H, dh).transpose(1, 0, 2)  # [d_model, (h d)] -> [h, d_model, d]
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
    cfg = dict(n_layers=L, n_heads=H, d_model=D, d_head=dh, d_mlp=None if attn_only else dmlp, attn_only=attn_only,
               normalization="none", act_fn="relu")
    record = {
        "name": name,
        "source": spec["source"],
        "compiled_with": f"tracr.compiler.compiling.compile_rasp_to_model(program, vocab=set({sorted(spec['vocab'])!r}), "
                         f"max_seq_len={MAX_SEQ_LEN}, causal=True)",
        "output": "categorical" if categorical else "numerical",
        "outputs": outputs,  # categorical: the output value of each logit, in W_U's column order
        "config": cfg,
        "V": len(ids), "V_out": len(out_dirs), "N": MAX_SEQ_LEN + 1,
        "vocab": spec["vocab"], "token_ids": ids, "bos": BOS, "bos_id": ids[BOS], "pad_id": ids[PAD],
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
    return sd, record


def _json_value(v: Any, categorical: bool) -> Any:
    """A RASP output as JSON: None stays None (null), a numerical output is a float (RASP's mean of one
    True is True), a categorical one is its value."""
    return v if v is None or categorical else float(v)


def batches(name: str, vocab: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    """A clean batch (tokens uniform over the vocabulary) and its counterfactual, from a fixed seed."""
    rng = random.Random(f"tracr-{name}")
    clean = [[rng.choice(vocab) for _ in range(MAX_SEQ_LEN)] for _ in range(BATCH)]
    if name == "frac_prevs":
        cf = [[rng.choice(["a", "b"]) if t == "x" else t for t in s] for s in clean]
    else:
        nxt = {"a": "b", "b": "c", "c": "a"}
        cf = [[nxt[t] for t in s] for s in clean]
    return clean, cf


def forward_numpy(sd: dict[str, np.ndarray], tokens: list[int], L: int, H: int, attn_only: bool) -> tuple[np.ndarray, np.ndarray]:
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


def check_against_tracr(model: Any, sd: dict[str, np.ndarray], record: dict[str, Any]) -> None:
    """The converted weights compute what tracr's own model computes, and both give RASP's outputs."""
    cfg = record["config"]
    worst = 0.0
    for toks, expected in zip(record["clean"] + record["corrupted"], record["clean_outputs"] + record["corrupted_outputs"]):
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
        if isinstance(v, dict) and v and all(isinstance(x, list) for x in v.values()):
            return "{\n  " + ",\n  ".join(f"{json.dumps(k)}: {json.dumps(x)}" for k, x in v.items()) + "\n }"
        return json.dumps(v)
    return "{\n" + ",\n".join(f" {json.dumps(k)}: {value(v)}" for k, v in record.items()) + "\n}\n"


def generate() -> None:
    import torch
    from safetensors.torch import save_file

    DATA.mkdir(parents=True, exist_ok=True)
    for name in PROGRAMS:
        sd, record = compile_program(name)
        save_file({k: torch.from_numpy(v) for k, v in sorted(sd.items())}, str(DATA / f"tracr_{name}.safetensors"))
        (DATA / f"tracr_{name}.json").write_text(dump(record))
        c = record["config"]
        print(f"{name}: {c['n_layers']} layers x {c['n_heads']} heads, d_model {c['d_model']}, d_head {c['d_head']}, "
              f"d_mlp {c['d_mlp']}, V {record['V']}, V_out {record['V_out']}, N {record['N']}")
        print("  truth:", ", ".join(record["truth"]), "| off path:", record["structural_off_path"] or "none")


# ---- checking with mechsynth (the project's venv, no jax) ----------------------------------------------


def load(name: str):
    """(model, record, state dict) of a written program, through mechsynth's `hooked_transformer`."""
    from safetensors.torch import load_file

    from mechsynth.models import TransformerConfig
    from mechsynth.models.tl_compat import hooked_transformer

    record = json.loads((DATA / f"tracr_{name}.json").read_text())
    sd = load_file(str(DATA / f"tracr_{name}.safetensors"))
    model = hooked_transformer(TransformerConfig(**record["config"]), record["V"], record["V_out"], record["N"], sd)
    return model, record, sd


def numerical_metric(clean_y, corrupted_y, mask):
    """The share of the clean-vs-counterfactual output difference kept, over the scored positions:
    sum((out - y_cf) * (y_clean - y_cf)) / sum((y_clean - y_cf)^2), out the one output logit."""
    diff = (clean_y - corrupted_y) * mask

    def metric(logits):  # [copy, batch, pos, 1]
        return ((logits[..., 0] - corrupted_y) * diff).sum((1, 2)) / diff.pow(2).sum()
    return metric


def check() -> int:
    import torch

    from mechsynth import circuits
    from mechsynth.tasks.base import Batch

    torch.set_grad_enabled(False)
    failed = False
    for name in PROGRAMS:
        model, record, sd = load(name)
        cfg = record["config"]
        clean, corrupted = torch.tensor(record["clean"]), torch.tensor(record["corrupted"])
        mask = torch.tensor([[v is not None for v in row] for row in record["clean_outputs"]])
        logits = model(clean)
        if record["output"] == "categorical":
            ids = lambda rows: torch.tensor([[record["outputs"].index(v) if v is not None else 0 for v in row]  # noqa: E731
                                             for row in rows])
            targets, cf_targets = ids(record["clean_outputs"]), ids(record["corrupted_outputs"])
            right = bool((logits.argmax(-1) == targets)[mask].all())
            print(f"{name}: argmax of the loaded model's logits = RASP's output at all {int(mask.sum())} scored positions: {right}")
            metric = circuits.patch_metric("logit_diff", Batch(clean, targets, mask), Batch(corrupted, cf_targets, mask))
        else:
            num = lambda rows: torch.tensor([[v if v is not None else 0.0 for v in row] for row in rows])  # noqa: E731
            y, y_cf = num(record["clean_outputs"]), num(record["corrupted_outputs"])
            err = float((logits[..., 0] - y)[mask].abs().max())
            right = err < 1e-2
            print(f"{name}: loaded model's output logit vs RASP's output, max |error| over {int(mask.sum())} scored positions: {err:.2e}")
            metric = numerical_metric(y, y_cf, mask.float())
        graph = circuits.Graph.of(model)
        truth, _, _ = structural_edges({k: v.numpy() for k, v in sd.items()}, cfg["n_layers"], cfg["n_heads"], cfg["attn_only"])
        same = truth == record["truth"]
        print(f"  stored truth = structural circuit of the stored weights: {same}; metric clean {float(metric(logits[None])[0]):.4f}")
        is_true = graph.mask(record["truth"])
        for ablation in ("zero", "resample"):
            src = circuits.source(model, graph, clean, corrupted, ablation)
            scores = circuits.activation_patching(model, graph, clean, src, metric)
            per_edge = ", ".join(f"{graph.edge_name(graph.edge_list[i])} {float(scores[i]):+.3g}" for i in is_true.nonzero()[:, 0].tolist())
            other = float(scores[~is_true].abs().max())
            print(f"  {ablation:8s}: true edges: {per_edge}; max |effect| of the {int((~is_true).sum())} other edges: {other:.2g}")
            failed |= other > 1e-6 or (ablation == "zero" and bool((scores[is_true].abs() < 1e-3).any()))
        failed |= not (right and same)
    return int(failed)


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        sys.exit(check())
    generate()
