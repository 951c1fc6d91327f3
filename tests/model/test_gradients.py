"""classroom/gradients.py against independent references: the analytic softmax Jacobian in numpy,
gradient norms recomputed from the parameters, torch's cross-entropy; fixed seeds reproduce."""
from __future__ import annotations

import numpy as np
import torch

from classroom import gradients as G
from model.config import ModelConfig
from model.transformer import Transformer


def analytic_jacobian(z: np.ndarray) -> np.ndarray:
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return np.stack([np.diag(row) - np.outer(row, row) for row in p])  # (N, n, n)


def test_autograd_jacobian_is_diag_p_minus_ppT():
    z = np.random.default_rng(0).normal(scale=3.0, size=(20, 7))
    np.testing.assert_allclose(G.softmax_jacobian(z), analytic_jacobian(z), atol=1e-12)


def test_jacobian_stats_match_numpy():
    z = np.random.default_rng(1).normal(scale=8.0, size=(50, 16))
    J = analytic_jacobian(z)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    s = G.jacobian_stats(z, 1e-3)
    assert s.near_zero == (np.abs(J) < 1e-3).mean()
    np.testing.assert_allclose(s.norm, np.linalg.norm(J, axis=(1, 2)).mean(), rtol=1e-10)
    np.testing.assert_allclose(s.max_weight, p.max(axis=1).mean(), rtol=1e-10)
    assert s.score_std == np.std(z)


def test_scaling_keeps_gradients_alive_reproducibly():
    a = G.softmax_gradient_experiment(n_samples=60)
    b = G.softmax_gradient_experiment(n_samples=60)
    for kind in ("scaled", "unscaled"):
        for m in ("near_zero", "norm", "max_weight", "score_std"):
            assert np.array_equal(getattr(getattr(a, kind), m), getattr(getattr(b, kind), m))  # fixed seed: same numbers
    assert list(a.d_k) == list(G.DK_GRID) and a.n_samples == 60 and a.n_keys == 16 and a.near_zero_below == G.NEAR_ZERO
    un, sc = a.unscaled, a.scaled
    assert np.all(np.diff(un.near_zero) > 0) and un.near_zero[-1] > 0.95  # saturates with d_k
    assert sc.near_zero.max() < 0.5 and np.ptp(sc.near_zero) < 0.1  # stays put with scaling
    assert un.norm[-1] < 0.3 * sc.norm[-1]
    assert np.all(np.diff(un.max_weight) > 0) and un.max_weight[-1] > sc.max_weight[-1]  # one key takes it all
    np.testing.assert_allclose(sc.score_std, 1.0, atol=0.1)  # variance 1 after scaling
    np.testing.assert_allclose(un.score_std, np.sqrt(a.d_k), rtol=0.1)  # variance d_k before


def test_layer_grad_norms_recomputed_from_parameters():
    cfg = ModelConfig(vocab_size=12, d_model=16, n_heads=2, n_layers=3, max_len=8)
    m = Transformer(cfg, seed=0)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    torch.nn.functional.cross_entropy(m(ids)[0, :-1], ids[0, 1:]).backward()
    want = [np.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in b.parameters())) for b in m.blocks]
    np.testing.assert_allclose(G.layer_grad_norms(m).numpy(), want, rtol=1e-5)


def test_training_comparison_is_reproducible_and_shows_the_claims():
    variants = {k: G.VARIANTS[k] for k in ("residual + layer norm", "no residual", "no layer norm")}
    seen = []
    a = G.residual_norm_comparison(steps=25, variants=variants, progress=seen.append)
    b = G.residual_norm_comparison(steps=25, variants=variants)
    assert seen[-1] == 1.0 and len(seen) == 75
    for ra, rb in zip(a, b):
        assert np.array_equal(ra.losses, rb.losses) and np.array_equal(ra.grad_norms, rb.grad_norms)
        assert ra.grad_norms.shape == (25, 6)
    rows = {r.run: r for r in G.summarize(a, last=5)}
    # without layer norm the untrained model is wildly over-confident; with it, near ln |V|
    assert rows["no layer norm"].first_loss > 3 * rows["residual + layer norm"].first_loss
    assert abs(rows["residual + layer norm"].first_loss - np.log(a[0].vocab_size)) < 1.0
    assert a[0].uniform_loss == np.log(a[0].vocab_size) and list(a[0].steps) == list(range(1, 26))
    # without skips the first block's gradient is a small fraction of the last one's
    assert rows["no residual"].first_over_last < 0.2 < rows["residual + layer norm"].first_over_last
    for r in a:  # the summary's numbers, recomputed here
        s, g = rows[r.name], r.grad_norms.mean(axis=0)
        np.testing.assert_array_equal(r.mean_grad_norms, g)
        assert s.last == 5 and s.mean_loss_last == r.losses[-5:].mean() and s.largest_loss == r.losses.max()
        assert s.first_loss == r.losses[0] and s.grad_norm_first == g[0] and s.grad_norm_last == g[-1]
        assert s.first_over_last == g[0] / g[-1]
