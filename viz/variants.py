"""Figures of the Variants page: the heads of one variant in a row and ALiBi's bias matrices.
Arrays + labels in, figure out (no streamlit, no torch)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .attention import head_grid
from .common import (FONT, MASKED_COLOR, as_array, axes, check_labels, figure, label_margins, masked_z, scale,
                     subplot_layout, token_labels)


def variant_heads(weights: np.ndarray, labels: Sequence[str], *, allowed: np.ndarray | None = None,
                  kv_head: np.ndarray | None = None, title: str = "", height: int = 330) -> go.Figure:
    """weights (H, T, T) of one variant: its heads in one row on the shared 0..1 scale, masked
    cells (allowed False: causal, outside the window) grey. kv_head (H,): which K/V head each
    query head reads (grouped/multi-query attention), named in the panel titles."""
    w = as_array(weights, 3, "weights", "(H, T, T)")
    H = w.shape[0]
    subtitles = None
    if kv_head is not None:
        kv = np.asarray(kv_head).ravel()
        if kv.shape != (H,):
            raise ValueError(f"kv_head must have one entry per head ({H}), got shape {np.asarray(kv_head).shape}")
        subtitles = [f"head {h} · K/V {int(kv[h])}" for h in range(H)]
    fig = head_grid(w, labels, allowed=allowed, title=title, subtitles=subtitles, cols=H)
    if subtitles is not None:  # one row of narrow panels: keep "head h · K/V g" on one line
        for a in fig.layout.annotations:
            a.text = a.text.replace("<br>", " · ")
    mb = int(fig.layout.margin.b or 0)
    fig.update_layout(height=height + mb)
    return fig


def bias_grid(bias: np.ndarray, labels: Sequence[str], slopes: Sequence[float], *,
              allowed: np.ndarray | None = None, title: str = "", height: int = 330) -> go.Figure:
    """ALiBi's additive biases (H, T, T), −slope_h·|i − j|, one panel per head titled with its
    slope; one shared colour scale from the most negative bias to 0. Masked cells grey."""
    b = as_array(bias, 3, "bias", "(H, T, T)")
    H, Tq, Tk = b.shape
    s = np.asarray(slopes, dtype=float).ravel()
    if s.shape != (H,):
        raise ValueError(f"slopes must have one value per head ({H}), got {s.shape}")
    check_labels(labels, Tq, "labels")
    if Tq != Tk:
        raise ValueError(f"bias must be square (T, T) per head, got {Tq} × {Tk}")
    if allowed is not None:
        allowed = np.broadcast_to(np.asarray(allowed, dtype=bool), b.shape)
    names = [f"head {h} · slope 1/{1 / s[h]:.3g}" for h in range(H)]
    layout, refs = subplot_layout(1, H, names, hspace=0.03, vspace=0.0, title_size=13)
    x = y = token_labels(labels)
    show_ticks = Tq <= 40
    data = []
    for h in range(H):
        xr, yr = refs[h]
        data.append(dict(type="heatmap", z=masked_z(b[h], None if allowed is None else allowed[h]), x=x, y=y,
                         coloraxis="coloraxis", hoverongaps=False, xaxis=xr, yaxis=yr,
                         hovertemplate=f"head {h}<br>query %{{y}}<br>key %{{x}}<br>bias %{{z:.4f}}<extra></extra>"))
    axes(layout, y_autorange="reversed", y_type="category", y_showticklabels=show_ticks, y_automargin=False,
         x_type="category", x_showticklabels=show_ticks, x_tickangle=-60, x_automargin=False)
    for i in range(1, H):
        layout[f"yaxis{i + 1}"]["showticklabels"] = False
    ml, mb = label_margins(x, y) if show_ticks else (10, 10)
    lo = float(np.min(b)) if b.size else -1.0
    layout.update(title=dict(text=title) if title else None, font=FONT, plot_bgcolor=MASKED_COLOR,
                  coloraxis=dict(colorscale=scale("Viridis"), cmin=min(lo, -1e-6), cmax=0.0,
                                 colorbar=dict(title=dict(text="bias"), thickness=14)),
                  height=height + mb, margin=dict(l=ml, r=10, t=70 if title else 40, b=mb))
    return figure(data, layout)
