"""The zoo circuit discovery is benchmarked on: models whose circuit is known, each with the truth its checkpoints
are scored against stated.

- planted: hand-set weights (an induction circuit: a previous-token head, K-composition, an induction head; the
  other heads reading at random and writing nothing). Truth: the planted edges.
- compiled: RASP programs compiled by tracr into committed weights (`tracr/`, written by
  experiments/tracr_programs.py), patched under zero ablation. Truth: the structural edges (who writes what another
  reads, on a path to the output) less those whose removal changes nothing (`informative` in each program's record).
- trained: small runs of tasks whose circuit is known, at log-spaced checkpoints through their phase transition
  (markov_icl: the in-context bigram task, uniform -> unigram -> induction; sparse_boolean: a majority of 3 of 16
  bits; causal_icl: a chain's next token, read from the query's parent). Truth: the exact-patching circuit at that checkpoint (the fewest edges by exact effect keeping `LEVEL` of
  the gap); markov_icl also names the task's own, the induction circuit through the heads the pattern probes
  name at the last checkpoint, scored as `auroc_task`.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.circuits.patching import Metric, patch_metric
from mechsynth.tasks.base import Batch

TRACR = Path(__file__).resolve().parent / "tracr"
LEVEL = 0.9  # the faithfulness a circuit must keep: the exact-patching truth of trained models, and detection
KINDS = ("planted", "compiled", "trained")


@dataclass
class Case:
    name: str
    kind: str  # one of KINDS
    truth_says: str  # what each checkpoint is scored against, in words
    checkpoints: Callable[[], Iterator[tuple[int, Any]]]  # (step, hooked model), one after another
    clean: Int[Tensor, "batch pos"]
    corrupted: Int[Tensor, "batch pos"]
    metric: Metric
    truth: Optional[list[str]] = None  # edge names, the same at every checkpoint; None: exact patching's at each
    task_truth: Optional[Callable[[], list[str]]] = None  # the task's own circuit, where it names edges
    notes: dict[str, Any] = field(default_factory=dict)
    ablation: str = "resample"  # what a patched edge carries (`circuits.source`)


# ---- planted ---------------------------------------------------------------------------------------------


def _heads(n_heads: int, d_model: int, d_head: int, g: torch.Generator) -> dict[str, Tensor]:
    """One attention layer of heads with small random reads and no writes."""
    a = {w: torch.randn(n_heads, d_model, d_head, generator=g) * 0.1 for w in ("W_Q", "W_K", "W_V")}
    return (
        a
        | {"W_O": torch.zeros(n_heads, d_head, d_model), "b_O": torch.zeros(d_model)}
        | {b: torch.zeros(n_heads, d_head) for b in ("b_Q", "b_K", "b_V")}
    )


def planted_induction(n_heads: int = 3, seed: int = 0, V: int = 6, N: int = 16) -> tuple[Any, list[str]]:
    """A previous-token head in layer 0 and an induction head in layer 1 at random indices, the other heads
    reading at random and writing nothing, the logits reading only what the induction head writes. Residual
    stream = [token | position | previous token | copied token] one-hots. Returns the model and its circuit for
    an input whose tokens change and positions do not: input -> prev.v (the previous token), prev -> induction.k
    (K-composition), input -> induction.q and .v, induction -> logits."""
    from mechsynth.models import TransformerConfig
    from mechsynth.models.tl_compat import hooked_transformer

    g = torch.Generator().manual_seed(seed)
    d_model, d_head = 3 * V + N, max(V, N)
    tok, pos, prev, out = slice(0, V), slice(V, V + N), slice(V + N, 2 * V + N), slice(2 * V + N, 3 * V + N)
    big = 40.0 * math.sqrt(d_head)
    sd = {
        "embed.W_E": torch.zeros(V, d_model),
        "pos_embed.W_pos": torch.zeros(N, d_model),
        "unembed.W_U": torch.zeros(d_model, V),
        "unembed.b_U": torch.zeros(V),
    }
    sd["embed.W_E"][:, tok] = torch.eye(V)
    sd["pos_embed.W_pos"][:, pos] = torch.eye(N)
    sd["unembed.W_U"][out] = 5 * torch.eye(V)
    p, i = torch.randint(n_heads, (2,), generator=g).tolist()
    for layer, h in ((0, p), (1, i)):
        a = _heads(n_heads, d_model, d_head, g)
        for w in ("W_Q", "W_K", "W_V"):
            a[w][h] = 0
        if layer == 0:  # attends from position t to t - 1 and writes the token it reads into `prev`
            a["W_Q"][h, pos, :N] = torch.eye(N)
            a["W_K"][h, pos, :N] = big * torch.eye(N).roll(1, dims=1)
            a["W_K"][h, V + N - 1, 0] = 0  # the last position has no successor
            a["W_V"][h, tok, :V] = torch.eye(V)
            a["W_O"][h, :V, prev] = torch.eye(V)
        else:  # attends to where the previous token equals this token and copies what is there
            a["W_Q"][h, tok, :V] = big * torch.eye(V)
            a["W_K"][h, prev, :V] = torch.eye(V)
            a["W_V"][h, tok, :V] = torch.eye(V)
            a["W_O"][h, :V, out] = torch.eye(V)
        sd |= {f"blocks.{layer}.attn.{k}": v for k, v in a.items()}
    cfg = TransformerConfig(
        n_layers=2, n_heads=n_heads, d_model=d_model, d_head=d_head, attn_only=True, normalization="none"
    )
    truth = [f"input->L0H{p}.v", f"L0H{p}->L1H{i}.k", f"input->L1H{i}.q", f"input->L1H{i}.v", f"L1H{i}->logits"]
    return hooked_transformer(cfg, V, V, N, sd), truth


def repeated(seed: int, batch: int = 16, V: int = 6, N: int = 16) -> Batch:
    """Random halves repeated; scored: the second half's next tokens, which only induction predicts."""
    half = torch.randint(V, (batch, N // 2), generator=torch.Generator().manual_seed(seed))
    toks = torch.cat([half, half], 1)
    mask = torch.zeros_like(toks, dtype=torch.bool)
    mask[:, N // 2 : -1] = True
    return Batch(toks, torch.cat([toks[:, 1:], toks[:, :1]], 1), mask)


def planted_case(n_heads: int = 3, seed: int = 0) -> Case:
    model, truth = planted_induction(n_heads, seed)
    clean, corrupted = repeated(1), repeated(2)
    return Case(
        f"planted_induction_{n_heads}h",
        "planted",
        "the planted edges",
        lambda: iter([(0, model)]),
        clean.tokens,
        corrupted.tokens,
        patch_metric("logit_diff", clean, corrupted),
        truth,
    )


# ---- compiled (tracr) --------------------------------------------------------------------------------------


def numerical_metric(
    clean_y: Float[Tensor, "batch pos"], corrupted_y: Float[Tensor, "batch pos"], mask: Float[Tensor, "batch pos"]
) -> Metric:
    """The share of the clean-vs-counterfactual output difference kept, over the scored positions:
    sum((out - y_cf) * (y_clean - y_cf)) / sum((y_clean - y_cf)^2), out the one output logit."""
    diff = (clean_y - corrupted_y) * mask

    def metric(logits: Tensor) -> Tensor:  # [copy, batch, pos, 1]
        return ((logits[..., 0] - corrupted_y) * diff).sum((1, 2)) / diff.pow(2).sum()

    return metric


def tracr_programs() -> list[str]:
    return sorted(p.stem for p in TRACR.glob("*.json"))


def tracr_model(name: str) -> tuple[Any, dict[str, Any]]:
    """(hooked model, record) of a committed tracr program."""
    from safetensors.torch import load_file

    from mechsynth.models import TransformerConfig
    from mechsynth.models.tl_compat import hooked_transformer

    record = json.loads((TRACR / f"{name}.json").read_text())
    sd = load_file(str(TRACR / f"{name}.safetensors"))
    return hooked_transformer(
        TransformerConfig(**record["config"]), record["V"], record["V_out"], record["N"], sd
    ), record


def resample_truth(record: dict[str, Any]) -> list[str]:
    """A program's edges that matter under resample ablation: those carrying something the counterfactual changes
    (not only positions, BOS or tracr's constant dimension, which both runs share), less the inert ones. (Not every
    one of them need change this batch's output: running_max's do not all; the zoo scores zero ablation.)"""
    shared = lambda label: label.startswith("indices:") or label in ("one", f"tokens:{record['bos']}")  # noqa: E731
    inert = set(record.get("inert", {}))
    return [e for e in record["truth"] if e not in inert and not all(shared(x) for x in record["carries"][e])]


def record_case(record: dict[str, Any]) -> tuple[Tensor, Tensor, Tensor, Tensor, Metric]:
    """(clean tokens, corrupted tokens, scored positions, the clean batch's RASP outputs as the logits give them (the
    logit index for categorical, the value for numerical), metric) of a program's record."""
    clean, corrupted = torch.tensor(record["clean"]), torch.tensor(record["corrupted"])
    mask = torch.tensor([[v is not None for v in row] for row in record["clean_outputs"]])
    if record["output"] == "categorical":
        ids = lambda rows: torch.tensor(
            [
                [record["outputs"].index(v) if v is not None else 0 for v in row]  # noqa: E731
                for row in rows
            ]
        )
        targets, cf_targets = ids(record["clean_outputs"]), ids(record["corrupted_outputs"])
        return (
            clean,
            corrupted,
            mask,
            targets,
            patch_metric("logit_diff", Batch(clean, targets, mask), Batch(corrupted, cf_targets, mask)),
        )
    values = lambda rows: torch.tensor([[v if v is not None else 0.0 for v in row] for row in rows])  # noqa: E731
    y, y_cf = values(record["clean_outputs"]), values(record["corrupted_outputs"])
    return clean, corrupted, mask, y, numerical_metric(y, y_cf, mask.float())


def tracr_case(name: str) -> Case:
    model, record = tracr_model(name)
    clean, corrupted, _, _, metric = record_case(record)
    # zero ablation: the truth is the compiled circuit itself, whatever the counterfactual changes
    return Case(
        f"tracr_{name}",
        "compiled",
        "the compiled edges that carry information (structural, less the inert: "
        "those whose removal changes no output), under zero ablation",
        lambda: iter([(0, model)]),
        clean,
        corrupted,
        metric,
        record["informative"],
        notes={"source": record["source"], "output": record["output"]},
        ablation="zero",
    )


# ---- trained -----------------------------------------------------------------------------------------------

# Small enough that the whole zoo trains and is scored in minutes on 2 cores; `--size full` for longer runs.
TRAINED: dict[str, dict[str, Any]] = {
    "markov_icl": {
        "task": {"name": "markov_icl", "k": 3, "order": 2, "length": 64},
        "model": {"n_layers": 2, "n_heads": 1, "d_model": 32, "attn_only": True},
        "train": {"steps": 800, "batch_size": 64, "lr": 3e-3, "eval_every": 50, "checkpoints": 40},
    },
    "sparse_boolean": {
        "task": {"name": "sparse_boolean", "length": 16, "s": 3, "function": "majority"},
        "model": {"n_layers": 1, "n_heads": 1, "d_model": 64},
        "train": {"steps": 1500, "batch_size": 64, "lr": 1e-3, "eval_every": 50, "checkpoints": 40},
    },
    # a chain's next token from its parent's (Nichani et al. 2024): the answer reads the query's parent
    "causal_icl": {
        "task": {"name": "causal_icl", "k": 10, "length": 20, "graph": "chain", "alpha": 0.1, "target": "query"},
        "model": {"n_layers": 2, "n_heads": 1, "d_model": 64, "attn_only": True},
        "train": {
            "steps": 1500,
            "batch_size": 128,
            "lr": 1e-3,
            "eval_every": 100,
            "eval_batch_size": 128,
            "checkpoints": 40,
        },
    },
}


def trained_case(name: str, run_dir: Path, checkpoints: int, batch: int, steps: Optional[int] = None) -> Case:
    """Train (or reuse, when `run_dir` holds the finished run) the zoo's run of `name`, and its case: `checkpoints`
    log-spaced checkpoints, the task's held-out batch of `batch` and its counterfactual."""
    from mechsynth.probes import log_spaced
    from mechsynth.runs.run import load_run
    from mechsynth.runs.runconfig import parse_config
    from mechsynth.runs.runner import train_run

    table = json.loads(json.dumps(TRAINED[name]))
    if steps is not None:
        table["train"]["steps"] = steps
    table["wandb"] = {"mode": "disabled"}
    cfg = parse_config(table)
    done = run_dir.exists() and (run_dir / "config.json").exists()
    if not done or load_run(run_dir).steps[-1] < cfg.train.steps:
        train_run(cfg, run_dir, resume=done, progress=False)
    run = load_run(run_dir)
    visit = log_spaced(run.steps, checkpoints)
    task = run.task
    clean = task.sample(batch, torch.Generator().manual_seed(1234), "cpu", task.main_eval)
    corrupted = task.counterfactual(clean, torch.Generator().manual_seed(1234))
    metric = patch_metric(task.patch_metric, clean, corrupted)
    # the same at every checkpoint: found once, when first asked for
    task_truth = functools.cache(lambda: _induction_circuit(run)) if name == "markov_icl" else None
    return Case(
        f"trained_{name}",
        "trained",
        f"the exact-patching circuit at each checkpoint (the fewest edges by exact effect keeping {LEVEL} of the gap)",
        lambda: run.models(visit),
        clean.tokens,
        corrupted.tokens,
        metric,
        None,
        task_truth,
        notes={"run": str(run_dir), "steps": visit},
    )


def _induction_circuit(run: Any) -> list[str]:
    """markov_icl's circuit: the induction circuit through the layer-0 head the previous-token probe scores highest
    and the layer-1 head the induction probe does, at the last checkpoint."""
    from mechsynth import probes

    model = next(iter(run.models([run.steps[-1]])))[1]
    p, i = (
        f"L{layer}H{int(probes.run(probe, model, run.task, batch_size=32).per_head[layer].argmax())}"
        for probe, layer in (("previous_token", 0), ("induction", 1))
    )
    return [f"input->{p}.v", f"{p}->{i}.k", f"input->{i}.q", f"input->{i}.v", f"{i}->logits"]
