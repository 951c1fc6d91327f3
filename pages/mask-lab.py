"""Mask lab: a padded batch, and every mask the model builds, step by step, for one sentence."""
import numpy as np
import pandas as pd
import streamlit as st

from classroom.architecture import window_here
from classroom.mask_lab import mask_steps
from labels import md_escape, token_label
from ui import state
from ui.models import current_source
from ui.runs import get_batch_run, takes_pairs
from ui.show import download_npz, heads_table, matrix_table, show_code, show_fig
from viz.attention import head_grid, head_heatmap, mask_heatmap
from viz.common import NEG_INF

DEFAULTS = ["the cat sat on the mat .", "the keys to the cabinet are on the table .", "a dog ran .",
            "the old man saw the boat on the river ."]

st.title("Mask lab")
show_code("model.attention.causal_allowed", "model.attention.padding_allowed", "model.attention.combine", "model.attention.additive", "model.attention.masked_softmax", what="masks")
st.markdown("Sentences in a batch have different lengths, so the short ones are **padded** to a common "
            "length. Padding must not be attended to, and a causal model must not look ahead: both are "
            "masks, combined and applied to the scores before the softmax.")
s = st.session_state
state.bound("ml_n", 3)
state.fix("ml_n", [2, 3, 4], 3)
n = st.slider("Sentences in the batch", 2, 4, key="ml_n")
texts = []
cols = st.columns(2)
for i in range(n):
    state.bound(f"ml_s{i}", DEFAULTS[i])
    texts.append(cols[i % 2].text_input(f"Sentence {i + 1}", key=f"ml_s{i}"))
empty = [i + 1 for i, t in enumerate(texts) if not t.strip()]
if empty:
    st.info(f"Sentence {', '.join(map(str, empty))} is empty: type some words to include it. "
            "It is left out of the batch meanwhile.", icon=":material/edit:")
batch_texts = tuple(t for t in texts if t.strip())
if len(batch_texts) < 1:
    state.end_page()

state.bound("ml_q", "keys only")
state.fix("ml_q", ["keys only", "keys and queries"])
c1, c2, c3, c4 = st.columns(4)
mask_q = c1.radio("Mask padded …", ["keys only", "keys and queries"], key="ml_q",
                  help="Keys only: padded positions are never attended to, but padded queries still attend "
                       "to real tokens (their outputs are ignored later). Keys and queries: padded query rows "
                       "are fully masked too.") == "keys and queries"
causal = s.get("mask", "causal") == "causal"
source = current_source()
pair = False
if takes_pairs(source) and len(batch_texts) >= 2:  # BERT reads sentence pairs: token types, [SEP] between
    state.bound("ml_pair", False)
    pair = st.toggle("Sentences 1 and 2 as one pair: [CLS] A [SEP] B [SEP], with token types", key="ml_pair",
                     help="How BERT reads two texts at once (question and answer, premise and hypothesis): one "
                          "sequence, a [SEP] between them, and a token-type id (0 for A, 1 for B) whose embedding "
                          "is added to each token's.")
run = get_batch_run(source, batch_texts, causal, mask_q, int(s.get("T", 64)), pair)
row_names = (["sentences 1 + 2 (pair)"] + [f"sentence {i + 3}" for i in range(len(batch_texts) - 2)]
             if run.pair else [f"sentence {i + 1}" for i in range(len(batch_texts))])
B, T, H, L = len(row_names), run.T, run.cfg.n_heads, run.cfg.n_layers
if run.cfg.window is not None:  # a model with sliding-window layers (Gemma 3): its own band, from its config
    st.info(window_here(run.cfg, T), icon=":material/width:")
state.bound("ml_b", 0)
state.fix("ml_b", list(range(B)))
b = c2.selectbox("Sentence", list(range(B)), key="ml_b", format_func=lambda i: row_names[i])
state.bound("ml_head", 0)
state.fix("ml_head", list(range(H)))
h = c3.selectbox("Head", list(range(H)), key="ml_head")
state.bound("layer", 0)
state.fix("layer", list(range(L)))
layer = c4.selectbox("Layer", list(range(L)), key="layer")
c1.caption(f"Look-ahead mask: **{'on (causal)' if causal else 'off (bidirectional)'}** — set in the sidebar.")

cut = [row_names[i] for i in range(B) if run.n_tokens[i] > run.lengths[i]]
if cut:
    st.warning(f"{', '.join(cut).capitalize()}: longer than the max sequence length ({T}); "
               "only the first tokens are used.", icon=":material/content_cut:")

st.subheader("1. The padded batch")
batch_df = pd.DataFrame(run.labels, index=row_names, columns=[str(j) for j in range(T)])
st.dataframe(batch_df, width="stretch")
if run.token_type_ids is not None:
    st.markdown("**Token-type ids** (0 = text A, 1 = text B; the model adds a learned vector for each):")
    st.dataframe(pd.DataFrame(run.token_type_ids, index=row_names, columns=[str(j) for j in range(T)]),
                 width="stretch")
st.caption(f"B = {B} sentences, padded on the right to T = {T} tokens (lengths {run.lengths}). "
           "Token ids: " + "; ".join(" ".join(map(str, r)) for r in run.ids.tolist()))

steps = mask_steps(run.key_padding_mask, b, causal=causal, mask_queries=mask_q)
lab = run.labels[b]


# One caption per chart (its alt text, specific to it) and one CSV for the whole page at the bottom:
# twelve identical "CSV of these numbers" buttons and captions made the page ~6,000 px tall (issue 21,
# point 12). Every matrix drawn here goes into `tables` for that CSV.
tables: dict[str, pd.DataFrame] = {}


def chart(fig, key: str, alt: str, table: pd.DataFrame) -> None:
    """show_fig (PNG/SVG camera, presentation fonts, alt caption) without its own CSV button: the
    page's one CSV holds this chart's numbers."""
    show_fig(fig, key, alt=alt, csv=False)
    tables[key] = table


st.subheader(f"2. Masks for {row_names[b]}")
state.bound("ml_form", "1 / 0")
state.fix("ml_form", ["1 / 0", "0 / −∞"])
form = st.radio("Show the masks as", ["1 / 0", "0 / −∞"], key="ml_form", horizontal=True,
                format_func=lambda f: {"1 / 0": "1 / 0 (multiply the weights)",
                                       "0 / −∞": f"0 / {NEG_INF} (add to the scores)"}[f],
                help="The same masks in their two forms: 1 keeps, 0 removes (multiplicative); 0 keeps, −∞ removes "
                     "(additive, what the model adds to the scores before the softmax).")
additive = form != "1 / 0"
pick = (lambda m01, madd: madd) if additive else (lambda m01, madd: m01)
how = f"as 0 / {NEG_INF} (add to the scores)" if additive else "as 1 / 0 (multiply)"
chart(mask_heatmap(pick(steps.pad_1d[None, :], steps.pad_1d_add[None, :]), ["key allowed"], lab, additive=additive,
                   title=f"Padding mask, 1-D, one entry per key, {how}", height=150),
      "pad1d", "One entry per key: " + ("0 for a real token, −∞ for padding." if additive
                                        else "1 for a real token, 0 for padding."),
      matrix_table(pick(steps.pad_1d[None, :], steps.pad_1d_add[None, :]), ["key allowed"], lab))
# three side by side while the cells stay readable; one per row on longer sentences
m1, m2, m3 = st.columns(3) if T <= 14 else (st.container(), st.container(), st.container())
angle = -90 if T <= 14 else -60  # narrow panels: upright key labels fit one per column
with m1:
    chart(mask_heatmap(pick(steps.pad_2d, steps.pad_2d_add), lab, lab, additive=additive, tickangle=angle,
                       title=f"Padding, 2-D {how.split(' (')[0]}"), "pad2d",
          "Every query row gets the same key mask" + (", and padded query rows are masked too." if mask_q else "."),
          matrix_table(pick(steps.pad_2d, steps.pad_2d_add), lab, lab))
with m2:
    chart(mask_heatmap(pick(steps.look_ahead, steps.look_ahead_add), lab, lab, additive=additive, tickangle=angle,
                       title=f"Look-ahead {how.split(' (')[0]}" + ("" if causal else " (off)")), "lookahead",
          "Causal: query i may attend to keys j ≤ i." if causal else "Bidirectional: every query may attend to every key.",
          matrix_table(pick(steps.look_ahead, steps.look_ahead_add), lab, lab))
with m3:
    chart(mask_heatmap(pick(steps.combined, steps.combined_add), lab, lab, additive=additive, tickangle=angle,
                       title=f"Combined {how.split(' (')[0]}"), "combined",
          "Padding × look-ahead, cell by cell (in the additive form: their sum).",
          matrix_table(pick(steps.combined, steps.combined_add), lab, lab))

st.subheader(f"3. Scores → masked scores → softmax ({row_names[b]}, layer {layer}, head {h})")
attn = run.trace.layers[layer].attn  # AttentionTrace (numpy, B sentences)
scaled = attn.scaled[b, h]  # (T, T)
masked = attn.masked[b, h]  # (T, T)
weights = attn.weights[b, h]  # (T, T)
allowed = np.broadcast_to(attn.allowed, attn.weights.shape)[b, h]  # (T, T)
fully = attn.fully_masked[b, 0 if attn.fully_masked.shape[1] == 1 else h]  # (T,)
# two per row: wide enough on a projector for the "−∞" written in the masked cells
c1, c2 = st.columns(2)
c3, c4 = st.columns(2)
with c1:
    chart(head_heatmap(scaled, lab, title="raw scores q·k / √d_k", zmin=None, zmax=None,
                       colorscale="Viridis", value_name="score"), "ml_scores",
          "Every query–key pair, before any mask.", matrix_table(scaled, lab, lab))
with c2:
    text = np.where(np.isfinite(masked), "", NEG_INF)
    chart(head_heatmap(np.where(np.isfinite(masked), masked, np.nan), lab, allowed=np.isfinite(masked),
                       title="masked scores (+ combined mask)", zmin=None, zmax=None, colorscale="Viridis",
                       value_name="score", cell_text=text), "ml_masked",
          f"The combined mask added: grey cells hold {NEG_INF}.", matrix_table(masked, lab, lab))
with c3:
    shown = allowed | fully[:, None]  # fully masked rows are all zeros: show them as 0, not grey
    chart(head_heatmap(weights, lab, allowed=shown, title="softmax (attention weights)"), "ml_weights",
          "Each row's weights: masked keys get exactly 0.", matrix_table(weights, lab, lab))
with c4:
    st.markdown("**How to read these three**")
    st.caption("Raw scores: every query-key pair, before any mask. Masked scores: the combined mask added "
               f"(0 keeps a score, {NEG_INF} removes it; grey cells hold {NEG_INF}). Softmax: each row's "
               f"weights; e^({NEG_INF}) = 0, so masked keys get exactly 0 and every live row sums to 1.")
    if fully.any():
        rows = ", ".join(token_label(i, md_escape(lab[i])) for i in np.nonzero(fully)[0])
        st.warning(f"Fully masked query rows: {rows}. Every key in these rows is {NEG_INF}, and softmax of a row of "
                   f"only {NEG_INF} would be 0/0 = NaN. The model detects such rows (`fully_masked`) and sets their "
                   "weights to all zeros instead, so the padded position's output is just the bias — never NaN.",
                   icon=":material/block:")
    else:
        st.caption("No query row is fully masked" + ("" if mask_q else
                   " (padded queries still see the real tokens; choose 'keys and queries' to mask their rows)") + ".")


st.subheader("4. The same mask is applied to every head")
all_w = attn.weights[b]  # (H, T, T)
st.caption(f"The mask has shape {tuple(attn.allowed.shape)} = (batch, 1, query, key): the head "
           f"axis has size 1 and is broadcast to all {H} heads, so the grey cells are the same in every panel; "
           "only the weights on the allowed cells differ.")
chart(head_grid(all_w, lab, allowed=np.broadcast_to(allowed, all_w.shape) | fully[None, :, None],
                title=f"{row_names[b].capitalize()}, layer {layer}: all heads"), "ml_heads",
      f"One panel per head: the grey (masked) cells are the same in all {H}.",
      heads_table(all_w, lab, layer))

st.divider()
d1, d2 = st.columns(2)
with d1:
    st.download_button("CSV of every matrix on this page", lambda: pd.concat(
        {k: (t.stack().rename("value").reset_index() if "weight" not in t.columns else t)
         for k, t in tables.items()}, names=["chart"]).to_csv().encode("utf-8"),
        file_name="mask_lab.csv", mime="text/csv", key="ml_csv", on_click="ignore", icon=":material/download:",
        help="One long table: chart, row, column, value, for each chart above.")
with d2:
    download_npz(run, key="npz_batch", label="Whole batch trace (.npz)", file_name="attention_lab_batch_trace.npz")
