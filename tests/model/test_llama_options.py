"""The Llama-style options of the one ModelConfig/Transformer (issue 18): RMSNorm, rotary positions,
grouped-query attention, SwiGLU. Small random models, checked against the textbook formulas and
against HF's conventions (rotate_half pairs (i, i + d/2), repeat_kv = repeat_interleave)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from model import ModelConfig, Transformer
from model.config import param_count
from model.layers import apply_rope, rope_tables, rotate_half
from model.trace import LayerNormTrace, NormTrace
from tests.model.norm_params import nontrivial_norms

LLAMA = dict(vocab_size=50, d_model=48, n_heads=6, n_kv_heads=2, n_layers=2, d_ff=64, max_len=64,
             pos_encoding="rope", rope_theta=1000.0, norm_kind="rmsnorm", activation="swiglu",
             bias=False, tie_weights=True)


@pytest.fixture(scope="module")
def llama():
    return nontrivial_norms(Transformer(ModelConfig(**LLAMA), seed=3), seed=3)  # gamma != 1


def _ids(T=12, B=1, seed=0):
    return torch.randint(0, 50, (B, T), generator=torch.Generator().manual_seed(seed))


def test_param_count_matches_the_allocated_model(llama):
    assert param_count(llama.cfg) == llama.num_parameters()
    for extra in ({}, {"bias": True}, {"n_kv_heads": None}, {"norm_kind": "layernorm"},
                  {"activation": "gelu"}, {"tie_weights": False}, {"pos_encoding": "learned"}):
        cfg = ModelConfig(**{**LLAMA, **extra})
        assert param_count(cfg) == Transformer(cfg, seed=0).num_parameters(), extra


def test_invalid_options_say_what_to_fix():
    with pytest.raises(ValueError, match="n_kv_heads"):
        ModelConfig(**{**LLAMA, "n_kv_heads": 4})  # 6 % 4
    with pytest.raises(ValueError, match="norm_kind"):
        ModelConfig(**{**LLAMA, "norm_kind": "batchnorm"})
    with pytest.raises(ValueError, match="rope_theta"):
        ModelConfig(**{**LLAMA, "rope_theta": 0.5})
    with pytest.raises(ValueError, match="even"):
        ModelConfig(**{**LLAMA, "d_model": 18, "n_heads": 6, "n_kv_heads": None})  # d_k = 3
    cfg = ModelConfig.from_dict(ModelConfig(**LLAMA).to_dict())
    assert cfg == ModelConfig(**LLAMA)


def test_rmsnorm_trace_is_the_formula(llama):
    tr = llama.trace(_ids())
    ln = tr.layers[0].ln1
    assert isinstance(ln, NormTrace) and not isinstance(ln, LayerNormTrace) and ln.kind == "rmsnorm"
    x = ln.input
    ms = (x * x).mean(-1, keepdim=True)
    assert ln.mean_sq.shape == (1, 12, 1)
    torch.testing.assert_close(ln.mean_sq, ms)
    torch.testing.assert_close(ln.normalized, x / torch.sqrt(ms + llama.cfg.ln_eps))
    gamma = llama.blocks[0].ln1.weight  # the module's parameter, not what the trace says it used
    assert float((gamma.detach() - 1).abs().max()) > 0.1
    torch.testing.assert_close(ln.output, x / torch.sqrt(ms + llama.cfg.ln_eps) * gamma)
    assert ln.gamma is gamma
    assert isinstance(tr.final_ln, NormTrace)


def test_every_rmsnorm_matches_torchs_rms_norm(llama):
    """Each norm of the model (ln1, ln2 of every block, the final one) against torch's own
    F.rms_norm with the module's gamma, on the input the trace recorded."""
    tr = llama.trace(_ids(B=2))
    pairs = [(lt.ln1, blk.ln1) for lt, blk in zip(tr.layers, llama.blocks)]
    pairs += [(lt.ln2, blk.ln2) for lt, blk in zip(tr.layers, llama.blocks)]
    pairs.append((tr.final_ln, llama.ln_f))
    for rec, mod in pairs:
        want = F.rms_norm(rec.input, (llama.cfg.d_model,), mod.weight, llama.cfg.ln_eps)
        torch.testing.assert_close(rec.output, want, atol=1e-6, rtol=1e-5)


def reference_llama_logits(m: Transformer, ids: torch.Tensor) -> torch.Tensor:
    """The whole Llama-style forward written again here from the model's parameters, none of the
    engine's code: RMSNorm by its formula, rotary positions as complex multiplication (pairs
    (i, i + d/2)), grouped-query attention through torch's SDPA (enable_gqa), SwiGLU, tied output."""
    cfg = m.cfg
    B, T = ids.shape
    H, Hkv, dk, eps = cfg.n_heads, cfg.kv_heads, cfg.d_k, cfg.ln_eps

    def rms(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w

    freq = cfg.rope_theta ** (-torch.arange(0, dk, 2, dtype=torch.float64) / dk)  # (dk/2,)
    turn = torch.polar(torch.ones(T, dk // 2, dtype=torch.float64),
                       torch.arange(T, dtype=torch.float64)[:, None] * freq)  # (T, dk/2) e^{i pos freq}

    def rotate(x):  # (B, h, T, dk)
        z = torch.complex(x[..., : dk // 2].double(), x[..., dk // 2:].double()) * turn
        return torch.cat([z.real, z.imag], -1).float()

    x = m.tok_emb.weight[ids]  # (B, T, D)
    for blk in m.blocks:
        a = blk.attn
        h = rms(x, blk.ln1.weight)
        q = rotate((h @ a.q_proj.weight.T).view(B, T, H, dk).transpose(1, 2))
        k = rotate((h @ a.k_proj.weight.T).view(B, T, Hkv, dk).transpose(1, 2))
        v = (h @ a.v_proj.weight.T).view(B, T, Hkv, dk).transpose(1, 2)
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (B, H, T, dk)
        x = x + z.transpose(1, 2).reshape(B, T, H * dk) @ a.o_proj.weight.T
        h = rms(x, blk.ln2.weight)
        f = blk.ffn
        x = x + (F.silu(h @ f.gate.weight.T) * (h @ f.fc1.weight.T)) @ f.fc2.weight.T
    return rms(x, m.ln_f.weight) @ m.tok_emb.weight.T  # (B, T, V)


def test_whole_model_matches_a_reference_written_here(llama):
    ids = _ids(B=2)
    with torch.no_grad():
        want = reference_llama_logits(llama, ids)
    # float32 through 2 blocks against a reference with float64 rotations: 1.1e-5 at most here
    # (|logits| reach ~50); a norm without its gamma is off by ~12
    torch.testing.assert_close(llama.trace(ids).logits, want, atol=5e-5, rtol=1e-6)
    torch.testing.assert_close(llama(ids), want, atol=5e-5, rtol=1e-6)


def test_swiglu_trace(llama):
    tr = llama.trace(_ids())
    f = tr.layers[1].ffn
    blk = llama.blocks[1].ffn
    assert f.gate.shape == f.up.shape == f.hidden_post.shape == (1, 12, 64)
    torch.testing.assert_close(f.gate, f.input @ blk.gate.weight.T)
    torch.testing.assert_close(f.up, f.input @ blk.fc1.weight.T)
    torch.testing.assert_close(f.hidden_post, F.silu(f.gate) * f.up)
    assert f.hidden_pre is f.gate
    torch.testing.assert_close(f.output, f.hidden_post @ blk.fc2.weight.T)


def test_gqa_shapes_and_head_mapping(llama):
    tr = llama.trace(_ids(B=2))
    a = tr.layers[0].attn
    assert a.q.shape == (2, 6, 12, 8)
    assert a.k.shape == a.v.shape == (2, 2, 12, 8)  # K/V keep their own head count
    assert a.weights.shape == a.scores.shape == (2, 6, 12, 12)  # per query head
    assert a.kv_head.tolist() == [0, 0, 0, 1, 1, 1]  # repeat_interleave (HF repeat_kv), not tile
    for h in range(6):  # each query head's scores use the K head kv_head[h]
        torch.testing.assert_close(a.scores[:, h], a.q[:, h] @ a.k[:, a.kv_head[h]].transpose(-1, -2))
        torch.testing.assert_close(a.heads[:, h], a.weights[:, h] @ a.v[:, a.kv_head[h]])


def test_rotary_is_hf_rotate_half_and_relative(llama):
    tr = llama.trace(_ids())
    a = tr.layers[0].attn
    assert a.q_pre_rope.shape == a.q.shape and a.k_pre_rope.shape == a.k.shape
    # by hand: pair (i, i + d/2) turns by angle pos * theta^(-2i/d)
    d, theta = 8, 1000.0
    pos = torch.arange(12, dtype=torch.float64)
    ang = pos[:, None] * theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (T, d/2)
    x = a.q_pre_rope.double()
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    want = torch.cat([x1 * ang.cos() - x2 * ang.sin(), x2 * ang.cos() + x1 * ang.sin()], dim=-1)
    torch.testing.assert_close(a.q.double(), want, atol=1e-5, rtol=1e-5)
    # rotation keeps lengths; position 0 is not rotated
    torch.testing.assert_close(a.q.norm(dim=-1), a.q_pre_rope.norm(dim=-1))
    torch.testing.assert_close(a.k[..., 0, :], a.k_pre_rope[..., 0, :])
    # the score of q at m and k at n depends on m - n only
    cos, sin = rope_tables(torch.arange(40), d, theta)
    q, k = torch.randn(d), torch.randn(d)
    s = [(apply_rope(q, cos[m], sin[m]) @ apply_rope(k, cos[m - 3], sin[m - 3])).item() for m in range(3, 40)]
    assert max(s) - min(s) < 1e-4
    assert torch.equal(rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0])), torch.tensor([-3.0, -4.0, 1.0, 2.0]))


def test_rope_model_has_no_position_vectors(llama):
    tr = llama.trace(_ids())
    assert tr.embeddings.position.shape == (12, 48) and not tr.embeddings.position.any()
    assert torch.equal(tr.embeddings.sum, tr.embeddings.token)
    assert tr.positions.tolist() == list(range(12)) and tr.past_length is None
    # positions matter through the rotation: a permuted prompt changes the last row
    ids = _ids()
    a = llama.trace(ids).logits[0, -1]
    b = llama.trace(torch.cat([ids[:, 1:2], ids[:, :1], ids[:, 2:]], 1)).logits[0, -1]
    assert not torch.allclose(a, b)


def test_forward_equals_trace_and_numpy(llama):
    ids = _ids(B=2)
    tr = llama.trace(ids)
    assert torch.equal(llama(ids), tr.logits)
    arr = tr.numpy()
    assert arr.layers[0].attn.kv_head.tolist() == [0, 0, 0, 1, 1, 1]
    assert arr.layers[0].ln1.mean_sq.shape == (2, 12, 1)
    torch.testing.assert_close(tr.probs.sum(-1), torch.ones(2, 12))


def test_seq2seq_refuses_rope_but_takes_the_other_options():
    from model import Seq2SeqTransformer

    with pytest.raises(ValueError, match="rotary"):
        Seq2SeqTransformer(ModelConfig(**LLAMA))
    s2s = Seq2SeqTransformer(ModelConfig(**{**LLAMA, "pos_encoding": "sinusoidal"}), seed=0)
    st = s2s.trace(_ids(T=5), _ids(T=7))
    assert st.decoder.layers[0].cross_attn.k.shape == (1, 2, 5, 8)
    assert not math.isnan(float(st.logits.sum()))
