"""Why this token? Each part's share of one logit (direct logit attribution), a head's attention
beside its value-weighted attention, and activation patching of a clean and a corrupted prompt
(residual stream and heads), run in the background with a progress bar and a cancel button."""
import time

import numpy as np
import pandas as pd
import streamlit as st

from classroom.lesson import head_share_question
from labels import md_escape, token_labels
from ui import attribution as A
from ui import state
from ui.generate import token_texts
from ui.lesson import question as lesson_question
from ui.models import current_source, get_model
from ui.runs import finite_or_stop
from ui.show import show_code, show_fig
from viz.attention import head_heatmap
from viz.attribution import patch_map, share_bars
from viz.circuits import layer_head_map

s = st.session_state
st.title("Why this token?")
st.caption("The attention maps show where each head looks. Here the question is which parts of the model wrote the "
           "prediction: each head's and each MLP's share of the next token's logit, and which positions and heads "
           "carry the difference between two prompts (activation patching).")
show_code("classroom.attribution.logit_attribution", "classroom.attribution.value_weighted_attention",
          "classroom.attribution.patch_residual", "classroom.attribution.patch_heads",
          what="logit attribution, value-weighted attention and patching")
source = current_source()
model, tok = get_model(source)
cfg = model.cfg
L, H = cfg.n_layers, cfg.n_heads
if not cfg.output_head:
    st.info("This model has no output layer: " + md_escape(A.attribution.NO_OUTPUT.split(": ", 1)[1]) + ". "
            f"Its {L} layers end at hidden states of {cfg.d_model} numbers per token, with no next-token logit to "
            "split or to patch. Pick SmolLM2 or causal-lm in the sidebar.", icon=":material/info:")
    state.end_page()

# ------------------------------------------------------------------------------------------- prompts
names = list(A.PAIRS)
state.bound("attr_pair", names[0])
state.fix("attr_pair", names + [A.CUSTOM], names[0])
state.bound("attr_clean", A.PAIRS[names[0]][0])
state.bound("attr_corrupt", A.PAIRS[names[0]][1])


def _use_pair() -> None:
    pair = A.PAIRS.get(s["attr_pair"])
    if pair is not None:
        s["attr_clean"], s["attr_corrupt"] = pair[0], pair[1]


pick = st.selectbox("Ready pair", names + [A.CUSTOM], key="attr_pair", on_change=_use_pair,
                    help="A clean prompt and a corrupted one that differ in the word the answer depends on.")
if pick in A.PAIRS:
    st.caption(md_escape(A.PAIRS[pick][2]))
c1, c2 = st.columns(2)
clean_text = c1.text_input("Clean prompt", key="attr_clean", max_chars=400)
corrupt_text = c2.text_input("Corrupted prompt", key="attr_corrupt", max_chars=400,
                             help="The same number of tokens as the clean prompt; change the word the answer depends on.")
if not clean_text.strip():
    st.info("Type a clean prompt above.", icon=":material/edit:")
    state.end_page()
run = finite_or_stop(A.prompt_run(source, clean_text))
labels = run.labels
if run.unknown:
    st.caption("Words this model's vocabulary does not know (read as " + md_escape(run.unk_token) + "): "
               + md_escape(", ".join(dict.fromkeys(run.unknown))) + ".")

# ------------------------------------------------------------------------------------ target & foil
cand, probs = A.top_candidates(run)
corrupt_run = finite_or_stop(A.prompt_run(source, corrupt_text)) if corrupt_text.strip() else None
alt = A.top_candidates(corrupt_run)[0][0] if corrupt_run is not None else cand[1]
state.bound("attr_target", cand[0])
state.bound("attr_foil", alt if alt != cand[0] else cand[1])
opts = list(dict.fromkeys(cand + [alt]))
for key in ("attr_target", "attr_foil"):
    v = s.get(key)
    if isinstance(v, int) and 0 <= v < cfg.vocab_size and v not in opts:
        opts.append(v)  # a token from a link, outside the top candidates
state.fix("attr_target", opts, cand[0])
state.fix("attr_foil", opts, alt if alt != cand[0] else cand[1])
shown = dict(zip(opts, token_texts(source, opts)))
p_of = dict(zip(cand, probs))


def _tok(i: int) -> str:
    return f"{shown[i]}" + (f" ({p_of[i]:.1%})" if i in p_of else "")


state.follow_labels("attr_target", opts, _tok)
state.follow_labels("attr_foil", opts, _tok)
t1, t2 = st.columns(2)
target = t1.selectbox("Target (the token to explain)", opts, key="attr_target", format_func=_tok,
                      help="The model's top candidates for the next token after the clean prompt; the first is its prediction.")
foil = t2.selectbox("Foil (the alternative)", opts, key="attr_foil", format_func=_tok,
                    help="For patching: the metric is logit(target) − logit(foil). By default the corrupted prompt's "
                         "top token.")
tname, fname = md_escape(shown[target]), md_escape(shown[foil])

# ---------------------------------------------------------------------------------- logit attribution
st.header("Who wrote the logit")
why = A.why_not(source)
norm_words = ("RMSNorm" if cfg.norm_kind == "rmsnorm" else "LayerNorm") + (" with a (1 + w) scale" if cfg.norm_unit_offset else "")
if why:
    st.info(f"Shares are not available for this model: {md_escape(why)}. Activation patching below still works.",
            icon=":material/info:")
else:
    att = A.shares(source, clean_text, int(target))
    st.markdown(f"The logit of **{tname}** after the clean prompt is **{att.logit:.2f}**"
                + (f" (before the soft-cap at {cfg.final_softcap:g})" if cfg.final_softcap else "") + ". "
                f"This model adds everything into one residual stream: the embedding, then {L} layers each adding "
                f"{H} heads' outputs and an MLP's. The final {norm_words} rescales that sum, and the output row of "
                f"{tname} reads it. With the norm's scale frozen at this token, each part's share is its vector read "
                f"the same way, and the shares add up to the logit: {att.embed:.2f} (embedding) + "
                f"{att.heads.sum():.2f} (heads) + {att.mlps.sum():.2f} (MLPs) + {att.other:.2f} (biases and norm "
                f"shifts) = {att.embed + att.heads.sum() + att.mlps.sum() + att.other:.2f}."
                + (" Each sub-layer's own output norm (Gemma 2) is read the same way, its scale frozen at its input."
                   if cfg.has_sandwich else ""))
    with st.expander("Question for the class", icon=":material/psychology_alt:"):
        lesson_question(head_share_question(att.heads, tok.decode([int(target)]).strip() or shown[target]),
                        key=f"attr_q_{target}")
    rows = A.head_shares_rows(att, 10)
    show_fig(share_bars([r[0] for r in rows], [r[1] for r in rows],
                        title=f"Shares of the logit of “{shown[target]}”"),
             "attr_shares", table=pd.DataFrame(rows, columns=["part", "share"]),
             alt="The embedding, every MLP, the 10 heads with the largest shares, then the rest. Vermillion bars "
                 "raise the logit, blue bars lower it; the bars add up to the logit.")
    top_l, top_h = np.unravel_index(int(np.argmax(att.heads)), att.heads.shape)
    show_fig(layer_head_map(att.heads, diverging=True, highlight=[(int(top_l), int(top_h))],
                            title=f"Each head's share ({L} × {H})",
                            value_name="share"),
             "attr_heads_map", table=pd.DataFrame(att.heads, index=[f"layer {l}" for l in range(L)],
                                                  columns=[f"head {h}" for h in range(H)]),
             alt="Layers down, heads across; the largest share outlined. Red heads push the target up, blue heads "
                 "push it down.")

    st.subheader("One head: where it looks, and what it moves")
    head_opts = [f"L{l} H{h}" for l in range(L) for h in range(H)]
    state.bound("attr_head", f"L{top_l} H{top_h}")
    state.fix("attr_head", head_opts, f"L{top_l} H{top_h}")
    top = [head_opts[int(i)] for i in np.argsort(-np.abs(att.heads), axis=None)[:6]]  # the largest shares, in size
    st.session_state["attr_pick"] = st.session_state.get("attr_head") if st.session_state.get("attr_head") in top else None
    st.pills("Click a head (the largest shares, in size)", top, key="attr_pick", on_change=A.pick_head,
             format_func=A.head_words)
    hs = st.selectbox("Head", head_opts, key="attr_head",
                      format_func=lambda o: f"{o} · share {att.heads[int(o.split()[0][1:]), int(o.split()[1][1:])]:+.2f}",
                      help="Opens with the head whose share is largest (outlined on the map).")
    hl, hh = int(hs.split()[0][1:]), int(hs.split()[1][1:])
    w = np.asarray(run.trace.layers[hl].attn.weights[0, hh])  # (T, T)
    vw = A.value_weighted(source, clean_text, hl)[hh]  # (T, T)
    a1, a2 = st.columns(2)
    with a1:
        show_fig(head_heatmap(w, labels, title=f"{hs}: attention weights"), "attr_head_w",
                 table=pd.DataFrame(w, index=token_labels(labels, plain=True), columns=token_labels(labels, plain=True)),
                 alt="What the softmax gave each key (rows sum to 1).")
    with a2:
        show_fig(head_heatmap(vw, labels, zmin=0.0, zmax=None, colorscale="Viridis", value_name="‖moved‖",
                              title=f"{hs}: weighted by what it moves"), "attr_head_vw",
                 table=pd.DataFrame(vw, index=token_labels(labels, plain=True), columns=token_labels(labels, plain=True)),
                 alt="Each weight times the size of the vector the head writes from that key, ‖v_j W_O‖: a heavy weight "
                     "on a key whose value is tiny moves almost nothing (Kobayashi et al. 2020).")

# ------------------------------------------------------------------------------------------ patching
st.header("Activation patching")
st.markdown(f"Run the **corrupted** prompt, but copy one piece of the **clean** run into it: the residual stream "
            f"entering one layer at one position, or one head's output. The measure is logit({tname}) − "
            f"logit({fname}) at the last position; it is scaled so that the clean run scores **1** and the corrupted "
            "run **0**. A cell near 1 carries what the clean prompt needed there; 0 means it does not matter.")
if corrupt_run is None:
    st.info("Type a corrupted prompt above.", icon=":material/edit:")
    state.end_page()
if corrupt_run.T != run.T:
    st.warning(f"The two prompts must have the same number of tokens (the clean one has {run.T}, the corrupted one "
               f"{corrupt_run.T}): patching copies position t to position t. Change one word for a word that is one "
               "token too (another name, another city), and keep the rest the same.", icon=":material/straighten:")
    state.end_page()
key = A.patch_key(source, run.ids, corrupt_run.ids, int(target), int(foil))
job = A.registry().start(key, A.session_id(), source, list(run.ids), list(corrupt_run.ids), int(target), int(foil))
if isinstance(job, str):
    st.warning(md_escape(job), icon=":material/hourglass_top:")
    st.button("Try again", key="attr_retry", icon=":material/refresh:")
    state.end_page()
running = job.status == "running"


@st.fragment(run_every=0.5 if running else None)
def progress() -> None:
    j = A.registry().get(key)
    if j is None:
        return
    if running and j.status != "running":
        st.rerun()  # finished: a full run draws the maps
    if j.status == "running":
        st.progress(min(1.0, j.fraction), text=f"Patching the {j.stage}: {j.fraction:.0%} · "
                                               f"{time.time() - j.started:.0f} s")
        if j.owner == A.session_id():
            st.button("Cancel", key="attr_cancel", on_click=A.cancel, args=(key,), icon=":material/stop:")


progress()
if job.status == "cancelled":
    st.info("Patching was cancelled.", icon=":material/stop:")
    st.button("Run it again", key="attr_again", icon=":material/play_arrow:")
elif job.status == "error":
    st.warning(md_escape(job.error or "") + " — a corrupted prompt works when the model answers it differently: the "
               "target should win on the clean prompt and the foil on the corrupted one.", icon=":material/warning:")
elif job.status == "done":
    res, heads = job.residual, job.heads
    st.caption(f"Metric: clean {res.clean_metric:+.2f}, corrupted {res.corrupt_metric:+.2f}.")
    show_fig(patch_map(res.effect, labels, title="Residual stream patched (layer × position)"),
             "attr_patch_resid", table=pd.DataFrame(res.effect, index=[f"layer {l}" for l in range(L)],
                                                     columns=token_labels(labels, plain=True)),
             alt="The stream entering one layer at one position, copied from the clean run. Layers down, positions "
                 "across. Positions before the first token that differs score 0 exactly: "
                 "with a causal mask nothing there has seen the difference.")
    show_fig(layer_head_map(heads.effect, diverging=True, title=f"Heads patched ({L} × {H})",
                            value_name="restored"),
             "attr_patch_heads", table=pd.DataFrame(heads.effect, index=[f"layer {l}" for l in range(L)],
                                                    columns=[f"head {h}" for h in range(H)]),
             alt="Each head's output (before W_O) copied from the clean run alone; the rest stays corrupted.")
