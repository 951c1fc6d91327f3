import re

import numpy as np
import pytest

from classroom.mask_lab import mask_steps

from classroom.causal_vs_bidirectional import topk_change
from training.batching import pad_batch
from tests.helpers import axis_prop, decode
from viz.attention import compare_grid, grid_shape, head_grid, head_heatmap, mask_heatmap, overview_grid, topk_bars
from viz.heads import token_lines_html

RNG = np.random.default_rng(0)


def causal_weights(H, T):
    s = RNG.normal(size=(H, T, T))
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def test_head_grid_panels_values_and_shared_scale():
    w = causal_weights(6, 5)
    fig = head_grid(w, list("abcde"), allowed=np.tril(np.ones((5, 5), bool)))
    assert len(fig.data) == 6
    for h, tr in enumerate(fig.data):
        z = np.asarray(tr.z)
        np.testing.assert_array_equal(np.isnan(z), ~np.tril(np.ones((5, 5), bool)))
        np.testing.assert_allclose(np.nan_to_num(z), w[h], rtol=1e-6)
        assert (tr.coloraxis or fig.layout.template.data.heatmap[0].coloraxis) == "coloraxis"
    ca = fig.layout.coloraxis
    assert (ca.cmin, ca.cmax) == (0.0, 1.0) and ca.colorscale[0][1] != ca.colorscale[-1][1]
    assert grid_shape(6, 5)[0] == 3 and grid_shape(4, 5)[0] == 2
    # query labels only in the left column (3 columns: panels 0 and 3), so a long token never
    # overlaps the panel to its left; key labels under the lowest panel of each column
    ys = [axis_prop(fig.layout, f"yaxis{'' if i == 0 else i + 1}", "showticklabels") for i in range(6)]
    assert [y is not False for y in ys] == [True, False, False, True, False, False]
    xs = [axis_prop(fig.layout, f"xaxis{'' if i == 0 else i + 1}", "showticklabels") for i in range(6)]
    assert [x is not False for x in xs] == [False, False, False, True, True, True]
    # 5 heads in 3 columns: column 2 ends in the first row; key labels there would sit mid-grid,
    # between the panels (issue 21, point 7), so only the bottom row has them
    xs5 = head_grid(causal_weights(5, 5), list("abcde")).layout
    assert [axis_prop(xs5, f"xaxis{'' if i == 0 else i + 1}", "showticklabels") is not False for i in range(5)] == \
        [False, False, False, True, True]
    # no fixed font colour: ticks and colour bar follow the light or dark theme (issue 8)
    assert fig.layout.font.color is None and fig.layout.coloraxis.colorbar.tickfont.color is None


def test_head_grid_sends_float32_typed_arrays():
    fig = head_grid(causal_weights(2, 4), list("abcd"))
    spec = fig.to_plotly_json()
    z = spec["data"][0]["z"]
    assert z["dtype"] == "f4"  # base64 float32, not a list of floats
    assert decode(z).shape == (4, 4)


def test_head_grid_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"\(H, Tq, Tk\)"):
        head_grid(np.zeros((3, 3)), list("abc"))
    with pytest.raises(ValueError, match="labels"):
        head_grid(np.zeros((1, 3, 3)), list("ab"))
    with pytest.raises(ValueError, match="subtitles"):
        head_grid(np.zeros((2, 3, 3)), list("abc"), subtitles=["x"])


def test_head_heatmap_masked_and_cell_text():
    w = causal_weights(1, 3)[0]
    fig = head_heatmap(w, list("abc"), allowed=np.tril(np.ones((3, 3), bool)), cell_text=np.full((3, 3), "x"))
    assert np.isnan(np.asarray(fig.data[0].z)[0, 2])
    assert fig.data[0].texttemplate == "%{text}"
    assert fig.layout.plot_bgcolor == "#d9d9d9"


def test_compare_grid_difference_and_diverging_scale():
    a, b = causal_weights(2, 4), causal_weights(2, 4)
    fig = compare_grid(a, b, list("abcd"), allowed_a=np.tril(np.ones((4, 4), bool)))
    assert len(fig.data) == 6
    np.testing.assert_allclose(np.asarray(fig.data[2].z), b[0] - a[0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(fig.data[5].z), b[1] - a[1], rtol=1e-6)
    assert fig.data[2].coloraxis == "coloraxis2" and fig.layout.coloraxis2.cmid == 0
    assert fig.layout.coloraxis2.cmin == -fig.layout.coloraxis2.cmax
    assert len(compare_grid(a, b, list("abcd"), heads=[1]).data) == 3
    with pytest.raises(ValueError):
        compare_grid(a, b[:1], list("abcd"))


def test_compare_grid_labels_only_on_the_outer_panels():
    """Issue 21 point 7: 'on causal vs bidirectional one panel's row labels run into the next panel'.
    Query labels only left of the first column, key labels only under the last row; a long
    sentence keeps every n-th label instead of none."""
    a = b = causal_weights(2, 6)
    lay = compare_grid(a, b, list("abcdef")).layout
    ys = [axis_prop(lay, f"yaxis{'' if i == 0 else i + 1}", "showticklabels") for i in range(6)]
    xs = [axis_prop(lay, f"xaxis{'' if i == 0 else i + 1}", "showticklabels") for i in range(6)]
    assert ys == [True, False, False, True, False, False]
    assert xs == [False, False, False, True, True, True]
    assert lay.margin.l > 10  # room for the row labels in the margin, not between panels
    long = compare_grid(causal_weights(1, 62), causal_weights(1, 62), [f"w{i}" for i in range(62)]).layout
    # which of the 62 labels are drawn is Plotly's choice from the axis's length (viz.common.auto_ticks):
    # no fixed list of tick values, labels on, the key labels free to turn upright when slanted ones touch
    assert axis_prop(long, "yaxis", "tickmode") == "auto" and axis_prop(long, "yaxis", "tickvals") is None
    assert axis_prop(long, "yaxis", "showticklabels") is not False
    assert axis_prop(long, "xaxis", "autotickangles") == [-75]  # slanted enough never to touch (viz.common.auto_ticks)


def test_overview_titles_break_when_wider_than_their_thumbnail():
    """'L0 H0: previous-token 0.46' over a quarter-width thumbnail ran into its neighbours at
    1280 px (screenshot audit, issue 21 point 7): two lines, with the room above for them."""
    w = causal_weights(4, 5)[None].repeat(2, 0)
    names = [f"L{l} H{h}: previous-token 0.46" for l in range(2) for h in range(4)]
    fig = overview_grid(w, subtitles=names)
    assert all(a.text.startswith(f"L{i // 4} H{i % 4}<br>") for i, a in enumerate(fig.layout.annotations[:8]))
    one_line = overview_grid(w[:, :2], subtitles=[n for n in names if " H0" in n or " H1" in n])
    assert "<br>" not in one_line.layout.annotations[0].text  # two wide thumbnails: one line fits
    assert fig.layout.margin.t > one_line.layout.margin.t


def test_overview_grid_counts():
    w = np.stack([causal_weights(3, 4), causal_weights(3, 4)])
    fig = overview_grid(w)
    assert len(fig.data) == 6
    np.testing.assert_allclose(np.asarray(fig.data[4].z), w[1, 1], rtol=1e-6)
    assert [a.text for a in fig.layout.annotations][:2] == ["L0 H0", "L0 H1"]


def test_mask_heatmap_text_and_colours():
    fig = mask_heatmap(np.array([[1.0, 0.0]]), ["r"], ["a", "b"])
    assert list(fig.data[0].text[0]) == ["1", "0"]
    fig = mask_heatmap(np.array([[0.0, -np.inf]]), ["r"], ["a", "b"], additive=True)
    assert list(fig.data[0].text[0]) == ["0", "−∞"]
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), [[1, 0]])


def test_lines_opacity_is_weight_and_escaped():
    w = causal_weights(1, 4)[0]
    html = token_lines_html(w, ["<script>alert(1)</script>", "b", "c", "d"])
    found = re.findall(r'data-q="(\d+)" data-k="(\d+)" data-w="([0-9.]+)"[^>]*opacity: ([0-9.]+)"', html)
    assert len(found) == int((w >= 0.01).sum())
    for q, k, val, op in found:
        assert abs(float(val) - w[int(q), int(k)]) < 1e-4 and val == op
        assert int(k) <= int(q)  # nothing drawn to masked (future) keys
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<script" not in html.lower().replace("&lt;script", "")
    # st.html sanitises with DOMPurify's HTML profile: SVG would be stripped, so plain HTML only
    assert "<svg" not in html and "<line" not in html
    # geometry: each line starts at the query's row and ends at the key's row
    geometry = list(re.finditer(r'data-q="(\d+)" data-k="(\d+)"[^>]*top: ([0-9.]+)px; width: ([0-9.]+)px; '
                                r'transform: rotate\((-?[0-9.]+)deg\)', html))
    assert len(geometry) == len(found) == 10  # every drawn line (4 tokens, causal: 4+3+2+1) is checked
    for m in geometry:
        q, k, top, length, ang = int(m[1]), int(m[2]), *map(float, m.group(3, 4, 5))
        dy = length * np.sin(np.radians(ang))
        assert abs(dy - 26 * (k - q)) < 0.2
    with pytest.raises(ValueError):
        token_lines_html(np.zeros((2, 3)), ["a", "b"])


def test_topk_bars():
    fig = topk_bars(["a", "<b>"], [0.1, 0.2], [0.3, 0.4])
    assert list(fig.data[1].x) == ["a", "&lt;b&gt;"]
    np.testing.assert_allclose(np.asarray(fig.data[1].y), [0.3, 0.4], rtol=1e-6)


def test_pad_batch_and_mask_steps():
    b = pad_batch([[5, 6, 7], [8]], pad_id=0)
    assert b.ids.tolist() == [[5, 6, 7], [8, 0, 0]] and b.lengths == [3, 1]
    assert b.key_padding_mask.tolist() == [[True, True, True], [True, False, False]]
    s = mask_steps(b.key_padding_mask, 1, causal=True, mask_queries=False)
    np.testing.assert_array_equal(s.pad_1d, [1, 0, 0])
    np.testing.assert_array_equal(s.pad_2d, [[1, 0, 0]] * 3)
    np.testing.assert_array_equal(s.combined, s.pad_2d * s.look_ahead)
    assert np.isneginf(s.combined_add[0, 1]) and s.combined_add[2, 0] == 0
    assert not s.fully_masked.any()
    q = mask_steps(b.key_padding_mask, 1, causal=True, mask_queries=True)
    assert q.fully_masked.tolist() == [False, True, True]
    with pytest.raises(ValueError):
        pad_batch([[1], []], pad_id=0)


def test_topk_change_union_and_order():
    pa = np.array([0.5, 0.3, 0.1, 0.1, 0.0])
    pb = np.array([0.0, 0.1, 0.1, 0.1, 0.7])
    rows = topk_change(pa, pb, k=1)
    assert [r.token_id for r in rows] == [4, 0]
    assert rows[0].delta == pytest.approx(0.7)


def test_unvalidated_figures_are_valid_plotly():
    """The attention figures skip plotly.py's validation for speed (viz.common.figure): validating
    them here catches a misspelt property, a bad value, or a colour-scale name plotly.js lacks."""
    import plotly.graph_objects as go

    from viz.common import figure

    w = causal_weights(4, 5)
    allowed = np.tril(np.ones((5, 5), bool))
    figs = [head_grid(w, list("abcde"), allowed=allowed, title="t"), head_heatmap(w[0], list("abcde"), title="t"),
            head_heatmap(w[0], list("abcde"), colorscale="RdBu_r", zmid=0.0, cell_text=np.full((5, 5), "x")),
            overview_grid(np.stack([w, w]), allowed=allowed), compare_grid(w, w[::-1], list("abcde")),
            mask_heatmap(np.where(allowed, 0.0, -np.inf), list("abcde"), list("abcde"), additive=True)]
    for fig in figs:
        spec = fig.to_plotly_json()
        go.Figure(spec)  # raises ValueError on any invalid property or value
        for t in spec["data"]:
            assert t.get("colorscale") is None or not isinstance(t["colorscale"], str)  # explicit stops
        for k, v in spec["layout"].items():
            assert v is not None, k  # None (= "unset") never reaches the browser as null
            if k.startswith("coloraxis"):
                assert not isinstance(v["colorscale"], str)
    # and the check itself can fail: a misspelt property is caught
    with pytest.raises(ValueError):
        go.Figure(figure([dict(type="heatmap", z=[[1]], colorscal="Cividis")], {}).to_plotly_json())


def test_attention_figures_carry_a_minimal_template():
    """Not plotly's 3.4 KB default template on every rerun; Streamlit's theme is merged into it."""
    import json

    import plotly.io as pio

    from viz.common import MINIMAL_TEMPLATE

    fig = head_grid(causal_weights(4, 5), list("abcde"))
    spec = json.loads(pio.to_json(fig.to_dict(), validate=False))  # what st.plotly_chart sends
    tpl = spec["layout"]["template"]
    # the minimal template, plus what every axis / panel title of the grid shares (hoist_shared)
    assert set(tpl) <= {"layout", "data"} and MINIMAL_TEMPLATE["layout"].items() <= tpl["layout"].items()
    assert set(tpl["layout"]) <= {"hoverlabel", "xaxis", "yaxis", "annotationdefaults"}
    assert set(tpl.get("data", {})) <= {"heatmap"}
    assert len(json.dumps(tpl)) < 700


# ---------------------------------------------------------------- "Hide the sink" (issue 35)
def test_hidden_keys_blank_their_columns_in_their_own_colour():
    from viz.attention import HIDDEN_COLOR
    w = causal_weights(4, 5)
    allowed = np.tril(np.ones((5, 5), bool))
    hidden = np.array([True, False, False, False, True])  # two runs: key 0 and key 4
    labels = list("abcde")
    figs = {"grid": (head_grid(w, labels, allowed=allowed, hidden_keys=hidden), 4),
            "one": (head_heatmap(w[0], labels, allowed=allowed, hidden_keys=hidden), 1),
            "overview": (overview_grid(w[None], allowed=allowed, labels=labels, hidden_keys=hidden), 4),
            "compare": (compare_grid(w, w * 0.5, labels, allowed_a=allowed, allowed_b=allowed, hidden_keys=hidden), 12)}
    for name, (fig, panels) in figs.items():
        heat = [t for t in fig.data if t.type == "heatmap"]
        assert len(heat) == panels, name
        for tr in heat:
            z = np.asarray(tr.z, dtype=float)
            assert np.isnan(z[:, hidden]).all(), name
            assert np.isfinite(z[:, 1:4][allowed[:, 1:4]]).all(), name  # the other allowed cells keep a value
        shapes = fig.layout.shapes
        assert len(shapes) == 2 * panels, name  # one rectangle per run of hidden columns per panel
        assert {(s.x0, s.x1) for s in shapes} == {(-0.5, 0.5), (3.5, 4.5)}, name
        assert all(s.fillcolor == HIDDEN_COLOR and s.layer == "below" for s in shapes), name
        assert len({(s.xref, s.yref) for s in shapes}) == panels, name
    # without hidden keys nothing changes: no shapes, the same colour bar
    plain = head_grid(w, labels, allowed=allowed)
    assert not plain.layout.shapes and plain.layout.coloraxis.colorbar.title.text == "weight"
    assert "sink hidden" in figs["grid"][0].layout.coloraxis.colorbar.title.text
    with pytest.raises(ValueError, match="hidden_keys"):
        head_grid(w, labels, hidden_keys=np.ones(4, bool))
