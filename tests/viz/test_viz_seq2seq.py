"""viz.encoder_decoder.py: figure data equals the arrays passed in, masked cells are NaN, the reference
alignment is drawn where it should be, labels are escaped, bad shapes raise ValueError."""
import numpy as np
import pytest

from tests.helpers import axis_prop, decode
from viz.encoder_decoder import alignment_links, attention_panel, cross_attention_grid, step_bars, step_labels, three_attentions

RNG = np.random.default_rng(1)


def softmax_rows(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


SRC = ["the", "big", "dog", "sees", "a", "cat"]
DEC = ["<bos>", "woru", "gran", "ta", "miso", "ke", "vidu"]
OUT = DEC[1:] + ["<eos>"]


def test_step_labels():
    assert step_labels(["<bos>", "woru"], ["woru", "<eos>"]) == ["<bos>→woru", "woru→<eos>"]
    with pytest.raises(ValueError, match="one produced token"):
        step_labels(["<bos>"], ["a", "b"])


def test_cross_attention_grid_values_gold_and_labels():
    w = softmax_rows(RNG.normal(size=(4, 7, 6)))
    gold = [2, 1, 0, 5, 4, 3, None]
    fig = cross_attention_grid(w, step_labels(DEC, OUT), SRC, gold=gold)
    heat = [t for t in fig.data if t.type == "heatmap"]
    marks = [t for t in fig.data if t.type == "scatter"]
    assert len(heat) == 4 and len(marks) == 4  # one reference overlay per head panel
    for h, t in enumerate(heat):
        np.testing.assert_allclose(np.asarray(t.z), w[h], rtol=1e-6)
    # the labels travel once, on the first panel; the other panels' axes match its axes (they share
    # its categories in plotly.js: viz.attention.share_token_axes)
    assert list(heat[0].x) == [f"{j}:{s}" for j, s in enumerate(SRC)]
    assert heat[0].y[0] == "0:&lt;bos&gt;→woru"  # escaped: Plotly would render <bos> as a tag
    assert all(t.x is None and t.y is None for t in heat[1:])
    assert all(fig.layout["xaxis" + t.xaxis[1:]].matches == "x" and fig.layout["yaxis" + t.yaxis[1:]].matches == "y"
               for t in heat[1:])
    # the markers sit exactly on the gold cells (row label, column label); None is skipped
    m = marks[0]
    assert list(m.x) == [f"{g}:{SRC[g]}" for g in gold if g is not None]
    assert list(m.y) == [heat[0].y[i] for i, g in enumerate(gold) if g is not None]
    assert [(m_.xaxis, m_.yaxis) for m_ in marks] == [(t.xaxis or "x", t.yaxis or "y") for t in heat]  # one per panel
    # y labels only in the first grid column (longer labels would overlap the panel on the left)
    assert axis_prop(fig.layout, "yaxis2", "showticklabels") is False
    assert axis_prop(fig.layout, "yaxis", "showticklabels") is not False


def test_attention_panel_masked_cells_are_nan():
    w = softmax_rows(np.where(np.tril(np.ones((5, 5), bool)), RNG.normal(size=(5, 5)), -np.inf))
    allowed = np.tril(np.ones((5, 5), bool))
    fig = attention_panel(w, DEC[:5], DEC[:5], allowed=allowed, title="causal")
    z = np.asarray(fig.data[0].z, dtype=float)
    assert np.isnan(z).sum() == 10
    np.testing.assert_array_equal(np.isnan(z), ~allowed)
    np.testing.assert_allclose(z[allowed], w[allowed], rtol=1e-6)


def test_three_attentions_panels_share_one_scale():
    enc = softmax_rows(RNG.normal(size=(6, 6)))
    cross = softmax_rows(RNG.normal(size=(7, 6)))
    dec = softmax_rows(np.where(np.tril(np.ones((7, 7), bool)), RNG.normal(size=(7, 7)), -np.inf))
    causal = np.tril(np.ones((7, 7), bool))
    fig = three_attentions([("enc", enc, SRC, SRC, None), ("cross", cross, DEC, SRC, None),
                            ("dec", dec, DEC, DEC, causal)], gold=[2, 1, 0, 5, 4, 3])
    heat = [t for t in fig.data if t.type == "heatmap"]
    assert [np.asarray(t.z).shape for t in heat] == [(6, 6), (7, 6), (7, 7)]
    np.testing.assert_allclose(np.asarray(heat[0].z), enc, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(heat[1].z), cross, rtol=1e-6)
    assert np.isnan(np.asarray(heat[2].z, dtype=float)).sum() == 21  # 7*6/2 future cells blank
    assert {t.coloraxis for t in heat} == {"coloraxis"}
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0.0, 1.0)
    scat = [t for t in fig.data if t.type == "scatter"]
    assert len(scat) == 1 and scat[0].xaxis == "x2"  # the reference alignment only on the cross panel
    # typed arrays (base64 float32) reach the browser
    spec = fig.to_plotly_json()
    assert decode(spec["data"][0]["z"]).shape == (6, 6)
    with pytest.raises(ValueError, match="column labels"):
        three_attentions([("enc", enc, SRC, SRC[:3], None)])


def test_step_bars_values_colours_and_gold():
    w = np.array([0.05, 0.1, 0.7, 0.05, 0.05, 0.05], np.float32)
    fig = step_bars(w, ["<b>x</b>", "big", "dog", "sees", "a", "cat"], gold=1, title="step")
    bar = fig.data[0]
    np.testing.assert_allclose(np.asarray(bar.y), w)
    assert bar.x[0] == "0:&lt;b&gt;x&lt;/b&gt;"
    colours = list(bar.marker.color)
    assert colours[2] != colours[0] and colours.count(colours[2]) == 1  # the argmax stands out
    assert list(bar.marker.line.width) == [0, 4, 0, 0, 0, 0]  # the gold word outlined
    assert list(bar.text)[2] == "0.70"
    with pytest.raises(ValueError, match="finite"):
        step_bars(np.array([np.nan, 1.0]), ["a", "b"])
    with pytest.raises(ValueError, match="labels"):
        step_bars(w, ["a"])


def test_alignment_links_draws_strong_links_and_gold():
    w = np.zeros((3, 4), np.float32)
    w[0, 2], w[0, 1] = 0.85, 0.15  # the 0.15 link is below min_weight
    w[1, 0] = 1.0
    w[2, 3] = 1.0
    fig = alignment_links(w, ["a", "b", "c", "<i>d</i>"], ["x", "y", "z"], gold=[2, 1, None])
    lines = [t for t in fig.data if t.mode == "lines"]
    gold_lines = [t for t in lines if t.line.dash == "dash"]
    att_lines = [t for t in lines if t.line.dash != "dash"]
    assert len(att_lines) == 3 and len(gold_lines) == 2
    words = [t for t in fig.data if t.mode == "markers+text"]
    assert list(words[0].text) == ["a", "b", "c", "&lt;i&gt;d&lt;/i&gt;"] and list(words[1].text) == ["x", "y", "z"]
    # link (output 0 -> source 2) runs from output 0's x to source 2's x
    sx, tx = np.asarray(words[0].x), np.asarray(words[1].x)
    assert any(np.allclose(t.x, [tx[0], sx[2]]) for t in att_lines)
    assert any(np.allclose(t.x, [tx[1], sx[1]]) for t in gold_lines)  # gold of output 1 is source 1
    with pytest.raises(ValueError):
        alignment_links(w, ["a"], ["x", "y", "z"])


def test_three_attentions_shared_rows_draw_no_labels_and_a_narrow_gap():
    """The decoder self-attention has the cross-attention's rows: it draws none of its own, so the
    gap before it is narrow and the panels keep room for one key label per column (screenshot
    audit at 1280 px, issue 21 point 7)."""
    enc = softmax_rows(RNG.normal(size=(6, 6)))
    cross = softmax_rows(RNG.normal(size=(7, 6)))
    dec = softmax_rows(RNG.normal(size=(7, 7)))
    rows = [f"{a}→{b}" for a, b in zip(DEC, DEC[1:] + ["<eos>"])]
    panels = [("Encoder self-attn (bidirectional)", enc, SRC, SRC, None), ("Cross-attention (dec → enc)", cross, rows, SRC, None),
              ("Decoder self-attn (causal)", dec, DEC, DEC, None)]
    fig = three_attentions(panels, shared_rows=[2])
    lay = fig.layout
    assert lay.yaxis.showticklabels is not False and lay.yaxis2.showticklabels is not False
    assert lay.yaxis3.showticklabels is False
    gap1, gap2 = lay.xaxis2.domain[0] - lay.xaxis.domain[1], lay.xaxis3.domain[0] - lay.xaxis2.domain[1]
    assert gap2 < 0.05 < gap1
    widths = {round(d[1] - d[0], 6) for d in (lay.xaxis.domain, lay.xaxis2.domain, lay.xaxis3.domain)}
    assert len(widths) == 1 and lay.xaxis3.domain[1] <= 1.0
    for c, ann in enumerate(lay.annotations[:3]):  # each title centred over its panel
        dom = lay["xaxis" + ("" if c == 0 else str(c + 1))].domain
        assert abs(ann.x - (dom[0] + dom[1]) / 2) < 1e-9
    unshared = three_attentions(panels).layout
    assert unshared.yaxis3.showticklabels is not False
    assert unshared.xaxis3.domain[1] - unshared.xaxis3.domain[0] < lay.xaxis3.domain[1] - lay.xaxis3.domain[0]
    with pytest.raises(ValueError, match="shares the rows"):
        three_attentions([panels[0], panels[1]], shared_rows=[1])


def test_alignment_links_and_three_attentions_follow_the_dark_theme():
    """Dark theme (screenshot audit): the links chart forced a white plot under the theme's light
    token text (unreadable), and the three attentions drew white grid lines across masked cells."""
    w = softmax_rows(RNG.normal(size=(3, 4)))
    fig = alignment_links(w, ["a", "b", "c", "d"], ["x", "y", "z"])
    assert fig.layout.plot_bgcolor in (None, "rgba(0,0,0,0)") and fig.layout.font.color is None
    enc = softmax_rows(RNG.normal(size=(6, 6)))
    three = three_attentions([("enc", enc, SRC, SRC, None)]).layout
    assert three.xaxis.showgrid is False and three.yaxis.showgrid is False
