"""Figures of the "Why this token?" page: the shares of one logit as bars, and the patching maps.
Pure numpy -> plotly (arrays and labels in, a Figure out; never displays)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .charts import _layout, matrix_heatmap
from .common import as_array, auto_ticks, visible

POSITIVE, NEGATIVE = "#D55E00", "#0072B2"  # Okabe-Ito vermillion (raises the logit) and blue (lowers it): the
#                                           diverging maps' sides (DIVERGING_SCALE: red above 0, blue below)


def share_bars(names: Sequence[str], shares: Sequence[float], *, title: str = "", height: int = 380) -> go.Figure:
    """One bar per part (embedding, MLPs, heads, the rest): its share of the logit; vermillion raises
    it, blue lowers it (as on the layers x heads map)."""
    v = np.asarray(shares, dtype=np.float64)
    if v.ndim != 1 or v.size != len(names):
        raise ValueError(f"share_bars: {len(names)} names but shares of shape {v.shape}; give one share per name")
    cats = [visible(n) for n in names]
    fig = go.Figure(go.Bar(x=cats, y=v, marker_color=[POSITIVE if s >= 0 else NEGATIVE for s in v],
                           text=[f"{s:+.2f}" for s in v], textposition="outside", cliponaxis=False,
                           hovertemplate="%{x}: %{y:+.4f}<extra></extra>"))
    fig.update_xaxes(type="category", **auto_ticks("x", angle=-60 if len(cats) > 10 else 0))
    fig.update_yaxes(title="share of the logit", zeroline=True, zerolinewidth=2)
    return _layout(fig, title, height)


def patch_map(effect: np.ndarray, labels: Sequence[str], *, title: str = "", first_layer: int = 0) -> go.Figure:
    """effect (L, T): layers down, positions across; 1 (red) = the clean run's metric restored,
    0 (white) = the corrupted run's, negative (blue) = further away."""
    e = as_array(effect, 2, "effect", "(layers, positions)")
    L = e.shape[0]
    fig = matrix_heatmap(e, [f"L{first_layer + l}" for l in range(L)], list(labels), tokens_rows=False,
                         tokens_cols=True, zmid=0.0, annotate=e.size <= 200, fmt=".2f", row_title="layer",
                         col_title="position patched", value_name="restored", title=title,
                         height=max(280, min(900, 22 * L + 150)))
    return fig
