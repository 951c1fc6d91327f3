"""Attention heatmaps: one head, a grid of heads. Rows are queries, columns keys."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import FONT, MASKED_COLOR, WEIGHT_SCALE, as_array, check_labels, masked_z, token_labels


def head_heatmap(weights: np.ndarray, labels: Sequence[str], *, key_labels: Sequence[str] | None = None,
                 allowed: np.ndarray | None = None, title: str = "", zmin: float = 0.0, zmax: float = 1.0,
                 colorscale: str = WEIGHT_SCALE, zmid: float | None = None, value_name: str = "weight",
                 height: int | None = None) -> go.Figure:
    """One (Tq, Tk) matrix. Masked cells (allowed False) are NaN -> grey background."""
    w = as_array(weights, 2, "weights", "(Tq, Tk)")
    key_labels = labels if key_labels is None else key_labels
    check_labels(labels, w.shape[0], "labels (queries)")
    check_labels(key_labels, w.shape[1], "key_labels")
    y, x = token_labels(labels), token_labels(key_labels)
    fig = go.Figure(go.Heatmap(
        z=masked_z(w, allowed), x=x, y=y, zmin=zmin, zmax=zmax, zmid=zmid, colorscale=colorscale,
        hoverongaps=False, colorbar=dict(title=value_name, thickness=12),
        hovertemplate=f"query %{{y}}<br>key %{{x}}<br>{value_name} %{{z:.4f}}<extra></extra>"))
    n = max(w.shape)
    fig.update_layout(title=title or None, font=FONT, plot_bgcolor=MASKED_COLOR,
                      margin=dict(l=10, r=10, t=40 if title else 10, b=10),
                      height=height or min(720, 180 + 22 * n))
    fig.update_yaxes(autorange="reversed", title="query", type="category")
    fig.update_xaxes(title="key", type="category", tickangle=-60, side="bottom")
    return fig


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
    cols = cols or min(H, 4 if Tq <= 24 else 3)
    rows = math.ceil(H / cols)
    names = list(subtitles) if subtitles is not None else [f"head {h}" for h in range(H)]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names, horizontal_spacing=0.06,
                        vertical_spacing=0.12 / max(rows, 1) + 0.04)
    y, x = token_labels(labels), token_labels(key_labels)
    show_ticks = Tq <= 40
    for h in range(H):
        r, c = divmod(h, cols)
        fig.add_trace(go.Heatmap(
            z=masked_z(w[h], None if allowed is None else allowed[h]), x=x, y=y, coloraxis="coloraxis",
            hoverongaps=False, name=f"head {h}",
            hovertemplate=f"head {h}<br>query %{{y}}<br>key %{{x}}<br>weight %{{z:.4f}}<extra></extra>"),
            row=r + 1, col=c + 1)
        fig.update_yaxes(autorange="reversed", type="category", showticklabels=show_ticks and c == 0,
                         row=r + 1, col=c + 1)
        fig.update_xaxes(type="category", showticklabels=show_ticks, tickangle=-60, row=r + 1, col=c + 1)
    side = 260 if Tq <= 24 else 300
    fig.update_layout(title=title or None, font=FONT, plot_bgcolor=MASKED_COLOR,
                      coloraxis=dict(colorscale=WEIGHT_SCALE, cmin=0.0, cmax=1.0,
                                     colorbar=dict(title="weight", thickness=12)),
                      height=max(300, rows * side + 60), margin=dict(l=10, r=10, t=60, b=10))
    return fig
