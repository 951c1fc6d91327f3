"""Display helpers: every chart with its PNG (modebar camera) and its numbers as CSV."""
from __future__ import annotations

import functools
import html
import importlib
import inspect
import io
import re
import textwrap
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from labels import md_escape, token_labels
from model.trace import flat_arrays

PLOT_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", s).strip("-")[:60] or "chart"


PRESENT_FONT_PX = 16  # chart text in presentation mode (Plotly's default is 12)


def present_fonts(fig: go.Figure) -> None:
    """Presentation mode: every chart's text at PRESENT_FONT_PX or more (ticks of every subplot,
    panel titles, colour bars, legends), on every page alike (issue 21: the heads page's tick labels
    stayed at 12 px while other charts grew). The room around the plot grows with the text: the
    left and bottom margins (and the axis titles placed in them) by the tick labels' growth from
    Plotly's 12 px, the top margin by the larger title (and a legend under it moves down with it),
    so the title never lands on the top tick label (screenshot audit: positional, multi-head and
    FFN & output pages)."""
    fig.update_layout(font_size=PRESENT_FONT_PX)
    fig.update_xaxes(tickfont_size=PRESENT_FONT_PX)
    fig.update_yaxes(tickfont_size=PRESENT_FONT_PX)
    _open_row_gaps(fig)  # before the panel titles grow: it reads their sizes
    dflt_font = _ann_default(fig, "font")
    for ann in fig.layout.annotations or ():
        size = ann.font.size if ann.font and ann.font.size else (dflt_font.size if dflt_font and dflt_font.size else 12)
        ann.font.size = max(size, PRESENT_FONT_PX)
    m = fig.layout.margin
    title = fig.layout.title
    if title and title.text:
        fig.update_layout(title_font_size=PRESENT_FONT_PX + 4)
        if m is not None and m.t is not None:
            # each title line ~8 px taller (20 px bold vs ~14), and the 16 px top tick label reaches
            # ~2 px further up than a 12 px one: the plot starts lower by that much plus a gap
            lines = str(title.text).count("<br>") + 1
            grow = 8 * lines + 8
            fig.update_layout(margin_t=m.t + grow)
            if fig.layout.height:
                h = fig.layout.height
                lg = fig.layout.legend
                if lg is not None and lg.yref == "container" and lg.y is not None and lg.yanchor == "top":
                    lg.y = max(0.0, 1 - ((1 - lg.y) * h + 8 * lines) / (h + grow))  # same gap under the title
                fig.update_layout(height=h + grow)
    if m is not None and m.l is not None:  # tick-label margins were sized for 14 px labels (slack over 12)
        grow_lb = PRESENT_FONT_PX / 12  # the tick labels' real growth: without the slack, 16 px slanted
        fig.update_layout(margin_l=int(m.l * grow_lb), margin_b=int((m.b or 10) * grow_lb))  # labels reached
        # the axis titles placed in those margins (the head grid's "query (looking)", "key (looked at)")
        # move out with them, or they land on the larger tick labels
        # (xref, yref may be in the figure's template: viz.common.hoist_shared)
        dflt = fig.layout.template.layout.annotationdefaults if fig.layout.template else None
        for ann in fig.layout.annotations or ():
            xref = ann.xref or (dflt.xref if dflt else None)
            yref = ann.yref or (dflt.yref if dflt else None)
            if xref == "paper" and ann.xshift and ann.xshift < 0:
                ann.xshift = ann.xshift * grow_lb
            if yref == "paper" and ann.yshift and ann.yshift < 0:
                ann.yshift = ann.yshift * grow_lb


SHARED_PER_RUN = 32  # figures kept per run (the views of one input: layers, switches)
_shared: dict[int, tuple[weakref.ref, dict]] = {}  # id(run) -> (the run, {key: figure})
_shared_lock = threading.Lock()
_shared_gone: list[int] = []  # ids of runs freed since (a weakref callback only appends: no lock there)


def shared_fig(run, key: tuple, build: Callable[[], go.Figure]) -> go.Figure:
    """The figure `build()` makes from `run` (a cached trace: ui/runs.current_run gives every
    session asking for the same input the same Run), built once per (run, key) and shared by every
    session: the 100 followers of a live class draw the lecturer's view with one figure build, not
    100. `key` must name everything else the figure depends on (the layer, the page's switches);
    presentation mode's fonts are part of the key here. A shared figure is never changed after it
    is built (show_fig draws it as it is); its entries go with the run (when the trace cache drops
    it), at most SHARED_PER_RUN per run, oldest first."""
    present = bool(st.session_state.get("present"))
    full = (*key, present)
    with _shared_lock:
        entry = _shared.get(id(run))
        if entry is not None and entry[0]() is run:
            fig = entry[1].get(full)
            if fig is not None:
                return fig
    fig = build()
    if present:
        present_fonts(fig)
    fig._attn_lab_shared = True  # show_fig: its fonts are set, and it is not to be changed
    with _shared_lock:
        while _shared_gone:
            rid = _shared_gone.pop()
            if rid in _shared and _shared[rid][0]() is None:
                del _shared[rid]
        entry = _shared.get(id(run))
        if entry is None or entry[0]() is not run:
            rid = id(run)
            entry = _shared[rid] = (weakref.ref(run, lambda _, rid=rid: _shared_gone.append(rid)), {})
        figs = entry[1]
        fig = figs.setdefault(full, fig)  # another session may have built it meanwhile: one figure
        while len(figs) > SHARED_PER_RUN:
            del figs[next(iter(figs))]
    return fig


def _ann_default(fig: go.Figure, name: str):
    """An annotation property every annotation inherits from the figure's template (viz.common.hoist_shared)."""
    tpl = fig.layout.template
    return getattr(tpl.layout.annotationdefaults, name, None) if tpl and tpl.layout else None


LINE_EM = 1.3  # Plotly's line height, in font sizes


def _open_row_gaps(fig: go.Figure) -> None:
    """A grid of panels with a title over each (the heads grid, the overview): presentation mode
    grows the titles from 12 px to PRESENT_FONT_PX, and a three-line title then reached down onto
    the panels of the row above it (issue 33: SmolLM2's 9 heads at 1280 x 720). Open every gap
    between rows by what the tallest title grew, keeping each panel's height: the chart grows by
    (rows - 1) x that, and every y domain and paper-anchored annotation moves up by the gaps
    below it."""
    ykeys = [k for k in fig.layout.to_plotly_json() if k.startswith("yaxis") and fig.layout[k].domain]
    rows = sorted({tuple(fig.layout[k].domain) for k in ykeys}, key=lambda d: d[1])  # bottom row first
    if len(rows) < 2 or not fig.layout.height:
        return
    tops = [d[1] for d in rows]
    dflt_font, dflt_anchor, dflt_yref = (_ann_default(fig, n) for n in ("font", "yanchor", "yref"))
    grow = 0.0
    for ann in fig.layout.annotations or ():
        yref = ann.yref or dflt_yref
        anchor = ann.yanchor or dflt_anchor
        if yref != "paper" or anchor != "bottom" or ann.y is None or not any(abs(ann.y - t) < 1e-6 for t in tops[:-1]):
            continue  # not the title of a panel with a row above it
        size = ann.font.size if ann.font and ann.font.size else (dflt_font.size if dflt_font and dflt_font.size else 12)
        lines = str(ann.text or "").count("<br>") + 1
        grow = max(grow, lines * LINE_EM * (PRESENT_FONT_PX - size))
    if grow <= 0:
        return
    grow = float(int(grow) + 2)
    m = fig.layout.margin
    plot = fig.layout.height - (m.t or 0) - (m.b or 0)
    if plot <= 0:
        return
    new_plot = plot + grow * (len(rows) - 1)

    def move(y: float) -> float:  # paper y -> paper y of the taller chart
        below = sum(t < y - 1e-9 for t in tops)
        return round((y * plot + below * grow) / new_plot, 6)

    for k in ykeys:
        a, b = fig.layout[k].domain
        fig.layout[k].domain = [move(a), move(b)]
    for ann in fig.layout.annotations or ():
        if (ann.yref or dflt_yref) == "paper" and ann.y is not None and 0 <= ann.y <= 1:
            ann.y = move(ann.y)
    fig.update_layout(height=fig.layout.height + grow * (len(rows) - 1))


def show_fig(fig: go.Figure, key: str, *, table: pd.DataFrame | Callable[[], pd.DataFrame] | None = None,
             alt: str = "", filename: str | None = None, csv: bool = True) -> None:
    """Draw a figure (the camera button downloads it as PNG, or as SVG, a vector image for papers
    and slides, when "Chart images" in the sidebar says so; made in the browser, offline) with an optional CSV download of its numbers and
    a caption describing it (alt text for screen readers). `table` may be a callable: the CSV is
    then only made when the button is clicked, after the page has ended: make it with `deferred`
    (never a lambda over the page's variables)."""
    name = _slug(filename or key)
    if st.session_state.get("present") and not getattr(fig, "_attn_lab_shared", False):
        present_fonts(fig)
    fmt = "svg" if st.session_state.get("img_fmt") == "SVG" else "png"  # the sidebar's "Chart images" choice
    config = {**PLOT_CONFIG, "toImageButtonOptions": {"format": fmt, "filename": name,
                                                      **({"scale": 2} if fmt == "png" else {})}}
    wide = _once(fig, "wide", phone_min_width)
    drawn = _once(fig, "frozen", _FrozenFigure.of)
    if wide is None:
        st.plotly_chart(drawn, key=key, width="stretch", config=config)
    else:
        _wide_chart(drawn, key, wide, config)
    # Accessibility (issue 8): every chart gets alt text and a numeric table. A page that passes
    # neither gets ones made from the figure itself (its title, chart kind and axes; its data).
    st.caption(alt or md_escape(_once(fig, "describe", describe_fig)))
    if not csv:  # the page offers one CSV for several charts (the mask lab)
        return
    if table is None:
        table = lambda: fig_table(fig)  # noqa: E731  made only when the button is clicked
    if table is not None:
        make = table if callable(table) else (lambda: table)
        st.download_button("CSV of these numbers", lambda: make().to_csv().encode("utf-8"),
                           file_name=f"{name}.csv", mime="text/csv", key=f"{key}__csv",
                           on_click="ignore", icon=":material/download:")


def _once(fig: go.Figure, name: str, make: Callable[[go.Figure], Any]) -> Any:
    """make(fig); for a shared figure (shared_fig: never changed once built) made once and kept on
    the figure. A live class's followers all draw one figure: measuring its grid for phones
    (phone_min_width, ~2 ms) and its deep copy for Streamlit (to_dict) were ~15 % of a
    follower's run (benchmarks/profile_live.py)."""
    if not getattr(fig, "_attn_lab_shared", False):
        return make(fig)
    memo = getattr(fig, "_attn_lab_memo", None)
    if memo is None:
        memo = fig._attn_lab_memo = {}
    if name not in memo:
        memo[name] = make(fig)
    return memo[name]


class _FrozenFigure(go.Figure):
    """What st.plotly_chart draws: Streamlit only asks a figure for to_dict(), a fresh deep copy
    at every draw; this one gives the copy made when it was made (once for a shared figure; for
    any other, the one copy Streamlit would have made). Streamlit only reads it: it serialises it
    to JSON. Never built with __init__ (that validates the whole figure again): `of` makes one."""

    @classmethod
    def of(cls, fig: go.Figure) -> "_FrozenFigure":
        frozen = object.__new__(cls)
        object.__setattr__(frozen, "_attn_lab_dict", fig.to_dict())
        return frozen

    def to_dict(self) -> dict:
        return self._attn_lab_dict


SCROLL_NOTE = "This chart is wider than the screen: scroll sideways inside the box below to see all of it"
PHONE_PX = 640  # a viewport narrower than this is a phone: grids of panels get their own width there
PANEL_MIN_PX = 140  # the least width of one panel of a grid on a phone
THUMB_MIN_PX = 100  # ... of a thumbnail (a panel under ~93 px tall)
COLORBAR_PX = 90  # a colour bar with its tick labels and title, in px
TITLE_EM = 0.6  # a panel title's width per character, in font sizes (measured ~0.54 in Chromium)


def phone_min_width(fig: go.Figure) -> int | None:
    """The width in px a grid of panels (two or more subplot columns: the heads grid, the
    overview's thumbnails) needs on a phone: every panel at least PANEL_MIN_PX wide and its title
    clear of its neighbours' (issue 33: at 390 px the heads grid drew 66 px panels under titles
    219 px wide, overlapping). None for a chart of one column, which fits any screen."""
    lay = fig.layout
    cols = sorted({tuple(lay[k].domain) for k in lay.to_plotly_json()
                   if k.startswith("xaxis") and lay[k].domain})
    if len(cols) < 2:
        return None
    panel = min(c[1] - c[0] for c in cols)  # of the plot area's width
    step = min(b[0] + b[1] - a[0] - a[1] for a, b in zip(cols, cols[1:])) / 2  # centre to centre
    rows = {tuple(lay[k].domain) for k in lay.to_plotly_json() if k.startswith("yaxis") and lay[k].domain}
    tops = {round(r[1], 6) for r in rows}
    dflt_font = _ann_default(fig, "font")
    title_px = 0.0
    for ann in lay.annotations or ():
        if ann.y is None or round(ann.y, 6) not in tops:  # not a panel title (axis titles, notes)
            continue
        size = ann.font.size if ann.font and ann.font.size else (dflt_font.size if dflt_font and dflt_font.size else 12)
        chars = max(len(_plain(line)) for line in str(ann.text or "").split("<br>"))
        title_px = max(title_px, TITLE_EM * size * chars + 12)
    m = lay.margin
    # thumbnails (the overview: MiniLM's 12 heads a row, ~70 px tall) need less: a panel stretched to
    # twice its height reads worse than a smaller one, so at least THUMB_MIN_PX and 1.5 x its height
    least = PANEL_MIN_PX
    if lay.height and m is not None and rows:
        tall = min(d[1] - d[0] for d in rows) * (lay.height - (m.t or 0) - (m.b or 0))
        least = min(PANEL_MIN_PX, max(THUMB_MIN_PX, 1.5 * tall))
    plot = max(least / panel if panel > 0 else 0, title_px / step if step > 0 else 0)
    # a colour bar takes its width from the plot area (Plotly widens the right margin for it)
    # (a heatmap's, or its colour axis's: either may be set in the figure's template, so any heatmap counts)
    bar = COLORBAR_PX if any(t.type in ("heatmap", "contour") for t in fig.data) else 0
    return int(plot + bar + (m.l if m and m.l is not None else 80) + (m.r if m and m.r is not None else 80)) + 1


def _wide_chart(fig: go.Figure, key: str, wide: int, config: dict) -> None:
    """A grid of panels: as every chart on a wide screen; on a phone (viewport under PHONE_PX) at
    least `wide` px wide inside a box that scrolls sideways. Plotly draws at the width of the
    block around it (Streamlit measures that block), so the inner block gets the min-width and
    the outer one scrolls. Static CSS: keys and numbers from the code, no user text."""
    outer, inner, note = f"wide_{key}", f"wide_{key}_in", f"wide_{key}_note"
    css = [re.sub(r"[^a-zA-Z0-9_-]", "-", k.strip()) for k in (outer, inner, note)]  # Streamlit's st-key- class
    st.html(f"<style>.st-key-{css[2]} {{display: none;}} @media (max-width: {PHONE_PX - 0.02}px) {{"
            f".st-key-{css[0]} {{overflow-x: auto; overflow-y: hidden; border: 1px dashed rgba(128,128,128,.6);}}"
            f".st-key-{css[1]} {{min-width: {wide}px;}} .st-key-{css[2]} {{display: block;}}}}</style>")
    with st.container(key=note):  # the box's label, shown on a phone only (where the box scrolls)
        st.caption(f":material/swipe: {SCROLL_NOTE} ({wide:,} px wide).")
    with st.container(key=outer), st.container(key=inner):
        st.plotly_chart(fig, key=key, width="stretch", config=config)


_KINDS = {"heatmap": "Heatmap", "scatter": "Line chart", "scattergl": "Line chart", "bar": "Bar chart",
          "histogram": "Histogram"}


def _plain(text) -> str:
    """Figure text (may hold <br>, <sub>, escaped HTML) as plain text."""
    return " ".join(html.unescape(re.sub(r"<[^>]*>", " ", str(text or ""))).split())


def describe_fig(fig: go.Figure) -> str:
    """Alt text made from a figure: kind of chart, title, axis titles, series names."""
    kinds = sorted({_KINDS.get(t.type, t.type or "chart") for t in fig.data}) or ["Chart"]
    parts = [" and ".join(kinds) + (f": {_plain(fig.layout.title.text)}" if fig.layout.title.text else "")]
    axes = [f"{a} axis: {_plain(getattr(fig.layout, a + 'axis').title.text)}" for a in ("x", "y")
            if getattr(fig.layout, a + "axis").title.text]
    names = [_plain(t.name) for t in fig.data if t.name]
    if axes:
        parts.append("; ".join(axes))
    if names:
        parts.append("series: " + ", ".join(names[:8]) + (" ..." if len(names) > 8 else ""))
    parts.append("exact values in the CSV below")
    return ". ".join(parts) + "."


def fig_table(fig: go.Figure) -> pd.DataFrame:
    """Every trace's numbers as one long table (trace, x, y, value): a heatmap cell per row, or a
    point/bar per row. The fallback CSV for charts whose page gives no table of its own."""
    frames = []
    # A grid's panels share the first panel's token labels through matched axes (the other heatmaps
    # send no x, y: viz.attention.share_token_axes): a panel without its own takes its axis's.
    cats: dict[str, object] = {}
    for t in fig.data:
        if t.type == "heatmap":
            for letter in ("x", "y"):
                if t[letter] is not None:
                    cats.setdefault(t[letter + "axis"] or letter, t[letter])

    def labels_of(t, letter: str, n: int):
        own = t[letter]
        if own is not None:
            return own
        ax = fig.layout[letter + "axis" + (t[letter + "axis"] or letter)[1:]]
        shared = cats.get(ax.matches) if ax is not None and ax.matches else None
        return shared if shared is not None and len(shared) == n else np.arange(n)

    for i, t in enumerate(fig.data):
        name = _plain(t.name) or f"trace {i}"
        if t.type == "heatmap" and t.z is not None:
            z = np.asarray(t.z, dtype=float)
            if z.ndim != 2:
                continue
            xs = np.asarray(labels_of(t, "x", z.shape[1]), dtype=object)
            ys = np.asarray(labels_of(t, "y", z.shape[0]), dtype=object)
            r, c = np.meshgrid(np.arange(z.shape[0]), np.arange(z.shape[1]), indexing="ij")
            frames.append(pd.DataFrame({"trace": name, "x": xs[c.ravel() % len(xs)], "y": ys[r.ravel() % len(ys)],
                                        "value": z.ravel()}))
        else:
            x = getattr(t, "x", None)
            y = getattr(t, "y", None)
            if x is None and y is None:
                continue
            n = len(y) if y is not None else len(x)
            frames.append(pd.DataFrame({"trace": name,
                                        "x": list(x) if x is not None else list(range(n)),
                                        "y": list(y) if y is not None else [None] * n,
                                        "value": list(y) if y is not None else list(x)}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["trace", "x", "y", "value"])


def deferred(make: Callable[..., pd.DataFrame], *args, **kwargs) -> Callable[[], pd.DataFrame]:
    """A table for show_fig's CSV button, made from the values given now, only when the button is
    clicked. The click runs the maker later, on a server thread, after the page script has ended:
    a `lambda: heads_table(w, ...)` reads the page's variables at that moment, and finds them
    deleted (the heads page drops its trace: NameError, nothing downloaded, issue 33) or holding
    a later value; it also keeps the page's whole namespace (every array it read) alive. This
    holds only the arguments."""
    return functools.partial(make, *args, **kwargs)


def deferred_csv(make: Callable[..., pd.DataFrame], *args, **kwargs) -> Callable[[], bytes]:
    """`deferred`, as the CSV file's bytes: the data of a download button of a page's own."""
    table = deferred(make, *args, **kwargs)
    return lambda: table().to_csv().encode("utf-8")


def matrix_table(z, row_labels, col_labels) -> pd.DataFrame:
    """A labelled table of a matrix (unique row/column names like '3:the')."""
    return pd.DataFrame(z, index=token_labels(row_labels, plain=True), columns=token_labels(col_labels, plain=True))


def heads_table(weights: np.ndarray, labels: Sequence[str], layer: int) -> pd.DataFrame:
    """weights (H, Tq, Tk) as a long table: layer, head, query, key, weight (one row per cell)."""
    H, Tq, Tk = weights.shape
    h, q, k = np.meshgrid(np.arange(H), np.arange(Tq), np.arange(Tk), indexing="ij")
    lab = token_labels(labels, plain=True)
    return pd.DataFrame({"layer": layer, "head": h.ravel(), "query": np.asarray(lab, dtype=object)[q.ravel()],
                         "key": np.asarray(lab, dtype=object)[k.ravel()], "weight": weights.ravel()})


def trace_npz(trace, **extra) -> bytes:
    """The one .npz export: a trace's arrays (keys named after its fields, as in the trace
    contract: "layers.0.attn.weights") plus extras, compressed."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **{**flat_arrays(trace), **{k: np.asarray(v) for k, v in extra.items()}})
    return buf.getvalue()


def download_npz(run, key: str = "npz", label: str = "Whole trace (.npz)", file_name: str = "attention_lab_trace.npz") -> None:
    """The whole trace of the current input (a Run or a padded BatchRun) as .npz. Made only when
    the button is clicked (nothing is sent with the page)."""
    extras = run.export_extras()
    again = getattr(run, "again", None)
    if again is None:  # a padded batch (the mask lab's toy sentences): held as it is
        def make() -> bytes:
            return trace_npz(run.trace, **extras)
    else:
        # Streamlit keeps the button's callable with the session until its next run: holding the
        # run there kept every session's last trace alive after the shared cache let it go (100
        # sessions typing into SmolLM2: ~25 MB each). So the run is held weakly, and traced again
        # (the same forward, the same values) if it is gone when the button is clicked, or if it
        # holds a partial trace (the heads page's: ui.runs.get_run's layer).
        ref, remake = weakref.ref(run), again()

        def make() -> bytes:
            r = ref()
            whole = r is not None and r.trace.complete
            return trace_npz(r.trace if whole else remake(), **extras)  # a partial run: the whole trace
    what = "this forward pass (a batch: axis 0 = sentence), plus " + ", ".join(extras)
    st.download_button(label, make, file_name=file_name, mime="application/octet-stream", key=key,
                       on_click="ignore", icon=":material/download:",
                       help=f"Every intermediate of {what}; keys like layers.0.attn.weights "
                            "(axes: batch, head, query, key).")


@functools.lru_cache(maxsize=128)
def _source_of(dotted: str) -> tuple[str, str, int]:
    """(source text, file relative to the repo, first line) of a function, method or class named
    "module.path.Name[.method]", read from the running code (never a copy that could drift)."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        break
    else:
        raise ValueError(f"cannot import {dotted!r}")
    obj = inspect.unwrap(obj.fget if isinstance(obj, property) else obj)
    lines, start = inspect.getsourcelines(obj)
    path = Path(inspect.getsourcefile(obj)).resolve()
    root = Path(__file__).resolve().parent.parent
    rel = str(path.relative_to(root)) if path.is_relative_to(root) else path.name
    return textwrap.dedent("".join(lines)), rel, start


@dataclass(frozen=True)
class Lines:
    """An excerpt of a function for show_code: its lines from the first one containing `first`
    to the first one after it containing `last` (both included), read from the running source.
    A marker that is no longer in the function raises ValueError (the code view then shows the
    error, and the tests that open it fail), so an excerpt cannot silently show other lines."""
    name: str  # dotted path, as for show_code
    first: str
    last: str


def excerpt(lines: Lines) -> tuple[str, str, int, int]:
    """(source text, file relative to the repo, first line, last line) of an excerpt."""
    src, rel, start = _source_of(lines.name)
    rows = src.splitlines()
    a = next((i for i, r in enumerate(rows) if lines.first in r), None)
    b = next((i for i in range(a or 0, len(rows)) if lines.last in rows[i]), None) if a is not None else None
    if a is None or b is None:
        missing = lines.first if a is None else lines.last
        raise ValueError(f"{lines.name} has no line containing {missing!r}: update the excerpt (ui.show.Lines)")
    return textwrap.dedent("\n".join(rows[a:b + 1])), rel, start + a, start + b


# The lines that compute attention weights, as the model runs them (model.layers.MultiHeadAttention
# calls attend_fields; attend() is a wrapper that only builds the trace): the per-head Q, K, V, then
# q k^T, the scaling, the mask and the softmax. Shown on the heads, scaling and model-view pages.
ATTENTION_CODE = (
    Lines("model.layers.MultiHeadAttention.forward", "q = self.split(self.q_proj(x_q))",
          "v = self.split(self.v_proj(x_kv)"),
    Lines("model.attention.attend_fields", "d_k = q.shape[-1]", "heads = weights @ v"),
    "model.attention.masked_softmax",
)

CODE_KEY = "code_view"  # the code expander's open state (one per page)


def show_code(*names: str | Lines, what: str = "") -> None:
    """The Annotated-Transformer pairing: a collapsed "The code" expander with the engine's own
    lines that compute what the page shows, read from the source at run time (so they never drift
    from what runs). names: dotted paths such as "model.attention.masked_softmax" (the whole
    function), or Lines(...) for the lines of a longer one that do the work (ATTENTION_CODE).
    The code is sent only while the expander is open: opening it reruns this fragment alone. Closed,
    it cost every rerun of the heads page 3.5 kB (issue 22: a tenth of the page's budget at the
    2017 preset, T = 64)."""
    _code_view(names, what)


@st.fragment
def _code_view(names: tuple[str | Lines, ...], what: str) -> None:
    box = st.expander("The code" + (f": {what}" if what else ""), icon=":material/code:", key=CODE_KEY,
                      on_change="rerun")
    with box:
        if box.open:
            for name in names:
                if isinstance(name, Lines):
                    src, rel, start, end = excerpt(name)
                    st.caption(f"`{name.name}` · {rel}, lines {start}–{end}")
                    st.code(src, language="python")  # no line numbers: they would count from 1, not from {start}
                    continue
                src, rel, start = _source_of(name)
                st.caption(f"`{name}` · {rel}, line {start}")
                st.code(src, language="python", line_numbers=True)
