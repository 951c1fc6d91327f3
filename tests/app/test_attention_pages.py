"""AppTest of the attention pages: the figures' data equals the engine's trace."""
from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest
import torch

from model.config import ModelConfig
from model.patterns import THRESHOLDS, label_head
from model.transformer import Transformer
from tests.helpers import app_test, decode, errors, figures
from ui import models, runs, state
from viz.common import visible

FRESH = state.FRESH


def engine(text=state.DEFAULT_TEXT, *, d=64, h=4, L=2, pe="sinusoidal", norm="pre", seed=0, causal=True, T=64,
           kpm=None):
    """The expected trace, computed without the app."""
    tok = models.fresh_tokenizer()
    cfg = ModelConfig(vocab_size=len(tok), d_model=d, n_heads=h, n_layers=L, max_len=state.T_MAX,
                      pos_encoding=pe, norm=norm)
    enc = tok.encode(text)
    ids = torch.tensor([enc.ids[:T]])
    return Transformer(cfg, seed=seed).trace(ids, causal=causal), enc.labels[:T]


def start(page="pages/heads.py", **params):
    at = app_test()
    at.query_params["src"] = FRESH  # the engine above is the fresh-weights model
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    if page != "pages/heads.py":
        at.switch_page(page).run()
    assert not errors(at), errors(at)
    return at


def masked(w, allowed):
    return np.where(np.broadcast_to(allowed, w.shape), w, np.nan)


def check_grid(fig, tr, layer, causal):
    w = tr.layers[layer].attn.weights[0].numpy()  # (H, T, T)
    heat = [t for t in fig["data"] if t["type"] == "heatmap"]
    assert len(heat) == w.shape[0]  # one panel per head
    T = w.shape[-1]
    allowed = np.tril(np.ones((T, T), bool)) if causal else np.ones((T, T), bool)
    for h, t in enumerate(heat):
        z = decode(t["z"])
        assert z.shape == (T, T)
        np.testing.assert_allclose(z, masked(w[h], allowed), rtol=1e-5, atol=1e-6)
        assert np.isnan(z).sum() == (0 if not causal else T * (T - 1) // 2)  # masked cells are blank
    return heat


def test_heads_defaults_equal_engine():
    at = start()
    tr, labels = engine()
    fig = figures(at)[0]
    heat = check_grid(fig, tr, 0, True)
    assert heat[0]["y"][1] == f"1:{labels[1]}"
    titles = [a["text"] for a in fig["layout"]["annotations"]]
    for h in range(4):  # each head labelled with its pattern and deciding score
        p = label_head(tr.layers[0].attn.weights[0, h].numpy())
        assert titles[h] == f"head {h} · {p.title()}"
    assert len(figures(at)) == 1  # the head detail is closed: nothing of it is computed or sent
    assert "detail" not in at.query_params
    at.session_state["detail"] = True  # open it (the expander): head 0 of layer 0, bound to the URL
    at.run()
    assert at.query_params["detail"] == "true"
    detail = decode(figures(at)[1]["data"][0]["z"])
    np.testing.assert_allclose(detail, masked(tr.layers[0].attn.weights[0, 0].numpy(), np.tril(np.ones(detail.shape, bool))), rtol=1e-5, atol=1e-6)


def test_heads_detail_and_lines_follow_head_and_layer():
    at = start(detail="true")
    at.selectbox(key="layer").set_value(1).run()
    at.selectbox(key="head").set_value(3).run()
    tr, _ = engine()
    w = tr.layers[1].attn.weights[0, 3].numpy()
    check_grid(figures(at)[0], tr, 1, True)
    detail = decode(figures(at)[1]["data"][0]["z"])
    np.testing.assert_allclose(np.nan_to_num(detail), w, rtol=1e-5, atol=1e-6)
    # (the grid's phone CSS, ui.show._wide_chart, is a <style> block: not page content)
    page_html = lambda: [h for h in at.get("html") if not h.proto.body.lstrip().startswith("<style>")]  # noqa: E731
    assert not page_html()  # lazy tabs: the line view is only made when its tab is open
    at.session_state["head_tab"] = "Lines"
    at.run()
    assert not errors(at) and len(figures(at)) == 1  # the detail heatmap is not sent meanwhile
    html = page_html()[0].proto.body
    lines = re.findall(r'data-q="(\d+)" data-k="(\d+)" data-w="([0-9.]+)"', html)
    assert lines, "the line view has no lines"
    for q, k, val in lines:
        assert abs(float(val) - w[int(q), int(k)]) < 1e-4
    assert len(lines) == int((w >= 0.01).sum())
    assert at.query_params["layer"] == "1" and at.query_params["head"] == "3"
    assert at.query_params["head_tab"] == "Lines"
    at.session_state["head_tab"] = "Numbers"
    at.run()
    table = at.dataframe[0].value.to_numpy(dtype=float)
    np.testing.assert_allclose(table, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("params,kw", [
    (dict(d=32, h=8, L=3, layer=2), dict(d=32, h=8, L=3)),
    (dict(mask="bidirectional"), dict(causal=False)),
    (dict(pe="learned", norm="post", seed=7, layer=1), dict(pe="learned", norm="post", seed=7)),
    (dict(d=16, h=1, L=1), dict(d=16, h=1, L=1)),
])
def test_heads_non_default_states(params, kw):
    at = start(**params)
    tr, _ = engine(**kw)
    check_grid(figures(at)[0], tr, int(params.get("layer", 0)), kw.get("causal", True))


def test_url_round_trip_reproduces_view():
    at = start()
    at.sidebar.selectbox(key="h").set_value(8).run()
    at.sidebar.radio(key="mask").set_value("bidirectional").run()
    at.sidebar.text_input(key="text").set_value("a dog ran to the park .").run()
    at.selectbox(key="layer").set_value(1).run()
    params = dict(at.query_params)
    assert params["h"] == "8" and params["mask"] == "bidirectional" and params["layer"] == "1"
    assert params["text"] == "a dog ran to the park ."
    before = figures(at)[0]
    fresh = app_test()
    for k, v in params.items():
        fresh.query_params[k] = v
    fresh.run()
    assert not errors(fresh) and not fresh.warning
    after = figures(fresh)[0]
    assert len(after["data"]) == 8
    for a, b in zip(before["data"], after["data"]):
        np.testing.assert_array_equal(decode(a["z"]), decode(b["z"]))
        assert a.get("x") == b.get("x")  # (the labels: on the first panel only)
    assert after["data"][0]["x"] == before["data"][0]["x"]
    assert dict(fresh.query_params) == params


def test_invalid_url_values_fall_back_with_notice():
    at = start(h="5", L="abc", layer="9", mask="sideways", T="100000")
    notes = " ".join(w.value for w in at.warning)
    for key in ("h=", "L=", "layer=", "mask=", "T="):
        assert key in notes, notes
    assert at.session_state["h"] == 4 and at.session_state["L"] == 2 and at.session_state["layer"] == 0
    assert at.session_state["mask"] == "causal" and at.session_state["T"] == 64
    check_grid(figures(at)[0], engine()[0], 0, True)
    # heads that do not divide d_model (valid number, wrong here) also fall back with a notice
    at = start(d=8, h=16)
    assert any("h=" in w.value for w in at.warning)
    assert at.session_state["h"] in state.valid_heads(8)


@pytest.mark.parametrize("page", ["pages/heads.py", "pages/overview.py", "pages/causal-vs-bidirectional.py"])
def test_empty_text_gives_a_friendly_message(page):
    at = start(page, text="   \n\t ")
    assert not figures(at)
    assert any("empty" in i.value for i in at.info)


def test_a_page_that_ends_early_still_syncs_the_url():
    """A page that stops at a message (empty box) still writes the box's value to the link: with
    st.stop() Streamlit dropped app.py's closing work, and a copied link kept the old sentence."""
    at = start(text="the cat sat")
    at.sidebar.text_input(key="text").set_value("").run()
    assert any("empty" in i.value for i in at.info)
    assert at.query_params["text"] == [""] or at.query_params["text"] == ""
    assert not figures(at)  # nor the first run's plotly.js prefetch chart


def test_long_and_odd_text():
    odd = "Hi 😀 你好 שלום \x07 <script>alert(1)</script> <img src=x onerror=alert(1)> "
    at = start(text="x")  # text via the widget: the URL keeps only short texts
    at.sidebar.text_input(key="text").set_value(odd + "word " * 2500).run()
    assert not errors(at)
    assert any("tokens" in w.value and "first 64" in w.value for w in at.warning)
    x = figures(at)[0]["data"][0]["x"]
    assert len(x) == 64
    joined = " ".join(x)
    assert "6:&lt; 7:script 8:&gt;" in joined and "<" not in joined and "😀" in joined and "你好" in joined
    assert "\\x07" in joined  # control characters made visible
    assert at.sidebar.text_input(key="text").value.startswith(odd)  # nothing typed is lost
    at.sidebar.text_input(key="text").set_value("a" * (state.MAX_TEXT_CHARS + 1)).run()
    assert any(f"{state.MAX_TEXT_CHARS:,} characters" in w.value for w in at.warning)


def test_overview_thumbnails_and_labels():
    at = start("pages/overview.py", L=3, h=2, d=32)
    tr, _ = engine(L=3, h=2, d=32)
    fig = figures(at)[0]
    heat = [t for t in fig["data"] if t["type"] == "heatmap"]
    assert len(heat) == 3 * 2
    titles = [a["text"] for a in fig["layout"]["annotations"]]
    for i, t in enumerate(heat):
        l, h = divmod(i, 2)
        w = tr.layers[l].attn.weights[0, h].numpy()
        z = decode(t["z"])
        np.testing.assert_allclose(np.nan_to_num(z), w, rtol=1e-5, atol=1e-6)
        p = label_head(w)
        mark = "≈" if p.borderline() else ""
        assert titles[i] == f"L{l} H{h}: " + (f"{p.kind} {mark}{p.score:.2f}" if p.kind != "other"
                                              else "other" + (f" {mark}{p.nearest}" if mark else ""))
        if i == 0:  # token labels on hover: sent once, on the first thumbnail (viz.attention.share_token_axes)
            assert heat[0]["x"] == heat[0]["y"] and len(heat[0]["x"]) == w.shape[0]
        else:  # the others' axes match the first's (one shared list of categories in plotly.js)
            assert "x" not in t and "y" not in t
            assert fig["layout"]["xaxis" + t["xaxis"][1:]]["matches"] == "x"
            assert fig["layout"]["yaxis" + t["yaxis"][1:]]["matches"] == "y"
    table = at.dataframe[0].value
    assert list(table["label"]) == [label_head(tr.layers[l].attn.weights[0, h].numpy()).kind
                                    for l in range(3) for h in range(2)]
    # Issue 21 point 8: the label follows from the scores shown beside it. Recomputed here from the
    # raw score columns and the thresholds: the label is the pattern with the largest score − threshold.
    kinds = list(THRESHOLDS)
    for _, row in table.iterrows():
        margins = {k: row[k] - THRESHOLDS[k] for k in kinds}
        best = max(margins, key=margins.get)
        assert row["decided by"] == best
        assert row["label"] == (best if margins[best] >= 0 else "other")
        assert row["margin"] == pytest.approx(margins[best], abs=1e-3)
        assert row["its threshold"] == THRESHOLDS[best]
        second = sorted(margins.values())[-2]
        assert row["runner-up margin"] == pytest.approx(second, abs=1e-3)
        assert (row["borderline"] == "≈") == (abs(margins[best]) < 0.05)
    caption = " ".join(c.value for c in at.caption)
    assert "title names the head and its label" in caption and "under each title" not in caption


def test_causal_vs_bidirectional_difference():
    at = start("pages/causal-vs-bidirectional.py", layer=1)
    tc, _ = engine(causal=True)
    tb, _ = engine(causal=False)
    fig = figures(at)[0]
    heat = [t for t in fig["data"] if t["type"] == "heatmap"]
    assert len(heat) == 3 * 4
    for h in range(4):
        wc, wb = tc.layers[1].attn.weights[0, h].numpy(), tb.layers[1].attn.weights[0, h].numpy()
        a, b, d = (decode(heat[3 * h + i]["z"]) for i in range(3))
        np.testing.assert_allclose(np.nan_to_num(a), wc, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, wb, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(d, wb - wc, rtol=1e-5, atol=1e-6)
        assert np.isnan(a).any() and not np.isnan(b).any()
    assert fig["layout"]["coloraxis2"]["cmid"] == 0
    # top-5 next-token probabilities at the last position
    bars = figures(at)[1]["data"]
    pc, pb = tc.probs[0, -1].numpy(), tb.probs[0, -1].numpy()
    top_c = set(np.argsort(-pc)[:5])
    vocab = models.fresh_tokenizer().vocab
    shown = [visible(v) for v in vocab]
    assert {shown[i] for i in top_c} <= set(bars[0]["x"])
    for name, p_c, p_b in zip(bars[0]["x"], decode(bars[0]["y"]), decode(bars[1]["y"])):
        i = shown.index(name)
        assert abs(p_c - pc[i]) < 1e-5 and abs(p_b - pb[i]) < 1e-5
    # a single head
    at.selectbox(key="cmp_head").set_value("2").run()
    assert len(figures(at)[0]["data"]) == 3


@pytest.mark.parametrize("mask_q", ["keys only", "keys and queries"])
def test_mask_lab_steps(mask_q):
    at = start("pages/mask-lab.py", ml_q=mask_q, ml_b=2, ml_head=1)
    texts = ["the cat sat on the mat .", "the keys to the cabinet are on the table .", "a dog ran ."]
    tok = models.fresh_tokenizer()
    encs = [tok.encode(t).ids for t in texts]
    T = max(map(len, encs))
    ids = torch.tensor([e + [tok.pad_id] * (T - len(e)) for e in encs])
    kpm = torch.tensor([[j < len(e) for j in range(T)] for e in encs])
    cfg = ModelConfig(vocab_size=len(tok), d_model=64, n_heads=4, n_layers=2, max_len=state.T_MAX)
    tr = Transformer(cfg, seed=0).trace(ids, causal=True, key_padding_mask=kpm,
                                        mask_padded_queries=mask_q == "keys and queries")
    figs = {f["layout"]["title"]["text"] if f["layout"].get("title") else str(i): f for i, f in enumerate(figures(at))}
    n = len(encs[2])
    combined = [f for f in figures(at) if f["data"][0].get("text") and "1 / 0" in str(f["layout"].get("title"))]
    z = [decode(f["data"][0]["z"]) for f in combined]  # pad1d, pad2d, look-ahead, combined
    pad = np.arange(T) < n
    np.testing.assert_array_equal(z[0][0], pad)
    pad2 = np.broadcast_to(pad, (T, T)) & (pad[:, None] if mask_q == "keys and queries" else True)
    np.testing.assert_array_equal(z[1].astype(bool), pad2)
    np.testing.assert_array_equal(z[2].astype(bool), np.tril(np.ones((T, T), bool)))
    np.testing.assert_array_equal(z[3], z[1] * z[2])  # combined = elementwise product
    at.radio(key="ml_form").set_value("0 / −∞").run()  # the same masks in additive form
    add = [f for f in figures(at) if "−∞" in str(f["layout"].get("title"))]
    assert len(add) == 4 and "−∞" in str(add[3]["data"][0]["text"])
    np.testing.assert_array_equal(decode(add[3]["data"][0]["z"]), z[3])  # 0 where 1, −∞ where 0
    w = tr.layers[0].attn.weights[2, 1].numpy()
    soft = figs["softmax (attention weights)"]
    ws = decode(soft["data"][0]["z"])
    assert not np.isnan(w).any()
    np.testing.assert_allclose(np.nan_to_num(ws), w, rtol=1e-5, atol=1e-6)
    if mask_q == "keys and queries":
        assert (w[n:] == 0).all() and not np.isnan(ws[n:]).any()  # fully masked rows: zeros, shown, never NaN
        assert any("Fully masked" in x.value for x in at.warning)
    else:
        assert not any("Fully masked" in x.value for x in at.warning)
    grid = [f for f in figures(at) if "all heads" in str(f["layout"].get("title"))][0]
    nanmaps = [np.isnan(decode(t["z"])) for t in grid["data"]]
    assert len(nanmaps) == 4 and all((m == nanmaps[0]).all() for m in nanmaps)  # same mask in every head


def test_npz_export_has_contract_keys():
    tr, labels = engine()
    at = start()
    assert any(b.proto.label == "Whole trace (.npz)" for b in at.get("download_button"))
    src = models.ModelSource("fresh", "fresh", __import__("json").dumps(
        ModelConfig(vocab_size=len(models.fresh_tokenizer()), d_model=64, n_heads=4, n_layers=2,
                    max_len=state.T_MAX).to_dict(), sort_keys=True), 0)
    run = runs.get_run(src, state.DEFAULT_TEXT, True, 64)
    from ui.show import trace_npz
    z = np.load(io.BytesIO(trace_npz(run.trace, **run.export_extras())))
    assert {"layers.0.attn.weights", "layers.1.ln2.var", "embeddings.sum", "probs", "token_ids"} <= set(z.files)
    np.testing.assert_allclose(z["layers.1.attn.weights"], tr.layers[1].attn.weights.numpy(), rtol=1e-6)
    assert list(z["token_labels"]) == labels


@pytest.mark.parametrize("page", ["pages/heads.py", "pages/overview.py", "pages/causal-vs-bidirectional.py",
                                  "pages/mask-lab.py"])
def test_every_heatmap_has_csv_and_page_has_npz(page):
    at = start(page)
    buttons = [b.proto.label for b in at.get("download_button")]
    if page == "pages/mask-lab.py":  # one CSV for the whole page (issue 21, point 12)
        assert buttons.count("CSV of every matrix on this page") == 1 and len(figures(at)) >= 1
    else:
        assert buttons.count("CSV of these numbers") == len(figures(at)) >= 1
    assert any(b.endswith("(.npz)") for b in buttons), buttons
    for el in at.get("plotly_chart"):  # PNG from the chart itself: the modebar's camera button
        cfg = json.loads(el.proto.config)
        assert cfg["toImageButtonOptions"]["format"] == "png"
        assert "toImage" not in cfg.get("modeBarButtonsToRemove", []) and cfg.get("displayModeBar", True)


def test_batch_npz_has_contract_keys():
    from ui.show import trace_npz
    at = start("pages/mask-lab.py")
    texts = ("the cat sat on the mat .", "a dog ran .")
    src = models.ModelSource("fresh", "fresh", json.dumps(
        ModelConfig(vocab_size=len(models.fresh_tokenizer()), d_model=64, n_heads=4, n_layers=2,
                    max_len=state.T_MAX).to_dict(), sort_keys=True), 0)
    run = runs.get_batch_run(src, texts, True, True, 64)
    z = np.load(io.BytesIO(trace_npz(run.trace, **run.export_extras())))
    w = z["layers.0.attn.weights"]
    assert w.shape == (2, 4, run.T, run.T)
    n = len(models.fresh_tokenizer().encode(texts[1]).ids)
    assert n < run.T
    assert (w[1, :, n:] == 0).all() and not np.isnan(w).any()  # padded query rows: zeros, never NaN
    np.testing.assert_array_equal(z["key_padding_mask"][1], np.arange(run.T) < n)


def test_max_length_above_the_models_limit_says_so():
    at = app_test()
    at.query_params["T"] = "200"  # valid for fresh weights (256 positions), not for the shipped model (128)
    at.run()
    assert not errors(at)
    metas = models.shipped_checkpoints()
    max_len = metas[models.DEFAULT_SOURCE]["config"]["max_len"] if models.DEFAULT_SOURCE in metas else state.T_MAX
    if max_len < 200:  # the shipped model has fewer positions: clamped, with a notice
        assert at.session_state["T"] == max_len
        assert any("more than this model allows" in i.value for i in at.sidebar.info)


def test_invalid_tab_in_link_falls_back_with_notice():
    at = start(head_tab="Bogus", detail="true")
    assert at.session_state["head_tab"] == "Heatmap"
    assert any("head_tab=" in w.value for w in at.warning)
    assert len(figures(at)) == 2  # grid + the detail heatmap


def test_overview_shows_a_pattern_planted_at_one_layer_and_head(monkeypatch):
    """Plant a previous-token head at layer 1, head 2 (2 layers x 4 heads: not square) by patching
    the cached trace the page reads; the overview must show it in exactly that cell."""
    import dataclasses

    real_get_run = runs.get_run
    L_, H_, PL, PH = 2, 4, 1, 2

    def planted(source, text, causal, max_len, layer=None):  # the whole trace, whatever a page reads
        run = real_get_run(source, text, causal, max_len)
        attn = run.trace.layers[PL].attn
        w = attn.weights.copy()  # (1, H, T, T)
        T = w.shape[-1]
        prev = np.zeros((T, T))
        prev[0, 0] = 1.0
        prev[np.arange(1, T), np.arange(T - 1)] = 1.0
        w[0, PH] = prev
        layers = list(run.trace.layers)
        layers[PL] = dataclasses.replace(layers[PL], attn=dataclasses.replace(attn, weights=w))
        return dataclasses.replace(run, trace=dataclasses.replace(run.trace, layers=tuple(layers)))

    monkeypatch.setattr(runs, "get_run", planted)
    at = start("pages/overview.py", L=L_, h=H_, d=32)
    fig = figures(at)[0]
    heat = [t for t in fig["data"] if t["type"] == "heatmap"]
    assert len(heat) == L_ * H_
    titles = [a["text"] for a in fig["layout"]["annotations"]][:L_ * H_]
    cell = PL * H_ + PH  # row-major: rows = layers, columns = heads
    assert heat[cell]["name"] == f"L{PL} H{PH}"
    z = decode(heat[cell]["z"])
    T = z.shape[-1]
    assert T > 4
    np.testing.assert_array_equal(np.nan_to_num(z)[np.arange(1, T), np.arange(T - 1)], 1.0)
    # a title wider than its thumbnail breaks after the head's name (issue 21 point 7)
    assert titles[cell].replace("<br>", ": ", 1) == f"L{PL} H{PH}: previous-token 1.00"
    # exactly that cell: no other thumbnail and no other table row says previous-token
    assert [i for i, t in enumerate(titles) if "previous-token" in t] == [cell]
    table = at.dataframe[0].value
    hits = table[table["label"] == "previous-token"]
    assert list(zip(hits["layer"], hits["head"])) == [(PL, PH)]


@pytest.mark.parametrize("src, limit", [(FRESH, 256), ("causal-lm", 128)])
def test_truncation_notice_at_the_toy_models_limit(src, limit):
    """Issue 33: at the model's limit the cut-text notice says it is the most the model reads, and
    below it that the limit can be raised up to the model's positions (fresh weights: 256, the
    shipped toy causal LM: 128), never "Raise it" at the limit."""
    at = app_test()
    at.query_params["src"] = src
    at.query_params["T"] = str(limit)
    at.query_params["text"] = "the cat sat on the mat " * 60  # 360 words
    at.run()
    assert not errors(at), errors(at)
    notice = " ".join(w.value for w in at.warning)
    assert f"the model sees the first {limit} (max sequence length). That is the most this model reads: it has " \
           f"{limit} positions." in notice and "Raise it" not in notice
    at.sidebar.slider(key="T").set_value(limit // 2).run()
    notice = " ".join(w.value for w in at.warning)
    assert f"the model sees the first {limit // 2} (max sequence length). Raise it in the sidebar (up to {limit})." \
           in notice
