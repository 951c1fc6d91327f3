"""Contextual embeddings: one word in two sentences. Its token embedding is identical in both; after
each layer the vectors diverge with the context. Cosine similarity per layer + nearest tokens."""
import pandas as pd
import streamlit as st

from classroom import contextual
from classroom.examples import BANK_PAIR
from labels import md_escape
from ui import state
from ui.models import current_source
from ui.runs import current_run
from ui.show import show_code, show_fig
from viz.contextual import cosine_by_depth

try:  # the training corpus's polysemy pairs (the trained model has seen both senses)
    from training.corpus import POLYSEMY_PAIRS
except ImportError:  # pragma: no cover - corpus module absent
    POLYSEMY_PAIRS = (("I ate an apple for lunch .", "Apple released a new phone .", "apple"),)

MAX_CHARS = 500
st.title("Contextual embeddings")
show_code("model.transformer.Transformer.run", what="the forward pass")
st.caption("An embedding table gives a word one vector whatever it means. Self-attention mixes in the other words, "
           "so after each layer the same word has a different vector in a different sentence.")

pretrained = current_source().real
# a real model: its own "bank" pair first (in place of the toy corpus's)
pairs = (BANK_PAIR,) + tuple(p for p in POLYSEMY_PAIRS if p[2] != BANK_PAIR[2]) if pretrained else POLYSEMY_PAIRS
a_default, b_default, w_default = pairs[0]
state.bound("ctx_a", a_default)
state.bound("ctx_b", b_default)
state.bound("ctx_word", w_default)


def use_pair(a: str, b: str, w: str) -> None:
    st.session_state.update(ctx_a=a, ctx_b=b, ctx_word=w)


cols = st.columns(len(pairs))
for i, (pa, pb, pw) in enumerate(pairs):
    cols[i].button(f"Example: “{pw}”", key=f"ctx_example_{i}", on_click=use_pair, args=(pa, pb, pw))
for k in ("ctx_a", "ctx_b"):  # a link may carry a longer value than the box allows
    st.session_state[k] = str(st.session_state.get(k, ""))[:MAX_CHARS]
c1, c2 = st.columns(2)
text_a = c1.text_input("Sentence A", key="ctx_a", max_chars=MAX_CHARS)
text_b = c2.text_input("Sentence B", key="ctx_b", max_chars=MAX_CHARS)
if not text_a.strip() or not text_b.strip():
    st.info("Type a sentence in both boxes: the page compares one word across the two.", icon=":material/edit:")
    state.end_page()
run_a = current_run(text=text_a, notices=False)
run_b = current_run(text=text_b, notices=False)
words = contextual.common_words(run_a.labels, run_b.labels)
if not words:
    st.warning("No word appears in both sentences. Put the same word in both (for example “apple” in "
               "“i ate an apple” and “apple released a phone”).", icon=":material/search:")
    state.end_page()
# the example's word, else the first whose two vectors can differ (issue 33: SmolLM2 opened on
# token 0, the same under the causal mask in both sentences)
state.fix("ctx_word", words, contextual.default_word(words, run_a.ids, run_b.ids, run_a.labels, run_b.labels,
                                                     run_a.causal, preferred=w_default))
word = st.selectbox("Word to compare (only words found in both sentences are offered)", words, key="ctx_word")
ia, ib = contextual.find_word(run_a.labels, word), contextual.find_word(run_b.labels, word)
if contextual.same_context(run_a.ids, run_b.ids, ia, ib, run_a.causal):
    st.info(f"Under the causal mask “{md_escape(word)}” sees only itself and the tokens before it, and those are the "
            "same in both sentences: its vector is the same at every depth (cosine 1 throughout). Pick a word that "
            "comes after the sentences differ, or switch the mask to bidirectional.", icon=":material/info:")
unk = [s for s, r in (("A", run_a), ("B", run_b)) if any(contextual.word_key(u) == word for u in r.unknown)]
if unk:
    st.caption(f"“{md_escape(word)}” is not in this model's vocabulary: it is computed as `{run_a.unk_token}` (so the token "
               "embeddings still match, and the context still changes the later vectors).")
for r, name in ((run_a, "A"), (run_b, "B")):
    if r.truncated or r.text_cut:
        st.caption(f"Sentence {name} is longer than the model's maximum length; only the first {r.T} tokens are used.")
if run_a.causal:
    st.caption("Causal mask: a word sees only itself and the words before it, so context after it cannot change "
               "its vector. Switch the mask to bidirectional in the sidebar to let both sides count.")

names, sa = contextual.stage_states(run_a.trace)
_, sb = contextual.stage_states(run_b.trace)
res = contextual.contextual_similarity(sa, sb, ia, ib, run_a.labels, run_b.labels, k=3)
sim_table = pd.DataFrame({"cosine(A, B)": res.cosine,
                          "nearest to A's word": ["; ".join(f"{l} ({c:.2f})" for l, c in n) for n in res.nearest_a],
                          "nearest to B's word": ["; ".join(f"{l} ({c:.2f})" for l, c in n) for n in res.nearest_b]},
                         index=pd.Index(names, name="stage"))
m1, m2 = st.columns(2)
m1.metric("cosine at the token embedding", f"{res.cosine[0]:.4f}")
m2.metric("cosine after the last layer", f"{res.cosine[-1]:.4f}", delta=f"{res.cosine[-1] - res.cosine[0]:+.4f}")
show_fig(cosine_by_depth(names, res.cosine, name=f"cosine of “{word}” in A vs B",
                         title="Same word, two contexts: cosine similarity by depth"),
         "ctx_cosine", table=sim_table,
         alt="1.0 at the token embedding (the same row of the table); position and then each layer's attention pull them apart.")
st.markdown(f"Token {ia} of A and token {ib} of B. Nearest other tokens (by cosine, among both sentences' tokens; "
            "A3 = token 3 of sentence A):")
st.dataframe(sim_table, width="stretch")
