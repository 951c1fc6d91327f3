"""The baseline: a bare Streamlit app that draws one Plotly heatmap of a sentence.

Same widget the load drives (a "Sentence" text area) and a heatmap of the same kind and size as one
attention head (T x T, values in 0..1, token labels), but no model and no sidebar logic. Every
benchmark runs this next to the real app, under the same load, in the same run, and reports ratios.
Run it alone: `streamlit run benchmarks/bare_app.py`.
"""
import numpy as np
import plotly.graph_objects as go
import streamlit as st

text = st.text_area("Sentence", "the keys to the cabinet are on the table .", key="text")
words = text.split()[:64] or ["(empty)"]
labels = [f"{i}:{w}" for i, w in enumerate(words)]
rng = np.random.default_rng(len(text))
z = rng.random((len(words), len(words)))
z = z / z.sum(axis=1, keepdims=True)
fig = go.Figure(go.Heatmap(z=z, x=labels, y=labels, zmin=0, zmax=1, colorscale="Cividis"))
fig.update_yaxes(autorange="reversed")
st.plotly_chart(fig, key="heatmap", width="stretch")
