"""Seq2SeqTransformer: parity with torch's reference layers, masks, invariants, one code path."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from model import ModelConfig, Seq2SeqTransformer
from model.checkpoint import load_checkpoint, save_checkpoint
from model.layers import Block
from model.seq2seq import DecoderBlock, greedy_decode, greedy_ids
from model.tokenizer import SPECIALS, Tokenizer

D, H, FF = 32, 4, 64


def cfg_for(norm: str, activation: str = "relu", **kw) -> ModelConfig:
    return ModelConfig(**{"vocab_size": 40, "d_model": D, "n_heads": H, "n_layers": 2, "d_ff": FF,
                          "max_len": 24, "norm": norm, "activation": activation, **kw})


def copy_mha(ours, ref: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.o_proj.weight)
        ref.out_proj.bias.copy_(ours.o_proj.bias)


def copy_ln(ours, ref: nn.LayerNorm) -> None:
    with torch.no_grad():
        ref.weight.copy_(ours.weight)
        ref.bias.copy_(ours.bias)


def randomize(module: nn.Module, seed: int) -> None:
    """Non-trivial LayerNorm gammas/betas and biases so a swapped parameter would show."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.5 if p.dim() == 1 else 1 / p.shape[-1] ** 0.5))


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_layer_matches_torch(norm: str, activation: str) -> None:
    cfg = cfg_for(norm, activation)
    ours = DecoderBlock(cfg)
    randomize(ours, 1)
    ref = nn.TransformerDecoderLayer(D, H, dim_feedforward=FF, dropout=0.0, activation=activation,
                                     batch_first=True, norm_first=(norm == "pre"))
    copy_mha(ours.self_attn, ref.self_attn)
    copy_mha(ours.cross_attn, ref.multihead_attn)
    copy_ln(ours.ln1, ref.norm1)
    copy_ln(ours.ln2, ref.norm2)
    copy_ln(ours.ln3, ref.norm3)
    with torch.no_grad():
        ref.linear1.weight.copy_(ours.ffn.fc1.weight)
        ref.linear1.bias.copy_(ours.ffn.fc1.bias)
        ref.linear2.weight.copy_(ours.ffn.fc2.weight)
        ref.linear2.bias.copy_(ours.ffn.fc2.bias)
    ref.eval()
    g = torch.Generator().manual_seed(2)
    B, Tt, Ts = 2, 5, 7
    x = torch.randn(B, Tt, D, generator=g)
    mem = torch.randn(B, Ts, D, generator=g)
    src_real = torch.ones(B, Ts, dtype=torch.bool)
    src_real[1, 4:] = False  # padded source keys in the second sentence
    causal = torch.ones(Tt, Tt, dtype=torch.bool).tril()
    out, tr = ours(x, mem, causal, src_real[:, None, None, :].expand(-1, 1, Tt, Ts))
    with torch.no_grad():
        expected = ref(x, mem, tgt_mask=~causal, memory_key_padding_mask=~src_real)
    assert out.shape == (B, Tt, D)
    assert torch.allclose(out, expected, atol=1e-5), (out - expected).abs().max()
    # the recorded pieces are the ones that produced the output
    assert tr.resid_out is out
    w = tr.cross_attn.weights
    assert w.shape == (B, H, Tt, Ts)
    assert torch.all(w[1, :, :, 4:] == 0)
    assert torch.allclose(w.sum(-1), torch.ones(B, H, Tt), atol=1e-6)
    assert torch.all(tr.self_attn.weights.triu(1) == 0)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_encoder_layer_matches_torch(norm: str) -> None:
    cfg = cfg_for(norm)
    ours = Block(cfg)
    randomize(ours, 3)
    ref = nn.TransformerEncoderLayer(D, H, dim_feedforward=FF, dropout=0.0, batch_first=True,
                                     norm_first=(norm == "pre"))
    copy_mha(ours.attn, ref.self_attn)
    copy_ln(ours.ln1, ref.norm1)
    copy_ln(ours.ln2, ref.norm2)
    with torch.no_grad():
        ref.linear1.weight.copy_(ours.ffn.fc1.weight)
        ref.linear1.bias.copy_(ours.ffn.fc1.bias)
        ref.linear2.weight.copy_(ours.ffn.fc2.weight)
        ref.linear2.bias.copy_(ours.ffn.fc2.bias)
    ref.eval()
    x = torch.randn(2, 6, D, generator=torch.Generator().manual_seed(4))
    real = torch.ones(2, 6, dtype=torch.bool)
    real[0, 3:] = False
    out, _ = ours(x, real[:, None, None, :].expand(-1, 1, 6, 6))
    with torch.no_grad():
        expected = ref(x, src_key_padding_mask=~real)
    # torch's fast path may zero padded rows of its output; compare the real positions
    assert torch.allclose(out[real], expected[real], atol=1e-5)


def batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 40, (2, 7), generator=g)
    tgt = torch.randint(4, 40, (2, 5), generator=g)
    src_real = torch.ones(2, 7, dtype=torch.bool)
    src_real[0, 5:] = False
    src[0, 5:] = 0
    return src, tgt, src_real


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_trace_shapes_masks_and_one_code_path(norm: str) -> None:
    m = Seq2SeqTransformer(cfg_for(norm, n_layers=2), seed=0)
    src, tgt, src_real = batch()
    tr = m.trace(src, tgt, src_padding_mask=src_real)
    assert torch.equal(m(src, tgt, src_real), tr.logits)
    assert tr.logits.shape == tr.probs.shape == (2, 5, 40)
    assert torch.isfinite(tr.logits).all()
    assert len(tr.encoder.layers) == len(tr.decoder.layers) == 2
    for lt in tr.encoder.layers:
        w = lt.attn.weights  # bidirectional: later keys get weight too
        assert w.shape == (2, H, 7, 7)
        assert torch.all(w[0, :, :, 5:] == 0)  # source padding: zero weight
        assert w[1].triu(1).sum() > 0.5
        assert torch.allclose(w.sum(-1), torch.ones(2, H, 7), atol=1e-6)
    for lt in tr.decoder.layers:
        sw, cw = lt.self_attn.weights, lt.cross_attn.weights
        assert sw.shape == (2, H, 5, 5) and cw.shape == (2, H, 5, 7)
        assert torch.all(sw.triu(1) == 0)
        assert torch.all(cw[0, :, :, 5:] == 0)
        assert torch.allclose(cw.sum(-1), torch.ones(2, H, 5), atol=1e-6)
        assert not lt.cross_attn.fully_masked.any()
        assert torch.isfinite(cw).all() and torch.isfinite(sw).all()
        # keys/values of the cross-attention come from the encoder output, queries from the decoder
        assert lt.cross_attn.k.shape[2] == 7 and lt.cross_attn.q.shape[2] == 5
    mem = tr.encoder.output
    k0 = tr.decoder.layers[0].cross_attn.k
    ca = m.dec_blocks[0].cross_attn
    assert torch.allclose(k0, ca.split(ca.k_proj(mem)), atol=1e-6)


def test_padding_and_future_tokens_do_not_leak() -> None:
    m = Seq2SeqTransformer(cfg_for("pre"), seed=1)
    src, tgt, src_real = batch(1)
    base = m.trace(src, tgt, src_padding_mask=src_real).logits
    src2 = src.clone()
    src2[0, 5:] = 17  # change what sits under the padding
    assert torch.allclose(m.trace(src2, tgt, src_padding_mask=src_real).logits, base, atol=1e-6)
    # a shorter source without padding gives the same result as the padded one
    alone = m.trace(src[:1, :5], tgt[:1]).logits
    assert torch.allclose(alone, base[:1], atol=1e-5)
    tgt2 = tgt.clone()
    tgt2[:, -1] = 9  # changing the last target token cannot change earlier positions
    out2 = m.trace(src, tgt2, src_padding_mask=src_real).logits
    assert torch.allclose(out2[:, :-1], base[:, :-1], atol=1e-6)
    assert not torch.allclose(out2[:, -1], base[:, -1])
    # ... but changing a real source token does change every target position
    src3 = src.clone()
    src3[1, 0] = 5 if src[1, 0] != 5 else 6
    assert not torch.allclose(m.trace(src3, tgt, src_padding_mask=src_real).logits[1], base[1])


# Padding at the START and in the MIDDLE (True = real token): these pads are not hidden by the
# decoder's causal mask, so only the padding masks keep them out.
S2S_PADS = {
    "start": ([False, False, True, True, True, True, True], [False, False, True, True, True]),
    "middle": ([True, True, False, False, True, True, True], [True, False, False, True, True]),
}


def _with_pads(real: torch.Tensor, base: list[int], fill: int) -> torch.Tensor:
    ids = torch.tensor([base])
    ids[0, ~real] = fill
    return ids


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("where", list(S2S_PADS))
def test_padding_contents_do_not_change_real_tokens(where: str, norm: str) -> None:
    """Change the ids under the source padding (bidirectional encoder, cross-attention) and under
    the target padding (causal decoder): the real tokens' outputs stay identical."""
    m = Seq2SeqTransformer(cfg_for(norm, pos_encoding="learned"), seed=3)
    s_real, t_real = (torch.tensor(x) for x in S2S_PADS[where])
    src_a, tgt_a = _with_pads(s_real, [4, 5, 6, 7, 8, 9, 10], 0), _with_pads(t_real, [1, 11, 12, 13, 14], 0)
    src_b, tgt_b = _with_pads(s_real, [4, 5, 6, 7, 8, 9, 10], 33), _with_pads(t_real, [1, 11, 12, 13, 14], 27)
    masks = dict(src_padding_mask=s_real[None], tgt_padding_mask=t_real[None])

    def real_parts(tr):
        enc = [lt.resid_out[0, s_real] for lt in tr.encoder.layers] + [tr.encoder.output[0, s_real]]
        dec = [lt.resid_out[0, t_real] for lt in tr.decoder.layers] + [tr.logits[0, t_real]]
        return enc + dec

    a = m.trace(src_a, tgt_a, **masks)
    for other in (m.trace(src_b, tgt_a, **masks), m.trace(src_a, tgt_b, **masks),
                  m.trace(src_b, tgt_b, **masks)):
        for x, y in zip(real_parts(a), real_parts(other)):
            torch.testing.assert_close(x, y, atol=1e-6, rtol=0)
    for lt in a.encoder.layers:  # padded source keys: zero weight from every real query
        assert torch.all(lt.attn.weights[0][:, s_real][..., ~s_real] == 0)
    for lt in a.decoder.layers:
        assert torch.all(lt.cross_attn.weights[0][:, t_real][..., ~s_real] == 0)
        assert torch.all(lt.self_attn.weights[0][:, t_real][..., ~t_real] == 0)
    # sensitive: without the masks, the pads' contents reach the real tokens (src and tgt alike)
    base = m.trace(src_a, tgt_a).logits[0, t_real]
    assert not torch.allclose(m.trace(src_b, tgt_a).logits[0, t_real], base, atol=1e-4)
    assert not torch.allclose(m.trace(src_a, tgt_b).logits[0, t_real], base, atol=1e-4)


def test_seed_determinism_and_validation() -> None:
    a, b, c = (Seq2SeqTransformer(cfg_for("pre"), seed=s) for s in (0, 0, 1))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["dec_blocks.0.cross_attn.q_proj.weight"], sc["dec_blocks.0.cross_attn.q_proj.weight"])
    src, tgt, _ = batch()
    with pytest.raises(ValueError, match="max_len"):
        a.trace(torch.zeros(1, 30, dtype=torch.long), tgt[:1])
    with pytest.raises(ValueError, match="ids must be in"):
        a.trace(src, tgt + 100)
    with pytest.raises(ValueError, match="batch"):
        a.trace(src, tgt[:1])
    with pytest.raises(ValueError, match="torch.long"):
        a.trace(src.float(), tgt)


def test_greedy_decode_keeps_every_step() -> None:
    m = Seq2SeqTransformer(cfg_for("pre"), seed=2)
    src = torch.tensor([[5, 6, 7, 8]])
    res = greedy_decode(m, src, max_len=6, bos_id=2, eos_id=3)
    assert 1 <= len(res.steps) == len(res.ids) <= 6
    assert res.finished == (res.ids[-1] == 3)
    full = res.trace
    assert full.decoder.ids.shape == (1, len(res.ids))
    for t, st in enumerate(res.steps):
        assert st.cross_attn.shape == (2, H, 4)
        assert st.self_attn.shape == (2, H, t + 1)
        assert st.token_id == res.ids[t] == int(full.probs[0, t].argmax())
        # causal decoder: step t's rows are row t of the final trace
        rows = torch.stack([lt.cross_attn.weights[0, :, t] for lt in full.decoder.layers])
        assert torch.allclose(st.cross_attn, rows, atol=1e-5)
    batched = greedy_ids(m, src, None, 6, 2, 3)
    assert batched[0] == [i for i in res.ids if i != 3]


def test_checkpoint_roundtrip(tmp_path) -> None:
    cfg = cfg_for("post", vocab_size=len(SPECIALS) + 3, tie_weights=False)
    m = Seq2SeqTransformer(cfg, seed=5)
    tok = Tokenizer(list(SPECIALS) + ["x", "y", "z"])
    save_checkpoint(m, tok, tmp_path / "s2s")
    m2, tok2 = load_checkpoint(tmp_path / "s2s")
    assert type(m2) is Seq2SeqTransformer and m2.cfg == cfg and tok2.vocab == tok.vocab
    src, tgt = torch.tensor([[4, 5, 6]]), torch.tensor([[2, 4]])
    assert torch.equal(m.trace(src, tgt).logits, m2.trace(src, tgt).logits)


def test_a_few_training_steps_reduce_the_loss() -> None:
    torch.manual_seed(0)
    m = Seq2SeqTransformer(cfg_for("pre", n_layers=1, tie_weights=False), seed=0)
    m.train()
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 40, (16, 6), generator=g)
    tin = torch.cat([torch.full((16, 1), 2), src.flip(1)], 1)  # target = reversed source
    tout = torch.cat([src.flip(1), torch.full((16, 1), 3)], 1)
    losses = []
    for _ in range(30):
        loss = F.cross_entropy(m(src, tin).reshape(-1, 40), tout.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
