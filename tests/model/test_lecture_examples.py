"""The worked examples of the lecture notes (seeds/004_*.txt) that concern the engine.

Expected values are computed here, independently, with numpy/math. Where the notes' hand
arithmetic is wrong, a comment says so ("NOTES WRONG"); the engine is checked against the truth.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from model import ModelConfig
from model.attention import attend, causal_allowed, combine, padding_allowed
from model.layers import LayerNorm, MultiHeadAttention, sinusoidal_table


def np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ---------------------------------------------------------------- The / CAT / SAT, W_Q = W_K = W_V = I

E = np.array([[1, 0, 1, 0],   # The
              [0, 1, 0, 1],   # CAT
              [1, 1, 1, 1]],  # SAT
             dtype=np.float64)


def test_the_cat_sat_self_attention_identity_weights():
    X = torch.tensor(E, dtype=torch.float32)[None, None]  # (1, 1, 3, 4)
    tr = attend(X, X, X)  # Q = K = V = E because the weights are identity
    scores = E @ E.T
    assert np.array_equal(scores, [[2, 0, 2], [0, 2, 2], [2, 2, 4]])
    assert tr.scale == 0.5  # 1/sqrt(d_k), d_k = 4
    np.testing.assert_allclose(tr.scores[0, 0].numpy(), scores)
    np.testing.assert_allclose(tr.scaled[0, 0].numpy(), scores / 2)
    w = np_softmax(scores / 2)
    np.testing.assert_allclose(tr.weights[0, 0].numpy(), w, atol=1e-6)
    # the notes' rounded weights (these are right; they are the softmax of the *scaled* scores)
    np.testing.assert_allclose(w[0], [0.4223, 0.1554, 0.4223], atol=1e-4)
    np.testing.assert_allclose(w[1], [0.1554, 0.4223, 0.4223], atol=1e-4)
    # NOTES WRONG (labels): they write Softmax([0, 2, 2]) and Softmax([2, 2, 4]) for CAT and SAT,
    # i.e. the unscaled scores, but the values they give are softmax([0, 1, 1]) and softmax([1, 1, 2]).
    assert not np.allclose(np_softmax(np.array([0.0, 2, 2])), w[1], atol=1e-2)
    # NOTES WRONG (rounding): SAT's last weight is 0.5761 (e^2 / (2e + e^2) = 0.57612), not 0.5762.
    np.testing.assert_allclose(w[2], [0.2119, 0.2119, 0.5761], atol=1e-4)
    out = w @ E
    np.testing.assert_allclose(tr.heads[0, 0].numpy(), out, atol=1e-6)
    # NOTES WRONG: Output(The) = 0.4223*[1,0,1,0] + 0.1554*[0,1,0,1] + 0.4223*[1,1,1,1]
    #   = [0.8446, 0.5777, 0.8446, 0.5777], not [1.2669, 0.9999, 1.2669, 0.9999] (the notes add
    #   0.4223 once too often in columns 0/2, and 0.4223 + 0.1554 + 0.4223 = 1.0 in columns 1/3).
    np.testing.assert_allclose(out[0], [0.8446, 0.5777, 0.8446, 0.5777], atol=1e-4)
    assert not np.allclose(out[0], [1.2669, 0.9999, 1.2669, 0.9999], atol=1e-2)


def test_the_cat_sat_through_the_multihead_module_with_identity_weights():
    cfg = ModelConfig(vocab_size=8, d_model=4, n_heads=1, n_layers=1, bias=False)
    mha = MultiHeadAttention(cfg)
    with torch.no_grad():
        for lin in (mha.q_proj, mha.k_proj, mha.v_proj, mha.o_proj):
            lin.weight.copy_(torch.eye(4))
        out, tr = mha(torch.tensor(E, dtype=torch.float32)[None])
    np.testing.assert_allclose(out[0].numpy(), np_softmax(E @ E.T / 2) @ E, atol=1e-6)


# ---------------------------------------------------------------- [6, 4]: with and without scaling

def test_scores_6_4_with_and_without_scaling():
    q = np.array([2.0, 3, 4, 1])
    k = np.array([[1.0, 0, 1, 0], [0, 1, 0, 1]])
    v = np.eye(2)
    scores = k @ q
    assert np.array_equal(scores, [6, 4])
    Q = torch.tensor(q, dtype=torch.float32)[None]  # (1, 4)
    K = torch.tensor(k, dtype=torch.float32)
    V = torch.tensor(v, dtype=torch.float32)
    unscaled = attend(Q, K, V, scale=1.0)
    scaled = attend(Q, K, V)  # 1/sqrt(4) = 1/2
    np.testing.assert_allclose(unscaled.weights[0].numpy(), [0.8808, 0.1192], atol=1e-4)
    np.testing.assert_allclose(unscaled.weights[0].numpy(), np_softmax(scores), atol=1e-6)
    # NOTES WRONG: they write [6/sqrt(2), 4/sqrt(2)] = [3, 2] and "sqrt(4) = sqrt(2)".
    # sqrt(d_k) = sqrt(4) = 2, so the scaled scores are [6/2, 4/2] = [3, 2] (6/sqrt(2) would be 4.243).
    np.testing.assert_allclose(scaled.scaled[0].numpy(), [3.0, 2.0])
    np.testing.assert_allclose(scaled.weights[0].numpy(), [0.7311, 0.2689], atol=1e-4)
    np.testing.assert_allclose(scaled.weights[0].numpy(), np_softmax(scores / 2), atol=1e-6)
    # NOTES WRONG (rounding): softmax([10, 1]) is [0.99988, 0.00012], not [0.99, 0.01].
    np.testing.assert_allclose(attend(torch.tensor([[1.0]]), torch.tensor([[10.0], [1.0]]), V, scale=1.0)
                               .weights[0].numpy(), [0.99988, 0.00012], atol=1e-5)


# ---------------------------------------------------------------- LayerNorm of [2, 4, 6, 8]

def test_layer_norm_2_4_6_8():
    x = np.array([2.0, 4, 6, 8])
    mu, var = x.mean(), ((x - x.mean()) ** 2).mean()
    assert (mu, var) == (5.0, 5.0)
    expect = (x - mu) / math.sqrt(var + 1e-5)
    np.testing.assert_allclose(expect, [-1.3416, -0.4472, 0.4472, 1.3416], atol=1e-4)
    out, tr = LayerNorm(4, eps=1e-5)(torch.tensor(x, dtype=torch.float32)[None, None])
    assert tr.mean.item() == pytest.approx(5.0)
    assert tr.var.item() == pytest.approx(5.0)  # biased: divide by 4 (unbiased would be 6.667)
    np.testing.assert_allclose(out[0, 0].detach().numpy(), expect, atol=1e-6)
    np.testing.assert_allclose(tr.normalized[0, 0].numpy(), expect, atol=1e-6)


# ---------------------------------------------------------------- sinusoidal PE, d = 4, positions 0..2

def test_sinusoidal_pe_d4_positions_0_to_2():
    d = 4
    expect = np.zeros((3, d))
    for pos in range(3):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            expect[pos, 2 * i] = math.sin(angle)
            expect[pos, 2 * i + 1] = math.cos(angle)
    table = sinusoidal_table(3, 4).numpy()
    np.testing.assert_allclose(table, expect, atol=1e-7)
    np.testing.assert_allclose(table[0], [0, 1, 0, 1])
    # Position 1: the notes' values 0.8415, 0.5403, 0.01, 0.99995 are right, but
    # NOTES WRONG (formula): they write cos(pos / 10000^(1/4)) for PE(1,1) and cos(pos / 10000^(3/4))
    # for PE(1,3); the paired cosine uses the same exponent as its sine, 2i/d: 0 and 2/4.
    np.testing.assert_allclose(table[1], [0.8415, 0.5403, 0.0100, 0.99995], atol=1e-4)
    assert abs(math.cos(1 / 10000 ** 0.25) - table[1, 1]) > 0.4  # the notes' written formula
    # Position 2 (not in the notes): sin 2, cos 2, sin 0.02, cos 0.02
    np.testing.assert_allclose(table[2], [0.9093, -0.4161, 0.0200, 0.9998], atol=1e-4)
    # NOTES WRONG: "CAT" WE [0.5, 0.6, 0.7, 0.8] + PE(1) is [1.3415, 1.1403, 0.7100, 1.8000]; the
    # notes get [1.34, 0.94, 0.01, 1.79] (PE written as 0.34 instead of 0.54; 0.7 + 0.01 dropped),
    # and "the" [0.1, 0.2, 0.3, 0.4] + [0, 1, 0, 1] is [0.1, 1.2, 0.3, 1.4], not [0.1, 1.2, 0.3, 0.4].
    np.testing.assert_allclose(np.array([0.5, 0.6, 0.7, 0.8]) + table[1], [1.3415, 1.1403, 0.71, 1.8], atol=1e-4)
    np.testing.assert_allclose(np.array([0.1, 0.2, 0.3, 0.4]) + table[0], [0.1, 1.2, 0.3, 1.4], atol=1e-6)


# ---------------------------------------------------------------- 4-token padded batch, look-ahead + padding

X4 = np.array([[0.1, 0.2, 0.3, 0.4],
               [0.5, 0.6, 0.7, 0.8],
               [0.9, 1.0, 1.1, 1.2],
               [0.0, 0.0, 0.0, 0.0]])  # last token is padding


def test_padded_batch_with_look_ahead_and_padding_masks():
    kpm = torch.tensor([[True, True, True, False]])
    look_ahead = causal_allowed(4)
    padding = padding_allowed(kpm)  # keys only: (1, 1, 4, 4)
    allowed = combine(look_ahead, padding)
    tri = np.tril(np.ones((4, 4), dtype=bool))
    key_ok = np.array([1, 1, 1, 0], dtype=bool)
    expect_allowed = tri & key_ok[None, :]  # AND == elementwise product of 1/0 masks
    assert np.array_equal(allowed[0, 0].numpy(), expect_allowed)
    # the notes' combined mask (their row 3 is [1, 1, 1, 0]: query padding not masked)
    assert np.array_equal(expect_allowed.astype(int), [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]])
    # NOTES INCONSISTENT: their 2-D padding mask has row 3 = [0, 0, 0, 0], yet their combined
    # mask uses [1, 1, 1, 0] for that row. And their additive form puts 1 where allowed; the
    # additive mask is 0 where allowed and -inf elsewhere (model.attention.additive).

    X = torch.tensor(X4, dtype=torch.float32)[None, None]
    tr = attend(X, X, X, allowed=allowed)
    raw = X4 @ X4.T
    # NOTES WRONG: they say "Scores = Q K^T / 2" but list the *unscaled* values, and rows 1-2 are
    # miscomputed: q1.k1 = 1.74 (not 1.9), q1.k2 = 2.78 (not 3.1), q2.k2 = 4.46 (not 5.1).
    np.testing.assert_allclose(raw[0, :3], [0.30, 0.70, 1.10], atol=1e-12)
    np.testing.assert_allclose(raw[1, 1:3], [1.74, 2.78], atol=1e-12)
    np.testing.assert_allclose(raw[2, 2], 4.46, atol=1e-12)
    np.testing.assert_allclose(tr.scores[0, 0].numpy(), raw, atol=1e-6)
    np.testing.assert_allclose(tr.scaled[0, 0].numpy(), raw / 2, atol=1e-6)
    masked = np.where(expect_allowed, raw / 2, -np.inf)
    got_masked = tr.masked[0, 0].numpy()
    assert np.array_equal(np.isneginf(got_masked), ~expect_allowed)
    w = np_softmax(masked)
    np.testing.assert_allclose(tr.weights[0, 0].numpy(), w, atol=1e-6)
    np.testing.assert_allclose(w[0], [1, 0, 0, 0])
    np.testing.assert_allclose(w[1], [0.3729, 0.6271, 0, 0], atol=1e-4)
    np.testing.assert_allclose(w[2], [0.1152, 0.2668, 0.6180, 0], atol=1e-4)
    # NOTES WRONG: the padded query row (row 3, masked scores [0, 0, 0, -inf]) gets
    # [1/3, 1/3, 1/3, 0], not [1, 0, 0, 0]; row 2 is not [0.1, 0.3, 0.6] even from their own
    # (unscaled, miscomputed) scores [1.1, 3.1, 5.1] -> [0.016, 0.117, 0.867].
    np.testing.assert_allclose(w[3], [1 / 3, 1 / 3, 1 / 3, 0], atol=1e-6)
    np.testing.assert_allclose(tr.heads[0, 0].numpy(), w @ X4, atol=1e-6)
    assert not tr.fully_masked.any()

    # masking the padded *query* too leaves that row fully masked: zeros and a flag, no NaN
    tr_q = attend(X, X, X, allowed=combine(look_ahead, padding_allowed(kpm, mask_queries=True)))
    assert tr_q.fully_masked[0, 0].tolist() == [False, False, False, True]
    assert tr_q.weights[0, 0, 3].abs().max() == 0
    np.testing.assert_allclose(tr_q.weights[0, 0, :3].numpy(), w[:3], atol=1e-6)
    assert not torch.isnan(tr_q.weights).any() and not torch.isnan(tr_q.heads).any()
