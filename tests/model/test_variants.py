"""Attention variants (issue 20): ALiBi, sliding window, multi-query, additive (Bahdanau).

Each is checked against a reference written here in numpy from the model's own weights and the
traced input of the attention (layer 0's normed input), so only the attention is under test."""
import math

import numpy as np
import pytest
import torch

from model import ModelConfig, Transformer
from model.attention import alibi_bias, alibi_slopes, attend, window_allowed
from model.config import param_count
from model.generate import generate_step

IDS = torch.tensor([[3, 9, 4, 17, 4, 30, 2]])  # T = 7, a repeated token
T = IDS.shape[1]


def paper_slopes(n: int) -> list[float]:
    """ALiBi's get_slopes as published (Press et al., github.com/ofirpress/attention_with_linear_biases)."""
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio ** i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return get_slopes_power_of_2(closest) + paper_slopes(2 * closest)[0::2][: n - closest]


def np_softmax_masked(logits: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Row softmax over allowed cells; all-zero rows where nothing is allowed."""
    x = np.where(allowed, logits, -np.inf)
    m = np.max(np.where(allowed, logits, -1e300), axis=-1, keepdims=True)
    e = np.where(allowed, np.exp(x - m), 0.0)
    s = e.sum(-1, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)


def np_layer0(model: Transformer, tr, *, causal: bool, slopes=None, window=None) -> dict:
    """Layer 0's attention in numpy from the model's weights and the traced input of the attention."""
    cfg = model.cfg
    att = model.blocks[0].attn
    x = tr.layers[0].ln1.output[0].numpy().astype(np.float64)  # (T, D), pre-LN: what W_Q sees
    W = {n: (getattr(att, n).weight.detach().numpy().astype(np.float64),
             getattr(att, n).bias.detach().numpy().astype(np.float64)) for n in ("q_proj", "k_proj", "v_proj")}
    H, Hk, dk = cfg.n_heads, cfg.kv_heads, cfg.d_k
    n = x.shape[0]
    q = (x @ W["q_proj"][0].T + W["q_proj"][1]).reshape(n, H, dk).transpose(1, 0, 2)  # (H, T, dk)
    k = (x @ W["k_proj"][0].T + W["k_proj"][1]).reshape(n, Hk, dk).transpose(1, 0, 2)  # (Hk, T, dk)
    v = (x @ W["v_proj"][0].T + W["v_proj"][1]).reshape(n, Hk, -1).transpose(1, 0, 2)
    group = H // Hk
    k_h = np.stack([k[h // group] for h in range(H)])  # query head h reads K/V head h // group
    v_h = np.stack([v[h // group] for h in range(H)])
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    allowed = np.ones((n, n), bool)
    if causal:
        allowed &= j <= i
    if window is not None:
        allowed &= np.abs(i - j) < window
    if cfg.attn_score == "additive":
        wq, wk, va = (p.detach().numpy().astype(np.float64) for p in (att.add_wq, att.add_wk, att.add_v))
        logits = np.zeros((H, n, n))
        for h in range(H):
            for a in range(n):
                for b in range(n):
                    logits[h, a, b] = va[h] @ np.tanh(q[h, a] @ wq[h] + k_h[h, b] @ wk[h])
    else:
        logits = np.einsum("hid,hjd->hij", q, k_h) / math.sqrt(dk)
    bias = None
    if slopes is not None:
        bias = -np.asarray(slopes)[:, None, None] * np.abs(i - j)[None]
        logits = logits + bias
    w = np_softmax_masked(logits, np.broadcast_to(allowed, logits.shape))
    return {"weights": w, "heads": w @ v_h, "logits": logits, "bias": bias, "allowed": allowed}


# ---- ALiBi -------------------------------------------------------------------------------------

def test_alibi_slopes_n8_are_one_half_to_one_over_256():
    assert alibi_slopes(8).tolist() == [1 / 2 ** k for k in range(1, 9)]


def test_alibi_slopes_n12_interpolate_as_the_paper():
    want = [2.0 ** -k for k in range(1, 9)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5]
    np.testing.assert_allclose(alibi_slopes(12).numpy(), want, rtol=1e-6)
    for n in range(1, 33):
        np.testing.assert_allclose(alibi_slopes(n).numpy(), paper_slopes(n), rtol=1e-6)


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_layer_matches_numpy(causal):
    cfg = ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_layers=1, pos_encoding="none", alibi=True)
    m = Transformer(cfg, seed=3)
    tr = m.trace(IDS, causal=causal)
    a = tr.layers[0].attn
    ref = np_layer0(m, tr, causal=causal, slopes=paper_slopes(4))
    np.testing.assert_allclose(a.bias.numpy(), ref["bias"], atol=1e-6)
    np.testing.assert_allclose(a.alibi_slopes.numpy(), [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8])
    np.testing.assert_allclose(a.weights[0].numpy(), ref["weights"], atol=1e-5)
    np.testing.assert_allclose(a.heads[0].numpy(), ref["heads"], atol=1e-5)
    # the bias makes a difference: the same weights without ALiBi attend otherwise
    plain = Transformer(cfg.replace(alibi=False), seed=3).trace(IDS, causal=causal).layers[0].attn
    assert np.abs(plain.weights.numpy() - a.weights.numpy()).max() > 1e-3


def test_alibi_bias_with_a_kv_cache_offsets_the_query_rows():
    # a cached step: the 2 new rows sit at positions 5 and 6 of 7 keys
    b = alibi_bias(torch.tensor([0.5]), 2, 7)[0].numpy()
    np.testing.assert_allclose(b, -0.5 * np.array([[5, 4, 3, 2, 1, 0, 1], [6, 5, 4, 3, 2, 1, 0]]))


@pytest.mark.parametrize("kw", [dict(pos_encoding="none", alibi=True), dict(window=3),
                                dict(pos_encoding="none", alibi=True, window=2, n_kv_heads=1)])
def test_cached_generation_equals_the_full_pass(kw):
    m = Transformer(ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_layers=2, **kw), seed=1)
    full = m.trace(IDS, causal=True).logits
    step = generate_step(m, IDS[:, :4])
    step = generate_step(m, IDS[:, 4:6], step.cache)
    step = generate_step(m, IDS[:, 6:], step.cache)
    assert_scaled_close(step.logits[0, -1], full[0, -1])


# ---- sliding window ----------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("w", [2, 3])
def test_window_matches_numpy(causal, w):
    m = Transformer(ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_layers=1, window=w), seed=2)
    tr = m.trace(IDS, causal=causal)
    a = tr.layers[0].attn
    ref = np_layer0(m, tr, causal=causal, window=w)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    np.testing.assert_array_equal(a.band.numpy(), np.abs(i - j) < w)
    np.testing.assert_allclose(a.weights[0].numpy(), ref["weights"], atol=1e-5)
    assert (a.weights[0].numpy()[:, ~ref["allowed"]] == 0).all()
    if causal:  # Mistral's convention: i - w < j <= i, w keys including itself
        np.testing.assert_array_equal(np.broadcast_to(a.allowed.numpy(), (T, T)), (j <= i) & (j > i - w))


@pytest.mark.parametrize("causal", [True, False])
def test_window_one_attends_to_self_only(causal):
    m = Transformer(ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_layers=2, window=1), seed=0)
    for lt in m.trace(IDS, causal=causal).layers:
        np.testing.assert_array_equal(lt.attn.weights.numpy(), np.broadcast_to(np.eye(T), (1, 4, T, T)))


@pytest.mark.parametrize("w", [T, T + 5, 1000])
def test_window_at_least_T_changes_nothing(w):
    cfg = ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_layers=2)
    base = Transformer(cfg, seed=0).trace(IDS, causal=False)
    win = Transformer(cfg.replace(window=w), seed=0).trace(IDS, causal=False)
    assert win.layers[0].attn.band.all()
    np.testing.assert_allclose(win.logits.numpy(), base.logits.numpy(), atol=1e-6)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_window_zero_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="window must be a positive integer"):
        ModelConfig(window=bad)
    with pytest.raises(ValueError, match="window must be a positive integer"):
        window_allowed(4, 4, bad)


# ---- multi-query / grouped-query ---------------------------------------------------------------

@pytest.mark.parametrize("kv", [1, 2, 4])
def test_mqa_gqa_mha_match_numpy(kv):
    m = Transformer(ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_layers=1, n_kv_heads=kv), seed=4)
    tr = m.trace(IDS, causal=True)
    a = tr.layers[0].attn
    ref = np_layer0(m, tr, causal=True)
    assert a.k.shape == (1, kv, T, 8) and a.v.shape == (1, kv, T, 8)
    np.testing.assert_allclose(a.weights[0].numpy(), ref["weights"], atol=1e-5)
    np.testing.assert_allclose(a.heads[0].numpy(), ref["heads"], atol=1e-5)
    if kv == 1:  # multi-query: every query head reads the one K/V head
        assert a.kv_head.tolist() == [0, 0, 0, 0]


# ---- additive (Bahdanau) -----------------------------------------------------------------------

@pytest.mark.parametrize("causal", [True, False])
def test_additive_energies_match_numpy(causal):
    cfg = ModelConfig(vocab_size=40, d_model=16, n_heads=2, n_layers=1, attn_score="additive")
    m = Transformer(cfg, seed=5)
    assert m.num_parameters() == param_count(cfg)
    tr = m.trace(IDS, causal=causal)
    a = tr.layers[0].attn
    ref = np_layer0(m, tr, causal=causal)
    np.testing.assert_allclose(a.energies[0].numpy(), ref["logits"], atol=1e-5)
    assert a.scale == 1.0 and a.scores is a.energies
    np.testing.assert_allclose(a.weights[0].numpy(), ref["weights"], atol=1e-5)
    assert float(a.energies.std()) > 1e-2  # not trivially zero (v_a is initialised, not zeroed)


def test_attend_additive_hand_computed():
    # one head, d_k = d_a = 1: e_ij = v tanh(w_q q_i + w_k k_j)
    q, k, vv = torch.tensor([[[0.5]]]), torch.tensor([[[1.0], [-1.0]]]), torch.tensor([[[1.0], [3.0]]])
    wq, wk, va = torch.tensor([[[2.0]]]), torch.tensor([[[1.0]]]), torch.tensor([[1.5]])
    a = attend(q, k, vv, energy_weights=(wq, wk, va))
    e = [1.5 * math.tanh(1.0 + 1.0), 1.5 * math.tanh(1.0 - 1.0)]
    np.testing.assert_allclose(a.energies[0, 0].numpy(), e, rtol=1e-6)
    p = np.exp(e) / np.exp(e).sum()
    np.testing.assert_allclose(a.heads[0, 0, 0].numpy(), [p[0] * 1 + p[1] * 3], rtol=1e-6)


# ---- limits ------------------------------------------------------------------------------------

VARIANTS = [dict(pos_encoding="none", alibi=True), dict(window=1), dict(window=4), dict(n_kv_heads=1),
            dict(attn_score="additive"), dict(pos_encoding="rope")]


@pytest.mark.parametrize("kw", VARIANTS)
@pytest.mark.parametrize("causal", [True, False])
def test_one_token_works(kw, causal):
    m = Transformer(ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_layers=2, **kw), seed=0)
    tr = m.trace(IDS[:, :1], causal=causal)
    for lt in tr.layers:
        np.testing.assert_array_equal(lt.attn.weights.numpy(), np.ones((1, 4, 1, 1)))
    assert torch.isfinite(tr.logits).all()


@pytest.mark.parametrize("kw", VARIANTS)
def test_fully_masked_rows_are_zero_not_nan(kw):
    m = Transformer(ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_layers=2, **kw), seed=0)
    pad = torch.tensor([[True, True, True, True, True, False, False]])
    tr = m.trace(IDS, causal=True, key_padding_mask=pad, mask_padded_queries=True)
    for lt in tr.layers:
        w = lt.attn.weights.numpy()
        assert np.isfinite(w).all()
        assert (w[0, :, 5:] == 0).all() and lt.attn.fully_masked[0, :, 5:].all()
        np.testing.assert_allclose(w[0, :, :5].sum(-1), 1.0, rtol=1e-5)


def test_attend_bias_on_a_fully_masked_row():
    q = torch.randn(1, 2, 3, 4, generator=torch.Generator().manual_seed(0))
    allowed = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    a = attend(q, q, q, allowed=allowed, bias=alibi_bias(alibi_slopes(2), 3))
    assert torch.isfinite(a.weights).all() and (a.weights[0, :, 1] == 0).all()
    assert a.fully_masked[0, :, 1].all() and not a.fully_masked[0, :, 0].any()


def test_old_config_json_loads_with_the_variants_off():
    old = {k: v for k, v in ModelConfig().to_dict().items() if k not in ("alibi", "window", "attn_score")}
    cfg = ModelConfig.from_dict(old)
    assert (cfg.alibi, cfg.window, cfg.attn_score) == (False, None, "dot")
    with pytest.raises(ValueError, match="attn_score must be one of"):
        ModelConfig(attn_score="bilinear")


# ---- the KV-cache calculator (classroom/kv_cache.py) against the engine's real cache -------------

from classroom import kv_cache  # noqa: E402
from classroom import variants as V  # noqa: E402
from model.generate import KVCache  # noqa: E402
from tests.helpers import assert_scaled_close  # noqa: E402


@pytest.mark.parametrize("kv", [1, 2, 4])
def test_calculator_equals_the_engine_cache(kv):
    shape = kv_cache.KVShape("t", n_layers=3, n_heads=4, n_kv_heads=kv, d_head=8)
    n = 5
    # a seeded model run through the ordinary trace, its cache summed here tensor by tensor
    cfg = ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_kv_heads=kv, n_layers=3)
    cache = KVCache.from_trace(Transformer(cfg, seed=0).trace(IDS[:, :n], causal=True))
    real = sum(t.numel() * t.element_size() for t in (*cache.keys, *cache.values))
    assert real == 2 * 3 * kv * 8 * 4 * n  # hand formula: K and V, layers, K/V heads, d_head, fp32
    assert kv_cache.bytes_per_token(shape, kv, 4) * n == real
    assert kv_cache.engine_cache_bytes(shape, kv, n) == real


def test_engine_checks_put_the_calculator_beside_the_engine():
    shape = kv_cache.KVShape("t", n_layers=2, n_heads=4, n_kv_heads=2, d_head=8)
    checks = kv_cache.engine_checks(shape, 2, n_tokens=3)
    assert [(c.variant, c.kv_heads, c.tokens) for c in checks] == [("MHA", 4, 3), ("GQA", 2, 3), ("MQA", 1, 3)]
    assert [c.calculated for c in checks] == [2 * 2 * kv * 8 * 4 * 3 for kv in (4, 2, 1)]  # fp32, by hand
    assert all(c.equal and c.measured == c.calculated for c in checks)
    off = kv_cache.engine_checks(shape, None, n_tokens=3, measure=lambda sh, kv, n: 1)  # a wrong measurement
    assert [c.variant for c in off] == ["MHA", "MQA"] and not any(c.equal for c in off)
    assert kv_cache.gqa_options(12) == [2, 3, 4, 6] and kv_cache.gqa_options(2) == []


def test_calculator_table_presets():
    smol = kv_cache.PRESETS["SmolLM2-135M"]
    rows = {r.kv_heads: r for r in kv_cache.cache_table(smol, 1000, 4)}
    assert rows[3].bytes_per_token == 2 * 30 * 3 * 64 * 4 == 46_080
    assert rows[9].bytes_per_token == 138_240 and rows[1].bytes_per_token == 15_360
    assert rows[3].share_of_mha == pytest.approx(1 / 3) and rows[3].context_bytes == 46_080 * 1000
    t = kv_cache.cache_table(kv_cache.PRESETS["GPT-2 small"], 1000, 2, window=256)
    assert [r.kv_heads for r in t] == [12, 6, 1, 12]  # MHA, GQA (default 6), MQA, window
    assert t[0].bytes_per_token == 2 * 12 * 12 * 64 * 2
    assert t[3].tokens_cached == 256 and t[3].context_bytes == 2 * 12 * 12 * 64 * 2 * 256
    assert kv_cache.cache_table(smol, 100, 4, window=500)[3].tokens_cached == 100  # w > context: no cap
    for bad in (dict(context=0), dict(window=0)):
        with pytest.raises(ValueError, match="at least 1"):
            kv_cache.cache_table(smol, **{"context": 10, "bytes_per_number": 4, **bad})
    with pytest.raises(ValueError, match="cannot be shared evenly"):
        kv_cache.KVShape("x", 2, 9, 2, 64).check()
    assert kv_cache.human_bytes(1536) == "1.5 KiB" and kv_cache.human_bytes(46_080 * 1000) == "43.9 MiB"


# ---- the Variants page's models (classroom/variants.py) ------------------------------------------

def test_variants_share_the_base_weights_and_pool_kv_heads():
    base = V.build_variant("sinusoidal", 40, seed=7)
    gqa = V.build_variant("gqa", 40, seed=7, n_kv_heads=2)
    learned = V.build_variant("learned", 40, seed=7)
    bq = base.blocks[0].attn.q_proj.weight
    assert torch.equal(learned.blocks[0].attn.q_proj.weight, bq) and torch.equal(gqa.blocks[0].attn.q_proj.weight, bq)
    bk = base.blocks[0].attn.k_proj.weight.numpy()  # (4 * 8, 32): heads 0,1 -> K/V 0, heads 2,3 -> K/V 1
    want = np.concatenate([(bk[0:8] + bk[8:16]) / 2, (bk[16:24] + bk[24:32]) / 2])
    np.testing.assert_allclose(gqa.blocks[0].attn.k_proj.weight.numpy(), want, rtol=1e-6)
    ids = [1, 5, 9, 12, 7]
    np.testing.assert_allclose(V.variant_heads(V.build_variant("mha", 40, seed=7), ids, True).weights,
                               V.variant_heads(base, ids, True).weights)  # MHA is the base itself
    with pytest.raises(ValueError, match="window must be a positive integer"):
        V.build_variant("window", 40, window=0)


def test_shuffle_gaps_no_positions_zero_sinusoidal_not():
    ids = [1, 5, 9, 12, 7, 3]
    models = {k: V.build_variant(k, 40, seed=0) for k in ("none", "sinusoidal", "alibi")}
    res = V.shuffle_gaps(models, ids, seed=3)
    perm = res.perm
    assert [g.key for g in res.gaps] == ["none", "sinusoidal", "alibi"]  # in the order of the models
    # independent check of the claim: the no-position weights of the shuffle are P W P^T, by indexing
    w = V.variant_heads(models["none"], ids, False).weights
    ws = V.variant_heads(models["none"], [ids[i] for i in perm], False).weights
    np.testing.assert_allclose(ws, w[:, perm][:, :, perm], atol=1e-6)
    assert res.gap("none").weight_gap < 1e-6
    assert res.gap("sinusoidal").weight_gap > 1e-2 and res.gap("alibi").weight_gap > 1e-2
    assert res.gap("none").output_gap < 1e-5 and res.gap("sinusoidal").output_gap > 1e-2  # the final states too
    with pytest.raises(ValueError, match="at least 2 tokens"):
        V.shuffle_gaps(models, [4], seed=0)
