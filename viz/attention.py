"""Attention heatmaps: one head, a grid of heads, all layers x heads, causal vs bidirectional,
masks. Rows are queries, columns keys. Masked cells are NaN in z (grey background, no colour)."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import (DIVERGING_SCALE, FONT, MASK_COLORS, MASKED_COLOR, NEG_INF, OKABE_ITO, WEIGHT_SCALE,
                     as_array, auto_ticks, axes, block_labels, block_step, block_title, block_weights, check_labels,
                     figure, hoist_shared, label_margins, masked_z, scale, subplot_layout, token_labels, visible)

FONT = {**FONT, "size": 14}  # attention figures: larger (projector); colour from the theme (dark theme too)
NO_CHIP = "rgba(0,0,0,0)"  # an annotation's default background (none)
CELL_TEXT_MAX = 32  # numbers/symbols drawn inside cells only up to this many rows/columns (readable)
# "Hide the sink" (a derived view): the hidden keys' columns are blank like masked cells, but drawn in
# their own colour (a light peach under the heatmap), so "hidden" never reads as "masked" (grey)
HIDDEN_COLOR = "#f5cdb6"
HIDDEN_BAR = "weight<br>(sink hidden)"  # the colour bar's title in the derived view


def _hidden(hidden_keys, Tk: int) -> np.ndarray | None:
    """hidden_keys as a bool (Tk,) array (None stays None); ValueError for another shape."""
    if hidden_keys is None:
        return None
    h = np.asarray(hidden_keys, dtype=bool)
    if h.shape != (Tk,):
        raise ValueError(f"hidden_keys must be a bool array of shape ({Tk},), one flag per key; got {h.shape}")
    return h


def hide_columns(z: np.ndarray, hidden: np.ndarray | None) -> np.ndarray:
    """z (..., Tk) with the hidden keys' columns NaN (no colour, no hover): z itself, changed."""
    if hidden is not None and hidden.any():
        z[..., hidden] = np.nan
    return z


def _block_hidden(hidden: np.ndarray | None, step: int) -> np.ndarray | None:
    """The hidden keys of a figure drawn in blocks of `step` keys: bool (ceil(Tk/step),), True where
    every key of the block is hidden (a block holding a hidden sink and other keys is drawn: the
    derived weights already give the sink 0, so the block is what the other keys get). step 1:
    `hidden` itself."""
    if hidden is None or step == 1:
        return hidden
    n = -(-hidden.shape[0] // step)
    pad = np.ones(n * step, dtype=bool)
    pad[:hidden.shape[0]] = hidden
    return pad.reshape(n, step).all(axis=1)


def hidden_shapes(hidden: np.ndarray | None, n_rows: int, refs: Sequence[tuple[str, str]]) -> list[dict]:
    """One rectangle per panel and run of hidden key columns, under the heatmap (layer "below"), in
    HIDDEN_COLOR: what a hidden sink column shows instead of a colour."""
    if hidden is None or not hidden.any():
        return []
    idx = np.nonzero(hidden)[0]
    runs, start = [], idx[0]
    for a, b in zip(idx, idx[1:]):
        if b != a + 1:
            runs.append((start, a))
            start = b
    runs.append((start, idx[-1]))
    return [dict(type="rect", xref=xr, yref=yr, x0=float(a) - 0.5, x1=float(b) + 0.5, y0=-0.5, y1=n_rows - 0.5,
                 layer="below", fillcolor=HIDDEN_COLOR, line=dict(width=0)) for xr, yr in refs for a, b in runs]


def head_heatmap(weights: np.ndarray, labels: Sequence[str], *, key_labels: Sequence[str] | None = None,
                 allowed: np.ndarray | None = None, title: str = "", zmin: float | None = 0.0,
                 zmax: float | None = 1.0, colorscale: str = WEIGHT_SCALE, zmid: float | None = None,
                 value_name: str = "weight", height: int | None = None,
                 cell_text: np.ndarray | None = None, hidden_keys: np.ndarray | None = None) -> go.Figure:
    """One (Tq, Tk) matrix. Masked cells (allowed False) are NaN -> grey background.
    cell_text: optional (Tq, Tk) strings drawn in the cells (e.g. "−∞" on masked scores).
    hidden_keys: optional bool (Tk,), the columns of a hidden sink (the derived view): blank, in
    HIDDEN_COLOR."""
    w = as_array(weights, 2, "weights", "(Tq, Tk)")
    hidden = _hidden(hidden_keys, w.shape[1])
    key_labels = labels if key_labels is None else key_labels
    check_labels(labels, w.shape[0], "labels (queries)")
    check_labels(key_labels, w.shape[1], "key_labels")
    y, x = token_labels(labels), token_labels(key_labels)
    extra = {}
    if cell_text is not None and max(w.shape) <= CELL_TEXT_MAX:
        extra = dict(text=np.asarray(cell_text, dtype=object).tolist(), texttemplate="%{text}",
                     textfont=dict(size=11))
    n = max(w.shape)
    # fixed margins (no automargin passes), room for the key labels upright: Plotly draws as many
    # labels as the axis has room for (auto_ticks), slanted, or upright when slanted ones would touch
    ml, mb = label_margins(x, y, x_title=True, y_title=True, x_angle=-90)
    layout = {} if hidden is None else {"shapes": hidden_shapes(hidden, w.shape[0], [("x", "y")])}
    return figure(
        [dict(type="heatmap", z=hide_columns(masked_z(w, allowed), hidden), x=x, y=y, zmin=zmin, zmax=zmax, zmid=zmid,
              colorscale=scale(colorscale) if isinstance(colorscale, str) else colorscale,
              hoverongaps=False, colorbar=dict(title=dict(text=value_name if hidden is None else
                                                          HIDDEN_BAR.replace("weight", value_name)), thickness=12),
              hovertemplate=f"query %{{y}}<br>key %{{x}}<br>{value_name} %{{z:.4f}}<extra></extra>", **extra)],
        dict(**layout, title=dict(text=title) if title else None, font=FONT, plot_bgcolor=MASKED_COLOR,
             margin=dict(l=ml, r=10, t=40 if title else 10, b=mb), height=(height or min(760, 220 + 26 * n)) + mb - 90,
             yaxis=dict(autorange="reversed", title=dict(text="query"), type="category", showgrid=False,
                        automargin=False, **auto_ticks("y")),
             xaxis=dict(title=dict(text="key"), type="category", side="bottom", showgrid=False,
                        automargin=False, **auto_ticks("x"))))


def share_token_axes(data: list[dict], layout: dict, x: Sequence[str], y: Sequence[str], *,
                     x_ticks: dict | None = None, y_ticks: dict | None = None) -> None:
    """Token labels once per figure (issue 22). Every panel of a grid shows the same tokens: the
    first heatmap carries them (its x, y), every other panel's axes `match` the first panel's, and
    plotly.js gives matched category axes one shared category list, so the other heatmaps send no
    x, y: their cells sit at 0..T-1, which on those axes are the same tokens. Hover (%{x}, %{y}) and
    tick labels name the tokens exactly as before. Tick properties (x_ticks, y_ticks; default
    auto_ticks: Plotly picks the labels that fit each axis's length) are the same on every axis
    (hoist_shared then sends them once). Before, the
    2017 preset's heads grid (8 heads, T = 64) sent its 64 labels 16 times and tick values and
    texts on 18 axes (~17 kB a rerun: with the rest of the page 1.68x the float32 bytes of its
    weights; budget 1.5x). Zooming one panel zooms them all (matched axes), as in a shared-axis grid."""
    x_ticks = auto_ticks("x") if x_ticks is None else x_ticks
    y_ticks = auto_ticks("y") if y_ticks is None else y_ticks
    for i, tr in enumerate(data):
        if i == 0:
            tr.update(x=list(x), y=list(y))
        else:
            tr.pop("x", None)
            tr.pop("y", None)
    for k, ax in layout.items():
        if k.startswith(("xaxis", "yaxis")):
            letter = k[0]
            if k not in ("xaxis", "yaxis") and ax.get("visible", True):
                ax["matches"] = letter
            ax.update(x_ticks if letter == "x" else y_ticks)  # the same on every axis: sent once


def _plain(text: str) -> str:
    """The visible characters of an HTML-escaped title line (entities count as one; tags none)."""
    import re
    return re.sub(r"&[#\w]+;", "x", re.sub(r"<[^>]+>", "", str(text)))


def grid_shape(n_heads: int, T: int) -> tuple[int, int]:
    """(cols, row height in px) for a grid of n_heads heatmaps of T tokens: big enough to read."""
    if n_heads <= 1:
        return 1, 620
    if n_heads <= 4:
        return 2, 470 if T <= 40 else 520
    if n_heads <= 12:  # 10-12 heads (BERT's 12): three wide columns, room for two-line titles
        return 3, 380
    return 4, 300


def _head_titles(subtitles: Sequence[str] | None, H: int, narrow: bool) -> list[str]:
    """One panel title per head ("head 3" unless given). In a narrow panel (a third of the chart
    wide) "head 5 · other (…)" breaks after the head, and again before the "(nearest score <
    threshold)" of an "other" head: 3 short lines."""
    names = list(subtitles) if subtitles is not None else [f"head {h}" for h in range(H)]
    if len(names) != H:
        raise ValueError(f"subtitles has {len(names)} entries but there are {H} heads; pass one per head")
    if narrow:
        names = [n.replace(" · ", "<br>", 1).replace(" (", "<br>(", 1) for n in names]
    return names


def _edge_tick_labels(layout: dict, n_panels: int, rows: int, cols: int) -> None:
    """The query labels and key labels are the same in every panel (like a shared-axis grid): only
    the left column shows query labels (a long token never runs into the panel on its left) and only
    the panels of the bottom row show key labels (with 8 heads in 3 columns, the third column ends
    a row early: labels there would sit mid-grid, between the panels). Fewer labels per repaint.
    The empty cells of the last row are hidden."""
    for i in range(n_panels):
        sx = "" if i == 0 else str(i + 1)
        if i % cols:
            layout[f"yaxis{sx}"]["showticklabels"] = False
        if i < (rows - 1) * cols:
            layout[f"xaxis{sx}"]["showticklabels"] = False
    for i in range(n_panels, rows * cols):
        sx = str(i + 1)
        layout[f"xaxis{sx}"]["visible"] = layout[f"yaxis{sx}"]["visible"] = False


def _axis_titles(ml: int, mb: int) -> list[dict]:
    """"query" / "key" axis titles of a grid, as the mask lab's heatmaps have: one each, in the
    left and bottom margins (ml, mb px) left free for them (axis titles with automargin off would
    sit on the tick labels). No chip behind them, and their own shifts: hoist_shared moves the
    panel titles' bgcolor and yshift to the template, which these then override."""
    return [dict(text="query (looking)", x=0, y=0.5, xref="paper", yref="paper", xanchor="left", yanchor="middle",
                 xshift=-ml + 2, yshift=0, textangle=-90, showarrow=False, font=dict(size=13), bgcolor=NO_CHIP),
            dict(text="key (looked at)", x=0.5, y=0, xref="paper", yref="paper", xanchor="center", yanchor="bottom",
                 yshift=-mb + 2, showarrow=False, font=dict(size=13), bgcolor=NO_CHIP)]


GRID_MAX_CELLS = 128  # a grid panel draws at most this many blocks per axis (long inputs: viz.common.block_step)


def _title(title: str, note: str, **placement) -> dict | None:
    """A chart title dict: `title`, with `note` (what the figure aggregates, "" = nothing) as its
    subtitle, or alone (in a smaller font) when there is no title. None when both are empty."""
    if not title and not note:
        return None
    if not title:
        return dict(text=note, font=dict(size=13), **placement)
    return dict(text=title, subtitle=dict(text=note) if note else None, **placement)


def head_grid(weights: np.ndarray, labels: Sequence[str], *, allowed: np.ndarray | None = None,
              title: str = "", subtitles: Sequence[str] | None = None, cols: int | None = None,
              key_labels: Sequence[str] | None = None, hidden_keys: np.ndarray | None = None) -> go.Figure:
    """weights (H, Tq, Tk): every head of one layer in a grid with one shared 0..1 colour scale.
    Over viz.common.EXACT_MAX_T tokens the panels draw blocks of tokens (viz.common.block_weights,
    at most GRID_MAX_CELLS per axis) and the title says so. hidden_keys: optional bool (Tk,), a
    hidden sink's columns (head_heatmap; in blocks: the blocks made of hidden keys only, _block_hidden)."""
    w = as_array(weights, 3, "weights", "(H, Tq, Tk)")
    H, Tq, Tk = w.shape
    hidden = _hidden(hidden_keys, Tk)
    key_labels = labels if key_labels is None else key_labels
    check_labels(labels, Tq, "labels (queries)")
    check_labels(key_labels, Tk, "key_labels")
    if allowed is not None:
        allowed = np.broadcast_to(np.asarray(allowed, dtype=bool), w.shape)
    step = block_step(max(Tq, Tk), GRID_MAX_CELLS)
    hb = _block_hidden(hidden, step)
    auto_cols, side = grid_shape(H, max(Tq, Tk))
    cols = cols or auto_cols
    rows = math.ceil(H / cols)
    narrow = cols >= 3  # a panel a third of the chart wide
    title_size = 12 if narrow else 15
    panel_px = side - (100 if narrow else 35)
    # a title wider than its panel (0.6 em a character) breaks like a narrow panel's: side by side,
    # "head 0 · other (broad/uniform 0.88 < 0.9)" ran into the next panel's title (Gemma 3, 4 heads)
    wide = subtitles is not None and any(0.6 * title_size * len(_plain(n)) > panel_px for n in subtitles)
    names = _head_titles(subtitles, H, narrow or wide)
    lines = max(n.count("<br>") for n in names) + 1 if names else 1
    # Rows of panels a title block apart, in px: a fraction of the chart's height left ~180 px of white
    # between the rows of MiniLM's 12 heads (screenshot audit, issue 21 point 7)
    gap_px = int(1.3 * title_size * lines) + 26  # + the ~8 px frame Plotly draws round each panel
    plot_px = max(320 - 40, rows * panel_px + (rows - 1) * gap_px)
    layout, refs = subplot_layout(rows, cols, names, hspace=0.06 if narrow else 0.04,
                                  vspace=gap_px / plot_px if rows > 1 else 0.0, title_size=title_size)
    y, x = block_labels(labels, step), block_labels(key_labels, step)
    what = "weight" if step == 1 else "block weight"
    ask = "query %{y}<br>key %{x}" if step == 1 else "queries %{y}<br>keys %{x}"
    data = []
    for h in range(H):
        xr, yr = refs[h]
        data.append(dict(
            type="heatmap", z=hide_columns(block_weights(w[h], step, None if allowed is None else allowed[h]), hb),
            coloraxis="coloraxis", hoverongaps=False, name=f"head {h}", xaxis=xr, yaxis=yr,
            hovertemplate=f"%{{fullData.name}}<br>{ask}<br>{what} %{{z:.4f}}<extra></extra>"))
    # Which labels are drawn is Plotly's choice from each axis's length in the browser (auto_ticks):
    # every label when they fit, every n-th when not (long sentences, a phone), never on each other
    axes(layout, y_autorange="reversed", y_type="category", y_automargin=False,
         x_type="category", x_automargin=False)
    ml, mb = label_margins(x, y, x_title=True, y_title=True, x_angle=-90)  # fixed: no automargin passes
    _edge_tick_labels(layout, H, rows, cols)
    layout["annotations"] = list(layout.get("annotations", [])) + _axis_titles(ml, mb)
    share_token_axes(data, layout, x, y)
    # the chart title at the very top, the panel titles (lines of ~16 px each) below it: never on top
    # of each other
    note = block_title(step, max(Tq, Tk))
    top = ((40 + (18 if note and title else 0)) if title or note else 8) + 17 * lines + 8
    layout.update(title=_title(title, note, x=0, xanchor="left", y=1, yref="container", yanchor="top",
                               pad=dict(t=8, l=4)),
                  font=FONT, plot_bgcolor=MASKED_COLOR,
                  coloraxis=dict(colorscale=scale(WEIGHT_SCALE), cmin=0.0, cmax=1.0,
                                 colorbar=dict(title=dict(text=what if hidden is None else HIDDEN_BAR.replace("weight", what)),
                                               thickness=14)),
                  height=plot_px + top + mb,
                  margin=dict(l=ml, r=10, t=top, b=mb))
    if hb is not None:
        layout["shapes"] = hidden_shapes(hb, len(y), refs[:H])
    return figure(data, hoist_shared(layout, data))


def _wrap_titles(names: list[str], title_size: int, panel_px: float) -> list[str]:
    """Thumbnail titles that fit their thumbnail (panel_px wide, 0.6 em per character): when one is
    too wide, every title breaks after the head's name ("L0 H0:"), then a line still too wide breaks
    at its last space."""
    too_wide = lambda line: 0.6 * title_size * len(_plain(line)) > panel_px  # noqa: E731
    if any(too_wide(n) for n in names):
        names = [n.replace(": ", "<br>", 1) if "<br>" not in n else n for n in names]
    return ["<br>".join(ln.rsplit(" ", 1)[0] + "<br>" + ln.rsplit(" ", 1)[1] if too_wide(ln) and " " in ln else ln
                        for ln in n.split("<br>")) for n in names]


THUMB_MAX_CELLS = 64  # an overview thumbnail draws at most this many blocks per axis (long inputs)


def _layer_stack(weights, allowed) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
    """weights (L, H, Tq, Tk), or a sequence of L arrays (H, Tq, Tk) (views of a trace's layers: no
    copy of every layer's weights into one array); allowed None, broadcastable to (L, H, Tq, Tk), or
    a sequence of L arrays each broadcastable to (H, Tq, Tk). -> per layer (H, Tq, Tk), allowed."""
    if isinstance(weights, np.ndarray) or not isinstance(weights, (list, tuple)):
        ws = list(as_array(weights, 4, "weights", "(L, H, Tq, Tk)"))
    else:
        ws = [as_array(x, 3, "weights[l]", "(H, Tq, Tk)") for x in weights]
        if not ws or any(x.shape != ws[0].shape for x in ws):
            raise ValueError("weights: pass L arrays of one shape (H, Tq, Tk)")
    if allowed is None:
        return ws, [None] * len(ws)
    if isinstance(allowed, (list, tuple)):
        if len(allowed) != len(ws):
            raise ValueError(f"allowed has {len(allowed)} layers but weights has {len(ws)}")
        return ws, [np.broadcast_to(np.asarray(a, dtype=bool), ws[0].shape) for a in allowed]
    a = np.broadcast_to(np.asarray(allowed, dtype=bool), (len(ws), *ws[0].shape))
    return ws, list(a)


def overview_grid(weights, *, subtitles: Sequence[str] | None = None,
                  allowed=None, title: str = "", labels: Sequence[str] | None = None,
                  first_layer: int = 0, hidden_keys: np.ndarray | None = None) -> go.Figure:
    """weights (L, H, Tq, Tk), or a list of L arrays (H, Tq, Tk): every head of every layer as a
    small thumbnail (rows = layers). labels (T tokens): shown on hover ("query 3:cat, key 1:the"),
    and as tick labels on the first column and the bottom row when there are few tokens (≤ 12).
    first_layer: the number of the first row (a page of a deep model shows layers first_layer …
    first_layer + L − 1). Over viz.common.EXACT_MAX_T tokens each thumbnail draws blocks of tokens
    (at most THUMB_MAX_CELLS per axis, viz.common.block_weights) and the chart title says so.
    hidden_keys: optional bool (Tk,), a hidden sink's columns (head_heatmap, head_grid)."""
    ws, als = _layer_stack(weights, allowed)
    L, (H, Tq, Tk) = len(ws), ws[0].shape
    step = block_step(max(Tq, Tk), THUMB_MAX_CELLS)
    hidden = _hidden(hidden_keys, Tk)
    hb = _block_hidden(hidden, step)
    names = list(subtitles) if subtitles is not None else [f"L{first_layer + l} H{h}" for l in range(L) for h in range(H)]
    if len(names) != L * H:
        raise ValueError(f"subtitles has {len(names)} entries but there are {L * H} heads; pass one per head")
    if labels is not None:
        check_labels(labels, Tq, "labels")
        if Tq != Tk:
            raise ValueError("labels need square (self-attention) weights: Tq == Tk")
    cats = block_labels(labels, step) if labels is not None else None
    ticks = cats is not None and Tq <= 12
    title_size = 11 if H > 8 else 12 if H > 6 else 13
    # A title line wider than its thumbnail ran into its neighbours ("L0 H0: previous-token 0.46" with
    # 4 heads, "CLS/SEP .78" with MiniLM's 12, at 1280 px: issue 21 point 7): break after the head's
    # name, then a line still too wide at its last space. Sized for a plot area ~620 px wide (the
    # page at 1280 px, less the labels and the colour bar), 0.6 em per character.
    panel_px = 620 / H
    names = _wrap_titles(names, title_size, panel_px)
    lines = max((n.count("<br>") + 1 for n in names), default=1)
    # rows of thumbnails a title block apart (in px, not a fraction of a chart whose height varies)
    gap_px = int(1.3 * title_size * lines) + 20  # + the ~8 px frame Plotly draws round each panel
    side = (260 if H <= 4 else 200 if H <= 8 else int(1.2 * panel_px)) + gap_px  # 12 heads: about square
    left = 10 + (7 * max((len(c) for c in cats), default=0) if ticks else 0)
    bottom = 10 + (6 * max((len(c) for c in cats), default=0) if ticks else 0)
    note = block_title(step, max(Tq, Tk))
    top = ((30 + (18 if note and title else 0)) if title or note else 6) + gap_px
    height = max(300, L * side + top + bottom)
    plot_px = height - top - bottom
    layout, refs = subplot_layout(L, H, names, hspace=0.02 if H > 6 else 0.03,
                                  vspace=min(0.3, gap_px / plot_px) if L > 1 else 0.0, title_size=title_size)
    what = "weight" if step == 1 else "block weight"
    ask = "query %{y}<br>key %{x}" if step == 1 else "queries %{y}<br>keys %{x}"
    data = []
    for l in range(L):
        for h in range(H):
            xr, yr = refs[l * H + h]
            z = hide_columns(block_weights(ws[l][h], step, None if als[l] is None else als[l][h]), hb)
            trace = dict(type="heatmap", z=z, coloraxis="coloraxis", hoverongaps=False,
                         name=f"L{first_layer + l} H{h}", xaxis=xr, yaxis=yr,
                         hovertemplate=f"layer {first_layer + l} head {h}<br>{ask}<br>{what} %{{z:.4f}}<extra></extra>")
            data.append(trace)
    axes(layout, y_autorange="reversed", y_showticklabels=False, x_showticklabels=False)
    if ticks:
        for i, (xr, yr) in enumerate(refs):
            l, h = divmod(i, H)
            tick = dict(showticklabels=True, tickfont=dict(size=9), type="category")
            if h == 0:
                layout["yaxis" + yr[1:]].update(tick)
            if l == L - 1:
                layout["xaxis" + xr[1:]].update(tick, tickangle=-60)
    if cats is not None:  # token labels on hover (and ticks when few), sent once: share_token_axes
        axes(layout, x_type="category", y_type="category")
        share_token_axes(data, layout, cats, cats, x_ticks={}, y_ticks={})
    layout.update(title=_title(title, note, x=0, xanchor="left", y=1, yref="container", yanchor="top",
                               pad=dict(t=8, l=4)), font=FONT, plot_bgcolor=MASKED_COLOR,
                  coloraxis=dict(colorscale=scale(WEIGHT_SCALE), cmin=0.0, cmax=1.0,
                                 colorbar=dict(title=dict(text=what if hidden is None else HIDDEN_BAR.replace("weight", what)),
                                               thickness=12)),
                  height=height, margin=dict(l=left, r=10, t=top, b=bottom))
    if hb is not None:
        layout["shapes"] = hidden_shapes(hb, -(-Tq // step), refs[:L * H])
    return figure(data, hoist_shared(layout, data))


def compare_grid(a: np.ndarray, b: np.ndarray, labels: Sequence[str], *, allowed_a: np.ndarray | None = None,
                 allowed_b: np.ndarray | None = None, heads: Sequence[int] | None = None,
                 names: tuple[str, str] = ("causal", "bidirectional"),
                 hidden_keys: np.ndarray | None = None) -> go.Figure:
    """a, b (H, T, T): for each head a row [a | b | b - a]. Weights share a 0..1 scale; the
    difference uses a diverging scale centred on 0 (symmetric range). Over viz.common.EXACT_MAX_T
    tokens the panels draw blocks of tokens (at most GRID_MAX_CELLS per axis; the difference of two
    blocked panels is the blocked difference: block_weights is linear) and the title says so.
    hidden_keys: optional bool (Tk,), a hidden sink's columns in all three panels (head_grid)."""
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
    step = block_step(max(Tq, Tk), GRID_MAX_CELLS)
    hidden = _hidden(hidden_keys, Tk)
    hb = _block_hidden(hidden, step)
    # the shown heads only: blocks (step > 1) of the weights, their difference unmasked
    za = {h: hide_columns(block_weights(a[h], step, None if aa is None else aa[h]), hb) for h in heads}
    zb = {h: hide_columns(block_weights(b[h], step, None if ab is None else ab[h]), hb) for h in heads}
    if step == 1:
        diff = {h: hide_columns(b[h].astype(np.float32) - a[h].astype(np.float32), hb) for h in heads}
    else:
        diff = {h: hide_columns(block_weights(b[h], step) - block_weights(a[h], step), hb) for h in heads}
    lim = max(float(np.nanmax(np.abs(d), initial=0.0)) for d in diff.values()) or 1.0
    titles = []
    for h in heads:
        titles += [f"head {h}: {names[0]}", f"head {h}: {names[1]}", f"head {h}: {names[1]} − {names[0]}"]
    # rows of panels 300 px apart with a 50 px gap for the next row's titles (a gap of a tenth of the
    # chart left ~130 px of white between the rows of a 4-head comparison, screenshot audit)
    row_px = 300
    plot_px = max(380, row_px * len(heads) + 60) - 50
    layout, refs = subplot_layout(len(heads), 3, titles, hspace=0.04, vspace=min(0.1, 50 / plot_px),
                                  title_size=14)
    y = x = block_labels(labels, step)
    ask = "query %{y}<br>key %{x}" if step == 1 else "queries %{y}<br>keys %{x}"
    blk = "" if step == 1 else "block "
    data = []
    for r, h in enumerate(heads):
        for c, (z, ax, what) in enumerate([(za[h], "coloraxis", blk + "weight"), (zb[h], "coloraxis", blk + "weight"),
                                           (diff[h], "coloraxis2", blk + "difference")]):
            xr, yr = refs[3 * r + c]
            data.append(dict(type="heatmap", z=z, coloraxis=ax, hoverongaps=False,
                             name=titles[3 * r + c], xaxis=xr, yaxis=yr,
                             hovertemplate=f"%{{fullData.name}}<br>{ask}"
                                           f"<br>{what} %{{z:.4f}}<extra></extra>"))
    # The same tokens label every panel: query labels only left of the first column (they ran into
    # the panel on their left) and key labels only under the last row; Plotly draws as many as fit.
    axes(layout, y_autorange="reversed", y_type="category", x_type="category",
         y_automargin=False, x_automargin=False)
    n_panels = 3 * len(heads)
    for i in range(n_panels):
        sx = "" if i == 0 else str(i + 1)
        layout[f"yaxis{sx}"]["showticklabels"] = i % 3 == 0
        layout[f"xaxis{sx}"]["showticklabels"] = i >= n_panels - 3
    share_token_axes(data, layout, x, y)
    ml, mb = label_margins(x, y, x_angle=-90)
    note = block_title(step, max(Tq, Tk))
    top = 50 + (28 if note else 0)
    layout.update(font=FONT, plot_bgcolor=MASKED_COLOR,
                  title=_title("", note, x=0, xanchor="left", y=1, yref="container", yanchor="top", pad=dict(t=8, l=4)),
                  coloraxis=dict(colorscale=scale(WEIGHT_SCALE), cmin=0, cmax=1,
                                 colorbar=dict(title=dict(text=blk + "weight" if hidden is None else
                                                          HIDDEN_BAR.replace("weight", blk + "weight")),
                                               thickness=12, x=1.0, len=0.45, y=0.78)),
                  coloraxis2=dict(colorscale=scale(DIVERGING_SCALE), cmid=0, cmin=-lim, cmax=lim,
                                  colorbar=dict(title=dict(text=blk + "difference"), thickness=12, x=1.0, len=0.45,
                                                y=0.22)),
                  height=plot_px + top + mb, margin=dict(l=ml, r=10, t=top, b=mb))
    if hb is not None:
        layout["shapes"] = hidden_shapes(hb, len(y), refs[:3 * len(heads)])
    return figure(data, hoist_shared(layout, data))


def mask_heatmap(mask: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str], *,
                 additive: bool = False, title: str = "", height: int | None = None,
                 tickangle: float = -75) -> go.Figure:
    """A mask drawn cell by cell: 1/0 (multiplicative) or 0/−∞ (additive). `mask` holds 1/0 or
    0/-inf values; allowed cells are blue, masked cells grey, and each cell shows its value. z is
    sent as uint8 1/0 (exact, a quarter of float32: plotly sends typed arrays as base64)."""
    m = as_array(mask, 2, "mask", "(rows, cols)").astype(np.float64)
    check_labels(row_labels, m.shape[0], "row_labels")
    check_labels(col_labels, m.shape[1], "col_labels")
    ok = np.isfinite(m) & (m != 0) if not additive else np.isfinite(m)
    extra = {}
    if max(m.shape) <= CELL_TEXT_MAX:  # larger masks: the colours say it, the hover gives the value
        text = np.where(ok, "0" if additive else "1", NEG_INF if additive else "0")
        extra = dict(text=text.tolist(), texttemplate="%{text}", textfont=dict(size=12))
    on, off = ("0", NEG_INF) if additive else ("1", "0")
    return figure(
        [dict(type="heatmap", z=ok.astype(np.uint8), x=token_labels(col_labels), y=token_labels(row_labels),
              zmin=0, zmax=1, showscale=False, **extra,
              colorscale=[[0, MASK_COLORS[0]], [0.5, MASK_COLORS[0]], [0.5, MASK_COLORS[1]], [1, MASK_COLORS[1]]],
              hovertemplate=f"row %{{y}}<br>column %{{x}}<br>value %{{z}} ({on} if 1, {off} if 0)<extra></extra>")],
        dict(title=dict(text=title) if title else None, font=FONT,
             margin=dict(l=10, r=10, t=40 if title else 10, b=10),
             height=height or min(620, 150 + 24 * m.shape[0]),
             yaxis=dict(autorange="reversed", type="category", **auto_ticks("y")),
             xaxis=dict(type="category", **auto_ticks("x", angle=tickangle))))


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
