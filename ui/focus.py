"""The focused head: the one head a lecturer points at, drawn large above the grid on the heads
and overview pages, on every screen (a student's phone too, where the grid itself scrolls).

It lives in the URL as `focus=L.H` (layer L, head H; absent: no focused head), so a link keeps it
and a live class's followers get it like any other control (the room's view is the URL). Set with
the "Focused head" select, or by clicking a head's button under the heads grid. (A click on a
heatmap cell does not reach Streamlit 1.67's chart selection events: plotly.js emits no click
for heatmaps in the drag modes Streamlit sets, so the grid's heads are clicked as buttons.)"""
from __future__ import annotations

import re

import streamlit as st

from viz.attention import head_heatmap

from . import state
from .head_labels import layer_labels
from .show import show_fig

KEY = "focus"
NONE = ""  # no focused head (the URL then has no focus key)
PICK = "focus_pick"  # the heads page's row of head buttons (not in the URL: it mirrors KEY)
FOCUS_MAX_PX = 520  # the focused head's plot height at most: with the page's top it fits a 1280 x 720 projector
_FORM = re.compile(r"(\d{1,3})\.(\d{1,3})")


def parse_focus(raw: str) -> str:
    """The URL's text -> the value: "L.H" (two whole numbers) or "" (none). Whether the model has
    that layer and head is checked against the model on screen (focus_select)."""
    raw = str(raw).strip()
    if raw in ("", "none"):
        return NONE
    m = _FORM.fullmatch(raw)
    if m is None:
        raise ValueError("must be layer.head, e.g. 2.5")
    return f"{int(m.group(1))}.{int(m.group(2))}"


def focused(value: str | None) -> tuple[int, int] | None:
    """(layer, head) of a focus value, None for none."""
    if not value:
        return None
    layer, head = value.split(".")
    return int(layer), int(head)


def _words(value: str) -> str:
    f = focused(value)
    return "none" if f is None else f"layer {f[0]} · head {f[1]}"


def focus_select(n_layers: int, n_heads: int, where=None) -> tuple[int, int] | None:
    """The "Focused head" select (every layer's heads of the model on screen); returns the focus.
    A link's focus the model does not have falls back to none, with a notice (state.fix)."""
    state.bound(KEY, NONE, parse=parse_focus)
    options = [NONE] + [f"{layer}.{head}" for layer in range(n_layers) for head in range(n_heads)]
    state.fix(KEY, options, NONE)
    (where or st).selectbox("Focused head", options, key=KEY, format_func=_words,
                            help="One head drawn large above the grid, with every token's label, on every screen "
                                 "(in a live class the students' phones show it too). In the link as focus=layer.head.")
    return focused(st.session_state[KEY])


def _picked() -> None:
    v = st.session_state.get(PICK)
    st.session_state[KEY] = NONE if v is None else v


def head_buttons(layer: int, n_heads: int) -> None:
    """One button per head of `layer` (the heads grid's panels, in order): a click focuses that
    head, a second click on it clears the focus."""
    cur = st.session_state.get(KEY, NONE)
    options = [f"{layer}.{h}" for h in range(n_heads)]
    st.session_state[PICK] = cur if cur in options else None  # mirrors the focus (set before the widget)
    st.pills("Click a head to focus it", options, key=PICK, on_change=_picked,
             format_func=lambda v: f"head {v.split('.')[1]}")


def draw_focus(run, layer: int, head: int, weights, allowed, keys=None) -> None:
    """The focused head, large: weights (T, T) of `layer`, `head` as shown (sink hidden or not),
    with its pattern in the title and every token's label on both axes (Plotly drops labels that
    do not fit). One panel: it fits any screen width."""
    pat = layer_labels(run, layer, keys)[head]
    allowed = None if allowed is None else (allowed[head] if allowed.ndim == 3 else allowed)  # (T, T)
    n = len(run.labels)
    fig = head_heatmap(weights, run.labels, allowed=allowed, hidden_keys=keys, height=min(FOCUS_MAX_PX, 220 + 26 * n),
                       title=f"Focused: layer {layer}, head {head}<br><span style='font-size:0.85em;font-weight:normal'>{pat.title()}"
                       + ("" if keys is None else " · sink hidden") + "</span>")  # two lines: clear of a phone's toolbar
    # the title just above the plot, two lines, under the chart's toolbar (which a phone always shows)
    fig.update_layout(margin_t=92, title=dict(yref="paper", y=1, yanchor="bottom", pad=dict(b=30)))
    show_fig(fig, "focus_head", filename=f"focus_layer{layer}_head{head}",
             alt=f"The focused head: layer {layer}, head {head}. Rows: queries; columns: keys; grey: masked. "
                 "Hover a cell for its exact weight.")
