"""The dictionary probe's own L1 SAE against SAELens's (`StandardTrainingSAE`): from the same weights, on the same
batches, with the same optimiser, the two give the same loss at every step and the same latents at the end. SAELens
needs TransformerLens < 4, so this runs in the TransformerLens 3 suite (`make test TL=3.9` installs it) and is
skipped beside TransformerLens 4, where no SAE library with an L1 SAE installs (the README's dependency table)."""

from __future__ import annotations

import pytest
import torch

from mechsynth.probes import _sae

sae_lens = pytest.importorskip("sae_lens", reason="SAELens installs beside TransformerLens 3 only")

L1, LR, STEPS = 2.0, 3e-3, 60


def test_our_l1_sae_trains_as_saelens_standard_sae():
    g = torch.Generator().manual_seed(0)
    on = torch.rand(2048, 32, generator=g) < 0.05
    acts = (on * torch.rand(2048, 32, generator=g)) @ torch.randn(32, 16, generator=g)  # sparse features, superposed
    cfg = sae_lens.StandardTrainingSAEConfig(d_in=16, d_sae=48, l1_coefficient=L1)
    torch.manual_seed(0)
    theirs = sae_lens.StandardTrainingSAE(cfg)
    with torch.no_grad():
        theirs.b_dec.copy_(acts.mean(0))
        ours = _sae.ReluSAE(
            *(p.detach().clone()[None] for p in (theirs.W_enc, theirs.b_enc, theirs.W_dec, theirs.b_dec)), L1
        )
    for p in ours.parameters():
        p.requires_grad_(True)
    opt_theirs = torch.optim.Adam(theirs.parameters(), lr=LR)
    opt_ours = torch.optim.Adam(ours.parameters(), lr=LR)
    for step in range(STEPS):
        x = acts[torch.randint(len(acts), (256,), generator=g)]
        out = theirs.training_forward_pass(sae_lens.saes.sae.TrainStepInput(x, {"l1": L1}, None, step, False))
        opt_theirs.zero_grad()
        out.loss.backward()
        opt_theirs.step()
        loss = _sae.relu_step(ours, opt_ours, x)
        assert float(loss[0]) == pytest.approx(float(out.loss.detach()), rel=1e-5), step
    with torch.no_grad():
        assert torch.allclose(ours.encode(acts)[0], theirs.encode(acts), atol=1e-4)
        assert torch.allclose(ours.W_dec[0], theirs.W_dec, atol=1e-5)
