"""Figures of the encoder–decoder page: cross-attention (T_target × T_source) per head, one
step's cross-attention over the source words, and alignment links between the two sentences.

Pure numpy -> plotly (no streamlit, no torch); never displays. Rows are decoder queries, columns
keys (source words for cross-attention). Masked cells are NaN (grey background), as everywhere
(viz.common.masked_z); token labels are unique and HTML-escaped (viz.common.token_labels/visible).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .attention import grid_shape, head_grid, head_heatmap
from .common import FONT, MASKED_COLOR, OKABE_ITO, WEIGHT_SCALE, as_array, check_labels, masked_z, token_labels, visible

GOLD_COLOR = OKABE_ITO[5]  # vermillion: the reference (gold) source word / alignment
BAR_COLOR = OKABE_ITO[0]  # blue: attention weights
ARGMAX_COLOR = OKABE_ITO[1]  # orange: the most attended source word


def step_labels(dec_inputs: Sequence[str], produced: Sequence[str]) -> list[str]:
    """Row labels of the decoder queries: "<bos>→woru" = the query at input <bos> produced woru."""
    if len(dec_inputs) != len(produced):
        raise ValueError(f"dec_inputs has {len(dec_inputs)} entries but produced has {len(produced)}; "
                         "pass one produced token per decoder input")
    return [f"{a}→{b}" for a, b in zip(dec_inputs, produced)]


def _gold(gold: Sequence[int | None] | None, Tq: int, Tk: int) -> list[tuple[int, int]]:
    """(row, col) cells of a reference alignment; rows with None or out of range are skipped."""
    if gold is None:
        return []
    if len(gold) > Tq:
        raise ValueError(f"gold has {len(gold)} entries but there are {Tq} query rows")
    return [(i, int(j)) for i, j in enumerate(gold) if j is not None and 0 <= int(j) < Tk]


def _gold_markers(cells: list[tuple[int, int]], x: list[str], y: list[str]) -> go.Scatter:
    return go.Scatter(x=[x[j] for _, j in cells], y=[y[i] for i, _ in cells], mode="markers",
                      name="reference alignment", showlegend=False,
                      marker=dict(symbol="square-open", size=18, color=GOLD_COLOR, line=dict(width=3)),
                      hovertemplate="reference: %{y} ↔ %{x}<extra></extra>")


def cross_attention_grid(weights: np.ndarray, row_labels: Sequence[str], src_labels: Sequence[str], *,
                         allowed: np.ndarray | None = None, gold: Sequence[int | None] | None = None,
                         title: str = "", subtitles: Sequence[str] | None = None) -> go.Figure:
    """weights (H, T_tgt, T_src): every head's cross-attention of one layer (rows = decoder
    queries, columns = source words), one shared 0..1 scale. gold[i] = source index that row i's
    word translates (drawn as an open square in every panel; None = unknown)."""
    w = as_array(weights, 3, "weights", "(H, T_tgt, T_src)")
    H, Tq, Tk = w.shape
    fig = head_grid(w, row_labels, key_labels=src_labels, allowed=allowed, title=title, subtitles=subtitles)
    # Overlays go on each heatmap's own axes (read from the trace, so this does not depend on how
    # head_grid lays out its panels).
    heat = [t for t in fig.data if t.type == "heatmap"]
    cells = _gold(gold, Tq, Tk)
    if cells:
        y, x = token_labels(row_labels), token_labels(src_labels)
        for t in heat:
            fig.add_trace(_gold_markers(cells, x, y).update(xaxis=t.xaxis or "x", yaxis=t.yaxis or "y"))
    cols = grid_shape(H, max(Tq, Tk))[0]  # the number of columns head_grid chose
    for h, t in enumerate(heat):  # y labels only in the first column: long labels would run into the panel on the left
        if h % cols:
            fig.layout["yaxis" + (t.yaxis or "y")[1:]].showticklabels = False
    return fig


def three_attentions(panels: Sequence[tuple[str, np.ndarray, Sequence[str], Sequence[str], np.ndarray | None]],
                     *, gold: Sequence[int | None] | None = None, gold_panel: int = 1,
                     shared_rows: Sequence[int] = (), height: int = 560) -> go.Figure:
    """Side by side, one shared 0..1 scale: panels = [(title, weights (Tq, Tk), row_labels,
    col_labels, allowed (Tq, Tk) or None), ...] (e.g. encoder self-attention, cross-attention,
    decoder self-attention). Masked cells are NaN (grey). gold marks the reference alignment in
    panel gold_panel. shared_rows: indices of panels whose queries are the panel on their left's
    (the decoder's self-attention after the cross-attention): their rows are read off that panel's
    labels, so they draw none (the hover still names each cell)."""
    shared = _check_shared_rows(panels, shared_rows)
    n = len(panels)
    gaps = _label_gaps(panels, shared)
    width = (1 - sum(gaps)) / n
    # titles wider than their panel break before their parenthesis ("Encoder self-attn<br>(bidirectional)")
    titles = [visible(p[0]) for p in panels]
    if any(0.6 * 14 * len(t) > width * 650 for t in titles):
        titles = [t.replace(" (", "<br>(", 1) for t in titles]
    lines = max(t.count("<br>") + 1 for t in titles)
    fig = make_subplots(rows=1, cols=n, subplot_titles=titles, horizontal_spacing=0.05)
    x0 = 0.0
    for c in range(n):
        fig.layout["xaxis" + ("" if c == 0 else str(c + 1))].domain = [x0, min(1.0, x0 + width)]
        if c < n - 1:
            x0 += width + gaps[c]
    for c, ann in enumerate(fig.layout.annotations):  # centre each title over its (moved) panel
        dom = fig.layout["xaxis" + ("" if c == 0 else str(c + 1))].domain
        ann.x = (dom[0] + dom[1]) / 2
    for c, panel in enumerate(panels):
        _add_weights_panel(fig, c, panel, gold if c == gold_panel else None, show_rows=c not in shared)
    # no grid lines across the grey masked cells (the dark theme drew white ones); titles clear of the
    # ~8 px frame Plotly draws round each panel (a second title line sat on it)
    fig.update_xaxes(showgrid=False, zeroline=False)
    fig.update_yaxes(showgrid=False, zeroline=False)
    fig.update_annotations(yshift=10)
    fig.update_layout(font=dict(**FONT, size=13), plot_bgcolor=MASKED_COLOR, height=height + 18 * (lines - 1),
                      coloraxis=dict(colorscale=WEIGHT_SCALE, cmin=0.0, cmax=1.0,
                                     colorbar=dict(title="weight", thickness=14)),
                      margin=dict(l=10, r=10, t=50 + 18 * (lines - 1), b=10))
    fig.update_annotations(font_size=14)
    return fig


def _check_shared_rows(panels: Sequence[tuple], shared_rows: Sequence[int]) -> set[int]:
    """The panels that share their left neighbour's rows, checked (ValueError says what to fix)."""
    if not panels:
        raise ValueError("three_attentions needs at least one panel")
    n = len(panels)
    shared = {int(c) for c in shared_rows}
    if any(not 0 < c < n for c in shared):
        raise ValueError(f"shared_rows must name panels 1 … {n - 1} (a panel that has one on its left)")
    for c in shared:
        if len(panels[c][2]) != len(panels[c - 1][2]):
            raise ValueError(f"panel {c} shares the rows of panel {c - 1} but has {len(panels[c][2])} rows, "
                             f"not {len(panels[c - 1][2])}")
    return shared


def _label_gaps(panels: Sequence[tuple], shared: set[int]) -> list[float]:
    """The gap (share of the width) before each panel but the first.

    Each panel has its own row labels ("3:ta→kasa" for the decoder's steps): the gap before a panel
    must hold the widest of them, or they run into the panel on the left (issue 21, point 7). Sized
    for a plot area ~650 px wide (the narrowest the page gets at 1280 px), 0.6 em per character at
    11 px. A panel that shares its left neighbour's rows needs only a narrow gap, which leaves the
    panels room for one key label per column."""
    gaps = []
    for c in range(1, len(panels)):
        widest = max((len(visible(str(lab))) for lab in panels[c][2]), default=4)
        gaps.append(0.03 if c in shared else min(0.3, max(0.06, (0.62 * 11 * widest + 16) / 650)))
    return gaps


def _add_weights_panel(fig: go.Figure, c: int, panel: tuple, gold: Sequence[int | None] | None,
                       show_rows: bool) -> None:
    """Panel c of three_attentions: its heatmap, the gold squares when given, its axes."""
    name, w, ylab, xlab, allowed = panel
    w = as_array(w, 2, f"weights of {name!r}", "(Tq, Tk)")
    check_labels(ylab, w.shape[0], f"row labels of {name!r}")
    check_labels(xlab, w.shape[1], f"column labels of {name!r}")
    y, x = token_labels(ylab), token_labels(xlab)
    fig.add_trace(go.Heatmap(
        z=masked_z(w, allowed), x=x, y=y, coloraxis="coloraxis", hoverongaps=False, name=visible(name),
        hovertemplate=f"{visible(name)}<br>query %{{y}}<br>key %{{x}}<br>weight %{{z:.4f}}<extra></extra>"),
        row=1, col=c + 1)
    if gold is not None:
        cells = _gold(gold, *w.shape)
        if cells:
            fig.add_trace(_gold_markers(cells, x, y), row=1, col=c + 1)
    # exact ranges: the gold squares at an edge column would otherwise pad the axis (a grey band)
    fig.update_yaxes(type="category", range=[len(y) - 0.5, -0.5], tickmode="array", tickvals=y,
                     tickfont=dict(size=11), showticklabels=show_rows, row=1, col=c + 1)
    fig.update_xaxes(type="category", range=[-0.5, len(x) - 0.5], tickangle=-60, tickmode="array", tickvals=x,
                     tickfont=dict(size=11), row=1, col=c + 1)  # every label, not every other one


def attention_panel(weights: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str], *,
                    allowed: np.ndarray | None = None, gold: Sequence[int | None] | None = None,
                    title: str = "", height: int | None = None, row_title: str = "query",
                    col_title: str = "key") -> go.Figure:
    """One head (Tq, Tk) with its mask (NaN = masked, grey) and an optional reference alignment."""
    w = as_array(weights, 2, "weights", "(Tq, Tk)")
    fig = head_heatmap(w, row_labels, key_labels=col_labels, allowed=allowed, title=title, height=height)
    cells = _gold(gold, *w.shape)
    if cells:
        fig.add_trace(_gold_markers(cells, token_labels(col_labels), token_labels(row_labels)))
    fig.update_yaxes(title=row_title)
    fig.update_xaxes(title=col_title)
    return fig


def step_bars(weights: np.ndarray, src_labels: Sequence[str], *, gold: int | None = None,
              title: str = "", height: int = 380) -> go.Figure:
    """weights (T_src,): how much the word produced at one step attended to each source word.
    The most attended word is orange, the reference source word (gold) is outlined in vermillion."""
    w = as_array(weights, 1, "weights", "(T_src,)").astype(np.float32)
    check_labels(src_labels, w.shape[0], "src_labels")
    if not np.isfinite(w).all():
        raise ValueError("weights must be finite (a masked source word has weight 0, not NaN)")
    x = token_labels(src_labels)
    top = int(np.argmax(w)) if w.size else -1
    colors = [ARGMAX_COLOR if j == top else BAR_COLOR for j in range(w.size)]
    line_w = [4 if gold is not None and j == gold else 0 for j in range(w.size)]
    fig = go.Figure(go.Bar(
        x=x, y=w, marker=dict(color=colors, line=dict(color=GOLD_COLOR, width=line_w)),
        text=[f"{v:.2f}" if v >= 0.05 else "" for v in w], textposition="outside",  # small values: no clutter
        textfont=dict(size=15 if w.size <= 16 else 12), cliponaxis=False,
        hovertemplate="source %{x}<br>weight %{y:.4f}<extra></extra>", name="weight"))
    fig.update_layout(title=title or None, font=dict(**FONT, size=15), height=height, showlegend=False,
                      margin=dict(l=10, r=10, t=50 if title else 20, b=10))
    fig.update_yaxes(title="attention weight", range=[0, 1.12])
    fig.update_xaxes(type="category", tickangle=-45 if len(x) > 8 else 0, title="source word (key)",
                     tickfont=dict(size=15))
    return fig


def alignment_links(weights: np.ndarray, src_labels: Sequence[str], tgt_labels: Sequence[str], *,
                    gold: Sequence[int | None] | None = None, title: str = "",
                    min_weight: float = 0.2, height: int = 300) -> go.Figure:
    """weights (T_tgt, T_src): source words on top, produced words below, a line from each
    produced word to every source word it attended to with weight >= min_weight (thicker and
    darker = more). The reference alignment, when known, is a dashed vermillion line."""
    w = as_array(weights, 2, "weights", "(T_tgt, T_src)").astype(np.float32)
    Tq, Tk = w.shape
    check_labels(tgt_labels, Tq, "tgt_labels")
    check_labels(src_labels, Tk, "src_labels")
    n = max(Tq, Tk, 2)
    xs = np.linspace(0, 1, n)
    sx = xs[:Tk] + (xs[n - 1] - xs[Tk - 1]) / 2 if Tk else xs[:0]  # centre the shorter sentence
    tx = xs[:Tq] + (xs[n - 1] - xs[Tq - 1]) / 2 if Tq else xs[:0]
    fig = go.Figure()
    for i in range(Tq):
        for j in range(Tk):
            v = float(w[i, j])
            if v >= min_weight:
                fig.add_trace(go.Scatter(
                    x=[tx[i], sx[j]], y=[0, 1], mode="lines", showlegend=False,
                    line=dict(color=f"rgba(0,114,178,{0.25 + 0.75 * v:.3f})", width=1 + 7 * v),
                    hoverinfo="skip"))
    for i, j in _gold(gold, Tq, Tk):
        fig.add_trace(go.Scatter(x=[tx[i], sx[j]], y=[0, 1], mode="lines", showlegend=False,
                                 line=dict(color=GOLD_COLOR, width=2.5, dash="dash"), hoverinfo="skip"))
    src_txt, tgt_txt = [visible(s) for s in src_labels], [visible(t) for t in tgt_labels]
    size = 17 if n <= 14 else 14 if n <= 20 else 11  # long sentences: smaller words, no overlap
    fig.add_trace(go.Scatter(x=sx, y=np.ones(Tk), mode="markers+text", text=src_txt, textposition="top center",
                             textfont=dict(size=size), marker=dict(size=9, color="#888888"), showlegend=False,
                             hovertemplate="source %{text}<extra></extra>", name="source"))
    fig.add_trace(go.Scatter(x=tx, y=np.zeros(Tq), mode="markers+text", text=tgt_txt,
                             textposition="bottom center", textfont=dict(size=size), marker=dict(size=9, color="#888888"),
                             showlegend=False, hovertemplate="output %{text}<extra></extra>", name="output"))
    fig.update_layout(title=title or None, font=FONT, height=height, plot_bgcolor="rgba(0,0,0,0)",
                      margin=dict(l=10, r=10, t=50 if title else 10, b=10))
    fig.update_xaxes(visible=False, range=[-0.05, 1.05])
    fig.update_yaxes(visible=False, range=[-0.35, 1.35])
    return fig


__all__ = ["step_labels", "cross_attention_grid", "attention_panel", "three_attentions", "step_bars",
           "alignment_links"]


def alignment_beside(left: tuple[str, np.ndarray, Sequence[str]], right: tuple[str, np.ndarray, Sequence[str]],
                     src_labels: Sequence[str], *, gold_left: Sequence[int | None] | None = None,
                     gold_right: Sequence[int | None] | None = None, height: int = 520) -> go.Figure:
    """Two alignments of the same source sentence side by side on one 0..1 scale, e.g. the RNN's
    additive attention and the Transformer's cross-attention: left/right = (title, weights
    (T_out, T_src), row labels). Open squares: each side's reference alignment (gold_*)."""
    fig = three_attentions([(left[0], left[1], left[2], src_labels, None),
                            (right[0], right[1], right[2], src_labels, None)],
                           gold=gold_right, gold_panel=1, height=height)
    cells = _gold(gold_left, *as_array(left[1], 2, "left weights", "(T_out, T_src)").shape)
    if cells:
        fig.add_trace(_gold_markers(cells, token_labels(src_labels), token_labels(left[2])), row=1, col=1)
    return fig
