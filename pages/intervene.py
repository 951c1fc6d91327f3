"""Intervene: switch attention heads off and see what changes — the prediction, every later
layer's attention, the hidden states — and rank every head by how much the prediction needs it.
Attention rollout across layers at the end."""
import numpy as np
import pandas as pd
import streamlit as st

from classroom.intervene import prediction_change, rollout
from labels import md_escape, token_label, token_labels, visible
from ui import circuits as sink
from ui import intervene as IV
from ui import state
from ui.generate import token_texts
from ui.runs import current_run
from ui.show import deferred, show_code, show_fig
from viz.attention import compare_grid
from viz.charts import bar_compare, matrix_heatmap

EDIT_AUTO_T = 128  # up to this many tokens the row editor's forward passes run on every visit

st.title("Intervene: switch heads off")
show_code("model.intervene.apply_to_heads", "classroom.intervene.head_importance", "classroom.intervene.rollout",
          "classroom.intervene.attention_flow",
          what="ablation, importance, rollout")
st.caption("Heatmaps show where a head looks, not whether it matters. Here a head's output Z_h (its slice of the "
           "input to W_O) is set to zero, or to its mean over the sentence, at every position; the layers after it "
           "recompute. The model itself is never changed: the intervention is an argument of this one forward pass.")
run = current_run()
cfg = run.cfg
L, H, T = cfg.n_layers, cfg.n_heads, run.T
options = [f"L{l} H{h}" for l in range(L) for h in range(H)]
# the chosen heads and the views below are in the URL: a copied link shows the same intervention (issue 33)
state.bound_list("iv_heads")
st.session_state["iv_heads"] = [o for o in st.session_state["iv_heads"] if o in options]
state.bound("iv_mode", "zero")
state.fix("iv_mode", ["zero", "mean"])
c1, c2 = st.columns([3, 1])
picked = c1.multiselect("Heads to switch off", options, key="iv_heads",
                        help="Empty = no intervention. Pick from the list or from the ranking below.")
mode = c2.radio("Replace Z_h by", ["zero", "mean"], key="iv_mode", horizontal=True,
                help="zero: the head adds nothing. mean: it adds its average output at every position "
                     "(keeps the scale of the residual stream, removes what depends on the token).")
heads = tuple((int(o.split()[0][1:]), int(o.split()[1][1:])) for o in picked)
res = IV.compare(run.source, tuple(run.ids), heads, run.causal, mode, _clean=run.trace) if heads else None
labels = run.labels


def tok_title(i: int) -> str:
    return token_label(i, labels[i], sep=": ")


if not heads:
    st.info("No head switched off: pick heads above (or use the ranking below) to see what changes.")
elif res.p_clean is not None:
    st.subheader("The next-token prediction, before and after")
    ch = prediction_change(res.p_clean, res.p_ablated)
    names = token_texts(run.source, ch.ids)  # readable ("·Paris", not "ĠParis")
    show_fig(bar_compare(names, {"before": ch.before, "after": ch.after}, tokens=False, text_format=".2f",
                         yaxis="probability", title=f"After “{visible(labels[-1])}”: top tokens before and after "
                                                   f"switching off {', '.join(picked)}"),
             "iv_topk", table=pd.DataFrame({"token": names, "before": ch.before, "after": ch.after}))
    tb, ta = token_texts(run.source, [ch.top_before, ch.top_after])
    st.markdown(f"Top prediction **{md_escape(tb)}** ({ch.p_top_before:.3f}) → "
                f"**{md_escape(ta)}** ({ch.p_top_after:.3f})" +
                (": the prediction changed." if ch.top_before != ch.top_after else ": the same token."))
else:
    st.info("This model has no output layer (no next-token prediction): see how the hidden states change below.")

if heads:
    first = min(l for l, _ in heads)
    st.subheader("What changes downstream")
    dh = res.hidden_change  # (L, T)
    show_fig(matrix_heatmap(dh, [f"after layer {l}" for l in range(L)], labels, tokens_rows=False, tokens_cols=True,
                            colorscale="Viridis", zmid=None, annotate=dh.size <= 120, fmt=".2f",
                            row_title="layer output", col_title="token", value_name="‖Δh‖",
                            title="‖hidden state after − before‖ per layer and token"),
             "iv_hidden", table=pd.DataFrame(dh, index=[f"layer {l}" for l in range(L)], columns=token_labels(labels, plain=True)),
             alt=f"Rows before layer {first} are zero: an ablation only changes what comes after it.")
    later = list(range(first, L))
    state.bound("iv_layer", later[-1])
    state.fix("iv_layer", later, later[-1])
    c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
    lay = c1.selectbox("Attention maps of layer", later, key="iv_layer",
                       help="Each head before, after, and the difference (after − before).")
    hide = sink.sink_switch(c2)
    w_before, w_after = res.w_clean[lay], res.w_ablated[lay]
    if hide:  # the derived view: both with the sink's columns out and their rows renormalised
        w_before, w_after = sink.hidden(run, w_before), sink.hidden(run, w_after)
        sink.derived_note(run)
    show_fig(compare_grid(w_before, w_after, labels, names=("before", "after"),
                          hidden_keys=sink.sink_keys(run) if hide else None),
             "iv_diff", table=deferred(pd.DataFrame, (res.w_ablated[lay] - res.w_clean[lay]).reshape(H * T, T)),
             alt="Layer by layer the attention of later heads moves once their input changed; the ablated head's own "
                 "weights are unchanged (only its output is replaced).")

st.subheader("Which heads matter? Ablate each one alone")
st.caption("Every head is switched off on its own (" + ("drop in log p of the top prediction at the last position"
           if cfg.output_head else "change of the last layer's output, mean over tokens") + f"); {L * H} heads, in batches.")
state.bound("iv_rank", False)
if st.toggle("Rank every head", key="iv_rank", help="One forward pass per batch of heads."):
    bar = st.progress(0.0, text="Ablating heads…")
    imp = IV.importance(run.source, tuple(run.ids), run.causal, mode, progress=lambda f: bar.progress(f))
    bar.empty()
    score = imp.score
    what = (f"drop in log p(“{visible(token_texts(run.source, [imp.target])[0])}”)" if imp.target is not None
            else "‖Δ final hidden state‖")
    show_fig(matrix_heatmap(score, [f"L{l}" for l in range(L)], [f"H{h}" for h in range(H)], tokens_rows=False,
                            colorscale="RdBu_r", zmid=0.0, annotate=L * H <= 96, fmt=".2f", row_title="layer",
                            col_title="head", value_name="importance", title=f"Importance of each head: {what}",
                            height=max(300, 22 * L + 120)),
             "iv_importance", table=pd.DataFrame(score, index=[f"layer {l}" for l in range(L)], columns=[f"head {h}" for h in range(H)]))
    st.markdown("**Top 10** (click to switch it off above):")
    cols = st.columns(5)
    for n, top in enumerate(imp.top(10)):
        name = f"L{top.layer} H{top.head}"
        cols[n % 5].button(f"{name}: {top.score:.3f}", key=f"iv_top_{n}", width="stretch",
                           on_click=lambda nm=name: st.session_state.__setitem__(
                               "iv_heads", list(dict.fromkeys(st.session_state.get("iv_heads", []) + [nm]))))

st.subheader("Attention rollout and attention flow across layers")
state.bound("iv_how", "rollout")
state.fix("iv_how", ["rollout", "flow"])
how = st.radio("Combine the layers by", ["rollout", "flow"], key="iv_how", horizontal=True,
               help="rollout: multiply the layers' matrices. flow: the maximum flow through the layers' graph.")
st.caption("Abnar & Zuidema (2020): per layer, the heads' attention is averaged and mixed with the residual path, "
           "Â = 0.5·A + 0.5·I (rows renormalised). **Rollout** multiplies the layers: how much each input token flows "
           "into each position's last-layer vector. **Flow** treats each Â as pipe capacities and computes the maximum "
           "flow from an output token to an input token (limited by the narrowest link of each path). Heads are "
           "averaged, so both are rough maps, not proofs.")
if how == "flow" and T > 24:
    st.warning(f"Attention flow solves {T}² max-flow problems: it is offered up to 24 tokens (this sentence has {T}). "
               "Showing rollout instead.")
    how = "rollout"
R = rollout([lt.attn.weights[0] for lt in run.trace.layers]) if how == "rollout" else IV.flow(run.source, tuple(run.ids), run.causal)  # (T, T)
r1, r2 = st.columns([3, 2])
with r1:
    show_fig(matrix_heatmap(R, labels, labels, tokens_cols=True, colorscale="Cividis", zmid=None, zmin=0,
                            zmax=float(R.max()), annotate=T <= 10, row_title="position (last layer)",
                            col_title="input token", value_name="share",
                            title=f"{'Rollout' if how == 'rollout' else 'Attention flow'} over {L} layers ({T} × {T})"),
             "iv_rollout", table=pd.DataFrame(R, index=token_labels(labels, plain=True), columns=token_labels(labels, plain=True)))
with r2:
    state.bound("iv_tok", T - 1)
    state.fix("iv_tok", list(range(T)), T - 1)
    state.follow_labels("iv_tok", list(range(T)), tok_title)  # a token's label follows the sentence
    ti = st.selectbox("Token", list(range(T)), key="iv_tok", format_func=tok_title)
    show_fig(bar_compare(labels, {"share": R[ti]}, yaxis="share of the input", height=320,
                         title=f"What flows into {visible(labels[ti])}"), "iv_rollout_tok",
             table=pd.DataFrame({"share": R[ti]}, index=token_labels(labels, plain=True)))

st.subheader("Edit one attention row")
st.caption("Choose a head and a query token, type the weights you want it to give the keys (any non-negative "
           "numbers: the row is divided by its sum; masked keys must stay 0), and see what the model predicts when "
           "that head looks where you say. The layers after it recompute.")
e1, e2, e3 = st.columns(3)
state.fix("iv_e_layer", list(range(L)), 0)
el = e1.selectbox("Layer", list(range(L)), key="iv_e_layer")
state.fix("iv_e_head", list(range(H)), 0)
eh = e2.selectbox("Head", list(range(H)), key="iv_e_head")
state.fix("iv_e_query", list(range(T)), T - 1)
state.follow_labels("iv_e_query", list(range(T)), tok_title)
eq = e3.selectbox("Query token", list(range(T)), key="iv_e_query", format_func=tok_title)
current = np.asarray(run.trace.layers[el].attn.weights[0, eh, eq], dtype=np.float64)  # (T,)
cols = token_labels(labels, plain=True)
edited = st.data_editor(pd.DataFrame([np.round(current, 4)], columns=cols, index=["weight"]),
                        key=f"iv_e_row_{el}_{eh}_{eq}", width="stretch")
row = edited.iloc[0].to_numpy(dtype=np.float64)
# a long input: the two forward passes run once a weight is changed, not on every visit (SmolLM2 at
# 1,024 tokens: ~4.5 GB and several seconds each)
waiting = T > EDIT_AUTO_T and np.array_equal(row, np.round(current, 4))
res_e = None if waiting else IV.edit(run.source, tuple(run.ids), run.causal, (el, eh, eq, tuple(float(x) for x in row)))
if res_e is None:
    st.caption(f"At {T:,} tokens the edited forward pass runs once you change a weight in the row above.")
elif res_e.error:
    st.error(res_e.error)
elif res_e.p_clean is not None:
    ch = prediction_change(res_e.p_clean, res_e.p_edited)
    names = token_texts(run.source, ch.ids)
    show_fig(bar_compare(names, {"as trained": ch.before, "edited row": ch.after}, tokens=False, text_format=".2f",
                         yaxis="probability", title=f"Next token with layer {el} head {eh}'s row {eq} edited"),
             "iv_edit", table=pd.DataFrame({"token": names, "as trained": ch.before, "edited row": ch.after}))
    st.caption(f"The edited row, renormalised: {', '.join(f'{v:.3f}' for v in res_e.row)}.")
else:
    st.info(f"Largest change of a last-layer vector: {res_e.hidden_change:.4f} (this model has no output layer).")
