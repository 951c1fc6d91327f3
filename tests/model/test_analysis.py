"""Unit tests of model/analysis.py: the math behind the concept pages."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model import analysis as A
from model.config import PRESETS, ModelConfig, param_count
from model.layers import sinusoidal_table
from model.trace import flat_arrays as to_numpy
from model.transformer import Transformer


def test_softmax_matches_torch_and_handles_masks_and_temperature():
    x = np.array([[1.0, 2.0, 3.0], [1000.0, 0.0, -1000.0]])
    np.testing.assert_allclose(A.softmax(x), torch.softmax(torch.tensor(x), -1).numpy(), atol=1e-12)
    np.testing.assert_allclose(A.softmax(x, 2.0), torch.softmax(torch.tensor(x) / 2, -1).numpy(), atol=1e-12)
    m = A.softmax(np.array([[0.0, -np.inf], [-np.inf, -np.inf]]))
    np.testing.assert_array_equal(m, [[1.0, 0.0], [0.0, 0.0]])  # fully masked row -> zeros, never NaN
    with pytest.raises(ValueError):
        A.softmax(x, 0.0)
    with pytest.raises(ValueError):
        A.softmax(x, float("nan"))


def test_entropy_bits():
    assert A.entropy_bits(np.full(8, 1 / 8)) == pytest.approx(3.0)
    assert A.entropy_bits(np.array([1.0, 0.0])) == pytest.approx(0.0)


def test_worked_scaling_example_numbers():
    ex = A.worked_scaling_example()
    np.testing.assert_array_equal(ex["scores"], [6.0, 4.0])
    assert ex["sqrt_d_k"] == 2.0
    np.testing.assert_allclose(ex["weights_unscaled"], [0.8808, 0.1192], atol=5e-5)
    np.testing.assert_array_equal(ex["scaled"], [3.0, 2.0])
    np.testing.assert_allclose(ex["weights_scaled"], [0.7311, 0.2689], atol=5e-5)


def test_scaling_row_is_softmax_of_scaled_scores():
    s = np.array([4.0, -2.0, 8.0])
    r = A.scaling_row(s, d_k=16, temperature=0.5)
    np.testing.assert_allclose(r["scaled"], s / 4)
    np.testing.assert_allclose(r["weights_scaled"], torch.softmax(torch.tensor(s / 4 / 0.5), -1).numpy())
    assert r["entropy_scaled"] > r["entropy_unscaled"]  # scaling flattens
    assert r["max_entropy"] == pytest.approx(math.log2(3))


def test_variance_experiment_tracks_theory():
    # Its 200 ms budget is a benchmark's job (benchmarks/), not a unit test's: wall clock is flaky.
    v = A.variance_experiment()
    e = A.entropy_experiment()
    # n = 1500 samples: sample variance has relative SE ~ sqrt(2/n) = 3.7% (sqrt(8/n) = 7.3% at d_k = 1);
    # 25% is > 3.4 SE everywhere.
    np.testing.assert_allclose(v["var_sampled"], v["var_theory"], rtol=0.25)
    np.testing.assert_allclose(v["var_scaled_sampled"], 1.0, rtol=0.25)
    # the saturation: unscaled entropy collapses with d_k, scaled entropy stays near its d_k = 1 value
    assert e["entropy_unscaled"][-1] < 0.5 * e["entropy_unscaled"][0]
    assert np.all(np.abs(e["entropy_scaled"] - e["entropy_scaled"][0]) < 0.3)
    assert e["entropy_scaled"].max() <= e["max_entropy"] + 1e-9


def test_pe_matches_engine_and_worked_example():
    np.testing.assert_array_equal(A.pe_table(20, 8), sinusoidal_table(20, 8).numpy())
    ex = A.worked_pe_example()
    np.testing.assert_allclose(ex["pe"][0], [0, 1, 0, 1], atol=1e-7)
    np.testing.assert_allclose(ex["pe"][1], [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)], atol=1e-6)
    np.testing.assert_allclose(ex["pe"][2], [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)], atol=1e-6)
    np.testing.assert_allclose(ex["the_sum"], [0.1, 1.2, 0.3, 1.4], atol=1e-6)
    np.testing.assert_allclose(ex["cat_sum"], [1.3415, 1.1403, 0.7100, 1.7999], atol=1e-4)


def test_pe_wavelengths_and_similarity_depends_on_distance():
    wl = A.pe_wavelengths(8)
    assert wl[0] == pytest.approx(2 * math.pi) and wl[1] == wl[0]
    assert wl[2] == pytest.approx(2 * math.pi * 10000 ** (2 / 8))
    sim = A.pe_similarity(A.pe_table(12, 16))
    np.testing.assert_allclose(np.diag(sim), 8.0, atol=1e-5)  # d/2
    np.testing.assert_allclose(sim[0, 3], sim[5, 8], atol=1e-5)  # depends on i - j only


def test_layer_norm_worked_example_and_matches_torch():
    ex = A.layer_norm([2.0, 4.0, 6.0, 8.0])
    np.testing.assert_allclose(ex["output"], [-1.3416, -0.4472, 0.4472, 1.3416], atol=5e-5)
    x = np.random.default_rng(0).normal(size=(3, 5))
    g, b = np.arange(5.0), np.ones(5)
    ref = F.layer_norm(torch.tensor(x), (5,), torch.tensor(g), torch.tensor(b), eps=1e-5).numpy()
    np.testing.assert_allclose(A.layer_norm(x, g, b)["output"], ref, atol=1e-10)


def test_batch_vs_layer_norm_axes():
    x = np.array([[1.0, 2.0, 3.0], [3.0, 6.0, 9.0]])
    r = A.batch_vs_layer_norm(x)
    np.testing.assert_allclose(r["bn_mean"], [2.0, 4.0, 6.0])
    np.testing.assert_allclose(r["ln_mean"], [2.0, 6.0])
    np.testing.assert_allclose(r["bn"].mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(r["ln"].mean(1), 0, atol=1e-12)
    np.testing.assert_allclose(r["ln"].var(1), 1, atol=1e-4)
    with pytest.raises(ValueError):
        A.batch_vs_layer_norm(np.ones((1, 3)))


@pytest.fixture(scope="module")
def tiny():
    cfg = ModelConfig(vocab_size=30, d_model=16, n_heads=4, n_layers=2, max_len=32)
    model = Transformer(cfg, seed=3)
    ids = [1, 5, 7, 9, 5, 2]
    return cfg, model, ids, to_numpy(model.trace(torch.tensor([ids])))


def test_residual_norms_and_placement(tiny):
    cfg, model, ids, arr = tiny
    names, norms = A.residual_norms(arr, cfg.n_layers)
    assert names[0] == "embeddings" and len(names) == 1 + 2 * cfg.n_layers
    np.testing.assert_allclose(norms[-1], np.linalg.norm(arr["layers.1.resid_out"][0], axis=-1), rtol=1e-6)
    cmp = A.norm_placement_comparison(cfg, ids)
    # post-LN renormalises the stream after each sublayer: norm ≈ sqrt(d_model) (γ = 1, β = 0 at init)
    np.testing.assert_allclose(cmp["post"][1:], math.sqrt(cfg.d_model), rtol=1e-3)


def test_param_rows_and_preset():
    g = PRESETS["gpt2-small"]
    rows = A.param_rows(g)
    assert sum(r["parameters"] for r in rows) == 124_439_808 == param_count(g)
    assert sum(r["share %"] for r in rows) == pytest.approx(100.0)
    shapes = {r["step"]: r["shape"] for r in A.shape_rows(g, 1024)}
    assert shapes["Q_j, K_j, V_j (one head)"] == "1024 × 64"
    assert shapes["scores Q_j K_jᵀ (one head)"] == "1024 × 1024"
    assert shapes["concat(Z_1 … Z_h)"] == "1024 × 768"


def test_ffn_position_check_and_weight_tying(tiny):
    cfg, model, ids, arr = tiny
    assert A.ffn_position_check(model, 1, arr["layers.1.ffn.input"][0], arr["layers.1.ffn.output"][0]) < 1e-5
    wt = A.weight_tying(model, arr["final"][0], arr["logits"][0])
    assert wt["tied"] and wt["max_diff"] < 1e-4 and wt["shape"] == (30, 16)
    untied = Transformer(cfg.replace(tie_weights=False), seed=3)
    a2 = to_numpy(untied.trace(torch.tensor([ids])))
    assert not A.weight_tying(untied, a2["final"][0], a2["logits"][0])["tied"]


def test_topk_and_sequence_logprob(tiny):
    cfg, model, ids, arr = tiny
    probs = arr["probs"][0]
    p, toks = A.topk_next(probs, [f"w{i}" for i in range(30)], 3)
    assert p.shape == (len(ids), 3) and np.all(np.diff(p, axis=1) <= 0)
    assert toks[0][0] == f"w{int(np.argmax(probs[0]))}"
    sp = A.sequence_logprob(probs, ids)
    manual = sum(math.log(probs[t - 1, ids[t]]) for t in range(1, len(ids)))
    assert sp["total_logp"] == pytest.approx(manual, rel=1e-6)
    assert len(sp["p"]) == len(ids) - 1
    assert A.sequence_logprob(probs[:1], ids[:1])["total_logp"] == 0.0


def test_contextual_similarity(tiny):
    cfg, model, ids, arr = tiny
    other = to_numpy(model.trace(torch.tensor([[3, 7, 8]]), causal=False))  # id 7 = "apple"
    names, sa = A.stage_states(arr, cfg.n_layers)
    _, sb = A.stage_states(other, cfg.n_layers)
    la, lb = ["<bos>", "a", "apple", "b", "apple", "c"], ["x", "Apple", "z"]
    assert A.common_words(la, lb) == ["apple"]
    ia, ib = A.find_word(la, "APPLE"), A.find_word(lb, "apple")
    assert (ia, ib) == (2, 1) and A.find_word(la, "pear") is None
    res = A.contextual_similarity(sa, sb, ia, ib, la, lb, k=2)
    assert res["cosine"][0] == pytest.approx(1.0)  # same token id -> same embedding row
    assert res["cosine"][1] < 0.999  # different positions added
    assert res["cosine"][-1] < 0.999
    assert len(res["nearest_a"]) == len(names) and len(res["nearest_a"][0]) == 2
    assert all(not lab.startswith("A2:") for lab, _ in res["nearest_a"][0])  # itself excluded


def test_attention_cost_gpt2_numbers():
    c = A.attention_cost(PRESETS["gpt2-small"], 1024)
    assert c["scores_per_head_layer"] == 1_048_576
    assert c["scores_total"] == 12 * 12 * 1_048_576 == 150_994_944
    assert c["memory_bytes"] == 603_979_776
    c2 = A.attention_cost(PRESETS["gpt2-small"], 2048)
    assert c2["flops_attention"] == 4 * c["flops_attention"] and c2["flops_linear"] == 2 * c["flops_linear"]


def test_measure_forward_time_and_fit(tiny):
    cfg, model, ids, arr = tiny
    Ts = A.default_time_grid(cfg.max_len, n=4)
    assert Ts[0] == 8 and Ts[-1] == 32
    secs = A.measure_forward_time(model, Ts, repeats=1)
    assert secs.shape == (4,) and np.all(secs > 0)
    fit = A.fit_theory(Ts, secs, cfg)
    assert np.all(fit["coef"] >= 0) and fit["fit"].shape == (4,)
    synthetic = 1e-3 + 2e-9 * A.cost_curve(cfg, Ts)["flops_attention"]
    np.testing.assert_allclose(A.fit_theory(Ts, synthetic, cfg)["fit"], synthetic, rtol=1e-6)
