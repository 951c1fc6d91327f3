"""viz/variants.py: the figures carry the arrays given (masked cells NaN), labels are escaped, and
bad shapes raise ValueError saying what to fix."""
import numpy as np
import plotly.graph_objects as go
import pytest

from viz.variants import bias_grid, variant_heads

LABELS = ["<b>a</b>", "b", "b", "c"]


def test_variant_heads_values_mask_and_kv_titles():
    rng = np.random.default_rng(0)
    w = rng.random((4, 4, 4))
    band = np.abs(np.arange(4)[:, None] - np.arange(4)[None]) < 2
    fig = variant_heads(w, LABELS, allowed=band, kv_head=np.array([0, 0, 1, 1]), title="t")
    go.Figure(fig.to_dict())  # valid plotly
    assert len(fig.data) == 4
    for h, tr in enumerate(fig.data):
        z = np.asarray(tr.z)
        np.testing.assert_array_equal(np.isnan(z), ~band)
        np.testing.assert_allclose(z[band], w[h][band], rtol=1e-6)
    assert [a.text for a in fig.layout.annotations if a.text.startswith("head")] == ["head 0 · K/V 0", "head 1 · K/V 0", "head 2 · K/V 1", "head 3 · K/V 1"]
    assert "&lt;b&gt;" in fig.data[0].y[0] and len(set(fig.data[0].x)) == 4  # escaped, unique
    with pytest.raises(ValueError, match="one entry per head"):
        variant_heads(w, LABELS, kv_head=np.array([0, 1]))
    with pytest.raises(ValueError, match=r"\(H, T, T\)"):
        variant_heads(w[0], LABELS)


def test_bias_grid_values_and_slope_titles():
    slopes = np.array([0.25, 1 / 16])
    d = np.abs(np.arange(3)[:, None] - np.arange(3)[None])
    bias = -slopes[:, None, None] * d
    fig = bias_grid(bias, ["x", "y", "z"], slopes)
    go.Figure(fig.to_dict())
    for h, tr in enumerate(fig.data):
        np.testing.assert_allclose(np.asarray(tr.z), -slopes[h] * d, rtol=1e-6)
    assert [a.text for a in fig.layout.annotations] == ["head 0 · slope 1/4", "head 1 · slope 1/16"]
    assert fig.layout.coloraxis.cmax == 0.0 and fig.layout.coloraxis.cmin == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="one value per head"):
        bias_grid(bias, ["x", "y", "z"], [0.5])
