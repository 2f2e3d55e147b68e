"""Loss landscape probes, seconds per checkpoint, from one run — each two ways:

- llc: mechsynth's probe (devinterp's SGLD: chains × draws steps, its loss traces written to a zarr store)
  against a bare PyTorch SGLD loop doing the same steps (the same update, nothing recorded): devinterp's
  overhead per checkpoint;
- sharpness: mechsynth's probe (Lanczos on forward-over-reverse Hessian-vector products, torch.func)
  against the same Lanczos on double-backward products (plain torch.autograd).

    python benchmarks/landscape_speed.py [--device cuda] [--checkpoints 4]

It trains the demo configuration (markov_icl, 2-layer attention-only) for 300 steps first, and times the
probes with their default options on the last checkpoints.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

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
                    p.add_(-o.lr / 2 * (o.n_beta * p.grad + o.localization * (p - p0)) + o.lr ** 0.5 * torch.randn_like(p))


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--checkpoints", type=int, default=3, help="checkpoints timed (the last ones)")
    args = p.parse_args()
    warnings.filterwarnings("ignore", message="llc: ")
    data = configs.load("demo")
    data["train"] |= {"steps": 300, "checkpoints": 10, "device": args.device}
    data["wandb"] = {"mode": "disabled"}
    run = load_run(train_run(parse_config(data), Path(tempfile.mkdtemp()) / "run", progress=False))
    lo, so = probes.options("llc"), probes.options("sharpness")
    rows = {"llc": [], "llc_bare": [], "sharpness": [], "sharpness_bare": []}
    for step in run.steps[-args.checkpoints:]:
        model = run.trainable(step, args.device)
        rows["llc"].append(timed(lambda: probes.run("llc", model, run.task)))
        view = probes.View(run.task, 0, 0, {}, lambda n: None, options=lo)
        pool = training_batch(view, lo.pool, lo.seed).to(args.device)
        rows["llc_bare"].append(timed(lambda: bare_sgld(run.trainable(step, args.device), pool, lo)))
        rows["sharpness"].append(timed(lambda: probes.run("sharpness", model, run.task)))
        batch = training_batch(view, so.batch, so.seed).to(args.device)
        rows["sharpness_bare"].append(timed(lambda: double_backward_lanczos(model, batch, so.iterations)))
    mean = {k: sum(v) / len(v) for k, v in rows.items()}
    print(f"device {args.device}, {len(rows['llc'])} checkpoints of the demo model, default options "
          f"(llc: {lo.chains} chains × {lo.draws} draws of {lo.batch}; sharpness: {so.iterations} HVPs on {so.batch})")
    print(f"llc        mechsynth (devinterp) {mean['llc']:.2f} s/checkpoint · bare SGLD loop {mean['llc_bare']:.2f} s · "
          f"ratio {mean['llc'] / mean['llc_bare']:.2f}")
    print(f"sharpness  mechsynth (torch.func) {mean['sharpness']:.2f} s/checkpoint · double backward {mean['sharpness_bare']:.2f} s · "
          f"ratio {mean['sharpness'] / mean['sharpness_bare']:.2f}")


if __name__ == "__main__":
    main()
