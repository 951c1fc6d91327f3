"""Circuits, beyond the heatmap (issue 35): attention sinks, induction heads, the logit lens, two
models on one text, and what one head reads and writes. One section at a time (lazy tabs: only the
open one is computed)."""
import pandas as pd
import streamlit as st

from classroom import circuits as C
from labels import md_escape, token_label, token_labels
from model.patterns import SHORT, THRESHOLDS
from ui import circuits as UC
from ui import state
from ui.runs import current_run, layer_allowed
from ui.show import show_code, show_fig
from ui.sidebar import source_title
from viz.attention import compare_grid, head_grid, head_heatmap
from viz.charts import matrix_heatmap
from viz.common import EXACT_MAX_T
from viz.circuits import kinds_map, layer_head_map, logit_lens_map, loss_by_position, token_alignment

TABS = ["Attention sinks", "Induction heads", "Logit lens", "Two models", "One head: QK & OV"]
KINDS = [*THRESHOLDS, "other"]

st.title("Circuits: beyond the heatmap")
st.caption("Real models make attention maps hard to read: most heads park their weight on the first token, so the maps "
           "look alike. These sections ask the next questions: which heads are sinks, which heads copy, when does the "
           "model know the next word, does another model attend differently, and what does one head read and write.")
run = current_run()
cfg = run.cfg
L, H, T = cfg.n_layers, cfg.n_heads, run.T
source = run.source
state.bound("circ_tab", TABS[0])
state.fix("circ_tab", TABS)
t_sink, t_ind, t_lens, t_two, t_head = st.tabs(TABS, key="circ_tab", on_change="rerun")


def heads_of(options_key: str, n: int, default: int = 0) -> None:
    state.fix(options_key, list(range(n)), default)


# ------------------------------------------------------------------------------------------ sinks
with t_sink:
    if t_sink.open:
        show_code("classroom.circuits.sink_scores", "classroom.circuits.hide_sink", what="sink scores")
        sink = UC.sink_map(run)  # (L, H)
        keys = UC.sink_keys(run)
        named = ", ".join(f"“{run.labels[i]}”" for i in range(T) if keys[i])
        n_over, share, (top_l, top_h) = UC.sink_summary(sink)
        st.markdown(f"**{n_over} of {L * H} heads** ({share:.0%}) put more than half of their "
                    f"attention on the sink ({md_escape(named)}), averaged over the queries after the first.")
        st.caption("Softmax makes every row sum to 1, so a head that finds nothing to do must still put its weight "
                   "somewhere. Trained models learn to park it on the first token (BERT: on [CLS] and [SEP]): the "
                   "attention sink (Xiao et al. 2023; Clark et al. 2019 for BERT). Its value vector is small, so "
                   "little is written, but the heatmap is dominated by that one column.")
        show_fig(layer_head_map(sink, title=f"Sink score ({L} × {H} heads)", value_name="sink score"),
                 "circ_sink_map", table=pd.DataFrame(sink, index=[f"layer {l}" for l in range(L)],
                                                     columns=[f"head {h}" for h in range(H)]),
                 alt=f"Per head, the mean weight on {'[CLS] and [SEP]' if run.special else 'the first token'} from the "
                     "queries after the first. Layers down, heads across; brighter = more weight on the sink.")
        st.subheader("One head with the sink hidden")
        state.bound("circ_sink_layer", top_l)
        heads_of("circ_sink_layer", L)
        c1, c2 = st.columns(2)
        sl = c1.selectbox("Layer", list(range(L)), key="circ_sink_layer")
        state.bound("circ_sink_head", top_h)
        heads_of("circ_sink_head", H)
        sh = c2.selectbox("Head", list(range(H)), key="circ_sink_head",
                          format_func=lambda h: f"head {h} · sink {sink[sl, h]:.2f}")
        w = run.trace.layers[sl].attn.weights[0, sh]  # (T, T)
        allowed = layer_allowed(run, sl)
        hidden = C.hide_sink(w, keys)
        def one_head(x, title, hidden_keys=None):
            """One head's (T, T) weights: every cell up to EXACT_MAX_T tokens; a long input as the heads
            grid draws it, in blocks of tokens (1,024 × 1,024 cells were 5.6 MB a chart)."""
            if run.T <= EXACT_MAX_T:
                return head_heatmap(x, run.labels, allowed=allowed, hidden_keys=hidden_keys, title=title)
            return head_grid(x[None], run.labels, allowed=allowed, hidden_keys=hidden_keys, title=title,
                             subtitles=[f"layer {sl}, head {sh}"], cols=1)

        a1, a2 = st.columns(2)
        with a1:
            show_fig(one_head(w, f"Layer {sl}, head {sh}: as computed"),
                     "circ_sink_raw", alt="The raw weights; the sink column is usually the brightest.")
        with a2:
            show_fig(one_head(hidden, "Sink hidden (derived view)", keys),
                     "circ_sink_hidden",
                     alt="A derived view, not what the model computed: the sink keys' columns removed (peach) and "
                         "every row divided by what is left, so the rest of the pattern is visible. A row that gave "
                         "everything to the sink is empty.")

# -------------------------------------------------------------------------------------- induction
with t_ind:
    if t_ind.open:
        show_code("classroom.circuits.induction_test", "classroom.circuits.induction_pattern",
                  "classroom.circuits.prefix_matching", what="the induction test")
        st.markdown("**The standard test.** A random sequence of *n* tokens, repeated once, after a start token. In the "
                    "second copy every token has been seen before, and so has the token after it: an **induction head** "
                    "looks back to the token that followed the earlier occurrence of the current token (position "
                    "i − n + 1) and copies it. It works with a **previous-token head** in an earlier layer "
                    "(Olsson et al. 2022).")
        hi = UC.max_test_tokens(source)
        state.bound("ind_n", min(50, hi))
        state.fix("ind_n", list(range(2, hi + 1)), min(50, hi))
        state.bound("ind_seed", 0)
        c1, c2 = st.columns(2)
        n = c1.slider("Tokens per copy (n)", 2, hi, key="ind_n", help=f"The test has 2n + 1 tokens (this model takes {cfg.max_len}).")
        seed = c2.number_input("Random seed", 0, 9999, key="ind_seed", help="Which random tokens are drawn.")
        with st.spinner("Running the test…", show_time=True):
            res = UC.induction(source, int(n), int(seed), run.causal)
        top = res.top(5)
        best = top[0]
        if best[2] >= UC.CLEAR_INDUCTION:
            st.markdown(f"**Strongest induction head: layer {best[0]}, head {best[1]}**, with mean weight **{best[2]:.2f}** on "
                        f"the token after the earlier occurrence (a head spreading its weight evenly would get "
                        f"{res.uniform:.2f}).")
        else:
            st.markdown(f"**No clear induction head here**: the best, layer {best[0]} head {best[1]}, puts {best[2]:.2f} on "
                        f"the token after the earlier occurrence (evenly spread attention: {res.uniform:.2f}). Small models "
                        "trained on short sentences rarely learn one; SmolLM2 has several.")
        show_fig(layer_head_map(res.induction, highlight=[(l, h) for l, h, _ in top],
                                title=f"Induction score (n = {n}; top 5 outlined)",
                                value_name="induction"),
                 "ind_map", alt="Per head, the mean weight from each position i of the second copy to position "
                                 "i − n + 1. Layers down, heads across.", table=pd.DataFrame(res.induction, index=[f"layer {l}" for l in range(L)],
                                               columns=[f"head {h}" for h in range(H)]))
        c1, c2 = st.columns(2)
        with c1:
            show_fig(layer_head_map(res.prefix_matching, title="Prefix-matching score", value_name="prefix-matching"),
                     "ind_prefix", alt="Weight on every key whose previous token is the query's token (chance repeats "
                                       "inside a copy included).")
        with c2:
            show_fig(layer_head_map(res.previous_token, highlight=[(l, h) for l, h, _ in res.top(3, "previous_token")],
                                    title="Previous-token score (t → t − 1)", value_name="previous-token"),
                     "ind_prev", alt="The other half of the circuit: heads that look one token back.")
        rows = [{"layer": l, "head": h, "induction": round(s, 4), "prefix-matching": round(float(res.prefix_matching[l, h]), 4),
                 "previous-token": round(float(res.previous_token[l, h]), 4)} for l, h, s in res.top(10)]
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
        toks = UC.test_tokens(source, res.ids[: min(len(res.ids), 13)])
        st.caption("The test sequence starts: " + md_escape(" · ".join(toks)) + " … (then the same "
                   f"{n} tokens again). Prefix-matching counts every key whose previous token is the query's token, so "
                   "it also counts tokens that repeat by chance inside a copy.")
        if res.loss is None:
            st.info("The per-token loss needs a model that predicts the next token with a causal mask"
                    + (" (this model has no output layer)." if not cfg.output_head else
                       " (switch the sidebar's mask to causal)."), icon=":material/info:")
        else:
            st.subheader("In-context learning made visible: the loss on each copy")
            state.bound("ind_k", 3)
            state.fix("ind_k", list(range(1, 11)), 3)
            state.bound("ind_ablate", False)
            c1, c2 = st.columns([2, 1], vertical_alignment="bottom")
            k = c1.slider("Top induction heads to switch off", 1, 10, key="ind_k")
            ablate = c2.toggle("Switch them off", key="ind_ablate",
                               help="Their outputs Z_h are set to zero at every position (as on the Intervene page).")
            losses = {"as trained": res.loss}
            abl = ctrl = None
            if ablate:
                heads = tuple((l, h) for l, h, _ in res.top(k))
                ctrl_heads = C.control_heads(res, k, seed=int(seed))
                with st.spinner(f"Running the test with {k} heads switched off…", show_time=True):
                    abl = UC.induction(source, int(n), int(seed), run.causal, heads)
                    ctrl = UC.induction(source, int(n), int(seed), run.causal, ctrl_heads)
                losses[f"top {k} induction heads off"] = abl.loss
                losses[f"{k} other heads off (control)"] = ctrl.loss
            m = st.columns(len(losses))
            for col, (name, r) in zip(m, [("as trained", res), *([] if abl is None else
                                                                  [(f"top {k} off", abl), (f"{k} other heads off", ctrl)])]):
                col.metric(f"{name}: 2nd copy", f"{r.second_copy_loss:.2f} nats",
                           delta=None if r is res else f"{r.second_copy_loss - res.second_copy_loss:+.2f}",
                           delta_color="inverse", help=f"first copy {r.first_copy_loss:.2f} nats")
            show_fig(loss_by_position(losses, n, title="Loss of each prediction"),
                     "ind_loss", alt="In the first copy the tokens are random and the loss is high; in the second copy a "
                                     "model with induction heads predicts each token from the first copy.")
            if abl is not None:
                st.caption("Switched off: " + ", ".join(f"L{l} H{h}" for l, h in abl.ablated) + ". Control: "
                           + ", ".join(f"L{l} H{h}" for l, h in ctrl.ablated) + " (random heads outside the top "
                           f"{k}, same number). Second copy: {res.second_copy_loss:.2f} → {abl.second_copy_loss:.2f} nats "
                           f"with the top heads off, → {ctrl.second_copy_loss:.2f} with the control heads off; first copy: "
                           f"{res.first_copy_loss:.2f} → {abl.first_copy_loss:.2f} nats.")

# ------------------------------------------------------------------------------------- logit lens
with t_lens:
    if t_lens.open:
        show_code("classroom.circuits.logit_lens", what="the logit lens")
        st.markdown("**The logit lens** (nostalgebraist 2020): after every layer, read the residual stream with the "
                    "model's own final norm and output layer, as if the model ended there. When does the right next "
                    "token appear?")
        why = None
        if not cfg.output_head:
            why = ("This model has no output layer: MiniLM is an encoder that turns text into vectors, so there is "
                   "nothing to read the residual stream with, and it was trained with both sides visible, so a "
                   "position's vector is not a guess of the next token. Pick a causal language model (SmolLM2 or "
                   "causal-lm) in the sidebar.")
        elif not run.causal:
            why = ("The lens is offered for causal models: with the bidirectional mask every position also sees the "
                   "tokens after it, so predicting the next token is no test. Switch the sidebar's mask to causal"
                   + (" (this masked LM predicts the token at each position, not the next one)."
                      if source.kind == "checkpoint" and source.name == "masked-lm" else "."))
        elif T < 2:
            why = "Type at least two tokens: the lens compares each prediction with the token that follows."
        if why:
            st.info(why, icon=":material/info:")
        else:
            with st.spinner("Reading every layer…", show_time=True):
                ll = UC.lens(source, st.session_state.get("text", state.DEFAULT_TEXT), run.causal,
                             int(st.session_state.get("T", 64)), 5)
            vocab = UC.vocab_labels(source)
            tops = [[vocab[int(i)] for i in row[:, 0]] for row in ll.top_ids]  # (R, T)
            show_fig(logit_lens_map(ll.next_probs, tops, ll.top_probs[:, :, 0], list(ll.rows), run.labels,
                                    [vocab[int(i)] for i in ll.next_ids],
                                    title="Logit lens: p(the real next token)"),
                     "lens_map", table=pd.DataFrame(ll.next_probs, index=list(ll.rows), columns=token_labels(run.labels[:-1], plain=True)),
                     alt="Colour: the probability each layer's read-out gives the token that really comes next; text: "
                         "that read-out's top token. The last row is the model's own prediction; the last column has no "
                         "next token (grey).")
            state.bound("lens_pos", T - 1)
            state.fix("lens_pos", list(range(T)), T - 1)
            pos = st.selectbox("Position", list(range(T)), key="lens_pos",
                               format_func=lambda i: token_label(i, run.labels[i], sep=": "))
            table = pd.DataFrame({f"#{j + 1}": [f"{vocab[int(ll.top_ids[r, pos, j])]} ({ll.top_probs[r, pos, j]:.3f})"
                                                for r in range(ll.n_rows)] for j in range(ll.top_ids.shape[2])},
                                 index=list(ll.rows))
            if pos < T - 1:
                table.insert(0, f"next: {vocab[int(ll.next_ids[pos])]}",
                             [f"{ll.next_probs[r, pos]:.3f} (rank {int(ll.next_ranks[r, pos]) + 1})" for r in range(ll.n_rows)])
            st.dataframe(table, width="stretch")
            st.caption("Row “embeddings” reads the stream before any block (token + position, as block 0 sees it); "
                       "“after layer l” reads block l's output. Probabilities are a softmax over the whole vocabulary "
                       f"({cfg.vocab_size:,} tokens). Early rows of deep models often read as noise: the middle layers "
                       "keep information in directions the output layer does not read.")

# ------------------------------------------------------------------------------------- two models
with t_two:
    if t_two.open:
        show_code("classroom.circuits.char_spans", "classroom.circuits.align", "classroom.circuits.pool_to_segments",
                  what="aligning two tokenizations")
        here = st.session_state.get("src", "")
        options = UC.other_options(here)
        state.bound("cmp_model", options[0])
        state.fix("cmp_model", options)
        other = st.selectbox("Second model", options, key="cmp_model", format_func=source_title,
                             help="Any model of the Model list (not fresh weights): it reads the same text.")
        err = UC.load_error(other)
        src_b = UC.source_named(other)
        if err or src_b is None:
            st.error(err or f"{other!r} is no longer available.", icon=":material/error:")
        else:
            text = st.session_state.get("text", state.DEFAULT_TEXT)
            causal_b = UC.mask_of(other)
            run_b = UC.run_for(src_b, text, causal_b, int(st.session_state.get("T", 64)))
            name_a, name_b = source_title(here) + " (A)", source_title(other) + " (B)"
            st.caption(f"A: {md_escape(source_title(here))}, {'causal' if run.causal else 'bidirectional'} mask (the sidebar's), "
                       f"{T:,} tokens. B: {md_escape(source_title(other))}, {'causal' if causal_b else 'bidirectional'} mask "
                       f"(the one it was trained with), {run_b.T} tokens.")
            sa, sb = UC.spans(run, text), UC.spans(run_b, text)
            al = C.align(sa, sb)
            show_fig(token_alignment([sa, sb], [run.labels, run_b.labels], [name_a, name_b], segments=al.segments,
                                     title="Two tokenizers, one text"),
                     "cmp_tokens", alt="Each box is one token, placed by the characters it covers; grey marks are tokens "
                                       "that are not in the text ([CLS], [SEP], <bos>); dotted lines: boundaries both "
                                       "tokenizers share.")
            st.subheader("Heads")
            state.bound("cmp_layer_a", 0)
            state.fix("cmp_layer_a", list(range(L)))
            state.bound("cmp_layer_b", 0)
            state.fix("cmp_layer_b", list(range(run_b.cfg.n_layers)))
            state.bound("cmp_head_a", 0)
            state.fix("cmp_head_a", list(range(H)))
            state.bound("cmp_head_b", 0)
            state.fix("cmp_head_b", list(range(run_b.cfg.n_heads)))
            c1, c2, c3, c4 = st.columns(4)
            la = c1.selectbox("Layer of A", list(range(L)), key="cmp_layer_a")
            ha = c2.selectbox("Head of A", list(range(H)), key="cmp_head_a")
            lb = c3.selectbox("Layer of B", list(range(run_b.cfg.n_layers)), key="cmp_layer_b")
            hb = c4.selectbox("Head of B", list(range(run_b.cfg.n_heads)), key="cmp_head_b")
            wa, wb = run.trace.layers[la].attn.weights[0], run_b.trace.layers[lb].attn.weights[0]
            hide = UC.sink_switch()
            if hide:  # the derived view, each model with its own sink hidden
                wa, wb = UC.hidden(run, wa), UC.hidden(run_b, wb)
                UC.derived_note(run, run_b)
            keys_a, keys_b = (UC.sink_keys(run), UC.sink_keys(run_b)) if hide else (None, None)
            mark = " · sink hidden" if hide else ""
            c1, c2 = st.columns(2)
            with c1:
                show_fig(head_heatmap(wa[ha], run.labels, allowed=layer_allowed(run, la), hidden_keys=keys_a,
                                      title=f"A · layer {la}, head {ha}{mark}"), "cmp_head_a_map")
            with c2:
                show_fig(head_heatmap(wb[hb], run_b.labels, allowed=layer_allowed(run_b, lb), hidden_keys=keys_b,
                                      title=f"B · layer {lb}, head {hb}{mark}"), "cmp_head_b_map")
            same = al.identical and wa.shape == wb.shape
            if not same:
                st.caption("A difference map per head needs the same tokens and the same number of heads"
                           f" (A: {T:,} tokens × {H} heads, B: {run_b.T:,} tokens × {run_b.cfg.n_heads} heads). Below, both "
                           "are compared on the stretches of text they share instead.")
            state.bound("cmp_grids", False)
            box = st.expander("Every head of these two layers" + (", and B − A" if same else ""), key="cmp_grids",
                              on_change="rerun", icon=":material/grid_view:")
            with box:
                if box.open:  # computed and sent only while open
                    show_fig(head_grid(wa, run.labels, allowed=layer_allowed(run, la), hidden_keys=keys_a,
                                       title=f"A · layer {la}{mark}"), "cmp_grid_a")
                    show_fig(head_grid(wb, run_b.labels, allowed=layer_allowed(run_b, lb), hidden_keys=keys_b,
                                       title=f"B · layer {lb}{mark}"), "cmp_grid_b")
                    if same:
                        show_fig(compare_grid(wa, wb, run.labels, names=("A", "B"), hidden_keys=keys_a), "cmp_diff",
                                 alt="Same tokens and the same number of heads: each head of A, of B, and B − A.")
            if al.segments:
                seg_texts = UC.segment_labels(al, text)
                pa, pb = UC.pooled(run, la, al.seg_a, len(al.segments)), UC.pooled(run_b, lb, al.seg_b, len(al.segments))
                show_fig(matrix_heatmap(UC.difference(pa, pb), seg_texts, seg_texts, tokens_cols=True, zmid=0.0, fmt=".2f",
                                        annotate=len(seg_texts) <= 10, row_title="looking (text piece)",
                                        col_title="looked at", value_name="B − A",
                                        title=f"Shared pieces: B L{lb} − A L{la}"),
                         "cmp_pooled", table=pd.DataFrame(UC.difference(pa, pb), index=token_labels(seg_texts, plain=True),
                                                          columns=token_labels(seg_texts, plain=True)),
                         alt="Each model's layer (mean over its heads) moved onto the pieces of text both tokenizers "
                             "cut at: a piece's row is the mean of its tokens' rows, a column the weight landing anywhere "
                             "in it. Weight on tokens outside the text ([CLS], [SEP], <bos>) is left out.")
            st.subheader("Overview: every head's label")
            ka, kb = UC.head_labels(run, hide), UC.head_labels(run_b, hide)
            c1, c2 = st.columns(2)
            with c1:
                show_fig(kinds_map([[p.kind for p in row] for row in ka], KINDS, short=SHORT, title="A · head labels"),
                         "cmp_kinds_a")
            with c2:
                show_fig(kinds_map([[p.kind for p in row] for row in kb], KINDS, short=SHORT, title="B · head labels"),
                         "cmp_kinds_b")
            st.subheader("Sinks and induction heads")
            sink_a, sink_b = UC.sink_map(run), UC.sink_map(run_b)
            c1, c2 = st.columns(2)
            with c1:
                show_fig(layer_head_map(sink_a, title="A: sink score", value_name="sink"), "cmp_sink_a")
            with c2:
                show_fig(layer_head_map(sink_b, title="B: sink score", value_name="sink"), "cmp_sink_b")
            state.bound("cmp_ind", False)
            if st.toggle("Run the induction test on both", key="cmp_ind",
                         help="The repeated-random-tokens test (Induction heads section), n = 25, on each model."):
                n2 = min(25, UC.max_test_tokens(source), UC.max_test_tokens(src_b))
                with st.spinner("Running the test on both models…", show_time=True):
                    ia, ib = UC.induction(source, n2, 0, run.causal), UC.induction(src_b, n2, 0, causal_b)
                c1, c2 = st.columns(2)
                with c1:
                    show_fig(layer_head_map(ia.induction, title=f"A: induction score (n = {n2})", value_name="induction"),
                             "cmp_ind_a")
                with c2:
                    show_fig(layer_head_map(ib.induction, title=f"B: induction score (n = {n2})", value_name="induction"),
                             "cmp_ind_b")
                if ia.induction.shape == ib.induction.shape:
                    show_fig(layer_head_map(UC.difference(ia.induction, ib.induction), diverging=True, title="Induction score: B − A",
                                            value_name="B − A"), "cmp_ind_diff")
            if sink_a.shape == sink_b.shape:
                show_fig(layer_head_map(UC.difference(sink_a, sink_b), diverging=True, title="Sink score: B − A",
                                        value_name="B − A"), "cmp_sink_diff")

# --------------------------------------------------------------------------------------- one head
with t_head:
    if t_head.open:
        show_code("classroom.circuits.head_circuit", "classroom.circuits.head_weights", what="W_QK and W_OV")
        st.markdown("A head does two things (Elhage et al. 2021): its **QK circuit** W_QK = W_Q W_Kᵀ decides where it "
                    "looks (the score of a query token a for a key token b is x_a W_QK x_bᵀ), and its **OV circuit** "
                    "W_OV = W_V W_O decides what it writes when it looks there (x_b W_OV, added to the stream). Read "
                    "through the token embeddings, both become tables of tokens.")
        state.bound("hc_layer", 0)
        heads_of("hc_layer", L)
        state.bound("hc_head", 0)
        heads_of("hc_head", H)
        c1, c2 = st.columns(2)
        hl = c1.selectbox("Layer", list(range(L)), key="hc_layer")
        hh = c2.selectbox("Head", list(range(H)), key="hc_head")
        with st.spinner("Reading the head's matrices…", show_time=True):
            hc = UC.head_circuit(source, int(hl), int(hh), tuple(run.ids))
        vocab = UC.vocab_labels(source)
        st.dataframe(pd.DataFrame(list(hc.shapes), columns=["matrix", "shape", "what it is"]), hide_index=True,
                     width="stretch")
        if cfg.kv_heads != cfg.n_heads:
            st.caption(f"Grouped-query attention: query head {hh} reads K/V head {hc.kv_head} (heads share K and V in "
                       f"groups of {cfg.n_heads // cfg.kv_heads}).")
        q1, q2 = st.columns(2)
        with q1:
            st.markdown("**What it looks for (QK):** the token pairs with the highest score")
            st.dataframe(pd.DataFrame({"query token": [vocab[a] for a, _ in hc.qk_pairs],
                                       "key token": [vocab[b] for _, b in hc.qk_pairs],
                                       "score": hc.qk_scores.round(3)}), hide_index=True, width="stretch", height=300)
        with q2:
            st.markdown("**What it writes (OV):** attended token → the token whose logit rises most")
            st.dataframe(pd.DataFrame({"attended token": [vocab[a] for a, _ in hc.ov_pairs],
                                       "raises": [vocab[b] for _, b in hc.ov_pairs],
                                       "logit +": hc.ov_logits.round(3)}), hide_index=True, width="stretch", height=300)
        st.metric("Copying score", f"{hc.copying:.0%}",
                  help="Share of the searched tokens whose own logit is among the 10 the head's OV output raises most "
                       "when it attends to them: copying heads (induction heads among them) score high.")
        if hl < L - 1:
            st.caption(f"Layer {hl} of {L}: what this head writes passes {L - 1 - hl} more layers before the output layer, "
                       "which this direct reading skips, and it reads the stream those earlier layers built, not bare "
                       "embeddings. A low copying score in a middle layer of a real model does not show that the head does "
                       "not copy; on a small model's last layer the reading is close.")
        s1, s2 = st.columns(2)
        with s1:
            show_fig(matrix_heatmap(hc.text_qk, run.labels, run.labels, tokens_cols=True, colorscale="Viridis", zmid=None,
                                    annotate=T <= 10, row_title="query token", col_title="key token", value_name="QK score",
                                    title="Tokens alone (no position, no context)"),
                     "hc_text_qk")
        with s2:
            real = run.trace.layers[hl].attn.masked[0, hh]  # (T, T) the head's scaled scores, -inf where masked
            show_fig(head_heatmap(UC.finite(real), run.labels, allowed=layer_allowed(run, hl), zmin=None, zmax=None,
                                  colorscale="Viridis", value_name="score", title="In this sentence (as computed)"),
                     "hc_real_qk", alt="The head's real scaled scores q·k/√d_k in this sentence, positions and context "
                                       "included; grey = masked.")
        st.markdown("**For each token of your text:** the tokens whose logits rise most when this head attends to it")
        st.dataframe(pd.DataFrame({"attended": token_labels(run.labels, plain=True),
                                   **{f"#{j + 1}": [f"{vocab[int(hc.text_ov_ids[t, j])]} (+{hc.text_ov_logits[t, j]:.2f})"
                                                    for t in range(T)] for j in range(hc.text_ov_ids.shape[1])}}),
                     hide_index=True, width="stretch")
        st.caption("What is approximate: " + " ".join(md_escape(n) for n in hc.notes) + (
            f" The pair tables search the {len(hc.candidates):,} most frequent word-like tokens and your text's, not "
            f"all {cfg.vocab_size:,} (the OV tables rank the whole vocabulary)." if len(hc.candidates) < cfg.vocab_size else ""))
del run
