"""Test helper: non-trivial norm parameters. init_weights sets every LayerNorm/RMSNorm gamma to 1
and beta to 0, and under those a norm that forgets its gamma (or beta) still passes a test that
builds a fresh random model. Tests of norms use this on their models."""
from __future__ import annotations

import torch

from model.layers import LayerNorm, RMSNorm


def nontrivial_norms(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every gamma drawn from U(0.5, 1.5) and every LayerNorm beta from N(0, 0.2^2), seeded, in
    place; returns the model. Never use it on a shared (cached) model."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (LayerNorm, RMSNorm)):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
                if isinstance(m, LayerNorm):
                    m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
    return model
