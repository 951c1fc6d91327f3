"""ui.show.phone_min_width: the width a grid of panels asks for under a 640 px viewport (issue 33)."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ui.show import PANEL_MIN_PX, THUMB_MIN_PX, phone_min_width
from viz.attention import head_grid, overview_grid


def _weights(H: int, T: int, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng(seed).random((H, T, T))
    return w / w.sum(-1, keepdims=True)


def _plot_px(fig: go.Figure, wide: int) -> float:
    m = fig.layout.margin
    return wide - m.l - m.r - 90  # less the colour bar's allowance


def test_one_column_asks_for_nothing():
    fig = head_grid(_weights(1, 5), [f"t{i}" for i in range(5)])
    assert phone_min_width(fig) is None
    assert phone_min_width(go.Figure(go.Scatter(x=[0, 1], y=[0, 1]))) is None


def test_heads_grid_panels_and_titles_fit():
    """Every panel at least PANEL_MIN_PX wide and the panel centres a title's width apart."""
    labels = [f"tok{i}" for i in range(11)]
    titles = ["head 0 · previous-token 0.72", "head 1 · other", "head 2 · self 0.5", "head 3 · other (focused 0.50 < 0.6)"]
    fig = head_grid(_weights(4, 11), labels, subtitles=titles)
    wide = phone_min_width(fig)
    cols = sorted({fig.layout[k].domain for k in fig.layout.to_plotly_json() if k.startswith("xaxis")})
    plot = _plot_px(fig, wide)
    assert min(c[1] - c[0] for c in cols) * plot >= PANEL_MIN_PX - 1
    centre_gap = (cols[1][0] + cols[1][1] - cols[0][0] - cols[0][1]) / 2 * plot
    assert centre_gap >= 0.54 * 14 * len(titles[3])  # the longest title (0.54 em a character in Chromium) clears its neighbour
    assert wide < 1000  # and no wider than that needs


def test_overview_thumbnails_get_the_thumbnail_width():
    """MiniLM's 12 heads a row: ~70 px tall thumbnails are THUMB_MIN_PX wide (not stretched to 140)."""
    w = [_weights(12, 12, s) for s in range(6)]
    fig = overview_grid(w)
    wide = phone_min_width(fig)
    cols = sorted({fig.layout[k].domain for k in fig.layout.to_plotly_json() if k.startswith("xaxis")})
    assert len(cols) == 12
    panel = min(c[1] - c[0] for c in cols) * _plot_px(fig, wide)
    assert THUMB_MIN_PX - 1 <= panel < PANEL_MIN_PX
