"""Lesson mode: one attention computation on the sidebar's sentence, one step per screen, with
predict-then-reveal questions (classroom/lesson.py builds the steps and questions from the live trace)."""
import streamlit as st

from classroom.lesson import answer_context, build_lesson
from labels import token_label
from ui import lesson as L
from ui import state
from ui.models import architecture
from ui.runs import current_run
from ui.show import show_fig

L.present_css()
st.title("Lesson mode")
run = current_run()
H, T = run.cfg.n_heads, run.T
N_STEPS = 9

state.bound("lesson_step", 1)
state.bound("lesson_head", 0)
state.bound("lesson_query", T - 1)
state.fix("lesson_step", list(range(1, N_STEPS + 1)), 1)
state.fix("lesson_head", list(range(H)), 0)
state.fix("lesson_query", list(range(T)), T - 1)


def _go(delta: int) -> None:
    st.session_state["lesson_step"] = min(N_STEPS, max(1, st.session_state["lesson_step"] + delta))


def _leave_present() -> None:
    st.session_state["present"] = False


if L.presenting():
    st.button("Leave presentation mode", key="lesson_leave_present", on_click=_leave_present)

c1, c2 = st.columns(2)
c1.selectbox("Head", list(range(H)), key="lesson_head", format_func=lambda h: f"head {h}")
c2.selectbox("Follow the query token", list(range(T)), key="lesson_query",
             format_func=lambda i: token_label(i, run.labels[i]),
             help="The questions and the numbers in the text follow this row.")
steps = build_lesson(run.trace, run.labels, n_heads=H, causal=run.causal, norm=run.cfg.norm,
                     head=st.session_state["lesson_head"], query=st.session_state["lesson_query"],
                     arch=architecture(run.source, run.cfg))
# A question's answer depends on the model, the sentence, the mask, the head and the query token: its
# widgets and its revealed state are keyed by all of them (classroom.lesson.answer_context), so a
# change of head shows a fresh question instead of grading the old pick against the new answer.
ctx = answer_context(run.source, run.ids, run.causal, st.session_state["lesson_head"], st.session_state["lesson_query"])
n = st.session_state["lesson_step"]
step = steps[n - 1]

st.progress(n / N_STEPS, text=f"Step {n} of {N_STEPS} · layer 0 · "
            f"{'causal' if run.causal else 'bidirectional'} · {T:,} tokens")


def show_step() -> None:
    """The step's formula, explanation and numbers (after its questions)."""
    st.latex(step.formula)
    st.markdown(step.text)

    if step.matrix is not None:
        big = L.presenting()
        if step.heatmap:
            show_fig(L.step_heatmap(step, run.labels, big), f"lesson_fig_{step.key}",
                     table=L.frame(step.matrix, step.rows, step.cols), alt="Rows are queries, columns are keys; grey cells are masked.", filename=f"lesson-{step.key}")
            if T <= 16:
                with st.expander("The numbers", expanded=False):
                    L.show_table(step.matrix, step.rows, step.cols, key=f"lesson_tab_{step.key}", nd=3)
        else:
            L.show_table(step.matrix, step.rows, step.cols, key=f"lesson_tab_{step.key}", nd=3,
                         max_cols=6 if big else 8)


def _reveal_all(keys: tuple[str, ...]) -> None:
    for key in keys:
        st.session_state[f"{key}__revealed"] = True


st.header(step.title)
# Predict, then reveal (issue 21): the step's questions come first; its explanation, formula and
# numbers (which hold the answers) appear once every question of the step has been checked.
qkeys = tuple(f"lq_{q.id}_{ctx}" for q in step.questions)
answered = all(st.session_state.get(f"{k}__revealed") for k in qkeys)
for q, k in zip(step.questions, qkeys):
    with st.container(border=True):
        L.question(q, key=k)
if step.questions and not answered:
    st.info("Predict first: the explanation and the numbers of this step appear once you check your answer.",
            icon=":material/visibility_off:")
    st.button("Show them without predicting", key=f"lesson_show_{step.key}", on_click=_reveal_all,
              args=(qkeys,))
else:
    show_step()

st.divider()
b1, b2, b3 = st.columns([1, 2, 1])
b1.button("◀ Back", key="lesson_back", on_click=_go, args=(-1,), disabled=n == 1, width="stretch")
b2.markdown(f"step {n} / {N_STEPS}", text_alignment="center")
b3.button("Next ▶", key="lesson_next", on_click=_go, args=(1,), disabled=n == N_STEPS, width="stretch")
