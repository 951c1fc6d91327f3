"""Multi-head mechanics: the dimension table, Q/K/V of one token and head, per-head outputs Z_j,
their concatenation and W_O, and the parameter count (with the GPT-2 small preset)."""
import numpy as np
import pandas as pd
import streamlit as st

from classroom import multi_head
from labels import md_escape, token_label, token_labels
from labels.units import human_bytes
from model.config import PRESETS, param_count
from ui import state
from ui.models import architecture
from ui.multi_head import allocated_parameters
from ui.runs import current_run
from ui.show import show_code, show_fig
from viz.charts import bar_compare, matrix_heatmap

st.title("Multi-head mechanics")
show_code("model.layers.MultiHeadAttention.split", "model.layers.MultiHeadAttention.forward", what="split, attend, concat, W_O")
run = current_run()
cfg = run.cfg
arch = architecture(run.source, cfg)  # this model's shapes, biases, positions in words (classroom/architecture.py)
D, H, dk, dv, T = cfg.d_model, cfg.n_heads, cfg.d_k, cfg.d_value, run.T
widths = (arch.d_k_text.replace("d_k = ", "d_k = d_v = ", 1) if dv == dk else f"{arch.d_k_text} and d_v = {dv}")
st.caption(f"Your sentence: T = {T:,} tokens, d_model = {D}, h = {H} heads, so {widths}. X is the "
           f"{arch.positions.input_x}. Each head projects X to its own Q_j, K_j, V_j"
           + (f" (K_j, V_j shared by groups of {H // arch.kv_heads} query heads)" if arch.gqa else "")
           + ", attends, and returns Z_j; the Z_j are concatenated and mixed by W_O. This model: "
           f"{arch.biases}. Q and K must share d_k (they meet in a dot product); V may have "
           "another width d_v (fresh weights: “d_v” in the sidebar), which sets the width of Z_j and of W_O's input.")
if arch.details:  # a family's own numeric details (soft-caps, scales, q/k norms, …), from its config
    st.markdown("**This model's own details.** " + " ".join(arch.details))
if multi_head.width_note(cfg):  # h·d_k ≠ d_model (Gemma 3: 4 × 256 = 1,024 ≠ 640)
    st.markdown(multi_head.width_note(cfg))
shape_table = pd.DataFrame(multi_head.shape_rows(cfg, T)).set_index("step")
st.dataframe(shape_table, width="stretch", height=38 + 35 * len(shape_table))  # every row visible

if cfg.kv_heads < H:  # grouped-query attention (SmolLM2: 9 query heads share 3 K/V heads)
    st.subheader("Grouped-query attention: query heads share keys and values")
    share = multi_head.groups(run.trace.layers[0].attn.kv_head)
    st.markdown(multi_head.sharing_sentence(cfg) + ("which " if cfg.kv_heads > 1 else "The query heads ")
                + "still score and weight the keys in their own way (their queries differ). "
                + "; ".join(f"K/V head {k} → query heads {', '.join(map(str, qs))}" for k, qs in share.items()) + ".")
    kv_rows = multi_head.savings(cfg)
    sv = pd.DataFrame({"K/V heads per layer": [r.kv_heads for r in kv_rows], "K and V projection parameters": [r.kv_params for r in kv_rows],
                       "KV cache per token (bytes)": [r.cache_bytes_per_token for r in kv_rows],
                       f"KV cache for {kv_rows[0].context:,} tokens": [human_bytes(r.cache_bytes) for r in kv_rows]},
                      index=pd.Index([r.variant for r in kv_rows], name="variant"))
    st.dataframe(sv.style.format({"K and V projection parameters": "{:,}", "KV cache per token (bytes)": "{:,}"}),
                 width="stretch")
    st.caption(f"What sharing saves: the KV cache that generation keeps (2 × {cfg.n_layers} layers × K/V heads × "
               f"{dk} × 4 bytes per token) is {H // cfg.kv_heads}× smaller, and so are the K and V projections. "
               "Llama 2/3, Mistral and SmolLM2 use it; one K/V head for all (multi-query attention) is the extreme.")

layers, heads = list(range(cfg.n_layers)), list(range(H))
for key, opts, dflt in (("mh_layer", layers, 0), ("mh_head", heads, 0), ("mh_token", list(range(T)), T - 1)):
    state.bound(key, dflt)
    state.fix(key, opts, dflt)
c1, c2, c3 = st.columns(3)
layer = c1.selectbox("Layer", layers, key="mh_layer")
head = c2.selectbox("Head", heads, key="mh_head")
ti = c3.selectbox("Token", list(range(T)), key="mh_token", format_func=lambda i: token_label(i, run.labels[i], sep=": "))

attn = run.trace.layers[layer].attn  # AttentionTrace (numpy, B = 1)
width = max(dk, dv)  # q, k have d_k numbers, v has d_v (blank cells when they differ)
qkv = np.full((3, width), np.nan)
kv = head if attn.kv_head is None else int(attn.kv_head[head])  # grouped-query: the K/V head this query head reads
qkv[0, :dk], qkv[1, :dk], qkv[2, :dv] = attn.q[0, head, ti], attn.k[0, kv, ti], attn.v[0, kv, ti]
dcols = [str(j) for j in range(width)]
show_fig(matrix_heatmap(qkv, ["q", "k", "v"], dcols, tokens_rows=False, annotate=width <= 16,
                        title=f"Q, K, V of token {ti} in head {head} (length d_k = {dk}"
                              + (")" if dv == dk else f"; v: d_v = {dv})")
                              + ("" if kv == head else f"; k, v from K/V head {kv}"), col_title="dimension",
                        height=260), "mh_qkv", table=pd.DataFrame(qkv, index=["q", "k", "v"]))
st.markdown(f"Token **{md_escape(run.labels[ti])}**: q·k with every key gives this head's scores row; "
            "its weights mix the v vectors into row "
            f"{ti} of Z_{head}.")

heads_z = attn.heads[0]  # (H, T, d_v)
concat, out = attn.concat[0], attn.output[0]  # (T, H*d_v), (T, D)
z1, z2 = st.columns(2)
with z1:
    show_fig(matrix_heatmap(heads_z[head], run.labels, [str(j) for j in range(dv)], annotate=False,
                            title=f"Z_{head} = weights · V_{head}  ({T} × {dv})",
                            col_title="dimension"), "mh_z", table=pd.DataFrame(heads_z[head], index=token_labels(run.labels, plain=True)))
with z2:
    show_fig(matrix_heatmap(concat, run.labels, [str(j) for j in range(H * dv)], annotate=False,
                            vlines=[h * dv - 0.5 for h in range(1, H)],
                            title=f"concat(Z_0 … Z_{H - 1})  ({T} × {H * dv}); lines separate heads", col_title="dimension"),
             "mh_concat", table=pd.DataFrame(concat, index=token_labels(run.labels, plain=True)))
show_fig(matrix_heatmap(out, run.labels, [str(j) for j in range(D)], annotate=False,
                        title=f"Output = {arch.output_formula}  ({T} × {D})", col_title="dimension"), "mh_out",
         table=pd.DataFrame(out, index=token_labels(run.labels, plain=True)),
         alt="W_O mixes the heads: every output feature can draw on every head.")



def param_table(rows: list[multi_head.ParamRow]) -> pd.DataFrame:
    """multi_head.param_rows as the page shows them: one row per part."""
    return pd.DataFrame({"parameters": [r.parameters for r in rows], "formula": [r.formula for r in rows],
                         "share %": [r.share_pct for r in rows]}, index=pd.Index([r.part for r in rows], name="part"))


st.subheader("Parameters")
prows = multi_head.param_rows(cfg)
rows = param_table(prows)
total = param_count(cfg)
st.markdown(f"Current model: **{total:,}** parameters (counted from the config; the allocated model has "
            f"{allocated_parameters(run.source):,}).")
show_fig(bar_compare([r.part for r in prows], {"parameters": np.array([r.parameters for r in prows])}, tokens=False,
                     title=f"Parameter count by part (current model, total {total:,})", yaxis="parameters"),
         "mh_params", table=rows)
PARAM_FMT = {"parameters": "{:,}", "share %": "{:.1f}"}
st.dataframe(rows.style.format(PARAM_FMT), width="stretch")

st.subheader("GPT-2 small")
g = PRESETS["gpt2-small"]
g1, g2 = st.columns([1, 2.2])
with g1:
    st.dataframe(pd.DataFrame(multi_head.preset_rows(g)).set_index("quantity").astype(str), width="stretch")
with g2:
    grows = param_table(multi_head.param_rows(g))
    st.dataframe(grows.style.format(PARAM_FMT), width="stretch",
                 column_config={"formula": st.column_config.TextColumn("formula", width="medium")})
    attn_1, ffn_1 = (next(r.parameters for r in multi_head.param_rows(g.replace(n_layers=1)) if r.part == part)
                     for part in ("attention", "ffn"))  # one layer's
    st.markdown(f"Total: **{param_count(g):,}** parameters — the embedding alone is {g.vocab_size:,} × {g.d_model} = "
                f"{g.vocab_size * g.d_model:,}; each of the {g.n_layers} layers has {attn_1:,} "
                f"attention and {ffn_1:,} FFN parameters.")
    st.caption("Build it: pick “fresh weights” in the sidebar and press “Preset: GPT-2 small” (random weights, the "
               "toy vocabulary; every page then runs on 12 layers × 12 heads of d_model 768).")
