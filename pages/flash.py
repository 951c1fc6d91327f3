"""Tiled attention (FlashAttention's online softmax): the sidebar sentence's q, k, v of one head,
read one key tile at a time; the running max and sum, the output so far, and the memory it saves.

Numbers: model.flash.tiled_attention via classroom.flash (cached and selected in ui.flash); figures:
viz.flash and viz.charts.
"""
import pandas as pd
import streamlit as st

from labels import md_escape, token_labels
from labels.units import MIB, human_bytes
from ui import flash, state
from ui.runs import current_cfg, current_run
from ui.show import show_fig
from viz.charts import line_chart
from viz.flash import output_progress, running_stats, tile_scores

st.title("Tiled attention: the online softmax (FlashAttention)")
st.markdown(
    "Plain attention builds the whole T × T score matrix, softmaxes each row and multiplies by V. "
    "FlashAttention never holds a whole row: it reads the keys **one tile at a time** and keeps, per query, "
    "a **running max** m, a **running sum** l = Σ exp(score − m) and the output so far. When a new tile "
    "raises the max from m_old to m_new, everything summed so far is **rescaled** by exp(m_old − m_new). "
    "After the last tile, output = O / l: *exactly* softmax(scores) · V, with only T × tile scores in "
    "memory at any time.")
st.latex(r"m' = \max(m, \max_j s_{ij}),\quad l' = e^{m-m'}\,l + \sum_j e^{s_{ij}-m'},\quad "
         r"O' = e^{m-m'}\,O + \sum_j e^{s_{ij}-m'}\,v_j")

notices = st.container()  # the input's notices, above the controls (the run is asked for below them)
cfg = current_cfg()
L, H = cfg.n_layers, cfg.n_heads

state.bound("flash_layer", 0)
state.fix("flash_layer", list(range(L)), 0)
state.bound("flash_head", 0)
state.fix("flash_head", list(range(H)), 0)
state.bound("flash_tile", 4)
c1, c2, c3 = st.columns(3)
layer = c1.selectbox("Layer", list(range(L)), key="flash_layer")
head = c2.selectbox("Head", list(range(H)), key="flash_head")
with notices:
    run = current_run(layer=layer)  # this layer only, unless the whole trace is cached (ui.runs.get_run)
T = run.T
tile = c3.number_input("Key tile size", min_value=0, max_value=4096, step=1, key="flash_tile",
                       help=f"How many keys each step reads. Your sentence has T = {T:,} tokens.")
try:
    walk = flash.tile_walk(run, layer, head, int(tile))
except ValueError as e:  # tile 0: model.flash explains
    st.error(f"{flash.sentence(md_escape(str(e)))}. Pick a tile size between 1 and T = {T}.", icon=":material/error:")
    state.end_page()
res = walk.tiled
for note in res.notices:
    if note.startswith("key tile"):
        st.info(flash.sentence(md_escape(note)) + ".", icon=":material/info:")
if T == 1:
    st.info("One token: one key, one tile, weight 1. The output is simply v of that token.", icon=":material/info:")

n_steps = len(res.steps)
step = state.step_slider("flash_step", n_steps, "Step (key tile)",
                         help="Each step reads one more block of keys for every query.")
s = res.steps[step - 1]
labels = run.labels
mask_word = "causal: grey cells are masked" if run.causal else "bidirectional"
m1, m2, m3, m4 = st.columns(4)
m1.metric("keys read", f"{s.k_end} of {T}", help=f"this step reads keys {s.k_start}..{s.k_end - 1}")
m2.metric("scores held at once", f"{T} × {res.tile_k} = {T * res.tile_k:,}",
          help="One tile of scores for all queries; plain attention holds the whole T × T matrix.")
m3.metric("plain attention holds", f"{T} × {T} = {T * T:,}")
m4.metric("max |tiled − plain|", f"{walk.diff_plain:.1e}",
          help="Final tiled output against attend(q, k, v).weights @ v on the same inputs (float32). "
               f"Against the head output the model itself recorded: {walk.diff_model:.1e}.")

show_fig(tile_scores(walk.scaled, walk.allowed, labels, k_start=s.k_start, k_end=s.k_end, tile=res.tile_k,
                     title=f"Step {step}/{n_steps}: reading keys {s.k_start}–{s.k_end - 1} "
                           f"(layer {layer}, head {head}; {mask_word})"),
         "flash_scores", filename=f"tile_scores_step{step}",
         table=lambda: pd.DataFrame(walk.scaled, index=token_labels(labels, plain=True),
                                    columns=token_labels(labels, plain=True)),
         alt="Heatmap of the scaled scores q·k/√d_k, queries as rows and keys as columns. Orange outline: the "
             "tile of keys read in this step; blue outlines: tiles already read; veiled: keys not read yet.")

m_now, l_now = s.m[0, 0], s.l[0, 0]
show_fig(running_stats(m_now, l_now, res.m[0, 0], res.l[0, 0], labels,
                       title=f"After step {step}: running max and sum per query"),
         "flash_stats", filename=f"running_max_sum_step{step}",
         table=lambda: pd.DataFrame({"running max m": m_now, "running sum l": l_now, "rescale this step":
                                     s.rescale[0, 0], "final m": res.m[0, 0], "final l": res.l[0, 0]},
                                    index=token_labels(labels, plain=True)),
         alt="Bars: each query's running max and running sum after this step; diamonds: their final values. "
             "The max only grows; when it grows, the sum is first shrunk by exp(m_old − m_new).")
rescaled = walk.rescaled(s)
if step > 1:
    st.caption(f"In this step the max rose for **{int(rescaled.sum())} of {len(labels)}** queries; their sum "
               f"and output so far were multiplied by exp(m_old − m_new) (smallest factor "
               f"{float(s.rescale[0, 0].min()):.3g}) before the new tile was added.")

out_now = s.out[0, 0]
err = walk.gap_to_final(s)
show_fig(output_progress(out_now, res.output[0, 0], labels,
                         title=f"Output so far (O / l over the keys read) vs final: max difference {err:.3g}"),
         "flash_output", filename=f"output_step{step}",
         alt="Left: each query's output after the keys read so far (a softmax over only those keys). Right: "
             "the final output. They are equal after the last tile.")
if step == n_steps:
    st.success(f"All {T} keys read: the tiled output equals plain attention to {walk.diff_plain:.1e} "
               "(float32 rounding).", icon=":material/check_circle:")

# ----------------------------------------------------------------------------- memory
st.subheader("Memory: T × tile instead of T × T")
state.bound("flash_mem_tile", 64)
state.fix("flash_mem_tile", list(flash.MEMORY_TILES), 64)
mem_tile = st.select_slider("Key tile size for the measurement", list(flash.MEMORY_TILES), key="flash_mem_tile")
mem = flash.memory_curve(int(mem_tile))  # measured once per server, in the background


@st.fragment(run_every=1.0)
def memory_pending() -> None:
    """Until the measurement is done: a note, checked every second; then the whole page once more."""
    if flash.memory_curve(int(mem_tile)) is not None:
        st.rerun(scope="app")
    st.info(f"Measuring the peak memory of plain and tiled attention up to T = {flash.MEMORY_TS[-1]:,} (key tile "
            f"{mem_tile}), once per server: the chart appears here in a few seconds.", icon=":material/hourglass_top:")


if mem is None:
    memory_pending()
else:
    Ts = mem.lengths
    show_fig(line_chart(Ts, {"plain attention (measured)": mem.plain_mb,
                             "tiled attention (measured)": mem.tiled_mb,
                             "T × T scores (float32)": mem.full_scores_mb,
                             "T × tile scores (float32)": mem.tile_scores_mb},
                        title=f"Peak memory, one head, d_k = {flash.MEMORY_D}, key tile {mem_tile}",
                        xaxis="sequence length T", yaxis="MiB", log_x=True, log_y=True,
                        dashed=["T × T scores (float32)", "T × tile scores (float32)"]),
             "flash_memory", table=flash.memory_frame(mem),
             alt="Log–log lines: plain attention's peak memory grows as T² (slope 2), the tiled loop's as T (slope 1).")
    st.caption(f"At T = {int(Ts[-1]):,}: plain {human_bytes(mem.plain_mb[-1] * MIB)}, tiled {human_bytes(mem.tiled_mb[-1] * MIB)} "
               f"(max |difference| {mem.max_diff[-1]:.1e}). Measured with torch's profiler "
               "(`profile_memory=True`: every tensor allocation and free, summed in time order; "
               "model.flash.measure_peak_bytes), once per server. Plain attention holds the scores and the softmax "
               "(2 × T × T); the tiled loop holds a T × tile block, its exponentials, the accumulator and the output.")
    st.caption("Time is another story: this loop runs in Python, one small matrix product per tile. FlashAttention "
               "is fast on GPUs because it is one fused kernel whose tiles stay in on-chip memory; here it is a "
               "teaching copy (benchmarks/bench_flash.py measures both).")
