"""KV-cached generation (model.generate, issue 18 Deliver 6) on toy models, and the sampling rules."""
from __future__ import annotations

import pytest
import torch

from model import ModelConfig, Transformer
from model.config import PRESETS
from model.generate import (KVCache, generate, generate_step, greedy, kv_cache_bytes_per_token,
                            next_token_probs, sample)
from tests.helpers import assert_scaled_close

# Cached and full passes to 1e-5 of the values' scale (tests.helpers.assert_scaled_close): different
# matmul shapes (T rows vs 1) round differently in the last bits, and by how much depends on the CPU's kernels

CONFIGS = {
    "sinusoidal": PRESETS["tiny"],
    "learned-post": ModelConfig(vocab_size=64, d_model=32, n_heads=4, n_layers=2, max_len=64,
                                pos_encoding="learned", norm="post", activation="relu"),
    "llama": ModelConfig(vocab_size=64, d_model=48, n_heads=6, n_kv_heads=2, n_layers=2, d_ff=64,
                         max_len=64, pos_encoding="rope", rope_theta=500.0, norm_kind="rmsnorm",
                         activation="swiglu", bias=False),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cached_steps_equal_the_full_pass(name):
    cfg = CONFIGS[name]
    m = Transformer(cfg, seed=2)
    ids = torch.randint(0, cfg.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    full = m.trace(ids)
    step = generate_step(m, ids[:, :10])
    assert step.cache.length == 10 and step.trace.past_length is None  # no cache yet
    assert_scaled_close(step.logits, full.logits[:, :10])
    for t in range(10, 24):
        step = generate_step(m, ids[:, t:t + 1], step.cache)
        tr = step.trace
        assert tr.past_length == t and tr.positions.tolist() == [t]
        assert_scaled_close(step.logits[:, 0], full.logits[:, t])
        for l, lt in enumerate(tr.layers):  # the new row, over the whole context
            a, fa = lt.attn, full.layers[l].attn
            assert a.q.shape == (2, cfg.n_heads, 1, cfg.d_k)
            assert a.k.shape == (2, cfg.kv_heads, t + 1, cfg.d_k)
            assert a.weights.shape == (2, cfg.n_heads, 1, t + 1)
            assert_scaled_close(a.weights, fa.weights[:, :, t:t + 1, :t + 1])
            assert_scaled_close(a.k, fa.k[:, :, :t + 1])
    # several new tokens at once, and the record=False path: same numbers
    fast = generate_step(m, ids[:, :7], record=False)
    assert fast.trace is None
    fast = generate_step(m, ids[:, 7:], fast.cache, record=False)
    assert_scaled_close(fast.logits, full.logits[:, 7:])
    assert fast.cache.length == 24
    assert fast.cache.nbytes == 2 * cfg.n_layers * 2 * cfg.kv_heads * 24 * cfg.d_k * 4


def test_generate_with_and_without_cache_agree():
    m = Transformer(CONFIGS["llama"], seed=0)
    a = generate(m, [1, 2, 3], 12, use_cache=True)
    b = generate(m, [1, 2, 3], 12, use_cache=False)
    assert a.ids == b.ids and len(a.ids) == 12
    for x, y in zip(a.logits, b.logits):
        assert_scaled_close(x, y)
    s1 = generate(m, [5], 10, temperature=1.0, top_k=20, seed=7)
    s2 = generate(m, [5], 10, temperature=1.0, top_k=20, seed=7)
    assert s1.ids == s2.ids  # seeded
    stop = generate(m, [1, 2, 3], 12, eos_id=a.ids[0])
    assert stop.ids == [a.ids[0]]


def test_cache_misuse_is_refused():
    m = Transformer(CONFIGS["llama"], seed=0)
    step = generate_step(m, torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match="key_padding_mask"):
        m.trace(torch.tensor([[4]]), past=step.cache, key_padding_mask=torch.tensor([[True]]))
    with pytest.raises(ValueError, match="shape"):
        m.trace(torch.tensor([[4], [5]]), past=step.cache)  # batch 2 after a batch-1 cache
    other = Transformer(CONFIGS["sinusoidal"], seed=0)
    with pytest.raises(ValueError, match="KV cache|shape"):
        other.trace(torch.tensor([[4]]), past=step.cache)
    long = generate_step(m, torch.zeros(1, 64, dtype=torch.long), record=False)
    with pytest.raises(ValueError, match="max_len"):
        generate_step(m, torch.tensor([[1]]), long.cache)
    with pytest.raises(ValueError, match="bidirectional"):
        KVCache.from_trace(m.trace(torch.tensor([[1, 2]]), causal=False))


def test_kv_cache_bytes_per_token():
    smol = ModelConfig(vocab_size=49152, d_model=576, n_heads=9, n_kv_heads=3, n_layers=30, d_ff=1536,
                       max_len=8192, pos_encoding="rope", norm_kind="rmsnorm", activation="swiglu", bias=False)
    assert kv_cache_bytes_per_token(smol) == {"gqa": 2 * 30 * 3 * 64 * 4, "mha": 2 * 30 * 9 * 64 * 4}
    assert kv_cache_bytes_per_token(smol)["gqa"] == 46_080
    tiny = kv_cache_bytes_per_token(PRESETS["tiny"])
    assert tiny["gqa"] == tiny["mha"] == 2 * 2 * 64 * 4


def test_sampling_rules():
    logits = torch.tensor([1.0, 3.0, 2.0, 3.0, -1.0])
    assert greedy(logits) == 1  # the lower id among ties
    p = next_token_probs(logits)
    torch.testing.assert_close(p, torch.softmax(logits, -1))
    g0 = next_token_probs(logits, temperature=0)
    assert g0.tolist() == [0, 1, 0, 0, 0]
    hot = next_token_probs(logits, temperature=100.0)
    assert float(hot.max() - hot.min()) < 0.05  # high temperature: nearly uniform
    k2 = next_token_probs(logits, top_k=2)
    assert (k2 > 0).tolist() == [False, True, False, True, False]
    torch.testing.assert_close(k2.sum(), torch.tensor(1.0))
    # top-p: keep the most likely tokens until their mass reaches p (the crossing token stays)
    q = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert (next_token_probs(q, top_p=0.5) > 0).tolist() == [True, False, False, False]
    assert (next_token_probs(q, top_p=0.6) > 0).tolist() == [True, True, False, False]
    assert (next_token_probs(q, top_p=0.81) > 0).tolist() == [True, True, True, False]
    assert (next_token_probs(q, top_p=1.0) > 0).all()
    torch.testing.assert_close(next_token_probs(q, top_p=0.6), torch.tensor([0.625, 0.375, 0, 0]))
    # seeded draws repeat; a one-hot always gives its token; frequencies follow the probabilities
    draws = [sample(p, torch.Generator().manual_seed(3)) for _ in range(3)]
    assert len(set(draws)) == 1
    assert sample(g0, torch.Generator().manual_seed(0)) == 1
    g = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.tensor([sample(torch.tensor([0.2, 0.8]), g) for _ in range(2000)]), minlength=2)
    assert 0.75 < counts[1] / 2000 < 0.85
    for bad in ({"temperature": -1}, {"top_k": 0}, {"top_p": 0.0}, {"top_p": 1.5}):
        with pytest.raises(ValueError):
            next_token_probs(logits, **bad)
    with pytest.raises(ValueError, match="one row"):
        next_token_probs(logits[None])
