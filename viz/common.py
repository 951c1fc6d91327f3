"""Shared helpers for every figure: safe token labels, colour scales, shape checks."""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

# The one label formatter and HTML escape (pure, shared with classroom/ and ui/), used by every figure.
from labels import token_labels, visible  # noqa: F401  (re-exported: viz modules import them from here)

# Colour-blind-safe sequential scale for weights (0..1) and a diverging one for differences.
WEIGHT_SCALE = "Cividis"
DIVERGING_SCALE = "RdBu_r"
MASKED_COLOR = "#d9d9d9"  # masked cells are NaN in z and show this background (blank/grey)
FONT = dict(family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif")
TITLE_COLOR = "#262730"  # dark panel titles (readable on a projector; the theme's default is light grey)
TITLE_BG = "rgba(255, 255, 255, 0.9)"  # behind panel titles: invisible on the light theme, a chip on the dark one
# Okabe-Ito: a qualitative palette that stays distinguishable for colour-blind readers.
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
MASK_COLORS = ["#d9d9d9", "#2c7fb8"]  # 0 = masked (grey, as masked cells everywhere), 1 = allowed
NEG_INF = "−∞"


def as_array(x, ndim: int, name: str, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {what} ({ndim}-D); got shape {a.shape}")
    return a


def check_labels(labels: Sequence[str], n: int, name: str) -> None:
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} labels but the matrix has {n} along that axis; pass one label per token")


def masked_z(weights: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """float32 weights with NaN where not allowed (rendered blank/grey, never as a colour)."""
    z = np.asarray(weights, dtype=np.float32).copy()
    if allowed is not None:
        z = np.where(np.broadcast_to(np.asarray(allowed, dtype=bool), z.shape), z, np.nan).astype(np.float32)
    return z


# --- long inputs (issue 33): blocks of tokens ---------------------------------------------------------
# Up to EXACT_MAX_T tokens every figure draws every weight. Beyond, a grid of panels (a heads grid,
# the overview's thumbnails, causal vs bidirectional) draws blocks of `step` x `step` tokens: a
# 512-token MiniLM overview sent 6 x 12 x 512 x 512 float32 weights (100 MB of JSON: the browser
# failed with "RangeError: Invalid string length"), and no panel has a pixel per token anyway. The
# exact weights stay one click away (one head in detail, the CSV, the .npz export).
EXACT_MAX_T = 128


def block_step(T: int, max_cells: int, exact_max: int = EXACT_MAX_T) -> int:
    """Tokens per block along an axis of T tokens: 1 (every token, exact) up to exact_max tokens,
    else the smallest step that leaves at most max_cells blocks."""
    if T <= exact_max:
        return 1
    return max(1, -(-T // max_cells))


def block_weights(weights: np.ndarray, step: int, allowed: np.ndarray | None = None) -> np.ndarray:
    """(..., Tq, Tk) attention weights -> (..., ceil(Tq/step), ceil(Tk/step)) float32 blocks.

    Block (I, J) = the mean over the queries i in I of the total weight query i gives the keys in J:
    mean_i sum_j w[i, j], summed in float64. A row of blocks therefore still sums to 1 (every
    query's weights do), the colour scale stays 0..1, and a sharp pattern (previous token, a sink)
    stays as bright as in the full matrix. The last block of an axis may hold fewer tokens (the
    mean is over the queries it has). Blocks where `allowed` (broadcastable to weights) is False for
    every cell are NaN (drawn grey, as masked cells). step 1 returns masked_z(weights, allowed)."""
    w = np.asarray(weights)
    if w.ndim < 2:
        raise ValueError(f"weights must be (..., Tq, Tk); got shape {w.shape}")
    if step < 1:
        raise ValueError(f"step must be >= 1, got {step}")
    if step == 1:
        return masked_z(w, allowed)
    Tq, Tk = w.shape[-2:]
    qs, ks = np.arange(0, Tq, step), np.arange(0, Tk, step)
    s = np.add.reduceat(w, ks, axis=-1, dtype=np.float64)  # (..., Tq, nk): total weight on each key block
    s = np.add.reduceat(s, qs, axis=-2)  # (..., nq, nk)
    n_q = np.diff(np.append(qs, Tq)).astype(np.float64)  # queries per block row
    z = (s / n_q[:, None]).astype(np.float32)
    if allowed is not None:
        a = np.broadcast_to(np.asarray(allowed, dtype=bool), w.shape)
        any_ok = np.logical_or.reduceat(np.logical_or.reduceat(a, ks, axis=-1), qs, axis=-2)
        z = np.where(any_ok, z, np.float32(np.nan)).astype(np.float32)
    return z


def block_labels(labels: Sequence[str], step: int, max_chars: int = 10) -> list[str]:
    """Category labels of the blocks of an axis: "8–15:quick" (the block's token positions and its
    first token, shortened and HTML-escaped; unique because the positions are). step 1: the usual
    token_labels ("8:quick")."""
    if step == 1:
        return token_labels(labels)
    out = []
    for a in range(0, len(labels), step):
        b = min(a + step, len(labels)) - 1
        first = token_labels([labels[a]], max_chars=max_chars)[0].split(":", 1)[1]
        out.append(f"{a}–{b}:{first}")
    return out


def block_title(step: int, T: int) -> str:
    """A blocked figure's title line, short enough for a phone ("" when exact)."""
    return "" if step == 1 else f"{T:,} tokens in blocks of {step}×{step} (block weights)"


def block_note(step: int, T: int) -> str:
    """What a blocked figure shows, for the caption under it ("" when exact)."""
    if step == 1:
        return ""
    return (f"Long input: the {T:,} tokens are drawn in blocks of {step}×{step}. A block's weight is the mean, over "
            f"its {step} queries, of the total weight each gives its {step} keys: rows of blocks still sum to 1, "
            "and a sharp pattern stays as bright as in the full matrix. Every token's exact weight is in the CSV "
            "and the .npz export.")


SLANT_DEG = 75  # the least slant (from level) at which labels Plotly spaces apart never overlap (below)


def auto_ticks(letter: str, *, angle: float = -SLANT_DEG) -> dict:
    """Tick properties that let Plotly choose which category labels to draw from the axis's real
    length in the browser, instead of a count fixed on the server for a guessed width: one label
    per round(1.2 × font size) px (every label when there is room, every n-th when not, on a phone
    or a projector alike; nothing sent per tick). At that spacing level labels of a y axis never
    overlap (their boxes are 1.17 font sizes tall, measured in Chromium). Slanted x labels lie
    spacing × sin(slant) apart, so at the least spacing they clear each other from 75° on: at 60°
    they overlapped by 1.5 px (Plotly's own choice of slant checks tan, not sin). angle 0: level
    while the labels fit side by side, else upright; any other angle: at least 75° (-75 default)."""
    if letter == "y":
        return dict(tickmode="auto")
    if angle == 0:
        return dict(tickmode="auto", autotickangles=[0, -90])
    return dict(tickmode="auto", autotickangles=[-max(SLANT_DEG, abs(angle))])


def _r(v: float) -> float:
    return round(float(v), 6)


def subplot_layout(rows: int, cols: int, titles: Sequence[str], *, hspace: float, vspace: float,
                   title_size: int = 14) -> tuple[dict, list[tuple[str, str]]]:
    """Layout (axes with domains + title annotations) for a rows x cols grid of panels, like
    plotly.subplots.make_subplots but built as one dict: make_subplots plus per-panel
    update_xaxes/update_yaxes cost ~0.1-0.5 s per figure here, this ~5 ms (the figure is then
    validated once). Returns (layout, [(xref, yref) for panel 0..n-1 in row-major order]);
    titles may be shorter than rows*cols (the remaining panels get no title)."""
    cw = (1 - hspace * (cols - 1)) / cols
    rh = (1 - vspace * (rows - 1)) / rows
    layout: dict = {}
    refs: list[tuple[str, str]] = []
    ann = []
    for i in range(rows * cols):
        r, c = divmod(i, cols)
        sx = "" if i == 0 else str(i + 1)
        x0 = c * (cw + hspace)
        y1 = 1 - r * (rh + vspace)
        # no grid lines or zero lines across the heatmaps
        # positions rounded to 1e-6 of the chart (far below a pixel): 0.14666666666666667 was 19 bytes
        layout[f"xaxis{sx}"] = dict(domain=[_r(max(0.0, x0)), _r(min(1.0, x0 + cw))], anchor=f"y{sx}",
                                    showgrid=False, zeroline=False)
        layout[f"yaxis{sx}"] = dict(domain=[_r(max(0.0, y1 - rh)), _r(min(1.0, y1))], anchor=f"x{sx}",
                                    showgrid=False, zeroline=False)
        refs.append((f"x{sx}", f"y{sx}"))
        if i < len(titles):
            ann.append(dict(text=titles[i], x=_r(x0 + cw / 2), y=_r(min(1.0, y1)), xref="paper", yref="paper",
                            showarrow=False, xanchor="center", yanchor="bottom", yshift=4,
                            font=dict(size=title_size, color=TITLE_COLOR),
                            # light chip behind the dark title: readable in the dark theme too (issue 8)
                            bgcolor=TITLE_BG))
    layout["annotations"] = ann
    return layout, refs


def axes(layout: dict, **props) -> None:
    """Set props on every x axis (`x_` prefix) / y axis (`y_` prefix) of a subplot_layout."""
    for k, ax in layout.items():
        if k.startswith("xaxis"):
            ax.update({p[2:]: v for p, v in props.items() if p.startswith("x_")})
        elif k.startswith("yaxis"):
            ax.update({p[2:]: v for p, v in props.items() if p.startswith("y_")})


def label_margins(x_labels: Sequence[str], y_labels: Sequence[str], *, font_px: int = 14,
                  x_angle: float = -60.0, x_title: bool = False, y_title: bool = False) -> tuple[int, int]:
    """(left, bottom) margins in px that fit the tick labels, computed here so the axes can use
    automargin=False: Plotly's automargin re-lays the figure out after measuring the labels
    (several passes for a grid of panels), ~0.1 s of the repaint of a 4-head grid in Chromium.
    Widths are estimated at 0.6 em per character (system-ui); labels are already HTML-escaped,
    so entities are counted as one character."""
    import math
    import re

    def width(labels: Sequence[str]) -> float:
        n = max((len(re.sub(r"&[#\w]+;", "x", str(s))) for s in labels), default=1)
        return 0.6 * font_px * n
    a = math.radians(abs(x_angle))
    left = width(y_labels) + 12 + (26 if y_title else 0)
    bottom = math.sin(a) * width(x_labels) + math.cos(a) * font_px + 12 + (26 if x_title else 0)
    return int(left), int(bottom)


def legend_below_title(title_px: int, height: int) -> dict:
    """A horizontal legend in the top margin, just under a title that is title_px tall (0: none),
    placed in container coordinates: Plotly then grows the top margin when the legend wraps to
    more rows in a narrow column. A legend in paper coordinates (y just above the plot) grew
    upwards instead, over the title (screenshot audit, issue 21 point 7)."""
    return dict(orientation="h", yref="container", y=max(0.0, 1 - title_px / max(height, 1)), yanchor="top",
                xanchor="left", x=0)


@functools.lru_cache(maxsize=32)
def scale(name: str) -> tuple:
    """A named colour scale as explicit [position, colour] stops (what Plotly's validation would
    send; some names, such as "RdBu_r", exist only in plotly.py, not in plotly.js). Positions are
    rounded to 6 decimals (0.111111, not 0.1111111111111111: the colours move by under 1e-6 of the
    scale, and every chart sends its scale on every rerun)."""
    from plotly.colors import get_colorscale
    return tuple((round(float(p), 6), c) for p, c in get_colorscale(name))


def _drop_none(d: dict) -> dict:
    return {k: (_drop_none(v) if isinstance(v, dict) else v) for k, v in d.items() if v is not None}


# Plotly's default template ("plotly", ~3.4 KB of JSON) would travel with every chart on every rerun.
# Streamlit's theme (light or dark) is merged into layout.template.layout in the browser, so an
# (almost) empty template looks the same: the heads, causal-vs-bidirectional and mask-lab pages were
# screenshot with both templates, in both themes, and did not differ by one pixel.
MINIMAL_TEMPLATE = {"layout": {"hoverlabel": {"align": "left"}}}


# Axis properties Streamlit's theme sets in layout.template.layout.xaxis / .yaxis in the browser (it
# merges its theme over the figure's template): a figure's own value for these must stay on each axis.
THEMED_AXIS_PROPS = frozenset({"automargin", "tickfont", "title", "ticklabelposition", "tickcolor", "gridcolor",
                               "zerolinecolor", "minor", "rangeselector"})


# What identifies a trace or holds its data: never moved to the template
TRACE_OWN_PROPS = frozenset({"type", "x", "y", "z", "text", "customdata", "xaxis", "yaxis", "name", "uid",
                             "meta", "ids", "marker", "line"})


def hoist_shared(layout: dict, data: list[dict] | None = None) -> dict:
    """Send once what the axes, panel titles or traces of a grid of panels repeat (issue 22: the
    2017 preset's grids repeated `"type":"category","showgrid":false,...` on 18 axes and the
    anchors and chip of every panel title). Those properties move to the figure's own template:
    template.layout.xaxis applies to every x axis, .yaxis to every y axis, .annotationdefaults to
    every annotation, template.data.<type> to every trace of that type (hover template, colour
    axis, hoverongaps; never a trace's type, axes, name or data). A property moves when every item
    sets it and more than half set the same plain value; the others keep their own value, which
    overrides the template's, so every item draws exactly as before and none inherits a value it
    did not have. A nested value (a font) moves only when all are equal: a partial font would
    inherit the rest. Properties Streamlit's theme sets in the template in the browser
    (THEMED_AXIS_PROPS) stay on each axis. Returns the layout (with its new template)."""
    tpl = dict(layout.get("template", MINIMAL_TEMPLATE)["layout"])

    def common(items: list[dict], skip=frozenset()) -> dict:
        if len(items) < 2:
            return {}
        out = {}
        for k in dict.fromkeys(k for it in items for k in it if k not in skip):  # first-seen order
            if not all(k in it and it[k] is not None for it in items):
                continue
            vals = [it[k] for it in items]
            if isinstance(vals[0], (dict, list)):
                if all(v == vals[0] for v in vals):
                    out[k] = vals[0]
                continue
            best = max(set(map(repr, vals)), key=[repr(v) for v in vals].count)
            v = next(v for v in vals if repr(v) == best)
            if 2 * sum(repr(x) == best for x in vals) > len(vals):
                out[k] = v
        return out

    def move(items: list[dict], shared: dict) -> None:
        for it in items:
            for k, v in shared.items():
                if repr(it[k]) == repr(v):
                    del it[k]

    for letter in ("x", "y"):
        axs = [v for k, v in layout.items() if k.startswith(letter + "axis") and isinstance(v, dict)]
        shared = common(axs, THEMED_AXIS_PROPS)
        if shared:
            tpl[letter + "axis"] = shared
            move(axs, shared)
    anns = [a for a in layout.get("annotations", []) if isinstance(a, dict)]
    shared = common(anns, {"text", "x", "y"})
    if shared:
        tpl["annotationdefaults"] = shared
        move(anns, shared)
    template = {"layout": tpl}
    by_type: dict[str, list[dict]] = {}
    for tr in data or ():
        by_type.setdefault(tr.get("type", ""), []).append(tr)
    for kind, traces in by_type.items():
        shared = {k: v for k, v in common(traces, TRACE_OWN_PROPS).items() if not isinstance(v, (dict, list))}
        if kind and shared:
            template.setdefault("data", {})[kind] = [shared]
            move(traces, shared)
    layout["template"] = template
    return layout


def figure(data: list[dict], layout: dict) -> go.Figure:
    """A Figure from plain dicts (traces as dict(type=..., ...)) without plotly.py's per-property
    validation. Validating costs ~6 ms for a 4-head grid at the default config (8 ms -> 2 ms), a
    tenth of a heads-page rerun, and every rerun of every session pays it (issue 8 load). Named
    colour scales must be passed through `scale()`. The template is MINIMAL_TEMPLATE unless the
    layout names one. The figures stay valid: tests/viz re-validate
    every figure made this way (`go.Figure(fig.to_dict())` raises on a misspelt property)."""
    layout = {"template": MINIMAL_TEMPLATE, **layout}
    return go.Figure(data=[_drop_none(t) for t in data], layout=_drop_none(layout), _validate=False)
