"""Model view (BertViz's): every layer × head as a line view, paged for deep models; and one layer's
heads overlaid, one colour per head."""
import numpy as np
import streamlit as st

from classroom.text import token_label
from ui import state
from ui.compute import current_run
from ui.show import show_code, show_fig
from viz.model_view import model_view, multi_head_lines

PER_PAGE = 6

st.title("Model view: every head as lines")
show_code("model.attention.attend", what="the weights the lines are drawn from")
run = current_run()
L, H, T = run.cfg.n_layers, run.cfg.n_heads, run.T
w = np.stack([lt.attn.weights[0] for lt in run.trace.layers])  # (L, H, T, T)
st.caption("Each small panel is one head: tokens on the left look at tokens on the right, and a line's width and "
           "strength grow with the attention weight (weights under 0.05 are not drawn). Hover a token's dot on the "
           "left of any panel to see which it is; click it (or pick it below) to see only its lines in every head.")
opts = [-1] + list(range(T))


def _picked() -> None:
    """A click on a token's marker in the grid: show only that token's lines (BertViz's hover)."""
    ev = st.session_state.get("mv_grid")
    pts = (ev or {}).get("selection", {}).get("points", []) if isinstance(ev, dict) else \
        (ev.selection.points if ev is not None else [])
    if pts:
        cd = pts[0].get("customdata")
        st.session_state["mv_tok"] = int(cd[0] if isinstance(cd, (list, tuple)) else cd)


state.fix("mv_tok", opts, -1)
only = st.selectbox("Show the lines of", opts, key="mv_tok",
                    format_func=lambda i: "every token" if i < 0 else token_label(i, run.labels[i], sep=": "))
only = None if only < 0 else int(only)
if L > PER_PAGE + 2:
    groups = [f"layers {a}–{min(a + PER_PAGE, L) - 1}" for a in range(0, L, PER_PAGE)]
    state.fix("mv_layers", groups, groups[0])
    g = st.segmented_control("Layers", groups, key="mv_layers") or groups[0]
    first = groups.index(g) * PER_PAGE
    shown = range(first, min(first + PER_PAGE, L))
else:
    shown = range(L)
show_fig(model_view(w[shown.start:shown.stop], run.labels, first_layer=shown.start, only=only,
                    title=f"Layers {shown.start}–{shown.stop - 1} × {H} heads ({T} tokens)"),
         "mv_grid", table=lambda: __import__("pandas").DataFrame(w[shown.start:shown.stop].reshape(-1, T)),
         alt="A grid of line views, one per head; thicker, darker lines carry more attention.", on_select=_picked)

st.subheader("One layer, every head in its own colour")
state.fix("mv_layer", list(range(L)), 0)
layer = st.selectbox("Layer", list(range(L)), key="mv_layer")
show_fig(multi_head_lines(w[layer], run.labels, only=only, title=f"Layer {layer}: {H} heads"), "mv_multi",
         table=lambda: __import__("pandas").DataFrame(w[layer].reshape(-1, T)),
         alt="All heads of one layer overlaid; click a head in the legend to hide or show it.")
