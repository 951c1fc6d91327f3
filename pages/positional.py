"""Positional encoding: the sinusoidal table, its curves and wavelengths, PE·PE similarity,
learned vs sinusoidal, and token embedding + PE = block input on your sentence."""
import numpy as np
import pandas as pd
import streamlit as st

from classroom import ffn_output, positional
from labels import md_escape, token_label, token_labels
from ui import state
from ui.models import architecture
from ui.positional import comparison_position_table, positions_matter
from ui.runs import current_run
from ui.show import matrix_table, show_code, show_fig
from viz.charts import NARROW_MAX_CELLS, line_chart, matrix_heatmap, pe_curves, two_heatmaps
from viz.positional import rope_pairs

SHUFFLE_MAX_T = 64  # tokens of the "positions matter" shuffle (a long input: its first ones)

st.title("Positional encoding")
show_code("model.layers.sinusoidal_table", "model.layers.rope_tables", "model.layers.apply_rope", "model.transformer.TokenModel.embed", what="positions")
run = current_run()
cfg = run.cfg
arch = architecture(run.source, cfg)  # how this model's positions enter, in words (classroom/architecture.py)
st.caption(f"Attention by itself ignores order. This model's positions: **{arch.positions.name}**. "
           + arch.positions.sentence)
D = cfg.d_model
n_pos = min(cfg.max_len, 128)
pe = positional.pe_table(n_pos, D)

if cfg.pos_encoding == "rope":  # Llama-style (SmolLM2): positions rotate q and k inside every head
    st.subheader("This model's positions: rotary (RoPE)")
    st.markdown("Nothing is added to the token embeddings. Instead, in every attention head, each query and key "
                f"vector is cut into {cfg.d_k // 2} pairs of numbers, and pair i is **rotated** by the angle "
                f"position × θ^(−2i/d_k) ({positional.rope_words(cfg)}). Rotating q by m and k by n changes "
                "their dot product only through m − n: attention scores see relative positions.")
    r1, r2, r3 = st.columns(3)
    state.bound("pe_rope_layer", 0)
    state.fix("pe_rope_layer", list(range(cfg.n_layers)))
    rl = r1.selectbox("Layer", list(range(cfg.n_layers)), key="pe_rope_layer")
    state.bound("pe_rope_head", 0)
    state.fix("pe_rope_head", list(range(cfg.n_heads)))
    rh = r2.selectbox("Head", list(range(cfg.n_heads)), key="pe_rope_head")
    state.bound("pe_rope_token", run.T - 1)
    state.fix("pe_rope_token", list(range(run.T)), run.T - 1)
    rt = r3.selectbox("Token", list(range(run.T)), key="pe_rope_token",
                      format_func=lambda i: token_label(i, run.labels[i], sep=": "))
    st.caption(positional.layer_rope_words(cfg, rl))
    at = run.trace.layers[rl].attn  # AttentionTrace (numpy, B = 1)
    q_pre, q_post = at.q_pre_rope[0, rh, rt], at.q[0, rh, rt]  # (d_k,) before / after rotation
    half = cfg.d_k // 2
    pairs = sorted({0, 1, half // 4, half // 2, half - 1})
    rows = positional.pair_rotation(q_pre, q_post, pairs)
    show_fig(rope_pairs(rows, title=f"Query of token {rt} (position {rt}), layer {rl}, head {rh}: pairs before → after "
                                    "rotation"),
             "pe_rope_pairs", table=pd.DataFrame([{"pair": r.pair, "dims": f"{r.dims[0]}, {r.dims[1]}",
                                                    "angle turned (°)": r.angle_deg, "length before": r.norm_before,
                                                    "length after": r.norm_after} for r in rows]).set_index("pair"),
             alt="Fast pairs (low i) turn a lot per position, slow pairs hardly move; every length stays the same.")
    kv = int(at.kv_head[rh]) if at.kv_head is not None else rh
    kt = max(0, rt - 1)
    rel = positional.relative_scores(q_pre, at.k_pre_rope[0, kv, kt], 32, *cfg.layer_rope(rl))
    st.markdown(f"**Measured: the score depends on m − n only.** Take this query vector and the key of token {kt} "
                f"(K/V head {kv}), both before rotation, and rotate them to every pair of positions m, n = 0 … 31 with "
                f"the model's own rotary code. Along each diagonal (m − n fixed) the score varies by at most "
                f"**{rel.spread:.1e}** (float32 rounding), while across diagonals it ranges over **{rel.range:.2f}**.")
    g1, g2 = st.columns(2)
    with g1:
        show_fig(matrix_heatmap(rel.S, [f"m={m}" for m in range(32)], [f"n={n}" for n in range(32)], tokens_rows=False,
                                annotate=False, colorscale="Viridis", zmid=None, row_title="query position m",
                                col_title="key position n", value_name="score",
                                title="rot(q, m) · rot(k, n): constant along diagonals", height=380),
                 "pe_rope_S", table=pd.DataFrame(rel.S))
    with g2:
        show_fig(line_chart(rel.offsets, {"score": rel.by_offset}, title="The same score as a function of m − n",
                            xaxis="m − n (query position − key position)", yaxis="q·k", markers=False, height=380),
                 "pe_rope_offset", table=pd.DataFrame({"m − n": rel.offsets, "score": rel.by_offset}))
    st.caption("Below: the 2017 paper's sinusoidal table, for comparison (this model does not add it).")

st.subheader("The sinusoidal table" + ("" if cfg.pos_encoding == "sinusoidal" else " (the 2017 paper's)"))
if cfg.pos_encoding == "learned":
    st.caption("This model learns its position vectors (compared with this table below); the sinusoidal table is "
               "the 2017 paper's formula, shown for comparison.")
dim_opts = list(range(D))
defaults = [d for d in (4, 5, 12, 13, D // 2 - 2) if 0 <= d < D]  # two sin/cos pairs and a slow one
state.bound("pe_dims", ",".join(map(str, dict.fromkeys(defaults))))
if "pe_dims_ms" not in st.session_state:  # first run: take the dimensions from the URL (validated)
    try:
        chosen = [int(x) for x in str(st.session_state["pe_dims"]).split(",") if x.strip() != ""]
    except ValueError:
        chosen = []
    st.session_state["pe_dims_ms"] = chosen
valid = [d for d in dict.fromkeys(st.session_state["pe_dims_ms"]) if isinstance(d, int) and 0 <= d < D][:8]
if valid != st.session_state["pe_dims_ms"]:
    st.session_state["pe_dims_ms"] = valid or list(dict.fromkeys(defaults))
dims = st.multiselect("Dimensions to plot", dim_opts, key="pe_dims_ms", max_selections=8,
                      help="Even dimensions are sines, odd ones cosines; each pair shares one wavelength.")
st.session_state["pe_dims"] = ",".join(map(str, dims))
c1, c2 = st.columns(2)
with c1:
    show_fig(matrix_heatmap(pe, [str(p) for p in range(n_pos)], [str(d) for d in range(D)], tokens_rows=False,
                            title=f"Sinusoidal PE: {n_pos} positions × {D} dimensions", row_title="position",
                            col_title="dimension", annotate=False, height=420, value_name="PE"),
             "pe_table", table=pd.DataFrame(pe, index=pd.RangeIndex(n_pos, name="position")),
             alt="Left columns oscillate fast (short wavelength), right columns slowly.")
with c2:
    if dims:
        wl_all = positional.pe_wavelengths(D)
        pairs = dict.fromkeys(d - d % 2 for d in sorted(dims))
        show_fig(pe_curves(pe, dims, title="Chosen dimensions vs position", height=420), "pe_curves",
                 table=pd.DataFrame(pe[:, dims], columns=[f"dim {d}" for d in dims]),
                 alt="Wavelength (positions per cycle, 2π·10000^(2i/d)): " + "; ".join(
                     f"dims {p}/{p + 1}: {wl_all[p]:,.1f}" if p + 1 < D else f"dim {p}: {wl_all[p]:,.1f}" for p in pairs)
                 + ". A sin and a cos of one pair share the wavelength, a quarter cycle apart.")
    else:
        st.info("Choose at least one dimension to plot.")
wl = positional.pe_wavelengths(D)
with st.expander("Wavelength of every dimension (positions per full cycle)"):
    st.dataframe(pd.DataFrame({"dimension": np.arange(D), "function": ["sin" if d % 2 == 0 else "cos" for d in range(D)],
                               "wavelength": wl}).set_index("dimension"), width="stretch")

st.subheader("Your sentence: token embedding + position = block input" if arch.positions.added else
             "Your sentence: the block input is the token embedding (no position vector is added)")
if not arch.positions.added:
    st.caption(f"This model's positions are {arch.positions.name}: nothing is added to X, so the position column "
               "below is all zeros and the sum equals the token embedding"
               + (" (positions turn q and k inside every head, above)." if cfg.pos_encoding == "rope" else "."))
labels = run.labels
emb = run.trace.embeddings  # EmbeddingTrace (numpy)
tok, pos, total = emb.token[0], emb.position, emb.sum[0]  # (T, D) each
sum_name = "sum (block input)"
if emb.ln is not None:  # BERT: + token type, then the embedding LayerNorm
    total, sum_name = emb.raw_sum[0], "token + position + type"
    st.caption("This model (BERT) also adds a token-type (segment) embedding, then normalises the sum with its "
               "embedding LayerNorm: block input = LN(token + position + type). The sum below is before that "
               "LayerNorm (the layer-norm page shows it).")
state.bound("pe_token", 1)
state.fix("pe_token", list(range(run.T)), min(1, run.T - 1))
ti = st.selectbox("Token", list(range(run.T)), key="pe_token", format_func=lambda i: token_label(i, labels[i], sep=": "))
ndim = min(D, 8)
add = pd.DataFrame({"token embedding": tok[ti, :ndim], f"position {ti}": pos[ti, :ndim], sum_name: total[ti, :ndim]},
                   index=pd.Index([f"dim {d}" for d in range(ndim)], name="dimension")).T
st.markdown(f"Token **{md_escape(labels[ti])}** at position {ti} (first {ndim} of {D} dimensions):")
st.dataframe(add, width="stretch")
cols = [str(d) for d in range(D)]
h1, h2, h3 = st.columns(3)
for col, (name, z, key) in zip((h1, h2, h3), (("token embedding", tok, "pe_tok"), ("position", pos, "pe_pos"),
                                               (sum_name if emb.ln is not None else "sum = block input", total, "pe_sum"))):
    with col:
        show_fig(matrix_heatmap(z, labels, cols, title=name, annotate=False, col_title="dimension", height=360,
                                max_cells=NARROW_MAX_CELLS),
                 key, table=pd.DataFrame(z, index=token_labels(labels, plain=True)))

st.subheader("Similarity of positions: PE(i)·PE(j)")
src_pe = pos if cfg.pos_encoding == "sinusoidal" else positional.pe_table(run.T, D)
sim = positional.pe_similarity(src_pe)
show_fig(matrix_heatmap(sim, labels, labels, tokens_cols=True, title="Sinusoidal PE(i)·PE(j) at your sentence's positions",
                        colorscale="Viridis", zmid=None, annotate=run.T <= 12, fmt=".1f", value_name="dot"),
         "pe_similarity", table=matrix_table(sim, labels, labels),
         alt="The dot product depends only on the distance i − j: every diagonal is constant, largest at i = j (= d/2).")

st.subheader("Learned vs sinusoidal")
n_cmp = min(run.T if run.T >= 16 else min(cfg.max_len, 32), cfg.max_len)
cmp = comparison_position_table(run.source, n_cmp)
learned = cmp.table  # (n_cmp, D)
n_cmp = learned.shape[0]
own = {"sinusoidal": "the sinusoidal formula (no parameters)", "rope": "rotary positions (no table: q and k turn)",
       "none": "no positions at all"}.get(cfg.pos_encoding, arch.positions.name)
if cmp.origin == "current":
    note = "The current model learns its position table (trained values when it is a trained checkpoint)."
elif cmp.origin == "checkpoint":
    note = (f"The current model uses {own}. The right side is the "
            f"trained position table of the shipped checkpoint “{md_escape(cmp.checkpoint)}” (same d_model = {D}): "
            "whatever code for positions training found, with no formula. The cosine maps below show "
            "which positions each table treats as alike.")
else:
    note = (f"The current model uses {own}. For comparison, the right side is a "
            "learned table at initialisation (random N(0, 1), seed 0): training would shape it. Choose "
            "“learned” under fresh weights in the sidebar, or a checkpoint trained with learned positions.")
st.caption(note)
show_fig(two_heatmaps(positional.pe_table(n_cmp, D), learned, ("sinusoidal (formula)", "learned (parameters)"),
                      title=f"Position tables, first {n_cmp} positions (each with its own colour scale)"), "pe_learned",
         table=pd.DataFrame(learned, index=pd.RangeIndex(n_cmp, name="position")))
lsim = positional.cosine_matrix(learned)
ssim = positional.cosine_matrix(positional.pe_table(n_cmp, D))
show_fig(two_heatmaps(ssim, lsim, ("sinusoidal: cosine(PE(i), PE(j))", "learned: cosine(P(i), P(j))"),
                      row_title="position i", col_title="position j", shared_scale=True,
                      title="Which positions look alike? Cosine similarity of the position vectors"), "pe_learned_sim",
         table=pd.DataFrame(lsim, index=pd.RangeIndex(n_cmp, name="position i")),
         alt="Sinusoidal: a smooth band along the diagonal (near positions are similar, by construction). "
             "A trained table shows a band only where training has put one; a random one shows none.")

if run.source is not None and run.source.real and cfg.pos_encoding == "learned":  # a real model's whole learned table
    full = comparison_position_table(run.source, cfg.max_len).table  # (max_len, D)
    st.subheader(f"This model's learned position embeddings: all {full.shape[0]} × {D}")
    st.caption("Trained, not computed from a formula: one row per position the model can read. Rows that look "
               "alike (right) are positions the model treats as near each other.")
    p1, p2 = st.columns(2)
    pos_names = [str(p) for p in range(full.shape[0])]
    lim = ffn_output.robust_limit(full)  # a few outlier dimensions would wash out the rest
    with p1:
        show_fig(matrix_heatmap(full, pos_names, [str(d) for d in range(D)], tokens_rows=False, annotate=False,
                                title=f"Position table ({full.shape[0]} × {D}; colours clipped at ±{lim:.2f})",
                                row_title="position", col_title="dimension", height=520, value_name="value",
                                zmin=-lim, zmax=lim),
                 "pe_full", table=lambda: pd.DataFrame(full, index=pd.RangeIndex(full.shape[0], name="position")))
    with p2:
        full_sim = positional.cosine_matrix(full)
        show_fig(matrix_heatmap(full_sim, pos_names, pos_names, tokens_rows=False, annotate=False, colorscale="Viridis",
                                zmid=None, title="cosine(P(i), P(j))", row_title="position i", col_title="position j",
                                height=520, value_name="cosine"),
                 "pe_full_sim", table=lambda: pd.DataFrame(full_sim, index=pd.RangeIndex(full.shape[0], name="position i")),
                 alt="A bright band along the diagonal: training made nearby positions similar, as the sinusoidal "
                     "formula does by construction.")

st.subheader("Worked example from the notes: d_model = 4")
ex = positional.worked_pe_example()
pe_df = pd.DataFrame(ex.pe, index=[f"pos {p}" for p in range(3)], columns=[f"dim {d}" for d in range(4)])
st.markdown("Dimensions 0, 1 use 10000^(0/4) = 1 (angle = pos); dimensions 2, 3 use 10000^(2/4) = 100 (angle = pos / 100).")
st.dataframe(pe_df.style.format("{:.4f}"), width="content")
sums = pd.DataFrame([ex.the, ex.pe[0], ex.the_sum, ex.cat, ex.pe[1], ex.cat_sum],
                    index=["'the' embedding", "PE(0)", "'the' + PE(0)", "'cat' embedding", "PE(1)", "'cat' + PE(1)"],
                    columns=[f"dim {d}" for d in range(4)])
st.dataframe(sums.style.format("{:.4f}"), width="content")
st.caption(
    "Where the lecture notes' own arithmetic differs (their method is right; a few values slipped): "
    "the cosines are written with exponents 1/4 and 3/4, but dimension 2i+1 uses the same 10000^(2i/d) as "
    "dimension 2i (the notes' values 0.5403 and 0.99995 do follow the correct exponents 0 and 2/4); "
    "the diagram's PE for 'CAT' has 0.34 where cos(1) = 0.5403; 'CAT' + PE is written "
    "[1.34, 0.94, 0.01, 1.79] but is [1.3415, 1.1403, 0.7100, 1.8000] (0.7 + 0.01 = 0.71); "
    "'the' + PE(0) is written [0.1, 1.2, 0.3, 0.4] but the last entry is 0.4 + 1 = 1.4; "
    "and 'CAT' is once given as [0.5, 0.8, 0.7, 0.8] — the table uses [0.5, 0.6, 0.7, 0.8] as in the diagram.")

st.subheader("Positions matter: switch positional encoding off")
state.bound("pe_shuffle", 0)
seed = st.number_input("Shuffle (seed of the new word order)", 0, 9999, key="pe_shuffle",
                       help="Each seed gives another order of the same words.")
# a long input: the first SHUFFLE_MAX_T tokens (each shuffle keeps every layer's weights of three more
# runs in float64: 20 GB for SmolLM2 at 1,024 tokens)
demo = tuple(run.ids[:SHUFFLE_MAX_T])
pm = positions_matter(run.source, demo, int(seed))
perm = pm.perm
shuffled = [labels[i] for i in perm]
if run.T > len(demo):
    st.caption(f"Long input: the shuffle uses the first {len(demo)} of the {run.T:,} tokens.")
st.markdown("**Original:** " + " ".join(md_escape(w) for w in labels[:len(demo)]) + "  \n"
            "**Shuffled:** " + " ".join(md_escape(w) for w in shuffled))
st.caption("The current model's own weights, with its position vectors removed (positional encoding “none”). "
           "P is the permutation matrix of the shuffle (row i of the shuffled sentence is word perm[i]): if the "
           "model is blind to order, the shuffled sentence's weights are the old ones with rows and columns "
           "moved along, W_shuffled = P W Pᵀ, and every word's output moves with it.")
blind, causal_case, with_pe = pm.no_pe_bidirectional, pm.no_pe_causal, pm.with_pe_bidirectional
gaps = pd.DataFrame([
    {"case": name, "max |W_shuffled − P W Pᵀ| (all layers, heads)": r.weight_gap,
     "max |output_shuffled − P · output|": r.output_gap}
    for name, r in (("no positional encoding, no mask", blind), ("no positional encoding, causal mask", causal_case),
                    (f"with the model's {arch.positions.name} positions, no mask", with_pe))]).set_index("case")
st.dataframe(gaps.style.format("{:.2e}"), width="stretch")
st.markdown(
    f"**Attention alone ignores order.** Without positions and without a mask, shuffling the words moves the "
    f"weights with them: the largest difference from P W Pᵀ is {blind.weight_gap:.1e} (float rounding), and "
    f"the outputs move with the words to within {blind.output_gap:.1e}. With the model's positions the "
    f"same shuffle changes the weights by up to {with_pe.weight_gap:.2f}.\n\n"
    f"**The causal mask alone leaks some order.** With the mask but still no positions, the same words in the "
    f"new order give outputs up to {causal_case.output_gap:.2f} apart (largest output value "
    f"{causal_case.output_scale:.2f}): a word sees only the words before it, so where it stands changes "
    "what it can attend to. The first word sees only itself.")
lay = run.cfg.n_layers - 1
w1, w2 = st.columns(2)
with w1:
    show_fig(matrix_heatmap(blind.weights_shuffled[lay, 0], shuffled, shuffled, tokens_cols=True, colorscale="Viridis",
                            zmid=None, zmin=0, zmax=1, annotate=len(demo) <= 10, value_name="weight",
                            title=f"No PE: weights of the shuffled sentence (layer {lay}, head 0)"),
             "pe_off_shuffled", table=matrix_table(blind.weights_shuffled[lay, 0], shuffled, shuffled))
with w2:
    show_fig(matrix_heatmap(blind.pwpT[lay, 0], shuffled, shuffled, tokens_cols=True, colorscale="Viridis",
                            zmid=None, zmin=0, zmax=1, annotate=len(demo) <= 10, value_name="weight",
                            title="P W Pᵀ: the original weights, rows and columns moved"),
             "pe_off_moved", table=matrix_table(blind.pwpT[lay, 0], shuffled, shuffled),
             alt=f"The two heatmaps are the same (largest difference {blind.weight_gap:.1e}).")
