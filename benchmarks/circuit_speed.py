"""Circuit discovery, seconds per checkpoint, from one run, as multiples of one plain forward pass of the same
hooked model on the same batch:

- one forward, and one forward with a backward pass of the metric (what EAP should cost);
- each registered method of mechsynth.circuits (exact edge patching, EAP, EAP-IG on inputs and on activations with
  8 steps, clean-corrupted, ACDC, and any plugin's), scoring every edge; the gradient methods also as a multiple
  of the forward-and-backward passes their definition takes (EAP 1, EAP-IG m, EAP-IG on activations m per sender
  group, clean-corrupted 2);
- node patching of every head two ways: mechsynth's (the edges out of a head patched together, heads batched
  as copies of the batch) and TransformerLens's own `patching.get_act_patch_attn_head_out_all_pos` (a forward
  per head); the two give the same numbers (tests/test_circuits.py);
- how well each faster method agrees with exact edge patching (Spearman correlation of |score|).

    python -m benchmarks.circuit_speed [--device cuda] [--batch 64] [--steps 600] [--repeats 7] [--model JSON]

It trains the demo configuration (markov_icl, 2-layer attention-only) for --steps steps first, and times the
methods on its last checkpoint with the task's counterfactual batch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

os.environ.setdefault("TQDM_DISABLE", "1")  # TransformerLens's patching helper draws a bar per call

import torch
from transformer_lens import patching

from experiments import harness, stats
from mechsynth import circuits, configs, load_run, parse_config, train_run
from mechsynth.circuits.gradient import sender_groups

IG_STEPS = 8
# forward-and-backward passes each gradient method takes by its definition (its cost is measured against that many)
POINTS = {
    "eap": lambda groups: 1,
    "eap_ig": lambda groups: IG_STEPS,
    "clean_corrupted": lambda groups: 2,
    "eap_ig_activations": lambda groups: IG_STEPS * groups,
}


def timed(fn, repeats: int = 5) -> tuple[float, object]:
    """The median wall time of `repeats` calls (after one warm-up), and the last result; on a GPU each call
    waits for the kernels it queued."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    out = fn()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def measure(
    device: str = "cpu",
    batch: int = 64,
    steps: int = 600,
    repeats: int = 3,
    eval_batch_size: Optional[int] = None,
    model: Optional[dict[str, Any]] = None,
) -> dict[str, Any]:
    """Each way's seconds per checkpoint, as a multiple of one forward, and each method's agreement with exact
    patching (Spearman of |score|), as rows (name, seconds, agreement or None); also what benchmarks/gpu_check.py
    records. `repeats`: timed calls of each method (a forward and a backward: 5 at the least); `eval_batch_size`:
    the demo run's held-out sequences, if not its 512 (their Bayes predictor takes seconds on a CPU); `model`:
    settings that replace the demo model's (e.g. {"n_heads": 4, "d_model": 128, "attn_only": False})."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = configs.load("demo")
        cfg["model"] = {**cfg["model"], **(model or {})}
        train = {**cfg["train"], "steps": steps, "device": device} | (
            {"eval_batch_size": eval_batch_size} if eval_batch_size else {}
        )
        cfg = {**cfg, "train": train, "wandb": {"mode": "disabled"}}
        run = load_run(train_run(parse_config(cfg), Path(tmp) / "demo", progress=False))
        last = run.steps[-1]
        model = run.model(last, device)
    task = run.task
    clean = task.sample(batch, torch.Generator(device=device).manual_seed(0), device, task.main_eval)
    corrupted = task.counterfactual(clean, torch.Generator().manual_seed(1))
    graph = circuits.Graph.of(model)
    metric = circuits.patch_metric(task.patch_metric, clean, corrupted)
    src = circuits.source(model, graph, clean.tokens, corrupted.tokens, "resample")

    with torch.no_grad():
        forward, _ = timed(lambda: model(clean.tokens), max(5, repeats))

    def forward_backward():
        model.zero_grad()
        metric(model(clean.tokens)[None]).sum().backward()

    backward, _ = timed(forward_backward, max(5, repeats))
    rows = [
        ("forward", "one forward", forward, None, None),
        ("forward_backward", "forward + backward of the metric", backward, None, None),
    ]
    exact_t, exact = timed(lambda: circuits.discover("patching", model, graph, clean.tokens, src, metric), repeats)
    rows.append(("patching", f"exact edge patching ({len(graph.edge_list)} edges)", exact_t, 1.0, None))
    groups = len(sender_groups(graph))
    for method in [m for m in circuits.METHODS if m != "patching"]:
        opts = circuits.declared(method, {"ig_steps": IG_STEPS})
        t, scores = timed(lambda: circuits.discover(method, model, graph, clean.tokens, src, metric, **opts), repeats)
        rows.append(
            (
                method,
                method + (f" ({IG_STEPS} steps)" if opts else ""),
                t,
                stats.spearman(exact.abs().tolist(), scores.abs().tolist()),
                POINTS.get(method, lambda g: None)(groups),
            )
        )
    ours_t, _ = timed(
        lambda: circuits.activation_patching(model, graph, clean.tokens, src, metric, level="node"), repeats
    )
    _, corrupted_cache = model.run_with_cache(corrupted.tokens)
    theirs_t, _ = timed(
        lambda: patching.get_act_patch_attn_head_out_all_pos(
            model, clean.tokens, corrupted_cache, lambda lg: metric(lg[None])[0]
        ),
        repeats,
    )
    rows += [
        ("node_patching", "node patching, every node: mechsynth", ours_t, None, None),
        ("tl_head_patching", "head patching, every head: TransformerLens's patching helper", theirs_t, None, None),
    ]
    return {"trained_steps": last, "batch": batch, "edges": len(graph.edge_list), "rows": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--repeats", type=int, default=7, help="timed calls of each way, their median reported")
    p.add_argument(
        "--model", type=json.loads, default=None, help="the demo model's settings replaced, e.g. '{\"n_heads\": 4}'"
    )
    args = p.parse_args()
    out = measure(args.device, args.batch, args.steps, args.repeats, model=args.model)
    forward, backward = out["rows"][0][2], out["rows"][1][2]
    print(
        f"device {args.device} ({harness.device_name(args.device)}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; demo model{' with ' + json.dumps(args.model) if args.model else ''} after "
        f"{out['trained_steps']} steps, batch {args.batch}, {out['edges']} edges"
    )
    print(f"{'':<62}{'seconds':>10}{'× forward':>11}{'× its passes':>14}{'  agreement with exact':>23}")
    for _, name, t, rho, points in out["rows"]:
        agree = "" if rho is None else f"{rho:.3f}"
        # × its passes: against n forward + backward passes, n the points its definition takes (EAP 1, EAP-IG m)
        passes = "" if points is None else f"{t / (points * backward):.2f} of {points}"
        print(f"{name:<62}{t:>10.4f}{t / forward:>11.1f}{passes:>14}{agree:>23}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
