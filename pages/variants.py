"""Attention variants: one sentence, one seed, one small model per variant, the heads of each side by
side with what the variant changes and why models adopted it; the shuffle test for positions.
The models and the arithmetic: classroom/variants.py (cached in ui/variants.py); figures: viz/variants.py."""
import numpy as np
import pandas as pd
import streamlit as st

from classroom import variants
from classroom.architecture import window_here
from labels import md_escape, token_labels
from ui import state
from ui import variants as var_ui
from ui.runs import current_cfg, current_length
from ui.show import show_fig
from viz.charts import bar_compare
from viz.variants import bias_grid, variant_heads

st.title("Attention variants")
s = var_ui.sentence()
if s is None:
    st.info("Type a sentence in the sidebar to compare the variants on it (the box is empty).", icon=":material/edit:")
    state.end_page()
T = len(s.ids)
causal = st.session_state.get("mask", "causal") == "causal"
b = variants.BASE
if s.text_cut:
    st.warning(f"Your text is longer than {state.MAX_TEXT_CHARS:,} characters; only the start is used.",
               icon=":material/content_cut:")
if s.n_tokens > T:
    st.warning(f"Your text has {s.n_tokens} tokens; the variants show the first {T} (at most {var_ui.MAX_T}, "
               "so that four heads in a row stay readable; fewer when the sidebar's max sequence length is lower).",
               icon=":material/content_cut:")
st.caption(f"The sidebar's sentence with the toy vocabulary ({T:,} tokens), {'causal' if causal else 'bidirectional'} mask (sidebar). Every variant is the same small model "
           f"(d_model {b.d_model}, {b.n_heads} heads, {b.n_layers} layer) with fresh weights from the same seed "
           "— the same W_Q, W_K, W_V, W_O in every model — and one option changed; grouped K/V heads are the mean "
           "of their group's heads. Untrained: the patterns show what each mechanism does, not what a trained "
           "model learns.")
if s.unknown:
    st.caption("Not in the toy vocabulary, computed as `<unk>`: " + ", ".join(md_escape(u) for u in s.unknown[:12]))

for key, default in (("var_window", 3), ("var_kv", 2), ("var_seed", 0), ("var_shuffle", 0)):
    state.bound(key, default)
state.fix("var_kv", [1, 2, 4], 2)
c1, c2, c3, c4 = st.columns(4)
window = c1.number_input("Window w (tokens)", min_value=0, max_value=state.T_LIMIT, step=1, key="var_window",
                         help="Sliding window: query i sees keys j with i − w < j ≤ i (causal) or |i − j| < w.")
n_kv = c2.selectbox("K/V heads (GQA)", [1, 2, 4], key="var_kv",
                    help="Grouped-query attention: the 4 query heads share this many key/value heads "
                         "(1 = multi-query, 4 = multi-head).")
seed = c3.number_input("Weights seed", min_value=0, max_value=9999, step=1, key="var_seed")
shuffle_seed = c4.number_input("Shuffle seed", min_value=0, max_value=9999, step=1, key="var_shuffle")
window, seed, shuffle_seed = int(window), int(seed), int(shuffle_seed)
window_ok = window >= 1
if not window_ok:
    st.error("A window of 0 tokens would leave every query with nothing to attend to. Choose w ≥ 1 "
             "(w = 1: each token sees only itself).", icon=":material/error:")
elif window >= T:
    st.info(f"w = {window} ≥ T = {T} tokens: the window removes nothing here, so the sliding-window heads equal the "
            "sinusoidal ones (the limit case). Choose w < T to see the band.", icon=":material/info:")
win = window if window_ok else None


def weights_table(w: np.ndarray) -> pd.DataFrame:
    """(H, T, T) weights as rows head, query, key, weight (the CSV download)."""
    H, n = w.shape[0], w.shape[1]
    idx = pd.MultiIndex.from_product([range(H), token_labels(s.labels, plain=True), token_labels(s.labels, plain=True)],
                                     names=["head", "query", "key"])
    return pd.DataFrame({"weight": w.reshape(-1)}, index=idx)


def show_variant(key: str) -> None:
    v = variants.BY_KEY[key]
    r = var_ui.variant_heads(key, s, seed, win, n_kv, causal)
    title = v.title
    if key == "window":
        title += f" (w = {window})"
    if key in ("gqa", "mqa", "mha"):
        title += f": {r.kv_heads} K/V head{'s' if r.kv_heads > 1 else ''} for 4 query heads"
    show_fig(variant_heads(r.weights, list(s.labels), allowed=r.allowed, kv_head=r.kv_head, title=title),
             f"varfig_{key}", alt=f"**What it changes:** {v.changes} **Why:** {v.why}",
             table=lambda: weights_table(r.weights))
    if key == "alibi" and r.bias is not None:
        show_fig(bias_grid(r.bias, list(s.labels), r.slopes, allowed=r.allowed,
                           title="ALiBi's bias −slope_h·|i − j|, added to each head's scores"), "var_alibi_bias",
                 alt="The traced bias of each head (attn.bias): 0 on the diagonal, more negative with distance; "
                     "the steepest head (slope 1/4 with 4 heads) is the most local.")


st.subheader("1 · Where positions come from")
for key in variants.POSITION_KEYS:
    show_variant(key)

st.subheader("Shuffle the words")
pos_keys = variants.POSITION_KEYS
if T < 2:
    st.info("One token: there is nothing to shuffle. Type a longer sentence in the sidebar.", icon=":material/info:")
else:
    res = var_ui.shuffle_gaps(pos_keys, s, seed, win, n_kv, shuffle_seed)
    shuffled = " ".join(s.labels[i] for i in res.perm)
    st.markdown(f"Shuffled (seed {shuffle_seed}): **{md_escape(shuffled)}**. Each model reads both orders "
                "without a mask; if it cannot tell them apart, the shuffled weights are the original ones with "
                "rows and columns moved along: W_shuffled = P W Pᵀ. The gap measures how far from that each is.")
    rows = pd.DataFrame({"variant": [variants.BY_KEY[g.key].title for g in res.gaps],
                         "max |W_shuffled − P W Pᵀ|": [g.weight_gap for g in res.gaps],
                         "max |out_shuffled − P out|": [g.output_gap for g in res.gaps]}).set_index("variant")
    gaps = np.maximum(rows.iloc[:, 0].to_numpy(), 1e-9)  # log scale: an exact 0 drawn at 1e-9
    show_fig(bar_compare(list(rows.index), {"max |W_shuffled − P W Pᵀ|": gaps}, tokens=False, log_y=True,
                         title="Shuffle test: does the model notice the new order?", yaxis="max |Δ weight| (log)",
                         text_format=".1e"), "var_shuffle_bars", table=rows,
             alt=f"No positions: max |Δ| = {res.gap('none').weight_gap:.1e}, float rounding: the weights only moved "
                 f"with the words (attention is permutation-equivariant). With sinusoidal positions the gap is "
                 f"{res.gap('sinusoidal').weight_gap:.2f}: the model sees the new order.")
    st.dataframe(rows.style.format("{:.2e}"), width="stretch")

st.subheader("2 · Where a query may look")
if window_ok:
    show_variant("window")
real = current_cfg()
if real.window is not None:  # the model on screen has its own window (Gemma 3): its rule, from its config
    st.info(window_here(real, current_length(), win), icon=":material/width:")
else:
    st.warning("The sliding-window heads are not drawn until the window is at least 1.", icon=":material/warning:")

st.subheader("3 · Sharing keys and values")
st.caption("The cache a model keeps while generating holds every layer's K and V: fewer K/V heads, smaller cache. "
           "Heads that share K/V still differ through their own queries. Bytes per token: the KV-cache calculator page.")
for key in ("mha", "gqa", "mqa"):
    show_variant(key)
st.page_link("pages/kv-cache.py", label="KV-cache calculator: bytes per token for GPT-2 small and SmolLM2",
             icon=":material/memory:")

st.subheader("4 · How a query scores a key")
show_variant("additive")
