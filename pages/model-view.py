"""Model view (BertViz's): every layer × head as a line view, paged for deep models; and one layer's
heads overlaid, one colour per head."""
import numpy as np
import pandas as pd
import streamlit as st

from labels import token_label
from ui import circuits as sink
from ui import state
from ui.runs import current_run
from ui.show import ATTENTION_CODE, deferred, deferred_csv, show_code, show_fig
from viz.model_view import model_view_html, multi_head_lines

PER_PAGE = 6

st.title("Model view: every head as lines")
show_code(*ATTENTION_CODE, what="the weights the lines are drawn from")
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


def tok_title(i: int) -> str:
    return "every token" if i < 0 else token_label(i, run.labels[i], sep=": ")


# the token, the layer group and the layer are in the URL: a copied link shows this view (issue 33)
state.bound("mv_tok", -1)
state.fix("mv_tok", opts, -1)
state.follow_labels("mv_tok", opts, tok_title)  # a token's label follows the sentence
only = st.selectbox("Show the lines of", opts, key="mv_tok", format_func=tok_title)
only = None if only < 0 else int(only)
if L > PER_PAGE + 2:
    groups = [f"layers {a}–{min(a + PER_PAGE, L) - 1}" for a in range(0, L, PER_PAGE)]
    state.bound("mv_layers", groups[0])
    state.fix("mv_layers", groups, groups[0])
    g = st.segmented_control("Layers", groups, key="mv_layers") or groups[0]
    first = groups.index(g) * PER_PAGE
    shown = range(first, min(first + PER_PAGE, L))
else:
    shown = range(L)
grid = model_view_html(w[shown.start:shown.stop], run.labels, first_layer=shown.start, only=only, dom_id="mv-grid")
st.html(f'<div style="overflow-x: auto">{grid}</div>')
# made when clicked (deferred: only the shown layers' weights are held), not on every rerun
csv = deferred_csv(pd.DataFrame, w[shown.start:shown.stop].reshape(-1, T).copy(),
                   columns=[token_label(j, run.labels[j]) for j in range(T)],
                   index=[f"L{l} H{h} q{i}" for l in shown for h in range(H) for i in range(T)])
st.download_button("Download these weights (CSV)", csv, file_name="model_view.csv", mime="text/csv", key="mv_csv",
                   on_click="ignore", icon=":material/download:")

st.subheader("One layer, every head in its own colour")
state.bound("mv_layer", 0)
state.fix("mv_layer", list(range(L)), 0)
layer = st.selectbox("Layer", list(range(L)), key="mv_layer")
show_fig(multi_head_lines(w[layer], run.labels, only=only, title=f"Layer {layer}: {H} heads"), "mv_multi",
         table=deferred(pd.DataFrame, w[layer].reshape(-1, T).copy()),
         alt="All heads of one layer overlaid; click a head in the legend to hide or show it.")
