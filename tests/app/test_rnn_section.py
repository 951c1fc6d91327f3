"""AppTest of the encoder–decoder page's RNN section: the left heatmap is the RNN's alignment computed
here straight from the checkpoint (greedy decoding + model.rnn trace), the right one the
Transformer's cross-attention; odd input gives messages, never exceptions."""
from __future__ import annotations

import html

import numpy as np
import torch

from model.rnn import load_rnn
from tests.app.test_encoder_decoder import start
from tests.helpers import decode, figures
from training.rnn_translation import CHECKPOINT_DIR

torch.set_num_threads(1)
RNN_FIG = 7  # after the seven figures of the Transformer sections


def rnn_alignment(words: list[str]) -> tuple[list[str], np.ndarray]:
    """Greedy translation and alpha (T_out, T_in), written here from the model's own modules."""
    model, tok, _ = load_rnn(CHECKPOINT_DIR)
    src = torch.tensor([[tok.index.get(w, tok.unk_id) for w in words]])
    with torch.no_grad():
        out = [tok.bos_id]
        for _ in range(len(words) + 4):  # re-run the whole prefix each step: independent of greedy()
            nxt = int(model(src, torch.tensor([out]))[0, -1].argmax())
            out.append(nxt)
            if nxt == tok.eos_id:
                break
        w = model.trace(src, torch.tensor([out[:-1]])).attn.weights[0].numpy()
    return [tok.vocab[i] for i in out[1:]], w


def test_rnn_alignment_beside_the_transformer():
    at = start()
    sub = [s.value for s in at.subheader]
    assert "Before transformers: an RNN with additive attention" in sub
    words = "the big dog sees a small cat in the old house .".split()
    produced, w = rnn_alignment(words)
    fig = figures(at)[RNN_FIG]
    left, right = (t for t in fig["data"] if t["type"] == "heatmap")
    z = decode(left["z"])
    assert z.shape == (len(produced), len(words))
    assert np.allclose(z, w, atol=1e-5)
    assert np.allclose(z.sum(1), 1.0, atol=1e-5)
    assert left["x"] == right["x"]  # the same source sentence on both sides
    assert [html.unescape(y.split("→")[1]) for y in left["y"]] == produced  # labels are HTML-escaped
    shown = [m.value.replace("\\", "") for m in at.markdown if m.value.startswith("RNN's translation")]
    assert len(shown) == 1 and "**woru gran ta kasa vek ta ni miso lit ke vidu .**" in shown[0], shown
    assert any(m.label.startswith("RNN: exact match") for m in at.metric)


def test_rnn_section_with_unknown_words_and_markup():
    at = start("the <b>zebra</b> sees a cat")
    assert not at.exception
    fig = figures(at)[RNN_FIG]
    left = next(t for t in fig["data"] if t["type"] == "heatmap")
    assert np.isfinite(decode(left["z"])).all()
    assert not any("<b>" in x for x in left["x"])  # user text escaped in the labels
