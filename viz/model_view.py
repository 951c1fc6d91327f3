"""BertViz-style line views: every layer × head as a small panel of lines from the tokens on the
left (queries) to the tokens on the right (keys), and one layer's heads overlaid in one colour each.
Lines are grouped by weight into a few opacity levels (one path per level and panel), so a 6 × 12
grid of 32 tokens stays a few hundred traces."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import FONT, OKABE_ITO, as_array, check_labels, legend_below_title, token_labels

LEVELS = (0.05, 0.2, 0.45, 0.7)  # weight thresholds of the opacity levels (below the first: not drawn)
OPACITY = (0.15, 0.35, 0.65, 1.0)


def _segments(w: np.ndarray, lo: float, hi: float, only: int | None) -> tuple[list, list]:
    """x, y of every line with lo <= weight < hi (None-separated), query i at (0, -i), key j at (1, -j)."""
    xs, ys = [], []
    qi, kj = np.nonzero((w >= lo) & (w < hi))
    for i, j in zip(qi, kj):
        if only is not None and i != only:
            continue
        xs += [0, 1, None]
        ys += [-int(i), -int(j), None]
    return xs, ys


def model_view(weights: np.ndarray, labels: Sequence[str], *, first_layer: int = 0, only: int | None = None,
               color: str = OKABE_ITO[0], title: str = "") -> go.Figure:
    """weights (L, H, T, T): a grid of line views, rows = layers, columns = heads. only: draw just
    this query token's lines (the "hover isolates a token" of BertViz, as a choice). All panels
    share one pair of axes (each panel shifted in x and y): a handful of traces in all, so a 6 × 12
    grid paints as fast as one chart."""
    w = as_array(weights, 4, "weights", "(L, H, T, T)").astype(np.float64)
    L, H, T, _ = w.shape
    check_labels(labels, T, "labels")
    gap_x, gap_y = 0.45, 3.0
    bounds = list(LEVELS) + [1.01]
    fig = go.Figure()
    for k in range(len(LEVELS)):
        xs_all, ys_all = [], []
        for l in range(L):
            for h in range(H):
                xs, ys = _segments(w[l, h], bounds[k], bounds[k + 1], only)
                x0, y0 = h * (1 + gap_x), -l * (T + gap_y)
                xs_all += [None if v is None else v + x0 for v in xs]
                ys_all += [None if v is None else v + y0 for v in ys]
        if xs_all:
            fig.add_trace(go.Scatter(x=xs_all, y=ys_all, mode="lines", hoverinfo="skip", showlegend=False,
                                     line=dict(color=color, width=1 + 1.5 * k), opacity=OPACITY[k]))
    tl = token_labels(labels)
    # one faint marker per query token of every panel: hovering names the token, clicking it (the
    # page's on_select) shows only its lines; customdata = the token's index
    mx, my, mt, mc = [], [], [], []
    for l in range(L):
        for h in range(H):
            for i in range(T):
                mx.append(h * (1 + gap_x))
                my.append(-l * (T + gap_y) - i)
                mt.append(f"{tl[i]} (layer {first_layer + l}, head {h}): click to see only its lines")
                mc.append(i)
    fig.add_trace(go.Scatter(x=mx, y=my, mode="markers", marker=dict(size=7, color=color, opacity=0.25),
                             hovertext=mt, hoverinfo="text", customdata=mc, showlegend=False, name="tokens"))
    every = max(1, -(-T // 8))  # at most 8 labels per panel side: every n-th token
    tickvals, ticktext = [], []
    for l in range(L):
        for i in range(0, T, every):
            tickvals.append(-l * (T + gap_y) - i)
            ticktext.append(tl[i])
        fig.add_annotation(x=-0.02, y=-l * (T + gap_y) + 1.4, xref="x", yref="y", showarrow=False, xanchor="left",
                           text=f"<b>layer {first_layer + l}</b>", font=dict(size=11))
    for h in range(H):
        fig.add_annotation(x=h * (1 + gap_x) + 0.5, y=2.6, xref="x", yref="y", showarrow=False,
                           text=f"H{h}", font=dict(size=11))
    fig.update_xaxes(visible=False, range=[-0.05, H * (1 + gap_x) - gap_x + 0.05], fixedrange=True)
    fig.update_yaxes(range=[-(L - 1) * (T + gap_y) - T + 0.5, 3.4], tickvals=tickvals, ticktext=ticktext,
                     showgrid=False, zeroline=False, tickfont=dict(size=9), fixedrange=True)
    side = max(120, min(220, 6 * T))
    fig.update_layout(title=dict(text=title, x=0, xanchor="left") if title else None, font=FONT,
                      height=L * side + 60, margin=dict(l=10, r=10, t=40 if title else 10, b=10),
                      plot_bgcolor="rgba(0,0,0,0)")
    return fig


def multi_head_lines(weights: np.ndarray, labels: Sequence[str], *, only: int | None = None,
                     title: str = "") -> go.Figure:
    """weights (H, T, T) of one layer: every head's lines in one panel, one colour per head (legend:
    click a head to hide it). Token labels on both sides."""
    w = as_array(weights, 3, "weights", "(H, T, T)").astype(np.float64)
    H, T, _ = w.shape
    check_labels(labels, T, "labels")
    palette = OKABE_ITO + ["#8c564b", "#7f7f7f", "#bcbd22", "#17becf", "#9467bd"]
    fig = go.Figure()
    bounds = list(LEVELS) + [1.01]
    for h in range(H):
        for k in range(len(LEVELS)):
            xs, ys = _segments(w[h], bounds[k], bounds[k + 1], only)
            if xs:
                fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", legendgroup=f"h{h}",
                                         name=f"head {h}", showlegend=k == 0 or not any(
                                             _segments(w[h], bounds[m], bounds[m + 1], only)[0] for m in range(k)),
                                         line=dict(color=palette[h % len(palette)], width=1 + 1.5 * k),
                                         opacity=OPACITY[k]))
    tl = token_labels(labels)
    fig.update_xaxes(range=[-0.3, 1.3], visible=False)
    fig.update_yaxes(range=[-T + 0.5, 0.5], tickvals=list(range(0, -T, -1)), ticktext=tl, showgrid=False, zeroline=False)
    for i, t in enumerate(tl):  # key labels on the right
        fig.add_annotation(x=1.02, y=-i, text=t, showarrow=False, xanchor="left", font=dict(size=11))
    height = max(320, 22 * T + 110)
    # the legend under the title, in the top margin (with 12 heads it wrapped to two rows over the title)
    fig.update_layout(title=dict(text=title, x=0, xanchor="left", y=1, yanchor="top", yref="container",
                                 pad=dict(t=8)) if title else None, font=FONT,
                      height=height, margin=dict(l=10, r=10, t=90 if title else 60, b=10),
                      legend=legend_below_title(36 if title else 0, height),
                      plot_bgcolor="rgba(0,0,0,0)")
    return fig
