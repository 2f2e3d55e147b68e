"""What watching a training loop costs: the demo's model and task in a plain PyTorch loop, with and without
`mechsynth.Monitor` (probing deferred to the end, timed apart), and the same steps through `mechsynth train`.

    python -m benchmarks.monitor_overhead [--steps 2000] [--repeats 3]

Prints the ratios from one run: loop + Monitor over the bare loop (the monitor's overhead: its ~100
checkpoints, each with the task's held-out loss on 128 sequences), the final probing over the bare loop,
and `mechsynth train` over the bare loop. The loop trains the TransformerLens model (TL 3's
HookedTransformer, TL 4's TransformerBridge), as a user's loop does; `mechsynth train` trains its fused
model. Times are medians over `--repeats` interleaved repeats (machines here are shared: compare ratios).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import mechsynth
from mechsynth import configs, parse_config, train_run


def loop(model, task, steps: int, monitor=None) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.Generator().manual_seed(0)
    for step in range(1, steps + 1):
        batch = task.sample(64, data)
        loss = F.cross_entropy(model(batch.tokens)[batch.mask], batch.targets[batch.mask])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if monitor is not None:
            monitor.step(step, loss)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=2000, help="training steps (the demo's: 2000)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    cfg = parse_config(configs.load("demo") | {"wandb": {"mode": "disabled"}})
    cfg = parse_config({**cfg.to_dict(), "train": {**cfg.to_dict()["train"], "steps": args.steps, "device": "cpu"}})
    task, m = cfg.build_task(), cfg.model

    def fresh():
        torch.manual_seed(0)
        return mechsynth.hooked_model(
            n_layers=m.n_layers,
            d_model=m.d_model,
            n_heads=m.n_heads,
            d_head=m.head_dim,
            n_ctx=task.spec.n_ctx,
            d_vocab=task.spec.d_vocab,
            act_fn=m.act_fn,
            attn_only=True,
        )

    times: dict[str, list[float]] = {
        "bare loop": [],
        "loop + Monitor": [],
        "probing at the end": [],
        "mechsynth train": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            model = fresh()
            t0 = time.perf_counter()
            loop(model, task, args.steps)
            times["bare loop"].append(time.perf_counter() - t0)

            model = fresh()
            t0 = time.perf_counter()
            monitor = mechsynth.Monitor(
                model, Path(tmp) / f"monitored{r}", task, steps=args.steps, checkpoints=cfg.train.checkpoints
            )
            loop(model, task, args.steps, monitor)
            t1 = time.perf_counter()
            monitor.finish()
            times["loop + Monitor"].append(t1 - t0)
            times["probing at the end"].append(time.perf_counter() - t1)

            t0 = time.perf_counter()
            train_run(cfg, Path(tmp) / f"trained{r}", progress=False)
            times["mechsynth train"].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"{args.steps} steps of the demo's model ({mechsynth.models.describe(m)}, {task.name}), torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads, TransformerLens {mechsynth.models.TL_VERSION}"
    )
    for k, v in med.items():
        print(f"  {k:<20} {v:7.2f} s   {v / med['bare loop']:.3f} × bare loop")
    print(
        f"Monitor overhead: {100 * (med['loop + Monitor'] / med['bare loop'] - 1):.1f}% of the loop "
        "(probing deferred to the end)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
