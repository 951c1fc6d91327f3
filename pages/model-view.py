"""Model view (BertViz's): every layer × head as a line view, paged for deep models; and one layer's
heads overlaid, one colour per head."""
import numpy as np
import pandas as pd
import streamlit as st

from labels import token_label
from ui import circuits as sink
from ui import state
from ui.runs import current_run
from ui.show import show_code, show_fig
from viz.model_view import model_view_html, multi_head_lines

PER_PAGE = 6

st.title("Model view: every head as lines")
show_code("model.attention.attend", what="the weights the lines are drawn from")
run = current_run()
L, H, T = run.cfg.n_layers, run.cfg.n_heads, run.T
w = np.stack([lt.attn.weights[0] for lt in run.trace.layers])  # (L, H, T, T)
if sink.sink_switch():  # the derived view: no lines to the sink, each row renormalised over the rest
    w = sink.hidden(run, w)
    sink.derived_note(run)
st.caption("Each small panel is one head: tokens on the left look at tokens on the right, and a line's strength "
           "grows with the attention weight (weights under 0.05 are not drawn). Hover a token, in the column of "
           "names or on the left half of any panel, to see only its lines in every head; pick one below to keep it.")
opts = [-1] + list(range(T))


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
grid = model_view_html(w[shown.start:shown.stop], run.labels, first_layer=shown.start, only=only, dom_id="mv-grid")
st.html(f'<div style="overflow-x: auto">{grid}</div>')
csv = pd.DataFrame(
    w[shown.start:shown.stop].reshape(-1, T), columns=[token_label(j, run.labels[j]) for j in range(T)],
    index=[f"L{l} H{h} q{i}" for l in shown for h in range(H) for i in range(T)]).to_csv()
st.download_button("Download these weights (CSV)", csv, file_name="model_view.csv", mime="text/csv", key="mv_csv")

st.subheader("One layer, every head in its own colour")
state.fix("mv_layer", list(range(L)), 0)
layer = st.selectbox("Layer", list(range(L)), key="mv_layer")
show_fig(multi_head_lines(w[layer], run.labels, only=only, title=f"Layer {layer}: {H} heads"), "mv_multi",
         table=lambda: pd.DataFrame(w[layer].reshape(-1, T)),
         alt="All heads of one layer overlaid; click a head in the legend to hide or show it.")
