"""model.flash.tiled_attention: the online softmax, tile by tile, against attend() (the engine's one
attention), torch's scaled_dot_product_attention and a numpy softmax written here."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model.attention import attend, causal_allowed, combine, padding_allowed
from model.flash import check_tile, tiled_attention


def qkv(B=2, H=3, Tq=11, Tk=11, d=8, dv=None, dtype=torch.float64, seed=0, mult=1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Tq, d, generator=g, dtype=dtype) * mult
    k = torch.randn(B, H, Tk, d, generator=g, dtype=dtype)
    v = torch.randn(B, H, Tk, dv or d, generator=g, dtype=dtype)
    return q, k, v


def numpy_reference(q, k, v, allowed=None):
    """softmax(q k^T / sqrt(d)) v in numpy (float64), zero rows where nothing is allowed."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if allowed is not None:
        s = np.where(np.asarray(allowed), s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    z = e.sum(-1, keepdims=True)
    w = np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0)
    return w @ v


@pytest.mark.parametrize("tile", [1, 7, 11, 50])
@pytest.mark.parametrize("tile_q", [None, 1, 4])
def test_random_matches_attend_float64(tile, tile_q):
    q, k, v = qkv()
    ref = attend(q, k, v)
    got = tiled_attention(q, k, v, tile=tile, tile_q=tile_q)
    assert torch.allclose(got.output, ref.weights @ v, atol=1e-6, rtol=0)
    assert torch.allclose(got.output, ref.heads, atol=1e-6, rtol=0)
    np.testing.assert_allclose(got.output.numpy(), numpy_reference(q, k, v), atol=1e-10)
    assert not got.fully_masked.any()


def test_float32_within_1e5_and_sdpa():
    q, k, v = qkv(dtype=torch.float32, Tq=37, Tk=37, d=16)
    got = tiled_attention(q, k, v, tile=7).output
    assert got.dtype == torch.float32
    assert torch.allclose(got, attend(q, k, v).heads, atol=1e-5, rtol=0)
    assert torch.allclose(got, F.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=0)


@pytest.mark.parametrize("mult", [1000.0, -1000.0])
def test_large_scores(mult):
    """Scores of size ~1e4: a naive exp overflows; the running max keeps everything finite."""
    q, k, v = qkv(mult=mult, Tq=9, Tk=23)
    got = tiled_attention(q, k, v, tile=4)
    assert torch.isfinite(got.output).all()
    assert torch.allclose(got.output, attend(q, k, v).heads, atol=1e-6, rtol=0)
    assert torch.allclose(got.output, F.scaled_dot_product_attention(q, k, v), atol=1e-6, rtol=0)
    # the max really jumps between tiles: some step rescaled by a factor far below 1
    rec = tiled_attention(q, k, v, tile=4, record=True)
    assert min(float(s.rescale.min()) for s in rec.steps[1:]) < 1e-6


def test_rescaling_matters():
    """With the rescale factor left out the result would be wrong: a max that rises in a later
    tile must shrink what was summed before (hand-built: scores 0 then 10)."""
    q = torch.tensor([[[[1.0]]]], dtype=torch.float64)  # (1,1,1,1), d=1 -> scale 1
    k = torch.tensor([[[[0.0], [10.0]]]], dtype=torch.float64)
    v = torch.tensor([[[[1.0], [3.0]]]], dtype=torch.float64)
    r = tiled_attention(q, k, v, tile=1, record=True)
    w1 = 1 / (1 + math.exp(10))  # softmax([0, 10])
    assert r.output.item() == pytest.approx(w1 * 1 + (1 - w1) * 3, abs=1e-12)
    s0, s1 = r.steps
    assert (s0.m.item(), s0.l.item(), s0.out.item()) == (0.0, 1.0, 1.0)  # after key 0: out = v_0
    assert s1.m.item() == 10.0
    assert s1.rescale.item() == pytest.approx(math.exp(-10), rel=1e-12)
    assert s1.l.item() == pytest.approx(math.exp(-10) + 1, rel=1e-12)
    assert r.steps[-1].out.item() == r.output.item()


def test_causal_and_padding_masks():
    B, H, T = 2, 2, 13
    q, k, v = qkv(B=B, H=H, Tq=T, Tk=T)
    pad = torch.ones(B, T, dtype=torch.bool)
    pad[1, 9:] = False
    allowed = combine(causal_allowed(T), padding_allowed(pad))  # (B, 1, T, T)
    for tile in (1, 5, T):
        got = tiled_attention(q, k, v, allowed, tile=tile, tile_q=3)
        assert torch.allclose(got.output, attend(q, k, v, allowed).heads, atol=1e-6, rtol=0)
        np.testing.assert_allclose(got.output.numpy(), numpy_reference(q, k, v, allowed.numpy()), atol=1e-10)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    assert torch.allclose(tiled_attention(q, k, v, allowed, tile=4).output, sdpa, atol=1e-6, rtol=0)


def test_fully_masked_rows_zero_and_flagged():
    q, k, v = qkv(B=1, H=2, Tq=6, Tk=8)
    allowed = torch.ones(6, 8, dtype=torch.bool)
    allowed[2] = False  # query 2 may attend to nothing
    allowed[4, :5] = False  # query 4 only to keys 5..7: nothing in the first tiles
    for tile in (1, 3, 8):
        r = tiled_attention(q, k, v, allowed, tile=tile, record=True)
        assert not torch.isnan(r.output).any()
        assert all(not torch.isnan(s.out).any() for s in r.steps)
        assert (r.output[..., 2, :] == 0).all()
        assert r.fully_masked[..., 2].all() and not r.fully_masked[..., [0, 1, 3, 4, 5]].any()
        ref = attend(q, k, v, allowed)
        assert torch.equal(r.fully_masked, ref.fully_masked)
        assert torch.allclose(r.output, ref.heads, atol=1e-6, rtol=0)


def test_t_equals_one_and_tile_limits():
    q, k, v = qkv(Tq=1, Tk=1)
    r = tiled_attention(q, k, v, tile=1)
    assert torch.allclose(r.output, v, atol=1e-12)  # one key: weight 1
    big = tiled_attention(q, k, v, tile=64)
    assert big.tile_k == 1 and big.notices and "clamped to 1" in big.notices[0]
    q, k, v = qkv(Tq=5, Tk=5)
    r = tiled_attention(q, k, v, tile=9, record=True)
    assert r.tile_k == 5 and len(r.steps) == 1
    assert torch.allclose(r.output, attend(q, k, v).heads, atol=1e-12)


@pytest.mark.parametrize("bad", [0, -3, 2.5, "4", None])
def test_bad_tile_raises_clear_error(bad):
    q, k, v = qkv(Tq=4, Tk=4)
    with pytest.raises(ValueError, match="tile"):
        tiled_attention(q, k, v, tile=bad)


def test_check_tile():
    assert check_tile(3, 10) == (3, None)
    n, note = check_tile(12, 10)
    assert n == 10 and "larger than T = 10" in note
    with pytest.raises(ValueError, match="at least 1"):
        check_tile(0, 10)


def test_steps_record_key_ranges_and_converge():
    q, k, v = qkv(B=1, H=1, Tq=5, Tk=10)
    r = tiled_attention(q, k, v, tile=4, record=True)
    assert [(s.k_start, s.k_end) for s in r.steps] == [(0, 4), (4, 8), (8, 10)]
    # after each step the partial output is softmax over the keys read so far
    for s in r.steps:
        part = attend(q, k[..., : s.k_end, :], v[..., : s.k_end, :]).heads
        assert torch.allclose(s.out, part, atol=1e-10)
        # running max = max of the scaled scores read so far
        sc = (q @ k[..., : s.k_end, :].transpose(-1, -2)) / math.sqrt(q.shape[-1])
        assert torch.allclose(s.m, sc.amax(-1), atol=1e-12)
        assert torch.allclose(s.l, torch.exp(sc - s.m[..., None]).sum(-1), atol=1e-10)
    assert torch.equal(r.steps[-1].out, r.output)


def test_bad_mask_shape_and_dtype():
    q, k, v = qkv(Tq=4, Tk=4)
    with pytest.raises(ValueError, match="bool"):
        tiled_attention(q, k, v, torch.ones(4, 4), tile=2)
    with pytest.raises(ValueError, match="broadcast"):
        tiled_attention(q, k, v, torch.ones(3, 4, dtype=torch.bool), tile=2)


def test_causal_flag_uses_the_engine_mask():
    q, k, v = qkv(Tq=9, Tk=9)
    got = tiled_attention(q, k, v, tile=2, causal=True).output
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(got, ref, atol=1e-6, rtol=0)


# ---- classroom/flash.py: what the tiled-attention page shows ------------------------------------------

def test_tile_walk_of_one_head_against_numpy():
    from classroom import flash
    q, k, v = (x[0, 0].numpy() for x in qkv(B=1, H=1, Tq=7, Tk=7, d=4, seed=3))
    allowed = np.tril(np.ones((7, 7), dtype=bool))
    plain = numpy_reference(q, k, v, allowed)
    walk = flash.tile_walk(q, k, v, allowed, scale=1 / math.sqrt(4), model_heads=plain + 0.5, tile=3)
    np.testing.assert_allclose(walk.plain, plain, atol=1e-12)
    np.testing.assert_allclose(walk.scaled, q @ k.T / 2, atol=1e-12)
    assert walk.diff_plain < 1e-12 and walk.diff_model == pytest.approx(0.5, abs=1e-12)
    steps = walk.tiled.steps
    assert [(s.k_start, s.k_end) for s in steps] == [(0, 3), (3, 6), (6, 7)]
    assert walk.gap_to_final(steps[-1]) == 0.0 and walk.gap_to_final(steps[0]) > 0.01
    # a query's max rises in a step exactly when a key of that tile beats every allowed key before it
    s = np.where(allowed, q @ k.T / 2, -np.inf)
    for st in steps[1:]:
        rose = s[:, st.k_start:st.k_end].max(1) > s[:, :st.k_start].max(1)
        np.testing.assert_array_equal(walk.rescaled(st), rose)


def test_memory_curve_fields():
    from classroom import flash
    mem = flash.memory_curve(8, lengths=(16, 64), d=8)
    np.testing.assert_array_equal(mem.lengths, [16, 64])
    np.testing.assert_allclose(mem.full_scores_mb, [16 * 16 * 4 / 2**20, 64 * 64 * 4 / 2**20])
    np.testing.assert_allclose(mem.tile_scores_mb, [16 * 8 * 4 / 2**20, 64 * 8 * 4 / 2**20])
    assert (mem.plain_mb >= mem.full_scores_mb).all()  # plain attention holds at least its T x T scores
    assert (mem.max_diff < 1e-5).all() and mem.tile == 8
