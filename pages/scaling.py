"""Scaling & softmax: raw scores QKᵀ vs scores / √d_k, their softmaxes, a temperature, and an
experiment showing why the scale keeps the softmax out of saturation."""
import numpy as np
import pandas as pd
import streamlit as st

from classroom import scaling
from labels import token_label
from ui import state
from ui.models import architecture
from ui.runs import current_run
from ui.show import ATTENTION_CODE, show_code, show_fig
from viz.charts import bar_compare, line_chart

st.title("Scaling & softmax")
show_code(*ATTENTION_CODE, what="scaling and softmax")
st.caption("Attention weights are softmax(QKᵀ / √d_k). Why divide by √d_k? Pick a query below and "
           "compare the softmax of the raw scores with the softmax of the scaled ones.")
run = current_run()
cfg = run.cfg
layers, heads = list(range(cfg.n_layers)), list(range(cfg.n_heads))
for key, opts in (("sc_layer", layers), ("sc_head", heads)):
    state.bound(key, 0)
    state.fix(key, opts)
state.bound("sc_query", run.T - 1)
state.fix("sc_query", list(range(run.T)), run.T - 1)
state.bound("sc_temp", 1.0)
if not 0.1 <= float(st.session_state.get("sc_temp", 1.0)) <= 5.0:
    st.session_state["sc_temp"] = 1.0

c1, c2, c3, c4 = st.columns(4)
layer = c1.selectbox("Layer", layers, key="sc_layer")
head = c2.selectbox("Head", heads, key="sc_head")
qi = c3.selectbox("Query token", list(range(run.T)), key="sc_query",
                  format_func=lambda i: token_label(i, run.labels[i], sep=": "))
temp = c4.slider("Temperature", 0.1, 5.0, step=0.1, key="sc_temp",
                 help="softmax(x / temperature): below 1 sharpens, above 1 flattens.")

attn = run.trace.layers[layer].attn  # AttentionTrace (numpy, B = 1)
scores = attn.scores[0, head]  # (T, T)
allowed = np.broadcast_to(attn.allowed, attn.scores.shape)[0, head]  # (T, T)
keys = np.flatnonzero(allowed[qi])
if keys.size == 0:
    st.info("This query may not attend to any key (fully masked row): nothing to normalise.")
    state.end_page()
row = scaling.scaling_row(scores[qi, keys], cfg.d_k, float(temp))
key_labels = [run.labels[j] for j in keys]
st.markdown(f"{architecture(run.source, cfg).d_k_markdown}, √d_k = **{np.sqrt(cfg.d_k):.4g}**. "
            f"Query {qi} attends to {keys.size} key(s)" + (" (causal mask: itself and earlier tokens)." if run.causal else "."))
if not cfg.scale_scores:
    st.warning("This model was built without scaling (scale_scores=False): its own weights use the raw scores.")

m1, m2, m3, m4 = st.columns(4)
m1.metric("entropy, unscaled", f"{row.entropy_unscaled:.3f} bits")
m2.metric("entropy, scaled", f"{row.entropy_scaled:.3f} bits", help=f"maximum (uniform) = log2({keys.size}) = {row.max_entropy:.3f} bits")
m3.metric("max weight, unscaled", f"{row.max_unscaled:.4f}")
m4.metric("max weight, scaled", f"{row.max_scaled:.4f}")

table = pd.DataFrame({"key": [token_label(j, run.labels[j]) for j in keys], "score q·k": row.scores,
                      "score / √d_k": row.scaled, "softmax(score / T)": row.weights_unscaled,
                      "softmax(score / √d_k / T)": row.weights_scaled,
                      "model's weight": attn.weights[0, head, qi, keys]}).set_index("key")
left, right = st.columns(2)
with left:
    show_fig(bar_compare(key_labels, {"q·k (raw)": row.scores, "q·k / √d_k": row.scaled},
                         title="Scores: raw vs scaled", yaxis="score"),
             "sc_scores", table=table, alt="Scaling divides every score by the same √d_k: the order stays, the gaps shrink.")
with right:
    show_fig(bar_compare(key_labels, {"softmax(raw)": row.weights_unscaled, "softmax(scaled)": row.weights_scaled},
                         title=f"Softmax weights (temperature {temp:g})", yaxis="weight"),
             "sc_weights", table=table, alt="Smaller gaps give a flatter softmax (higher entropy).")
st.dataframe(table, width="stretch")

st.subheader("Experiment: why √d_k?")
st.caption("Random q and k with independent unit-variance components (fixed seed). q·k is a sum of d_k "
           "such products, so its variance is d_k; dividing by √d_k brings it back to 1.")
var = scaling.variance_experiment()
ent = scaling.entropy_experiment()
e1, e2 = st.columns(2)
vt = pd.DataFrame({"d_k": var.d_k, "sampled Var(q·k)": var.var_sampled, "theory d_k": var.var_theory,
                   "sampled Var(q·k/√d_k)": var.var_scaled_sampled}).set_index("d_k")
with e1:
    show_fig(line_chart(var.d_k, {"sampled Var(q·k)": var.var_sampled, "theory: d_k": var.var_theory,
                                     "sampled Var(q·k / √d_k)": var.var_scaled_sampled},
                        title=f"Variance of q·k vs d_k ({var.n_samples} samples each)", xaxis="d_k",
                        yaxis="variance", log_x=True, log_y=True, dashed=["theory: d_k"]),
             "sc_variance", table=vt, alt="Sampled points follow the dashed theory line Var = d_k; scaled stays ≈ 1.")
et = pd.DataFrame({"d_k": ent.d_k, "entropy unscaled (bits)": ent.entropy_unscaled,
                   "entropy scaled (bits)": ent.entropy_scaled, "max weight unscaled": ent.max_weight_unscaled,
                   "max weight scaled": ent.max_weight_scaled}).set_index("d_k")
with e2:
    show_fig(line_chart(ent.d_k, {"without scaling": ent.entropy_unscaled, "with 1/√d_k": ent.entropy_scaled,
                                     f"uniform: log2({ent.n_keys})": np.full(len(ent.d_k), ent.max_entropy)},
                        title=f"Mean softmax entropy over {ent.n_keys} keys vs d_k", xaxis="d_k",
                        yaxis="entropy (bits)", log_x=True, dashed=[f"uniform: log2({ent.n_keys})"]),
             "sc_entropy", table=et, alt="Without scaling the softmax saturates (entropy → 0: one key takes everything).")
with st.expander("Experiment numbers"):
    st.dataframe(vt.join(et), width="stretch")

st.subheader("Worked example from the notes")
ex = scaling.worked_scaling_example()
st.markdown(
    f"q = [2, 3, 4, 1], k₁ = [1, 0, 1, 0], k₂ = [0, 1, 0, 1] → scores **[{ex.scores[0]:g}, {ex.scores[1]:g}]**.\n\n"
    f"- Without scaling: softmax([6, 4]) = **[{ex.weights_unscaled[0]:.4f}, {ex.weights_unscaled[1]:.4f}]**\n"
    f"- With scaling by √d_k = √4 = **{ex.sqrt_d_k:g}**: [6, 4] / 2 = [3, 2], softmax([3, 2]) = "
    f"**[{ex.weights_scaled[0]:.4f}, {ex.weights_scaled[1]:.4f}]**")
st.caption("A slip in the lecture notes: they write “√d_k = √4 = √2” and divide by √2; the division "
           "that gives [3, 2] is by √4 = 2 (6/√2 would be 4.24). The resulting weights [0.73, 0.27] are right.")
st.dataframe(pd.DataFrame({"score": ex.scores, "softmax (unscaled)": ex.weights_unscaled,
                           "score / √4": ex.scaled, "softmax (scaled)": ex.weights_scaled},
                          index=["k₁", "k₂"]).round(4), width="content")
