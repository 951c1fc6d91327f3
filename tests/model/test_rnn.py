"""model.rnn: additive attention energies against numpy written here, alignment rows, padding,
one code path, and the shipped checkpoint (it learned the toy translation)."""
import numpy as np
import pytest
import torch

from model.rnn import RNNConfig, RNNSeq2Seq, load_rnn, save_rnn
from training.rnn_translation import CHECKPOINT_DIR, load_rnn_translator, rnn_translate, token_accuracy
from training.translation import CHECKPOINT_DIR as TRANSFORMER_DIR
from training.translation import build_tokenizer, encode_batch, make_splits
from tests.helpers import assert_scaled_close


def small(seed=0, **kw):
    return RNNSeq2Seq(RNNConfig(vocab_size=20, d_emb=6, d_enc=5, d_dec=7, d_attn=4, **kw), seed=seed).eval()


def test_energies_weights_context_match_numpy():
    m = small()
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 20, (2, 6), generator=g)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    tgt = torch.randint(4, 20, (2, 5), generator=g)
    tr = m.trace(src, tgt, mask).numpy()
    Wq, bq = m.w_q.weight.detach().numpy(), m.w_q.bias.detach().numpy()
    Wk, v = m.w_k.weight.detach().numpy(), m.v.weight.detach().numpy()[0]
    h = tr.annotations  # (B, T_in, 10)
    prev = np.concatenate([tr.init_state[:, None], tr.states[:, :-1]], 1)  # s_{i-1}, (B, T_out, d_dec)
    e = np.tanh((prev @ Wq.T + bq)[:, :, None, :] + (h @ Wk.T)[:, None, :, :]) @ v  # (B, T_out, T_in)
    e = np.where(mask.numpy()[:, None, :], e, -np.inf)
    np.testing.assert_allclose(tr.attn.energies, e, atol=1e-5)
    w = np.exp(e - e.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    np.testing.assert_allclose(tr.attn.weights, w, atol=1e-6)
    np.testing.assert_allclose(tr.attn.weights.sum(-1), 1.0, atol=1e-6)
    assert (tr.attn.weights[1, :, 4:] == 0).all()  # padding gets no weight
    np.testing.assert_allclose(tr.attn.context, np.einsum("bij,bjd->bid", w, h), atol=1e-5)
    assert tr.attn.weights.shape == (2, 5, 6) and tr.annotations.shape == (2, 6, 10)


def test_padding_does_not_change_a_sentence():
    """Packed sequences: the backward GRU starts at each sentence's own last word."""
    m = small(seed=1)
    a = torch.tensor([[5, 6, 7]])
    padded = torch.tensor([[5, 6, 7, 0, 0]])
    mask = torch.tensor([[True, True, True, False, False]])
    tgt = torch.tensor([[2, 9, 10]])
    t1, t2 = m.trace(a, tgt), m.trace(padded, tgt, mask)
    assert torch.allclose(t1.annotations, t2.annotations[:, :3], atol=1e-6)
    assert_scaled_close(t1.logits, t2.logits)
    assert torch.allclose(t1.attn.weights, t2.attn.weights[..., :3], atol=1e-6)


def test_forward_equals_trace_and_greedy_follows_argmax():
    m = small(seed=2)
    src = torch.tensor([[4, 5, 6, 7]])
    tgt = torch.tensor([[2, 8, 9]])
    assert torch.allclose(m(src, tgt), m.trace(src, tgt).logits, atol=0)
    out = m.greedy(src, None, 3, bos_id=2, eos_id=3)[0]
    tr = m.trace(src, torch.tensor([[2] + out[:-1]]))
    assert out == tr.logits[0].argmax(-1).tolist()


def test_bad_config_and_wrong_checkpoint_kind(tmp_path):
    with pytest.raises(ValueError, match="d_enc"):
        RNNConfig(vocab_size=10, d_enc=0)
    with pytest.raises(ValueError, match="not 'rnn-seq2seq'"):
        load_rnn(TRANSFORMER_DIR)
    m = small()
    tok = build_tokenizer()
    save_rnn(m, tok, tmp_path / "x")  # a 20-word model saved with the 107-word vocabulary
    with pytest.raises(ValueError, match="vocab_size"):
        load_rnn(tmp_path / "x")


def test_save_load_round_trip(tmp_path):
    tok = build_tokenizer()
    m = RNNSeq2Seq(RNNConfig(vocab_size=len(tok), d_emb=4, d_enc=3, d_dec=5, d_attn=2), seed=3).eval()
    save_rnn(m, tok, tmp_path / "c", extra={"a": 1})
    m2, tok2, extra = load_rnn(tmp_path / "c")
    assert extra == {"a": 1} and tok2.vocab == tok.vocab
    src, tgt = torch.tensor([[4, 5, 6]]), torch.tensor([[2, 7]])
    assert torch.equal(m(src, tgt), m2(src, tgt))
    assert not (tmp_path / "c" / "model.safetensors").read_bytes().startswith(b"\x80")  # not a pickle


@pytest.fixture(scope="module")
def shipped():
    return load_rnn_translator(CHECKPOINT_DIR)


def test_shipped_checkpoint_learned_the_translation(shipped):
    model, tok, info = shipped
    train_set, _ = make_splits(0, 20000, 1000)
    acc, exact = token_accuracy(model, tok, train_set[:200])
    assert acc >= 0.8 and exact >= 0.5, (acc, exact)
    e = train_set[0]
    r = rnn_translate(model, tok, list(e.src))
    assert r.tgt_tokens == list(e.tgt) and r.finished
    assert info["token_acc_heldout"] >= 0.8
    assert 1_000 <= sum(p.numel() for p in model.parameters()) <= 100_000


def test_shipped_alignment_points_at_the_source_word(shipped):
    """The alignment of a held-in pair: argmax of each row is the reference source word for most
    target words (the training data's known alignment)."""
    model, tok, _ = shipped
    e = make_splits(0, 20000, 1000)[0][1]
    src, mask, tin, _, _ = encode_batch(tok, [e])
    w = model.trace(src, tin, mask).attn.weights[0]  # (T_out, T_in)
    assert torch.allclose(w.sum(-1), torch.ones(w.shape[0]), atol=1e-5)
    hits = (w[: len(e.align)].argmax(-1).numpy() == np.asarray(e.align)).mean()
    assert hits >= 0.8, hits
