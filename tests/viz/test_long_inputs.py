"""Long inputs (issue 33): 512 and 1,024 tokens. The grids draw blocks of tokens whose values are
exactly what the docstrings say (a mean over a block's queries of their total weight on its keys),
the payload stays small (the overview at 512 tokens sent 100 MB: "RangeError: Invalid string
length" in the browser), the model view draws a window of tokens with the rest summed, and the
matrix charts send float32 data as float32."""
from __future__ import annotations

import json
import re

import numpy as np
import plotly.io as pio
import pytest

from viz.attention import GRID_MAX_CELLS, THUMB_MAX_CELLS, compare_grid, head_grid, overview_grid
from viz.charts import matrix_heatmap, topk_heatmap
from viz.common import EXACT_MAX_T, block_labels, block_step, block_weights, masked_z
from viz.model_view import LEVELS, model_view_html, multi_head_lines, token_window


def softmax_rows(g, shape, causal=False):
    x = g.normal(size=shape) * 3
    if causal:
        T = shape[-1]
        x = np.where(np.tril(np.ones((T, T), bool)), x, -np.inf)
    e = np.exp(x - x.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def spec_bytes(fig) -> int:
    return len(pio.to_json(fig, validate=False))


def test_block_step_is_exact_up_to_128_tokens():
    assert [block_step(T, 128) for T in (2, 64, 128, 129, 256, 512, 1024)] == [1, 1, 1, 2, 2, 4, 8]
    assert block_step(512, 64) == 8 and block_step(1000, 64) == 16 and EXACT_MAX_T == 128


def test_block_weights_are_mean_row_totals_and_rows_still_sum_to_one():
    g = np.random.default_rng(0)
    T, s = 10, 4  # blocks 0-3, 4-7, 8-9 (a short last block)
    w = softmax_rows(g, (2, T, T), causal=True)
    allowed = np.tril(np.ones((T, T), bool))
    z = block_weights(w, s, allowed)
    assert z.shape == (2, 3, 3) and z.dtype == np.float32
    for h in range(2):
        for I, (a, b) in enumerate([(0, 4), (4, 8), (8, 10)]):
            for J, (c, d) in enumerate([(0, 4), (4, 8), (8, 10)]):
                want = w[h, a:b, c:d].astype(np.float64).sum(axis=1).mean()
                if not allowed[a:b, c:d].any():
                    assert np.isnan(z[h, I, J])  # every cell masked: grey, never a colour
                else:
                    assert z[h, I, J] == pytest.approx(want, abs=1e-7)
    np.testing.assert_allclose(np.nansum(z, axis=-1), 1.0, atol=1e-6)  # every query's weights sum to 1
    assert np.isnan(z[:, 0, 1:]).all() and not np.isnan(z[:, 1, 0]).any()
    np.testing.assert_array_equal(block_weights(w, 1, allowed), masked_z(w, allowed))  # step 1: exact
    with pytest.raises(ValueError):
        block_weights(w, 0)


def test_block_labels_name_positions_and_first_token():
    labels = ["[CLS]", "the", "<b>", "x", "y"]
    assert block_labels(labels, 2) == ["0–1:[CLS]", "2–3:&lt;b&gt;", "4–4:y"]
    assert block_labels(labels, 1) == ["0:[CLS]", "1:the", "2:&lt;b&gt;", "3:x", "4:y"]


def test_head_grid_at_512_tokens_draws_blocks_and_stays_small():
    g = np.random.default_rng(1)
    T, H = 512, 12
    w = softmax_rows(g, (H, T, T))
    labels = [f"w{i}" for i in range(T)]
    fig = head_grid(w, labels, title="Layer 0")
    z0 = np.asarray(fig.data[0].z)
    assert z0.shape == (T // 4, T // 4) == (GRID_MAX_CELLS, GRID_MAX_CELLS)
    np.testing.assert_allclose(z0, block_weights(w[0], 4), rtol=0, atol=0)
    assert list(fig.data[0].x[:2]) == ["0–3:w0", "4–7:w4"] and len(fig.data[0].y) == 128
    assert fig.layout.title.text == "Layer 0" and "512 tokens in blocks of 4×4" in fig.layout.title.subtitle.text
    assert "block weight" in fig.layout.template.data.heatmap[0].hovertemplate or "block weight" in fig.data[0].hovertemplate
    # 12 heads of 128 x 128 float32 (~1 MB as base64); every weight would have been 17 MB
    assert spec_bytes(fig) < 1.2e6
    short = head_grid(w[:, :64, :64], labels[:64])
    assert np.asarray(short.data[0].z).shape == (64, 64)  # up to 128 tokens: every weight, exactly
    np.testing.assert_array_equal(np.asarray(short.data[0].z), w[0, :64, :64])


def test_overview_at_512_tokens_takes_layer_views_and_stays_small():
    """MiniLM's overview: 6 layers x 12 heads at 512 tokens was 100 MB of JSON."""
    g = np.random.default_rng(2)
    T, L, H = 512, 6, 12
    layers = [softmax_rows(g, (H, T, T)) for _ in range(L)]
    allowed = [np.ones((T, T), bool)] * L
    fig = overview_grid(layers, labels=[f"t{i}" for i in range(T)], allowed=allowed)
    assert len(fig.data) == L * H
    step = T // THUMB_MAX_CELLS
    np.testing.assert_allclose(np.asarray(fig.data[H + 3].z), block_weights(layers[1][3], step))
    assert "blocks of 8×8" in fig.layout.title.text
    assert spec_bytes(fig) < 2.5e6
    same = overview_grid(np.stack(layers)[:, :, :64, :64])  # a 4-D array, as before: exact
    np.testing.assert_array_equal(np.asarray(same.data[0].z), layers[0][0, :64, :64])


def test_compare_grid_blocks_and_their_difference():
    g = np.random.default_rng(3)
    T = 300
    a = softmax_rows(g, (2, T, T), causal=True)
    b = softmax_rows(g, (2, T, T))
    causal = np.tril(np.ones((T, T), bool))
    fig = compare_grid(a, b, [f"t{i}" for i in range(T)], allowed_a=causal, heads=[1])
    step = block_step(T, GRID_MAX_CELLS)
    assert step == 3 and len(fig.data) == 3
    za, zb, zd = (np.asarray(fig.data[i].z) for i in range(3))
    np.testing.assert_array_equal(za, block_weights(a[1], step, causal))
    np.testing.assert_array_equal(zb, block_weights(b[1], step))
    np.testing.assert_allclose(zd, block_weights(b[1], step) - block_weights(a[1], step), atol=1e-7)
    assert fig.layout.coloraxis2.cmax == pytest.approx(float(np.abs(zd).max()))
    assert "300 tokens in blocks of 3×3" in fig.layout.title.text


def test_token_window_sums_the_keys_outside_it():
    g = np.random.default_rng(4)
    T = 100
    w = softmax_rows(g, (2, 3, T, T))  # (L, H, T, T)
    win = token_window(w, [f"t{i}" for i in range(T)], range(40, 72))
    assert win.n == 34 and win.names[0] == "Σ 0–39" and win.names[-1] == "Σ 72–99"
    assert win.names[1] == "40:t40" and win.queries[0] == -1 and win.queries[1] == 40 and win.row(71) == 32
    W = win.weights
    np.testing.assert_allclose(W[..., 1:33, 0], w[..., 40:72, :40].astype(np.float64).sum(-1), rtol=1e-12)
    np.testing.assert_allclose(W[..., 1:33, 33], w[..., 40:72, 72:].astype(np.float64).sum(-1), rtol=1e-12)
    np.testing.assert_array_equal(W[..., 1:33, 1:33], w[..., 40:72, 40:72].astype(np.float64))
    np.testing.assert_allclose(W.sum(-1)[..., 1:33], 1.0, atol=1e-6)  # nothing dropped
    assert not W[..., 0, :].any() and not W[..., 33, :].any()  # summed rows are keys only
    edge = token_window(w, [f"t{i}" for i in range(T)], range(0, 32))
    assert edge.n == 33 and edge.queries[0] == 0  # no "before" row at the start
    with pytest.raises(ValueError):
        token_window(w, [f"t{i}" for i in range(T)], range(90, 110))


def test_model_view_at_512_tokens_draws_a_window():
    """512 tokens: ~110,000 lines and 1,000 hover rules took Chromium minutes; a 32-token window
    draws its queries' lines (to its keys and the two summed rows) with hover rules for its tokens."""
    g = np.random.default_rng(5)
    T, L, H = 512, 2, 12
    layers = [softmax_rows(g, (H, T, T)) for _ in range(L)]
    labels = [f"t{i}" for i in range(T)]
    html = model_view_html(layers, labels, tokens=range(200, 232), only=210)
    lines = re.findall(r'<i class="l q(\d+) r(\d+) d(m?)(\d+) o(\d+)"></i>', html)
    win = token_window(np.stack(layers), labels, range(200, 232))
    assert len(lines) == int((win.weights >= LEVELS[0]).sum())
    assert {int(q) for q, *_ in lines} <= set(range(200, 232))
    assert all(int(r) == int(q) - 200 + 1 for q, r, *_ in lines)  # row 0 is the summed "before" row
    assert len(re.findall(r":has\(\.q\d+:hover\) \.l:not", html)) == 32
    assert ":not(:has(.q:hover)) .l:not(.q210)" in html
    assert "Σ 0–199" in html and "Σ 232–511" in html
    assert len(html) < 600_000
    with pytest.raises(ValueError):
        model_view_html(layers, labels, tokens=range(200, 232), only=5)  # pinned token outside the window


def test_multi_head_lines_window():
    g = np.random.default_rng(6)
    T, H = 512, 12
    w = softmax_rows(g, (H, T, T))
    fig = multi_head_lines(w, [f"t{i}" for i in range(T)], tokens=range(0, 32), title="Layer 0")
    assert len(fig.layout.annotations) == 33 and fig.layout.annotations[-1].text == "Σ 32–511"
    assert list(fig.layout.yaxis.ticktext[:2]) == ["0:t0", "1:t1"]
    legend = [t.name for t in fig.data if t.showlegend]
    assert sorted(legend) == sorted(f"head {h}" for h in range(H))  # one legend entry per head
    pinned = multi_head_lines(w, [f"t{i}" for i in range(T)], tokens=range(0, 32), only=3)
    assert {y for t in pinned.data for y in t.y[0::3]} == {-3}  # only token 3's lines


def test_matrix_heatmap_sends_float32_as_float32():
    """A 512-token page sent float64 copies of float32 activations (the positional page: 30 MB)."""
    z32 = np.random.default_rng(7).normal(size=(40, 30)).astype(np.float32)
    spec = json.loads(pio.to_json(matrix_heatmap(z32, [f"t{i}" for i in range(40)], [str(j) for j in range(30)]),
                                  validate=False))
    assert spec["data"][0]["z"]["dtype"] == "f4"
    spec64 = json.loads(pio.to_json(matrix_heatmap(z32.astype(np.float64), [f"t{i}" for i in range(40)],
                                                   [str(j) for j in range(30)]), validate=False))
    assert spec64["data"][0]["z"]["dtype"] == "f8"  # values computed in float64 stay float64
    tok = matrix_heatmap(z32[:, :30], [f"t{i}" for i in range(40)], [f"k{j}" for j in range(30)], tokens_cols=True)
    assert tok.layout.xaxis.tickmode == "auto" and list(tok.layout.xaxis.autotickangles) == [-75]


def test_topk_heatmap_writes_cells_only_when_they_fit():
    g = np.random.default_rng(8)
    p = np.sort(g.dirichlet(np.ones(5), size=60), axis=1)[:, ::-1]
    toks = [["a"] * 5] * 60
    long = topk_heatmap(p, toks, [f"t{i}" for i in range(60)], title="Top-5")
    assert [t.type for t in long.data] == ["heatmap"] and "hover a cell" in long.layout.title.subtitle.text
    short = topk_heatmap(p[:40], toks[:40], [f"t{i}" for i in range(40)])
    assert [t.type for t in short.data] == ["heatmap", "scatter"]
    assert short.layout.height == 140 + 34 * 40 + 0  # 34 px a row: the cell's two lines never overlap


def test_large_matrices_are_drawn_as_block_means_and_say_so():
    """A 1,024-token SmolLM2 page sent 1,024 x 1,024 similarity maps and 1,024 x 576 tables in full
    (~50 MB on the positional page): over MATRIX_MAX_CELLS a chart draws block means, and says so."""
    from viz.charts import MATRIX_MAX_CELLS, block_means, two_heatmaps
    g = np.random.default_rng(9)
    a = g.normal(size=(7, 5))
    a[0, 0] = np.nan
    m = block_means(a, 3)
    assert m.shape == (3, 2) and m.dtype == np.float32
    assert m[0, 0] == pytest.approx(np.nanmean(a[0:3, 0:3]), abs=1e-6)
    assert m[2, 1] == pytest.approx(a[6, 3:5].mean(), abs=1e-6)  # a short last block: the mean of what it has
    assert block_means(a, 1) is a
    z = g.normal(size=(1024, 576)).astype(np.float32)
    rows, cols = [f"t{i}" for i in range(1024)], [str(j) for j in range(576)]
    fig = matrix_heatmap(z, rows, cols, title="sum")
    zz = np.asarray(fig.data[0].z)
    assert zz.size <= MATRIX_MAX_CELLS and zz.shape == (512, 288)  # 2 x 2 blocks
    assert zz[3, 7] == pytest.approx(z[6:8, 14:16].astype(np.float64).mean(), abs=1e-6)
    assert fig.data[0].y[1] == "2–3:t2" and fig.data[0].x[1] == "2–3" and fig.data[0].y[-1] == "1022–1023:t1022"
    assert "drawn as means of 2×2 blocks" in fig.layout.title.subtitle.text
    assert np.asarray(matrix_heatmap(z[:512, :384], rows[:512], cols[:384]).data[0].z).shape == (512, 384)  # MiniLM's table
    assert np.asarray(matrix_heatmap(z[:512, :512].copy(), rows[:512], rows[:512]).data[0].z).shape == (256, 256)
    lim = float(np.abs(z).max())
    assert fig.data[0].zmax == pytest.approx(lim)  # the colour range is every value's, not the means'
    small = matrix_heatmap(z[:64, :64], rows[:64], cols[:64])
    np.testing.assert_array_equal(np.asarray(small.data[0].z), z[:64, :64])  # small: every value
    assert small.layout.title.text is None
    big = g.normal(size=(1024, 1024)).astype(np.float32)
    assert np.asarray(matrix_heatmap(big, rows, rows).data[0].z).shape == (342, 342)
    both = two_heatmaps(z, z * 2, ("a", "b"), title="tables")
    assert np.asarray(both.data[0].z).size <= MATRIX_MAX_CELLS // 2 and "means of" in both.layout.title.subtitle.text
    # a narrow chart (the positional page's three side by side): a quarter of the cells, 2 x 2 blocks at 512 x 384
    from viz.charts import NARROW_MAX_CELLS
    narrow = matrix_heatmap(z[:512, :384], rows[:512], cols[:384], max_cells=NARROW_MAX_CELLS)
    nz = np.asarray(narrow.data[0].z)
    assert nz.shape == (256, 192) and nz[5, 9] == pytest.approx(z[10:12, 18:20].astype(np.float64).mean(), abs=1e-6)
    assert "drawn as means of 2×2 blocks" in (narrow.layout.title.text or "") + (narrow.layout.title.subtitle.text or "")


def test_hidden_sink_in_blocks_blanks_only_blocks_made_of_hidden_keys():
    """The derived "sink hidden" view at 512 tokens (blocks of 4): key 0 alone hidden leaves block 0
    drawn (its other three keys' weight) with no peach shape; keys 0-3 all hidden blank block 0 in
    every panel and draw one shape per panel spanning one block; at 64 tokens (exact) the hidden
    column itself is blank, as before blocks."""
    g = np.random.default_rng(3)
    w = softmax_rows(g, (2, 512, 512))
    one = np.zeros(512, bool)
    one[0] = True
    fig = head_grid(w, [f"t{i}" for i in range(512)], hidden_keys=one)
    z = np.asarray(fig.data[0].z, dtype=np.float64)
    assert z.shape == (128, 128) and not np.isnan(z).any()
    np.testing.assert_allclose(z[:, 0], block_weights(w[0], 4)[:, 0], rtol=1e-6)
    assert not fig.layout.shapes and "sink hidden" in fig.layout.coloraxis.colorbar.title.text
    four = np.zeros(512, bool)
    four[:4] = True
    labels = [f"t{i}" for i in range(512)]
    # (figure, its blocks per axis, blank block columns): the overview's blocks are 8 wide, so keys
    # 0-3 hidden leave its block 0 drawn
    for fig, n, blank in ((head_grid(w, labels, hidden_keys=four), 128, 1),
                          (compare_grid(w, w[::-1].copy(), labels, hidden_keys=four), 128, 1),
                          (overview_grid(w[None], labels=labels, hidden_keys=four), 64, 0),
                          (overview_grid(w[None], labels=labels, hidden_keys=np.arange(512) < 8), 64, 1)):
        for tr in fig.data:
            z = np.asarray(tr.z, dtype=np.float64)
            assert z.shape == (n, n)
            assert np.isnan(z[:, :blank]).all() and not np.isnan(z[:, blank:]).any(), tr.name
        assert len(fig.layout.shapes) == (len(fig.data) if blank else 0)
        if blank:
            s = fig.layout.shapes[0]
            assert (s.x0, s.x1, s.y0, s.y1) == (-0.5, 0.5, -0.5, n - 0.5)
    small = head_grid(w[:, :64, :64], [f"t{i}" for i in range(64)], hidden_keys=one[:64])
    assert np.isnan(np.asarray(small.data[0].z, dtype=np.float64)[:, 0]).all()
    assert (small.layout.shapes[0].x0, small.layout.shapes[0].x1) == (-0.5, 0.5)


def test_histograms_of_many_values_send_counted_bins():
    """The layer-norm page's histograms at 512 MiniLM tokens sent all 393,216 values (4.2 MB): over
    HIST_RAW_MAX values the bins are counted here, numpy's densities over common edges."""
    from viz.charts import HIST_RAW_MAX, histogram_compare
    g = np.random.default_rng(5)
    a, b = g.normal(size=512 * 384), g.normal(2.0, 0.5, size=512 * 384)
    fig = histogram_compare({"before": a, "after": b}, nbins=60)
    assert [t.type for t in fig.data] == ["bar", "bar"] and spec_bytes(fig) < 20_000
    edges = np.histogram_bin_edges(np.concatenate([a, b]), bins=60)
    np.testing.assert_allclose(fig.data[1].y, np.histogram(b, bins=edges, density=True)[0])
    np.testing.assert_allclose(fig.data[0].x, (edges[:-1] + edges[1:]) / 2)
    assert sum(y * w for y, w in zip(fig.data[0].y, fig.data[0].width)) == pytest.approx(1.0)
    small = histogram_compare({"x": a[: HIST_RAW_MAX // 2]})
    assert small.data[0].type == "histogram" and len(small.data[0].x) == HIST_RAW_MAX // 2


def test_tile_scores_send_float32_scores_as_float32():
    """The flash page's score matrix at 1,024 tokens sent float64 copies of float32 scores (11.2 MB,
    now 5.6 MB): the same numbers (viz.common.masked_z holds them in float32), half the bytes."""
    from viz.flash import tile_scores
    g = np.random.default_rng(2)
    s = g.normal(size=(256, 256)).astype(np.float32)
    allowed = np.tril(np.ones((256, 256), bool))
    fig = tile_scores(s, allowed, [f"t{i}" for i in range(256)], k_start=64, k_end=128, tile=64)
    z = np.asarray(fig.data[0].z)
    assert z.dtype == np.float32
    np.testing.assert_array_equal(z, np.where(allowed, s, np.nan))
