"""The same weights and sentence with a causal and a bidirectional mask, side by side."""
import pandas as pd
import streamlit as st

from classroom import causal_vs_bidirectional
from labels import token_label
from ui import circuits as sink
from ui import state
from ui.runs import current_cfg, current_length, current_run, is_long_pass, layer_allowed
from ui.show import download_npz, show_code, show_fig
from ui.sidebar import example_buttons
from viz.attention import GRID_MAX_CELLS, compare_grid, topk_bars
from viz.common import block_note, block_step
from viz.charts import bar_compare

st.title("Causal vs bidirectional")
show_code("model.attention.causal_allowed", "model.attention.masked_softmax", what="the causal mask")
st.markdown(
    "A language model that generates text left to right factorises the probability of a sentence as "
    "$p(x) = \\prod_t p(x_t \\mid x_{<t})$: each token is predicted from the tokens **before** it only. "
    "The causal (look-ahead) mask enforces this inside attention: query $t$ may not attend to keys after $t$. "
    "Remove the mask (bidirectional, as in BERT) and every token sees the whole sentence — good for "
    "understanding text, but the model could then *read* the next token instead of predicting it. "
    "The weights below are the same; only the mask differs.")
example_buttons()
notices = st.container()  # the input's notices, above the controls (the runs are asked for below them)
cfg = current_cfg()
L, H = cfg.n_layers, cfg.n_heads
# A deep model at a long input: the grid needs one layer of each pass, the prediction below needs both
# whole passes (SmolLM2 at 1,024 tokens: 2.4 s each here). Then the grid traces its layer only, and
# the whole passes wait for the reader's click, unless they are cached already.
long_input = is_long_pass(cfg, current_length())  # MiniLM at 512 tokens is not; SmolLM2 at 1,024 is
state.bound("layer", 0)
state.fix("layer", list(range(L)))
state.bound("cmp_head", "all")
head_opts = ["all"] + [str(h) for h in range(H)]
state.fix("cmp_head", head_opts, "all")
c1, c2, c0, c3 = st.columns([1, 1, 1, 2], vertical_alignment="bottom")
layer = c1.selectbox("Layer", list(range(L)), key="layer")
head = c2.selectbox("Head", head_opts, key="cmp_head", format_func=lambda s: "all heads" if s == "all" else f"head {s}")
hide = sink.sink_switch(c0)
with notices:
    causal = current_run(causal=True, layer=layer if long_input else None)
    bidi = current_run(causal=False, notices=False, layer=layer if long_input else None)
with c3:
    d1, d2 = st.columns(2)
    with d1:
        download_npz(causal, key="npz_causal", label="Causal trace (.npz)", file_name="trace_causal.npz")
    with d2:
        download_npz(bidi, key="npz_bidi", label="Bidirectional trace (.npz)", file_name="trace_bidirectional.npz")
heads = list(range(H)) if head == "all" else [int(head)]
wc = causal.trace.layers[layer].attn.weights[0]  # (H, T, T)
wb = bidi.trace.layers[layer].attn.weights[0]
if hide:  # the derived view: both with the sink's columns out and their rows renormalised
    wc, wb = sink.hidden(causal, wc), sink.hidden(bidi, wb)
    sink.derived_note(causal)
st.caption("Per head: causal | bidirectional | bidirectional − causal (red: more attention without the mask, "
           "blue: less). In layer 0 the bidirectional row i equals the causal row i re-spread over more keys; "
           "from layer 1 on, every token's input already differs, because earlier layers saw the future too. "
           + block_note(block_step(causal.T, GRID_MAX_CELLS), causal.T))


def diff_table() -> pd.DataFrame:
    rows = []
    for h in heads:
        for i, q in enumerate(causal.labels):
            for j, k in enumerate(causal.labels):
                rows.append({"layer": layer, "head": h, "query": token_label(i, q), "key": token_label(j, k),
                             "causal": wc[h, i, j], "bidirectional": wb[h, i, j], "difference": wb[h, i, j] - wc[h, i, j]})
    return pd.DataFrame(rows)


show_fig(compare_grid(wc, wb, causal.labels, allowed_a=layer_allowed(causal, layer),
                      allowed_b=layer_allowed(bidi, layer), heads=heads,
                      hidden_keys=sink.sink_keys(causal) if hide else None),
         "compare_grid", table=diff_table, filename=f"causal_vs_bidirectional_layer{layer}",
         alt="Weights share the 0..1 Cividis scale; the difference uses a diverging red-blue scale centred on 0.")

st.subheader("Next-token prediction at the last position")
if not (causal.trace.complete and bidi.trace.complete):
    state.bound("cvb_whole", False)
    if not st.toggle(f"Compare the last position's output (runs both masks through all {L} layers: two whole "
                     f"passes at {causal.T:,} tokens take a few seconds)", key="cvb_whole"):
        st.caption("The grid above traced only the layer it shows. The last position's output needs every layer "
                   "under both masks.")
        state.end_page()
    causal, bidi = current_run(causal=True, notices=False), current_run(causal=False, notices=False)
if causal.trace.probs is None:  # an encoder without an output layer (MiniLM)
    st.info("This model has no output layer, so it predicts no next token; below, how the mask changes what its "
            "last layer produces instead.", icon=":material/info:")
    change = causal_vs_bidirectional.state_change(causal.trace.final[0], bidi.trace.final[0])
    show_fig(bar_compare(causal.labels, {"cosine(causal, bidirectional)": change.cosine},
                         title="Each token's final hidden state: causal vs bidirectional", yaxis="cosine similarity"),
             "final_change", filename="final_state_change",
             table=pd.DataFrame({"token": causal.labels, "cosine": change.cosine, "‖difference‖": change.distance,
                                 "‖causal‖": change.norm_a}))
    st.caption("1 = the same vector both ways. The last token sees the whole sentence under both masks, yet its "
               "vector still changes: from layer 1 on, every other token it reads was computed differently.")
    state.end_page()
pc, pb = causal.trace.probs[0, -1], bidi.trace.probs[0, -1]  # (V,)
rows = causal_vs_bidirectional.topk_change(pc, pb, k=5)
names = [causal.vocab[r.token_id] for r in rows]
last = causal.labels[-1]
show_fig(topk_bars(names, [r.p_a for r in rows], [r.p_b for r in rows],
                   title=f"p(next token | …, {last}) — top 5 of each"), "topk_bars", filename="next_token_top5",
         table=pd.DataFrame({"token": names, "p causal": [r.p_a for r in rows],
                             "p bidirectional": [r.p_b for r in rows], "change": [r.delta for r in rows]}))
tv = causal_vs_bidirectional.total_variation(pc, pb)
st.caption(f"Total variation distance between the two distributions: {tv:.4f}. With one layer the last "
           "position's prediction would be identical (its row already sees every token); with more layers the "
           "earlier positions feed it different vectors. A model trained causally is only meaningful under the causal mask.")
