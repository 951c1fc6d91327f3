"""Attention heads: every head of one layer as a heatmap grid."""
import streamlit as st

from ui import state
from ui.compute import current_run
from ui.show import show_fig
from viz.attention import head_grid

st.title("Attention heads")
run = current_run()
state.bound("layer", 0)
state.fix("layer", list(range(run.cfg.n_layers)))
layer = st.selectbox("Layer", list(range(run.cfg.n_layers)), key="layer")
w = run.a(f"layers.{layer}.attn.weights")  # (H, T, T)
allowed = run.arrays[f"layers.{layer}.attn.allowed"]
fig = head_grid(w, run.labels, allowed=allowed if allowed.ndim == 2 else allowed[0],
                title=f"Layer {layer}: {'causal' if run.causal else 'bidirectional'} attention")
show_fig(fig, "heads_grid", alt="Rows are queries, columns are keys; grey cells are masked.")
