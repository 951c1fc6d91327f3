"""Gradients you can see: three claims of the notes, each next to the measurement that shows it
(classroom/gradients.py; cached in ui/gradients.py)."""
import numpy as np
import pandas as pd
import streamlit as st

from classroom import gradients
from ui import gradients as grad_ui
from ui import state
from ui.show import show_code, show_fig
from viz.charts import bar_compare, line_chart

st.title("Gradients you can see")
show_code("model.attention.masked_softmax", "model.layers.Block.forward", what="softmax, residuals and norms")
st.caption("Learning follows gradients. Three design choices of the transformer exist to keep them useful; "
           "each claim below is measured on this machine with a fixed seed (the same numbers on every run).")

st.subheader("1 · Scaling keeps gradients alive")
for key, default in (("grad_dk", 256), ("grad_keys", 16)):
    state.bound(key, default)
state.fix("grad_dk", grad_ui.DK_CHOICES, 256)
state.fix("grad_keys", grad_ui.KEY_CHOICES, 16)
k1, k2 = st.columns(2)
my_dk = k1.select_slider("Your d_k (width of queries and keys)", grad_ui.DK_CHOICES, key="grad_dk",
                         help="Added to the curves below and compared, scaled and unscaled, in the numbers under them.")
n_keys = k2.select_slider("Keys per query", grad_ui.KEY_CHOICES, key="grad_keys",
                          help="How many keys each query's softmax spreads its weight over.")
dk_grid = tuple(sorted(set(gradients.DK_GRID) | {int(my_dk)}))
ex = grad_ui.softmax_experiment(dk_grid, int(n_keys))
dks = ex.d_k
sc, un = ex.scaled, ex.unscaled
mine = int(np.flatnonzero(dks == my_dk)[0])
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
                           "‖J‖, scaled": sc.norm, "‖J‖, unscaled": un.norm,
                           "median ‖∂p/∂q‖, scaled": sc.q_grad_median, "median ‖∂p/∂q‖, unscaled": un.q_grad_median,
                           "% queries without gradient, unscaled": 100 * un.q_grad_dead}).set_index("d_k"),
             width="stretch")
st.markdown(
    f"**Your d_k = {my_dk}, {n_keys} keys.** Unscaled, the scores spread with standard deviation "
    f"{un.score_std[mine]:.1f} (scaled: {sc.score_std[mine]:.2f}); the largest weight averages "
    f"{un.max_weight[mine]:.3f} (scaled: {sc.max_weight[mine]:.3f}), and {100 * un.near_zero[mine]:.0f}% of the softmax's "
    f"gradient entries are near zero (scaled: {100 * sc.near_zero[mine]:.0f}%).\n\n"
    f"**“Exploding”? The notes (004) say a large d_k makes gradients explode.** Measured, it is the *scores* that "
    f"grow (their spread is √d_k); the softmax then saturates and the gradient that reaches a query, "
    f"‖∂p/∂q‖ = ‖J K‖, **vanishes** for the typical query: its median is {un.q_grad_median[mine]:.2g} unscaled "
    f"against {sc.q_grad_median[mine]:.2g} scaled, and {100 * un.q_grad_dead[mine]:.0f}% of the queries get less than "
    f"{gradients.DEAD_BELOW:g} (scaled: {100 * sc.q_grad_dead[mine]:.0f}%). The few queries whose top two scores "
    f"nearly tie still get a large gradient (the unscaled mean is {un.q_grad[mine]:.2f}): learning becomes erratic, "
    "mostly stalled, not exploding. Scaling keeps every query's gradient near the same size.")

st.subheader("2 · Residuals let gradients flow through depth · 3 · Layer norm stabilises training")
state.bound("grad_depth", grad_ui.DEFAULT_DEPTH)
state.fix("grad_depth", grad_ui.DEPTHS, grad_ui.DEFAULT_DEPTH)
state.bound("grad_steps", grad_ui.STEPS)
state.fix("grad_steps", grad_ui.STEP_CHOICES, grad_ui.STEPS)
names = list(gradients.VARIANTS)
if "grad_runs" not in st.session_state:
    st.session_state["grad_runs"] = names
d1, d2, d3 = st.columns([1, 2, 1])
depth = d1.slider("Depth (layers)", 1, max(grad_ui.DEPTHS), key="grad_depth",
                  help="How many blocks each model stacks. Deeper models take longer to train (about linearly).")
chosen = d2.multiselect("Runs (with / without)", names, key="grad_runs",
                        help="Each run trains the same model (same seed, same batches) with or without skip "
                             "connections and layer norm.") or names[:1]
n_steps = d3.select_slider("Training steps", grad_ui.STEP_CHOICES, key="grad_steps")
chosen = tuple(n for n in names if n in chosen)  # the registry's order: the same run gives the same numbers
st.markdown(f"{len(chosen)} tiny causal language model(s) ({depth} layer{'s' if depth > 1 else ''}, d_model 32, 4 heads, "
            f"pre-LN) trained for {n_steps} steps on the built-in corpus with the same seed and the same batches "
            "(Adam, no gradient clipping): " + ", ".join(chosen) + ". Without skips each block's output replaces its "
            "input; without layer norm nothing rescales the activations.")
job = grad_ui.runs_job(int(depth), chosen, int(n_steps))


@st.fragment(run_every=1.0 if not job.done.is_set() else None)
def wait_for_runs() -> None:
    """Progress of the background training; a full rerun shows the results when it is done."""
    if job.done.is_set():
        st.rerun()
    st.progress(job.progress, text=f"Training {len(chosen)} model(s) of {depth} layers in the background… "
                                   f"{job.progress:.0%} (the result is kept: the next visit is instant)")


if not job.done.is_set():
    wait_for_runs()
    state.end_page()
if job.error:
    st.error(f"The training failed: {job.error}")
    state.end_page()
runs = job.runs
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

full, nores, noln = (next((r for r in summary if r.run == name), None)
                     for name in ("residual + layer norm", "no residual", "no layer norm"))
parts = []
if full and nores:
    parts.append(
        f"**Residuals let gradients flow through depth.** Without skip connections the first block receives "
        f"{nores.first_over_last:.3f}× the gradient of the last one (with them: "
        f"{full.first_over_last:.2f}×): the signal shrinks at every block it passes through "
        f"backwards. Its loss ends at {nores.mean_loss_last:.2f}, against {full.mean_loss_last:.2f} with skips.")
if full and noln:
    parts.append(
        f"**Layer norm stabilises training.** Without layer norm the untrained model's first loss is "
        f"{noln.first_loss:.1f} (with it: {full.first_loss:.2f}, near the uniform guess's ln |V| = "
        f"{runs[0].uniform_loss:.2f}), and its gradients are {noln.grad_norm_first / full.grad_norm_first:.0f}× larger in block 0 "
        f"(mean over training): nothing holds the scale of the activations in check. Its loss ends at "
        f"{noln.mean_loss_last:.2f}, against {full.mean_loss_last:.2f} with layer norm.")
if parts:
    st.markdown("\n\n".join(parts) + (f"\n\nWith {depth} layer{'s' if depth > 1 else ''}: try 1 or 2 layers, where "
                                       "skips matter little, and 12, where they decide whether the first block learns."))
else:
    st.info("Keep “residual + layer norm” among the runs and add “no residual” or “no layer norm” to compare them.")
