"""Invariants every trace must satisfy, on random tiny models of every option combination."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model import ModelConfig, Transformer
from model.trace import flat_arrays

COMBOS = list(itertools.product(["pre", "post"], ["learned", "sinusoidal"], ["relu", "gelu"],
                                [True, False]))


def make(norm="pre", pos="sinusoidal", act="gelu", tie=True, seed=0, **kw):
    base = dict(vocab_size=23, d_model=16, n_heads=4, n_layers=2, d_ff=32, max_len=12)
    base.update(kw)
    cfg = ModelConfig(norm=norm, pos_encoding=pos, activation=act, tie_weights=tie, **base)
    return Transformer(cfg, seed=seed)


def ids_and_mask(vocab=23, B=2, T=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (B, T), generator=g)
    kpm = torch.ones(B, T, dtype=torch.bool)
    kpm[1, 4:] = False  # second sequence: 4 real tokens, 3 pads
    return ids, kpm


@pytest.mark.parametrize("norm,pos,act,tie", COMBOS)
def test_trace_invariants(norm, pos, act, tie):
    model = make(norm, pos, act, tie, seed=7)
    ids, kpm = ids_and_mask()
    tr = model.trace(ids, causal=True, key_padding_mask=kpm)
    B, T = ids.shape
    H, dk = model.cfg.n_heads, model.cfg.d_k

    # no NaN anywhere in the whole trace (masked holds -inf by design; nothing else may be inf)
    flat = flat_arrays(tr)
    assert len(flat) > 30
    for name, arr in flat.items():
        if arr.dtype.kind == "f":
            assert not np.isnan(arr).any(), f"NaN in {name}"
            if not name.endswith(".masked"):
                assert np.isfinite(arr).all(), f"inf in {name}"

    assert tr.logits.shape == (B, T, model.cfg.vocab_size)
    torch.testing.assert_close(tr.probs.sum(-1), torch.ones(B, T), atol=1e-5, rtol=0)
    torch.testing.assert_close(tr.embeddings.sum, tr.embeddings.token + tr.embeddings.position)
    torch.testing.assert_close(tr.layers[0].input, tr.embeddings.sum)
    causal = torch.ones(T, T).tril().bool()
    for l, lt in enumerate(tr.layers):
        a = lt.attn
        assert a.weights.shape == (B, H, T, T) and a.q.shape == (B, H, T, dk)
        # rows sum to 1 (no row is fully masked here: key 0 is real and always allowed)
        torch.testing.assert_close(a.weights.sum(-1), torch.ones(B, H, T), atol=1e-5, rtol=0)
        assert not a.fully_masked.any()
        # zero above the diagonal, zero on padded keys
        assert a.weights[..., ~causal].abs().max() == 0
        assert a.weights[1, :, :, 4:].abs().max() == 0
        assert (a.weights[0, :, :, :][..., causal] > 0).all()  # everything allowed gets weight
        # scaled == scores * scale; scale is 1/sqrt(d_k)
        assert a.scale == pytest.approx(1 / math.sqrt(dk))
        torch.testing.assert_close(a.scaled, a.scores * a.scale)
        torch.testing.assert_close(a.scores, a.q @ a.k.transpose(-2, -1))
        # masked: -inf exactly where not allowed, scaled elsewhere
        allowed = a.allowed.expand(B, H, T, T)
        assert torch.isneginf(a.masked[~allowed]).all()
        torch.testing.assert_close(a.masked[allowed], a.scaled[allowed])
        torch.testing.assert_close(a.weights, torch.softmax(a.masked, dim=-1))
        # heads == weights @ v; concat layout (B, T, H*dk) with head h in columns h*dk:(h+1)*dk
        torch.testing.assert_close(a.heads, a.weights @ a.v)
        assert a.concat.shape == (B, T, H * dk)
        for h in range(H):
            torch.testing.assert_close(a.concat[:, :, h * dk:(h + 1) * dk], a.heads[:, h])
        # output == concat @ W_O^T + b
        o = model.blocks[l].attn.o_proj
        torch.testing.assert_close(a.output, a.concat @ o.weight.T + o.bias)
        # q/k/v are the projections of what the attention sublayer saw, split per head
        seen = lt.ln1.output if norm == "pre" else lt.input
        qp = model.blocks[l].attn.q_proj
        torch.testing.assert_close(a.q, (seen @ qp.weight.T + qp.bias).view(B, T, H, dk).transpose(1, 2))
        # LayerNorm trace: F.layer_norm statistics
        for ln in (lt.ln1, lt.ln2):
            torch.testing.assert_close(ln.output, F.layer_norm(ln.input, (model.cfg.d_model,)), atol=1e-5, rtol=0)
            torch.testing.assert_close(ln.var, ln.input.var(-1, keepdim=True, unbiased=False))
        # residual wiring
        if norm == "pre":
            torch.testing.assert_close(lt.resid_mid, lt.input + a.output)
            torch.testing.assert_close(lt.resid_out, lt.resid_mid + lt.ffn.output)
        else:
            torch.testing.assert_close(lt.ln1.input, lt.input + a.output)
            torch.testing.assert_close(lt.ln2.input, lt.resid_mid + lt.ffn.output)
        act_fn = F.relu if act == "relu" else F.gelu
        torch.testing.assert_close(lt.ffn.hidden_post, act_fn(lt.ffn.hidden_pre))
    if norm == "pre":
        assert tr.final_ln is not None
        torch.testing.assert_close(tr.final, tr.final_ln.output)
    else:
        assert tr.final_ln is None
    torch.testing.assert_close(tr.logits, tr.final @ model.output_matrix.T)
    if tie:
        assert model.output_matrix is model.tok_emb.weight
    else:
        assert not torch.equal(model.output_matrix, model.tok_emb.weight)
    # forward() is the same arithmetic with nothing recorded
    with torch.no_grad():
        torch.testing.assert_close(model(ids, key_padding_mask=kpm), tr.logits, atol=0, rtol=0)


def test_forward_equals_trace_logits_bidirectional():
    model = make(seed=3)
    ids, _ = ids_and_mask()
    with torch.no_grad():
        assert torch.equal(model(ids, causal=False), model.trace(ids, causal=False).logits)
        assert torch.equal(model(ids), model.trace(ids).logits)


def test_fully_masked_rows_are_zero_and_flagged():
    model = make(seed=1)
    ids, kpm = ids_and_mask()
    tr = model.trace(ids, causal=True, key_padding_mask=kpm, mask_padded_queries=True)
    for lt in tr.layers:
        a = lt.attn
        fm = a.fully_masked.expand(2, 4, 7)
        # exactly the padded query rows of sequence 1 are fully masked
        expect = torch.zeros(2, 4, 7, dtype=torch.bool)
        expect[1, :, 4:] = True
        assert torch.equal(fm, expect)
        assert a.weights[1, :, 4:].abs().max() == 0  # all-zero rows, not NaN, not uniform
        assert a.heads[1, :, 4:].abs().max() == 0
        row_sums = a.weights.sum(-1)
        torch.testing.assert_close(row_sums[~expect], torch.ones(int((~expect).sum())))
        assert not torch.isnan(a.weights).any()
    assert not any(np.isnan(v).any() for v in flat_arrays(tr).values() if v.dtype.kind == "f")


def test_fully_masked_flag_has_batch_and_head_axes_for_causal_only():
    model = make(seed=1)
    tr = model.trace(torch.tensor([[1, 2, 3]]), causal=True)
    assert tr.layers[0].attn.fully_masked.shape == (1, 4, 3)
    assert not tr.layers[0].attn.fully_masked.any()


def test_mask_is_an_argument_not_a_property_of_the_weights():
    model = make(seed=5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.tensor([[3, 1, 4, 1, 5, 9]])
    causal = model.trace(ids, causal=True)
    bidir = model.trace(ids, causal=False)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    w_c, w_b = causal.layers[0].attn.weights, bidir.layers[0].attn.weights
    assert not torch.allclose(w_c, w_b, atol=1e-4)
    # the first query of a causal model can only see itself
    torch.testing.assert_close(w_c[0, :, 0], torch.tensor([1.0, 0, 0, 0, 0, 0]).expand(4, 6))
    assert (w_b[0, :, 0] > 0).all()
    # same q, k (layer 0 sees the same input): only the mask differs
    torch.testing.assert_close(causal.layers[0].attn.scores, bidir.layers[0].attn.scores)
    # the causal model's last row equals the bidirectional last row (it sees everything)
    torch.testing.assert_close(w_c[0, :, -1], w_b[0, :, -1])


def test_scale_scores_false_gives_scale_one():
    model = make(scale_scores=False)
    a = model.trace(torch.tensor([[1, 2, 3]])).layers[0].attn
    assert a.scale == 1.0
    assert torch.equal(a.scaled, a.scores)


# Where the padding sits (True = real token). At the END a causal model already hides the pads
# from every real query, so only START and MIDDLE exercise the padding mask when causal=True.
PAD_LAYOUTS = {
    "start": [False, False, True, True, True, True, True],
    "middle": [True, True, False, False, True, True, True],
    "end": [True, True, True, True, True, False, False],
}
REAL_IDS = [5, 6, 7, 8, 9, 10, 11]


def real_outputs(tr, real):
    """Every per-token output of the real positions: each block's residual stream, the logits."""
    return [lt.resid_out[0, real] for lt in tr.layers] + [tr.logits[0, real]]


def ids_with_pads(real, fill):
    ids = torch.tensor([REAL_IDS])
    ids[0, ~real] = fill  # what sits under the padding
    return ids


@pytest.mark.parametrize("where", list(PAD_LAYOUTS))
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_padding_contents_do_not_change_real_tokens(where, causal):
    """Change the token ids under the padding: the real tokens' outputs stay identical."""
    model = make(seed=2, pos="learned", d_model=24, n_heads=4)
    real = torch.tensor(PAD_LAYOUTS[where])
    kpm = real[None]
    a = model.trace(ids_with_pads(real, 0), causal=causal, key_padding_mask=kpm)
    b = model.trace(ids_with_pads(real, 17), causal=causal, key_padding_mask=kpm)
    for out_a, out_b in zip(real_outputs(a, real), real_outputs(b, real)):
        torch.testing.assert_close(out_a, out_b, atol=1e-6, rtol=0)
    # padded keys get exactly zero weight from every real query, in every layer and head
    for lt in a.layers:
        assert torch.all(lt.attn.weights[0][:, real][..., ~real] == 0)
    # the test is sensitive: without the mask the pads' contents do reach the real tokens
    # (except causal + padding at the end, where the causal mask already hides them)
    a0 = model.trace(ids_with_pads(real, 0), causal=causal)
    b0 = model.trace(ids_with_pads(real, 17), causal=causal)
    leaks = not torch.allclose(a0.logits[0, real], b0.logits[0, real], atol=1e-4)
    assert leaks == (not (causal and where == "end"))


def test_padding_does_not_change_real_tokens_causal():
    """Causal + padding at the START: the causal mask does not hide these pads, only the padding
    mask does. Pads left of a token must not change it (compare two different pad contents)."""
    model = make(seed=2)
    kpm = torch.tensor([[False, False, False, True, True, True, True]])
    one = model.trace(torch.tensor([[0, 0, 0, 5, 6, 7, 8]]), key_padding_mask=kpm).logits[0, 3:]
    two = model.trace(torch.tensor([[9, 3, 21, 5, 6, 7, 8]]), key_padding_mask=kpm).logits[0, 3:]
    torch.testing.assert_close(one, two, atol=1e-6, rtol=0)
    # causal + padding at the END equals truncation (positions of real tokens unchanged)
    ids = torch.tensor([[5, 6, 7, 8, 0, 0, 0]])
    full = model.trace(ids, key_padding_mask=ids != 0).logits[0, :4]
    short = model.trace(ids[:, :4]).logits[0]
    torch.testing.assert_close(full, short, atol=1e-5, rtol=0)


def test_key_padding_matches_truncation_bidirectional():
    model = make(seed=2, pos="learned")
    ids = torch.tensor([[5, 6, 7, 8, 3, 3]])
    kpm = torch.tensor([[True, True, True, True, False, False]])
    padded = model.trace(ids, causal=False, key_padding_mask=kpm).logits[0, :4]
    short = model.trace(ids[:, :4], causal=False).logits[0]
    torch.testing.assert_close(padded, short, atol=1e-5, rtol=0)
