"""Figures of the Circuits page (issue 35): layers × heads maps (sinks, induction), the per-token loss
of the induction test, the logit lens, two tokenizations on one text, head-label maps.

Pure numpy -> plotly: arrays and labels in, a Figure out; never displays. Shapes are checked
(ValueError says what to fix); token labels are made unique and HTML-escaped (labels package),
and any other user or vocabulary text goes through `visible`.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from .charts import BRIGHT_FROM, COLORS, TEXT_ON_BRIGHT, TEXT_ON_DARK, matrix_heatmap
from .common import (DIVERGING_SCALE, FONT, MASKED_COLOR, OKABE_ITO, WEIGHT_SCALE, as_array, check_labels,
                     legend_below_title, token_labels, visible)

SPECIAL_MARK = "#7f7f7f"  # tokens that are not in the text ([CLS], [SEP], <bos>): a thin grey mark
HIGHLIGHT = "#D55E00"  # outline of the chosen heads (Okabe-Ito vermillion: visible on Cividis and RdBu)


def _title_layout(fig: go.Figure, title: str, height: int, *, legend: bool = False) -> go.Figure:
    top = (34 if title else 10) + (30 if legend else 0)
    fig.update_layout(title=dict(text=title, x=0, xanchor="left", y=1, yanchor="top", yref="container",
                                 pad=dict(t=8)) if title else None,
                      font=FONT, height=height + (30 if legend else 0), margin=dict(l=10, r=10, t=top, b=10),
                      showlegend=legend, legend=legend_below_title(34 if title else 0, height + (30 if legend else 0)))
    return fig


def layer_head_map(scores: np.ndarray, *, title: str = "", value_name: str = "score", zmin: float | None = 0.0,
                   zmax: float | None = 1.0, diverging: bool = False, highlight: Sequence[tuple[int, int]] = (),
                   first_layer: int = 0, height: int | None = None) -> go.Figure:
    """scores (L, H): one cell per head, layers down, heads across (as the overview). diverging: a
    difference (RdBu around 0, symmetric). highlight [(layer, head)]: outlined cells (the top heads).
    Cells show their value when the map is small enough to read (≤ 12 heads and ≤ 160 cells)."""
    s = as_array(scores, 2, "scores", "(layers, heads)").astype(np.float64)
    L, H = s.shape
    rows = [f"L{first_layer + l}" for l in range(L)]
    cols = [f"H{h}" for h in range(H)]
    if diverging:
        lim = float(np.nanmax(np.abs(s))) if np.isfinite(s).any() else 1.0
        zmin, zmax = -(lim or 1.0), (lim or 1.0)
    fig = matrix_heatmap(s, rows, cols, tokens_rows=False, colorscale=DIVERGING_SCALE if diverging else "Viridis",
                         zmid=0.0 if diverging else None, zmin=zmin, zmax=zmax, annotate=H <= 12 and s.size <= 160,
                         fmt=".2f", row_title="layer", col_title="head", value_name=value_name, title=title,
                         height=height or max(260, min(900, 22 * L + 130)))
    for l, h in highlight:
        l = l - first_layer
        if 0 <= l < L and 0 <= h < H:
            fig.add_shape(type="rect", x0=h - 0.5, x1=h + 0.5, y0=l - 0.5, y1=l + 0.5,
                          line=dict(color=HIGHLIGHT, width=3), xref="x", yref="y")
    fig.update_traces(hovertemplate=f"layer %{{y}}, head %{{x}}<br>{visible(value_name)} %{{z:.4f}}<extra></extra>")
    fig.update_xaxes(tickangle=0 if H <= 16 else -90)  # "H0".."H11" fit upright
    return fig


def loss_by_position(losses: Mapping[str, np.ndarray], n: int, *, title: str = "", height: int = 360) -> go.Figure:
    """Per-token loss of the induction test (2n values each: the loss of predicting token t + 1
    at position t) for one or more runs; the second copy shaded. x = the predicted token's
    position (1 .. 2n)."""
    if not losses:
        raise ValueError("pass at least one loss curve")
    fig = go.Figure()
    for i, (name, loss) in enumerate(losses.items()):
        a = as_array(loss, 1, f"loss {name!r}", "(2n,)").astype(np.float64)
        if a.size != 2 * n:
            raise ValueError(f"loss {name!r} has {a.size} values; the test with n = {n} has {2 * n} predictions")
        fig.add_trace(go.Scatter(x=np.arange(1, 2 * n + 1), y=a, mode="lines", name=visible(name),
                                 line=dict(color=COLORS[i % len(COLORS)], width=2),
                                 hovertemplate=f"{visible(name)}<br>token %{{x}}: %{{y:.2f}} nats<extra></extra>"))
    fig.add_vrect(x0=n + 0.5, x1=2 * n + 0.5, fillcolor=OKABE_ITO[4], opacity=0.12, line_width=0,
                  annotation_text="second copy", annotation_position="top left")
    fig.update_xaxes(title="predicted token (1..n: first copy)", range=[0.5, 2 * n + 0.5])
    fig.update_yaxes(title="loss (nats)", rangemode="tozero")
    return _title_layout(fig, title, height, legend=len(losses) > 1)


def logit_lens_map(next_probs: np.ndarray, top_tokens: Sequence[Sequence[str]], top_probs: np.ndarray,
                   row_names: Sequence[str], labels: Sequence[str], next_labels: Sequence[str], *,
                   title: str = "", show_text: bool | None = None) -> go.Figure:
    """The logit lens: rows = depth (embeddings, after layer 0, …), columns = positions (the token
    at t). Colour: the probability that row's read-out gives the token that really comes next
    (next_probs (R, T - 1); the last position has none: grey). Cell text: the row's top token at
    that position (top_tokens (R, T) strings, top_probs (R, T)), drawn when the grid is small
    enough (show_text None: ≤ 24 columns and ≤ 40 rows); hover gives both."""
    p = as_array(next_probs, 2, "next_probs", "(rows, T - 1)").astype(np.float64)
    R, Tm1 = p.shape
    T = Tm1 + 1
    check_labels(row_names, R, "row_names")
    check_labels(labels, T, "labels")
    check_labels(next_labels, Tm1, "next_labels")
    tp = as_array(top_probs, 2, "top_probs", "(rows, T)")
    if tp.shape != (R, T) or len(top_tokens) != R or any(len(r) != T for r in top_tokens):
        raise ValueError(f"top_tokens and top_probs must be ({R}, {T}): one top token per row and position")
    z = np.full((R, T), np.nan)
    z[:, :Tm1] = p
    x = token_labels(labels)
    y = [visible(r) for r in row_names]
    nxt = [visible(t) for t in next_labels] + ["(end of text)"]
    tops = [[visible(t) for t in row] for row in top_tokens]
    custom = np.empty((R, T, 3), dtype=object)
    for r in range(R):
        for t in range(T):
            custom[r, t] = (tops[r][t], f"{float(tp[r, t]):.3f}", nxt[t])
    show = (T <= 24 and R <= 40) if show_text is None else show_text
    fig = go.Figure(go.Heatmap(
        z=z, x=x, y=y, zmin=0.0, zmax=1.0, colorscale=WEIGHT_SCALE, hoverongaps=True, customdata=custom,
        colorbar=dict(title="p(next)", thickness=12),
        hovertemplate=("%{y}, at %{x}<br>top token: %{customdata[0]} (p %{customdata[1]})<br>"
                       "next token %{customdata[2]}: p %{z:.3f}<extra></extra>")))
    if show:  # a text layer of its own: dark text on bright cells and on the grey last column, white on dark
        rr, tt = np.meshgrid(np.arange(R), np.arange(T), indexing="ij")
        fig.add_trace(go.Scatter(
            x=[x[t] for t in tt.ravel()], y=[y[r] for r in rr.ravel()], mode="text", hoverinfo="skip",
            showlegend=False, text=[tops[r][t][:10] for r, t in zip(rr.ravel(), tt.ravel())],
            textfont=dict(size=11, color=[TEXT_ON_BRIGHT if not np.isfinite(v) or v >= BRIGHT_FROM else TEXT_ON_DARK
                                          for v in z.ravel()])))
    # explicit ranges: the text layer's points would otherwise pad the category axes (a grey frame)
    fig.update_yaxes(range=[R - 0.5, -0.5], type="category", title="read out after")
    fig.update_xaxes(range=[-0.5, T - 0.5], type="category", title="position (the token the prediction is made at)",
                     tickangle=-60, showticklabels=T <= 64)
    fig.update_layout(plot_bgcolor=MASKED_COLOR)
    return _title_layout(fig, title, max(300, min(1000, 130 + 24 * R)))


def token_alignment(spans: Sequence[Sequence[tuple[int, int]]], labels: Sequence[Sequence[str]],
                    names: Sequence[str], *, segments: Sequence[tuple[int, int]] = (), title: str = "",
                    height: int | None = None) -> go.Figure:
    """Two (or more) tokenizations of one text on a shared character axis: one row of boxes per
    model, a box from each token's first to its last character (spans [start, end)); tokens that
    are not in the text (BOS, [CLS], [SEP]) as thin grey marks. segments: the shared boundaries,
    drawn as dotted lines."""
    if not (len(spans) == len(labels) == len(names)) or not spans:
        raise ValueError("spans, labels and names need one entry per model")
    fig = go.Figure()
    for m, (sp, lab, name) in enumerate(zip(spans, labels, names)):
        check_labels(lab, len(sp), f"labels of {name!r}")
        starts = np.asarray([a for a, _ in sp], dtype=np.float64)
        widths = np.asarray([b - a for a, b in sp], dtype=np.float64)
        special = widths <= 0
        names_t = token_labels(lab)
        row = visible(name)
        colors = [SPECIAL_MARK if s else (OKABE_ITO[0] if i % 2 == 0 else OKABE_ITO[4]) for i, s in enumerate(special)]
        fig.add_trace(go.Bar(
            y=[row] * len(sp), x=np.where(special, 0.35, widths - 0.1), base=np.where(special, starts - 0.175, starts + 0.05),
            orientation="h", marker_color=colors, text=[t.split(":", 1)[1] for t in names_t],
            textposition="inside", insidetextanchor="middle", textfont=dict(size=12, color="white"),
            customdata=np.stack([np.asarray(names_t, dtype=object), starts.astype(int), (starts + widths).astype(int)], 1),
            hovertemplate=f"{row}<br>%{{customdata[0]}}<br>characters %{{customdata[1]}}–%{{customdata[2]}}<extra></extra>",
            showlegend=False))
    for a, b in segments:
        for c in (a, b):
            fig.add_vline(x=c, line=dict(color="#555", width=1, dash="dot"))
    fig.update_layout(barmode="overlay", bargap=0.35)
    end = max((b for sp in spans for _, b in sp), default=1)
    fig.update_xaxes(title="character position in the text", range=[-1, end + 1])
    fig.update_yaxes(autorange="reversed", type="category")
    return _title_layout(fig, title, height or 110 + 70 * len(spans))


def kinds_map(kinds: Sequence[Sequence[str]], order: Sequence[str], *, title: str = "", short: Mapping[str, str] | None = None,
              first_layer: int = 0, height: int | None = None, cell_text: bool | None = None) -> go.Figure:
    """Head labels as a layers × heads map of categories (kinds[l][h], one of `order`), one colour
    per kind (Okabe-Ito), a short name in each cell when it fits (cell_text None: up to 6 heads;
    the colour and the hover name every head)."""
    L = len(kinds)
    if L == 0:
        raise ValueError("kinds needs at least one layer")
    H = len(kinds[0])
    if any(len(r) != H for r in kinds):
        raise ValueError("kinds must be a rectangle: the same number of heads in every layer")
    idx = {k: i for i, k in enumerate(order)}
    bad = sorted({k for r in kinds for k in r if k not in idx})
    if bad:
        raise ValueError(f"kinds {bad} are not in order {list(order)}")
    n = len(order)
    z = np.array([[idx[k] for k in r] for r in kinds], dtype=np.float64)
    palette = [OKABE_ITO[i % len(OKABE_ITO)] if i < len(OKABE_ITO) - 1 else "#999999" for i in range(n)]
    scale = []
    for i, c in enumerate(palette):
        scale += [[i / n, c], [(i + 1) / n, c]]
    sh = short or {}
    text = [[visible(sh.get(k, k)) for k in r] for r in kinds]
    cell_text = H <= 6 if cell_text is None else cell_text
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"H{h}" for h in range(H)], y=[f"L{first_layer + l}" for l in range(L)], zmin=-0.5, zmax=n - 0.5,
        colorscale=scale, text=text if cell_text else None, texttemplate="%{text}" if cell_text else None,
        textfont=dict(size=11),
        customdata=[[visible(k) for k in r] for r in kinds],
        colorbar=dict(tickvals=list(range(n)), ticktext=[visible(k) for k in order], thickness=12, title="label"),
        hovertemplate="layer %{y}, head %{x}<br>%{customdata}<extra></extra>", xgap=1, ygap=1))
    fig.update_yaxes(autorange="reversed", type="category", title="layer")
    fig.update_xaxes(type="category", title="head", side="bottom", tickangle=0 if H <= 16 else -90)
    return _title_layout(fig, title, height or max(300, min(900, 22 * L + 130)))
