"""Heads as experts: on the real models, which heads do a linguistic job (pronoun → antecedent,
verb → subject), scored over built-in sentences (classroom/experts.py)."""
import pandas as pd
import streamlit as st

from classroom.experts import TASKS
from labels import md_escape
from ui import state
from ui.experts import causal, expert_scores, load_error, real_models, title
from ui.models import current_source
from ui.show import show_code, show_fig
from viz.charts import bar_compare, matrix_heatmap

st.title("Heads as experts")
show_code("classroom.experts.find_experts", what="scoring the heads")
st.markdown("Some heads of a trained model do a job you can name, beyond \"look one token back\". "
            "Here every head of a real pretrained model is scored on a small set of built-in sentences: "
            "how much attention the **query word** (a pronoun, a verb) gives to the word it depends on "
            "(its antecedent, its subject).")

names = real_models()
src = current_source()
state.bound("ex_model", src.name if src.kind == "pretrained" and src.name in names else names[0])
state.fix("ex_model", names)
name = st.selectbox("Model", names, key="ex_model", format_func=title,
                    help="Real models only: the teaching models' 309-word vocabulary has none of these sentences' words.")
state.bound("ex_task", next(iter(TASKS)))
state.fix("ex_task", list(TASKS))
task = st.segmented_control("Job", list(TASKS), key="ex_task") or next(iter(TASKS))

err = load_error(name)
if err:
    st.error(err)
    state.end_page()
res = expert_scores(name, task)
L, H = res.score.shape
top = res.top(10)
best = top[0]
st.markdown(f"**Best head: layer {best.layer}, head {best.head}.** Over {len(res.sentences)} sentences its query word gives "
            f"the target word **{best.score:.2f}** of its attention on average (a head spreading evenly would give "
            f"{res.baseline:.2f}), and the target is its strongest link in **{best.hit_rate:.0%}** of the sentences.")
c1, c2 = st.columns([1, 1])
with c1:
    show_fig(matrix_heatmap(res.score, [f"L{l}" for l in range(L)], [f"H{h}" for h in range(H)], tokens_rows=False,
                            colorscale="Viridis", zmid=None, zmin=0, zmax=max(1e-9, float(res.score.max())),
                            annotate=H <= 8 and H * L <= 96, row_title="layer", col_title="head", value_name="mean weight",
                            title=f"Mean attention weight, query → target ({L} × {H} heads)",
                            height=max(320, 22 * L + 120)),
             "ex_grid", table=pd.DataFrame(res.score, index=[f"layer {l}" for l in range(L)],
                                           columns=[f"head {h}" for h in range(H)]),
             alt="One cell per head: the mean over the sentences of the weight the query word gives the target word.")
with c2:
    table = pd.DataFrame({"layer": [t.layer for t in top], "head": [t.head for t in top], "score": [t.score for t in top],
                          "hit rate": [t.hit_rate for t in top], "far score": [t.far for t in top],
                          "prev-token weight": [t.previous for t in top]})
    table.index = range(1, len(table) + 1)
    st.dataframe(table.style.format({"score": "{:.3f}", "hit rate": "{:.0%}", "far score": "{:.3f}",
                                     "prev-token weight": "{:.3f}"}), width="stretch")
    st.caption("Top 10 heads. **Score**: mean weight query → target. **Hit rate**: share of sentences where the target "
               "gets the head's largest weight among the ordinary tokens ([CLS]/[SEP], the query itself"
               + (" and the first token, where causal models park spare weight," if causal(name) else "")
               + " left out). **Far score**: the score over the sentences whose target is 2 or more tokens back. "
               "**Prev-token weight**: the weight on the token just before the query. These two separate a real expert "
               "from a position rule: the target sits "
               f"{min(res.distances)}–{max(res.distances)} tokens before the query, so a previous-token head scores "
               "high on the previous token, not on the target.")

st.subheader("The sentences")
state.bound("ex_head", f"L{best.layer} H{best.head}")
options = [f"L{t.layer} H{t.head}" for t in top]
state.fix("ex_head", options)
pick = st.selectbox("Head", options, key="ex_head")
pl, ph = (int(x[1:]) for x in pick.split())
rows = res.sentence_weights(pl, ph)
df = pd.DataFrame({"sentence": [r.sentence for r in rows], "query": [r.query for r in rows],
                   "target": [r.target for r in rows], "tokens back": [r.tokens_back for r in rows],
                   "weight": [r.weight for r in rows]})
show_fig(bar_compare([f"{r.query} → {r.target}" for r in rows], {"weight": [r.weight for r in rows]},
                     tokens=True, text_format=".2f", yaxis="attention weight", height=320,
                     title=f"Layer {pl}, head {ph}: weight from the query word to its target, sentence by sentence"),
         "ex_sentences", table=df)
st.dataframe(df.style.format({"weight": "{:.3f}"}), width="stretch", hide_index=True)
if src.kind == "pretrained" and src.name == name:  # the sidebar already runs this model
    st.caption("Built-in sentences (fixed, so the scores can be checked). The sidebar already runs "
               f"{md_escape(title(name))}: open Attention heads (layer {pl}, head {ph}) to see this head on your own "
               "sentence.")
else:
    st.caption("Built-in sentences (fixed, so the scores can be checked). Switch the Model box in the sidebar to "
               f"{md_escape(title(name))} and open Attention heads to see this head on your own sentence.")
