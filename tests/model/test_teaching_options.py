"""Issue 22's engine options: d_v != d_k, residual / layer norm switches, pos_encoding="none".
Each is checked against an independent reference (torch ops written out, or the default model)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from model.config import ModelConfig, param_breakdown, param_count
from model.layers import MultiHeadAttention
from model.transformer import Transformer


def small(**kw) -> ModelConfig:
    base = dict(vocab_size=20, d_model=16, n_heads=4, n_layers=2, max_len=16)
    return ModelConfig(**{**base, **kw})


def reference_mha(mha: MultiHeadAttention, x: torch.Tensor, H: int, causal: bool) -> torch.Tensor:
    """Multi-head attention written out with plain torch ops, per head, d_v read from W_V's shape."""
    B, T, D = x.shape
    Wq, Wk, Wv, Wo = (getattr(mha, n).weight for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
    bq, bk, bv, bo = (getattr(mha, n).bias for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
    dk, dv = Wq.shape[0] // H, Wv.shape[0] // H
    outs = []
    for h in range(H):
        q = x @ Wq[h * dk:(h + 1) * dk].T + bq[h * dk:(h + 1) * dk]  # (B, T, dk)
        k = x @ Wk[h * dk:(h + 1) * dk].T + bk[h * dk:(h + 1) * dk]
        v = x @ Wv[h * dv:(h + 1) * dv].T + bv[h * dv:(h + 1) * dv]  # (B, T, dv)
        s = torch.einsum("bid,bjd->bij", q, k) / math.sqrt(dk)
        if causal:
            s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        outs.append(torch.einsum("bij,bjd->bid", torch.exp(s - s.amax(-1, keepdim=True))
                                 / torch.exp(s - s.amax(-1, keepdim=True)).sum(-1, keepdim=True), v))
    return torch.cat(outs, dim=-1) @ Wo.T + bo  # (B, T, D)


@pytest.mark.parametrize("d_v", [3, 8, 12])
@pytest.mark.parametrize("causal", [True, False])
def test_mha_with_dv_different_from_dk_matches_a_written_out_reference(d_v, causal):
    cfg = small(d_v=d_v)
    model = Transformer(cfg, seed=1)
    mha = model.blocks[0].attn
    x = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(3))
    allowed = torch.ones(7, 7, dtype=torch.bool).tril() if causal else None
    out, tr = mha(x, allowed=allowed)
    assert tr.q.shape == (2, 4, 7, 4) and tr.k.shape == (2, 4, 7, 4)
    assert tr.v.shape == (2, 4, 7, d_v) and tr.heads.shape == (2, 4, 7, d_v)
    assert tr.concat.shape == (2, 7, 4 * d_v) and tr.output.shape == (2, 7, 16)
    torch.testing.assert_close(out, reference_mha(mha, x, 4, causal), rtol=1e-5, atol=1e-5)


def test_dv_param_count_and_trace():
    cfg = small(d_v=6)
    model = Transformer(cfg, seed=0)
    assert param_count(cfg) == model.num_parameters()
    D, HV = 16, 24
    assert param_breakdown(cfg)["attention"] == 2 * (2 * (D * D + D) + D * HV + HV + HV * D + D)
    tr = model.trace(torch.tensor([[1, 2, 3]]))
    assert tr.layers[1].attn.heads.shape == (1, 4, 3, 6)
    assert cfg.d_value == 6 and small().d_value == 4 == small(d_v=0).d_value


def test_defaults_keep_models_bit_identical():
    """The new switches at their defaults change nothing: same parameters, same logits, and the
    state dict has exactly today's names and shapes."""
    cfg = small()
    explicit = small(d_v=4, residual=True, use_norm=True)
    a, b = Transformer(cfg, seed=5), Transformer(explicit, seed=5)
    ids = torch.tensor([[1, 5, 7, 2, 9]])
    assert torch.equal(a(ids), b(ids))
    assert {k: v.shape for k, v in a.state_dict().items()} == {k: v.shape for k, v in b.state_dict().items()}


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_no_residual_and_no_norm_compute_the_written_out_block(norm):
    """Block without skips / without LN equals the same arithmetic written with torch ops."""
    for residual, use_norm in ((False, True), (True, False), (False, False)):
        cfg = small(norm=norm, residual=residual, use_norm=use_norm, n_layers=1)
        model = Transformer(cfg, seed=2)
        blk = model.blocks[0]
        x = torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(0))
        allowed = torch.ones(5, 5, dtype=torch.bool).tril()

        def ln(mod, z):
            return F.layer_norm(z, (16,), mod.weight, mod.bias, 1e-5) if use_norm else z

        def attn(z):
            return blk.attn(z, allowed=allowed)[0]

        def ffn(z):
            return blk.ffn.fc2(F.gelu(blk.ffn.fc1(z)))

        skip = 1.0 if residual else 0.0
        if norm == "pre":
            mid = skip * x + attn(ln(blk.ln1, x))
            ref = skip * mid + ffn(ln(blk.ln2, mid))
        else:
            mid = ln(blk.ln1, skip * x + attn(x))
            ref = ln(blk.ln2, skip * mid + ffn(mid))
        out, bt = blk(x, allowed)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        assert (bt.ln1 is None) == (not use_norm)
        if not use_norm:
            assert model.ln_f is None and param_breakdown(cfg)["layer_norm"] == 0
        assert param_count(cfg) == model.num_parameters()


def test_final_norm_needs_norms():
    with pytest.raises(ValueError, match="use_norm"):
        small(use_norm=False, final_norm=True)
    with pytest.raises(ValueError, match="d_v"):
        small(d_v=-1)


def test_pos_encoding_none_adds_nothing():
    cfg = small(pos_encoding="none")
    model = Transformer(cfg, seed=0)
    ids = torch.tensor([[3, 4, 5, 6]])
    tr = model.trace(ids)
    assert torch.equal(tr.embeddings.position, torch.zeros(4, 16))
    assert torch.equal(tr.embeddings.sum, model.tok_emb.weight[ids])
    assert param_breakdown(cfg)["position_embedding"] == 0 == param_count(cfg) - model.num_parameters()


def test_vaswani_base_preset_matches_the_paper():
    from model.config import PRESETS, valid_heads
    v = PRESETS["vaswani-base"]
    assert (v.d_model, v.n_heads, v.d_k, v.d_value, v.d_ff, v.norm, v.activation, v.pos_encoding) == \
        (512, 8, 64, 64, 2048, "post", "relu", "sinusoidal")
    assert 8 in valid_heads(512)


def test_grouped_query_attention_with_a_value_width_of_its_own():
    """n_kv_heads and d_v together (two options from two families): V has H_kv heads of d_v, every
    query head reads its group's K/V, the parameter count matches the allocated model."""
    import torch

    from model.config import ModelConfig, param_count
    from model.transformer import Transformer

    cfg = ModelConfig(vocab_size=20, d_model=16, n_heads=4, n_kv_heads=2, d_v=6, n_layers=1, max_len=8)
    m = Transformer(cfg, seed=0)
    assert param_count(cfg) == m.num_parameters()
    a = m.trace(torch.tensor([[1, 2, 3, 4, 5]])).layers[0].attn
    assert a.k.shape == (1, 2, 5, 4) and a.v.shape == (1, 2, 5, 6) and a.heads.shape == (1, 4, 5, 6)
    assert a.concat.shape == (1, 5, 24) and a.kv_head.tolist() == [0, 0, 1, 1]
    w = torch.softmax((a.q @ a.k.repeat_interleave(2, dim=1).transpose(-2, -1)) / 2.0
                      + torch.full((5, 5), float("-inf")).triu(1), dim=-1)
    torch.testing.assert_close(a.heads, w @ a.v.repeat_interleave(2, dim=1), rtol=1e-5, atol=1e-6)
