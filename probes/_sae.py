"""Sparse dictionaries trained on activations already in memory (the dictionary probe's), several seeds each.

- "topk" (Gao et al. 2024): EleutherAI's sparsify (`SparseCoder`: each row keeps its k largest pre-activations;
  the loss is the fraction of variance unexplained, plus their AuxK term that revives latents dead for a tenth of
  the steps). Our loop replaces sparsify's `Trainer`, which reads its activations from a Hugging Face model.
- "transcoder" (Dunefsky et al. 2024): sparsify's TopK coder reading one activation and predicting another (an
  MLP's output from the residual stream it reads), its decoder starting at zero;
- "relu" (Bricken et al. 2023, the L1 SAE): ours, with SAELens's conventions (weights `W_enc` [d_in, d_sae],
  `b_enc`, `W_dec` [d_sae, d_in], `b_dec`, subtracted from the input before encoding; the loss is the squared error
  plus `l1` times the activations weighted by their decoder rows' norms), its seeds side by side. sparsify has no
  L1 SAE and SAELens does not install beside TransformerLens 4: tests/test_sae_lens.py holds this one to SAELens's
  on the same weights and batches under TransformerLens 3.

Both read their inputs scaled so that the mean squared norm is d_in (so one `l1` or learning rate serves checkpoints
whose residual streams differ in size) and start the decoder bias at the inputs' mean. The TopK decoder's rows are
renormalised to unit length after each step (sparsify's way); the L1 SAE's are free, its penalty weighting each
activation by its row's norm instead (SAELens's way: shrinking the code while growing the row buys nothing). sparsify
is imported here only.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import Any, Literal, Optional

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechsynth.probes._base import ProbeError

Kind = Literal["topk", "relu", "transcoder"]


@dataclass
class ReluSAE:
    """S ReLU-L1 sparse autoencoders side by side (a leading `seed` axis on every weight)."""

    W_enc: Float[Tensor, "seed d_in d_sae"]
    b_enc: Float[Tensor, "seed d_sae"]
    W_dec: Float[Tensor, "seed d_sae d_in"]
    b_dec: Float[Tensor, "seed d_in"]
    l1: float

    def parameters(self) -> list[Tensor]:
        return [self.W_enc, self.b_enc, self.W_dec, self.b_dec]

    def encode(self, x: Float[Tensor, "row d_in"]) -> Float[Tensor, "seed row d_sae"]:
        return (torch.einsum("srd,sdm->srm", x - self.b_dec[:, None], self.W_enc) + self.b_enc[:, None]).relu()

    def decode(self, z: Float[Tensor, "seed row d_sae"]) -> Float[Tensor, "seed row d_in"]:
        return torch.einsum("srm,smd->srd", z, self.W_dec) + self.b_dec[:, None]

    def loss(self, x: Float[Tensor, "row d_in"]) -> Float[Tensor, "seed"]:
        """Squared error summed over d_in plus the L1 penalty, averaged over rows, per seed."""
        z = self.encode(x)
        mse = (self.decode(z) - x).square().sum(-1).mean(-1)
        return mse + self.l1 * (z * self.W_dec.norm(dim=-1)[:, None]).sum(-1).mean(-1)


def init_relu(d_in: int, d_sae: int, seeds: int, seed: int, l1: float, mean: Float[Tensor, "d_in"]) -> ReluSAE:
    """Unit decoder rows in random directions, the encoder their transpose, the decoder bias at the inputs' mean."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    W_dec = torch.randn(seeds, d_sae, d_in, generator=g, dtype=mean.dtype).to(mean.device)
    W_dec = W_dec / W_dec.norm(dim=-1, keepdim=True)
    b_enc = torch.zeros(seeds, d_sae, dtype=mean.dtype, device=mean.device)
    return ReluSAE(W_dec.transpose(1, 2).clone(), b_enc, W_dec, mean.expand(seeds, -1).clone(), l1)


def relu_step(sae: ReluSAE, opt: torch.optim.Optimizer, x: Float[Tensor, "row d_in"]) -> Float[Tensor, "seed"]:
    """One Adam step on a minibatch; the seeds share no weight, so one backward gives each its own gradient."""
    loss = sae.loss(x)
    opt.zero_grad(set_to_none=True)
    loss.sum().backward()
    opt.step()
    return loss.detach()


def _decode_where_it_runs(
    top_indices: Int[Tensor, "row k"], top_acts: Float[Tensor, "row k"], W_dec: Float[Tensor, "d_out d_sae"]
) -> Float[Tensor, "row d_out"]:
    """sparsify picks its Triton decoder whenever Triton imports, and PyPI's CUDA torch brings Triton even to a
    machine without a GPU, where its kernels cannot run: tensors on the CPU decode through torch's embedding_bag."""
    from sparsify import utils

    decode = (
        utils.triton_decode if top_indices.is_cuda and utils.decoder_impl is utils.triton_decode else utils.eager_decode
    )
    return decode(top_indices, top_acts, W_dec)


def topk_coders(
    d_in: int, d_sae: int, k: int, seeds: int, seed: int, mean: Float[Tensor, "d_out"], transcode: bool = False
) -> list[Any]:
    """sparsify's SparseCoders, one per seed, initialised under their own seed; the decoder bias at the mean of what
    they reconstruct (`transcode`: of what they predict)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it announces at import that Triton is missing
            from sparsify import SparseCoder, SparseCoderConfig, sparse_coder
    except ImportError:
        raise ProbeError(
            f"dictionary.kind={'transcoder' if transcode else 'topk'} trains EleutherAI's sparsify, which is not "
            "installed: pip install 'mechsynth[sae]' (or dictionary.kind=relu, mechsynth's own L1 SAE)"
        ) from None
    sparse_coder.decoder_impl = _decode_where_it_runs
    coders = []
    for s in range(seeds):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed * 1000 + s)  # sparsify initialises from torch's global generator
            cfg = SparseCoderConfig(activation="topk", num_latents=d_sae, k=k, transcode=transcode)
            coder = SparseCoder(d_in, cfg, mean.device)
        coder.b_dec.data = mean.float().clone()
        coders.append(coder)
    return coders


@dataclass
class Trained:
    """A trained dictionary, its seeds side by side: dense latent activations and reconstruction quality."""

    scale: float  # inputs are multiplied by this first
    relu: ReluSAE | None = None
    coders: list[Any] | None = None
    out_scale: float = 1.0  # a transcoder's targets are multiplied by this

    @torch.no_grad()
    def encode(self, x: Float[Tensor, "row d_in"]) -> Float[Tensor, "seed row d_sae"]:
        x = x.float() * self.scale
        if self.relu is not None:
            return self.relu.encode(x)
        out = []
        for coder in self.coders:
            top = coder.encode(x)
            out.append(torch.zeros(len(x), coder.num_latents).scatter(-1, top.top_indices, top.top_acts))
        return torch.stack(out)

    @torch.no_grad()
    def explained(
        self, x: Float[Tensor, "row d_in"], y: Optional[Float[Tensor, "row d_out"]] = None
    ) -> Float[Tensor, "seed"]:
        """The fraction of the variance of what it reconstructs (a transcoder: of its targets `y`) that it explains
        (1 − FVU), per seed."""
        xs = x.float() * self.scale
        ys = xs if y is None else y.float() * self.out_scale
        if self.relu is not None:
            recon = self.relu.decode(self.relu.encode(xs))
        else:
            recon = torch.stack([c.decode(*c.encode(xs)[:2]) for c in self.coders])
        return 1 - (recon - ys).square().sum((-1, -2)) / (ys - ys.mean(0)).square().sum().clamp_min(1e-12)


@torch.enable_grad()  # probes run under no_grad
def train(
    acts: Float[Tensor, "row d_in"],
    kind: Kind,
    d_sae: int,
    *,
    k: int,
    l1: float,
    seeds: int,
    seed: int,
    steps: int,
    batch: int,
    lr: float,
    targets: Optional[Float[Tensor, "row d_out"]] = None,
) -> Trained:
    """`seeds` dictionaries of `kind` on `acts` (a transcoder: predicting `targets` from them), each step on the same
    minibatch of rows (drawn with `seed`)."""
    acts, scale = normalised(acts)
    targets, out_scale = normalised(targets) if targets is not None else (acts, scale)
    mean = targets.mean(0)
    g = torch.Generator(device="cpu").manual_seed(seed)
    if kind == "relu":
        sae = init_relu(acts.shape[1], d_sae, seeds, seed, l1, mean)
        for p in sae.parameters():
            p.requires_grad_(True)
        opt = torch.optim.Adam(sae.parameters(), lr=lr)
        for _ in range(steps):
            relu_step(sae, opt, acts[torch.randint(len(acts), (min(batch, len(acts)),), generator=g)])
        for p in sae.parameters():
            p.requires_grad_(False)
        return Trained(scale, relu=sae)
    coders = topk_coders(acts.shape[1], d_sae, k, seeds, seed, mean, transcode=kind == "transcoder")
    opts = [torch.optim.Adam(c.parameters(), lr=lr) for c in coders]
    since_fired = torch.zeros(seeds, d_sae, dtype=torch.long)
    dead_after = max(1, steps // 10)
    for _ in range(steps):
        rows = torch.randint(len(acts), (min(batch, len(acts)),), generator=g)
        for s, (coder, opt) in enumerate(zip(coders, opts)):
            out = coder(acts[rows], targets[rows], dead_mask=since_fired[s] > dead_after)
            opt.zero_grad(set_to_none=True)
            (out.fvu + out.auxk_loss / 32).backward()  # sparsify's default AuxK weight, 1/32
            coder.remove_gradient_parallel_to_decoder_directions()
            opt.step()
            coder.set_decoder_norm_to_unit_norm()
            fired = torch.zeros(d_sae, dtype=torch.bool)
            fired[out.latent_indices[out.latent_acts > 0]] = True
            since_fired[s] = torch.where(fired, 0, since_fired[s] + 1)
    for coder in coders:
        coder.requires_grad_(False)
    return Trained(scale, coders=coders, out_scale=out_scale)


def normalised(acts: Float[Tensor, "row d"]) -> tuple[Float[Tensor, "row d"], float]:
    """The rows scaled so that their mean squared norm is d, and the scale."""
    acts = acts.float()
    scale = float((acts.shape[1] / acts.square().sum(-1).mean().clamp_min(1e-30)).sqrt())
    return acts * scale, scale
