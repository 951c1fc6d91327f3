"""Rotary positions: q/k pairs as 2-D arrows before and after rotation (classroom/positional.py)."""
from __future__ import annotations

from typing import Any, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import FONT, OKABE_ITO


def rope_pairs(rows: Sequence[Any], *, title: str = "", height: int = 300) -> go.Figure:
    """One panel per pair: the 2-D vector (dim i, dim i + d/2) before rotation (grey) and after
    (blue), each an arrow from the origin; the panel title gives the angle turned. `rows` are
    classroom.positional.pair_rotation's PairRotation rows (read by attribute: dims, angle_deg,
    before, after, norm_before, norm_after; viz/ does not import classroom/)."""
    if not rows:
        raise ValueError("rows is empty: pass at least one pair (classroom.positional.pair_rotation)")
    n = len(rows)
    titles = [f"dims {r.dims[0]}, {r.dims[1]}: {r.angle_deg:+.1f}°" for r in rows]
    fig = make_subplots(rows=1, cols=n, subplot_titles=titles, horizontal_spacing=0.06)
    for c, r in enumerate(rows, start=1):
        lim = 1.15 * max(r.norm_before, r.norm_after, 1e-6)
        for vec, name, color in ((r.before, "before rotation", "#9a9a9a"), (r.after, "after rotation", OKABE_ITO[0])):
            fig.add_trace(go.Scatter(x=[0, vec[0]], y=[0, vec[1]], mode="lines+markers", name=name, legendgroup=name,
                                     showlegend=c == 1, line=dict(color=color, width=3),
                                     marker=dict(size=[0, 10], color=color, symbol="circle"),
                                     hovertemplate=f"{name}: (%{{x:.3f}}, %{{y:.3f}})<extra></extra>"), row=1, col=c)
        fig.update_xaxes(range=[-lim, lim], zeroline=True, showticklabels=False, row=1, col=c)
        fig.update_yaxes(range=[-lim, lim], zeroline=True, showticklabels=False, scaleanchor=f"x{'' if c == 1 else c}",
                         row=1, col=c)
    fig.update_annotations(font_size=12)
    fig.update_layout(title=dict(text=title, x=0, xanchor="left") if title else None, font=FONT, height=height,
                      margin=dict(l=10, r=10, t=70 if title else 40, b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=-0.12, xanchor="left", x=0))
    return fig
