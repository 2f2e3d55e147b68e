"""Circuit discovery, seconds per checkpoint, from one run, as multiples of one plain forward pass of the same
hooked model on the same batch:

- one forward, and one forward with a backward pass of the metric (what EAP should cost);
- each method of mechsynth.circuits (exact edge patching, EAP, EAP-IG with 8 steps, ACDC), scoring every edge;
- node patching of every head two ways: mechsynth's (the edges out of a head patched together, heads batched
  as copies of the batch) and TransformerLens's own `patching.get_act_patch_attn_head_out_all_pos` (a forward
  per head); the two give the same numbers (tests/test_circuits.py);
- how well each faster method agrees with exact edge patching (Spearman correlation of |score|).

    python benchmarks/circuit_speed.py [--device cuda] [--batch 64] [--steps 600]

It trains the demo configuration (markov_icl, 2-layer attention-only) for --steps steps first, and times the
methods on its last checkpoint with the task's counterfactual batch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # TransformerLens's patching helper draws a bar per call

import torch  # noqa: E402
from transformer_lens import patching  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "experiments"))
import harness  # noqa: E402

from mechsynth import circuits, configs, load_run, parse_config, train_run  # noqa: E402


def timed(fn, repeats: int = 5) -> tuple[float, object]:
    """The median wall time of `repeats` calls (after one warm-up), and the last result."""
    out = fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=600)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = configs.load("demo")
        cfg = {**cfg, "train": {**cfg["train"], "steps": args.steps, "device": args.device}, "wandb": {"mode": "disabled"}}
        run = load_run(train_run(parse_config(cfg), Path(tmp) / "demo", progress=False))
        last = run.steps[-1]
        model = run.model(last, args.device)
    task = run.task
    clean = task.sample(args.batch, torch.Generator(device=args.device).manual_seed(0), args.device, task.main_eval)
    corrupted = task.counterfactual(clean, torch.Generator().manual_seed(1))
    graph = circuits.Graph.of(model)
    metric = circuits.patch_metric(task.patch_metric, clean, corrupted)
    src = circuits.source(model, graph, clean.tokens, corrupted.tokens, "resample")

    with torch.no_grad():
        forward, _ = timed(lambda: model(clean.tokens))

    def forward_backward():
        model.zero_grad()
        metric(model(clean.tokens)[None]).sum().backward()
    backward, _ = timed(forward_backward)
    rows = [("one forward", forward, None), ("forward + backward of the metric", backward, None)]
    exact_t, exact = timed(lambda: circuits.discover("patching", model, graph, clean.tokens, src, metric), 3)
    rows.append((f"exact edge patching ({len(graph.edge_list)} edges)", exact_t, 1.0))
    for method in ("eap", "eap_ig", "acdc"):
        t, scores = timed(lambda: circuits.discover(method, model, graph, clean.tokens, src, metric), 3)
        rows.append((method, t, harness.spearman(exact.abs().tolist(), scores.abs().tolist())))
    ours_t, _ = timed(lambda: circuits.activation_patching(model, graph, clean.tokens, src, metric, level="node"), 3)
    _, corrupted_cache = model.run_with_cache(corrupted.tokens)
    theirs_t, _ = timed(lambda: patching.get_act_patch_attn_head_out_all_pos(
        model, clean.tokens, corrupted_cache, lambda lg: metric(lg[None])[0]), 3)
    rows += [("node patching, every node: mechsynth", ours_t, None),
             ("head patching, every head: TransformerLens's patching helper", theirs_t, None)]

    print(f"device {args.device} ({harness.device_name(args.device)}), torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; demo model after {last} steps, batch {args.batch}")
    print(f"{'':<62}{'seconds':>10}{'× forward':>11}{'  agreement with exact':>23}")
    for name, t, rho in rows:
        agree = "" if rho is None else f"{rho:.3f}"
        print(f"{name:<62}{t:>10.4f}{t / forward:>11.1f}{agree:>23}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
