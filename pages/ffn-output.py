"""FFN & output layer: position-wise FFN activations, logits -> softmax over the vocabulary,
top-k next tokens, the sequence probability as a product of p(x_t | x_<t), weight tying."""
import pandas as pd
import streamlit as st

from classroom import ffn_output
from classroom.embeddings import mean_loss, next_token_losses
from labels import md_escape, token_label, token_labels, visible
from ui import state
from ui.ffn_output import (embedding_neighbours, ffn_position_check, fill_blank, fill_blank_capability,
                          nearest_rows, output_layer_view)
from ui.models import architecture
from ui.runs import current_run
from ui.show import show_code, show_fig
from viz.charts import bar_compare, matrix_heatmap, topk_heatmap

st.title("FFN & output layer")
show_code("model.layers.FeedForward.forward", "model.transformer.TokenModel.output_matrix", what="FFN and output layer")
run = current_run()
cfg = run.cfg
idx = token_labels(run.labels, plain=True)

st.subheader("Position-wise feed-forward network")
arch = architecture(run.source, cfg)  # this model's FFN in words (classroom/architecture.py)
act = arch.activation
st.caption(f"{act.ffn_formula}, from d_model = {cfg.d_model} up to d_ff = {cfg.d_ff} and back ({act.matrices}), "
           "applied to every position separately with the same weights.")
layers = list(range(cfg.n_layers))
state.bound("ffn_layer", 0)
state.fix("ffn_layer", layers)
layer = st.selectbox("Layer", layers, key="ffn_layer")
ffn = run.trace.layers[layer].ffn  # FFNTrace (numpy, B = 1)
hidden = ffn.hidden_post[0]  # (T, d_ff)
show_fig(matrix_heatmap(hidden, run.labels, [str(j) for j in range(cfg.d_ff)], annotate=False,
                        title=f"Hidden activations, {act.hidden} ({run.T} × {cfg.d_ff})", col_title="hidden unit",
                        value_name="activation"),
         "ffn_hidden", table=pd.DataFrame(hidden, index=idx))
diff = ffn_position_check(run, layer)
active = ffn_output.active_share(hidden, cfg.activation)
st.markdown(f"Running the FFN on each position **alone** gives the same outputs as all positions at once "
            f"(max |difference| = {diff:.2e}): no information moves between tokens here — that is attention's job. "
            f"{100 * active:.0f}% of the hidden units are clearly positive for this sentence.")

def neighbours_section() -> None:
    """Nearest neighbours of a typed word in the token-embedding matrix (any model, incl. the real ones)."""
    st.subheader("Neighbours in the embedding matrix")
    default_word = "cat" if len(run.vocab) > 1000 else next((w for w in ("apple", "cat", "red") if w in run.vocab), run.vocab[-1])
    state.bound("emb_word", default_word)
    word = st.text_input("Word", key="emb_word", help="A word of the model's vocabulary; its row of E is compared with every other row.")
    typed = word.strip() if len(run.vocab) > 1000 else word.strip().lower()  # real vocabularies keep case ("Paris")
    nb = embedding_neighbours(run.source, typed, 8)
    if nb.row_label is not None:
        st.caption(f"Cosine similarity of the row of **{md_escape(nb.row_label)}** in the token-embedding matrix E "
                   f"({len(run.vocab):,} × {cfg.d_model}) with every other row (special tokens left out): words used "
                   "alike end up close" + ffn_output.neighbours_note(run.source.kind if run.source else ""))
        show_fig(bar_compare(nb.tokens, {"cosine": nb.cosines}, tokens=False, text_format=".2f",
                             title=f"Nearest neighbours of “{visible(nb.row_label)}” in E (cosine)", yaxis="cosine similarity"),
                 "emb_neighbours", table=pd.DataFrame({"token": nb.tokens, "cosine": nb.cosines}).set_index("token"))
    elif nb.pieces:
        st.info(f"“{md_escape(typed)}” is not one token of this model: its tokenizer splits it into "
                f"{' + '.join(md_escape(p) for p in nb.pieces)}, so it has no single row in E. Try a common word such as cat.")
    else:
        st.info(f"{md_escape(word)!s} is not in this model's vocabulary of {len(run.vocab):,} words; try apple, cat or red.")


def hide_position() -> int:
    """The word to hide (fill in the blank): any token but the special ones."""
    choices = [i for i in range(run.T) if not ffn_output.is_special_token(run.labels[i])]
    state.bound("fb_pos", choices[len(choices) // 2] if choices else 0)
    state.fix("fb_pos", choices or [0])
    return st.selectbox("Hide this word", choices or [0], key="fb_pos",
                        format_func=lambda i: token_label(i, run.labels[i], sep=": "))


def encoder_fill_blank() -> None:
    """A masked LM's encoder without its MLM head (MiniLM): say so, and show the closest honest view."""
    st.subheader("Fill in the blank? Not without an MLM head")
    st.markdown("MiniLM reads `[MASK]` like BERT, but this checkpoint (a sentence-embedding model) ships the encoder "
                "only: there is **no MLM head**, the layer that turns the final vector at a masked position into a "
                "score for every word of the vocabulary. So it cannot guess a hidden word, and this page shows no "
                "probabilities. The closest honest view is below: the rows of the token-embedding matrix E nearest "
                "(cosine) to the final vector at the hidden position. They are **not guesses**; where the hidden "
                "word's own row ranks shows how far that vector is from a prediction. To see fill in the blank, "
                "pick the masked LM in the sidebar, or open a BERT or RoBERTa checkpoint that keeps its MLM head.")
    pos = hide_position()
    res = nearest_rows(run.source, tuple(run.ids), int(pos), 5)
    st.code(" ".join("[MASK]" if i == pos else run.labels[i] for i in range(run.T)), language=None, wrap_lines=True)
    rows = [run.vocab[i] for i in res.top_ids]
    show_fig(bar_compare(rows, {"cosine": res.top_cos}, tokens=False, text_format=".3f", yaxis="cosine similarity",
                         title="Rows of E nearest to the final vector at [MASK] (not predictions)"),
             "fb_nearest", table=pd.DataFrame({"row of E": rows, "cosine": res.top_cos}),
             alt="Bars: the cosine similarity of the five nearest rows of the embedding matrix; no MLM head, no probabilities.")
    st.markdown(f"The hidden word **{md_escape(run.labels[pos])}**: its row has cosine {res.true_cos:.3f} and ranks "
                f"**{res.true_rank:,}** of the {res.compared:,} rows compared (special tokens left out).")


fill_cap = fill_blank_capability(run.source)


if run.trace.probs is None:  # an encoder without an output layer (MiniLM): show what its last layer gives
    st.subheader("What the last layer produces")
    st.info("This model has no output layer (no language-model head), so it cannot predict tokens: no logits, "
            "top-k or sequence probability. Below is what its last layer produces instead.", icon=":material/info:")
    final = run.trace.final[0]  # (T, D) the last block's output
    last = ffn_output.last_layer_view(final)
    lim = ffn_output.robust_limit(final)  # a few outlier dimensions would wash out the rest
    show_fig(matrix_heatmap(final, run.labels, [str(j) for j in range(cfg.d_model)], annotate=False, zmin=-lim,
                            zmax=lim, title=f"Final hidden states ({run.T} × {cfg.d_model}; colours clipped at ±{lim:.2f})",
                            col_title="dimension"),
             "ffn_final", table=pd.DataFrame(final, index=idx),
             alt="One row per token: the vector the last layer hands on (to a task head, or to pooling).")
    c1, c2 = st.columns(2)
    with c1:
        show_fig(bar_compare(run.labels, {"‖h_t‖": last.norms}, title="Norm of each token's final vector",
                             yaxis="L2 norm"), "ffn_final_norms",
                 table=pd.DataFrame({"L2 norm": last.norms}, index=idx))
    with c2:
        show_fig(matrix_heatmap(last.cosine, run.labels, run.labels, tokens_cols=True, colorscale="Viridis",
                                zmid=None, annotate=run.T <= 12, title="Cosine similarity between tokens' final vectors",
                                value_name="cosine"), "ffn_final_cos",
                 table=pd.DataFrame(last.cosine, index=idx, columns=idx))
    st.caption("MiniLM's sentence embedding is the mean of these rows (then scaled to length 1): "
               f"its first values are [{', '.join(f'{v:.3f}' for v in last.mean[:6])}, …] "
               f"({cfg.d_model} in all). The first row belongs to [CLS], which BERT models trained for "
               "classification read as the whole sentence's summary.")
    if fill_cap == ffn_output.ENCODER_ONLY:
        encoder_fill_blank()
    neighbours_section()
    state.end_page()

if fill_cap == ffn_output.MLM_HEAD:  # a masked LM with its head: the toy masked LM, a BERT from disk
    st.subheader("Fill in the blank: what a masked language model is for")
    st.markdown("This model was trained like BERT: some words of each sentence were replaced by `<mask>`, and the "
                "model learned to guess them **from both sides**. It does not predict the next word, so this page "
                "shows no next-token table and no perplexity. Pick a word to hide:")
    pos = hide_position()
    res = fill_blank(run.source, tuple(run.ids), int(pos), 5)
    guesses = [run.vocab[i] for i in res.top_ids]
    shown = " ".join("____" if i == pos else run.labels[i] for i in range(run.T))
    st.code(shown, language=None, wrap_lines=True)
    show_fig(bar_compare(guesses, {"p": res.top_p}, tokens=False, text_format=".3f", yaxis="probability",
                         title=f"The model's top 5 guesses for the hidden word (the true word: “{visible(run.vocab[res.true_id])}”)"),
             "fb_guesses", table=pd.DataFrame({"guess": guesses, "p": res.top_p}))
    st.markdown(f"The hidden word **{md_escape(run.labels[pos])}** gets p = {res.true_p:.3f}: it is the model's guess "
                f"number **{res.true_rank}** of {len(run.vocab)}." + (" The model got it." if res.true_rank == 1 else ""))
    if run.causal:
        st.warning("The sidebar mask is causal, but this model was trained bidirectionally: switch the mask to "
                   "bidirectional to see it as it learned. (The guesses above are always computed bidirectionally.)")
    neighbours_section()
    state.end_page()

st.subheader("Output layer: logits → softmax over the vocabulary")
state.bound("ffn_k", 5)
if st.session_state.get("ffn_k") not in range(1, 11):
    st.session_state["ffn_k"] = 5
k = st.slider("Top-k", 1, 10, key="ffn_k")
probs = run.trace.probs[0]  # (T, V)
top_p, top_t = ffn_output.topk_next(probs, run.vocab, k)
topk_table = pd.DataFrame({f"#{j + 1}": [f"{top_t[i][j]} ({top_p[i, j]:.3f})" for i in range(run.T)] for j in range(top_p.shape[1])},
                          index=idx)
show_fig(topk_heatmap(top_p, top_t, run.labels, title=f"Top-{k} next tokens at every position"), "ffn_topk", table=topk_table,
         alt=f"Row t: the model's distribution over all {len(run.vocab)} tokens for the token after position t (argmax = #1).")
if not run.causal:
    st.warning("The sidebar mask is bidirectional: every position also sees the tokens it should predict, so "
               "these are not honest next-token predictions. The sequence probability below uses the causal mask.")

st.subheader("Sequence probability: p(x) = Π p(x_t | x_<t)")
crun = run if run.causal else current_run(causal=True, notices=False)
sp = ffn_output.sequence_logprob(crun.trace.probs[0], crun.ids)
if len(sp.p) == 0:
    st.info("A single token has nothing to predict: type at least two tokens.")
else:
    targets = crun.labels[1:]
    seq = pd.DataFrame({"token x_t": targets, "p(x_t | x_<t)": sp.p, "log p": sp.logp},
                       index=token_labels(targets, plain=True, start=1))
    show_fig(bar_compare(list(seq.index), {"p(x_t | x_<t)": sp.p}, tokens=False,
                         title=f"Probability of each actual next token (log p(x) = {sp.total_logp:.3f})",
                         yaxis="probability", text_format=".2f" if len(targets) <= 24 else None),
             "ffn_seqprob", table=seq, alt="Bar t: how much probability the model gave, after reading tokens 0 … t−1, "
                                           "to the token that actually came at position t.")
    m1, m2, m3 = st.columns(3)
    m1.metric("log p(x) = Σ log p", f"{sp.total_logp:.3f}")
    m2.metric("p(x) = Π p", f"{sp.total_p:.3e}")
    m3.metric("perplexity", f"{sp.perplexity:.2f}")
    st.caption(f"{len(sp.p)} factors: the first token is given; position t − 1's distribution scores token t. "
               "Products of many probabilities underflow, so models add log-probabilities instead."
               + (" Unknown words are scored as `<unk>`." if crun.unknown else ""))
    st.dataframe(seq.style.format({"p(x_t | x_<t)": "{:.4f}", "log p": "{:.4f}"}), width="stretch")

    st.subheader("One-hot targets and the loss at each position")
    losses = next_token_losses(crun.trace.probs[0], crun.ids, crun.vocab)
    ce = pd.DataFrame({"target token": [r.target_token for r in losses],
                       "target index": [r.target_index for r in losses],
                       "p(target)": [r.p_target for r in losses], "loss −log p": [r.loss for r in losses],
                       "argmax": [r.argmax for r in losses]},
                      index=pd.Index(token_labels(crun.labels[:-1], plain=True), name="after reading …"))
    st.markdown(f"Training compares the distribution at each position with a **one-hot target**: a vector of "
                f"|V| = {len(crun.vocab)} zeros with a single 1 at the output index of the true next token. The "
                f"cross-entropy −Σ y_i log p_i then keeps one term, −log p(target). The mean over the "
                f"{len(losses)} positions, **{mean_loss(losses):.4f}** nats, is the loss training minimises.")
    st.caption(f"A one-hot target has exactly |V| cells, one per vocabulary entry ({len(crun.vocab)} here). The notes' "
               "recap of training (004) draws the one-hot vector of “am” with 7 cells for its 6-word vocabulary "
               "(a, am, I, thanks, student, <eos>: indices 0–5): it should be [0, 1, 0, 0, 0, 0].")
    st.dataframe(ce.style.format({"p(target)": "{:.4f}", "loss −log p": "{:.4f}"}),
                 width="stretch")

neighbours_section()

st.subheader("Weight tying")
n_show = min(len(run.vocab), 12)
view = output_layer_view(run, n_show)
tie = view.tying
at = "" if tie.positions == tie.of else f", recomputed at {tie.positions} of the {tie.of:,} positions, spread evenly"
if tie.tied:
    st.markdown(f"The output layer **is** the token-embedding matrix E ({tie.shape[0]} × {tie.shape[1]}, the same "
                f"storage): logits = h · Eᵀ. Recomputing that from the trace matches the model's logits "
                f"(max |difference| = {tie.max_diff:.1e}{at}). Tying saves {tie.shape[0] * tie.shape[1]:,} parameters.")
else:
    st.markdown(f"This model has its own output matrix ({tie.shape[0]} × {tie.shape[1]}), not tied to the embedding; "
                f"logits = h · W_outᵀ (recomputed: max |difference| = {tie.max_diff:.1e}{at}).")
E, W = view.embedding_rows, view.output_rows  # (n_show, D) each
c1, c2 = st.columns(2)
vocab_rows = list(run.vocab[:n_show])  # escaped by the viz
dcols = [str(j) for j in range(cfg.d_model)]
with c1:
    show_fig(matrix_heatmap(E, vocab_rows, dcols, tokens_rows=False, annotate=False, title=f"Embedding E (first {n_show} rows)",
                            height=380), "ffn_emb", table=pd.DataFrame(E, index=run.vocab[:n_show]))
with c2:
    show_fig(matrix_heatmap(W, vocab_rows, dcols, tokens_rows=False, annotate=False, title=f"Output matrix (first {n_show} rows)",
                            height=380), "ffn_outm", table=pd.DataFrame(W, index=run.vocab[:n_show]))
