"""Induction heads (Olsson et al. 2022): on a sequence repeated twice, attend to the token after the
earlier occurrence of the current token, and copy it.

Synthetic tasks have 2–10 token vocabularies, so tokens repeat inside each copy. The target of a
query is therefore every key whose *previous* token equals the query's token — the same set
TransformerLens's induction detection pattern marks — and the score is the attention on that set,
averaged over second-copy queries, so a perfect head scores 1.0 however often tokens repeat.
(TransformerLens's 'mul' score averages over all queries, first copy included, and tops out near 0.5.)
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.probes import (ProbeResult, attention_hooks, device_of, head_metrics, patterns, register, render_heads,
                              shape, task_tokens)
from mechsynth.probes.duplicate_token import target_mass


def induction_targets(tokens: Int[Tensor, "batch pos"]) -> torch.Tensor:
    """[batch, query, key]: 1 <= key <= query and tokens[key - 1] == tokens[query]."""
    prev = torch.cat([torch.full_like(tokens[:, :1], -1), tokens[:, :-1]], 1)
    return (tokens[:, :, None] == prev[:, None, :]) & torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool,
                                                                    device=tokens.device).tril()


def repeated_tokens(model, batch: int, generator: torch.Generator) -> tuple[Tensor, int]:
    _, _, d_vocab, n_ctx = shape(model)
    half = min(n_ctx // 2, 64)
    first = torch.randint(d_vocab, (batch, half), generator=generator)
    return torch.cat([first, first], 1).to(device_of(model)), half


def copying_score(model) -> Float[Tensor, "layer head"] | None:
    """Σλ / Σ|λ| over the eigenvalues of each head's full OV circuit W_E W_V W_O W_U (Elhage et al. 2021):
    near 1 for a head that copies the token it attends to. None when input and output vocabularies differ."""
    W_E, W_U = model.W_E.detach(), model.W_U.detach()
    if W_E.shape[0] != W_U.shape[1]:
        return None
    ov = torch.einsum("vm,lhmd,lhdn,nw->lhvw", W_E, model.W_V.detach(), model.W_O.detach(), W_U)
    eig = torch.linalg.eigvals(ov.double().cpu())
    return (eig.sum(-1).real / eig.abs().sum(-1).clamp_min(1e-12)).float()


@torch.no_grad()
def icl_score(model, tokens: Tensor, targets: Tensor) -> float:
    """Loss late in the context minus loss early (Olsson et al. 2022); negative = learning in context."""
    logp = model(tokens).log_softmax(-1)
    loss = -logp.gather(-1, targets[..., None])[..., 0].mean(0)  # per position
    fifth = max(1, loss.shape[0] // 5)
    return float(loss[-fifth:].mean() - loss[:fifth].mean())


@register("induction", hooks=attention_hooks, threshold=0.5)
def induction(model, task, generator, batch_size) -> ProbeResult:
    tokens, half = repeated_tokens(model, batch_size, generator)
    pattern = patterns(model, tokens, "induction")
    second = torch.zeros_like(tokens, dtype=torch.bool)
    second[:, half:] = True
    targets = induction_targets(tokens) & second[:, :, None]
    per_head = target_mass(pattern, targets)
    # Prefix matching: attention on exactly the position after this token's first-copy occurrence.
    q = torch.arange(half, 2 * half, device=tokens.device)
    prefix = pattern[..., q, q - half + 1].mean(dim=(1, 3))
    metrics = {"max": float(per_head.max()), **head_metrics("prefix_matching/", prefix),
               "icl_score": icl_score(model, tokens[:, :-1], tokens[:, 1:])}
    copying = copying_score(model)
    if copying is not None:
        metrics.update(head_metrics("copying/", copying))
    if task is not None:
        batch = task_tokens(model, task, batch_size, generator)
        if bool(batch.mask.all()):  # a prediction at every position: the task's own in-context curve
            metrics["icl_score_task"] = icl_score(model, batch.tokens, batch.targets)
    return ProbeResult("induction", per_head.cpu(), metrics, render_heads(tokens, pattern, per_head))
