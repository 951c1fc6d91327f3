"""Layer norm & residuals: per-token statistics before/after LN, value histograms, gamma/beta,
the residual stream's norm across layers, pre-LN vs post-LN, batch norm vs layer norm."""
import numpy as np
import pandas as pd
import streamlit as st

from classroom import layer_norm
from labels import md_escape, token_labels
from ui import state
from ui.layer_norm import get_norm_placement
from ui.models import architecture
from ui.runs import current_run
from ui.show import show_code, show_fig
from viz.charts import bar_compare, histogram_compare, line_chart, matrix_heatmap
from viz.layer_norm import residual_norm_heatmap

st.title("Layer norm & residuals")
show_code("model.layers.layer_norm", "model.layers.RMSNorm.forward", "model.layers.Block.forward", what="norms and residuals")
run = current_run()
cfg = run.cfg
arch = architecture(run.source, cfg)  # this model's norm, ε and its provenance (classroom/architecture.py)
st.caption("Layer norm rescales each token's vector to mean 0 and variance 1 over its d_model features, "
           "then applies a learned scale γ and shift β: y = γ · (x − μ) / √(σ² + ε) + β. "
           + (f"This model uses **{arch.norm.name}** ({arch.norm.params}): {arch.norm.formula}."
              if arch.norm.kind != "none" else "This model has no norms (switched off)."))

sites = {} if run.trace.embeddings.ln is None else {"embeddings · LN": run.trace.embeddings.ln}  # BERT
sites |= {f"layer {l} · {name}": norm for l, block in enumerate(run.trace.layers)
         for name, norm in (("ln1", block.ln1), ("ln1_post", block.ln1_post), ("ln2", block.ln2),
                            ("ln2_post", block.ln2_post)) if norm is not None}  # label -> norm trace (Gemma 2: + _post)
if run.trace.final_ln is not None:
    sites["final LN" if arch.norm.kind == "layernorm" else f"final {arch.norm.name}"] = run.trace.final_ln
where = list(sites)
state.bound("ln_where", where[0])
state.fix("ln_where", where)
choice = st.selectbox("Layer norm", where, key="ln_where",
                      help=("This model is pre-norm: ln1 feeds attention, ln2 feeds the FFN." if cfg.norm == "pre" else
                            "This model is post-norm: ln1 follows x + attention, ln2 follows + FFN.")
                           + (" embeddings · LN: normalises token + position + type before block 0."
                              if run.trace.embeddings.ln is not None else ""))
st.caption(f"This model's {arch.norm.eps_note}")
norm = sites[choice]  # LayerNormTrace or NormTrace (numpy, B = 1), computed by model.layers
x_in, x_norm, x_out = norm.input[0], norm.normalized[0], norm.output[0]  # (T, D)
idx = token_labels(run.labels, plain=True)


def norm_view(stats: pd.DataFrame, bars: list[tuple[str, dict, str, str, str]], before: str, after: str,
              scale: dict, scale_title: str, scale_table: pd.DataFrame, scale_alt: str = "") -> None:
    """One norm, read from its trace: two per-token bar charts side by side (bars: key, series,
    title, y axis, alt each) over the statistics table `stats`, the table itself, every value of
    every token before and after the norm (histograms), and the learned per-feature γ (and β)."""
    for col, (key, series, title, yaxis, alt) in zip(st.columns(2), bars):
        with col:
            show_fig(bar_compare(run.labels, series, title=title, yaxis=yaxis), key, table=stats, alt=alt)
    st.dataframe(stats.style.format("{:.4f}"), width="stretch")
    h1, h2 = st.columns(2)
    with h1:
        show_fig(histogram_compare({before: x_in.ravel(), after: x_norm.ravel()}, title="All values of all tokens"),
                 "ln_hist",
                 table=lambda: pd.DataFrame({"before": x_in.ravel(), "normalized": x_norm.ravel(), "output": x_out.ravel()}))
    with h2:
        show_fig(line_chart(np.arange(cfg.d_model), scale, title=scale_title, xaxis="feature", yaxis="value", markers=False),
                 "ln_gamma_beta", table=scale_table, alt=scale_alt)


if getattr(norm, "kind", "") == "rmsnorm":  # Llama-style (SmolLM2): RMSNorm, no mean, no shift
    st.info("This model uses **RMSNorm** (Llama, SmolLM2): y = γ · x / √(mean(x²) + ε). It skips layer norm's mean "
            "subtraction and its shift β: each token's vector is only rescaled to root-mean-square 1. Cheaper, and "
            "in practice as stable.", icon=":material/info:")
    rs = layer_norm.rms_norm_token_stats(norm)
    stats = pd.DataFrame({"mean(x²) before": rs.mean_sq, "RMS before": rs.rms_in, "RMS after (normalized)": rs.rms_normalized,
                          "mean before": rs.mean_in, "mean after (normalized)": rs.mean_normalized},
                         index=idx)
    norm_view(stats, [("ln_vars", {"RMS before": rs.rms_in, "RMS after": rs.rms_normalized},
                       "Per-token RMS: before vs after RMSNorm", "root mean square",
                       "After RMSNorm every token's root mean square is 1 (up to ε)."),
                      ("ln_means", {"mean before": rs.mean_in, "mean after": rs.mean_normalized},
                       "Per-token mean: RMSNorm does not centre", "mean",
                       "Unlike layer norm, the mean is only rescaled, not removed.")],
              "before (input)", "after RMSNorm (normalized)", {"γ (scale)": norm.gamma},
              "Learned γ per feature (no β)", pd.DataFrame({"gamma": norm.gamma}))
else:
    ls = layer_norm.layer_norm_token_stats(norm)
    stats = pd.DataFrame({"mean before": ls.mean_in, "var before": ls.var_in, "mean after (normalized)": ls.mean_normalized,
                          "var after (normalized)": ls.var_normalized, "mean after γ, β": ls.mean_out,
                          "var after γ, β": ls.var_out},
                         index=idx)
    gamma, beta = norm.gamma, norm.beta  # (D,)
    norm_view(stats, [("ln_means", {"mean before": ls.mean_in, "mean after": ls.mean_normalized},
                       "Per-token mean: before vs after LN", "mean", "After normalization every token's mean is 0."),
                      ("ln_vars", {"variance before": ls.var_in, "variance after": ls.var_normalized},
                       "Per-token variance: before vs after LN", "variance (biased)",
                       "After normalization every token's variance is 1 (up to ε).")],
              "before LN (input)", "after LN (normalized)", {"γ (scale)": gamma, "β (shift)": beta},
              "Learned γ and β per feature", pd.DataFrame({"gamma": gamma, "beta": beta}),
              "Fresh weights start at γ = 1, β = 0; training moves them.")

st.subheader("The residual stream across layers")
names, norms = layer_norm.residual_norms(run.trace)
big = layer_norm.norm_outliers(norms)
scales = ["linear", "log"]
state.bound("ln_resid_scale", "log" if big.tokens else "linear")
state.fix("ln_resid_scale", scales)
if big.tokens:  # issue 33: SmolLM2's first token (~20,000) painted every other cell the same colour
    who = ", ".join(f"{i}:{md_escape(run.labels[i])}" for i in big.tokens[:5]) + (" …" if len(big.tokens) > 5 else "")
    st.info(f"Token{'s' if len(big.tokens) > 1 else ''} **{who}** reach{'' if len(big.tokens) > 1 else 'es'} a norm of "
            f"**{big.peak.max():,.0f}**, {big.ratio:,.0f}× the other tokens' typical {big.typical:,.0f}. Large language "
            "models grow a few huge features on the first token (“massive activations”, Sun et al. 2024); many heads "
            "then park their attention on it (a first-token sink). On a linear colour scale every other cell would get "
            "the same colour, so the scale is logarithmic (the cells still show the norms).", icon=":material/info:")
scale = st.radio("Colour scale", scales, key="ln_resid_scale", horizontal=True,
                 help="log: colours by the norm's order of magnitude, so small and huge norms both stay readable.")
show_fig(residual_norm_heatmap(norms, run.labels, names, log=scale == "log",
                               title="‖residual stream‖ per token and stage" + (" (log colour scale)" if scale == "log" else "")),
         "ln_resid", table=pd.DataFrame(norms.T, index=stats.index, columns=names),
         alt="Each sublayer adds its output to the stream (x + f(x)): the identity path carries the signal and the gradient.")
st.markdown(f"This model is **{arch.norm.short}**: {arch.norm.placement_text}")


cmp = get_norm_placement(run)
show_fig(line_chart(cmp.stages, {"pre-LN": cmp.pre, "post-LN": cmp.post}, x_categories=True,
                    title="Pre-LN vs post-LN: mean ‖stream‖ (fresh weights, seed 0, "
                          + ("your sentence)" if cmp.n_tokens == run.T else f"your first {cmp.n_tokens} tokens)"),
                    yaxis="mean L2 norm"),
         "ln_pre_post", table=pd.DataFrame({"pre-LN": cmp.pre, "post-LN": cmp.post}, index=cmp.stages),
         alt=f"post-LN keeps the stream at √d_model ≈ {np.sqrt(cfg.d_model):.1f} after each sublayer; pre-LN lets it grow.")

st.subheader("Batch norm vs layer norm")
n_tok, n_feat = min(run.T, 5), min(cfg.d_model, 6)
small = np.asarray(x_in[:n_tok, :n_feat], dtype=np.float64)
if n_tok < 2:
    st.info("Type at least two tokens to compare batch norm and layer norm.")
else:
    bl = layer_norm.batch_vs_layer_norm(small)
    st.caption(f"A small batch from your sentence: {n_tok} tokens (rows, the samples) × {n_feat} features (columns) of this "
               "LN's input. Batch norm averages each feature (column) over the batch; layer norm averages each sample (row) "
               "over its features — so it does not depend on the other samples or the batch size.")
    fcols = [f"f{j}" for j in range(n_feat)]
    b1, b2 = st.columns(2)
    with b1:
        z = np.vstack([bl.bn, bl.bn_mean, bl.bn_var])
        rows_bn = token_labels(run.labels[:n_tok], plain=True) + ["μ (column)", "σ² (column)"]
        show_fig(matrix_heatmap(z, rows_bn, fcols, highlight_cols=[0], tokens_rows=False,
                                title="Batch norm: per column (feature)", value_name="value"), "ln_bn",
                 table=pd.DataFrame(z, index=token_labels(run.labels[:n_tok], plain=True) + ["column mean (before)", "column var (before)"],
                                    columns=fcols))
    with b2:
        z = np.hstack([bl.ln, bl.ln_mean[:, None], bl.ln_var[:, None]])
        show_fig(matrix_heatmap(z, run.labels[:n_tok], fcols + ["μ", "σ²"], highlight_rows=[0],
                                title="Layer norm: per row (token)", value_name="value"), "ln_ln",
                 table=pd.DataFrame(z, index=token_labels(run.labels[:n_tok], plain=True), columns=fcols + ["row mean (before)", "row var (before)"]))
    st.caption("Normalized values inside the matrix; the extra row (batch norm) or columns (layer norm: μ, σ²) hold "
               "the statistics of the raw values. "
               "The outline marks one group that is normalized together.")

st.subheader("Worked example from the notes")
ex = layer_norm.layer_norm([2.0, 4.0, 6.0, 8.0])
st.markdown(f"“CAT” = [2, 4, 6, 8], γ = 1, β = 0: μ = {ex.mean:g}, σ² = {ex.var:g} (biased, as in LayerNorm), "
            f"√(σ² + ε) = {ex.std:.4f} → **[{', '.join(f'{v:.4f}' for v in ex.output)}]**")
