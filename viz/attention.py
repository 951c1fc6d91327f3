"""Attention heatmaps: one head, a grid of heads, all layers x heads, causal vs bidirectional,
masks. Rows are queries, columns keys. Masked cells are NaN in z (grey background, no colour)."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import (DIVERGING_SCALE, FONT, MASK_COLORS, MASKED_COLOR, NEG_INF, OKABE_ITO, WEIGHT_SCALE,
                     as_array, check_labels, masked_z, token_labels, visible)


def head_heatmap(weights: np.ndarray, labels: Sequence[str], *, key_labels: Sequence[str] | None = None,
                 allowed: np.ndarray | None = None, title: str = "", zmin: float | None = 0.0,
                 zmax: float | None = 1.0, colorscale: str = WEIGHT_SCALE, zmid: float | None = None,
                 value_name: str = "weight", height: int | None = None,
                 cell_text: np.ndarray | None = None) -> go.Figure:
    """One (Tq, Tk) matrix. Masked cells (allowed False) are NaN -> grey background.
    cell_text: optional (Tq, Tk) strings drawn in the cells (e.g. "−∞" on masked scores)."""
    w = as_array(weights, 2, "weights", "(Tq, Tk)")
    key_labels = labels if key_labels is None else key_labels
    check_labels(labels, w.shape[0], "labels (queries)")
    check_labels(key_labels, w.shape[1], "key_labels")
    y, x = token_labels(labels), token_labels(key_labels)
    extra = {}
    if cell_text is not None:
        extra = dict(text=np.asarray(cell_text, dtype=object).tolist(), texttemplate="%{text}",
                     textfont=dict(size=11))
    fig = go.Figure(go.Heatmap(
        z=masked_z(w, allowed), x=x, y=y, zmin=zmin, zmax=zmax, zmid=zmid, colorscale=colorscale,
        hoverongaps=False, colorbar=dict(title=value_name, thickness=12),
        hovertemplate=f"query %{{y}}<br>key %{{x}}<br>{value_name} %{{z:.4f}}<extra></extra>", **extra))
    n = max(w.shape)
    fig.update_layout(title=title or None, font=FONT, plot_bgcolor=MASKED_COLOR,
                      margin=dict(l=10, r=10, t=40 if title else 10, b=10),
                      height=height or min(760, 220 + 26 * n))
    fig.update_yaxes(autorange="reversed", title="query", type="category")
    fig.update_xaxes(title="key", type="category", tickangle=-60, side="bottom")
    return fig


def grid_shape(n_heads: int, T: int) -> tuple[int, int]:
    """(cols, row height in px) for a grid of n_heads heatmaps of T tokens: big enough to read."""
    if n_heads <= 1:
        return 1, 620
    if n_heads <= 4:
        return 2, 470 if T <= 40 else 520
    if n_heads <= 9:
        return 3, 380
    return 4, 300


def head_grid(weights: np.ndarray, labels: Sequence[str], *, allowed: np.ndarray | None = None,
              title: str = "", subtitles: Sequence[str] | None = None, cols: int | None = None,
              key_labels: Sequence[str] | None = None) -> go.Figure:
    """weights (H, Tq, Tk): every head of one layer in a grid with one shared 0..1 colour scale."""
    w = as_array(weights, 3, "weights", "(H, Tq, Tk)")
    H, Tq, Tk = w.shape
    key_labels = labels if key_labels is None else key_labels
    check_labels(labels, Tq, "labels (queries)")
    check_labels(key_labels, Tk, "key_labels")
    if allowed is not None:
        allowed = np.broadcast_to(np.asarray(allowed, dtype=bool), w.shape)
    auto_cols, side = grid_shape(H, max(Tq, Tk))
    cols = cols or auto_cols
    rows = math.ceil(H / cols)
    names = list(subtitles) if subtitles is not None else [f"head {h}" for h in range(H)]
    if len(names) != H:
        raise ValueError(f"subtitles has {len(names)} entries but there are {H} heads; pass one per head")
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names, horizontal_spacing=0.07,
                        vertical_spacing=min(0.12, 0.5 / rows))
    y, x = token_labels(labels), token_labels(key_labels)
    show_ticks = max(Tq, Tk) <= 40
    for h in range(H):
        r, c = divmod(h, cols)
        fig.add_trace(go.Heatmap(
            z=masked_z(w[h], None if allowed is None else allowed[h]), x=x, y=y, coloraxis="coloraxis",
            hoverongaps=False, name=f"head {h}",
            hovertemplate=f"head {h}<br>query %{{y}}<br>key %{{x}}<br>weight %{{z:.4f}}<extra></extra>"),
            row=r + 1, col=c + 1)
        fig.update_yaxes(autorange="reversed", type="category", showticklabels=show_ticks, row=r + 1, col=c + 1)
        fig.update_xaxes(type="category", showticklabels=show_ticks, tickangle=-60, row=r + 1, col=c + 1)
    fig.update_layout(title=title or None, font=FONT, plot_bgcolor=MASKED_COLOR,
                      coloraxis=dict(colorscale=WEIGHT_SCALE, cmin=0.0, cmax=1.0,
                                     colorbar=dict(title="weight", thickness=14)),
                      height=max(320, rows * side + 70), margin=dict(l=10, r=10, t=70 if title else 40, b=10))
    return fig


def overview_grid(weights: np.ndarray, *, subtitles: Sequence[str] | None = None,
                  allowed: np.ndarray | None = None, title: str = "") -> go.Figure:
    """weights (L, H, Tq, Tk): every head of every layer as a small thumbnail (rows = layers)."""
    w = as_array(weights, 4, "weights", "(L, H, Tq, Tk)")
    L, H = w.shape[:2]
    if allowed is not None:
        allowed = np.broadcast_to(np.asarray(allowed, dtype=bool), w.shape)
    names = list(subtitles) if subtitles is not None else [f"L{l} H{h}" for l in range(L) for h in range(H)]
    if len(names) != L * H:
        raise ValueError(f"subtitles has {len(names)} entries but there are {L * H} heads; pass one per head")
    fig = make_subplots(rows=L, cols=H, subplot_titles=names, horizontal_spacing=0.02 if H > 6 else 0.03,
                        vertical_spacing=min(0.09, 0.45 / L))
    for l in range(L):
        for h in range(H):
            z = masked_z(w[l, h], None if allowed is None else allowed[l, h])
            fig.add_trace(go.Heatmap(z=z, coloraxis="coloraxis", hoverongaps=False,
                                     name=f"L{l} H{h}",
                                     hovertemplate=f"layer {l} head {h}<br>query %{{y}}<br>key %{{x}}"
                                                   "<br>weight %{z:.4f}<extra></extra>"),
                          row=l + 1, col=h + 1)
    fig.update_yaxes(autorange="reversed", showticklabels=False)
    fig.update_xaxes(showticklabels=False)
    side = 260 if H <= 4 else 200 if H <= 8 else 150
    fig.update_layout(title=title or None, font=FONT, plot_bgcolor=MASKED_COLOR,
                      coloraxis=dict(colorscale=WEIGHT_SCALE, cmin=0.0, cmax=1.0,
                                     colorbar=dict(title="weight", thickness=12)),
                      height=max(300, L * side + 80), margin=dict(l=10, r=10, t=60 if title else 40, b=10))
    fig.update_annotations(font_size=11)
    return fig


def compare_grid(a: np.ndarray, b: np.ndarray, labels: Sequence[str], *, allowed_a: np.ndarray | None = None,
                 allowed_b: np.ndarray | None = None, heads: Sequence[int] | None = None,
                 names: tuple[str, str] = ("causal", "bidirectional")) -> go.Figure:
    """a, b (H, T, T): for each head a row [a | b | b - a]. Weights share a 0..1 scale; the
    difference uses a diverging scale centred on 0 (symmetric range)."""
    a = as_array(a, 3, "a", "(H, Tq, Tk)")
    b = as_array(b, 3, "b", "(H, Tq, Tk)")
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape; got {a.shape} and {b.shape}")
    H, Tq, Tk = a.shape
    check_labels(labels, Tq, "labels")
    heads = list(range(H)) if heads is None else [int(h) for h in heads]
    if not heads or any(not 0 <= h < H for h in heads):
        raise ValueError(f"heads must be indices in 0..{H - 1}")
    aa = None if allowed_a is None else np.broadcast_to(np.asarray(allowed_a, bool), a.shape)
    ab = None if allowed_b is None else np.broadcast_to(np.asarray(allowed_b, bool), b.shape)
    diff = (b.astype(np.float32) - a.astype(np.float32))
    lim = float(np.abs(diff[heads]).max()) or 1.0
    titles = []
    for h in heads:
        titles += [f"head {h}: {names[0]}", f"head {h}: {names[1]}", f"head {h}: {names[1]} − {names[0]}"]
    fig = make_subplots(rows=len(heads), cols=3, subplot_titles=titles, horizontal_spacing=0.07,
                        vertical_spacing=min(0.1, 0.45 / len(heads)))
    y = x = token_labels(labels)
    for r, h in enumerate(heads):
        for c, (z, ax, what) in enumerate([(masked_z(a[h], None if aa is None else aa[h]), "coloraxis", "weight"),
                                           (masked_z(b[h], None if ab is None else ab[h]), "coloraxis", "weight"),
                                           (diff[h], "coloraxis2", "difference")]):
            fig.add_trace(go.Heatmap(z=z, x=x, y=y, coloraxis=ax, hoverongaps=False, name=titles[3 * r + c],
                                     hovertemplate=f"{titles[3 * r + c]}<br>query %{{y}}<br>key %{{x}}"
                                                   f"<br>{what} %{{z:.4f}}<extra></extra>"),
                          row=r + 1, col=c + 1)
    show_ticks = max(Tq, Tk) <= 30
    fig.update_yaxes(autorange="reversed", type="category", showticklabels=show_ticks)
    fig.update_xaxes(type="category", showticklabels=show_ticks, tickangle=-60)
    fig.update_layout(font=FONT, plot_bgcolor=MASKED_COLOR,
                      coloraxis=dict(colorscale=WEIGHT_SCALE, cmin=0, cmax=1,
                                     colorbar=dict(title="weight", thickness=12, x=1.0, len=0.45, y=0.78)),
                      coloraxis2=dict(colorscale=DIVERGING_SCALE, cmid=0, cmin=-lim, cmax=lim,
                                      colorbar=dict(title="difference", thickness=12, x=1.0, len=0.45, y=0.22)),
                      height=max(380, 360 * len(heads) + 60), margin=dict(l=10, r=10, t=50, b=10))
    return fig


def mask_heatmap(mask: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str], *,
                 additive: bool = False, title: str = "", height: int | None = None) -> go.Figure:
    """A mask drawn cell by cell: 1/0 (multiplicative) or 0/−∞ (additive). `mask` holds 1/0 or
    0/-inf values; allowed cells are blue, masked cells grey, and each cell shows its value."""
    m = as_array(mask, 2, "mask", "(rows, cols)").astype(np.float64)
    check_labels(row_labels, m.shape[0], "row_labels")
    check_labels(col_labels, m.shape[1], "col_labels")
    ok = np.isfinite(m) & (m != 0) if not additive else np.isfinite(m)
    text = np.where(ok, "0" if additive else "1", NEG_INF if additive else "0")
    fig = go.Figure(go.Heatmap(
        z=ok.astype(np.float32), x=token_labels(col_labels), y=token_labels(row_labels), zmin=0, zmax=1,
        colorscale=[[0, MASK_COLORS[0]], [0.5, MASK_COLORS[0]], [0.5, MASK_COLORS[1]], [1, MASK_COLORS[1]]],
        showscale=False, text=text.tolist(), texttemplate="%{text}", textfont=dict(size=12),
        hovertemplate="row %{y}<br>column %{x}<br>value %{text}<extra></extra>"))
    fig.update_layout(title=title or None, font=FONT, margin=dict(l=10, r=10, t=40 if title else 10, b=10),
                      height=height or min(620, 150 + 24 * m.shape[0]))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", tickangle=-60)
    return fig


def topk_bars(token_names: Sequence[str], p_a: Sequence[float], p_b: Sequence[float], *,
              names: tuple[str, str] = ("causal", "bidirectional"), title: str = "") -> go.Figure:
    """Grouped bars: the probability of each candidate next token under two runs."""
    if not (len(token_names) == len(p_a) == len(p_b)):
        raise ValueError("token_names, p_a and p_b must have the same length")
    x = [visible(t) for t in token_names]
    fig = go.Figure([go.Bar(name=names[0], x=x, y=np.asarray(p_a, dtype=np.float32), marker_color=OKABE_ITO[0],
                            hovertemplate=f"{names[0]}<br>%{{x}}: %{{y:.4f}}<extra></extra>"),
                     go.Bar(name=names[1], x=x, y=np.asarray(p_b, dtype=np.float32), marker_color=OKABE_ITO[1],
                            hovertemplate=f"{names[1]}<br>%{{x}}: %{{y:.4f}}<extra></extra>")])
    fig.update_layout(barmode="group", title=title or None, font=FONT, height=360,
                      yaxis=dict(title="probability", rangemode="tozero"), xaxis=dict(type="category"),
                      margin=dict(l=10, r=10, t=40 if title else 10, b=10))
    return fig
