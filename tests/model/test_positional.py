"""classroom/positional.py against references written here: a rotation by the paper's angles in numpy,
the relative-position property checked on a pair of positions by hand, and the order test (attention
without positions is permutation-equivariant) against an explicit permutation."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from classroom import (
    positional,
)
from model.config import ModelConfig
from model.layers import sinusoidal_table
from model.transformer import Transformer


def rotate(x, pos, theta):
    """RoFormer's rotation in numpy, pairs (i, i + d/2): [x_i, x_{i+d/2}] turned by pos·theta^(-2i/d)."""
    d = x.shape[0]
    half = d // 2
    out = x.astype(np.float64).copy()
    for i in range(half):
        a = pos * theta ** (-2 * i / d)
        c, s = np.cos(a), np.sin(a)
        out[i], out[i + half] = c * x[i] - s * x[i + half], s * x[i] + c * x[i + half]
    return out


def test_scores_depend_on_the_offset_only_and_match_a_numpy_rotation():
    g = np.random.default_rng(0)
    q, k = g.normal(size=64), g.normal(size=64)
    res = positional.relative_scores(q, k, 24, 100000.0)
    S = res.S
    for m, n in ((5, 2), (20, 17), (0, 3), (23, 0)):
        assert S[m, n] == pytest.approx(rotate(q, m, 1e5) @ rotate(k, n, 1e5), abs=1e-4)
    assert res.spread < 1e-4 < res.range  # constant along diagonals, not constant overall
    assert S[5, 2] == pytest.approx(S[20, 17], abs=1e-4)
    assert res.by_offset[list(res.offsets).index(3)] == pytest.approx(S[5, 2], abs=1e-4)


def test_pair_rotation_turns_by_the_frequency_times_the_position_and_keeps_length():
    g = np.random.default_rng(1)
    q = g.normal(size=8)
    pos = 3
    post = rotate(q, pos, 10000.0)
    got = positional.pair_rotation(q, post, [0, 1, 3])
    freqs = positional.pair_frequencies(8, 10000.0)
    for row in got:
        i = row.pair
        want = np.degrees(pos * 10000.0 ** (-2 * i / 8))
        assert row.angle_deg == pytest.approx((want + 180) % 360 - 180, abs=1e-4)
        assert row.norm_after == pytest.approx(row.norm_before)
        assert freqs[i] == pytest.approx(10000.0 ** (-2 * i / 8), rel=1e-5)
    with pytest.raises(ValueError):
        positional.pair_rotation(q, post, [4])

# --------------------------------------------------------------------------------------------
# classroom/positional.py: attention without positions is permutation-equivariant; the causal mask
# leaks order. References: numpy index arithmetic (W[perm][:, perm]) and an explicit forward pass.
# --------------------------------------------------------------------------------------------

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


def test_pe_matches_engine_and_worked_example():
    np.testing.assert_array_equal(positional.pe_table(20, 8), sinusoidal_table(20, 8).numpy())
    ex = positional.worked_pe_example()
    np.testing.assert_allclose(ex.pe[0], [0, 1, 0, 1], atol=1e-7)
    np.testing.assert_allclose(ex.pe[1], [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)], atol=1e-6)
    np.testing.assert_allclose(ex.pe[2], [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)], atol=1e-6)
    np.testing.assert_allclose(ex.the_sum, [0.1, 1.2, 0.3, 1.4], atol=1e-6)
    np.testing.assert_allclose(ex.cat_sum, [1.3415, 1.1403, 0.7100, 1.7999], atol=1e-4)


def test_pe_wavelengths_and_similarity_depends_on_distance():
    wl = positional.pe_wavelengths(8)
    assert wl[0] == pytest.approx(2 * math.pi) and wl[1] == wl[0]
    assert wl[2] == pytest.approx(2 * math.pi * 10000 ** (2 / 8))
    sim = positional.pe_similarity(positional.pe_table(12, 16))
    np.testing.assert_allclose(np.diag(sim), 8.0, atol=1e-5)  # d/2
    np.testing.assert_allclose(sim[0, 3], sim[5, 8], atol=1e-5)  # depends on i - j only


def gemma3_like(**kw) -> ModelConfig:
    """Gemma 3's layout in small: six layers, every sixth global (5), window 4, bases 10,000 (local) and
    1,000,000 (global)."""
    return ModelConfig(**{**dict(vocab_size=40, d_model=32, n_heads=2, n_layers=6, d_ff=64, max_len=64,
                                 pos_encoding="rope", rope_theta=1e6, rope_local_theta=1e4, window=4,
                                 window_layers=(0, 1, 2, 3, 4)), **kw})


def test_relative_scores_turn_with_the_layers_own_rotary_parameters():
    """A local layer's scores are those of its own base (10,000), a global layer's of 1e6, and a
    linear scaling divides the positions: each against the numpy rotation."""
    g = np.random.default_rng(2)
    q, k = g.normal(size=16), g.normal(size=16)
    cfg = gemma3_like()
    for layer, theta in ((0, 1e4), (5, 1e6)):
        S = positional.relative_scores(q, k, 8, *cfg.layer_rope(layer)).S
        assert S[6, 1] == pytest.approx(rotate(q, 6, theta) @ rotate(k, 1, theta), abs=1e-4), layer
    lin = positional.relative_scores(q, k, 8, 1e4, None, None, 4.0).S
    assert lin[6, 1] == pytest.approx(rotate(q, 6 / 4, 1e4) @ rotate(k, 1 / 4, 1e4), abs=1e-4)


def test_rope_words_name_each_kind_of_layers_base_from_the_config():
    cfg = gemma3_like()
    assert positional.rope_words(cfg) == ("θ = 1,000,000 on the 1 global layer (5), and 10,000 on the 5 "
                                          "sliding-window layers")
    assert positional.layer_rope_words(cfg, 0) == ("Layer 0 is a sliding-window layer (window 4): its queries and "
                                                   "keys turn with θ = 10,000.")
    assert positional.layer_rope_words(cfg, 5) == "Layer 5 is a global layer: its queries and keys turn with θ = 1,000,000."
    one = ModelConfig(vocab_size=40, d_model=32, n_heads=2, n_layers=2, d_ff=64, max_len=64, pos_encoding="rope",
                      rope_theta=1e5)
    assert positional.rope_words(one) == "θ = 100,000 here"
    assert positional.layer_rope_words(one, 1) == "Layer 1 turns with θ = 100,000, as every layer of this model."
