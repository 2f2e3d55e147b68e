"""Seeds side by side: `[train] seeds = S` trains S independent models as one batched computation.

The model is built with `n_models=S`: every weight has a leading model axis (`n_models`), and model i starts
exactly like a single model with `init_seed + i`. Seed i draws its own data stream (data seed
`train.seed + i`), its loss is the mean over its own batch, and the loss we differentiate is the
sum over seeds, so each seed's slice of the gradient is the gradient its own run would get. The
optimizer must be elementwise (each optimizer declares it, mechsynth/optimizers/; TrainConfig refuses
another with seeds > 1), and gradient clipping uses each seed's own global norm: seed i follows the
same trajectory as a separate `seeds = 1` run with those two seeds, up to float rounding.

How the forward and backward passes run is `train.seed_passes`. On a GPU one stacked pass for all
seeds: models this small leave it launch-bound, so S models cost little more than one. On a CPU that
holds only while a seed's activations are small. Once they outgrow a core's cache (a few MiB), S
models side by side spill to memory and a stacked pass measured slower per model than one model
alone; then each seed's pass runs on its own view of its slice of the weights, spread over one
worker thread per core (which gets more out of the cores than the intra-op threads of small ops
do). Clipping and the optimizer step stay batched over the stacked weights, as does everything on disk.

On disk each seed is an ordinary run directory, so `load_run`, `mechsynth probe` and `--resume`
work on it unchanged (a seed can even be continued alone):

    RUN_DIR/config.json      the batched job (train.seeds = S)
    RUN_DIR/seed_i/          config.json (seeds = 1, train.seed + i, model.init_seed + i), metrics.jsonl,
                             checkpoints/step_*/ (unstacked weights; state.pt: this seed's slice of the
                             optimizer state, its data RNG and its W&B run id), wandb/
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import torch
import torch.nn as nn
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechsynth.tasks.base import Batch, LossKind, real_loss
from mechsynth.training.train import (
    DataSource,
    TrainConfig,
    Trainer,
    held_out_batches,
    held_out_metrics,
    lr_at,
    masked_loss,
)

# Sequences per evaluation forward, summed over seeds: bounds memory when S * eval_batch_size is large.
# A CPU wants activations near cache size (there 8192 measured 1.5x slower than 1024).
EVAL_SEQUENCES = {"cpu": 1024, "other": 8192}
# `seed_passes = "auto"` on a CPU: per-seed passes from this many bytes of one seed's saved activations.
PER_SEED_FROM_BYTES = 4 * 2**20

T = TypeVar("T")


def per_model_loss(
    logits: Float[Tensor, "n_models batch out_pos d_vocab_out"],
    targets: Int[Tensor, "n_models batch pos"] | Float[Tensor, "n_models batch pos"],
    mask: Bool[Tensor, "n_models batch pos"],
    kind: LossKind = "cross_entropy",
) -> Float[Tensor, "n_models"]:
    """`masked_loss` of each model on its own batch: the mean of the task's loss (`kind`) over its scored
    positions (models that answer only at the last `out_pos` positions are scored there)."""
    p = logits.shape[2]
    targets, mask = targets[..., -p:], mask[..., -p:]
    if kind != "cross_entropy":
        return real_loss(logits, targets, mask, kind).flatten(1).sum(1) / mask.flatten(1).sum(1)
    ce = F.cross_entropy(
        logits.flatten(0, 2).float(), torch.where(mask, targets, -100).flatten(), ignore_index=-100, reduction="none"
    )
    return ce.view(mask.shape[0], -1).sum(1) / mask.flatten(1).sum(1)


@torch.no_grad()
def clip_per_model_(params: Sequence[Tensor], max_norm: float) -> Float[Tensor, "n_models"]:
    """`clip_grad_norm_` for each model separately: params are stacked on a leading model axis, and each
    model's gradients are scaled by its own global norm. Returns the norms before clipping."""
    grads = [p.grad for p in params if p.grad is not None]
    norms = torch.stack([g.reshape(g.shape[0], -1).norm(dim=1) for g in grads]).norm(dim=0)
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *(1,) * (g.ndim - 1)))
    return norms


def seed_view(model: nn.Module, i: int) -> nn.Module:
    """Model i of a side-by-side stack as a single model whose parameters are views of its slice of the
    stacked ones: updating the stack updates the view. Its gradients are its own tensors."""
    memo = {id(p): nn.Parameter(p.detach()[i], requires_grad=p.requires_grad) for p in model.parameters()}
    view = copy.deepcopy(model, memo)
    view.n_models = None
    return view


def saved_activation_bytes(model: Callable[[Tensor], Any], tokens: Tensor) -> int:
    """Bytes of the tensors that a forward pass of `model` (a module, or any function of the tokens) keeps
    for its backward pass."""
    total = 0

    def pack(t: Tensor) -> Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(tokens)
    return total


def split_weights(weights: dict[str, Tensor], stacked: set[str], n: int) -> list[dict[str, Tensor]]:
    """A stacked state dict as n single-model ones (buffers shared by all models are copied to each)."""
    return [{k: (v[i] if k in stacked else v).clone() for k, v in weights.items()} for i in range(n)]


def stack_weights(per_model: list[dict[str, Tensor]], stacked: set[str]) -> dict[str, Tensor]:
    return {k: torch.stack([w[k] for w in per_model]) if k in stacked else v for k, v in per_model[0].items()}


def split_optimizer_state(state: dict[str, Any], params: list[Tensor], n: int) -> list[dict[str, Any]]:
    """An optimizer state dict over stacked params as n single-model ones: per-element buffers (exp_avg,
    momentum_buffer, ...) are sliced; scalars (Adam's step) are the same for every model."""

    def take(v: Any, p: Tensor, i: int) -> Any:
        if torch.is_tensor(v):
            return (v[i] if v.shape == p.shape else v).clone()
        return copy.deepcopy(v)

    return [
        {
            "state": {k: {name: take(v, params[k], i) for name, v in s.items()} for k, s in state["state"].items()},
            "param_groups": copy.deepcopy(state["param_groups"]),
        }
        for i in range(n)
    ]


def stack_optimizer_state(per_model: list[dict[str, Any]], params: list[Tensor]) -> dict[str, Any]:
    def join(k: int, name: str) -> Any:
        v = per_model[0]["state"][k][name]
        # ("step" is a scalar shared by all models, even where a model's parameter is a scalar too)
        if torch.is_tensor(v) and v.shape == params[k].shape[1:] and name != "step":
            return torch.stack([s["state"][k][name] for s in per_model])
        return v

    first = per_model[0]
    return {
        "state": {k: {name: join(k, name) for name in s} for k, s in first["state"].items()},
        "param_groups": first["param_groups"],
    }


class SeedsTrainer(Trainer):
    """Trains a model built with `n_models = cfg.seeds` as cfg.seeds separate runs. `train_step` returns
    the per-seed losses [n_models]; `record`, `evaluate` and `state` give a list with one entry per seed,
    each what a single run's Trainer would give."""

    def __init__(self, model: nn.Module, data: DataSource, cfg: TrainConfig, device: torch.device | str = "cpu"):
        super().__init__(model, data, cfg, device)
        self.n_seeds = cfg.seeds
        # In the optimizer's order (its state dict numbers them so), which param groups may change.
        self.params = [p for group in self.optimizer.param_groups for p in group["params"]]
        self.stacked = {name for name, _ in self.module.named_parameters()}
        self.generators = [torch.Generator(device=self.device).manual_seed(cfg.seed + i) for i in range(cfg.seeds)]
        self._chunk_states = [g.get_state() for g in self.generators]
        self._eval_tokens: dict[str, Tensor] = {}
        self.stacked_passes = self._stacked_passes()
        self.views = [] if self.stacked_passes else [seed_view(self.module, i) for i in range(self.n_seeds)]
        self._pool = None
        if not self.stacked_passes:
            self._view_params = [list(v.parameters()) for v in self.views]
            position = {id(p): k for k, p in enumerate(self.module.parameters())}
            self._view_index = [position[id(p)] for p in self.params]  # each param's place among a view's
            workers = min(torch.get_num_threads(), self.n_seeds)
            if workers > 1:
                # Each worker runs single-threaded ops: two models on two cores beat one model on both.
                self._pool = ThreadPoolExecutor(
                    workers, thread_name_prefix="mechsynth-seed", initializer=torch.set_num_threads, initargs=(1,)
                )

    def _stacked_passes(self) -> bool:
        if self.cfg.seed_passes != "auto":
            return self.cfg.seed_passes == "stacked"
        if self.device.type != "cpu" or self.cfg.compile:  # (compiling S views would cost S compilations)
            return True
        tokens = self.data.sample(
            self.cfg.batch_size, torch.Generator(self.device).manual_seed(0), self.device, "train"
        ).tokens
        return saved_activation_bytes(seed_view(self.module, 0), tokens) < PER_SEED_FROM_BYTES

    def _on_worker(self, fn: Callable[[], T]) -> T:
        return fn() if self._pool is None else self._pool.submit(fn).result()

    def _each(self, fn: Callable[[int], T]) -> list[T]:
        """[fn(0), ..., fn(seeds - 1)], on the worker threads when there are any."""
        if self._pool is None:
            return [fn(i) for i in range(self.n_seeds)]
        futures = [self._pool.submit(fn, i) for i in range(self.n_seeds)]
        try:
            return [f.result() for f in futures]
        finally:  # on an error or Ctrl-C, start nothing more
            for f in futures:
                f.cancel()

    def train_step(self) -> Float[Tensor, "n_models"]:
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(self.step, self.cfg)
        tokens, targets, mask = self._next_batch()
        self.optimizer.zero_grad(set_to_none=True)
        if self.stacked_passes:
            losses = per_model_loss(self.model(tokens), targets, mask, self.data.loss_kind)
            losses.sum().backward()
            self._update()
        else:
            losses = torch.stack(self._each(lambda i: self._seed_backward(i, tokens[i], targets[i], mask[i])))
            # The update runs on a worker too: after the optimizer's parallel loops this thread's
            # intra-op threads spin-wait, taking cycles from the workers (measured 4-5% of a step).
            self._on_worker(self._update)
        self.step += 1
        return losses.detach()

    def _update(self) -> None:
        if not self.stacked_passes:
            for k, p in zip(self._view_index, self.params):
                p.grad = torch.stack([vp[k].grad for vp in self._view_params])
        if self.cfg.grad_clip:
            clip_per_model_(self.params, self.cfg.grad_clip)
        self.optimizer.step()
        if self.project is not None:
            self.project()

    def _seed_backward(
        self,
        i: int,
        tokens: Int[Tensor, "batch pos"] | Float[Tensor, "batch pos d_input"],
        targets: Int[Tensor, "batch pos"] | Float[Tensor, "batch pos"],
        mask: Bool[Tensor, "batch pos"],
    ) -> Float[Tensor, ""]:
        """Seed i's loss on its batch, with its gradients left on its view's parameters."""
        for p in self._view_params[i]:
            p.grad = None
        loss = masked_loss(self.views[i](tokens), Batch(tokens, targets, mask), self.data.loss_kind)
        loss.backward()
        return loss.detach()

    def _sample_chunk(
        self,
    ) -> tuple[
        Int[Tensor, "n_models batch pos"] | Float[Tensor, "n_models batch pos d_input"],
        Int[Tensor, "n_models batch pos"] | Float[Tensor, "n_models batch pos"],
        Bool[Tensor, "n_models batch pos"],
    ]:
        """`data_chunk` batches for every seed from its own generator: tokens, targets, mask, each
        [n_models, data_chunk * batch_size, pos]. (Ground truth is left out: the loss needs only targets and mask.)"""
        n = self.chunk_shape()[1]
        batches = self._each(lambda i: self.data.sample(n, self.generators[i], self.device, "train"))
        return tuple(torch.stack([getattr(b, f) for b in batches]) for f in ("tokens", "targets", "mask"))

    def _next_batch(
        self,
    ) -> tuple[
        Int[Tensor, "n_models batch pos"] | Float[Tensor, "n_models batch pos d_input"],
        Int[Tensor, "n_models batch pos"] | Float[Tensor, "n_models batch pos"],
        Bool[Tensor, "n_models batch pos"],
    ]:
        (n, _), b = self.chunk_shape(), self.cfg.batch_size
        if self._chunk is None or self._chunk_pos == n:
            if self._chunk is not None:
                self._chunk_states, self._chunk_pos = [g.get_state() for g in self.generators], 0
            self._chunk = self._sample_chunk()
        i, self._chunk_pos = self._chunk_pos, self._chunk_pos + 1
        return tuple(t[:, i * b : (i + 1) * b] for t in self._chunk)

    def eval_batches(self) -> dict[str, list[Batch]]:
        """Each seed's held-out batches, exactly those of its own run (drawn from its data seed)."""
        if not self._eval_batches:
            per_seed = self._each(
                lambda i: held_out_batches(self.data, self.cfg.seed + i, self.cfg.eval_batch_size, self.device)
            )
            self._eval_batches = {split: [b[split] for b in per_seed] for split in per_seed[0]}
            self._eval_tokens = {split: torch.stack([b.tokens for b in bs]) for split, bs in self._eval_batches.items()}
        return self._eval_batches

    @torch.no_grad()
    def evaluate(self) -> list[dict[str, float]]:
        if not self.stacked_passes:
            batches = self.eval_batches()
            return self._each(
                lambda i: held_out_metrics(self.views[i], self.data, {s: b[i] for s, b in batches.items()})
            )
        was_training = self.model.training
        self.model.eval()
        out: list[dict[str, float]] = [{} for _ in range(self.n_seeds)]
        for split, batches in self.eval_batches().items():
            tokens = self._eval_tokens[split]
            step = max(1, EVAL_SEQUENCES["cpu" if self.device.type == "cpu" else "other"] // self.n_seeds)
            logits = torch.cat([self.model(tokens[:, j : j + step]) for j in range(0, tokens.shape[1], step)], 1)
            for i, batch in enumerate(batches):
                for k, v in self.data.metrics(logits[i], batch).items():
                    out[i][f"{split}/{k}"] = v
        self.model.train(was_training)
        return out

    def record(self, train_loss: Float[Tensor, "n_models"]) -> list[dict[str, float]]:
        lr = lr_at(self.step - 1, self.cfg)
        return [{"train/loss": loss, "train/lr": lr, **m} for loss, m in zip(train_loss.tolist(), self.evaluate())]

    def seed_records(self, metrics: list[dict[str, float]]) -> list[dict[str, float]]:
        return metrics

    def seed_states(self) -> list[dict[str, Any]]:
        return self.state()

    def load_seed_states(self, states: list[dict[str, Any]]) -> None:
        self.load_state(states)

    def state(self) -> list[dict[str, Any]]:
        """Each seed's resumable state, in the format of a single run's `Trainer.state()`."""
        optimizers = split_optimizer_state(self.optimizer.state_dict(), self.params, self.n_seeds)
        return [
            {"optimizer": opt, "generator": g, "chunk_pos": self._chunk_pos, "step": self.step}
            for opt, g in zip(optimizers, self._chunk_states)
        ]

    def seed_weights(self) -> list[dict[str, Tensor]]:
        """Each seed's weights as a single model's state dict."""
        return split_weights(self.module.state_dict(), self.stacked, self.n_seeds)

    def load_state(self, states: list[dict[str, Any]]) -> None:
        if len({(int(s["step"]), int(s["chunk_pos"])) for s in states}) != 1:
            raise ValueError("the seeds' states are at different steps; they cannot be resumed together")
        self.optimizer.load_state_dict(stack_optimizer_state([s["optimizer"] for s in states], self.params))
        self.step, self._chunk_pos = int(states[0]["step"]), int(states[0]["chunk_pos"])
        self._chunk_states = [s["generator"] for s in states]
        for g, st in zip(self.generators, self._chunk_states):
            g.set_state(st)
        if self._chunk_pos > 0:  # regenerate the chunk we were in the middle of
            self._chunk = self._sample_chunk()


__all__ = ["SeedsTrainer", "clip_per_model_", "per_model_loss"]
