"""Encoder–decoder: a trained toy translator (English -> Kalo) and its cross-attention.

Numbers: training.translation.translate (greedy decoding, every step traced) via ui.encoder_decoder;
figures: viz.encoder_decoder and viz.attention. This script only lays them out.
"""
import pandas as pd
import streamlit as st

from labels import md_escape, token_labels
from ui import encoder_decoder as ed
from ui import state
from ui.show import matrix_table, show_code, show_fig
from viz.attention import mask_heatmap
from viz.charts import line_chart
from viz.encoder_decoder import (
    alignment_beside,
    alignment_links,
    cross_attention_grid,
    step_bars,
    step_labels,
    three_attentions,
)

st.title("Encoder–decoder: cross-attention")
show_code("model.seq2seq.DecoderBlock.forward", what="cross-attention")
st.markdown(
    "A translator reads the whole source sentence with an **encoder** (bidirectional self-attention) and "
    "writes the translation word by word with a **decoder** (causal self-attention). In between sits "
    "**cross-attention**: the *queries* come from the decoder (the words written so far), the *keys and "
    "values* from the encoder's output. Each new word can therefore look up the source words it needs. "
    "The model here was trained on a toy task: English → *Kalo*, a made-up language with the same words "
    "in a different order (noun before adjective before article, verb at the end), so the correct "
    "source word of every output word is known.")
st.caption("The idea is older than the Transformer: an RNN translator kept one vector per source word (its "
           "annotations h_j) and gave each output word i its own context vector c_i = Σ_j α_ij h_j "
           "(Bahdanau et al., 2015: the context vector is the attention-weighted sum of the encoder states). Cross-attention below is the same sum over the encoder's "
           "outputs, with dot-product scores, per head.")
st.page_link("pages/calculator.py", label="Work c_i = Σ α_ij h_j out by hand in the calculator",
             icon=":material/calculate:", query_params={"preset": "context-vector"})
st.caption("A **decoder-only** model (GPT-2, SmolLM2, this app's causal LMs) keeps this decoder's masked "
           "self-attention and FFN but **drops the cross-attention**: with no encoder, its queries have nothing else "
           "to read. The whole-model page draws where that sublayer would sit.")

s2s, tok, scores = ed.get_translator()
cfg = s2s.cfg
L, H = cfg.n_layers, cfg.n_heads

state.bound("s2s_text", ed.DEFAULT_SENTENCE, lambda raw: raw[: ed.MAX_CHARS])
text = st.text_input("English sentence (this page's own input; the sidebar drives the other pages)",
                     key="s2s_text", max_chars=ed.MAX_CHARS,
                     help="Words of the toy vocabulary (below), e.g. “a happy child finds the red ball near "
                          "a tall tree .” Other words become <unk>.")
with st.expander("The toy vocabulary and grammar"):
    st.markdown("Sentence: *subject* **verb** *object* [**preposition** *place*] [.], each noun phrase = "
                "article, up to two adjectives, noun. Kalo order: subject [place postposition] object verb .")
    vocab = ed.vocabulary_table()
    st.dataframe(vocab, hide_index=True, width="stretch", height=300)

if not str(text).strip():
    st.info("Type an English sentence to translate, for example “the big dog sees a small cat .”",
            icon=":material/edit:")
    state.end_page()
try:
    r = ed.get_translation(str(text))
except ValueError as e:  # translate() explains what is wrong with the input
    st.info(md_escape(str(e)), icon=":material/edit:")
    state.end_page()
ed.input_notices(r)
produced = [s.token for s in r.steps]  # one per decoder row
ref = ed.reference(r.src_tokens, produced)

# ----------------------------------------------------------------------------- the translation
out = " ".join(md_escape(w) for w in r.tgt_tokens) or "(nothing)"
st.markdown(f"#### Translation: {out}")
if ref.words is not None:
    same = r.tgt_tokens == ref.words
    st.caption(("Equals the reference translation. " if same else
                f"The reference translation is: {' '.join(md_escape(w) for w in ref.words)}. ") +
               "The model only learned it from 20,000 example pairs; nobody told it the word order.")
else:
    st.caption(f"No reference translation for this sentence: {md_escape(ref.reason)}.")

layers = list(range(L))
head_opts = ["avg"] + [str(h) for h in range(H)]
state.bound("s2s_layer", L - 1)
state.fix("s2s_layer", layers, L - 1)
state.bound("s2s_head", "avg")
state.fix("s2s_head", head_opts, "avg")
c1, c2 = st.columns(2)
layer = c1.selectbox("Decoder layer", layers, key="s2s_layer")
head_key = c2.selectbox("Head", head_opts, key="s2s_head",
                        format_func=lambda s: "average of the heads" if s == "avg" else f"head {s}")
head = None if head_key == "avg" else int(head_key)
which = "the average of the heads" if head is None else f"head {head}"
cross_attn = r.trace.decoder.layers[layer].cross_attn  # AttentionTrace (numpy, B = 1)

# ----------------------------------------------------------------------------- step by step
st.subheader("Step by step")
n_steps = len(r.steps)
step = state.step_slider("s2s_step", n_steps, "Step",
                         help="Each step the decoder reads <bos> and the words written so far and writes one more.")
st_ = r.steps[step - 1]
so_far = [md_escape(w) for w in r.dec_labels[1:step]]
new = md_escape(st_.token)
st.markdown(f"#### {' '.join(so_far)} **:orange[{new}]**")
w_step = ed.step_weights(st_, layer, head)  # (T_src,)
gold = ref.gold[step - 1]
s1, s2 = st.columns([2, 1])
with s1:
    show_fig(step_bars(w_step, r.src_labels, gold=gold,
                       title=f"Step {step}: “{st_.token}” attended to … (layer {layer}, {which})"),
             "s2s_step_bars", filename=f"cross_attention_step{step}",
             table=lambda: pd.DataFrame({"source word": token_labels(r.src_labels, plain=True),
                                         "weight": w_step}).set_index("source word"),
             alt="Bars: the cross-attention weights of the new word over the source words (they sum to 1). "
                 "Orange = attended most; a vermillion outline marks the reference source word.")
with s2:
    top_j = ed.argmax(w_step)
    st.markdown(f"Attended most: **{md_escape(r.src_labels[top_j])}** ({w_step[top_j]:.2f})  \n"
                + ("Reference source word: " + (f"**{md_escape(r.src_labels[gold])}**" if gold is not None
                                                  else "not known for this step")))
    st.caption(f"Probability of “{md_escape(st_.token)}”: {st_.prob:.3f}. The five most likely words:")
    st.dataframe(pd.DataFrame(st_.top, columns=["word", "probability"]).round(4), hide_index=True,
                 width="stretch")

# ----------------------------------------------------------------------------- alignment
st.subheader("Which source word did each output word look at?")
cross = ed.head_weights(cross_attn, head)  # (T_dec, T_src)
show_fig(alignment_links(cross, r.src_labels, produced, gold=ref.gold,
                         title=f"Cross-attention of layer {layer}, {which} (lines with weight ≥ 0.2)"),
         "s2s_links", filename="alignment_links", table=lambda: matrix_table(cross, produced, r.src_labels),
         alt="Source words on top, output words below. Blue lines: cross-attention (thicker = more). "
             "Dashed vermillion: the reference alignment. The lines cross because Kalo reorders the words.")
hits, n = ed.alignment_hits(cross, ref.gold)
if n:
    st.markdown(f"This sentence: the argmax of {which} in layer {layer} points to the reference source word "
                f"for **{hits} of {n}** output words.")
align_rows = ed.alignment_rows(r, ref, layer, head)
st.dataframe(align_rows, width="stretch", height=min(640, 35 * (len(align_rows) + 1) + 3))  # every row visible

# ----------------------------------------------------------------------------- three attentions
st.subheader(f"Three attentions of layer {layer}, {which}")
st.caption("Encoder self-attention: every source word sees every source word (no mask). Decoder "
           "self-attention: causal, a word sees only the words before it (grey = masked). Cross-attention: "
           "every output step sees every source word. Rows are queries; decoder rows are labelled "
           "“input→word it produced”, on the cross-attention: the decoder self-attention beside it has the same rows.")
rows = step_labels(r.dec_labels, produced)
panels = [  # (title, file name, row labels, column labels)
    ("Encoder self-attn (bidirectional)", f"encoder.layers.{layer}.attn", r.src_labels, r.src_labels),
    ("Cross-attention (dec → enc)", f"decoder.layers.{layer}.cross_attn", rows, r.src_labels),
    ("Decoder self-attn (causal)", f"decoder.layers.{layer}.self_attn", r.dec_labels, r.dec_labels),
]
attns = [r.trace.encoder.layers[layer].attn, cross_attn, r.trace.decoder.layers[layer].self_attn]
allowed = [ed.allowed_matrix(a) for a in attns]
weights = [ed.head_weights(a, head) for a in attns]
show_fig(three_attentions([(t, w, y, x, a) for (t, _, y, x), w, a in zip(panels, weights, allowed)], gold=ref.gold,
                          shared_rows=[2]),  # the decoder's positions: read off the cross-attention's rows
         "s2s_three", filename=f"three_attentions_layer{layer}",
         table=lambda: pd.concat({t: matrix_table(w, y, x).stack() for (t, _, y, x), w in zip(panels, weights)}
                                 ).rename("weight").to_frame(),
         alt="Left: encoder self-attention (T_enc × T_enc), middle: cross-attention (T_dec × T_enc), right: "
             "decoder self-attention (T_dec × T_dec); one 0..1 scale, grey = masked. Open squares: the "
             "reference alignment.")
cols = st.columns(3)
for i, ((title, name, ylab, xlab), a) in enumerate(zip(panels, allowed)):
    with cols[i]:
        show_fig(mask_heatmap(a.astype(float), ylab, xlab, title=f"mask: {title.split(' (')[0].lower()}",
                              height=380), f"s2s_mask_{i}", filename=name.replace(".", "_") + "_mask")

# ----------------------------------------------------------------------------- every head
st.subheader(f"Cross-attention, every head of layer {layer}")
wl = cross_attn.weights[0]  # (H, T_dec, T_src)
show_fig(cross_attention_grid(wl, rows, r.src_labels, allowed=ed.allowed_matrix(cross_attn), gold=ref.gold),
         "s2s_cross_grid", filename=f"cross_attention_layer{layer}",
         table=lambda: ed.cross_table(wl, rows, r.src_labels, layer),
         alt=f"{H} heatmaps (T_target × T_source = {wl.shape[1]} × {wl.shape[2]}), one per head, one 0..1 scale. "
             "Open squares: the reference alignment (when known).")

# ----------------------------------------------------------------------------- shapes
st.subheader("Shapes")
st.caption(f"Cross-attention of layer {layer} for this sentence: T_dec = {wl.shape[1]} decoder positions "
           f"(<bos> + words written), T_enc = {wl.shape[2]} source words, d_model = {cfg.d_model}, "
           f"h = {H} heads, d_k = d_v = {cfg.d_k}.")
st.dataframe(ed.shapes_table(r, layer), width="stretch")

# ----------------------------------------------------------------------------- accuracy
st.subheader("How good is the shipped model?")
if scores is not None:
    al = scores.alignment
    m1, m2, m3 = st.columns(3)
    m1.metric("Exact match (held-out sentences)", f"{scores.exact_match:.1%}",
              help=f"{scores.n_heldout} sentences never seen in training, greedy decoding.")
    m2.metric(f"Alignment: best head (layer {al.layer}, head {al.best_head})",
              f"{al.best_head_acc:.1%}",
              help=f"The head was chosen on the {al.best_head_chosen_on}, scored on held-out sentences.")
    m3.metric(f"Alignment: average of the heads (layer {al.layer})", f"{al.head_average_acc:.1%}")
    st.caption(f"Alignment accuracy: for each of {al.n_target_words:,} held-out target words, does the "
               "argmax of the cross-attention row that produced it point to its source word? "
               "(Teacher-forced on the reference; training/translation.py `evaluate`.) Per head:")
    per = pd.DataFrame(al.per_head_acc, index=[f"layer {i}" for i in range(L)],
                       columns=[f"head {h}" for h in range(H)])
    st.dataframe(per.style.format("{:.1%}"), width="stretch")
else:
    st.info("The translator checkpoint carries no evaluation numbers (run python -m training.translation --train).")

# ----------------------------------------------------------------------------- the RNN before it
st.subheader("Before transformers: an RNN with additive attention")
st.markdown(
    "The first neural translators squeezed the whole source sentence into **one fixed-length vector** (the "
    "encoder RNN's last state) and decoded the translation from it: a bottleneck, and the notes show its cost "
    "(the longer the sentence, the lower the BLEU score). Bahdanau et al. kept one annotation h_j per source "
    "word and gave each output word i its **own context vector** c_i = Σ_j α_ij h_j, with weights from a small "
    "network: e_ij = vᵀ tanh(W s_(i−1) + U h_j), α_ij = softmax_j(e_ij). Cross-attention above is the same "
    "idea with dot-product scores, several heads and no recurrence. Below, a small GRU translator with "
    "additive attention, trained on the same sentences, translates the same source sentence.")
_, _, rnn_scores = ed.get_rnn()
rr = ed.get_rnn_translation(tuple(r.src_tokens))
rnn_w = rr.trace.attn.weights[0]  # (T_out, T_src): alpha_ij, model.rnn
rnn_rows = step_labels(rr.dec_labels, rr.produced)
rnn_gold = ed.reference(r.src_tokens, rr.produced).gold
rnn_out = " ".join(md_escape(w) for w in rr.tgt_tokens) or "(nothing)"
same_text = "the same as" if rr.tgt_tokens == r.tgt_tokens else "different from"
st.markdown(f"RNN's translation: **{rnn_out}** ({same_text} the Transformer's)"
            + ("" if rr.finished else " — it did not produce `<eos>` within the length limit"))
show_fig(alignment_beside(("RNN: additive attention α_ij", rnn_w, rnn_rows),
                          (f"Transformer: cross-attention (layer {layer}, {'avg' if head is None else f'head {head}'})",
                           cross, rows),
                          r.src_labels, gold_left=rnn_gold, gold_right=ref.gold),
         "s2s_rnn_vs_tf", filename="rnn_vs_transformer_alignment",
         table=lambda: pd.concat({"RNN additive attention": matrix_table(rnn_w, rnn_rows, r.src_labels).stack(),
                                  "Transformer cross-attention": matrix_table(cross, rows, r.src_labels).stack()}
                                 ).rename("weight").to_frame(),
         alt="Left: the RNN's alignment (rows: its output words, columns: the source words; each row sums to 1). "
             "Right: the Transformer's cross-attention for the same source sentence. Open squares: the reference "
             "alignment of each model's own output.")
rh, rn = ed.alignment_hits(rnn_w, rnn_gold)
if rn or n:
    st.caption(f"On this sentence the argmax points to the reference source word for {rh} of {rn} RNN output "
               f"words and {hits} of {n} Transformer output words ({which}, layer {layer}).")
if rnn_scores is not None:
    k1, k2, k3 = st.columns(3)
    k1.metric("RNN: exact match (held-out)", f"{rnn_scores.exact_match:.1%}",
              help=f"{rnn_scores.n_heldout} sentences never seen in training, greedy decoding.")
    k2.metric("RNN: token accuracy (held-out)", f"{rnn_scores.token_acc:.1%}")
    k3.metric("RNN: alignment accuracy (held-out)", f"{rnn_scores.alignment_acc:.1%}",
              help="Teacher-forced: does argmax_j α_ij of the step producing each word point to its source word?")
    st.caption(f"Trained with `python -m training.rnn_translation --train` ({rnn_scores.steps} steps, "
               f"{rnn_scores.train_cpu_seconds:.0f} s of CPU): a bidirectional GRU encoder and a GRU decoder "
               "with "
               f"{rnn_scores.parameters:,} parameters (model/rnn.py).")


# ----------------------------------------------------------------------------- the bottleneck, measured
st.subheader("The bottleneck, measured")
acc = ed.bottleneck()
if acc is None:
    st.info("The RNN translator without attention is not shipped (run python -m training.rnn_translation --train "
            "--no-attention): the bottleneck cannot be measured here.")
else:
    st.markdown(
        "The notes (004): with **one fixed context vector** the decoder must rebuild the whole sentence from it, "
        "and the longer the sentence, the worse the translation. Measured here on the translators' "
        f"{int(acc.counts.sum()):,} held-out sentences, grouped by source length: the same RNN recipe trained "
        "**without attention** (its context is the encoder's final states, the same for every output word), the "
        "shipped RNN **with attention**, and the Transformer.")
    show_fig(line_chart(acc.lengths, {name: 100 * acc.exact[m] for m, name in enumerate(acc.models)},
                        title="Exact match by source length (held-out sentences, greedy decoding)",
                        xaxis="source length (words, “.” included)", yaxis="% translated exactly"),
             "s2s_bottleneck",
             table=pd.DataFrame({"sentences": acc.counts,
                                 **{f"exact, {n}": acc.exact[m] for m, n in enumerate(acc.models)},
                                 **{f"token accuracy, {n}": acc.token[m] for m, n in enumerate(acc.models)}},
                                index=pd.Index(acc.lengths, name="source length")),
             alt="One line per translator: the share of sentences of each length translated exactly.")
    short, long_ = 0, len(acc.lengths) - 1
    st.markdown(
        " ".join(f"**{name}**: {100 * acc.exact[m, short]:.1f}% exact at {acc.lengths[short]} words "
                 f"({acc.counts[short]} sentences), {100 * acc.exact[m, long_]:.1f}% at {acc.lengths[long_]} "
                 f"({acc.counts[long_]} sentences); {100 * acc.overall(m):.1f}% overall."
                 for m, name in enumerate(acc.models))
        + " The fixed vector is the bottleneck: with attention each output word reads the source words it needs, "
          "so length hardly matters.")
    st.dataframe(pd.DataFrame({"sentences": acc.counts,
                               **{n: acc.exact[m] for m, n in enumerate(acc.models)}},
                              index=pd.Index(acc.lengths, name="source length")).style.format(
                     {n: "{:.1%}" for n in acc.models}), width="stretch")

st.subheader("Sequential vs parallel, measured")
tm = ed.parallel_timing()
st.markdown(
    "A recurrent network reads T tokens in **T steps, one after another** (step t needs the state of step t − 1); "
    "self-attention handles **all T positions at once**: its T² work is a few large matrix products, one step "
    "that parallel hardware spreads over its cores. Timed here: torch's GRU over T tokens against the engine's "
    f"multi-head attention layer over the same tokens (d_model {tm.d_model}, best of several runs, "
    f"{tm.threads} CPU thread{'s' if tm.threads > 1 else ''}).")
show_fig(line_chart(tm.lengths, {"GRU: T sequential steps": tm.recurrent_ms, "attention layer: 1 parallel step": tm.attention_ms},
                    title="Time for T tokens (this machine, now)", xaxis="T (tokens)", yaxis="milliseconds",
                    log_x=True),
         "s2s_parallel",
         table=pd.DataFrame({"GRU (ms)": tm.recurrent_ms, "attention (ms)": tm.attention_ms,
                             "GRU sequential steps": tm.recurrent_steps, "attention sequential steps": tm.attention_steps},
                            index=pd.Index(tm.lengths, name="T")),
         alt="The GRU's time grows with T because its steps cannot overlap; attention's grows with T² but in one step.")
st.caption(" ".join(f"T = {T}: GRU {r:.2f} ms, attention {a:.2f} ms ({'attention' if f else 'the GRU'} faster)."
                    for T, r, a, f in zip(tm.lengths, tm.recurrent_ms, tm.attention_ms, tm.attention_faster))
           + " Wall-clock times on a shared CPU vary from run to run. The step counts do not: the GRU's T steps must "
             "wait for each other, attention's work has no such chain — on a GPU with thousands of cores that is "
             "what makes transformers fast to train; on a CPU attention's T² cost shows at long lengths.")
