"""Figures of the concept pages: bars, lines, labelled matrices, histograms, top-k tables.

Pure numpy/pandas -> plotly: arrays and labels in, a Figure out; never displays. Shapes are
checked (ValueError says what to fix); token labels are made unique and HTML-escaped
(viz.common.token_labels), and any other user or vocabulary text goes through viz.common.visible.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import (DIVERGING_SCALE, FONT, WEIGHT_SCALE, as_array, auto_ticks, block_labels, check_labels,
                     legend_below_title, token_labels, visible)

# Okabe-Ito: colour-blind-safe categorical colours.
COLORS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]


def _layout(fig: go.Figure, title: str, height: int, subtitle: str = "") -> go.Figure:
    """Title on its own line at the top (a subtitle under it), a horizontal legend between it and the
    plot (they never overlap)."""
    legend = sum(1 for t in fig.data if t.showlegend is not False) > 1
    top = (34 if title else 10) + (18 if title and subtitle else 0) + (30 if legend else 0)
    fig.update_layout(title=dict(text=title, x=0, xanchor="left", y=1, yanchor="top", yref="container",
                                 pad=dict(t=8), **(dict(subtitle=dict(text=subtitle)) if subtitle else {}))
                      if title else None,
                      font=FONT, height=height + (30 if legend else 0), margin=dict(l=10, r=10, t=top, b=10),
                      showlegend=legend,
                      legend=legend_below_title(34 if title else 0, height + (30 if legend else 0)))
    return fig


def _series(series: Mapping[str, Sequence[float]], n: int | None, what: str) -> dict[str, np.ndarray]:
    if not series:
        raise ValueError(f"{what}: pass at least one series")
    out = {}
    for name, vals in series.items():
        a = np.asarray(vals, dtype=np.float64)
        if a.ndim != 1:
            raise ValueError(f"{what}: series {name!r} must be 1-D, got shape {a.shape}")
        if n is not None and a.size != n:
            raise ValueError(f"{what}: series {name!r} has {a.size} values but there are {n} categories/x values")
        out[name] = a
    return out


def bar_compare(categories: Sequence[str], series: Mapping[str, Sequence[float]], *, title: str = "",
                yaxis: str = "", tokens: bool = True, height: int = 340, text_format: str | None = None,
                log_y: bool = False) -> go.Figure:
    """Grouped bars: one group per category (token labels made unique and escaped when tokens);
    log_y for values spanning several orders of magnitude."""
    cats = token_labels(categories) if tokens else [visible(c) for c in categories]
    data = _series(series, len(cats), "bar_compare")
    fig = go.Figure()
    for i, (name, vals) in enumerate(data.items()):
        fig.add_trace(go.Bar(x=cats, y=vals, name=visible(name), marker_color=COLORS[i % len(COLORS)],
                             text=None if text_format is None else [format(v, text_format) for v in vals],
                             textposition="outside" if text_format else None,
                             hovertemplate=f"{visible(name)}<br>%{{x}}: %{{y:.4f}}<extra></extra>"))
    # the labels that fit the axis (a long input's tokens: every n-th), level or slanted while they fit,
    # else upright: long part names side by side ran into each other at 0°
    fig.update_xaxes(type="category", **auto_ticks("x", angle=-75 if len(cats) > 8 else 0))
    fig.update_yaxes(title=yaxis, type="log" if log_y else "linear")
    fig.update_layout(barmode="group")
    return _layout(fig, title, height)


def line_chart(x: Sequence[float], series: Mapping[str, Sequence[float]], *, title: str = "",
               xaxis: str = "", yaxis: str = "", log_x: bool = False, log_y: bool = False,
               dashed: Sequence[str] = (), markers: bool = True, height: int = 360,
               x_categories: bool = False) -> go.Figure:
    """Lines over a shared x; names in `dashed` are drawn dashed (theory curves)."""
    xs = [visible(v) for v in x] if x_categories else np.asarray(x, dtype=np.float64)
    if not x_categories and xs.ndim != 1:
        raise ValueError(f"x must be 1-D, got shape {xs.shape}")
    data = _series(series, len(xs), "line_chart")
    fig = go.Figure()
    for i, (name, vals) in enumerate(data.items()):
        dash = name in dashed
        fig.add_trace(go.Scatter(x=xs, y=vals, name=visible(name),
                                 mode="lines" if (dash or not markers) else "lines+markers",
                                 line=dict(color=COLORS[i % len(COLORS)], dash="dash" if dash else "solid"),
                                 hovertemplate=f"{visible(name)}<br>x %{{x}}<br>y %{{y:.4g}}<extra></extra>"))
    fig.update_xaxes(title=xaxis, type="log" if log_x else ("category" if x_categories else "linear"))
    fig.update_yaxes(title=yaxis, type="log" if log_y else "linear")
    if log_x:  # label the sampled x values when few (d_k = 1, 2, 4 …), else powers of ten
        fig.update_xaxes(tickvals=xs, ticktext=[f"{v:g}" for v in xs]) if len(xs) <= 12 else fig.update_xaxes(dtick=1)
    if log_y:
        fig.update_yaxes(dtick=1, exponentformat="SI")
    return _layout(fig, title, height)


def _exact(a: np.ndarray) -> np.ndarray:
    """The values as sent to the browser: float32 when they are float32 (the trace's activations:
    half the bytes of float64 and the very same numbers; a 512-token page sent 30 MB of float64
    copies of float32 arrays), float64 otherwise (values computed in float64 stay exact)."""
    return a if a.dtype == np.float32 else a.astype(np.float64)


MATRIX_MAX_CELLS = 196_608  # a matrix chart draws at most this many cells (512 × 384: MiniLM's whole learned
# position table stays exact, ~1 MB of float32); larger (a 512-token similarity map): block means
NARROW_MAX_CELLS = MATRIX_MAX_CELLS // 4  # a chart a third of the page wide (~300 px across): a 512 × 384
# matrix as 2 × 2 block means (0.27 MB instead of 1.06 MB; the positional page drew three of them side by side)


def _block_shape(n_r: int, n_c: int, max_cells: int = MATRIX_MAX_CELLS) -> int:
    """Rows and columns per block (the same step on both axes) so that at most max_cells blocks are
    drawn; 1 (every value) when the matrix is small enough."""
    if n_r * n_c <= max_cells:
        return 1
    step = int(np.ceil(np.sqrt(n_r * n_c / max_cells)))
    while -(-n_r // step) * -(-n_c // step) > max_cells:  # the last, shorter blocks count too
        step += 1
    return step


def block_means(a: np.ndarray, step: int) -> np.ndarray:
    """(rows, cols) -> (ceil(rows/step), ceil(cols/step)): the mean of each step × step block, NaN
    cells left out (a block of NaN only stays NaN). Summed in float64, sent as float32 (a view of
    means, not the values themselves)."""
    if step == 1:
        return a
    ok = np.isfinite(a)
    r, c = np.arange(0, a.shape[0], step), np.arange(0, a.shape[1], step)
    total = np.add.reduceat(np.add.reduceat(np.where(ok, a, 0.0), c, axis=1, dtype=np.float64), r, axis=0)
    count = np.add.reduceat(np.add.reduceat(ok, c, axis=1, dtype=np.int64), r, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan).astype(np.float32)


def _block_names(labels: Sequence[str], step: int, tokens: bool) -> list[str]:
    if tokens:
        return block_labels(labels, step)
    names = [visible(x) for x in labels]
    return [names[a] if step == 1 or a + 1 == min(a + step, len(names)) else f"{names[a]}–{names[min(a + step, len(names)) - 1]}"
            for a in range(0, len(names), step)]


def matrix_heatmap(z: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str], *, title: str = "",
                   colorscale: str = DIVERGING_SCALE, zmid: float | None = 0.0, zmin: float | None = None,
                   zmax: float | None = None, annotate: bool | None = None, value_name: str = "value",
                   row_title: str = "", col_title: str = "", tokens_rows: bool = True,
                   tokens_cols: bool = False, highlight_rows: Sequence[int] = (),
                   highlight_cols: Sequence[int] = (), vlines: Sequence[float] = (),
                   height: int | None = None, fmt: str = ".2f", max_cells: int = MATRIX_MAX_CELLS) -> go.Figure:
    """A labelled (rows, cols) matrix. Rows (and optionally columns) are tokens ("i:token");
    highlighted rows/columns get an outline (e.g. the axis a normalisation averages over);
    vlines draw separators between column blocks (e.g. heads in a concatenation). max_cells: more
    values than this are drawn as block means (a chart in a narrow column has fewer pixels)."""
    a = _exact(as_array(z, 2, "z", "(rows, cols)"))
    check_labels(row_labels, a.shape[0], "row_labels")
    check_labels(col_labels, a.shape[1], "col_labels")
    finite = a[np.isfinite(a)]
    if zmid is not None and finite.size and zmin is None and zmax is None:  # the colour range of every value
        m = float(np.abs(finite - zmid).max()) or 1.0
        zmin, zmax = zmid - m, zmid + m
    # a matrix larger than the chart has pixels (a long input's T x T or T x d_ff): block means, said
    # in the subtitle and the hover; outlined rows/columns keep every value
    step = 1 if (highlight_rows or highlight_cols) else _block_shape(*a.shape, max_cells=max_cells)
    rows_in, cols_in = a.shape
    a = block_means(a, step)
    y, x = _block_names(row_labels, step, tokens_rows), _block_names(col_labels, step, tokens_cols)
    annotate = (a.size <= 120) if annotate is None else (annotate and step == 1)
    what = visible(value_name) if step == 1 else f"mean {visible(value_name)} of the block"
    fig = go.Figure(go.Heatmap(
        z=a, x=x, y=y, colorscale=colorscale, zmin=zmin, zmax=zmax, hoverongaps=False,
        text=np.vectorize(lambda v: "" if np.isnan(v) else format(v, fmt))(a) if annotate else None,  # blank cell: no "nan"
        texttemplate="%{text}" if annotate else None,
        colorbar=dict(title=visible(value_name), thickness=12),
        hovertemplate=f"%{{y}}<br>%{{x}}<br>{what} %{{z:.4f}}<extra></extra>"))
    note = "" if step == 1 else (f"{rows_in:,} × {cols_in:,} values drawn as means of {step}×{step} blocks "
                                 "(the CSV holds every value)")
    n_r, n_c = a.shape
    vlines = [(v + 0.5) / step - 0.5 for v in vlines]
    for r in highlight_rows:
        fig.add_shape(type="rect", x0=-0.5, x1=n_c - 0.5, y0=r - 0.5, y1=r + 0.5,
                      line=dict(color="#E69F00", width=4), xref="x", yref="y")
    for c in highlight_cols:
        fig.add_shape(type="rect", x0=c - 0.5, x1=c + 0.5, y0=-0.5, y1=n_r - 0.5,
                      line=dict(color="#009E73", width=4), xref="x", yref="y")
    for v in vlines:
        fig.add_shape(type="line", x0=v, x1=v, y0=-0.5, y1=n_r - 0.5, line=dict(color="black", width=2),
                      xref="x", yref="y")
    fig.update_yaxes(autorange="reversed", type="category", title=row_title)
    # named columns (H0 … H11) side by side ran into each other in a half-width column (screenshot
    # audit, issue 21 point 7): upright from 9 columns on, one label per column
    if tokens_cols:  # token columns: as many labels as the axis has room for, slanted or upright (never touching)
        fig.update_xaxes(type="category", title=col_title, **auto_ticks("x"))
    else:
        fig.update_xaxes(type="category", title=col_title, tickangle=-90 if n_c > 8 else 0)
    if not tokens_cols and n_c > 12:  # numbered columns (dimensions): a few ticks, not a wall of digits
        fig.update_xaxes(nticks=5)
    if not tokens_rows and n_r > 24:
        fig.update_yaxes(nticks=12)
    return _layout(fig, title or note, height or min(760, 160 + 26 * n_r), subtitle=note if title else "")


HIST_RAW_MAX = 20_000  # histogram_compare sends every value up to this many, else the counted bins


def histogram_compare(samples: Mapping[str, Sequence[float]], *, title: str = "", xaxis: str = "value",
                      nbins: int = 60, height: int = 340) -> go.Figure:
    """Overlaid histograms (probability density) of several value sets. Over HIST_RAW_MAX values
    in all, the bins are counted here (nbins equal bins over the sets' common range, numpy's
    density) and sent as bars, instead of every value (a 512-token MiniLM page sent 393,216 values,
    4.2 MB, for two histograms)."""
    if not samples:
        raise ValueError("histogram_compare: pass at least one sample set")
    sets = {}
    for name, vals in samples.items():
        v = np.asarray(vals, dtype=np.float64).ravel()
        sets[name] = v[np.isfinite(v)]
    fig = go.Figure()
    if sum(v.size for v in sets.values()) <= HIST_RAW_MAX:
        for i, (name, v) in enumerate(sets.items()):
            fig.add_trace(go.Histogram(x=v, name=visible(name), nbinsx=nbins, histnorm="probability density",
                                       opacity=0.6, marker_color=COLORS[i % len(COLORS)]))
    else:
        every = np.concatenate([v for v in sets.values()])
        edges = np.histogram_bin_edges(every, bins=nbins)
        mid, width = (edges[:-1] + edges[1:]) / 2, np.diff(edges)
        for i, (name, v) in enumerate(sets.items()):
            dens, _ = np.histogram(v, bins=edges, density=True)
            fig.add_trace(go.Bar(x=mid, y=dens, width=width, name=visible(name), opacity=0.6,
                                 marker=dict(color=COLORS[i % len(COLORS)], line=dict(width=0)),
                                 customdata=np.stack([edges[:-1], edges[1:]], axis=1),
                                 hovertemplate="%{customdata[0]:.3g} to %{customdata[1]:.3g}<br>density %{y:.4g}"
                                               f"<extra>{visible(name)}</extra>"))
    fig.update_layout(barmode="overlay", bargap=0)
    fig.update_xaxes(title=xaxis)
    fig.update_yaxes(title="density")
    return _layout(fig, title, height)


TEXT_ON_BRIGHT, TEXT_ON_DARK = "#1a1a1a", "#ffffff"
TOPK_TEXT_MAX_T = 48  # up to this many positions each cell's token is written in it (rows of 34 px)
BRIGHT_FROM = 0.5  # Cividis is light grey-yellow from about here up: dark text there


def topk_heatmap(probs: np.ndarray, tokens: Sequence[Sequence[str]], labels: Sequence[str], *,
                 title: str = "", height: int | None = None, next_token: bool = True) -> go.Figure:
    """probs (T, k): each position's top-k probabilities, the token written in the cell. next_token:
    row t predicts the token after t (a causal LM); False: the token at t itself (a masked LM)."""
    p = as_array(probs, 2, "probs", "(T, k)").astype(np.float64)
    check_labels(labels, p.shape[0], "labels")
    if len(tokens) != p.shape[0] or any(len(r) != p.shape[1] for r in tokens):
        raise ValueError(f"tokens must be {p.shape[0]} rows of {p.shape[1]} strings (one per cell)")
    text = [[f"{visible(t)}<br>{q:.2f}" for t, q in zip(row, prow)] for row, prow in zip(tokens, p)]
    x, y = [f"#{j + 1}" for j in range(p.shape[1])], token_labels(labels)
    written = p.shape[0] <= TOPK_TEXT_MAX_T  # two lines of text per cell need ~34 px rows
    fig = go.Figure(go.Heatmap(
        z=p, x=x, y=y, zmin=0.0, zmax=1.0,
        colorscale=WEIGHT_SCALE, text=text, colorbar=dict(title="p", thickness=12),
        hovertemplate=("after" if next_token else "at") + " %{y}<br>rank %{x}: %{text}<extra></extra>"))
    # The cell text is a separate text layer so each cell gets its own colour: dark on the bright
    # (yellow) end of Cividis, white on the dark end. One fixed colour put white text on bright
    # yellow (issue 21, point 7).
    xx, yy = np.meshgrid(np.arange(p.shape[1]), np.arange(p.shape[0]))
    if written:
        fig.add_trace(go.Scatter(
            x=[x[j] for j in xx.ravel()], y=[y[i] for i in yy.ravel()], mode="text",
            text=[text[i][j] for i, j in zip(yy.ravel(), xx.ravel())], hoverinfo="skip", showlegend=False,
            textfont=dict(color=[TEXT_ON_BRIGHT if q >= BRIGHT_FROM else TEXT_ON_DARK for q in p.ravel()], size=12)))
    note = "" if written else f"{p.shape[0]} positions: hover a cell for its token"  # text would overlap
    fig.update_yaxes(autorange="reversed", type="category",
                     title="position (next token predicted after it)" if next_token else "position (token predicted at it)")
    fig.update_xaxes(type="category", title="rank")
    # rows of 34 px hold the two lines of cell text: the chart grows with the positions written
    return _layout(fig, title or note, height or (140 + 34 * p.shape[0] if written else 900),
                   subtitle=note if title else "")


def pe_curves(pe: np.ndarray, dims: Sequence[int], *, title: str = "", height: int = 360) -> go.Figure:
    """Chosen dimensions of a (positions, D) table as curves over position (even = sin, odd = cos)."""
    a = as_array(pe, 2, "pe", "(positions, d_model)")
    bad = [d for d in dims if not 0 <= int(d) < a.shape[1]]
    if bad:
        raise ValueError(f"dims {bad} are outside 0..{a.shape[1] - 1}")
    series = {f"dim {d} ({'sin' if d % 2 == 0 else 'cos'})": a[:, d] for d in dims}
    return line_chart(np.arange(a.shape[0]), series, title=title, xaxis="position", yaxis="PE value",
                      markers=False, height=height)


def two_heatmaps(left: np.ndarray, right: np.ndarray, titles: tuple[str, str], *, title: str = "",
                 row_title: str = "position", col_title: str = "dimension", height: int = 380,
                 shared_scale: bool = False) -> go.Figure:
    """Two numeric matrices side by side on diverging colour scales centred at 0 (e.g. sinusoidal vs
    learned position tables). By default each side has its own scale and colour bar (a learned
    table's values can be several times larger, which would wash out the other side);
    shared_scale=True puts both on one scale."""
    l, r = as_array(left, 2, "left", "(rows, cols)"), as_array(right, 2, "right", "(rows, cols)")
    if l.shape != r.shape:
        raise ValueError(f"left {l.shape} and right {r.shape} must have the same shape")
    fig = make_subplots(rows=1, cols=2, subplot_titles=[visible(t) for t in titles], horizontal_spacing=0.1)
    both = float(max(np.abs(l).max(), np.abs(r).max()) or 1.0)
    # each side at most MATRIX_MAX_CELLS / 2 cells (a long input's position tables): block means
    step = _block_shape(*l.shape, max_cells=MATRIX_MAX_CELLS // 2)
    rn = _block_names([str(i) for i in range(l.shape[0])], step, False)
    cn = _block_names([str(j) for j in range(l.shape[1])], step, False)
    what = "" if step == 1 else "mean of the block "
    for c, a in ((1, l), (2, r)):
        axis = "coloraxis" if (shared_scale or c == 1) else "coloraxis2"
        z = block_means(_exact(np.asarray(a)), step)
        fig.add_trace(go.Heatmap(z=z, coloraxis=axis, **(dict(x=cn, y=rn) if step > 1 else {}),
                                 hovertemplate=f"{row_title} %{{y}}<br>{col_title} %{{x}}<br>{what}%{{z:.4f}}<extra></extra>"),
                      row=1, col=c)
        fig.update_yaxes(autorange="reversed", title=row_title if c == 1 else None, row=1, col=c)
        fig.update_xaxes(title=col_title, row=1, col=c)
    # Colour bars lie flat under their own panel: standing between the panels, the left one's numbers
    # ran into the right panel's row labels (issue 21, point 7).
    def bar(c: int) -> dict:
        dom = fig.layout["xaxis" + ("" if c == 1 else "2")].domain
        return dict(orientation="h", thickness=10, len=dom[1] - dom[0], lenmode="fraction", x=(dom[0] + dom[1]) / 2,
                    xanchor="center", y=-0.2, yanchor="top", yref="paper", ticks="outside")
    if shared_scale:
        fig.update_layout(coloraxis=dict(colorscale=DIVERGING_SCALE, cmin=-both, cmax=both,
                                         colorbar=dict(bar(1), len=1.0, x=0.5)))
    else:
        ml, mr = float(np.abs(l).max() or 1.0), float(np.abs(r).max() or 1.0)
        fig.update_layout(
            coloraxis=dict(colorscale=DIVERGING_SCALE, cmin=-ml, cmax=ml, colorbar=bar(1)),
            coloraxis2=dict(colorscale=DIVERGING_SCALE, cmin=-mr, cmax=mr, colorbar=bar(2)))
    note = "" if step == 1 else f"{l.shape[0]:,} × {l.shape[1]:,} values each, drawn as means of {step}×{step} blocks"
    fig = _layout(fig, title or note, height + 60, subtitle=note if title else "")
    fig.update_layout(margin=dict(b=70))
    if step > 1:
        fig.update_xaxes(type="category", nticks=5)
        fig.update_yaxes(type="category", nticks=8)
    return fig
