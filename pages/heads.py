"""Attention heads: every head of one layer as a heatmap grid, a head in detail, a line view."""
import streamlit as st

from classroom.architecture import layer_span, window_sentence
from ui import circuits as sink
from ui import focus, live, state
from ui.head_labels import layer_labels
from ui.runs import current_cfg, current_run, layer_allowed
from ui.show import ATTENTION_CODE, deferred, download_npz, heads_table, matrix_table, shared_fig, show_code, show_fig
from ui.sidebar import example_buttons
from viz.attention import GRID_MAX_CELLS, head_grid, head_heatmap
from viz.common import block_note, block_step
from viz.heads import token_lines_html

LINE_VIEW_MAX_T = 64
TABS = ["Heatmap", "Lines", "Numbers"]

st.title("Attention heads")
if live.is_following():
    st.markdown("**Start here.** This page follows the lecturer: the sentence, the layer and the head change when "
                "the lecturer changes them. Each square below is one attention head: a row is a token *looking* (the "
                "query), a column a token it can look at (the key), and the brighter the cell, the more attention. "
                "“Explore on my own” above lets you try your own sentence.")
elif not st.session_state.get("present"):
    st.markdown("**Start here.** Type a sentence in the box on the left and press Enter. Each square below is one "
                "attention head: a row is a token *looking* (the query), a column a token it can look at (the key), "
                "and the brighter the cell, the more attention. The menu on the left opens every other view.")
example_buttons()
notices = st.container()  # the input's notices, above the controls (the run is asked for below them)
L = current_cfg().n_layers
state.bound("layer", 0)
state.fix("layer", list(range(L)))
c1, c2, c3, c4 = st.columns([1, 1, 1.2, 1.2], vertical_alignment="bottom")
layer = c1.selectbox("Layer", list(range(L)), key="layer", help="Which block's self-attention to show.")
hide = sink.sink_switch(c2)
with notices:
    run = current_run(layer=layer)  # this layer only, unless the whole trace is cached (ui.runs.get_run)
H = run.cfg.n_heads
picked = focus.focus_select(L, H, c3)
with c4:
    download_npz(run)

if picked is not None:  # the focused head, large, above the grid (its layer may be another than the grid's)
    fl, fh = picked
    frun = run if fl == layer else current_run(notices=False, layer=fl)
    fkeys = sink.sink_keys(frun) if hide else None
    fw = frun.trace.layers[fl].attn.weights[0]  # (H, T, T)
    focus.draw_focus(frun, fl, fh, (sink.hidden(frun, fw) if hide else fw)[fh], layer_allowed(frun, fl), fkeys)
    del frun, fw

w = run.trace.layers[layer].attn.weights[0]  # (H, T, T)
allowed = layer_allowed(run, layer)  # (T, T)
keys = sink.sink_keys(run) if hide else None  # the hidden sink's key columns
pats = layer_labels(run, layer, keys)  # one HeadPattern per head (cached with the trace; the sink named apart when hidden)
shown = sink.hidden(run, w) if hide else w  # (H, T, T): as computed, or the derived sink-hidden view
mode = "causal" if run.causal else "bidirectional"
legend = (f"{H} heads · {run.T} tokens · {mode} mask · every row sums to 1 · grey = masked (not allowed to look). "
          "Each head's title names its pattern and the score that decided it. "
          + block_note(block_step(run.T, GRID_MAX_CELLS), run.T))
if hide:
    sink.derived_note(run)
if run.cfg.window is not None:  # which layers slide and which are global (Gemma 3), from the config
    legend = layer_span(run.cfg, layer) + " " + window_sentence(run.cfg) + " " + legend
if not st.session_state.get("present"):
    st.caption(legend)


def grid():
    """The grid of this run's layer: the same for every session showing it (ui.show.shared_fig)."""
    return head_grid(shown, run.labels, allowed=allowed, hidden_keys=keys,
                     subtitles=[f"head {h} · {p.title()}" for h, p in enumerate(pats)],
                     title=f"Layer {layer}: {mode} attention, all {H} heads"
                     + ("" if run.cfg.window is None else
                        " · global" if run.cfg.layer_window(layer) is None else f" · window {run.cfg.layer_window(layer)}")
                     + (" · sink hidden" if hide else ""))


show_fig(shared_fig(run, ("heads_grid", layer, hide), grid), "heads_grid",
         table=deferred(heads_table, shown, run.labels, layer), filename=f"layer{layer}_heads",
         alt="Heatmaps of attention weights; shared colour scale 0..1 (Cividis); hover a cell for its exact value.")
focus.head_buttons(layer, H)
if st.session_state.get("present"):
    st.caption(legend)  # under the grid on a projector: the heatmaps start higher up the screen


@st.fragment
def head_detail() -> None:
    """One head: the heatmap, its numbers, and the line view. Behind an expander that computes
    nothing while closed (a second heatmap on every keystroke cost a quarter of the page's rerun
    and of its repaint); opening it or changing the head reruns this fragment alone.
    It reads the run itself (current_run: the shared cache) instead of the page's globals: Streamlit
    keeps a session's fragments, and with them the page's namespace, until its next run, and
    that namespace no longer holds the trace (deleted at the end of the page). Holding it cost
    ~70 MB per SmolLM2 session under load (benchmarks/ws_load.py: 10 sessions peaked at 2.4 GB
    with it, 1.7 GB without)."""
    state.bound("detail", False)
    box = st.expander("One head in detail: heatmap, line view, numbers", key="detail", on_change="rerun",
                      icon=":material/zoom_in:")
    with box:
        if box.open:
            layer = st.session_state["layer"]
            run = current_run(notices=False, layer=layer)
            hide = bool(st.session_state.get("hide_sink"))
            w = run.trace.layers[layer].attn.weights[0]  # (H, T, T)
            keys = sink.sink_keys(run) if hide else None
            detail_body(run, layer, sink.hidden(run, w) if hide else w, layer_allowed(run, layer),
                        layer_labels(run, layer, keys), keys)
    state.sync_url()


def detail_body(run, layer: int, w, allowed, pats, keys=None) -> None:
    """w (H, T, T): the weights shown (as computed, or with the sink hidden: keys, its columns)."""
    H = w.shape[0]
    state.bound("head", 0)
    state.fix("head", list(range(H)))
    title = lambda i: f"head {i} · {pats[i].title()}"  # noqa: E731  (the title follows the pattern)
    state.follow_labels("head", list(range(H)), title)
    h = st.selectbox("Head", list(range(H)), key="head", format_func=title)
    # lazy tabs: only the open tab's content is computed and sent (a tab switch reruns this fragment)
    state.bound("head_tab", "Heatmap")
    state.fix("head_tab", TABS)
    tab_map, tab_lines, tab_numbers = st.tabs(TABS, key="head_tab", on_change="rerun")
    table = matrix_table(w[h], run.labels, run.labels)
    with tab_map:
        if tab_map.open:
            show_fig(head_heatmap(w[h], run.labels, allowed=allowed, hidden_keys=keys,
                                  title=f"Layer {layer}, head {h}" + ("" if keys is None else " · sink hidden")),
                     "head_detail", table=table, filename=f"layer{layer}_head{h}",
                     alt="Rows: queries; columns: keys; grey: masked.")
    with tab_lines:
        if tab_lines.open:
            if run.T > LINE_VIEW_MAX_T:
                st.info(f"The line view is drawn for up to {LINE_VIEW_MAX_T} tokens (this input has {run.T}); "
                        "lower the max sequence length in the sidebar to see it.", icon=":material/info:")
            else:
                st.caption("Each line joins a query (left) to a key (right); its opacity is the attention weight. "
                           "Hover a token to see only its lines; hover a line for its exact value.")
                st.html(token_lines_html(w[h], run.labels, dom_id="heads-lines",
                                         title=f"layer {layer}, head {h}" + ("" if keys is None else " · sink hidden")))
    with tab_numbers:
        if tab_numbers.open:
            st.dataframe(table, width="stretch", height=min(600, 38 + 35 * run.T),
                         column_config={c: st.column_config.NumberColumn(format="%.4f") for c in table.columns})
            sc = pats[h].scores
            st.caption("Pattern scores (model/patterns.py): " + ", ".join(f"{k} {v:.3f}" for k, v in sc.items()))


head_detail()
show_code(*ATTENTION_CODE, what="attention weights: q kᵀ, scaling, mask, softmax")
del run, w, shown, allowed, pats  # the trace is not kept alive by this page's namespace (see head_detail)
