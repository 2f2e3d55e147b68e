"""Training throughput, from one run: mechsynth vs bare PyTorch vs TransformerLens's own helper.

    python -m benchmarks.train_speed [--device cpu|cuda] [--steps 60] [--rounds 3]

All three train the same architecture (2-layer attention-only, d_model 64, 2 heads) with AdamW on
`markov_icl` batches of 64 x 100 tokens:
  mechsynth  - our Trainer: online batches generated on the device, fused attention.
  bare       - a minimal PyTorch model with the same math (nn.Linear QKV + scaled_dot_product_attention)
               and a plain loop over the same online batches: the hardware-speed reference.
  tl_helper  - TransformerLens's hooked model trained by TL's training helper from a DataLoader.
And a loop of your own (docs/tutorials/own_training_loop.md), the same plain loop (a batch sampled per step, AdamW)
over two models:
  own_loop_tl    - TransformerLens's model, `mechsynth.hooked_model` (TL 3: HookedTransformer, TL 4: TransformerBridge);
  own_loop_fused - mechsynth's fused model, `mechsynth.build_model` (TransformerLens's parameter names).
Rounds are interleaved and the median is reported, so machine noise hits all three alike.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from typing import Any

os.environ.setdefault("TQDM_DISABLE", "1")

import mechsynth
import torch
import torch.nn as nn
import torch.nn.functional as F

from mechsynth import models, tasks
from mechsynth.models.tl_compat import TL_MAJOR, TL_VERSION
from mechsynth.training.train import Trainer, TrainConfig

D_MODEL, N_HEADS, N_LAYERS, BATCH, T = 64, 2, 2, 64, 100


class BareBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(D_MODEL)
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.out = nn.Linear(D_MODEL, D_MODEL)

    def forward(self, x):
        b, p, _ = x.shape
        q, k, v = self.qkv(self.ln(x)).view(b, p, 3, N_HEADS, -1).permute(2, 0, 3, 1, 4)
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.out(z.transpose(1, 2).reshape(b, p, D_MODEL))


class Bare(nn.Module):
    def __init__(self, vocab: int):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, D_MODEL), nn.Embedding(T + 1, D_MODEL)
        self.blocks = nn.Sequential(*[BareBlock() for _ in range(N_LAYERS)])
        self.ln, self.unembed = nn.LayerNorm(D_MODEL), nn.Linear(D_MODEL, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos.weight[: tokens.shape[1]]
        return self.unembed(self.ln(self.blocks(x)))


def timed(step, n: int, device) -> float:
    for _ in range(3):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def measure(device: str | torch.device, steps: int = 60, rounds: int = 3, compile: bool = False) -> dict[str, Any]:
    """The median steps/s of each contender (`steps` per round, `rounds` interleaved rounds), their ratios and
    data generation's share of a mechsynth step (also what benchmarks/gpu_check.py records)."""
    device = torch.device(device)
    task = tasks.make("markov_icl", {"k": 3, "length": T})
    mcfg = models.TransformerConfig(n_layers=N_LAYERS, n_heads=N_HEADS, d_model=D_MODEL, attn_only=True)
    tcfg = TrainConfig(batch_size=BATCH, lr=1e-3, grad_clip=None, device=str(device))

    trainer = Trainer(models.build(mcfg, task.spec), task, tcfg, device)
    contenders = {"mechsynth": trainer.train_step}
    if compile:
        compiled = Trainer(models.build(mcfg, task.spec), task, dataclasses.replace(tcfg, compile=True), device)
        contenders["mechsynth_compiled"] = compiled.train_step

    # A plain loop (AdamW, fresh batches) over any model: bare PyTorch's, and a loop of your own over TransformerLens's
    # model and over mechsynth's fused model, the same batches for each.
    def own_loop(model: nn.Module):
        model = model.to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator(device=device).manual_seed(0)

        def step():
            batch = task.sample(BATCH, g, device)
            loss = F.cross_entropy(model(batch.tokens).flatten(0, 1), batch.targets.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        return step

    own = {
        "own_loop_tl": own_loop(
            mechsynth.hooked_model(
                n_layers=N_LAYERS,
                d_model=D_MODEL,
                n_heads=N_HEADS,
                d_head=D_MODEL // N_HEADS,
                n_ctx=task.spec.n_ctx,
                d_vocab=task.spec.d_vocab,
                act_fn="relu",
                attn_only=True,
            )
        ),
        "own_loop_fused": own_loop(
            mechsynth.build_model(task, n_layers=N_LAYERS, n_heads=N_HEADS, d_model=D_MODEL, attn_only=True)
        ),
    }
    bare_step = own_loop(Bare(task.spec.d_vocab))

    # TL's helper runs whole epochs over a Dataset; give it exactly `steps` batches of pre-made sequences.
    if TL_MAJOR >= 4:
        from transformer_lens.tools.training import TrainConfig as TLTrainConfig, train as tl_train
    else:
        from transformer_lens.train import HookedTransformerTrainConfig as TLTrainConfig, train as tl_train
    fused = models.build(models.TransformerConfig(**{**mcfg.__dict__, "n_ctx": T + 1}), task.spec)
    tl_model = models.hooked(fused, device).train()
    g = torch.Generator().manual_seed(1)
    seqs = [task.sample(BATCH, g) for _ in range(steps + 3)]
    data = [{"tokens": torch.cat([b.tokens, b.targets[:, -1:]], 1)[i]} for b in seqs for i in range(BATCH)]
    tl_cfg = TLTrainConfig(
        num_epochs=1,
        batch_size=BATCH,
        lr=1e-3,
        optimizer_name="AdamW",
        weight_decay=0.01,
        device=str(device),
        print_every=None,
    )

    def tl_run() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        tl_train(tl_model, tl_cfg, data)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return len(data) // BATCH / (time.perf_counter() - t0)

    # Data generation's share of a mechsynth step (it samples `data_chunk` batches per call).
    chunk, gen = tcfg.data_chunk, torch.Generator(device=device).manual_seed(0)
    sample_rate = chunk * timed(lambda: task.sample(BATCH * chunk, gen, device), max(1, steps // chunk), device)

    rates: dict[str, list[float]] = {name: [] for name in [*contenders, "bare", "tl_helper", *own]}
    for _ in range(rounds):
        for name, step in contenders.items():
            rates[name].append(timed(step, steps, device))
        rates["bare"].append(timed(bare_step, steps, device))
        rates["tl_helper"].append(tl_run())
        for name, step in own.items():
            rates[name].append(timed(step, steps, device))
    med = {k: statistics.median(v) for k, v in rates.items()}
    ratios = {f"{ours}/{other}": med[ours] / med[other] for ours in contenders for other in ("bare", "tl_helper")}
    ratios["own_loop_fused/own_loop_tl"] = (
        med["own_loop_fused"] / med["own_loop_tl"]
    )  # what the fused model saves your loop
    ratios["mechsynth/own_loop_tl"] = (
        med["mechsynth"] / med["own_loop_tl"]
    )  # `mechsynth train` against your loop over TL
    return {"steps_per_s": med, "ratios": ratios, "data_generation_share": med["mechsynth"] / sample_rate}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="also time mechsynth with train.compile = true")
    args = ap.parse_args()
    out = measure(args.device, args.steps, args.rounds, args.compile)
    med, ratios = out["steps_per_s"], out["ratios"]
    print(
        f"device {args.device}, torch {torch.__version__}, TransformerLens {TL_VERSION}, threads {torch.get_num_threads()}"
    )
    print(f"model: {N_LAYERS} layers attention-only, d_model {D_MODEL}, {N_HEADS} heads; batch {BATCH} x {T} tokens")
    for k, v in med.items():
        print(f"  {k:<14} {v:8.1f} steps/s")
    print(f"mechsynth / bare      = {ratios['mechsynth/bare']:.2f}x  (target >= 0.9)")
    print(f"mechsynth / tl_helper = {ratios['mechsynth/tl_helper']:.2f}x  (target >= 2)")
    if "mechsynth_compiled" in med:
        print(f"compiled / bare       = {ratios['mechsynth_compiled/bare']:.2f}x")
        print(f"compiled / tl_helper  = {ratios['mechsynth_compiled/tl_helper']:.2f}x")
    print(f"data generation       = {100 * out['data_generation_share']:.1f}% of a mechsynth step (target < 10%)")
    bridge = "TransformerBridge" if TL_MAJOR >= 4 else "HookedTransformer"
    print(
        f"your own loop: fused model / {bridge} = {ratios['own_loop_fused/own_loop_tl']:.2f}x;  "
        f"mechsynth train / your loop over {bridge} = {ratios['mechsynth/own_loop_tl']:.2f}x"
    )


if __name__ == "__main__":
    main()
