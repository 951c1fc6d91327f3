"""Unit tests of viz.charts.py: data in the figure equals the input, labels escaped, shapes checked."""
import numpy as np
import pytest

from viz import charts as C


def _arr(v):
    return np.asarray(v, dtype=float)


def test_bar_compare_data_and_escaping():
    fig = C.bar_compare(["<b>x</b>", "y"], {"raw": [1.0, 2.0], "scaled": [0.5, 1.0]}, title="t")
    assert [t.name for t in fig.data] == ["raw", "scaled"]
    np.testing.assert_array_equal(_arr(fig.data[1].y), [0.5, 1.0])
    assert list(fig.data[0].x) == ["0:&lt;b&gt;x&lt;/b&gt;", "1:y"]
    with pytest.raises(ValueError, match="2 categories"):
        C.bar_compare(["a", "b"], {"raw": [1.0]})
    with pytest.raises(ValueError):
        C.bar_compare(["a"], {})


def test_line_chart_dashed_theory_and_log_axes():
    fig = C.line_chart([1, 2, 4], {"sampled": [1.1, 1.9, 4.2], "theory": [1, 2, 4]}, dashed=["theory"], log_x=True)
    assert fig.data[1].line.dash == "dash" and fig.data[0].line.dash == "solid"
    assert fig.layout.xaxis.type == "log"
    np.testing.assert_array_equal(_arr(fig.data[0].y), [1.1, 1.9, 4.2])
    cat = C.line_chart(["emb", "<L0>"], {"cos": [1.0, 0.5]}, x_categories=True)
    assert list(cat.data[0].x) == ["emb", "&lt;L0&gt;"]
    with pytest.raises(ValueError):
        C.line_chart([1, 2], {"a": [[1, 2]]})


def test_matrix_heatmap_values_highlights_and_symmetric_scale():
    z = np.array([[1.0, -3.0], [2.0, 0.5]])
    fig = C.matrix_heatmap(z, ["a", "a"], ["f0", "f1"], highlight_rows=[0], highlight_cols=[1], vlines=[0.5])
    np.testing.assert_array_equal(_arr(fig.data[0].z), z)
    assert list(fig.data[0].y) == ["0:a", "1:a"]  # unique labels
    assert fig.data[0].zmin == -3.0 and fig.data[0].zmax == 3.0  # centred on 0
    assert len(fig.layout.shapes) == 3
    assert fig.data[0].text[0][1] == "-3.00"  # small matrices are annotated
    with pytest.raises(ValueError, match="row_labels"):
        C.matrix_heatmap(z, ["a"], ["f0", "f1"])
    with pytest.raises(ValueError):
        C.matrix_heatmap(np.ones(3), ["a"], ["b"])


def test_histogram_and_topk():
    fig = C.histogram_compare({"before": [1.0, np.nan, 3.0], "after": [0.0]})
    np.testing.assert_array_equal(_arr(fig.data[0].x), [1.0, 3.0])  # NaN dropped
    p = np.array([[0.7, 0.2], [0.5, 0.4]])
    fig = C.topk_heatmap(p, [["cat", "<dog>"], ["a", "b"]], ["the", "x"])
    np.testing.assert_array_equal(_arr(fig.data[0].z), p)
    assert fig.data[0].text[0][1] == "&lt;dog&gt;<br>0.20"
    with pytest.raises(ValueError, match="tokens"):
        C.topk_heatmap(p, [["a"], ["b"]], ["the", "x"])


def test_pe_curves_and_two_heatmaps():
    pe = np.arange(12.0).reshape(4, 3)
    fig = C.pe_curves(pe, [0, 1])
    assert fig.data[0].name == "dim 0 (sin)" and fig.data[1].name == "dim 1 (cos)"
    np.testing.assert_array_equal(_arr(fig.data[1].y), pe[:, 1])
    with pytest.raises(ValueError, match="outside"):
        C.pe_curves(pe, [3])
    two = C.two_heatmaps(pe, -pe, ("sin", "learned"))
    np.testing.assert_array_equal(_arr(two.data[1].z), -pe)
    assert two.layout.coloraxis.cmin == -11.0
    # own scale per side by default (a learned table would wash out the sinusoidal one), or shared
    two = C.two_heatmaps(pe / 11.0, 3 * pe, ("sin", "learned"))
    assert two.data[0].coloraxis == "coloraxis" and two.data[1].coloraxis == "coloraxis2"
    assert two.layout.coloraxis.cmax == pytest.approx(1.0) and two.layout.coloraxis2.cmax == pytest.approx(33.0)
    shared = C.two_heatmaps(pe / 11.0, 3 * pe, ("sin", "learned"), shared_scale=True)
    assert {t.coloraxis for t in shared.data} == {"coloraxis"} and shared.layout.coloraxis.cmax == pytest.approx(33.0)
    with pytest.raises(ValueError, match="same shape"):
        C.two_heatmaps(pe, pe[:2], ("a", "b"))


def test_matrix_heatmap_leaves_nan_cells_blank():
    """Rows of different widths (q, k of d_k beside v of d_v) are NaN-padded: no "nan" text."""
    import numpy as np

    from viz.charts import matrix_heatmap
    z = np.array([[1.0, 2.0, 3.0], [4.0, np.nan, np.nan]])
    fig = matrix_heatmap(z, ["a", "b"], ["0", "1", "2"], tokens_rows=False, annotate=True)
    assert fig.data[0].text.tolist() == [["1.00", "2.00", "3.00"], ["4.00", "", ""]]


def test_bar_compare_log_scale():
    from viz.charts import bar_compare
    fig = bar_compare(["a", "b"], {"x": [0.01, 10.0]}, tokens=False, log_y=True)
    assert fig.layout.yaxis.type == "log"
    assert bar_compare(["a"], {"x": [1.0]}, tokens=False).layout.yaxis.type == "linear"


def test_matrix_heatmap_many_named_columns_stand_upright():
    """12 heads named H0 … H11 in a half-width column ran into each other (screenshot audit, issue 21
    point 7): from 9 named columns on, the labels stand upright, one per column."""
    from viz.charts import matrix_heatmap
    z = np.zeros((6, 12))
    fig = matrix_heatmap(z, [f"L{i}" for i in range(6)], [f"H{h}" for h in range(12)], tokens_rows=False)
    assert fig.layout.xaxis.tickangle == -90
    assert matrix_heatmap(z[:, :4], [f"L{i}" for i in range(6)], list("abcd"), tokens_rows=False).layout.xaxis.tickangle == 0


def test_legend_sits_under_the_title_in_the_top_margin():
    """A 3-entry legend in a half-width column wrapped upwards over the title (screenshot audit,
    issue 21 point 7): it is placed in container coordinates under the title, so Plotly grows
    the top margin downwards instead."""
    fig = C.line_chart([1, 2, 3], {"sampled Var(q·k)": [1, 2, 3], "theory: d_k": [1, 2, 3],
                                   "sampled Var(q·k / √d_k)": [1, 1, 1]}, title="Variance of q·k vs d_k")
    lg = fig.layout.legend
    assert lg.yref == "container" and lg.yanchor == "top"
    assert lg.y * fig.layout.height <= fig.layout.height - 30  # under the ~34 px title line


def test_residual_norm_heatmap_log_scale_keeps_the_norms_in_cells_and_hover():
    from tests.helpers import decode
    from viz.layer_norm import residual_norm_heatmap
    norms = np.array([[1.0, 2.0], [20_000.0, 700.0]])  # (stages, tokens)
    lin = residual_norm_heatmap(norms, ["a", "b"], ["s0", "s1"])
    np.testing.assert_allclose(decode(lin.to_plotly_json()["data"][0]["z"]), norms.T)
    log = residual_norm_heatmap(norms, ["a", "b"], ["s0", "s1"], log=True)
    tr = log.to_plotly_json()["data"][0]
    np.testing.assert_allclose(decode(tr["z"]), np.log10(norms.T))
    np.testing.assert_allclose(decode(tr["customdata"]), norms.T)
    assert list(tr["colorbar"]["ticktext"]) == ["1", "10", "100", "1,000", "10,000", "100,000"]
    assert [list(r) for r in tr["text"]] == [["1.0", "20,000"], ["2.0", "700"]]
    with pytest.raises(ValueError, match="non-negative"):
        residual_norm_heatmap(-norms, ["a", "b"], ["s0", "s1"])
