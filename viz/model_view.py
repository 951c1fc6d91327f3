"""BertViz-style line views: every layer × head as a small panel of lines from the tokens on the
left (queries) to the tokens on the right (keys), and one layer's heads overlaid in one colour each.
The grid is HTML + CSS (hovering a token isolates its lines everywhere, as in BertViz); the one-layer
view is a Plotly figure whose lines are grouped by weight into a few opacity levels."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import FONT, OKABE_ITO, as_array, check_labels, figure, legend_below_title, token_labels

LEVELS = (0.05, 0.2, 0.45, 0.7)  # weight thresholds of the opacity levels (below the first: not drawn)
OPACITY = (0.15, 0.35, 0.65, 1.0)


@dataclass(frozen=True)
class TokenWindow:
    """The rows a line view draws for a window of tokens of a long input (issue 33: 512 tokens made
    a model view of ~110,000 lines and 1,000 hover rules that took the browser minutes; no row had
    a readable label). Rows: one "before" row summing the keys left of the window (when there are
    any), the window's tokens, one "after" row summing the keys right of it. Nothing is dropped: a
    query's weights on the rows still sum to what they summed to (1), and the aggregated rows say
    they are sums. The aggregated rows are keys only (no query lines start there)."""
    weights: np.ndarray  # (..., n, n) float64: rows = displayed queries, columns = displayed keys
    names: list[str]  # n display labels, HTML-escaped ("7:cat"; "Σ 0–95": the keys before the window, summed)
    tokens: range  # the window's token positions
    T: int  # tokens in the input
    queries: tuple[int, ...]  # token position of each displayed row (-1: an aggregated row)

    @property
    def n(self) -> int:
        return len(self.names)

    def row(self, token: int) -> int:
        """The displayed row of a token position inside the window."""
        return self.queries.index(token)


def token_window(weights: np.ndarray, labels: Sequence[str], tokens: range | None = None, *,
                 max_chars: int = 14) -> TokenWindow:
    """weights (..., T, T) -> the rows to draw for `tokens` (a range of positions; None = all T:
    the exact weights, no aggregated rows)."""
    w = np.asarray(weights)
    T = w.shape[-1]
    tokens = range(T) if tokens is None else tokens
    if tokens.step != 1 or not 0 <= tokens.start < tokens.stop <= T:
        raise ValueError(f"tokens must be a range of positions within 0..{T} (step 1), got {tokens}")
    a, b = tokens.start, tokens.stop
    names = token_labels(labels[a:b], max_chars=max_chars, start=a)
    queries = list(tokens)
    inner = np.asarray(w[..., a:b, :], dtype=np.float64)  # the window's queries, every key
    cols = [inner[..., a:b]]
    if a > 0:
        names = [f"Σ 0–{a - 1}"] + names
        queries = [-1] + queries
        cols = [inner[..., :a].sum(axis=-1, keepdims=True)] + cols
    if b < T:
        names = names + [f"Σ {b}–{T - 1}"]
        queries = queries + [-1]
        cols = cols + [inner[..., b:].sum(axis=-1, keepdims=True)]
    n = len(names)
    out = np.zeros((*w.shape[:-2], n, n))
    rows = [r for r, q in enumerate(queries) if q >= 0]
    out[..., rows[0]:rows[-1] + 1, :] = np.concatenate(cols, axis=-1)
    return TokenWindow(weights=out, names=names, tokens=tokens, T=T, queries=tuple(queries))


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
                    height: int, only: int | None, color: str, queries: Sequence[int] | None = None) -> list[str]:
    """The grid's style rules: panel and label boxes, one class per row (.r<i>, T rows), per line
    slope (.d<k>: a line k rows down, "m" for minus) and per opacity step (.o<n> = n/20), and the
    hover rules that isolate a token's lines in every panel (pure CSS :has(:hover)), one per query
    token position (.q<position>; queries: the positions drawn, default 0..T-1)."""
    queries = range(T) if queries is None else [q for q in queries if q >= 0]
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
    css += [f"#{uid}:has(.q{i}:hover) .l:not(.q{i}) {{visibility: hidden}}" for i in queries]
    css += [f"#{uid}:has(.q{i}:hover) .tk.q{i} {{font-weight: 700; color: {color}; font-size: {font}px}}"
            for i in queries]
    if only is not None:
        css.append(f"#{uid}:not(:has(.q:hover)) .l:not(.q{only}) {{visibility: hidden}}")
        css.append(f"#{uid}:not(:has(.q:hover)) .tk.q{only} {{font-weight: 700; color: {color}; font-size: {font}px}}")
    return css


def model_view_html(weights, labels: Sequence[str], *, first_layer: int = 0, only: int | None = None,
                    color: str = OKABE_ITO[0], dom_id: str = "al-model-view", tokens: range | None = None) -> str:
    """weights (L, H, T, T), or a list of L arrays (H, T, T) -> self-contained HTML (style + divs; no
    SVG, no JavaScript: st.html's
    DOMPurify keeps both). A grid of line views, rows = layers, columns = heads, BertViz's model view:
    in each panel a line from query i (left) to key j (right) for every weight >= LEVELS[0], its
    opacity the weight (in steps of 0.05). Hovering a token, in the token column of a layer or on
    the left half of any panel, isolates its lines in every panel (pure CSS :has(:hover)). `only`
    pins one token (a position): its lines alone are shown until another is hovered.

    tokens: a window of positions (long inputs, token_window): only the window's queries are drawn,
    to the window's keys and to two summed rows, the keys before and after it. None: every token.

    Geometry lives in shared classes so a line is ~40 bytes: .r<i> places displayed row i, .d<k> is
    the length and angle of a line k rows down (k = row of j - row of i, "m" for minus), .o<n> the
    opacity n/20. Every label is HTML-escaped; each line carries the class q<position> of its query."""
    if isinstance(weights, (list, tuple)):  # one (H, T, T) array per layer (views of a trace: no copy)
        layers = [as_array(x, 3, "weights[l]", "(H, T, T)") for x in weights]
        if not layers or any(x.shape != layers[0].shape for x in layers):
            raise ValueError("weights: pass L arrays of one shape (H, T, T)")
    else:
        layers = list(as_array(weights, 4, "weights", "(L, H, T, T)"))
    L, (H, T, _) = len(layers), layers[0].shape
    check_labels(labels, T, "labels")
    wins = [token_window(x, labels, tokens) for x in layers]
    win = wins[0]
    if only is not None and only not in win.tokens:
        raise ValueError(f"only must be a token position in {win.tokens.start}..{win.tokens.stop - 1}, got {only}")
    w, names, n = np.stack([x.weights for x in wins]), win.names, win.n
    row = 14 if n <= 24 else max(3, min(14, 420 // n))  # px per displayed row
    font = max(8, min(12, row - 1))
    every = max(1, -(-10 // row))  # show every n-th token label when rows are too thin to read
    lw, gap, pad, head = 112, 10, 4, 20  # label column, gap, line inset, row title (px)
    pw = int(max(48, min(84, (860 - lw) // H - gap)))  # panel width: 12 heads still fit a laptop's page
    width, row_h = lw + H * (pw + gap), head + n * row + 14
    uid = dom_id
    css = _model_view_css(uid, n, row=row, font=font, lw=lw, pw=pw, pad=pad, head=head, width=width,
                          height=20 + L * row_h, only=only, color=color, queries=win.queries)
    parts = [f'<div id="{uid}" class="al-model-view" role="img" aria-label="model view: one line view per layer '
             'and head; hover a token to see only its lines">', "<style>", "\n".join(css), "</style>"]
    parts += [f'<div class="hd" style="left: {lw + h * (pw + gap)}px">head {h}</div>' for h in range(H)]
    q_rows = [r for r, q in enumerate(win.queries) if q >= 0]
    for l in range(L):
        parts.append(f'<div class="lay" style="top: {20 + l * row_h}px"><div class="lt">layer {first_layer + l}</div>')
        for r, q in enumerate(win.queries):
            hide = "" if r % every == 0 or q < 0 else " hide"  # a summed row always keeps its name
            cls = f"tk q q{q} r{r}" if q >= 0 else f"tk sum r{r}"
            parts.append(f'<span class="{cls}{hide}" title="{names[r]}">{names[r]}</span>')
        for h in range(H):
            parts.append(f'<div class="p" style="left: {lw + h * (pw + gap)}px">')
            qi, kj = np.nonzero(w[l, h] >= LEVELS[0])
            for i, j in zip(qi.tolist(), kj.tolist()):
                k = j - i
                parts.append(f'<i class="l q{win.queries[i]} r{i} d{"m" if k < 0 else ""}{abs(k)} '
                             f'o{max(1, min(20, round(w[l, h, i, j] * 20)))}"></i>')
            parts += [f'<i class="s q q{win.queries[r]} r{r}"></i>' for r in q_rows]
            parts.append("</div>")
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)


def multi_head_lines(weights: np.ndarray, labels: Sequence[str], *, only: int | None = None,
                     title: str = "", tokens: range | None = None) -> go.Figure:
    """weights (H, T, T) of one layer: every head's lines in one panel, one colour per head (legend:
    click a head to hide it). Token labels on both sides. tokens: a window of positions (long
    inputs, token_window: the window's queries, to its keys and to the summed keys before and
    after it); None: every token. only: a token position whose lines alone are drawn."""
    w = as_array(weights, 3, "weights", "(H, T, T)")
    H, T, _ = w.shape
    check_labels(labels, T, "labels")
    win = token_window(w, labels, tokens)
    if only is not None and only not in win.tokens:
        raise ValueError(f"only must be a token position in {win.tokens.start}..{win.tokens.stop - 1}, got {only}")
    w, n = win.weights, win.n
    only_row = None if only is None else win.row(only)
    palette = OKABE_ITO + ["#8c564b", "#7f7f7f", "#bcbd22", "#17becf", "#9467bd"]
    bounds = list(LEVELS) + [1.01]
    data = []
    for h in range(H):
        legend = True  # the head's first level with lines carries its legend entry
        for k in range(len(LEVELS)):
            xs, ys = _segments(w[h], bounds[k], bounds[k + 1], only_row)
            if xs:
                data.append(dict(type="scatter", x=xs, y=ys, mode="lines", hoverinfo="skip", legendgroup=f"h{h}",
                                 name=f"head {h}", showlegend=legend,
                                 line=dict(color=palette[h % len(palette)], width=1 + 1.5 * k), opacity=OPACITY[k]))
                legend = False
    tl = win.names
    keys = [dict(x=1.02, y=-i, text=t, showarrow=False, xanchor="left", font=dict(size=11)) for i, t in enumerate(tl)]
    height = max(320, 22 * n + 110)
    # the legend under the title, in the top margin (with 12 heads it wrapped to two rows over the title)
    layout = dict(title=dict(text=title, x=0, xanchor="left", y=1, yanchor="top", yref="container",
                             pad=dict(t=8)) if title else None, font=FONT,
                  xaxis=dict(range=[-0.3, 1.3], visible=False),
                  yaxis=dict(range=[-n + 0.5, 0.5], tickvals=list(range(0, -n, -1)), ticktext=tl, showgrid=False,
                             zeroline=False),
                  annotations=keys,  # key labels on the right
                  height=height, margin=dict(l=10, r=10, t=90 if title else 60, b=10),
                  legend=legend_below_title(36 if title else 0, height),
                  plot_bgcolor="rgba(0,0,0,0)")
    return figure(data, layout)
