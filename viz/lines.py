"""Token-to-token line view (BertViz head-view style) as a self-contained SVG in HTML.

Queries on the left, keys on the right; a line from query i to key j whose opacity is the weight.
Hovering a token isolates its lines (pure CSS with :hover / :has(), no JavaScript, nothing
fetched). Every token is HTML-escaped. Lines below `min_weight` are left out, so what is sent grows
with what is visible, not with T^2.
"""
from __future__ import annotations

import html
from typing import Sequence

import numpy as np

from .common import OKABE_ITO, as_array, check_labels, token_labels

ROW = 24  # px between tokens


def token_lines_html(weights: np.ndarray, labels: Sequence[str], *, color: str = OKABE_ITO[0],
                     min_weight: float = 0.01, title: str = "", dom_id: str | None = None) -> str:
    """weights (Tq, Tk) -> HTML (style + svg). Each line carries data-q, data-k and data-w (the
    weight, 4 decimals) and stroke-opacity = weight."""
    w = as_array(weights, 2, "weights", "(Tq, Tk)").astype(np.float64)
    Tq, Tk = w.shape
    if Tq != Tk:
        raise ValueError(f"the line view needs self-attention weights (T, T); got {w.shape}")
    check_labels(labels, Tq, "labels")
    if not 0 <= min_weight < 1:
        raise ValueError("min_weight must be in [0, 1)")
    names = token_labels(labels, max_chars=18)
    uid = dom_id or "al-lines"
    width, lx, rx = 560, 200, 360
    height = ROW * max(Tq, Tk) + 40
    css = [f"#{uid} svg {{font: 14px system-ui, sans-serif; user-select: none}}",
           f"#{uid} line {{stroke: {color}; stroke-width: 2.5}}",
           f"#{uid} text {{cursor: default; fill: #222}}",
           f"#{uid} text:hover {{font-weight: 700; fill: {color}}}",
           # hover a query: only its lines stay; hover a key: only lines into it stay
           f"#{uid}:has(g.q:hover) g.q:not(:hover) line {{visibility: hidden}}"]
    css += [f"#{uid}:has(text.k{j}:hover) line:not(.k{j}) {{visibility: hidden}}" for j in range(Tk)]
    parts = [f'<div id="{uid}" class="al-lines">', "<style>", "\n".join(css), "</style>",
             f'<svg role="img" aria-label="attention lines" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}">']
    if title:
        parts.append(f'<text x="{width // 2}" y="16" text-anchor="middle" font-weight="600">{html.escape(title)}</text>')
    y0 = 40
    for i in range(Tq):
        yi = y0 + ROW * i
        parts.append(f'<g class="q q{i}">')
        for j in np.nonzero(w[i] >= max(min_weight, 1e-12))[0]:
            yj = y0 + ROW * int(j)
            parts.append(f'<line class="k{j}" data-q="{i}" data-k="{j}" data-w="{w[i, j]:.4f}" '
                         f'x1="{lx + 6}" y1="{yi - 5}" x2="{rx - 6}" y2="{yj - 5}" stroke-opacity="{w[i, j]:.4f}">'
                         f"<title>{names[i]} → {names[j]}: {w[i, j]:.4f}</title></line>")
        parts.append(f'<text x="{lx}" y="{yi}" text-anchor="end">{names[i]}</text></g>')
    for j in range(Tk):
        parts.append(f'<text class="k{j}" x="{rx}" y="{y0 + ROW * j}">{names[j]}</text>')
    parts += ["</svg>", "</div>"]
    return "".join(parts)
