"""Loss landscape probes, seconds per checkpoint, from one run — each two ways:

- llc: mechsynth's probe (devinterp's SGLD: chains × draws steps, its loss traces written to a zarr store)
  against a bare PyTorch SGLD loop doing the same steps (the same update, nothing recorded): devinterp's
  overhead per checkpoint;
- sharpness: mechsynth's probe (Lanczos on forward-over-reverse Hessian-vector products, torch.func)
  against the same Lanczos on double-backward products (plain torch.autograd).

    python -m benchmarks.landscape_speed [--device cuda] [--checkpoints 4]

It trains the demo configuration (markov_icl, 2-layer attention-only) for 300 steps first, and times the
probes with their default options on the last checkpoints.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from mechsynth import configs, load_run, parse_config, probes, train_run
from mechsynth.probes import llc, sharpness
from mechsynth.probes._landscape import loss, training_batch


def bare_sgld(model: torch.nn.Module, data, o: llc.LLCOptions) -> None:
    """chains × draws SGLD steps with devinterp's update (gradient of nβ·L plus localization, Gaussian noise)."""
    start = [p.detach().clone() for p in model.parameters()]
    g = torch.Generator().manual_seed(o.seed)
    for _ in range(o.chains):
        for p, p0 in zip(model.parameters(), start):
            p.data.copy_(p0)
        for _ in range(o.draws):
            rows = torch.randint(len(data.tokens), (o.batch,), generator=g)
            model.zero_grad()
            loss(model, type(data)(data.tokens[rows], data.targets[rows], data.mask[rows])).backward()
            with torch.no_grad():
                for p, p0 in zip(model.parameters(), start):
                    p.add_(
                        -o.lr / 2 * (o.n_beta * p.grad + o.localization * (p - p0)) + o.lr**0.5 * torch.randn_like(p)
                    )


def double_backward_lanczos(model: torch.nn.Module, batch, iterations: int) -> float:
    params = [p for p in model.parameters() if p.requires_grad]
    sizes = [p.numel() for p in params]

    def matvec(x):
        with sdpa_kernel(SDPBackend.MATH):
            grads = torch.autograd.grad(loss(model, batch), params, create_graph=True)
            dot = sum((g * v.view_as(g)).sum() for g, v in zip(grads, x.to(params[0]).split(sizes)))
            return torch.cat([h.reshape(-1) for h in torch.autograd.grad(dot, params)]).double().cpu()

    return float(sharpness.lanczos(matvec, sum(sizes), iterations, torch.Generator().manual_seed(0))[-1])


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def measure(
    device: str = "cpu",
    checkpoints: int = 3,
    steps: int = 300,
    llc_options: Optional[dict[str, Any]] = None,
    sharpness_options: Optional[dict[str, Any]] = None,
    eval_batch_size: Optional[int] = None,
) -> dict[str, Any]:
    """Mean seconds per checkpoint of each probe and its bare version on the last `checkpoints` checkpoints of the
    demo model after `steps` steps, and their ratios (also what benchmarks/gpu_check.py records). The options
    override the probes' defaults (smaller ones to check the script, not to measure); `eval_batch_size`: the demo
    run's held-out sequences, if not its 512 (their Bayes predictor takes seconds on a CPU)."""
    warnings.filterwarnings("ignore", message="llc: ")
    data = configs.load("demo")
    data["train"] |= {"steps": steps, "checkpoints": 10, "device": device} | (
        {"eval_batch_size": eval_batch_size} if eval_batch_size else {}
    )
    data["wandb"] = {"mode": "disabled"}
    run = load_run(train_run(parse_config(data), Path(tempfile.mkdtemp()) / "run", progress=False))
    lo, so = probes.options("llc", llc_options), probes.options("sharpness", sharpness_options)
    rows: dict[str, list[float]] = {"llc": [], "llc_bare": [], "sharpness": [], "sharpness_bare": []}
    for step in run.steps[-checkpoints:]:
        model = run.trainable(step, device)
        rows["llc"].append(timed(lambda: probes.run("llc", model, run.task, option=llc_options)))
        view = probes.View(run.task, 0, 0, {}, lambda n: None, options=lo)
        pool = training_batch(view, lo.pool, lo.seed).to(device)
        rows["llc_bare"].append(timed(lambda: bare_sgld(run.trainable(step, device), pool, lo)))
        rows["sharpness"].append(timed(lambda: probes.run("sharpness", model, run.task, option=sharpness_options)))
        batch = training_batch(view, so.batch, so.seed).to(device)
        rows["sharpness_bare"].append(timed(lambda: double_backward_lanczos(model, batch, so.iterations)))
    mean = {k: sum(v) / len(v) for k, v in rows.items()}
    return {
        "checkpoints": len(rows["llc"]),
        "llc_options": {"chains": lo.chains, "draws": lo.draws, "batch": lo.batch},
        "sharpness_options": {"iterations": so.iterations, "batch": so.batch},
        "seconds_per_checkpoint": mean,
        "ratios": {
            "llc/bare_sgld": mean["llc"] / mean["llc_bare"],
            "sharpness/double_backward": mean["sharpness"] / mean["sharpness_bare"],
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--checkpoints", type=int, default=3, help="checkpoints timed (the last ones)")
    args = p.parse_args()
    out = measure(args.device, args.checkpoints)
    mean, lo, so = out["seconds_per_checkpoint"], out["llc_options"], out["sharpness_options"]
    print(
        f"device {args.device}, {out['checkpoints']} checkpoints of the demo model, default options "
        f"(llc: {lo['chains']} chains × {lo['draws']} draws of {lo['batch']}; sharpness: {so['iterations']} HVPs on {so['batch']})"
    )
    print(
        f"llc        mechsynth (devinterp) {mean['llc']:.2f} s/checkpoint · bare SGLD loop {mean['llc_bare']:.2f} s · "
        f"ratio {out['ratios']['llc/bare_sgld']:.2f}"
    )
    print(
        f"sharpness  mechsynth (torch.func) {mean['sharpness']:.2f} s/checkpoint · double backward {mean['sharpness_bare']:.2f} s · "
        f"ratio {out['ratios']['sharpness/double_backward']:.2f}"
    )


if __name__ == "__main__":
    main()
