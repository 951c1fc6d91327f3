"""The end-to-end flow as a diagram: one box per stage, top to bottom, each arrow labelled with the
tensor shape that travels along it (classroom/flow.py's stages).

Readable in the light and the dark theme alike (issue 21 audit: grey text on pastel boxes measured
about 3:1): every text sits on an opaque background the figure itself sets, in a colour the figure
sets, at a WCAG AA contrast of at least 4.5:1 — the step's name and what it computes inside its
opaque pastel box, the shape on a white tag beside the arrow. Nothing depends on the page theme."""
from __future__ import annotations

from typing import Protocol, Sequence

import plotly.graph_objects as go

from .common import FONT, OKABE_ITO, visible

PAGE_COLORS = {"heads": OKABE_ITO[0], "scaling": OKABE_ITO[0], "multi-head": OKABE_ITO[2],
               "layer-norm": OKABE_ITO[3], "ffn-output": OKABE_ITO[1], "positional": OKABE_ITO[4],
               "overview": "#888888", "generate": OKABE_ITO[5], "mask-lab": OKABE_ITO[4]}
TEXT = "#1a1a1a"      # step names and shapes
WHAT_TEXT = "#3a3a3a"  # what a step computes (a little lighter, still ≥ 7:1 on every box)
TAG_BG = "#ffffff"     # behind the shape labels (between the boxes, on the page background)
LINE = "#8a8a8a"       # arrows and tag borders: ≥ 3:1 (non-text) on white and on the dark theme


def _hex(c: str) -> tuple[int, int, int]:
    c = c.lstrip("#")
    return int(c[0:2], 16), int(c[2:4], 16), int(c[4:6], 16)


def pastel(color: str, strength: float = 0.2) -> str:
    """An opaque tint: `strength` of `color` over white (was the colour at opacity 0.18 over the
    page, which let the dark theme's background through)."""
    r, g, b = (round(255 + (v - 255) * strength) for v in _hex(color))
    return f"#{r:02x}{g:02x}{b:02x}"


class Stage(Protocol):
    """What the diagram reads of a stage (classroom.flow.Stage has these attributes)."""
    name: str  # the box's title
    shape: tuple[int, ...]  # the tensor passed on, without the batch axis
    page: str  # url path of the page that explains it (the box's colour)
    what: str  # what it computes
    absent: bool  # a sublayer this model does not have: a dashed, empty box (the stream passes it unchanged)


def flow_diagram(stages: Sequence[Stage], *, title: str = "") -> go.Figure:
    """stages in order (classroom.flow.stages). Boxes are coloured by the page that explains
    them; hover a box for what it computes."""
    if not stages:
        raise ValueError("stages is empty: pass classroom.flow.stages(trace, cfg)")
    n = len(stages)
    step = 1.0
    fig = go.Figure()
    xs, ys, hover = [], [], []
    for i, s in enumerate(stages):
        y = -i * step
        color = PAGE_COLORS.get(s.page, "#888888")
        absent = bool(getattr(s, "absent", False))
        fig.add_shape(type="rect", x0=0.02, x1=1.23, y0=y - 0.32, y1=y + 0.32,
                      line=dict(color=LINE if absent else color, width=2, dash="dash" if absent else "solid"),
                      fillcolor=TAG_BG if absent else pastel(color), layer="below")
        fig.add_annotation(x=0.335, y=y, text=f"<b>{visible(s.name)}</b>", showarrow=False,
                           font=dict(size=13, color=TEXT))
        fig.add_annotation(x=0.66, y=y, text=visible(s.what), showarrow=False, xanchor="left",
                           font=dict(size=11, color=WHAT_TEXT))
        if i:
            fig.add_annotation(x=0.335, y=y + 0.32, ax=0.335, ay=y + step - 0.32, xref="x", yref="y", axref="x",
                               ayref="y", showarrow=True, arrowhead=2, arrowsize=1.2, arrowwidth=1.5, text="",
                               arrowcolor=LINE)
        shape = " × ".join(str(d) for d in s.shape)
        fig.add_annotation(x=0.36, y=y - 0.5 * step, text=f"({shape})", showarrow=False, xanchor="left",
                           font=dict(size=11, family="ui-monospace, monospace", color=TEXT), bgcolor=TAG_BG,
                           bordercolor=LINE, borderwidth=1, borderpad=1)
        xs.append(0.335)
        ys.append(y)
        hover.append(f"{visible(s.name)}<br>shape ({shape})<br>{visible(s.what)}<br>page: {s.page}"
                     + ("<br>(not in this model: the stream passes on unchanged)" if absent else ""))
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", marker=dict(size=40, opacity=0), hovertext=hover,
                             hoverinfo="text", showlegend=False))
    fig.update_xaxes(visible=False, range=[0, 1.25])
    fig.update_yaxes(visible=False, range=[-(n - 1) * step - 0.6, 0.6])
    fig.update_layout(title=dict(text=title, x=0, xanchor="left") if title else None, font=FONT,
                      height=70 + 62 * n, margin=dict(l=10, r=10, t=40 if title else 10, b=10),
                      plot_bgcolor="rgba(0,0,0,0)")
    return fig
