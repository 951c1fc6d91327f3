"""Model view (BertViz's): every layer × head as a line view, paged for deep models; and one layer's
heads overlaid, one colour per head."""
import numpy as np
import pandas as pd
import streamlit as st

from labels import token_label
from ui import circuits as sink
from ui import state
from ui.runs import current_cfg, current_run
from ui.show import ATTENTION_CODE, deferred, deferred_csv, show_code, show_fig
from viz.model_view import model_view_html, multi_head_lines

PER_PAGE = 6
FULL_MAX_T = 64  # up to this many tokens every token is drawn; longer inputs: a window of WINDOW tokens
WINDOW = 32  # tokens of a window (rows of ~12 px: every name readable, ~70 hover rules instead of 1,000)

st.title("Model view: every head as lines")
show_code(*ATTENTION_CODE, what="the weights the lines are drawn from")
notices = st.container()  # the input's notices, above the controls (the run is asked for below them)
cfg = current_cfg()
L, H = cfg.n_layers, cfg.n_heads
hide = sink.sink_switch()  # the derived view: no lines to the sink, each row renormalised over the rest
if L > PER_PAGE + 2:
    groups = [f"layers {a}–{min(a + PER_PAGE, L) - 1}" for a in range(0, L, PER_PAGE)]
    state.bound("mv_layers", groups[0])
    state.fix("mv_layers", groups, groups[0])
    g = st.segmented_control("Layers", groups, key="mv_layers") or groups[0]
    first = groups.index(g) * PER_PAGE
    shown = range(first, min(first + PER_PAGE, L))
else:
    shown = range(L)
state.bound("mv_layer", 0)
state.fix("mv_layer", list(range(L)), 0)
one = int(st.session_state.get("mv_layer", 0))  # the layer of the section below (its box is drawn there)
with notices:  # the layers drawn only (a partial trace, unless the whole one is cached: ui.runs.get_run)
    run = current_run(layer=range(min(shown.start, one), max(shown.stop, one + 1)))
T = run.T
if hide:
    sink.derived_note(run)


def layer_w(l: int) -> np.ndarray:
    """(H, T, T) weights of layer l as drawn: a view of the trace, or its sink-hidden derived copy
    (made for the layers drawn only: every layer of SmolLM2 at 1,024 tokens would be 1.1 GB)."""
    x = run.trace.layers[l].attn.weights[0]
    return sink.hidden(run, x) if hide else x


st.caption("Each small panel is one head: tokens on the left look at tokens on the right, and a line's strength "
           "grows with the attention weight (weights under 0.05 are not drawn). Hover a token, in the column of "
           "names or on the left half of any panel, to see only its lines in every head; pick one below to keep it.")
if T > FULL_MAX_T:  # long input: a window of tokens, the keys outside it summed into two rows
    state.fix("mv_from", list(range(T - WINDOW + 1)), 0)
    start = st.slider("Window: first token shown", 0, T - WINDOW, key="mv_from",
                      help=f"{T:,} tokens do not fit as lines: {WINDOW} at a time.")
    tokens = range(start, start + WINDOW)
    st.caption(f"Long input ({T:,} tokens): the lines of tokens {tokens.start}–{tokens.stop - 1}. A query's lines to keys "
               "outside the window go to the summed rows (\"Σ 0–…\" before it, \"Σ …\" after it): their weight is the "
               "total weight on those keys, so each query's lines still add up to 1. The CSV holds every weight.")
else:
    tokens = range(T)
opts = [-1] + list(tokens)


def tok_title(i: int) -> str:
    return "every token" if i < 0 else token_label(i, run.labels[i], sep=": ")


# the token, the layer group and the layer are in the URL: a copied link shows this view (issue 33)
state.bound("mv_tok", -1)
state.fix("mv_tok", opts, -1)
state.follow_labels("mv_tok", opts, tok_title)  # a token's label follows the sentence
only = st.selectbox("Show the lines of", opts, key="mv_tok", format_func=tok_title)
only = None if only < 0 else int(only)
grid = model_view_html([layer_w(l) for l in shown], run.labels, first_layer=shown.start, only=only, dom_id="mv-grid",
                       tokens=None if T <= FULL_MAX_T else tokens)
st.caption(":material/swipe: The grid below scrolls sideways inside its box when it is wider than the screen (a phone).")
st.html(f'<div role="region" aria-label="model view grid, scrolls sideways" tabindex="0" style="overflow-x: auto">{grid}</div>')
# made when clicked (deferred: only the drawn tokens' weights in the shown layers are held), not on every rerun
csv = deferred_csv(pd.DataFrame, np.stack([layer_w(l)[:, tokens.start:tokens.stop] for l in shown]).reshape(-1, T),
                   columns=[token_label(j, run.labels[j]) for j in range(T)],
                   index=[f"L{l} H{h} q{i}" for l in shown for h in range(H) for i in tokens])
st.download_button("Download these weights (CSV)", csv, file_name="model_view.csv", mime="text/csv", key="mv_csv",
                   on_click="ignore", icon=":material/download:",
                   help="The drawn tokens' exact weights on every key (no sums), one row per layer, head and query.")

st.subheader("One layer, every head in its own colour")
layer = st.selectbox("Layer", list(range(L)), key="mv_layer")
w = layer_w(layer)  # (H, T, T)
show_fig(multi_head_lines(w, run.labels, only=only, title=f"Layer {layer}: {H} heads",
                          tokens=None if T <= FULL_MAX_T else tokens), "mv_multi",
         table=deferred(pd.DataFrame, w[:, tokens.start:tokens.stop].reshape(-1, T).copy(),
                        index=[f"H{h} q{i}" for h in range(H) for i in tokens]),
         alt="All heads of one layer overlaid; click a head in the legend to hide or show it.")
