"""classroom/circuits.py (issue 35) against references built here, never from the functions under test:
a hand-built two-layer model whose layer 1 head 0 is an induction head (a previous-token head in
layer 0 writes each token's predecessor into its own subspace; the induction head's key reads it),
sink scores of a constructed trace by plain loops, the logit lens against a numpy forward of the
final norm and the output layer (and its last row against the model's own probabilities, bit for
bit), W_QK / W_OV against the model's full projections (grouped-query attention included), and the
character alignment of two tokenizations."""
from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np
import pytest
import torch

from classroom.circuits import (align, char_spans, head_circuit, hide_sink, induction_scores, induction_test,
                                logit_lens, pool_to_segments, prefix_matching, sink_scores)
from model.checkpoint import load_checkpoint
from model.config import ModelConfig
from model.tokenizer import Tokenizer
from model.transformer import Transformer
from tests.helpers import ROOT, assert_scaled_close

# ------------------------------------------------------------------------------------------------
# A hand-built induction circuit
# ------------------------------------------------------------------------------------------------
V, N = 32, 12  # vocabulary, tokens per copy
P = 2 * N + 1  # positions: BOS + two copies
TOK, POS, PREV, OUT = 0, V, V + P, 2 * V + P  # subspaces of the residual stream
D, H = 128, 2  # d_k = 64 >= max(P, V)
C = 30.0  # score scale: near-hard attention


def induction_model() -> Transformer:
    """No norms, no FFN output, learned one-hot positions. L0H0: previous-token head (query at
    position i looks for position i-1) copying the token into PREV. L1H0: induction head (query =
    current token, key = PREV: the token before each key). L1H1: same-token head (key = the key's own
    token: it looks at earlier copies of the current token, not the token after them). L0H1 does
    nothing (uniform, writes 0). Output layer reads OUT, where L1H0 writes the attended token."""
    cfg = ModelConfig(vocab_size=V, d_model=D, n_heads=H, n_layers=2, d_ff=4, max_len=P, pos_encoding="learned",
                      use_norm=False, scale_scores=False, tie_weights=False, bias=False)
    m = Transformer(cfg, seed=0)
    dk = cfg.d_k
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.tok_emb.weight[torch.arange(V), TOK + torch.arange(V)] = 1.0
        m.pos_emb.weight[torch.arange(P), POS + torch.arange(P)] = 1.0
        a0, a1 = m.blocks[0].attn, m.blocks[1].attn
        for a in range(P - 1):  # L0H0: q = C e_{i-1}, k = e_j
            a0.q_proj.weight[a, POS + a + 1] = C
        for a in range(P):
            a0.k_proj.weight[a, POS + a] = 1.0
        for v in range(V):
            a0.v_proj.weight[v, TOK + v] = 1.0  # value: the key's token
            a0.o_proj.weight[PREV + v, v] = 1.0  # written into PREV
            a1.q_proj.weight[v, TOK + v] = C  # L1H0 query: the current token
            a1.k_proj.weight[v, PREV + v] = 1.0  # L1H0 key: the token before the key
            a1.v_proj.weight[v, TOK + v] = 1.0
            a1.o_proj.weight[OUT + v, v] = 1.0
            a1.q_proj.weight[dk + v, TOK + v] = C  # L1H1: same token
            a1.k_proj.weight[dk + v, TOK + v] = 1.0
        m.lm_head.weight[torch.arange(V), OUT + torch.arange(V)] = 10.0
    for p in m.parameters():
        p.requires_grad_(False)
    return m.eval()


def reference_sequence(seed: int, pool: np.ndarray, bos: int = 0) -> np.ndarray:
    """The test's documented recipe: Generator(seed).choice(pool, n, replace=True), twice, after BOS."""
    r = np.random.default_rng(seed).choice(pool, size=N, replace=True)
    return np.concatenate([[bos], r, r])


def reference_scores(model, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Induction, previous-token and prefix-matching scores by loops over the trace's weights."""
    tr = model.trace(torch.tensor([ids.tolist()]), causal=True)
    L, Hh = model.cfg.n_layers, model.cfg.n_heads
    ind, prev, pm = np.zeros((L, Hh)), np.zeros((L, Hh)), np.zeros((L, Hh))
    for l in range(L):
        w = tr.layers[l].attn.weights[0].double().numpy()
        for h in range(Hh):
            ind[l, h] = np.mean([w[h, i, i - N + 1] for i in range(N + 1, 2 * N + 1)])
            prev[l, h] = np.mean([w[h, t, t - 1] for t in range(1, len(ids))])
            vals = []
            for i in range(len(ids)):
                js = [j for j in range(1, i + 1) if ids[j - 1] == ids[i]]
                if js:
                    vals.append(sum(w[h, i, j] for j in js))
            pm[l, h] = np.mean(vals)
    return ind, prev, pm


@pytest.fixture(scope="module")
def ind_model():
    return induction_model()


def test_the_hand_built_induction_head_scores_highest(ind_model):
    s = induction_scores(ind_model, n_tokens=N, seed=0)
    assert s.shape == (2, H)
    assert np.unravel_index(np.argmax(s), s.shape) == (1, 0)
    assert s[1, 0] > 0.6 and s[1, 0] > 3 * np.delete(s.ravel(), 2).max()  # the same-token head L1H1 is far below


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_scores_equal_loops_over_the_documented_sequence(ind_model, seed):
    res = induction_test(ind_model, n_tokens=N, seed=seed)
    ids = reference_sequence(seed, np.arange(1, V))
    assert res.ids.tolist() == ids.tolist()
    ind, prev, pm = reference_scores(ind_model, ids)
    np.testing.assert_allclose(res.induction, ind, atol=1e-6)
    np.testing.assert_allclose(res.previous_token, prev, atol=1e-6)
    np.testing.assert_allclose(res.prefix_matching, pm, atol=1e-6)
    assert res.top(1, "previous_token")[0][:2] == (0, 0)
    assert res.top(1, "prefix_matching")[0][:2] == (1, 0)


def test_per_token_loss_and_ablating_the_induction_head(ind_model):
    clean = induction_test(ind_model, n_tokens=N, seed=0)
    ids = clean.ids
    logits = ind_model(torch.tensor([ids.tolist()])).double()
    ref = -torch.log_softmax(logits[0], -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].numpy()
    np.testing.assert_allclose(clean.loss, ref, atol=1e-9)
    assert clean.first_copy_loss == pytest.approx(ref[1:N].mean())
    assert clean.second_copy_loss == pytest.approx(ref[N + 1:].mean())
    assert clean.second_copy_loss < 0.5 * clean.first_copy_loss
    abl = induction_test(ind_model, n_tokens=N, seed=0, ablate=[(1, 0)])
    assert abl.ablated == ((1, 0),)
    assert abl.second_copy_loss > clean.second_copy_loss + 1.0  # in-context learning gone
    other = induction_test(ind_model, n_tokens=N, seed=0, ablate=[(1, 1)])
    assert other.second_copy_loss == pytest.approx(clean.second_copy_loss, abs=1e-6)  # L1H1 writes nothing


def test_induction_test_with_a_tokenizer_starts_with_its_bos_and_draws_ordinary_tokens():
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    res = induction_test(model, 20, seed=3, tok=tok)
    assert res.ids[0] == tok.bos_id and len(res.ids) == 41
    assert all(tok.vocab[i] not in ("<pad>", "<unk>", "<bos>", "<eos>") for i in res.ids[1:])
    assert res.ids[1:21].tolist() == res.ids[21:].tolist()
    with pytest.raises(ValueError, match="n_tokens"):
        induction_test(model, 100, tok=tok)  # 201 positions > max_len 128


# ------------------------------------------------------------------------------------------------
# Sinks
# ------------------------------------------------------------------------------------------------

def fake_trace(weights: list[np.ndarray], ids, *, token_types=None, padding=None, fully=None):
    layers = [NS(attn=NS(weights=w, fully_masked=None if fully is None else fully[i])) for i, w in enumerate(weights)]
    return NS(layers=layers, ids=np.asarray([ids]), token_type_ids=token_types, key_padding_mask=padding,
              past_length=None)


def loop_sink(w: np.ndarray, keys: list[int], rows: list[int]) -> np.ndarray:
    B, Hh = w.shape[:2]
    out = np.zeros(Hh)
    for h in range(Hh):
        out[h] = np.mean([sum(w[b, h, t, k] for k in keys) for b in range(B) for t in rows])
    return out


def random_rows(rng, shape, causal=True):
    w = rng.random(shape)
    if causal:
        w = np.tril(w)
    return w / w.sum(-1, keepdims=True)


def test_sink_scores_of_a_constructed_trace():
    rng = np.random.default_rng(0)
    T = 7
    ws = [random_rows(rng, (1, 3, T, T)) for _ in range(2)]
    ws[1][0, 2] = 0.0
    ws[1][0, 2, :, 0] = 1.0  # a perfect sink head
    tr = fake_trace(ws, [5, 6, 7, 8, 9, 10, 11])
    s = sink_scores(tr)
    assert s.shape == (2, 3)
    for l in range(2):
        np.testing.assert_allclose(s[l], loop_sink(ws[l], [0], list(range(1, T))), atol=1e-12)
    assert s[1, 2] == pytest.approx(1.0)
    # the same trace as torch tensors
    ttr = fake_trace([torch.from_numpy(w) for w in ws], [5, 6, 7, 8, 9, 10, 11])
    np.testing.assert_allclose(sink_scores(ttr), s, atol=1e-12)
    # explicit keys (positions or a mask)
    np.testing.assert_allclose(sink_scores(tr, keys=[0, 3])[0], loop_sink(ws[0], [0, 3], list(range(1, T))), atol=1e-12)
    mask = np.zeros(T, dtype=bool)
    mask[[0, 3]] = True
    np.testing.assert_allclose(sink_scores(tr, keys=mask), sink_scores(tr, keys=[0, 3]))


def test_sink_scores_bert_family_counts_sep_and_skips_padding():
    rng = np.random.default_rng(1)
    T = 8
    ids = [101, 7, 8, 102, 9, 10, 102, 0]  # [CLS] a b [SEP] c d [SEP] [PAD]
    pad = np.array([[True] * 7 + [False]])
    w = random_rows(rng, (1, 2, T, T), causal=False)
    tr = fake_trace([w], ids, token_types=np.zeros((1, T), dtype=int), padding=pad)
    np.testing.assert_allclose(sink_scores(tr)[0], loop_sink(w, [0, 3, 6], list(range(1, 7))), atol=1e-12)
    # without token types (not BERT): key 0 only, padding still left out
    tr2 = fake_trace([w], ids, padding=pad)
    np.testing.assert_allclose(sink_scores(tr2)[0], loop_sink(w, [0], list(range(1, 7))), atol=1e-12)


def test_sink_scores_skip_fully_masked_rows_and_average_a_batch():
    rng = np.random.default_rng(2)
    w = random_rows(rng, (2, 2, 5, 5))
    fm = np.zeros((2, 2, 5), dtype=bool)
    fm[1, :, 4] = True
    w[1, :, 4] = 0.0
    tr = fake_trace([w], [1, 2, 3, 4, 5], fully=[fm])
    tr.ids = np.array([[1, 2, 3, 4, 5], [1, 2, 3, 4, 5]])
    want = np.array([np.mean([w[b, h, t, 0] for b in range(2) for t in range(1, 5) if not (b == 1 and t == 4)])
                     for h in range(2)])
    np.testing.assert_allclose(sink_scores(tr)[0], want, atol=1e-12)


def test_sink_scores_of_a_real_trace_torch_and_numpy():
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    ids = tok.encode("the cat sat on the mat .").ids
    tr = model.trace(torch.tensor([ids]))
    s = sink_scores(tr)
    np.testing.assert_array_equal(s, sink_scores(tr.numpy()))
    for l in range(2):
        w = tr.layers[l].attn.weights.double().numpy()
        np.testing.assert_allclose(s[l], loop_sink(w, [0], list(range(1, len(ids)))), atol=1e-7)


def test_hide_sink_renormalises_rows():
    w = np.array([[[1.0, 0, 0], [0.5, 0.5, 0], [0.6, 0.1, 0.3], ]])
    np.testing.assert_allclose(hide_sink(w)[0], [[0, 0, 0], [0, 1, 0], [0, 0.25, 0.75]])
    keys = np.array([False, False, True])  # another sink: the last key ([SEP])
    np.testing.assert_allclose(hide_sink(w, keys)[0], [[1, 0, 0], [0.5, 0.5, 0], [6 / 7, 1 / 7, 0]])


# ------------------------------------------------------------------------------------------------
# Logit lens
# ------------------------------------------------------------------------------------------------

def np_layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def np_softmax(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("name", ["causal-lm", "causal-lm-learned"])
def test_logit_lens_against_numpy_and_the_models_own_output(name):
    model, tok = load_checkpoint(ROOT / "checkpoints" / name)
    ids = tok.encode("the keys to the cabinet are on the table .").ids
    tr = model.trace(torch.tensor([ids]))
    k = 5
    for trace in (tr, tr.numpy()):
        lens = logit_lens(model, trace, k=k)
        assert lens.top_ids.shape == lens.top_probs.shape == (3, len(ids), k)
        # the last row IS the model's output distribution, bit for bit
        v, i = torch.topk(tr.probs[0], k, dim=-1)
        np.testing.assert_array_equal(lens.top_ids[-1], i.numpy())
        np.testing.assert_array_equal(lens.top_probs[-1], v.numpy())
    W = model.output_matrix.detach().double().numpy()
    g, b = model.ln_f.weight.detach().double().numpy(), model.ln_f.bias.detach().double().numpy()
    streams = [tr.embeddings.sum[0]] + [lt.resid_out[0] for lt in tr.layers]
    for row, x in enumerate(streams):
        p = np_softmax(np_layer_norm(x.double().numpy(), g, b, model.cfg.ln_eps) @ W.T)  # (T, V)
        top = np.argsort(-p, axis=-1, kind="stable")[:, :k]
        np.testing.assert_array_equal(lens.top_ids[row], top)
        np.testing.assert_allclose(lens.top_probs[row], np.take_along_axis(p, top, -1), atol=1e-6)
        nxt = np.asarray(ids[1:])
        np.testing.assert_allclose(lens.next_probs[row], p[np.arange(len(ids) - 1), nxt], atol=1e-6)
        ranks = [(p[t] > p[t, nxt[t]]).sum() for t in range(len(ids) - 1)]
        assert lens.next_ranks[row].tolist() == ranks
    assert lens.rows[0] == "embeddings" and lens.rows[-1] == "after layer 1"


def test_logit_lens_post_ln_model_has_no_final_norm_and_refuses_encoders():
    cfg = ModelConfig(vocab_size=40, d_model=16, n_heads=2, n_layers=2, norm="post", max_len=16)
    m = Transformer(cfg, seed=1).eval()
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    tr = m.trace(ids)
    lens = logit_lens(m, tr, k=3)
    W = m.output_matrix.detach().double().numpy()
    p = np_softmax(tr.layers[0].resid_out[0].double().numpy() @ W.T)  # no final norm: the stream as it is
    np.testing.assert_allclose(lens.top_probs[1], np.sort(p, -1)[:, ::-1][:, :3], atol=1e-6)
    v, _ = torch.topk(tr.probs[0], 3, dim=-1)
    np.testing.assert_array_equal(lens.top_probs[-1], v.numpy())
    enc = Transformer(cfg.replace(output_head=False), seed=1).eval()
    with pytest.raises(ValueError, match="output layer"):
        logit_lens(enc, enc.trace(ids))


# ------------------------------------------------------------------------------------------------
# One head: W_QK and W_OV
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kv, head", [(None, 3), (2, 1), (2, 3), (1, 2)])
def test_head_circuit_against_the_full_projections(kv, head):
    cfg = ModelConfig(vocab_size=50, d_model=32, n_heads=4, n_layers=2, max_len=16, n_kv_heads=kv)
    m = Transformer(cfg, seed=3).eval()
    with torch.no_grad():  # a final norm that is not the identity: its scale enters the OV read-out
        m.ln_f.weight.copy_(torch.linspace(0.2, 2.0, cfg.d_model))
    text = [5, 9, 9, 17, 3]
    layer = 1
    hc = head_circuit(m, layer, head, text, top=10, k=4)
    blk = m.blocks[layer]
    with torch.no_grad():
        x = blk.ln1(m.tok_emb.weight[torch.tensor(text)], False)[0].double()  # (T, D)
        q = torch.nn.functional.linear(x, blk.attn.q_proj.weight.double(), blk.attn.q_proj.bias.double())
        k = torch.nn.functional.linear(x, blk.attn.k_proj.weight.double(), blk.attn.k_proj.bias.double())
        v = torch.nn.functional.linear(x, blk.attn.v_proj.weight.double(), blk.attn.v_proj.bias.double())
        dk = cfg.d_k
        g = head // (cfg.n_heads // cfg.kv_heads)
        qh = q[:, head * dk:(head + 1) * dk]
        kh = k.view(len(text), cfg.kv_heads, dk).repeat_interleave(cfg.n_heads // cfg.kv_heads, dim=1)[:, head]
        vh = v.view(len(text), cfg.kv_heads, dk).repeat_interleave(cfg.n_heads // cfg.kv_heads, dim=1)[:, head]
        ref_qk = (qh @ kh.T / np.sqrt(dk)).numpy()
        # OV: the attention output when head h attends fully to b (other heads silent), minus b_O
        concat = torch.zeros(len(text), cfg.n_heads * dk, dtype=torch.float64)
        concat[:, head * dk:(head + 1) * dk] = vh
        o = concat @ blk.attn.o_proj.weight.double().T  # (T, D)
        o = o - o.mean(-1, keepdim=True)  # the final LayerNorm removes the mean
        logits = (o * m.ln_f.weight.double()) @ m.output_matrix.double().T  # (T, V)
    np.testing.assert_allclose(hc.text_qk, ref_qk, atol=1e-5)
    top = torch.topk(logits, 4, dim=-1)
    np.testing.assert_array_equal(hc.text_ov_ids, top.indices.numpy())
    assert_scaled_close(hc.text_ov_logits, top.values)
    assert hc.kv_head == g
    # the best QK pair over all 50 tokens, by brute force
    with torch.no_grad():
        xa = blk.ln1(m.tok_emb.weight, False)[0].double()
        qa = torch.nn.functional.linear(xa, blk.attn.q_proj.weight.double(), blk.attn.q_proj.bias.double())[:, head * dk:(head + 1) * dk]
        ka = torch.nn.functional.linear(xa, blk.attn.k_proj.weight.double(), blk.attn.k_proj.bias.double())[:, g * dk:(g + 1) * dk]
        S = (qa @ ka.T / np.sqrt(dk)).numpy()
    a, b = np.unravel_index(np.argmax(S), S.shape)
    assert tuple(hc.qk_pairs[0]) == (a, b) and hc.qk_scores[0] == pytest.approx(S[a, b], abs=1e-5)
    # OV pairs: one row per attended token, each with the token its output raises most, by brute force
    with torch.no_grad():
        va = torch.nn.functional.linear(xa, blk.attn.v_proj.weight.double(), blk.attn.v_proj.bias.double())
        va = va.view(50, cfg.kv_heads, dk)[:, g]  # (V, d_k) of this head's K/V head
        oa = va @ blk.attn.o_proj.weight.double()[:, head * dk:(head + 1) * dk].T
        oa = oa - oa.mean(-1, keepdim=True)
        la = ((oa * m.ln_f.weight.double()) @ m.output_matrix.double().T).numpy()  # (V attended, V raised)
    src = int(np.argmax(la.max(1)))
    assert tuple(hc.ov_pairs[0]) == (src, int(np.argmax(la[src]))) and hc.ov_logits[0] == pytest.approx(la.max(), abs=1e-5)
    shapes = dict((r[0].split(" (")[0], r[1]) for r in hc.shapes)
    assert shapes["W_QK = W_Q W_Kᵀ"] == "32 × 32" and shapes["W_Q"] == "32 × 8"


def test_the_induction_heads_ov_copies(ind_model):
    hc = head_circuit(ind_model, 1, 0, [3, 4, 5], k=1)
    assert hc.copying == 1.0  # attending to token b raises b's logit most, for every b
    assert hc.text_ov_ids[:, 0].tolist() == [3, 4, 5]


# ------------------------------------------------------------------------------------------------
# Two tokenizations on one text
# ------------------------------------------------------------------------------------------------

def test_char_spans_word_level_and_alignment():
    tok = Tokenizer.build(["the cat sat on the mat ."], add_bos=True)
    text = "The cat  sat, on mat."
    enc = tok.encode(text)
    spans = char_spans(tok, text, enc.ids, enc.labels)
    assert spans[0] == (0, 0)  # <bos> is not in the text
    assert [text[a:b] for a, b in spans[1:]] == ["The", "cat", "sat", ",", "on", "mat", "."]
    # a typed "<bos>" is text (three word tokens); the real BOS is not in the text
    typed = "a <bos> b"
    enc2 = tok.encode(typed)
    sp2 = char_spans(tok, typed, enc2.ids, enc2.labels)
    assert sp2[0] == (0, 0) and [typed[a:b] for a, b in sp2[1:]] == ["a", "<", "bos", ">", "b"]
    chars = Tokenizer.build([text], level="char")
    enc_c = chars.encode(text)
    spans_c = char_spans(chars, text, enc_c.ids, enc_c.labels)
    assert [text[a:b] for a, b in spans_c] == list(text)
    al = align(spans, spans_c)
    assert al.segment_texts(text) == ["The", "cat", "sat", ",", "on", "mat", "."]  # spaces: no word token
    assert al.seg_a.tolist() == [-1, 0, 1, 2, 3, 4, 5, 6]
    assert al.seg_b.tolist() == [0, 0, 0, -1, 1, 1, 1, -1, -1, 2, 2, 2, 3, -1, 4, 4, -1, 5, 5, 5, 6]
    assert not al.identical and align(spans, spans).identical


def test_align_shared_segments_when_both_split():
    a = [(0, 0), (0, 3), (3, 8), (8, 9)]  # "abc|defgh|." + a BOS
    b = [(0, 5), (5, 8), (8, 9)]  # "abcde|fgh|."
    al = align(a, b)
    assert al.segments == ((0, 8), (8, 9))
    assert al.seg_a.tolist() == [-1, 0, 0, 1] and al.seg_b.tolist() == [0, 0, 1]
    w = np.array([[1.0, 0, 0, 0], [0.2, 0.8, 0, 0], [0.1, 0.3, 0.6, 0], [0.4, 0.1, 0.2, 0.3]])
    pooled = pool_to_segments(w, al.seg_a, 2)
    np.testing.assert_allclose(pooled, [[(0.8 + 0.3 + 0.6) / 2, 0.0], [0.3, 0.3]])


def test_prefix_matching_on_text_ids():
    ids = [1, 7, 8, 9, 7, 8]  # 7 and 8 repeat: queries 4 and 5
    w = np.zeros((6, 6))
    w[4, 2] = 0.9  # query 4 (7) -> key 2 (after the earlier 7)
    w[5, 3] = 0.5  # query 5 (8) -> key 3 (after the earlier 8)
    s, n = prefix_matching(w, ids)
    assert n == 2 and s == pytest.approx(0.7)
    # a token right after itself: the key after its earlier occurrence is the query itself
    w = np.eye(4)
    s, n = prefix_matching(w, [2, 5, 5, 3])
    assert n == 1 and s == pytest.approx(1.0)
