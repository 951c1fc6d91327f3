"""Calculator: every step of scaled dot-product attention in numbers (editable inputs), the lecture
notes' worked examples as presets with the correct values, and small calculators (softmax with
temperature, layer norm, PE). Widgets and state: ui/calculator.py; numbers: classroom/worked_examples.py."""
import streamlit as st

from ui import calculator, lesson, search

lesson.present_css()
st.title("Attention calculator")
st.caption("Check your hand calculations: every number below comes from model.attention.attend, "
           "the same function the model uses (Q = X·W_Q with rows as tokens, as in the notes).")
calculator.render()
st.divider()
search.render()
