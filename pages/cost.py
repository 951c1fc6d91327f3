"""Cost of attention: T² scores per head per layer, memory vs T, one block's measured time (and its
attention alone) vs T up to 1,024 with a fitted c + a·T + b·T² and what it shows, and GPT-2 small at
1,024 tokens in numbers."""

import json

import pandas as pd
import streamlit as st

from classroom import cost
from classroom.architecture import window_sentence
from labels.units import MIB, human_bytes
from model.config import PRESETS
from ui import state
from ui.cost import block_timing
from ui.runs import current_run
from ui.show import show_code, show_fig
from viz.charts import line_chart

st.title("Cost of attention")
show_code("model.attention.attend", what="the T × T scores")
run = current_run(layer=0)  # the page reads the run's length and model only: no more than one block's trace
cfg = run.cfg
T = run.T
st.caption("Every query scores every key: T × T numbers per head per layer. Double the text, four times the scores.")
c = cost.attention_cost(cfg, T)
m1, m2, m3 = st.columns(3)
m1.metric("your sentence", f"T = {T}")
m2.metric("scores per head per layer (T²)", f"{c.scores_per_head_layer:,}")
m3.metric(f"all {cfg.n_layers} layers × {cfg.n_heads} heads", f"{c.scores_total:,}",
          help=f"{c.memory_bytes:,} bytes as float32 if kept (training keeps them for the backward pass)")
if cfg.window is not None:  # sliding-window layers (Gemma 3: 15 local, 3 global) score at most w keys per query
    n_loc = sum(1 for i in range(cfg.n_layers) if cfg.layer_window(i) is not None)
    st.caption(f"{window_sentence(cfg)} A local layer needs at most {cfg.window:,} scores per query (T × "
               f"min(T, {cfg.window:,})), so counting the window: **{c.scores_windowed:,}** scores "
               f"({c.scores_windowed / c.scores_total:.0%} of T² in every layer); past {cfg.window:,} tokens only the "
               f"{cfg.n_layers - n_loc} global layer{'s' if cfg.n_layers - n_loc != 1 else ''} keep growing as T². "
               "The engine here computes every score and masks the rest (what the heatmaps show).")

state.bound("cost_tmax", 4096)
tmax_opts = [256, 1024, 4096, 16384]
state.fix("cost_tmax", tmax_opts, 4096)
tmax = st.select_slider("Plot sequence lengths up to", tmax_opts, key="cost_tmax")
Ts = cost.plot_lengths(tmax)
cc = cost.cost_curve(cfg, Ts)
curve = pd.DataFrame({"T": Ts, "scores per head per layer": cc.scores_per_head_layer, "scores, all heads & layers": cc.scores_total,
                      **({"scores, window counted": cc.scores_windowed} if cfg.window is not None else {}),
                      "memory MiB (float32)": cc.memory_bytes / MIB, "attention FLOPs (T²)": cc.flops_attention,
                      "projection + FFN FLOPs (T)": cc.flops_linear}).set_index("T")
l1, l2 = st.columns(2)
with l1:
    show_fig(line_chart(Ts, {"memory of all attention weights (MiB)": cc.memory_bytes / MIB,
                             **({"counting the window: local layers keep T × w (MiB)": cc.scores_windowed * 4 / MIB}
                                if cfg.window is not None else {})},
                        title=f"Attention-weight memory vs T ({cfg.n_layers} layers × {cfg.n_heads} heads)",
                        xaxis="sequence length T", yaxis="MiB (float32)", log_x=True, log_y=True),
             "cost_memory", table=curve, alt="On log–log axes a T² curve is a straight line of slope 2.")
with l2:
    show_fig(line_chart(Ts, {"attention (QKᵀ, weights·V) ∝ T²": cc.flops_attention,
                             "projections + FFN ∝ T": cc.flops_linear},
                        title="FLOPs per forward pass vs T", xaxis="sequence length T", yaxis="FLOPs",
                        log_x=True, log_y=True),
             "cost_flops", table=curve,
             alt=f"The T² part overtakes the linear part at T ≈ {cost.linear_quadratic_crossover(cfg):,} for this model "
                 f"(where {cost.crossover_formula(cfg)}).")

st.subheader("Measured: one block on this machine")
REPEATS = 15  # the fastest of 15: a shared machine has bursts of load (7 left visible dips)
t_grid = tuple(cost.block_time_grid(cfg.max_len))
st.caption("Theory says the T² part wins at long lengths. Here is where it actually does on this server: one "
           "block of this model's sizes (norms, projections, attention, FFN) and its attention alone (scores, "
           f"softmax, weights·V), timed at lengths up to {t_grid[-1]:,} tokens, the best of several runs each.")
measure = True
if run.source is not None and run.source.real:  # seconds of measuring: on request
    state.bound("cost_measure", False)
    measure = st.toggle(f"Measure one block of this model at {len(t_grid)} lengths up to {t_grid[-1]:,} "
                        "(takes a few seconds for a model this size)", key="cost_measure")


def measured() -> None:
    tm = block_timing(json.dumps(cfg.to_dict(), sort_keys=True), t_grid, REPEATS)
    blk, att = tm.block, tm.attention
    spread = tm.block_spread  # how much the runs of each length varied (median / best − 1)
    f = cost.fit_linear_quadratic(t_grid, blk)
    tt = pd.DataFrame({"T": t_grid, "whole block (ms)": blk * 1e3, "attention alone (ms)": att * 1e3,
                       "fit c + a·T + b·T² (ms)": f.fit * 1e3, "fit − measured (%)": f.rel_err * 100,
                       "runs' spread, median vs best (%)": spread * 100, "T² part of the fit (ms)": f.quadratic * 1e3,
                       "T² share of the fit (%)": f.share * 100}).set_index("T")
    show_fig(line_chart(t_grid, {"whole block (measured)": blk * 1e3, "attention alone (measured)": att * 1e3,
                                 "fit c + a·T + b·T²": f.fit * 1e3, "T² part of the fit": f.quadratic * 1e3},
                        title=f"Time of one block vs T (best of {REPEATS} runs each)", xaxis="sequence length T",
                        yaxis="milliseconds", dashed=["fit c + a·T + b·T²", "T² part of the fit"]),
             "cost_time", table=tt,
             alt=f"Measured milliseconds at T = {', '.join(map(str, t_grid))}, with the least-squares fit "
                 f"c + a·T + b·T² (c = {f.c * 1e3:.3f} ms, a = {f.a * 1e6:.3f} µs per token, "
                 f"b = {f.b * 1e9:.3f} ns per token²), fitted on relative errors; the table gives its "
                 "error at every length.")
    st.markdown(cost.timing_summary(t_grid, blk, att, cfg.max_len, spread=spread))
    st.dataframe(tt.style.format("{:.2f}"), width="stretch")
    st.caption("Measured once per architecture and cached. The machine is shared, so single timings are noisy; "
               "each point is the fastest of its runs, and the sentences above are computed from these numbers.")


if measure:
    measured()

st.subheader("GPT-2 small at 1,024 tokens")
g = PRESETS["gpt2-small"]
gc = cost.attention_cost(g, 1024)
st.dataframe(pd.DataFrame({"value": [
    f"{g.n_layers} layers × {g.n_heads} heads, d_model {g.d_model}, d_k {g.d_k}",
    f"1,024² = {gc.scores_per_head_layer:,}",
    f"{gc.scores_total:,}",
    f"{human_bytes(gc.memory_bytes, digits=0)} ({gc.memory_bytes:,} bytes) per sequence",
    f"{gc.flops_attention / 1e9:,.1f} GFLOPs",
    f"{gc.flops_linear / 1e9:,.1f} GFLOPs",
    f"{100 * gc.flops_attention / gc.flops_total:.0f}%"]},
    index=["shape", "scores per head per layer", "scores, all heads and layers", "attention weights as float32",
           "QKᵀ and weights·V", "projections and FFN", "attention share of the FLOPs"]), width="stretch")
