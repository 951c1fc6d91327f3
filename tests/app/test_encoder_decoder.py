"""AppTest of the encoder–decoder page: the figures' data equal the translator's trace (computed
here without the app), masked cells are blank, and bad input gives messages, never exceptions."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from training.translation import load_translator, translate_words
from tests.helpers import app_test, decode, errors, figures

torch.set_num_threads(1)
PAGE = "pages/encoder-decoder.py"
DEFAULT = "the big dog sees a small cat in the old house ."
DEFAULT_KALO = "woru gran ta kasa vek ta ni miso lit ke vidu ."
# figure order on the page
BARS, LINKS, THREE, MASK_ENC, MASK_CROSS, MASK_DEC, GRID = range(7)


@pytest.fixture(scope="module")
def model():
    s2s, tok, info = load_translator()
    return s2s, tok, info


def expected(model, text: str):
    """Greedy translation and the full trace of (source, <bos> + output[:-1]), computed directly
    with the model: an independent check of what the page draws."""
    s2s, tok, _ = model
    src = [tok.index.get(w.lower(), tok.unk_id) for w in tok.split(text)]
    src_ids = torch.tensor([src])
    out = [tok.bos_id]
    for _ in range(len(src) + 4):
        nxt = int(s2s.trace(src_ids, torch.tensor([out])).probs[0, -1].argmax())
        out.append(nxt)
        if nxt == tok.eos_id:
            break
    tr = s2s.trace(src_ids, torch.tensor([out[:-1]]))
    return [tok.vocab[i] for i in out[1:]], tr


def start(text: str | None = None):
    at = app_test()
    at.run()
    at.switch_page(PAGE).run()
    if text is not None:
        at.text_input(key="s2s_text").set_value(text).run()
    assert not errors(at), errors(at)
    return at


def heatmaps(fig):
    return [t for t in fig["data"] if t["type"] == "heatmap"]


def nan_masked(w, allowed):
    return np.where(allowed, w, np.nan)


def screen_text(at) -> str:
    parts = [m.value for m in (*at.markdown, *at.caption, *at.info, *at.warning, *at.title, *at.subheader)]
    parts += [str(m.value) for m in at.metric]
    return "\n".join(parts)


def test_defaults_equal_the_trace(model):
    at = start()
    out, tr = expected(model, DEFAULT)
    assert " ".join(out[:-1]) == DEFAULT_KALO and out[-1] == "<eos>"
    text = screen_text(at)
    assert "Translation: " + DEFAULT_KALO.replace(".", "\\.") in text
    assert "Equals the reference translation" in text
    L, H = 2, 4
    figs = figures(at)
    assert len(figs) == 10  # seven Transformer figures, the RNN section, the bottleneck and the timing (issue 34)
    # cross-attention grid: layer L-1 (the default), panel h == weights[0, h]; nothing masked
    w = tr.decoder.layers[L - 1].cross_attn.weights[0].numpy()  # (H, T_dec, T_src)
    heat = heatmaps(figs[GRID])
    assert len(heat) == H
    for h, t in enumerate(heat):
        z = decode(t["z"])
        assert z.shape == (13, 12)
        np.testing.assert_allclose(z, w[h], rtol=1e-5, atol=1e-6)
    assert heat[0]["x"][2] == "2:dog" and heat[0]["y"][0] == "0:&lt;bos&gt;→woru"
    # reference alignment drawn on the gold cells: woru <- dog, gran <- big, ta <- the, ...
    gold = translate_words(DEFAULT.split())[1]
    marks = [t for t in figs[GRID]["data"] if t["type"] == "scatter"][0]
    assert marks["x"] == [heat[0]["x"][g] for g in gold]
    # three attentions, head average (default): encoder full, cross full, decoder causal (blank above)
    enc = tr.encoder.layers[L - 1].attn.weights[0].numpy().mean(0)
    dec = tr.decoder.layers[L - 1].self_attn.weights[0].numpy().mean(0)
    z_enc, z_cross, z_dec = (decode(t["z"]) for t in heatmaps(figs[THREE]))
    np.testing.assert_allclose(z_enc, enc, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z_cross, w.mean(0), rtol=1e-5, atol=1e-6)
    causal = np.tril(np.ones((13, 13), bool))
    np.testing.assert_allclose(z_dec, nan_masked(dec, causal), rtol=1e-5, atol=1e-6)
    assert np.isnan(z_dec).sum() == 13 * 12 // 2 and not np.isnan(z_enc).any() and not np.isnan(z_cross).any()
    # masks: encoder and cross all allowed, decoder lower-triangular
    assert decode(figs[MASK_ENC]["data"][0]["z"]).min() == 1
    assert decode(figs[MASK_CROSS]["data"][0]["z"]).shape == (13, 12)
    np.testing.assert_array_equal(decode(figs[MASK_DEC]["data"][0]["z"]), causal.astype(np.float32))
    # step 1 (default): the bars are the first cross-attention row, head average of layer L-1
    np.testing.assert_allclose(decode(figs[BARS]["data"][0]["y"]), w[:, 0].mean(0), rtol=1e-5, atol=1e-6)
    assert int(np.argmax(w[:, 0].mean(0))) == 2  # "woru" looks at "dog"
    # shapes table: live numbers from the trace
    shapes = next((d.value for d in at.dataframe if "this sentence" in d.value.columns), None)
    assert shapes is not None
    assert shapes.loc["A_j = softmax(Q_j K_jᵀ / √d_k)", "this sentence"] == "13 × 12  (× 4 heads)"
    assert shapes.loc["context = concat · W_O", "this sentence"] == "13 × 64"
    # the shipped model's numbers
    _, _, info = model
    assert f"{info['exact_match_heldout']:.1%}" in text
    assert f"{info['alignment']['best_head_acc_heldout']:.1%}" in text
    assert f"{info['alignment']['head_average_acc_heldout']:.1%}" in text
    assert "nan" not in text.lower()


def test_layer_head_and_step_follow_the_controls(model):
    at = start()
    _, tr = expected(model, DEFAULT)
    at.selectbox(key="s2s_layer").set_value(0).run()
    at.selectbox(key="s2s_head").set_value("2").run()
    at.slider(key="s2s_step").set_value(4).run()
    assert not errors(at), errors(at)
    figs = figures(at)
    w = tr.decoder.layers[0].cross_attn.weights[0].numpy()
    for h, t in enumerate(heatmaps(figs[GRID])):
        np.testing.assert_allclose(decode(t["z"]), w[h], rtol=1e-5, atol=1e-6)
    z_enc, z_cross, z_dec = (decode(t["z"]) for t in heatmaps(figs[THREE]))
    np.testing.assert_allclose(z_enc, tr.encoder.layers[0].attn.weights[0, 2].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z_cross, w[2], rtol=1e-5, atol=1e-6)
    d = tr.decoder.layers[0].self_attn.weights[0, 2].numpy()
    np.testing.assert_allclose(z_dec, nan_masked(d, np.tril(np.ones(d.shape, bool))), rtol=1e-5, atol=1e-6)
    # step 4 produced "kasa" from decoder input row 3; its bars are row 3 of head 2 (layer 0)
    np.testing.assert_allclose(decode(figs[BARS]["data"][0]["y"]), w[2, 3], rtol=1e-5, atol=1e-6)
    assert "Step 4: “kasa”" in figs[BARS]["layout"]["title"]["text"]
    assert any("woru gran ta" in m.value and "kasa" in m.value for m in at.markdown)  # the growing output


def test_typing_a_new_sentence_changes_everything(model):
    at = start("a happy child finds the red ball near a tall tree .")
    out, tr = expected(model, "a happy child finds the red ball near a tall tree .")
    ref, _ = translate_words("a happy child finds the red ball near a tall tree .".split())
    assert out[:-1] == ref
    assert any(m.value == "#### Translation: " + " ".join(ref).replace(".", "\\.") for m in at.markdown)
    heat = heatmaps(figures(at)[GRID])
    np.testing.assert_allclose(decode(heat[3]["z"]), tr.decoder.layers[1].cross_attn.weights[0, 3].numpy(),
                               rtol=1e-5, atol=1e-6)
    assert heat[0]["x"][2] == "2:child"
    assert at.session_state["s2s_text"].startswith("a happy child")  # what the user typed is kept


def test_empty_source_shows_a_message():
    at = start("   ")
    assert not figures(at)
    assert any("Type an English sentence" in i.value for i in at.info)
    assert not at.exception and not at.error


def test_unknown_words_html_and_emoji_are_shown_literally(model):
    text = "the <b>zebra</b> sees a miso 🦓"
    at = start(text)
    warn = " ".join(w.value for w in at.warning)
    assert "Not in the toy English vocabulary" in warn and "zebra" in warn and "🦓" in warn
    # markdown-escaped (shown literally, never as markup): every "<" is escaped except in `<unk>`
    assert "\\<" in warn and re.search(r"(?<!\\)<(?!unk>)", warn) is None
    assert warn.count("zebra") == 1 and warn.count("\\<") == 1  # each unknown word listed once
    figs = figures(at)
    x = heatmaps(figs[GRID])[0]["x"]
    assert "1:&lt;" in x and "4:zebra" in x and x[-1].endswith("🦓")  # labels keep what was typed, escaped
    for f in figs:  # no NaN outside the masked (causal) cells, no raw tags in any label
        for t in f["data"]:
            for k in ("x", "y", "text"):
                vals = t.get(k)
                if isinstance(vals, list):
                    assert not any("<b>" in str(v) for v in vals)
    bars = decode(figs[BARS]["data"][0]["y"])
    assert np.isfinite(bars).all() and abs(bars.sum() - 1) < 1e-4
    assert "nan" not in screen_text(at).lower()
    assert "No reference translation" in screen_text(at)


def test_very_long_source_is_truncated_with_a_notice():
    long = " ".join([DEFAULT] * 5)  # 60 words
    at = start(long)
    warn = " ".join(w.value for w in at.warning)
    assert "60 words" in warn and "first 24" in warn
    heat = heatmaps(figures(at)[GRID])
    assert decode(heat[0]["z"]).shape[1] == 24
    assert "nan" not in screen_text(at).lower()


def test_links_the_rnn_context_vector_to_its_calculator_preset():
    """Notes 004 eq. 5 (c_i = sum_j alpha_ij h_j) is worked in the calculator; this page links to it,
    and the link opens that preset."""
    at = start()
    links = [p.proto for p in at.get("page_link")]
    calc = [p for p in links if p.page.endswith("calculator")]
    assert calc, [(p.page, p.label) for p in links]
    assert calc[0].query_string == "preset=context-vector", calc[0].query_string
    from classroom.worked_examples import PRESETS
    assert "context-vector" in PRESETS
    at2 = app_test()
    at2.query_params["preset"] = "context-vector"
    at2.run()
    at2.switch_page("pages/calculator.py").run()
    assert not errors(at2)
    assert any("Context vector c_i" in m.value for m in at2.info), [m.value for m in at2.info]
