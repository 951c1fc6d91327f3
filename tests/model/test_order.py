"""classroom/positional.py: attention without positions is permutation-equivariant; the causal mask
leaks order. References: numpy index arithmetic (W[perm][:, perm]) and an explicit forward pass."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from classroom import positional
from model.config import ModelConfig
from model.transformer import Transformer


@pytest.fixture(params=["sinusoidal", "learned"])
def model(request):
    return Transformer(ModelConfig(vocab_size=30, d_model=32, n_heads=4, n_layers=2, max_len=16,
                                   pos_encoding=request.param), seed=3)


IDS = [3, 7, 1, 9, 4, 12, 5]


def test_without_positions_is_the_same_model_minus_the_position_vectors(model):
    blind = positional.without_positions(model)
    assert blind.cfg.pos_encoding == "none" and model.cfg.pos_encoding != "none"
    ids = torch.tensor([IDS])
    # reference: the original model fed token embeddings only, block by block
    x = model.tok_emb.weight[ids]
    allowed = torch.ones(7, 7, dtype=torch.bool).tril()
    with torch.no_grad():
        for b in model.blocks:
            x = b(x, allowed, record=False)[0]
        x = model.ln_f(x, record=False)[0]
    torch.testing.assert_close(blind.trace(ids).final, x)


def test_no_pe_bidirectional_weights_permute_with_the_words(model):
    perm = positional.shuffle_order(len(IDS), 4)
    r = positional.order_test(positional.without_positions(model), IDS, perm, causal=False)
    w = r.weights
    ref = w[:, :, perm][:, :, :, perm]  # W_shuffled[i, j] should be W[perm[i], perm[j]]
    np.testing.assert_allclose(r.pwpT, ref, atol=1e-12)
    assert r.weight_gap == pytest.approx(np.abs(r.weights_shuffled - ref).max())
    assert r.weight_gap < 1e-5 and r.output_gap < 1e-4


def test_causal_mask_alone_leaks_order_and_positions_break_equivariance(model):
    res = positional.positions_matter(model, IDS, seed=1)
    assert not np.array_equal(res.perm, np.arange(len(IDS)))
    assert res.no_pe_bidirectional.output_gap < 1e-4
    assert res.no_pe_causal.output_gap > 1e-2
    assert res.with_pe_bidirectional.weight_gap > 1e-2
    # the first shuffled word sees only itself under the causal mask: its weight row is [1, 0, ...]
    w = res.no_pe_causal.weights_shuffled
    np.testing.assert_allclose(w[:, :, 0, 0], 1.0)


def test_shuffle_order_moves_something_and_is_seeded():
    for n in (2, 3, 10):
        p = positional.shuffle_order(n, 0)
        assert sorted(p) == list(range(n)) and not np.array_equal(p, np.arange(n))
        assert np.array_equal(p, positional.shuffle_order(n, 0))
    P = positional.permutation_matrix([2, 0, 1])
    np.testing.assert_array_equal(P @ np.array([10, 11, 12]), [12, 10, 11])
