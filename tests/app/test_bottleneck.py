"""Issue 34 point 3: the RNN bottleneck measured on the encoder–decoder page. The shipped RNN
translator with attention, the same recipe without attention (one fixed context vector) and the
Transformer are scored by source length on the held-out sentences; here each translation is
recomputed independently of classroom.encoder_decoder (a prefix-rerun greedy loop per sentence),
and the parallel-vs-sequential timing is checked for what does not depend on the clock."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from classroom import encoder_decoder as E
from model.rnn import RNNConfig, RNNSeq2Seq, load_rnn
from tests.app.test_encoder_decoder import start
from tests.helpers import decode, fig_titled
from training.rnn_translation import CHECKPOINT_DIR, NO_ATTENTION_DIR
from training.translation import load_translator, make_splits

torch.set_num_threads(1)


def greedy_by_prefix(model, tok, words: tuple[str, ...]) -> list[int]:
    """Greedy translation rerunning the whole prefix each step (model(src, prefix)), not greedy()."""
    src = torch.tensor([[tok.index[w] for w in words]])
    out = [tok.bos_id]
    with torch.no_grad():
        for _ in range(len(words) + 4):
            nxt = int(model(src, torch.tensor([out]))[0, -1].argmax())
            out.append(nxt)
            if nxt == tok.eos_id:
                break
    return out[1:]


def test_without_attention_the_context_is_one_fixed_vector():
    """model.rnn with attention=False: the same context at every step, the encoder's final states
    (forward state after the last word, backward state after the first), no attention parameters."""
    cfg = RNNConfig(vocab_size=20, attention=False)
    m = RNNSeq2Seq(cfg, seed=1).eval()
    assert not hasattr(m, "w_q") and not hasattr(m, "v")
    src = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]])
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    tr = m.trace(src, torch.tensor([[1, 2, 3], [1, 2, 3]]), mask)
    ctx = tr.attn.context  # (B, T_out, d_annot)
    assert torch.equal(ctx[:, 0], ctx[:, 1]) and torch.equal(ctx[:, 1], ctx[:, 2])
    h = tr.annotations
    want = torch.cat([h[0, 3, :cfg.d_enc], h[0, 0, cfg.d_enc:]])
    assert torch.allclose(ctx[0, 0], want)
    want1 = torch.cat([h[1, 1, :cfg.d_enc], h[1, 0, cfg.d_enc:]])  # the second sentence ends at word 1
    assert torch.allclose(ctx[1, 0], want1)
    with pytest.raises(ValueError):
        RNNConfig(vocab_size=20, attention="no")


def test_accuracy_by_length_is_each_translators_own_greedy_output():
    """A sample of held-out sentences of every length, recomputed sentence by sentence."""
    s2s, tok, _ = load_translator()
    rnn, rtok, _ = load_rnn(CHECKPOINT_DIR)
    noattn, ntok, _ = load_rnn(NO_ATTENTION_DIR)
    _, held = make_splits(0, 20000, 1000)
    sample = [next(e for e in held if len(e.src) == L) for L in sorted({len(e.src) for e in held})]
    acc = E.accuracy_by_length([("no", E.rnn_outputs(noattn, ntok)), ("rnn", E.rnn_outputs(rnn, rtok)),
                                ("tf", E.transformer_outputs(s2s, tok))], sample, tok)
    assert acc.lengths.tolist() == [len(e.src) for e in sample] and acc.counts.tolist() == [1] * len(sample)
    for m, model in enumerate((noattn, rnn)):
        for g, e in enumerate(sample):
            out = greedy_by_prefix(model, tok, e.src)
            ref = [tok.index[w] for w in e.tgt] + [tok.eos_id]
            assert acc.exact[m, g] == float(out == ref)
            assert acc.token[m, g] == pytest.approx(sum(a == b for a, b in zip(out, ref)) / len(ref))
    for g, e in enumerate(sample):  # the Transformer: its own decode on the growing prefix
        src = torch.tensor([[tok.index[w] for w in e.src]])
        out = [tok.bos_id]
        with torch.no_grad():
            for _ in range(len(e.src) + 4):
                logits, _ = s2s.decode(s2s.encode(src, None, record=False)[0], torch.tensor([out]), None, None,
                                       record=False)
                out.append(int(logits[0, -1].argmax()))
                if out[-1] == tok.eos_id:
                    break
        assert acc.exact[2, g] == float(out[1:] == [tok.index[w] for w in e.tgt] + [tok.eos_id])


def test_page_shows_the_bottleneck_and_the_timing():
    at = start()
    sub = [s.value for s in at.subheader]
    assert "The bottleneck, measured" in sub and "Sequential vs parallel, measured" in sub
    f = fig_titled(at, "Exact match by source length")
    lines = {t["name"]: decode(t["y"]) for t in f["data"]}
    from ui import encoder_decoder as ed
    acc = ed.bottleneck()
    for m, name in enumerate(acc.models):
        np.testing.assert_allclose(lines[name], 100 * acc.exact[m])
    no, rnn = acc.exact[0], acc.exact[1]
    assert no[0] == 1.0 and no[-3] < 0.5 < rnn[-3]  # the fixed vector fails on long sentences, attention does not
    assert acc.overall(0) < acc.overall(1)
    assert int(acc.counts.sum()) == 1000
    t = fig_titled(at, "Time for T tokens")
    assert [tr["name"] for tr in t["data"]] == ["GRU: T sequential steps", "attention layer: 1 parallel step"]
    text = " ".join(m.value for m in at.markdown)
    assert "drops the cross-attention" in " ".join(c.value for c in at.caption)
    assert "one fixed context vector" in text


def test_parallel_timing_counts_steps_not_seconds():
    tm = E.sequential_vs_parallel(lengths=(4, 32), d_model=16, n_heads=2, repeats=1)
    assert tm.recurrent_steps.tolist() == [4, 32] and tm.attention_steps.tolist() == [1, 1]
    assert (tm.recurrent_ms > 0).all() and (tm.attention_ms > 0).all() and tm.threads >= 1
    assert tm.attention_faster.dtype == bool and tm.attention_faster.shape == (2,)
