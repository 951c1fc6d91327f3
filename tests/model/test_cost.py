"""classroom/cost.py: GPT-2 small's FLOPs and bytes by hand, measured times and their fit."""

import numpy as np

from classroom import cost
from model.config import PRESETS


def test_attention_cost_gpt2_numbers():
    c = cost.attention_cost(PRESETS["gpt2-small"], 1024)
    assert c.T == 1024 and c.scores_per_head_layer == 1_048_576
    assert c.scores_total == 12 * 12 * 1_048_576 == 150_994_944
    assert c.memory_bytes == 603_979_776
    assert c.flops_attention == 12 * 4 * 1024 ** 2 * 768 and c.flops_linear == 12 * 2 * 1024 * (4 * 768 ** 2 + 2 * 768 * 3072)
    assert c.flops_total == c.flops_attention + c.flops_linear
    c2 = cost.attention_cost(PRESETS["gpt2-small"], 2048)
    assert c2.flops_attention == 4 * c.flops_attention and c2.flops_linear == 2 * c.flops_linear
    curve = cost.cost_curve(PRESETS["gpt2-small"], [1024, 2048])
    np.testing.assert_array_equal(curve.T, [1024, 2048])
    np.testing.assert_array_equal(curve.flops_attention, [c.flops_attention, c2.flops_attention])
    np.testing.assert_array_equal(curve.memory_bytes, [c.memory_bytes, c2.memory_bytes])
    assert curve.flops_total.dtype == np.float64
    g = PRESETS["gpt2-small"]  # where the T² FLOPs overtake the linear ones
    x = cost.linear_quadratic_crossover(g)
    at = cost.attention_cost(g, x)
    assert x == 2 * 768 + 3072 and at.flops_attention == at.flops_linear
    Ts = cost.plot_lengths(1024)
    assert Ts[0] == 8 and Ts[-1] == 1024 and len(Ts) == 24 and np.all(np.diff(Ts) > 0)


def test_measure_forward_time_and_fit(tiny):
    cfg, model, ids, arr = tiny
    Ts = cost.default_time_grid(cfg.max_len, n=4)
    assert Ts[0] == 8 and Ts[-1] == 32
    secs = cost.measure_forward_time(model, Ts, repeats=1)
    assert secs.shape == (4,) and np.all(secs > 0)
    fit = cost.fit_theory(Ts, secs, cfg)
    assert np.all(fit.coef >= 0) and fit.fit.shape == (4,)
    np.testing.assert_allclose(fit.constant + fit.linear + fit.quadratic, fit.fit, rtol=1e-12)
    synthetic = 1e-3 + 2e-9 * cost.cost_curve(cfg, Ts).flops_attention
    exact = cost.fit_theory(Ts, synthetic, cfg)
    np.testing.assert_allclose(exact.fit, synthetic, rtol=1e-6)
    np.testing.assert_allclose(exact.quadratic, synthetic - 1e-3, rtol=1e-5)


def test_flops_follow_the_config_gqa_and_swiglu():
    """Issue 34: the FLOP count assumed four d_model² projections and a two-matrix FFN for every
    model. SmolLM2's shape (GQA 9/3 heads, SwiGLU) counts its own weights: W_K and W_V are 576 × 192."""
    from model.config import ModelConfig
    s = ModelConfig(vocab_size=100, d_model=576, n_heads=9, n_kv_heads=3, n_layers=30, d_ff=1536, max_len=8192,
                    pos_encoding="rope", norm_kind="rmsnorm", activation="swiglu", bias=False)
    c = cost.attention_cost(s, 100)
    per_layer = 576 * 576 + 2 * 576 * 192 + 576 * 576 + 3 * 576 * 1536
    assert c.flops_linear == 30 * 2 * 100 * per_layer
    assert c.flops_attention == 30 * 2 * 100 ** 2 * (9 * 64 + 9 * 64)
    x = cost.linear_quadratic_crossover(s)
    assert x == round(per_layer / 1152) and "2·T·1,152" in cost.crossover_formula(s)
    assert cost.crossover_formula(PRESETS["gpt2-small"]) == "4·T·d_model = 2·(4·d_model² + 2·d_model·d_ff)"
