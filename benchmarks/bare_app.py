"""The baseline: a bare Streamlit app that draws one Plotly heatmap of a sentence.

Same widget the load drives (a "Sentence" text area) and a heatmap of the same kind and size as one
attention head (T x T, values in 0..1, token labels), but no model and no sidebar logic. Every
benchmark runs this next to the real app, under the same load, in the same run, and reports ratios.
Run it alone: `streamlit run benchmarks/bare_app.py`.

`?panels=4` (or the environment variable BARE_APP_PANELS=4, for the WebSocket load whose clients
send no query) draws that many heatmaps instead, in a 2-column grid with shared axes (labels on the
outer axes only, as the heads page does): a reference the keystroke benchmark reports next to the
one-heatmap baseline, to separate the cost of the number of heatmaps from the cost of the page.
"""
import math
import os

import numpy as np
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

text = st.text_input("Sentence", "the keys to the cabinet are on the table .", key="text")
words = text.split()[:64] or ["(empty)"]
labels = [f"{i}:{w}" for i, w in enumerate(words)]
rng = np.random.default_rng(len(text))
try:
    panels = min(16, max(1, int(st.query_params.get("panels", os.environ.get("BARE_APP_PANELS", 1)))))
except ValueError:
    panels = 1


def head() -> np.ndarray:
    z = rng.random((len(words), len(words)))
    return z / z.sum(axis=1, keepdims=True)


if panels == 1:
    fig = go.Figure(go.Heatmap(z=head(), x=labels, y=labels, zmin=0, zmax=1, colorscale="Cividis"))
    fig.update_yaxes(autorange="reversed")
else:
    cols = 2
    rows = math.ceil(panels / cols)
    fig = make_subplots(rows=rows, cols=cols, shared_xaxes=True, shared_yaxes=True,
                        subplot_titles=[f"head {h}" for h in range(panels)])
    for h in range(panels):
        fig.add_trace(go.Heatmap(z=head(), x=labels, y=labels, zmin=0, zmax=1, colorscale="Cividis",
                                 coloraxis="coloraxis"), row=h // cols + 1, col=h % cols + 1)
    fig.update_layout(coloraxis={"colorscale": "Cividis", "cmin": 0, "cmax": 1}, height=350 * rows)
    fig.update_yaxes(autorange="reversed")
st.plotly_chart(fig, key="heatmap", width="stretch")
