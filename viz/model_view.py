"""BertViz-style line views: every layer × head as a small panel of lines from the tokens on the
left (queries) to the tokens on the right (keys), and one layer's heads overlaid in one colour each.
The grid is HTML + CSS (hovering a token isolates its lines everywhere, as in BertViz); the one-layer
view is a Plotly figure whose lines are grouped by weight into a few opacity levels."""
from __future__ import annotations

import math
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


def _model_view_css(uid: str, T: int, *, row: int, font: int, lw: int, pw: int, pad: int, head: int, width: int,
                    height: int, only: int | None, color: str) -> list[str]:
    """The grid's style rules: panel and label boxes, one class per row (.r<i>), per line slope
    (.d<k>: a line k rows down, "m" for minus) and per opacity step (.o<n> = n/20), and the hover
    rules that isolate a token's lines in every panel (pure CSS :has(:hover))."""
    dx = pw - 2 * pad
    ph = T * row
    css = [f"#{uid} {{position: relative; width: {width}px; height: {height}px; font: {font}px system-ui, "
           "sans-serif; user-select: none}",
           f"#{uid} .hd {{position: absolute; top: 0; width: {pw}px; text-align: center; font-size: 12px; opacity: .8}}",
           f"#{uid} .lay {{position: absolute; left: 0; width: {width}px}}",
           f"#{uid} .lt {{position: absolute; left: 0; top: 0; font-size: 12px; font-weight: 600}}",
           f"#{uid} .p {{position: absolute; top: {head}px; width: {pw}px; height: {ph}px; "
           "background: rgba(128, 128, 128, .10)}",
           f"#{uid} .l {{position: absolute; left: {pad}px; height: 1.5px; margin-top: {row / 2 - .75:.2f}px; "
           f"background: {color}; transform-origin: 0 50%}}",
           f"#{uid} .s {{position: absolute; left: 0; width: 45%; height: {row}px; cursor: pointer}}",
           f"#{uid} .tk {{position: absolute; left: 0; width: {lw - 10}px; top: {head}px; height: {row}px; "
           f"line-height: {row}px; text-align: right; white-space: nowrap; overflow: hidden; cursor: pointer}}",
           f"#{uid} .tk.hide {{font-size: 0}}"]
    css += [f"#{uid} .r{i} {{top: {i * row}px}}" for i in range(T)]
    css += [f"#{uid} .tk.r{i} {{top: {head + i * row}px}}" for i in range(T)]
    for k in range(-(T - 1), T):
        length, angle = math.hypot(dx, k * row), math.degrees(math.atan2(k * row, dx))
        css.append(f"#{uid} .d{'m' if k < 0 else ''}{abs(k)} {{width: {length:.1f}px; transform: rotate({angle:.2f}deg)}}")
    css += [f"#{uid} .o{n} {{opacity: {n / 20:.2f}}}" for n in range(1, 21)]
    # hover a token (its label, its strip in any panel, or one of its lines): only its lines stay
    css += [f"#{uid}:has(.q{i}:hover) .l:not(.q{i}) {{visibility: hidden}}" for i in range(T)]
    css += [f"#{uid}:has(.q{i}:hover) .tk.q{i} {{font-weight: 700; color: {color}; font-size: {font}px}}"
            for i in range(T)]
    if only is not None:
        css.append(f"#{uid}:not(:has(.q:hover)) .l:not(.q{only}) {{visibility: hidden}}")
        css.append(f"#{uid}:not(:has(.q:hover)) .tk.q{only} {{font-weight: 700; color: {color}; font-size: {font}px}}")
    return css


def model_view_html(weights: np.ndarray, labels: Sequence[str], *, first_layer: int = 0, only: int | None = None,
                    color: str = OKABE_ITO[0], dom_id: str = "al-model-view") -> str:
    """weights (L, H, T, T) -> self-contained HTML (style + divs; no SVG, no JavaScript: st.html's
    DOMPurify keeps both). A grid of line views, rows = layers, columns = heads, BertViz's model view:
    in each panel a line from query i (left) to key j (right) for every weight >= LEVELS[0], its
    opacity the weight (in steps of 0.05). Hovering a token, in the token column of a layer or on
    the left half of any panel, isolates its lines in every panel (pure CSS :has(:hover)). `only`
    pins one token: its lines alone are shown until another is hovered.

    Geometry lives in shared classes so a line is ~40 bytes: .r<i> places row i, .d<k> is the
    length and angle of a line k rows down (k = j - i, "m" for minus), .o<n> the opacity n/20. Every
    label is HTML-escaped; each line carries the class q<i> of its query."""
    w = as_array(weights, 4, "weights", "(L, H, T, T)").astype(np.float64)
    L, H, T, _ = w.shape
    check_labels(labels, T, "labels")
    if only is not None and not 0 <= only < T:
        raise ValueError(f"only must be a token index in 0..{T - 1}, got {only}")
    names = token_labels(labels, max_chars=14)
    row = 14 if T <= 24 else max(3, min(14, 420 // T))  # px per token row
    font = max(8, min(12, row - 1))
    every = max(1, -(-10 // row))  # show every n-th token label when rows are too thin to read
    lw, gap, pad, head = 112, 10, 4, 20  # label column, gap, line inset, row title (px)
    pw = int(max(48, min(84, (860 - lw) // H - gap)))  # panel width: 12 heads still fit a laptop's page
    width, row_h = lw + H * (pw + gap), head + T * row + 14
    uid = dom_id
    css = _model_view_css(uid, T, row=row, font=font, lw=lw, pw=pw, pad=pad, head=head, width=width,
                          height=20 + L * row_h, only=only, color=color)
    parts = [f'<div id="{uid}" class="al-model-view" role="img" aria-label="model view: one line view per layer '
             'and head; hover a token to see only its lines">', "<style>", "\n".join(css), "</style>"]
    parts += [f'<div class="hd" style="left: {lw + h * (pw + gap)}px">head {h}</div>' for h in range(H)]
    for l in range(L):
        parts.append(f'<div class="lay" style="top: {20 + l * row_h}px"><div class="lt">layer {first_layer + l}</div>')
        for i in range(T):
            hide = "" if i % every == 0 else " hide"
            parts.append(f'<span class="tk q q{i} r{i}{hide}" title="{names[i]}">{names[i]}</span>')
        for h in range(H):
            parts.append(f'<div class="p" style="left: {lw + h * (pw + gap)}px">')
            qi, kj = np.nonzero(w[l, h] >= LEVELS[0])
            for i, j in zip(qi.tolist(), kj.tolist()):
                k = j - i
                parts.append(f'<i class="l q{i} r{i} d{"m" if k < 0 else ""}{abs(k)} '
                             f'o{max(1, min(20, round(w[l, h, i, j] * 20)))}"></i>')
            parts += [f'<i class="s q q{i} r{i}"></i>' for i in range(T)]
            parts.append("</div>")
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)


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
