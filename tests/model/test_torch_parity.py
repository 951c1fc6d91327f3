"""Parity of the traced engine with PyTorch's own implementations (to 1e-5).

Each test copies our weights into the torch module (or the reverse) and compares every output
that both sides expose: attention weights, attention output, LayerNorm statistics, block output.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from model import ModelConfig
from model.attention import attend, causal_allowed, combine, padding_allowed
from model.layers import Block, LayerNorm, MultiHeadAttention

ATOL = 1e-5


def close(a: torch.Tensor, b: torch.Tensor, atol: float = ATOL) -> None:
    """Within atol of the reference's scale (its largest |value|, at least 1): float32 on any CPU."""
    assert a.shape == b.shape, (a.shape, b.shape)
    err = (a - b).abs().max().item()
    scale = max(1.0, b.abs().max().item())
    assert err <= atol * scale, f"max abs difference {err:.3g} > {atol} x the scale {scale:.3g}"


@pytest.fixture
def qkv():
    g = torch.Generator().manual_seed(1)
    B, H, T, d = 2, 3, 6, 8
    return tuple(torch.randn(B, H, T, d, generator=g) for _ in range(3))


PAD = torch.tensor([[True, True, True, True, True, True],
                    [True, True, True, True, False, False]])  # (B, T) True = real token


def future_keys(T: int) -> torch.Tensor:
    """(T, T) bool, True = key j lies after query i (must be hidden). Built here, independently of
    model.attention.causal_allowed, so a wrong causal mask in the engine cannot also be the
    reference: torch's convention for a boolean attn_mask/src_mask is True = not allowed."""
    return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)


def test_reference_causal_mask_is_torchs_own():
    # the mask the references below receive is the one torch itself builds for causal attention
    assert torch.equal(future_keys(6),
                       nn.Transformer.generate_square_subsequent_mask(6) == float("-inf"))


# ---------------------------------------------------------------- attend vs SDPA

def test_attend_matches_sdpa_no_mask(qkv):
    q, k, v = qkv
    tr = attend(q, k, v)
    close(tr.heads, F.scaled_dot_product_attention(q, k, v))
    assert not tr.fully_masked.any()


def test_attend_matches_sdpa_causal(qkv):
    q, k, v = qkv
    tr = attend(q, k, v, allowed=causal_allowed(q.shape[-2]))
    close(tr.heads, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_attend_matches_sdpa_padding_bool_mask(qkv):
    q, k, v = qkv
    allowed = padding_allowed(PAD)  # (B, 1, T, T)
    # SDPA's boolean attn_mask uses the same convention: True = take part in attention.
    close(attend(q, k, v, allowed=allowed).heads,
          F.scaled_dot_product_attention(q, k, v, attn_mask=allowed))
    both = combine(causal_allowed(q.shape[-2]), allowed)
    ref_both = ~future_keys(q.shape[-2]) & PAD[:, None, None, :]  # built without the engine
    close(attend(q, k, v, allowed=both).heads,
          F.scaled_dot_product_attention(q, k, v, attn_mask=ref_both))


def test_attend_custom_scale_matches_sdpa(qkv):
    q, k, v = qkv
    close(attend(q, k, v, scale=0.37).heads, F.scaled_dot_product_attention(q, k, v, scale=0.37))


def test_attend_weights_match_manual_softmax(qkv):
    q, k, v = qkv
    tr = attend(q, k, v)
    ref = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    close(tr.weights, ref)


def test_fully_masked_row_is_zero_and_flagged_others_match_numpy():
    """A query row with nothing allowed: all-zero weights and output, flagged; never NaN. The other
    rows match a softmax written here in numpy (float64), masked keys getting exactly zero."""
    g = torch.Generator().manual_seed(11)
    B, H, T, d = 2, 3, 4, 5
    q, k, v = (torch.randn(B, H, T, d, generator=g) for _ in range(3))
    allowed = torch.tensor([[True, False, True, False],
                            [False, False, False, False],  # query 1 may attend to nothing
                            [True, True, True, True],
                            [False, True, False, False]])
    tr = attend(q, k, v, allowed=allowed)

    qn, kn, vn, ok = (t.numpy().astype(np.float64) for t in (q, k, v, allowed))
    scores = qn @ np.swapaxes(kn, -1, -2) / np.sqrt(d)  # (B, H, T, T)
    expected = np.zeros_like(scores)
    for i in range(T):
        keys = np.flatnonzero(ok[i])
        if keys.size:
            e = np.exp(scores[..., i, keys] - scores[..., i, keys].max(-1, keepdims=True))
            expected[..., i, keys] = e / e.sum(-1, keepdims=True)
    w = tr.weights.numpy()
    assert not np.isnan(w).any() and not np.isnan(tr.heads.numpy()).any()
    np.testing.assert_allclose(w, expected, atol=1e-6, rtol=0)
    np.testing.assert_allclose(tr.heads.numpy(), expected @ vn, atol=1e-5, rtol=0)
    assert np.all(w[:, :, 1] == 0) and np.all(tr.heads.numpy()[:, :, 1] == 0)
    assert tr.fully_masked.shape == (B, H, T)
    assert np.array_equal(tr.fully_masked.numpy(),
                          np.broadcast_to(np.array([False, True, False, False]), (B, H, T)))


# ---------------------------------------------------------------- MultiHeadAttention vs nn.MultiheadAttention

def _mha_pair(D: int = 16, H: int = 4, seed: int = 0):
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=10, d_model=D, n_heads=H, n_layers=1)
    ours = MultiHeadAttention(cfg).eval()
    with torch.no_grad():  # non-zero biases so a bias bug would show
        for p in ours.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    ref = nn.MultiheadAttention(D, H, bias=True, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.o_proj.weight)
        ref.out_proj.bias.copy_(ours.o_proj.bias)
    return ours, ref


def test_mha_matches_torch_no_mask():
    ours, ref = _mha_pair()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        out, tr = ours(x)
        r_out, r_w = ref(x, x, x, need_weights=True, average_attn_weights=False)
    close(out, r_out)
    close(tr.weights, r_w)  # (B, H, T, T)
    close(tr.output, r_out)


def test_mha_matches_torch_key_padding_mask():
    ours, ref = _mha_pair(seed=3)
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        out, tr = ours(x, allowed=padding_allowed(PAD))
        # nn.MultiheadAttention's key_padding_mask is the opposite: True = ignore this key
        r_out, r_w = ref(x, x, x, key_padding_mask=~PAD, need_weights=True, average_attn_weights=False)
    close(out, r_out)
    close(tr.weights, r_w)
    assert tr.weights[1, :, :, 4:].abs().max() == 0


def test_mha_matches_torch_causal():
    ours, ref = _mha_pair(seed=4)
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        out, tr = ours(x, allowed=causal_allowed(6))
        r_out, r_w = ref(x, x, x, attn_mask=future_keys(6), need_weights=True,
                         average_attn_weights=False)
    close(out, r_out)
    close(tr.weights, r_w)


def test_mha_cross_attention_shapes_and_values():
    ours, ref = _mha_pair(seed=5)
    xq, xkv = torch.randn(2, 3, 16), torch.randn(2, 7, 16)
    with torch.no_grad():
        out, tr = ours(xq, xkv)
        r_out, r_w = ref(xq, xkv, xkv, need_weights=True, average_attn_weights=False)
    assert tr.weights.shape == (2, 4, 3, 7)
    close(out, r_out)
    close(tr.weights, r_w)


# ---------------------------------------------------------------- LayerNorm

def test_layernorm_trace_matches_torch():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 12) * 4 + 2
    ours = LayerNorm(12, eps=1e-5)
    ref = nn.LayerNorm(12, eps=1e-5)
    with torch.no_grad():
        g, b = torch.randn(12), torch.randn(12)
        ours.weight.copy_(g), ours.bias.copy_(b), ref.weight.copy_(g), ref.bias.copy_(b)
        out, tr = ours(x)
        close(out, ref(x))
        close(tr.output, F.layer_norm(x, (12,), g, b, eps=1e-5))
        close(tr.normalized, F.layer_norm(x, (12,), eps=1e-5))
    close(tr.mean, x.mean(-1, keepdim=True))
    close(tr.var, ((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True), atol=1e-4)
    # biased (divide by D), not unbiased (divide by D-1): the two differ by a factor 12/11 here
    close(tr.var, torch.var_mean(x, dim=-1, keepdim=True, correction=0)[0], atol=1e-4)
    assert not torch.allclose(tr.var, x.var(-1, keepdim=True, unbiased=True), atol=1e-3)
    assert tr.mean.shape == (3, 5, 1) and tr.var.shape == (3, 5, 1)


# ---------------------------------------------------------------- Block vs nn.TransformerEncoderLayer

def _block_pair(norm: str, activation: str, D: int = 16, H: int = 4, F_: int = 24, seed: int = 0):
    cfg = ModelConfig(vocab_size=10, d_model=D, n_heads=H, n_layers=1, d_ff=F_, norm=norm,
                      activation=activation)
    torch.manual_seed(seed)
    ours = Block(cfg).eval()
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    ref = nn.TransformerEncoderLayer(D, H, dim_feedforward=F_, dropout=0.0, activation=activation,
                                     batch_first=True, norm_first=(norm == "pre")).eval()
    with torch.no_grad():
        a = ours.attn
        ref.self_attn.in_proj_weight.copy_(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
        ref.self_attn.in_proj_bias.copy_(torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]))
        ref.self_attn.out_proj.weight.copy_(a.o_proj.weight)
        ref.self_attn.out_proj.bias.copy_(a.o_proj.bias)
        ref.linear1.weight.copy_(ours.ffn.fc1.weight), ref.linear1.bias.copy_(ours.ffn.fc1.bias)
        ref.linear2.weight.copy_(ours.ffn.fc2.weight), ref.linear2.bias.copy_(ours.ffn.fc2.bias)
        ref.norm1.weight.copy_(ours.ln1.weight), ref.norm1.bias.copy_(ours.ln1.bias)
        ref.norm2.weight.copy_(ours.ln2.weight), ref.norm2.bias.copy_(ours.ln2.bias)
    return ours, ref


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_block_matches_transformer_encoder_layer(norm, activation):
    ours, ref = _block_pair(norm, activation)
    x = torch.randn(2, 6, 16)
    # grad enabled + params requiring grad keeps torch on its reference (non-fast) path
    y_plain, _ = ours(x, None)
    close(y_plain, ref(x))
    y_causal, tr = ours(x, causal_allowed(6))
    close(y_causal, ref(x, src_mask=future_keys(6)))
    y_pad, tr_pad = ours(x, padding_allowed(PAD))
    close(y_pad, ref(x, src_key_padding_mask=~PAD))
    both = combine(causal_allowed(6), padding_allowed(PAD))
    y_both, _ = ours(x, both)
    close(y_both, ref(x, src_mask=future_keys(6), src_key_padding_mask=~PAD))
    # the trace's pieces line up with the block output
    close(tr.resid_out, y_causal)
    assert not torch.allclose(y_plain, y_causal, atol=1e-3)  # the mask mattered
