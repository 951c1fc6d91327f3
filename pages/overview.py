"""All layers x all heads as thumbnails, each labelled with its dominant pattern (deep models: a
page of layers at a time)."""
import pandas as pd
import streamlit as st

from classroom.architecture import window_sentence
from model.patterns import BORDERLINE
from ui import circuits as sink
from ui import focus, state
from ui.head_labels import layer_labels
from ui.runs import current_cfg, current_length, current_run, layer_allowed, whole_pass_cost
from ui.show import download_npz, show_code, show_fig
from ui.sidebar import example_buttons
from viz.attention import THUMB_MAX_CELLS, overview_grid
from viz.common import block_note, block_step

PER_PAGE = 6  # layers per page on deep models (SmolLM2: 30 layers × 9 heads = 5 pages of 54 thumbnails)
LABEL_ALL_MAX = 24_000_000  # weights labelled for the table in one rerun (~0.8 s here), else the shown layers'

st.title("All heads overview")
show_code("model.patterns.pattern_scores_all", "model.patterns._label", what="the head labels")
example_buttons()
notices = st.container()  # the input's notices, above the controls (the run is asked for below them)
cfg = current_cfg()
L, H = cfg.n_layers, cfg.n_heads
c1, c2 = st.columns([1, 1], vertical_alignment="bottom")
hide = sink.sink_switch(c1)
if L > PER_PAGE + 2:
    groups = [f"layers {a}–{min(a + PER_PAGE, L) - 1}" for a in range(0, L, PER_PAGE)]
    state.bound("ov_layers", groups[0])
    state.fix("ov_layers", groups)
    group = st.segmented_control("Layers", groups, key="ov_layers",
                                 help=f"{L} layers × {H} heads = {L * H} heads, {PER_PAGE} layers at a time.") or groups[0]
    first = groups.index(group) * PER_PAGE
else:
    first = 0
shown = range(first, min(first + PER_PAGE, L)) if L > PER_PAGE + 2 else range(L)
picked = focus.focus_select(L, H, c2)
# The table lists every head, unless labelling them all would hold up the page (a deep model at a long
# input: SmolLM2's 270 heads at 1,024 tokens are 283M weights, ~10 s): then the shown layers', and
# the page traces those layers only (a partial trace, unless the whole one is cached: ui.runs.get_run).
listed = range(L) if whole_pass_cost(cfg, current_length()) <= LABEL_ALL_MAX else shown
with notices:
    run = current_run(layer=None if listed == range(L) else shown)
keys = sink.sink_keys(run) if hide else None  # the hidden sink's key columns
if hide:
    sink.derived_note(run)
w = [run.trace.layers[l].attn.weights[0] for l in shown]  # (H, T, T) per shown layer: views, no copy
if hide:
    w = [sink.hidden(run, x) for x in w]  # the derived view: the sink's columns out, rows renormalised
allowed = [layer_allowed(run, l) for l in shown]
if picked is not None:  # the focused head, large, above the thumbnails (its layer may be off this page of layers)
    fl, fh = picked  # (run traced the listed layers)
    frun = run if fl in listed else current_run(notices=False, layer=fl)
    fw = frun.trace.layers[fl].attn.weights[0]  # (H, T, T)
    focus.draw_focus(frun, fl, fh, (sink.hidden(frun, fw) if hide else fw)[fh], layer_allowed(frun, fl),
                     sink.sink_keys(frun) if hide else None)
    del frun, fw
pats = {l: layer_labels(run, l, keys) for l in listed}  # [layer][head] -> HeadPattern (cached with the trace)
def wide_label(p) -> str:
    """Few heads, wide thumbnails: the full pattern name ("previous-token ≈0.42", "other ≈self/diagonal")."""
    mark = "≈" if p.borderline() else ""
    return (f"{p.kind} {mark}{p.score:.2f}" if p.kind != "other" else
            "other" + (f" {mark}{p.nearest}" if mark else "")) + ("" if p.sink is None else f" · sink {p.sink:.2f}")


subtitles = [f"L{l} H{h}: {wide_label(pats[l][h])}" if H <= 6 else f"L{l} H{h}<br>{pats[l][h].short(mark_borderline=H <= 9, sink_sep='<br>')}"
             for l in shown for h in range(H)]
n_border = sum(p.borderline() for row in pats.values() for p in row)
n_heads = len(listed) * H
st.caption(f"{L} layers (rows) × {H} heads (columns), {run.T:,} tokens. Each thumbnail's title names the head and "
           "its label: the pattern whose score clears its threshold by the most (prev = previous-token, next = "
           "next-token, self = diagonal, 1st sink = first token, CLS/SEP = special tokens, broad = uniform), with "
           f"that score; \"other\" when no score reaches its threshold. "
           + (f"**≈** marks a borderline label " if H <= 9 else "The table marks borderline labels ")
           + f"(within {BORDERLINE} of the threshold, {n_border} of {n_heads} heads here): another sentence may flip them. "
           "Hover a thumbnail for the token pair and weight. "
           + block_note(block_step(run.T, THUMB_MAX_CELLS), run.T))
if cfg.window is not None:  # sliding-window and global layers (Gemma 3: 5 local for every global), from the config
    st.caption(window_sentence(cfg) + " Grey cells left of the band are keys a local layer cannot see.")
rows = []
for l in listed:
    span = "global" if cfg.layer_window(l) is None else f"sliding window {cfg.layer_window(l):,}"
    for h, p in enumerate(pats[l]):
        ru, ru_margin = p.runner_up()
        rows.append({"layer": l, **({"attention": span} if cfg.window is not None else {}), "head": h, "label": p.kind, "decided by": p.nearest, "its score": round(p.score, 4),
                     "its threshold": p.threshold, "margin": round(p.margin, 4),
                     "borderline": "≈" if p.borderline() else "", "runner-up": ru,
                     "runner-up margin": round(ru_margin, 4),
                     **({} if p.sink is None else {"sink (hidden)": round(p.sink, 4)}),
                     **{k: round(v, 4) for k, v in p.scores.items()}})
table = pd.DataFrame(rows)
show_fig(overview_grid(w, subtitles=subtitles, allowed=allowed, labels=run.labels, first_layer=shown.start,
                       hidden_keys=keys),
         "overview_grid", filename="all_heads", table=table,
         alt="Thumbnails share the 0..1 Cividis scale; grey cells are masked.")
st.subheader("Labels and scores" + (f" (layers {listed.start}–{listed.stop - 1})" if len(listed) < L else ""))
if len(listed) < L:
    st.caption(f"At {run.T:,} tokens the table lists the layers shown above (labelling all {L * H} heads would read "
               f"{L * H * run.T ** 2 / 1e6:,.0f}M weights, ~10 s, before the page could show); pick another layer group for the others.")
st.caption("Each pattern has its own threshold (broad/uniform needs 0.9, previous-token 0.4, …), so the label is "
           "decided by the **margin** = score − threshold, not by the largest raw score: a head can have broad/uniform "
           "0.55 (margin −0.35) and self/diagonal 0.26 (margin −0.14); both miss, and self/diagonal is the nearest. "
           "The runner-up is the pattern with the next-largest margin. The last columns are every raw score.")
st.dataframe(table, width="stretch", hide_index=True)
download_npz(run)
