"""KV-cache calculator: bytes per token and for a context under MHA / GQA / MQA / sliding window,
for GPT-2 small, SmolLM2-135M or your own shape; checked against the engine's real cache.
Arithmetic: classroom/kv_cache.py (model.generate.kv_cache_bytes_per_token); tables and the cached
engine measurement: ui/kv_cache.py; figure: viz/kv_cache.py."""
import streamlit as st

from classroom import kv_cache
from ui import kv_cache as kv_ui
from ui import state
from ui.show import show_fig
from viz.kv_cache import bytes_bars

st.title("KV-cache calculator")
st.caption("While a decoder generates, it keeps every layer's keys and values of the tokens so far (the KV cache) so "
           "each new token runs alone. Per token that is 2 (K and V) × layers × K/V heads × d_head numbers. "
           "Sharing K/V heads (GQA, MQA) shrinks it; a sliding window caps how many tokens are kept.")

CUSTOM = "your own"
OWN = "Gemma 3 270M" if st.session_state.get("src") == "gemma3-270m" else "SmolLM2-135M"  # the model on screen's
for key, default in (("kv_preset", OWN), ("kv_dtype", "fp32"), ("kv_context", 2048), ("kv_window", 512),
                     ("kv_L", 24), ("kv_H", 16), ("kv_Hkv", 4), ("kv_dh", 64)):
    state.bound(key, default)
state.fix("kv_preset", [*kv_cache.PRESETS, CUSTOM], OWN)
state.fix("kv_dtype", list(kv_cache.DTYPES), "fp32")
c1, c2, c3, c4 = st.columns(4)
preset = c1.radio("Model", [*kv_cache.PRESETS, CUSTOM], key="kv_preset")
dtype = c2.selectbox("Cached numbers", list(kv_cache.DTYPES), key="kv_dtype",
                     format_func=lambda d: f"{d} ({kv_cache.DTYPES[d]} byte{'s' if kv_cache.DTYPES[d] > 1 else ''})")
context = int(c3.number_input("Context length (tokens)", min_value=0, max_value=10_000_000, step=256, key="kv_context"))
window = int(c4.number_input("Sliding window w (tokens)", min_value=0, max_value=10_000_000, step=256, key="kv_window"))

if preset == CUSTOM:
    u1, u2, u3, u4 = st.columns(4)
    shape = kv_cache.KVShape(CUSTOM,
                            int(u1.number_input("Layers", min_value=0, max_value=1000, step=1, key="kv_L")),
                            int(u2.number_input("Query heads", min_value=0, max_value=1024, step=1, key="kv_H")),
                            int(u3.number_input("K/V heads", min_value=0, max_value=1024, step=1, key="kv_Hkv")),
                            int(u4.number_input("d_head", min_value=0, max_value=4096, step=1, key="kv_dh")))
else:
    shape = kv_cache.PRESETS[preset]
    st.caption(f"{preset}: {shape.n_layers} layers, {shape.n_heads} query heads, {shape.n_kv_heads} K/V heads, "
               f"d_head {shape.d_head}"
               + (f"; {shape.local_layers} of the layers have a sliding window of {shape.local_window:,} tokens, so "
                  f"their cache stops growing at {shape.local_window:,} (the last row)." if shape.local_layers else "."))

problems = []
try:
    shape.check()
except ValueError as e:
    problems.append(str(e))
if context < 1:
    problems.append("The context must be at least 1 token.")
if window < 1:
    problems.append("The window must be at least 1 token (1 = each token keeps only itself).")
if problems:
    for p in problems:
        st.error(p, icon=":material/error:")
    state.end_page()

gqa_opts = kv_cache.gqa_options(shape.n_heads)
gqa = None
if gqa_opts:
    gdefault = shape.n_kv_heads if shape.n_kv_heads in gqa_opts else gqa_opts[-1]
    state.bound("kv_gqa", gdefault)
    state.fix("kv_gqa", gqa_opts, gdefault)
    gqa = st.columns(4)[0].selectbox("K/V heads in the GQA row", gqa_opts, key="kv_gqa",
                       help=f"Divisors of {shape.n_heads} between 1 (MQA) and {shape.n_heads} (MHA).")
else:
    st.caption(f"{shape.n_heads} query head{'s' if shape.n_heads > 1 else ''}: no grouping between MHA and MQA; "
               "the GQA row equals MHA.")
nbytes = kv_cache.DTYPES[dtype]
rows = kv_cache.cache_table(shape, context, nbytes, gqa_kv_heads=gqa, window=window)
if window >= context:
    st.info(f"w = {window:,} ≥ the context ({context:,} tokens): the window keeps everything (no saving).",
            icon=":material/info:")
st.dataframe(kv_ui.cache_frame(rows, readable=True).style.format(
    {"bytes per token": "{:,}", "tokens cached": "{:,}", "share of MHA": "{:.1%}"}), width="stretch")
show_fig(bytes_bars([r.variant for r in rows], [r.context_bytes for r in rows],
                    title=f"KV cache for {context:,} tokens at {dtype}, one sequence"),
         "kv_bars", table=kv_ui.cache_frame(rows),
         alt=f"{shape.name}: {rows[0].bytes_per_token:,} bytes per token with one K/V head per query head; "
             f"{rows[2].bytes_per_token:,} with one shared K/V head (MQA).")
st.caption("Per sequence: a batch of B sequences needs B times this. The sliding-window row keeps min(context, w) "
           "tokens, as Mistral's rolling buffer does (the engine here masks with the window but keeps every token).")

st.subheader("Checked against the engine")
st.caption(f"The engine stores float32 ({kv_cache.DTYPES[kv_cache.ENGINE_DTYPE]} bytes): build a model with these layers, "
           "heads and d_head (zero weights; vocabulary and FFN shrunk, they do not touch the cache), run a few tokens, "
           "and add up the bytes of its real KVCache tensors.")
big = kv_cache.attention_parameters(shape, shape.n_heads) > 60_000_000
if big:
    st.caption("This shape is too large to build here (over 60 M attention weights); the presets can be checked.")
else:
    state.bound("kv_check", False)
if not big and st.toggle("Measure the engine's cache", key="kv_check"):
    st.dataframe(kv_ui.engine_check_frame(kv_ui.engine_checks(shape, gqa)).style.format(
        {"calculator (fp32)": "{:,}", "engine KVCache.nbytes": "{:,}"}), width="stretch")
