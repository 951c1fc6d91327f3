"""Gradients you can see: three claims of the notes, each next to the measurement that shows it
(classroom/gradients.py; cached in ui/gradients.py)."""
import pandas as pd
import streamlit as st

from classroom import gradients
from ui import gradients as grad_ui
from ui.show import show_code, show_fig
from viz.charts import bar_compare, line_chart

st.title("Gradients you can see")
show_code("model.attention.masked_softmax", "model.layers.Block.forward", what="softmax, residuals and norms")
st.caption("Learning follows gradients. Three design choices of the transformer exist to keep them useful; "
           "each claim below is measured on this machine with a fixed seed (the same numbers on every run).")

st.subheader("1 · Scaling keeps gradients alive")
ex = grad_ui.softmax_experiment()
dks = ex.d_k
sc, un = ex.scaled, ex.unscaled
st.markdown(
    f"Random queries and keys (entries N(0, 1), {ex.n_samples} queries × {ex.n_keys} keys per d_k). "
    "Their dot products have variance d_k; the softmax of large scores puts almost all weight on one key, "
    "and its Jacobian ∂p/∂z = diag(p) − p pᵀ (measured with autograd) is then almost all zeros: "
    "hardly any gradient reaches the queries and keys. Dividing by √d_k keeps the scores at variance 1.")
c1, c2 = st.columns(2)
with c1:
    show_fig(line_chart(dks, {"scaled q·k / √d_k": 100 * sc.near_zero, "unscaled q·k": 100 * un.near_zero},
                        title=f"Share of softmax gradient entries |∂p_i/∂z_j| < {ex.near_zero_below:g} (%)",
                        xaxis="d_k", yaxis="% near zero", log_x=True), "grad_near_zero",
             alt=f"Without scaling the share of near-zero gradients grows from {100 * un.near_zero[0]:.0f}% at "
                 f"d_k = {dks[0]} to {100 * un.near_zero[-1]:.1f}% at d_k = {dks[-1]}; with scaling it stays "
                 f"between {100 * sc.near_zero.min():.0f}% and {100 * sc.near_zero.max():.0f}%.")
with c2:
    show_fig(line_chart(dks, {"scaled q·k / √d_k": sc.norm, "unscaled q·k": un.norm},
                        title="Size of the softmax gradient: mean ‖∂p/∂z‖ (Frobenius)", xaxis="d_k",
                        yaxis="gradient norm", log_x=True), "grad_norm",
             alt=f"Without scaling the gradient norm falls from {un.norm[0]:.3f} to {un.norm[-1]:.3f} as d_k grows "
                 f"to {dks[-1]}; with scaling it stays near {sc.norm.mean():.3f}.")
st.dataframe(pd.DataFrame({"d_k": dks, "score std, scaled": sc.score_std, "score std, unscaled": un.score_std,
                           "largest weight, scaled": sc.max_weight, "largest weight, unscaled": un.max_weight,
                           "% near-zero, scaled": 100 * sc.near_zero, "% near-zero, unscaled": 100 * un.near_zero,
                           "‖J‖, scaled": sc.norm, "‖J‖, unscaled": un.norm}).set_index("d_k"),
             width="stretch")

st.subheader("2 · Residuals let gradients flow through depth · 3 · Layer norm stabilises training")
st.markdown(f"Four tiny causal language models (6 layers, d_model 32, 4 heads, pre-LN) trained for "
            f"{grad_ui.STEPS} steps on the built-in corpus with the same seed and the same batches "
            "(Adam, no gradient clipping): with skip connections and layer norm, without skips "
            "(each block's output replaces its input), without layer norm, and without both.")
runs = grad_ui.training_runs()
summary = gradients.summarize(runs)
steps = runs[0].steps
show_fig(line_chart(steps, {r.name: r.losses for r in runs}, title="Training loss per step",
                    xaxis="step", yaxis="cross-entropy (nats)", markers=False), "grad_loss",
         table=pd.DataFrame({r.name: r.losses for r in runs}, index=pd.Index(steps, name="step")))
L = runs[0].grad_norms.shape[1]
blocks = [f"block {i}" for i in range(L)]
mean_norms = {r.name: r.mean_grad_norms for r in runs}
show_fig(bar_compare(blocks, mean_norms, tokens=False, title="Gradient norm of each block's parameters (mean over training)",
                     yaxis="‖∂loss/∂θ_block‖ (log scale)", log_y=True), "grad_layers",
         table=pd.DataFrame(mean_norms, index=pd.Index(blocks, name="block")))
rows = pd.DataFrame({"first loss": [r.first_loss for r in summary], "largest loss": [r.largest_loss for r in summary],
                     f"mean loss, last {summary[0].last} steps": [r.mean_loss_last for r in summary],
                     "grad norm, block 0": [r.grad_norm_first for r in summary],
                     "grad norm, last block": [r.grad_norm_last for r in summary],
                     "block 0 ÷ last block": [r.first_over_last for r in summary]},
                    index=pd.Index([r.run for r in summary], name="run"))
st.dataframe(rows.style.format("{:.3f}"), width="stretch")

by_run = {r.run: r for r in summary}
full, nores, noln = (by_run[n] for n in ("residual + layer norm", "no residual", "no layer norm"))
st.markdown(
    f"**Residuals let gradients flow through depth.** Without skip connections the first block receives "
    f"{nores.first_over_last:.3f}× the gradient of the last one (with them: "
    f"{full.first_over_last:.2f}×): the signal shrinks at every block it passes through "
    f"backwards. Its loss ends at {nores.mean_loss_last:.2f}, against {full.mean_loss_last:.2f} with skips.\n\n"
    f"**Layer norm stabilises training.** Without layer norm the untrained model's first loss is "
    f"{noln.first_loss:.1f} (with it: {full.first_loss:.2f}, near the uniform guess's ln |V| = "
    f"{runs[0].uniform_loss:.2f}), and its gradients are {noln.grad_norm_first / full.grad_norm_first:.0f}× larger in block 0 "
    f"(mean over training): nothing holds the scale of the activations in check. Its loss ends at "
    f"{noln.mean_loss_last:.2f}, against {full.mean_loss_last:.2f} with layer norm.")
