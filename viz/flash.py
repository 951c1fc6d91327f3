"""Figures of the tiled-attention (FlashAttention) page: the score matrix with the key tile being
read, the running max and sum per query, the output so far against the final one.

Pure numpy -> plotly; never displays. Shapes are checked (ValueError says what to fix); token
labels are made unique and escaped (viz.common.token_labels).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import (DIVERGING_SCALE, FONT, MASKED_COLOR, as_array, check_labels, legend_below_title, masked_z,
                     subplot_layout, token_labels)

CURRENT = "#E69F00"  # Okabe-Ito orange: the tile being read
DONE = "#0072B2"  # blue: tiles already read
FINAL = "#D55E00"  # vermillion: final values


def _layout(fig: go.Figure, title: str, height: int, legend: bool = False, panels: bool = False) -> go.Figure:
    top = 40 + (28 if legend else 0) + (30 if panels else 0)  # panel titles sit above the plot area
    fig.update_layout(title=dict(text=title, x=0, xanchor="left", y=1, yanchor="top", yref="container",
                                 pad=dict(t=8)) if title else None,
                      font=FONT, height=height, margin=dict(l=10, r=10, t=top, b=10), showlegend=legend,
                      legend=legend_below_title(36 if title else 0, height))
    return fig


def tile_scores(scaled: np.ndarray, allowed: np.ndarray | None, labels: Sequence[str], *, k_start: int,
                k_end: int, tile: int, title: str = "", height: int | None = None) -> go.Figure:
    """The (Tq, Tk) scaled scores (grey = masked) with the key block k_start..k_end-1 outlined in
    orange, the blocks already read outlined in blue and the keys not read yet veiled."""
    s = as_array(scaled, 2, "scaled", "(Tq, Tk) scaled scores")
    Tq, Tk = s.shape
    check_labels(labels, Tk, "labels")
    if Tq > Tk:
        raise ValueError(f"scaled has more queries ({Tq}) than keys ({Tk}); pass the self-attention matrix")
    if not (0 <= k_start < k_end <= Tk) or tile < 1:
        raise ValueError(f"key block {k_start}..{k_end} (tile {tile}) is outside 0..{Tk}")
    z = masked_z(s, allowed)
    z = z if z.dtype == np.float32 else z.astype(np.float64)  # float32 scores sent as float32: half the bytes, the same numbers
    finite = z[np.isfinite(z)]
    m = float(np.abs(finite).max()) if finite.size else 1.0
    lab = token_labels(labels)
    fig = go.Figure(go.Heatmap(z=z, x=lab, y=lab[:Tq], colorscale=DIVERGING_SCALE, zmin=-m, zmax=m, hoverongaps=False,
                               colorbar=dict(title="score", thickness=12),
                               hovertemplate="query %{y}<br>key %{x}<br>scaled score %{z:.3f}<extra></extra>"))
    for b0 in range(0, k_start, tile):  # blocks already read
        fig.add_shape(type="rect", x0=b0 - 0.5, x1=min(b0 + tile, Tk) - 0.5, y0=-0.5, y1=Tq - 0.5,
                      line=dict(color=DONE, width=1.5), xref="x", yref="y")
    if k_end < Tk:  # keys not read yet: veiled
        fig.add_shape(type="rect", x0=k_end - 0.5, x1=Tk - 0.5, y0=-0.5, y1=Tq - 0.5, line=dict(width=0),
                      fillcolor="rgba(140, 140, 140, 0.6)", xref="x", yref="y", layer="above")
    fig.add_shape(type="rect", x0=k_start - 0.5, x1=k_end - 0.5, y0=-0.5, y1=Tq - 0.5,
                  line=dict(color=CURRENT, width=4), xref="x", yref="y")
    fig.update_yaxes(autorange="reversed", type="category", title="query")
    fig.update_xaxes(type="category", title="key", tickangle=-60, showticklabels=Tk <= 64)
    # masked cells are NaN (no colour): the plot area behind them is grey, as on every attention
    # map, also inside the tile being read (issue 33: they showed the page's white there)
    fig.update_layout(plot_bgcolor=MASKED_COLOR)
    return _layout(fig, title, height or min(720, max(320, 200 + 18 * Tq)))


def running_stats(m: np.ndarray, l: np.ndarray, m_final: np.ndarray, l_final: np.ndarray,
                  labels: Sequence[str], *, title: str = "", height: int = 420) -> go.Figure:
    """Two panels over the queries: the running max m (bars) with the final max (markers), and the
    running sum l = Σ exp(score − m) with its final value. m = −∞ (no allowed key read yet) is a gap."""
    arrs = [as_array(x, 1, n, "(Tq,)") for x, n in ((m, "m"), (l, "l"), (m_final, "m_final"), (l_final, "l_final"))]
    n = arrs[0].size
    for a, name in zip(arrs, ("m", "l", "m_final", "l_final")):
        if a.size != n:
            raise ValueError(f"{name} has {a.size} values but m has {n}: pass one value per query")
    check_labels(labels, n, "labels")
    m, l, mf, lf = (np.where(np.isfinite(a), a, np.nan).astype(np.float64) for a in arrs)
    x = token_labels(labels)
    layout, refs = subplot_layout(1, 2, ["running max m (bars) and its final value (◆)",
                                         "running sum l = Σ exp(score − m) and its final value (◆)"],
                                  hspace=0.08, vspace=0.0, title_size=13)
    fig = go.Figure(layout=layout)
    for (xr, yr), now, fin, name in ((refs[0], m, mf, "m"), (refs[1], l, lf, "l")):
        fig.add_trace(go.Bar(x=x, y=now, xaxis=xr, yaxis=yr, marker_color=CURRENT, name=f"{name} so far",
                             showlegend=name == "m",
                             hovertemplate=f"%{{x}}<br>{name} so far %{{y:.4f}}<extra></extra>"))
        fig.add_trace(go.Scatter(x=x, y=fin, xaxis=xr, yaxis=yr, mode="markers", name="final",
                                 marker=dict(symbol="diamond", color=FINAL, size=8), showlegend=name == "m",
                                 hovertemplate=f"%{{x}}<br>final {name} %{{y:.4f}}<extra></extra>"))
    fig.update_xaxes(type="category", tickangle=-60, showticklabels=n <= 64)
    return _layout(fig, title, height, panels=True)


def output_progress(out: np.ndarray, final: np.ndarray, labels: Sequence[str], *, title: str = "",
                    height: int | None = None) -> go.Figure:
    """Output so far (O / l after the keys read) beside the final output, (Tq, d_v) each, one colour
    scale centred at 0."""
    a = as_array(out, 2, "out", "(Tq, d_v)").astype(np.float64)
    b = as_array(final, 2, "final", "(Tq, d_v)").astype(np.float64)
    if a.shape != b.shape:
        raise ValueError(f"out {a.shape} and final {b.shape} must have the same shape")
    check_labels(labels, a.shape[0], "labels")
    y = token_labels(labels)
    m = float(max(np.abs(a).max(), np.abs(b).max()) or 1.0)
    layout, refs = subplot_layout(1, 2, ["output so far", "final output (all keys read)"], hspace=0.08,
                                  vspace=0.0, title_size=13)
    fig = go.Figure(layout=layout)
    for (xr, yr), z, name in ((refs[0], a, "so far"), (refs[1], b, "final")):
        fig.add_trace(go.Heatmap(z=z, y=y, xaxis=xr, yaxis=yr, coloraxis="coloraxis",
                                 hovertemplate=f"%{{y}}<br>dimension %{{x}}<br>{name} %{{z:.4f}}<extra></extra>"))
    fig.update_layout(coloraxis=dict(colorscale=DIVERGING_SCALE, cmin=-m, cmax=m,
                                     colorbar=dict(title="value", thickness=12)))
    fig.update_yaxes(autorange="reversed", type="category", showticklabels=a.shape[0] <= 64)
    fig.update_yaxes(showticklabels=False, selector=dict(anchor=refs[1][0]))
    fig.update_xaxes(title="dimension of v")
    return _layout(fig, title, height or min(720, 210 + 16 * a.shape[0]), panels=True)
