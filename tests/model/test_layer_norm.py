"""classroom/layer_norm.py against torch and numpy: the worked example, batch vs layer norm, residual norms, pre-LN vs post-LN, token statistics."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from classroom import (
    layer_norm,
)
from model.transformer import Transformer


def test_layer_norm_worked_example_and_matches_torch():
    ex = layer_norm.layer_norm([2.0, 4.0, 6.0, 8.0])
    assert ex.std == pytest.approx(math.sqrt(5.0 + 1e-5)) and ex.eps == 1e-5  # var([2,4,6,8]) = 5
    np.testing.assert_allclose(ex.output, [-1.3416, -0.4472, 0.4472, 1.3416], atol=5e-5)
    x = np.random.default_rng(0).normal(size=(3, 5))
    g, b = np.arange(5.0), np.ones(5)
    ref = F.layer_norm(torch.tensor(x), (5,), torch.tensor(g), torch.tensor(b), eps=1e-5).numpy()
    np.testing.assert_allclose(layer_norm.layer_norm(x, g, b).output, ref, atol=1e-10)


def test_batch_vs_layer_norm_axes():
    x = np.array([[1.0, 2.0, 3.0], [3.0, 6.0, 9.0]])
    r = layer_norm.batch_vs_layer_norm(x)
    np.testing.assert_allclose(r.bn_mean, [2.0, 4.0, 6.0])
    np.testing.assert_allclose(r.ln_mean, [2.0, 6.0])
    np.testing.assert_allclose(r.bn.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(r.ln.mean(1), 0, atol=1e-12)
    np.testing.assert_allclose(r.ln.var(1), 1, atol=1e-4)
    with pytest.raises(ValueError):
        layer_norm.batch_vs_layer_norm(np.ones((1, 3)))


def test_residual_norms_and_placement(tiny):
    cfg, model, ids, arr = tiny
    names, norms = layer_norm.residual_norms(arr)
    assert names[0] == "embeddings" and len(names) == 1 + 2 * cfg.n_layers
    np.testing.assert_allclose(norms[-1], np.linalg.norm(arr.layers[1].resid_out[0], axis=-1), rtol=1e-6)
    cmp = layer_norm.norm_placement_comparison(cfg, ids)
    # post-LN renormalises the stream after each sublayer: norm ≈ sqrt(d_model) (γ = 1, β = 0 at init)
    np.testing.assert_allclose(cmp.post[1:], math.sqrt(cfg.d_model), rtol=1e-3)


@pytest.mark.parametrize("pe", ["sinusoidal", "learned", "rope"])
def test_placement_shares_one_init_and_reads_the_first_tokens(tiny, pe):
    """The post-LN model borrows the pre-LN model's tensors instead of drawing its own: the numbers
    must equal two models each built with the seed, traced on the first max_tokens ids."""
    cfg, _, ids, _ = tiny
    cfg = cfg.replace(pos_encoding=pe)
    ids = (list(ids) * 4)[: cfg.max_len]
    cmp = layer_norm.norm_placement_comparison(cfg, ids, seed=5, max_tokens=7)
    ids_t = torch.tensor([ids[:7]])
    for norm, got in (("pre", cmp.pre), ("post", cmp.post)):
        want = layer_norm.residual_norms(Transformer(cfg.replace(norm=norm, final_norm=None), seed=5).trace(ids_t).numpy())[1]
        np.testing.assert_allclose(got, want.mean(-1), rtol=1e-6)
    assert cmp.n_tokens == 7
    assert layer_norm.norm_placement_comparison(cfg, ids[:3]).n_tokens == 3


def test_token_stats_of_a_layer_norm_and_an_rmsnorm(tiny):
    cfg, _, ids, _ = tiny
    model = Transformer(cfg, seed=3)
    with torch.no_grad():  # γ ≠ 1, β ≠ 0: the output's statistics differ from the normalized ones
        model.blocks[1].ln2.weight.copy_(torch.linspace(0.5, 2.0, cfg.d_model))
        model.blocks[1].ln2.bias.copy_(torch.linspace(-1.0, 1.0, cfg.d_model))
    ln = model.trace(torch.tensor([ids])).numpy().layers[1].ln2
    x = ln.input[0].astype(np.float64)  # (T, D)
    s = layer_norm.layer_norm_token_stats(ln)
    np.testing.assert_allclose(s.mean_in, x.mean(-1), atol=1e-6)
    np.testing.assert_allclose(s.var_in, x.var(-1), rtol=1e-5)
    np.testing.assert_allclose(s.mean_normalized, 0.0, atol=1e-6)
    np.testing.assert_allclose(s.var_normalized, x.var(-1) / (x.var(-1) + cfg.ln_eps), rtol=1e-5)
    out = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + cfg.ln_eps) \
        * np.linspace(0.5, 2.0, cfg.d_model) + np.linspace(-1.0, 1.0, cfg.d_model)
    np.testing.assert_allclose(s.mean_out, out.mean(-1), atol=1e-5)
    np.testing.assert_allclose(s.var_out, out.var(-1), rtol=1e-4)
    rms_model = Transformer(cfg.replace(norm_kind="rmsnorm"), seed=3)
    rn = rms_model.trace(torch.tensor([ids])).numpy().layers[0].ln1
    x = rn.input[0].astype(np.float64)
    r = layer_norm.rms_norm_token_stats(rn)
    rms = np.sqrt((x ** 2).mean(-1))
    np.testing.assert_allclose(r.mean_sq, rms ** 2, rtol=1e-5)
    np.testing.assert_allclose(r.rms_in, rms, rtol=1e-5)
    np.testing.assert_allclose(r.rms_normalized, rms / np.sqrt(rms ** 2 + cfg.ln_eps), rtol=1e-5)
    np.testing.assert_allclose(r.mean_in, x.mean(-1), rtol=1e-12)
    np.testing.assert_allclose(r.mean_normalized, x.mean(-1) / np.sqrt(rms ** 2 + cfg.ln_eps), rtol=1e-5, atol=1e-7)


def test_norm_outliers_finds_a_token_that_swamps_the_rest():
    """Issue 33: SmolLM2's first token reaches ~20,000 while the others stay under 900."""
    from classroom.layer_norm import norm_outliers
    norms = np.array([[5.0, 4.0, 6.0, 5.0], [20_000.0, 700.0, 800.0, 650.0], [300.0, 600.0, 870.0, 500.0]])
    out = norm_outliers(norms)
    assert out.tokens == [0]
    np.testing.assert_array_equal(out.peak, [20_000.0, 700.0, 870.0, 650.0])
    assert out.typical == 700.0 and out.ratio == pytest.approx(20_000 / 700)
    assert norm_outliers(np.array([[20_000.0, 800.0]])).tokens == [0]  # two tokens: each against the other
    assert norm_outliers(np.array([[10.0, 30.0, 20.0]])).tokens == []  # a toy model's spread
    assert norm_outliers(np.zeros((3, 1))).tokens == []
