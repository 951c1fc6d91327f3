"""Token-to-token line view (BertViz head-view style) as self-contained HTML (no SVG, no JavaScript).

Queries on the left, keys on the right; a line from query i to key j whose opacity is the weight.
Each line is an absolutely positioned, rotated <div> (st.html sanitises with DOMPurify's HTML
profile, which strips <svg>; plain HTML + CSS survives it). Hovering a token isolates its lines
(pure CSS with :hover / :has(), nothing fetched); hovering a line shows its exact value (title).
Every token is HTML-escaped. Lines below `min_weight` are left out, so what is sent grows with
what is visible, not with T^2.
"""
from __future__ import annotations

import html
import math
from typing import Sequence

import numpy as np

from .common import OKABE_ITO, as_array, check_labels, token_labels

ROW = 26  # px between tokens


def token_lines_html(weights: np.ndarray, labels: Sequence[str], *, color: str = OKABE_ITO[0],
                     min_weight: float = 0.01, title: str = "", dom_id: str | None = None) -> str:
    """weights (Tq, Tk) -> HTML (style + divs). Each line carries data-q, data-k and data-w (the
    weight, 4 decimals) and opacity = weight."""
    w = as_array(weights, 2, "weights", "(Tq, Tk)").astype(np.float64)
    Tq, Tk = w.shape
    if Tq != Tk:
        raise ValueError(f"the line view needs self-attention weights (T, T); got {w.shape}")
    check_labels(labels, Tq, "labels")
    if not 0 <= min_weight < 1:
        raise ValueError("min_weight must be in [0, 1)")
    names = token_labels(labels, max_chars=18)
    uid = dom_id or "al-lines"
    width, lx, rx = 600, 220, 380
    y0 = 44 if title else 16
    height = y0 + ROW * max(Tq, Tk) + 10
    css = [f"#{uid} {{position: relative; width: {width}px; height: {height}px; "
           # the theme's text colour (a fixed #222 was unreadable on the dark theme, issue 33)
           "font: 16px system-ui, sans-serif; user-select: none; color: inherit}",
           f"#{uid} .ln {{position: absolute; height: 3px; background: {color}; transform-origin: 0 50%}}",
           f"#{uid} .ln:hover {{outline: 1px solid {color}}}",
           f"#{uid} .tok {{position: absolute; line-height: {ROW}px; white-space: nowrap; cursor: default}}",
           f"#{uid} .ql {{right: {width - lx}px; text-align: right}}",
           # hovered: bold and underlined, in the text colour (the line colour is too dark on a dark theme)
           f"#{uid} .tok:hover {{font-weight: 700; text-decoration: underline {color} 2px}}",
           f"#{uid} .ttl {{position: absolute; left: 0; right: 0; top: 4px; text-align: center; font-weight: 600}}",
           # hover a query: only its lines stay; hover a key: only lines into it stay
           f"#{uid}:has(.ql:hover) .q:not(:has(.ql:hover)) .ln {{visibility: hidden}}"]
    css += [f"#{uid}:has(.kl.k{j}:hover) .ln:not(.k{j}) {{visibility: hidden}}" for j in range(Tk)]
    parts = [f'<div id="{uid}" class="al-lines" role="img" aria-label="attention lines: queries left, keys right">',
             "<style>", "\n".join(css), "</style>"]
    if title:
        parts.append(f'<div class="ttl">{html.escape(title)}</div>')
    x1, x2 = lx + 8, rx - 8
    for i in range(Tq):
        yi = y0 + ROW * i + ROW / 2
        parts.append(f'<div class="q q{i}">')
        for j in np.nonzero(w[i] >= max(min_weight, 1e-12))[0]:
            yj = y0 + ROW * int(j) + ROW / 2
            dx, dy = x2 - x1, yj - yi
            length, angle = math.hypot(dx, dy), math.degrees(math.atan2(dy, dx))
            parts.append(f'<div class="ln k{j}" data-q="{i}" data-k="{j}" data-w="{w[i, j]:.4f}" '
                         f'title="{names[i]} → {names[j]}: {w[i, j]:.4f}" '
                         f'style="left: {x1}px; top: {yi - 1.5:.1f}px; width: {length:.1f}px; '
                         f'transform: rotate({angle:.2f}deg); opacity: {w[i, j]:.4f}"></div>')
        parts.append(f'<span class="tok ql" style="top: {y0 + ROW * i}px">{names[i]}</span></div>')
    for j in range(Tk):
        parts.append(f'<span class="tok kl k{j}" style="left: {rx}px; top: {y0 + ROW * j}px">{names[j]}</span>')
    parts.append("</div>")
    return "".join(parts)
