"""SmolLM2-135M in the app (issue 18 point 4): every page renders with it, and the views made for
it show numbers checked here: the overview pages its 30 × 9 heads, the positional page measures
that rotary scores depend on m − n only, the layer-norm page reads RMSNorm, the multi-head page
shows grouped-query attention."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import app_pages, app_test, decode, errors, figures

from model.pretrained import PRETRAINED  # noqa: E402

if not PRETRAINED["smollm2-135m"].installed():
    pytest.skip(f"SKIPPED LOUDLY: {PRETRAINED['smollm2-135m'].package} is not installed; run "
                f"{PRETRAINED['smollm2-135m'].install}", allow_module_level=True)

SRC = "smollm2-135m"


def start(page: str | None = None, **params):
    at = app_test(default_timeout=180)
    at.query_params["src"] = SRC
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    if page:
        at.switch_page(page).run()
    assert not errors(at), errors(at)
    assert not at.error, [e.value for e in at.error]
    return at


def text_of(at) -> str:
    return "\n".join(str(e.value) for kind in ("markdown", "caption", "info", "warning", "subheader")
                     for e in at.get(kind))


@pytest.mark.parametrize("page", app_pages())
def test_every_page_renders_with_smollm2(page):
    at = start(page)
    assert at.session_state["src"] == SRC
    assert figures(at) or at.dataframe or at.info or at.warning, page


def test_smollm2_opens_causal():
    at = start()
    assert at.sidebar.radio(key="mask").value == "causal"


def test_overview_pages_30_layers_by_groups_of_6():
    at = start("pages/overview.py")
    heat = [t for t in figures(at)[0]["data"] if t["type"] == "heatmap"]
    assert len(heat) == 6 * 9 and heat[0]["name"] == "L0 H0"
    at.segmented_control(key="ov_layers").set_value("layers 24–29").run()
    heat = [t for t in figures(at)[0]["data"] if t["type"] == "heatmap"]
    assert len(heat) == 6 * 9 and heat[0]["name"] == "L24 H0" and heat[-1]["name"] == "L29 H8"
    assert len(at.dataframe[0].value) == 30 * 9  # the table lists every head


def test_positional_page_measures_relative_rotary_scores():
    at = start("pages/positional.py")
    S_fig = next(f for f in figures(at) if "constant along diagonals" in str(f["layout"]["title"]))
    S = decode(S_fig["data"][0]["z"])
    for o in range(-5, 6):  # every diagonal constant to float32 rounding, the whole map not
        d = np.diagonal(S, offset=o)
        assert d.max() - d.min() < 1e-4 * max(1.0, np.abs(S).max())
    assert S.max() - S.min() > 0.1
    assert "depends on m − n only" in text_of(at)


def test_layer_norm_page_reads_rmsnorm():
    at = start("pages/layer-norm.py")
    assert "RMSNorm" in text_of(at)
    rms = next(f for f in figures(at) if "Per-token RMS" in str(f["layout"]["title"]))
    after = decode(rms["data"][1]["y"])
    np.testing.assert_allclose(after, 1.0, atol=1e-3)  # x / sqrt(mean(x²) + ε) has RMS 1


def test_multi_head_page_shows_grouped_query_attention():
    at = start("pages/multi-head.py")
    table = next(d.value for d in at.dataframe if "KV cache per token (bytes)" in d.value.columns)
    assert table.loc["this model", "KV cache per token (bytes)"] == 2 * 30 * 3 * 64 * 4  # 46,080
    assert table.loc["full multi-head", "KV cache per token (bytes)"] == 2 * 30 * 9 * 64 * 4
    assert table.loc["this model", "K and V projection parameters"] == 30 * 576 * 3 * 128
    # one unit app-wide (issue 33): the KV-cache page says 90.0 MiB for the same cache, not 94.4 MB
    assert table.loc["this model", "KV cache for 2,048 tokens"] == "90.0 MiB"
    assert "K/V head 2 → query heads 6, 7, 8" in text_of(at)
    # query head 8 reads K/V head 2: the page's k row is that K/V head's key (from the engine here)
    import torch

    from model.pretrained import load_pretrained
    at.selectbox(key="mh_head").set_value(8).run()
    assert not errors(at)
    qkv = next(f for f in figures(at) if "Q, K, V of token" in str(f["layout"]["title"]))
    assert "from K/V head 2" in str(qkv["layout"]["title"])
    model, tok = load_pretrained(SRC)
    ids = tok.encode(at.session_state["text"]).ids
    tr = model.trace(torch.tensor([ids]))
    t = at.session_state["mh_token"]
    np.testing.assert_allclose(decode(qkv["data"][0]["z"])[1], tr.layers[0].attn.k[0, 2, t].numpy(), atol=1e-5)


def test_control_characters_emoji_and_right_to_left_text():
    """Issue 18 bad input: the byte-level tokenizer takes any text; labels show it readably
    (control characters made visible, emoji split across tokens labelled by part), nothing breaks."""
    text = "Bell\x07 and tab\there 😀 مرحبا بالعالم שלום 東京"
    at = start("pages/heads.py", text=text)
    fig = figures(at)[0]
    heat = [t for t in fig["data"] if t["type"] == "heatmap"]
    labels = heat[0]["y"]
    assert any("␇" in lab for lab in labels) and not any("\x07" in lab for lab in labels)  # shown, not rung
    assert any("😀" in lab for lab in labels) and any("東" in lab for lab in labels)
    assert any("مرحبا"[:2] in lab for lab in labels) or any("\u0645" in lab for lab in labels)
    assert not any("<" in lab and ">" in lab for lab in labels if "bos" not in lab)
    w = decode(heat[0]["z"])
    assert np.isfinite(np.nan_to_num(w)).all()
    np.testing.assert_allclose(np.nansum(w, axis=1), 1.0, atol=1e-5)


def test_ffn_page_writes_swiglu_as_the_gated_unit_it_is():
    """SmolLM2's FFN is W2 (SiLU(W_gate x) * W_up x), with no biases; the page wrote
    "W2 · SWIGLU(W1 x + b1) + b2", a one-matrix formula with biases the model does not have."""
    at = start("pages/ffn-output.py")
    text = text_of(at)
    assert "FFN(x) = (SiLU(x W_gate) ⊙ (x W_up)) W₂" in text
    assert "b₁" not in text and "SWIGLU(" not in text
    assert any("SiLU(x W_gate) ⊙ (x W_up)" in (f["layout"]["title"]["text"] if isinstance(f["layout"].get("title"), dict) else "")
               for f in figures(at))


def test_top_k_predictions_read_as_text_not_byte_level_spelling():
    """Issue 18: labels show leading spaces readably, never the raw "Ġ". The top-k table of the
    FFN & output page showed the vocabulary's spelling ("Ġthe", "Ċ"); it now shows "·the", "↵"."""
    at = start("pages/ffn-output.py", text="The capital of France is")
    topk = next(f for f in figures(at) if "Top-" in str(f["layout"].get("title", "")))
    cells = [t for tr in topk["data"] for t in (tr.get("text") or []) for t in (t if isinstance(t, list) else [t])]
    assert cells and not any(c in str(cell) for cell in cells for c in "ĠĊ"), cells[:10]
    assert any(str(cell).startswith("·Paris") for cell in cells), cells[:10]


def test_lesson_reads_the_shared_kv_head_under_gqa():
    """Issue 34: the lesson took attn.k[0, head]: with 9 query heads and 3 K/V heads, query head 5
    reads K/V head 1 (and head 3+ indexed past the 3 K/V heads). Step 2 names the shared head and
    quotes its key."""
    at = start("pages/lesson.py", lesson_step=2, lesson_head=5)
    show = [b for b in at.button if (b.key or "").startswith("lesson_show_")]
    show[0].click().run()
    assert not errors(at), errors(at)
    text = text_of(at)
    assert "head 5 reads K/V head 1" in text
# ---- issue 33: real-model views that mislead ------------------------------------------------------

def test_default_sentence_reads_well_for_every_tokenizer():
    """The default sentence ended with " ." so SmolLM2 read "·." (perplexity 230). Now it ends in
    "table." for every model; the toy vocabularies give the ids of the corpus's "table ."."""
    from model.checkpoint import CHECKPOINT_DIR, load_checkpoint
    from model.pretrained import load_pretrained
    from training.corpus import DEFAULT_SENTENCE
    from ui.state import DEFAULT_TEXT
    _, tok = load_pretrained(SRC)
    labels = tok.encode(DEFAULT_TEXT).labels
    assert labels[-2:] == ["·table", "."] and "·." not in labels
    for name in ("causal-lm", "masked-lm"):
        _, toy = load_checkpoint(CHECKPOINT_DIR / name)
        enc = toy.encode(DEFAULT_TEXT)
        assert enc.ids == toy.encode(DEFAULT_SENTENCE).ids and toy.unk_id not in enc.ids
        assert enc.labels[-2:] == ["table", "."]
    at = start("pages/ffn-output.py")
    ppl = next(m for m in at.metric if m.label == "perplexity")
    assert float(ppl.value) < 150  # 111 here; 230 with " ."


def test_contextual_opens_on_bank_not_on_token_0():
    """SmolLM2 labels " bank" as "·bank": only "i" (token 0, identical in both sentences under the
    causal mask: cosine 1.0 throughout) matched, and the page opened on it."""
    at = start("pages/contextual.py")
    assert at.selectbox(key="ctx_word").value == "bank"
    assert "bank" in at.selectbox(key="ctx_word").options and "i" in at.selectbox(key="ctx_word").options
    chart = next(f for f in figures(at) if "Same word, two contexts" in str(f["layout"]["title"]))
    cos = decode(chart["data"][0]["y"])
    assert cos[0] == pytest.approx(1.0, abs=1e-6) and cos[-1] < 0.95
    lo, hi = chart["layout"]["yaxis"]["range"]
    assert hi >= 1.0 and lo <= 0.9
    at.selectbox(key="ctx_word").set_value("i").run()  # the same prefix: said, and a flat line at 1
    assert not errors(at)
    assert any("same at every depth" in i.value for i in at.info)
    chart = next(f for f in figures(at) if "Same word, two contexts" in str(f["layout"]["title"]))
    np.testing.assert_allclose(decode(chart["data"][0]["y"]), 1.0, atol=1e-5)
    lo, hi = chart["layout"]["yaxis"]["range"]
    assert hi - lo >= 0.1  # float noise is not blown up into a zig-zag


def test_layer_norm_residual_heatmap_is_not_swamped_by_token_0():
    """SmolLM2's first token reaches a residual norm of ~20,000 (the others < 900): the heatmap
    colours by log10 with the norms kept in the cells and the hover, and says why."""
    import torch

    from classroom.layer_norm import residual_norms
    from model.pretrained import load_pretrained
    at = start("pages/layer-norm.py")
    assert at.radio(key="ln_resid_scale").value == "log"
    assert any("massive activations" in i.value for i in at.info)
    chart = next(f for f in figures(at) if "‖residual stream‖" in str(f["layout"]["title"]))
    model, tok = load_pretrained(SRC)
    tr = model.trace(torch.tensor([tok.encode(at.session_state["text"]).ids])).numpy()
    _, norms = residual_norms(tr)
    assert norms[:, 0].max() > 10_000 and norms[:, 1:].max() < 2_000
    np.testing.assert_allclose(decode(chart["data"][0]["z"]), np.log10(norms.T), rtol=1e-6)
    np.testing.assert_allclose(decode(chart["data"][0]["customdata"]), norms.T, rtol=1e-6)
    assert "10,000" in chart["data"][0]["colorbar"]["ticktext"]
    at.radio(key="ln_resid_scale").set_value("linear").run()
    assert not errors(at)
    chart = next(f for f in figures(at) if "‖residual stream‖" in str(f["layout"]["title"]))
    np.testing.assert_allclose(decode(chart["data"][0]["z"]), norms.T, rtol=1e-6)
