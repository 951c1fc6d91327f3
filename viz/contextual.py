"""Figures of the contextual-embeddings page: one word's cosine similarity across two sentences,
stage by stage. Arrays + labels in, figure out (no streamlit, no torch)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .charts import line_chart

MIN_SPAN = 0.1  # the y axis shows at least 1 − MIN_SPAN … 1 (cosine's maximum)


def cosine_by_depth(stages: Sequence[str], cosine: Sequence[float], *, name: str, title: str = "",
                    height: int = 360) -> go.Figure:
    """A line of cosines (S,) over the stages. The y axis always reaches 1 and spans at least
    MIN_SPAN: a word whose vectors stay equal (cosine 1 ± float rounding at every stage) draws a
    flat line at 1, not rounding noise blown up into a zig-zag by autoscaling (issue 33)."""
    c = np.asarray(cosine, dtype=np.float64)
    if c.ndim != 1 or c.size != len(stages):
        raise ValueError(f"cosine has shape {c.shape} but there are {len(stages)} stages: pass one value per stage")
    if not np.isfinite(c).all():
        raise ValueError("cosine values must be finite")
    lo = min(float(c.min()), 1.0 - MIN_SPAN)
    pad = 0.03 * (1.0 - lo)
    fig = line_chart(stages, {name: c}, x_categories=True, title=title, yaxis="cosine similarity", height=height)
    fig.update_yaxes(range=[lo - pad, 1.0 + pad], tickformat=".2f")
    fig.update_traces(hovertemplate="%{x}<br>cosine %{y:.4f}<extra></extra>")
    return fig
