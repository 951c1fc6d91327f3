"""Attention Lab: the router. Shared sidebar controls, then st.navigation over the pages."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

st.set_page_config(page_title="Attention Lab", page_icon="🔍", layout="wide")

from ui import sidebar, state  # noqa: E402  (after set_page_config)

ROOT = Path(__file__).resolve().parent

# (section, file, title, url_path, icon). A page file that does not exist yet is skipped.
PAGES = [
    ("Attention", "pages/heads.py", "Attention heads", "heads", "🔍"),
    ("Attention", "pages/overview.py", "All heads overview", "overview", "🗂️"),
    ("Attention", "pages/causal_vs_bidirectional.py", "Causal vs bidirectional", "causal-vs-bidirectional", "↔️"),
    ("Attention", "pages/mask_lab.py", "Mask lab", "mask-lab", "🎭"),
    ("Concepts", "pages/scaling.py", "Scaling & softmax", "scaling", "📏"),
    ("Concepts", "pages/positional.py", "Positional encoding", "positional", "〰️"),
    ("Concepts", "pages/layernorm.py", "Layer norm & residuals", "layer-norm", "⚖️"),
    ("Concepts", "pages/multihead.py", "Multi-head mechanics", "multi-head", "🧩"),
    ("Concepts", "pages/ffn_output.py", "FFN & output layer", "ffn-output", "🎯"),
    ("Concepts", "pages/contextual.py", "Contextual embeddings", "contextual", "🍎"),
    ("Concepts", "pages/cost.py", "Cost of attention", "cost", "⏱️"),
    ("Models", "pages/encoder_decoder.py", "Encoder–decoder", "encoder-decoder", "🔁"),
    ("Models", "pages/train.py", "Train a model", "train", "🏋️"),
    ("Classroom", "pages/calculator.py", "Calculator", "calculator", "🧮"),
    ("Classroom", "pages/lesson.py", "Lesson mode", "lesson", "🎓"),
]

nav: dict[str, list] = {}
for section, file, title, url, icon in PAGES:
    if (ROOT / file).exists():
        nav.setdefault(section, []).append(
            st.Page(file, title=title, url_path=url, icon=icon, default=(url == "heads")))

state.begin_run()
sidebar.render()
pg = st.navigation(nav)
try:
    pg.run()
finally:
    state.sync_url()
