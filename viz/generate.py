"""Figures for the Generate page: the next-token distribution as horizontal bars."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import FONT, OKABE_ITO, visible


def topk_bars(labels: Sequence[str], probs: Sequence[float], *, chosen: int | None = None, title: str = "",
              height: int | None = None) -> go.Figure:
    """The k most likely next tokens, most likely on top; `chosen` (an index into labels) is drawn
    in a second colour and named in the legend. Labels are escaped (user and model text)."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or len(labels) != p.shape[0]:
        raise ValueError(f"labels ({len(labels)}) and probs {p.shape} must be one entry per token")
    names = [f"{i + 1}. {visible(t)}" for i, t in enumerate(labels)]
    colors = [OKABE_ITO[1] if i == chosen else OKABE_ITO[0] for i in range(len(names))]
    fig = go.Figure(go.Bar(x=p, y=names, orientation="h", marker_color=colors, text=[f"{v:.3f}" for v in p],
                           textposition="outside", cliponaxis=False,
                           hovertemplate="%{y}: p = %{x:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title="probability", range=[0, max(1e-9, float(p.max())) * 1.18])
    fig.update_layout(title=dict(text=title, x=0, xanchor="left") if title else None, font=FONT,
                      height=height or 60 + 26 * len(names), margin=dict(l=10, r=10, t=40 if title else 10, b=10),
                      showlegend=False)
    return fig
