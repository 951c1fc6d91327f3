"""Unit tests of the classroom analyses behind the concept pages (classroom/scaling.py, positional.py, ...)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from classroom import causal_vs_bidirectional, contextual, cost, ffn_output, layer_norm, mask_lab, multi_head, positional, scaling
from model.config import PRESETS, ModelConfig, param_count
from model.layers import sinusoidal_table
from model.transformer import Transformer


def test_softmax_matches_torch_and_handles_masks_and_temperature():
    x = np.array([[1.0, 2.0, 3.0], [1000.0, 0.0, -1000.0]])
    np.testing.assert_allclose(scaling.softmax(x), torch.softmax(torch.tensor(x), -1).numpy(), atol=1e-12)
    np.testing.assert_allclose(scaling.softmax(x, 2.0), torch.softmax(torch.tensor(x) / 2, -1).numpy(), atol=1e-12)
    m = scaling.softmax(np.array([[0.0, -np.inf], [-np.inf, -np.inf]]))
    np.testing.assert_array_equal(m, [[1.0, 0.0], [0.0, 0.0]])  # fully masked row -> zeros, never NaN
    with pytest.raises(ValueError):
        scaling.softmax(x, 0.0)
    with pytest.raises(ValueError):
        scaling.softmax(x, float("nan"))


def test_entropy_bits():
    assert scaling.entropy_bits(np.full(8, 1 / 8)) == pytest.approx(3.0)
    assert scaling.entropy_bits(np.array([1.0, 0.0])) == pytest.approx(0.0)


def test_worked_scaling_example_numbers():
    ex = scaling.worked_scaling_example()
    np.testing.assert_array_equal(ex.scores, [6.0, 4.0])
    assert ex.sqrt_d_k == 2.0
    np.testing.assert_allclose(ex.weights_unscaled, [0.8808, 0.1192], atol=5e-5)
    np.testing.assert_array_equal(ex.scaled, [3.0, 2.0])
    np.testing.assert_allclose(ex.weights_scaled, [0.7311, 0.2689], atol=5e-5)


def test_scaling_row_is_softmax_of_scaled_scores():
    s = np.array([4.0, -2.0, 8.0])
    r = scaling.scaling_row(s, d_k=16, temperature=0.5)
    np.testing.assert_allclose(r.scaled, s / 4)
    np.testing.assert_allclose(r.weights_scaled, torch.softmax(torch.tensor(s / 4 / 0.5), -1).numpy())
    assert r.entropy_scaled > r.entropy_unscaled  # scaling flattens
    assert r.max_entropy == pytest.approx(math.log2(3))


def test_variance_experiment_tracks_theory():
    # Its 200 ms budget is a benchmark's job (benchmarks/), not a unit test's: wall clock is flaky.
    v = scaling.variance_experiment()
    e = scaling.entropy_experiment()
    # n = 1500 samples: sample variance has relative SE ~ sqrt(2/n) = 3.7% (sqrt(8/n) = 7.3% at d_k = 1);
    # 25% is > 3.4 SE everywhere.
    np.testing.assert_allclose(v.var_sampled, v.var_theory, rtol=0.25)
    np.testing.assert_allclose(v.var_scaled_sampled, 1.0, rtol=0.25)
    # the saturation: unscaled entropy collapses with d_k, scaled entropy stays near its d_k = 1 value
    assert e.entropy_unscaled[-1] < 0.5 * e.entropy_unscaled[0]
    assert np.all(np.abs(e.entropy_scaled - e.entropy_scaled[0]) < 0.3)
    assert e.entropy_scaled.max() <= e.max_entropy + 1e-9


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


@pytest.fixture(scope="module")
def tiny():
    cfg = ModelConfig(vocab_size=30, d_model=16, n_heads=4, n_layers=2, max_len=32)
    model = Transformer(cfg, seed=3)
    ids = [1, 5, 7, 9, 5, 2]
    return cfg, model, ids, model.trace(torch.tensor([ids])).numpy()


def test_residual_norms_and_placement(tiny):
    cfg, model, ids, arr = tiny
    names, norms = layer_norm.residual_norms(arr)
    assert names[0] == "embeddings" and len(names) == 1 + 2 * cfg.n_layers
    np.testing.assert_allclose(norms[-1], np.linalg.norm(arr.layers[1].resid_out[0], axis=-1), rtol=1e-6)
    cmp = layer_norm.norm_placement_comparison(cfg, ids)
    # post-LN renormalises the stream after each sublayer: norm ≈ sqrt(d_model) (γ = 1, β = 0 at init)
    np.testing.assert_allclose(cmp.post[1:], math.sqrt(cfg.d_model), rtol=1e-3)


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


def test_param_rows_and_preset():
    g = PRESETS["gpt2-small"]
    rows = multi_head.param_rows(g)
    assert sum(r.parameters for r in rows) == 124_439_808 == param_count(g)
    assert sum(r.share_pct for r in rows) == pytest.approx(100.0)
    shapes = {r.step: r.shape for r in multi_head.shape_rows(g, 1024)}
    assert shapes["Q_j, K_j, V_j (one head)"] == "1024 × 64"
    assert shapes["scores Q_j K_jᵀ (one head)"] == "1024 × 1024"
    assert shapes["concat(Z_1 … Z_h)"] == "1024 × 768"


def test_gqa_groups_and_savings():
    cfg = ModelConfig(vocab_size=30, d_model=48, n_heads=6, n_kv_heads=2, n_layers=3, max_len=32)
    assert multi_head.groups([0, 0, 0, 1, 1, 1]) == {0: [0, 1, 2], 1: [3, 4, 5]}
    this, full = multi_head.savings(cfg, context=1000)
    assert (this.variant, this.kv_heads, full.variant, full.kv_heads) == ("this model", 2, "full multi-head", 6)
    assert this.kv_params == 3 * 48 * 2 * (8 + 8) and full.kv_params == 3 * this.kv_params
    assert this.cache_bytes_per_token == 2 * 3 * 2 * 8 * 4 and full.cache_bytes_per_token == 3 * this.cache_bytes_per_token
    assert this.context == 1000 and this.cache_mb == pytest.approx(this.cache_bytes_per_token * 1000 / 1e6)


def test_ffn_position_check_and_weight_tying(tiny):
    cfg, model, ids, arr = tiny
    assert ffn_output.ffn_position_check(model, 1, arr.layers[1].ffn.input[0], arr.layers[1].ffn.output[0]) < 1e-5
    wt = ffn_output.weight_tying(model, arr.final[0], arr.logits[0])
    assert wt.tied and wt.max_diff < 1e-4 and wt.shape == (30, 16)
    untied = Transformer(cfg.replace(tie_weights=False), seed=3)
    a2 = untied.trace(torch.tensor([ids])).numpy()
    assert not ffn_output.weight_tying(untied, a2.final[0], a2.logits[0]).tied
    view = ffn_output.output_layer_view(untied, a2.final[0], a2.logits[0], 4)
    assert not view.tying.tied and view.tying.max_diff < 1e-4
    np.testing.assert_array_equal(view.embedding_rows, untied.tok_emb.weight.detach().numpy()[:4])
    np.testing.assert_array_equal(view.output_rows, untied.output_matrix.detach().numpy()[:4])
    assert not np.array_equal(view.embedding_rows, view.output_rows)


def test_topk_and_sequence_logprob(tiny):
    cfg, model, ids, arr = tiny
    probs = arr.probs[0]
    p, toks = ffn_output.topk_next(probs, [f"w{i}" for i in range(30)], 3)
    assert p.shape == (len(ids), 3) and np.all(np.diff(p, axis=1) <= 0)
    assert toks[0][0] == f"w{int(np.argmax(probs[0]))}"
    sp = ffn_output.sequence_logprob(probs, ids)
    manual = sum(math.log(probs[t - 1, ids[t]]) for t in range(1, len(ids)))
    assert sp.total_logp == pytest.approx(manual, rel=1e-6)
    assert len(sp.p) == len(ids) - 1
    np.testing.assert_allclose(sp.logp, np.log(sp.p), rtol=1e-12)
    assert sp.total_p == pytest.approx(math.exp(manual), rel=1e-6)
    assert sp.perplexity == pytest.approx(math.exp(-manual / (len(ids) - 1)), rel=1e-6)
    one = ffn_output.sequence_logprob(probs[:1], ids[:1])
    assert one.total_logp == 0.0 and one.total_p == 1.0 and len(one.p) == 0 and math.isnan(one.perplexity)


def test_active_share_last_layer_view_and_state_change():
    h = np.array([[-0.1, 0.0, 0.03, 0.2], [0.06, -1.0, 1.0, 0.05]])
    assert ffn_output.active_share(h, "relu") == 5 / 8  # > 0
    assert ffn_output.active_share(h, "gelu") == 3 / 8  # > 0.05
    x = np.array([[3.0, 4.0], [0.0, 2.0], [-3.0, -4.0]])
    last = ffn_output.last_layer_view(x)
    np.testing.assert_allclose(last.norms, [5.0, 2.0, 5.0])
    np.testing.assert_allclose(last.cosine[0], [1.0, 0.8, -1.0], atol=1e-12)
    np.testing.assert_allclose(last.mean, [0.0, 2 / 3])
    b = x.copy()
    b[1] = [2.0, 0.0]
    ch = causal_vs_bidirectional.state_change(x, b)
    np.testing.assert_allclose(ch.cosine, [1.0, 0.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(ch.distance, [0.0, math.sqrt(8), 0.0])
    np.testing.assert_allclose(ch.norm_a, [5.0, 2.0, 5.0])


def test_contextual_similarity(tiny):
    cfg, model, ids, arr = tiny
    other = model.trace(torch.tensor([[3, 7, 8]]), causal=False).numpy()  # id 7 = "apple"
    names, sa = contextual.stage_states(arr)
    _, sb = contextual.stage_states(other)
    la, lb = ["<bos>", "a", "apple", "b", "apple", "c"], ["x", "Apple", "z"]
    assert contextual.common_words(la, lb) == ["apple"]
    ia, ib = contextual.find_word(la, "APPLE"), contextual.find_word(lb, "apple")
    assert (ia, ib) == (2, 1) and contextual.find_word(la, "pear") is None
    res = contextual.contextual_similarity(sa, sb, ia, ib, la, lb, k=2)
    assert res.cosine[0] == pytest.approx(1.0)  # same token id -> same embedding row
    assert res.cosine[1] < 0.999  # different positions added
    assert res.cosine[-1] < 0.999
    assert len(res.nearest_a) == len(names) and len(res.nearest_a[0]) == 2
    assert all(not lab.startswith("A2:") for lab, _ in res.nearest_a[0])  # itself excluded


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


def test_classroom_math_is_the_engines():
    """The consistency checks that used to run inside the app (worked_examples.pe_table raised
    AssertionError) live here: each classroom function gives the engine's numbers."""
    from classroom import worked_examples as wx
    from model.attention import additive, masked_softmax
    from model.layers import layer_norm as engine_layer_norm

    x = torch.randn(3, 5, dtype=torch.float64)
    allowed = torch.rand(3, 5) > 0.3
    _, w, _ = masked_softmax(x, allowed, temperature=0.7)
    np.testing.assert_array_equal(scaling.softmax(x.numpy(), 0.7, allowed=allowed.numpy()), w.numpy())
    np.testing.assert_array_equal(wx.softmax_from_scores(x.numpy(), allowed.numpy()), masked_softmax(x, allowed)[1].numpy())
    g, b = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    ln, ref = layer_norm.layer_norm(x.numpy(), g.numpy(), b.numpy()), engine_layer_norm(x, g, b)
    for k in ("normalized", "output"):
        np.testing.assert_array_equal(getattr(ln, k), getattr(ref, k).numpy())
    np.testing.assert_array_equal(ln.var, ref.var[..., 0].numpy())
    steps = wx.layer_norm_steps(x[0].numpy())
    np.testing.assert_array_equal(steps.output, engine_layer_norm(x[0], torch.ones(5, dtype=torch.float64),
                                                           torch.zeros(5, dtype=torch.float64)).output.numpy())
    # the float64 table at an offset is the engine's rows, and agrees with the model's float32 table
    np.testing.assert_array_equal(wx.pe_table(4, 6, start=7),
                                  sinusoidal_table(11, 6, dtype=torch.float64).numpy()[7:])
    np.testing.assert_allclose(wx.pe_table(50, 16), sinusoidal_table(50, 16).numpy(), atol=1e-6)
    assert f"{wx.pe_table(2, 4)[1, 3]:.5f}" == "0.99995"  # float64: cos(0.01), as the notes write it
    m = mask_lab.mask_steps(np.array([[True, True, False]]), 0, causal=True, mask_queries=False)
    np.testing.assert_array_equal(m.pad_1d_add, additive(torch.tensor([True, True, False])).numpy())
    np.testing.assert_array_equal(m.combined_add, np.where(m.combined > 0, 0.0, -np.inf))


def test_one_topk_and_total_variation():
    p = np.array([0.1, 0.4, 0.1, 0.4])
    assert ffn_output.topk(p, 3).tolist() == [1, 3, 0]  # ties: lower index first
    assert ffn_output.topk(p, 0).tolist() == [1] and ffn_output.topk(p, 99).tolist() == [1, 3, 0, 2]
    assert ffn_output.topk(np.stack([p, p[::-1]]), 1).tolist() == [[1], [0]]
    q = np.array([0.4, 0.1, 0.4, 0.1])
    assert causal_vs_bidirectional.total_variation(p, q) == pytest.approx(0.6)
    assert causal_vs_bidirectional.total_variation(p, p) == 0.0
    assert causal_vs_bidirectional.total_variation([1.0, 0.0], [0.0, 1.0]) == 1.0
    with pytest.raises(ValueError, match="same shape"):
        causal_vs_bidirectional.total_variation(p, q[:3])


def test_state_change_per_token():
    a = np.array([[1.0, 0.0], [3.0, 4.0], [0.0, 0.0]])
    b = np.array([[0.0, 2.0], [6.0, 8.0], [1.0, 0.0]])
    c = causal_vs_bidirectional.state_change(a, b)
    np.testing.assert_allclose(c.cosine, [0.0, 1.0, 0.0])  # orthogonal, same direction, a zero vector
    np.testing.assert_allclose(c.distance, [math.sqrt(5.0), 5.0, 1.0])
    np.testing.assert_allclose(c.norm_a, [1.0, 5.0, 0.0])
    with pytest.raises(ValueError, match=r"\(T, D\)"):
        causal_vs_bidirectional.state_change(a, b[:2])


def test_shipped_checkpoints_one_list():
    from model.checkpoint import CHECKPOINT_DIR, shipped_checkpoints
    dec = shipped_checkpoints()
    assert "causal-lm" in dec and "translator" not in dec
    assert all(meta.get("kind", "transformer") == "transformer" for meta in dec.values())
    every = shipped_checkpoints(kind=None)
    assert set(every) == set(dec) | set(shipped_checkpoints(kind="seq2seq")) | set(shipped_checkpoints(kind="rnn-seq2seq"))
    assert list(every) == sorted(every) and all((CHECKPOINT_DIR / n / "model.safetensors").is_file() for n in every)
    assert shipped_checkpoints(CHECKPOINT_DIR / "does-not-exist") == {}
