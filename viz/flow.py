"""The end-to-end flow as a diagram: one box per stage, top to bottom, each arrow labelled with the
tensor shape that travels along it (classroom/flow.py's stages)."""
from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from .common import FONT, OKABE_ITO, visible

PAGE_COLORS = {"heads": OKABE_ITO[0], "scaling": OKABE_ITO[0], "multi-head": OKABE_ITO[2],
               "layer-norm": OKABE_ITO[3], "ffn-output": OKABE_ITO[1], "positional": OKABE_ITO[4],
               "overview": "#888888", "generate": OKABE_ITO[5], "mask-lab": OKABE_ITO[4]}


def flow_diagram(stages: Sequence[dict], *, title: str = "") -> go.Figure:
    """stages: [{"name", "shape", "page", "what"}]. Boxes are coloured by the page that explains
    them; hover a box for what it computes."""
    if not stages:
        raise ValueError("stages is empty: pass classroom.flow.stages(trace, cfg)")
    n = len(stages)
    step = 1.0
    fig = go.Figure()
    xs, ys, hover = [], [], []
    for i, s in enumerate(stages):
        y = -i * step
        color = PAGE_COLORS.get(s["page"], "#888888")
        fig.add_shape(type="rect", x0=0.05, x1=0.62, y0=y - 0.32, y1=y + 0.32, line=dict(color=color, width=2),
                      fillcolor=color, opacity=0.18, layer="below")
        fig.add_annotation(x=0.335, y=y, text=f"<b>{visible(s['name'])}</b>", showarrow=False, font=dict(size=13))
        fig.add_annotation(x=0.66, y=y, text=visible(s["what"]), showarrow=False, xanchor="left",
                           font=dict(size=11), opacity=0.8)
        if i:
            fig.add_annotation(x=0.335, y=y + 0.32, ax=0.335, ay=y + step - 0.32, xref="x", yref="y", axref="x",
                               ayref="y", showarrow=True, arrowhead=2, arrowsize=1.2, arrowwidth=1.5, text="")
        shape = " × ".join(str(d) for d in s["shape"])
        fig.add_annotation(x=0.64, y=y - 0.5 * step, text=f"({shape})", showarrow=False, xanchor="left",
                           font=dict(size=11, family="ui-monospace, monospace"))
        xs.append(0.335)
        ys.append(y)
        hover.append(f"{visible(s['name'])}<br>shape ({shape})<br>{visible(s['what'])}<br>page: {s['page']}")
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", marker=dict(size=40, opacity=0), hovertext=hover,
                             hoverinfo="text", showlegend=False))
    fig.update_xaxes(visible=False, range=[0, 1.25])
    fig.update_yaxes(visible=False, range=[-(n - 1) * step - 0.6, 0.6])
    fig.update_layout(title=dict(text=title, x=0, xanchor="left") if title else None, font=FONT,
                      height=70 + 62 * n, margin=dict(l=10, r=10, t=40 if title else 10, b=10),
                      plot_bgcolor="rgba(0,0,0,0)")
    return fig
