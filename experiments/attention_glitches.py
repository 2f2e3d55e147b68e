"""Attention glitches on flip-flop language modeling (Liu, Ash, Goel, Krishnamurthy & Zhang 2023; seed 003, "Is
Transformer always better than RNNs? Out-of-distribution"): transformers learn to copy the last written bit in
distribution, yet err now and then on sparse and dense sequences; a small LSTM does not; more diverse data helps.

    python -m experiments.attention_glitches            # CPU size: T = 128, 5k steps, 3 groups × 5 seeds (300-304)
    python -m experiments.attention_glitches --full     # the paper's T = 512, 6-layer d = 512 transformer (a GPU)
    python -m experiments.attention_glitches --smoke    # seconds; checks the pipeline only

Three groups of runs on the flip_flop task (the paper's clean setting: fresh FFL(0.8) sequences, the loss on the
read bits; AdamW (0.9, 0.999), weight decay 0.1, 50 warmup steps, linear decay, batch 16; lr 3e-4 as theirs in
--full, 1e-3 at the CPU size, where a pilot 2-layer d = 64 transformer at lr 3e-4 still erred on 19 % of reads
after 1500 steps and at 1e-3 on 0.2 %; 5k steps rather than their 10k, evaluated every 500, so that it trains in
under an hour on 2 CPU cores, where a step takes ~50 ms and an evaluation of the three splits ~3.4 s):
  - transformer: a GPT-2-style transformer (learned positions, LayerNorm, GELU MLP);
  - diverse: the same, trained on an equal mixture of FFL(0.8), FFL(0.98) and FFL(0.1) (their remedy R4);
  - recurrent: a 1-layer LSTM (d = 128) for 500 steps at lr 3e-4, as theirs.
Each final model reads fixed test sequences, the same for every seed, of the three distributions (in
distribution, sparse FFL(0.98), dense FFL(0.1)): its wrong reads out of all. On the transformers the
read_attention probe pools the same count of sequences to say, for each wrong read, where the read head's
attention peaked: on another write (a stale one), on no write, or on the right one. During training the trainer
evaluates every EVAL_EVERY steps on held-out batches of each split (the error curves). The claims and their rules
are experiments/rules/attention_glitches.py.

Writes OUT/attention_glitches.json and OUT/attention_glitches.png.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from experiments import harness
from mechsynth import probes
from mechsynth.runs.run import Run

NAME = "attention_glitches"
SPLITS = {"eval": "eval", "sparse": "eval_sparse", "dense": "eval_dense"}  # results' name -> the task's split
GROUPS = ("transformer", "diverse", "recurrent")
TEST_SEED = 54321  # the test sequences: the same for every seed and group
CHUNK = 256
ATTENTION = ("stale", "elsewhere", "right")

SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(
        seeds=2,
        lr=1e-3,
        length=8,
        n_layers=1,
        n_heads=2,
        d_model=16,
        lstm_d=16,
        steps=30,
        lstm_steps=30,
        eval_every=10,
        eval_batch=64,
        test=128,
        probe_batch=64,
        probe_chunks=1,
    ),
    "cpu": dict(
        seeds=list(range(300, 305)),
        lr=1e-3,
        length=128,
        n_layers=2,
        n_heads=4,
        d_model=64,
        lstm_d=128,
        steps=5000,
        lstm_steps=500,
        eval_every=500,
        eval_batch=1000,
        test=8192,
        probe_batch=256,
        probe_chunks=8,
    ),
    "full": dict(
        seeds=list(range(300, 310)),
        lr=3e-4,
        length=512,
        n_layers=6,
        n_heads=8,
        d_model=512,
        lstm_d=128,
        steps=10000,
        lstm_steps=500,
        eval_every=100,
        eval_batch=1000,
        test=32768,
        probe_batch=32,
        probe_chunks=64,
    ),
}


def run_config(c: dict[str, Any], group: str) -> dict[str, Any]:
    recurrent = group == "recurrent"
    model = (
        {"kind": "recurrent", "cell": "lstm", "n_layers": 1, "d_model": c["lstm_d"]}
        if recurrent
        else {
            "n_layers": c["n_layers"],
            "n_heads": c["n_heads"],
            "d_model": c["d_model"],
            "d_head": c["d_model"] // c["n_heads"],
        }
    )
    return {
        "task": {"name": "flip_flop", "length": c["length"], "diverse": group == "diverse"},
        "model": model,
        "train": {
            "steps": c["lstm_steps"] if recurrent else c["steps"],
            "batch_size": 16,
            "optimizer": "adamw",
            "lr": 3e-4 if recurrent else c["lr"],
            "betas": [0.9, 0.999],
            "weight_decay": 0.1,
            "warmup_steps": 50,
            "schedule": "linear",
            "eval_every": c["eval_every"],
            "eval_batch_size": c["eval_batch"],
            # only the last is read; the others let a run cut short resume near where it stopped
            "checkpoints": 12,
        },
    }


@torch.no_grad()
def test_errors(model: torch.nn.Module, task: Any, n: int, device: str) -> dict[str, dict[str, int]]:
    """Wrong reads out of all on `n` test sequences of each split (the same sequences for every model)."""
    out = {}
    for name, split in SPLITS.items():
        g = torch.Generator().manual_seed(TEST_SEED)
        reads = wrong = 0
        for start in range(0, n, CHUNK):
            batch = task.sample(min(CHUNK, n - start), g, split=split).to(device)
            on = batch.truth["source"] >= 0
            wrong += int(((model(batch.tokens).argmax(-1) != batch.targets) & on).sum())
            reads += int(on.sum())
        out[name] = {"reads": reads, "wrong": wrong}
    return out


def attention(run: Run, c: dict[str, Any], device: str) -> dict[str, Any]:
    """The read_attention probe on probe_chunks × probe_batch sequences of each split at the last checkpoint, pooled:
    the OOD wrong reads and the shares of them by where the read head peaked; `off_correct` over the right reads."""
    model = run.model(run.steps[-1], device)
    results = [
        probes.run("read_attention", model, run.task, batch_size=c["probe_batch"], seed=TEST_SEED + k).metrics
        for k in range(c["probe_chunks"])
    ]
    wrong = sum(m[f"{s}/wrong_reads"] for m in results for s in ("sparse", "dense"))
    out: dict[str, Any] = {"wrong": int(wrong), "head_score": results[0]["max"]}
    for key in ATTENTION:
        out[key] = (
            (
                sum(
                    m[f"{s}/{key}"] * m[f"{s}/wrong_reads"]
                    for m in results
                    for s in ("sparse", "dense")
                    if m[f"{s}/wrong_reads"]
                )
                / wrong
            )
            if wrong
            else None
        )
    right_reads = [(m[f"{s}/reads"] - m[f"{s}/wrong_reads"], m[f"{s}/off_correct"]) for m in results for s in SPLITS]
    total = sum(n for n, _ in right_reads)
    out["off_correct"] = sum(n * v for n, v in right_reads if n) / total if total else None
    return out


def curve(run: Run) -> dict[str, list[float]]:
    """The error of each split at every evaluation during training."""
    rows = [r for r in run.metrics if "eval/error" in r]
    return {
        "steps": [r["step"] for r in rows],
        **{name: [r[f"{split}/error"] for r in rows] for name, split in SPLITS.items()},
    }


def analyse(run: Run, seed: int, group: str, c: dict[str, Any], device: str) -> dict[str, Any]:
    row = {
        "seed": seed,
        "final": test_errors(run.trainable(run.steps[-1], device), run.task, c["test"], device),
        "curve": curve(run),
        "train_time_s": round(harness.train_seconds(run), 1),
    }
    if group != "recurrent":
        row["attention"] = attention(run, c, device)
    return row


def plot(c: dict[str, Any], groups: dict[str, list[dict[str, Any]]], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for col, (name, ax) in enumerate(zip(("sparse", "dense"), axes[:2])):
        for gi, (group, rows) in enumerate(groups.items()):
            for i, r in enumerate(rows):
                cv = r["curve"]
                ax.plot(
                    [max(s, 1) for s in cv["steps"]],
                    [max(v, 1e-5) for v in cv[name]],
                    color=f"C{gi}",
                    alpha=0.7,
                    linewidth=0.8,
                    label=group if i == 0 else None,
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel(f"{name} read error (held-out batch; 1e-5 = none)")
        ax.legend(fontsize=7)
    ax = axes[2]
    for gi, (group, rows) in enumerate(groups.items()):
        for name_i, name in enumerate(SPLITS):
            ys = [max(r["final"][name]["wrong"], 0.5) / r["final"][name]["reads"] for r in rows]
            ax.scatter(
                [name_i + (gi - 1) * 0.22] * len(ys), ys, color=f"C{gi}", s=14, label=group if name_i == 0 else None
            )
    ax.set_xticks(range(len(SPLITS)), list(SPLITS))
    ax.set_yscale("log")
    ax.set_ylabel("test read error (a seed with none: at ½ error)")
    ax.legend(fontsize=7)
    fig.suptitle(
        f"flip-flop at T = {c['length']}: {c['n_layers']}-layer transformers (d = {c['d_model']}) against a "
        f"1-layer LSTM (d = {c['lstm_d']}); the test: {c['test']} sequences per split"
    )
    return harness.save_figure(fig, path)


@harness.experiment(NAME, __doc__)
def main(session: harness.Session, args: harness.Args) -> int:
    c = SIZES[args.size]
    seeds = harness.seeds(c["seeds"])
    runs = session.train_runs([({"group": g}, seed, run_config(c, g)) for g in GROUPS for seed in seeds])
    groups = {g: [analyse(runs.run(seed, group=g), seed, g, c, args.device) for seed in seeds] for g in GROUPS}
    for g, rows in groups.items():
        for r in rows:
            errs = ", ".join(f"{s} {r['final'][s]['wrong']}/{r['final'][s]['reads']}" for s in SPLITS)
            print(f"{g} seed {r['seed']}: wrong reads {errs}")
    results = {
        "groups": groups,
        "tokens": c["steps"] * 16 * c["length"],
        "recurrent_tokens": c["lstm_steps"] * 16 * c["length"],
        "test_sequences": c["test"],
        "probe_sequences": c["probe_chunks"] * c["probe_batch"],
        "reads_per_test": {s: groups["transformer"][0]["final"][s]["reads"] for s in SPLITS},
    }
    figures = [plot(c, groups, args.out / f"{NAME}.png")]
    session.finish({"size": c, "runs": {g: run_config(c, g) for g in GROUPS}}, results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(harness.cli(main))
