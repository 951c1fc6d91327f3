"""All layers x all heads as thumbnails, each labelled with its dominant pattern."""
import numpy as np
import pandas as pd
import streamlit as st

from model.patterns import THRESHOLDS, label_heads
from ui.compute import current_run, layer_allowed
from ui.sidebar import example_buttons
from ui.show import download_npz, show_fig
from viz.attention import overview_grid

st.title("All heads overview")
example_buttons()
run = current_run()
L, H = run.cfg.n_layers, run.cfg.n_heads
w = np.stack([block.attn.weights[0] for block in run.trace.layers])  # (L, H, T, T)
allowed = np.stack([np.broadcast_to(layer_allowed(run, l), w.shape[1:]) for l in range(L)])
pats = label_heads(w, run.special_keys)  # [layer][head] -> HeadPattern
# thumbnails are small: "other" heads show the kind only (the table says which pattern came closest)
subtitles = [f"L{l} H{h}: {p.kind}" + (f" {p.score:.2f}" if p.kind != "other" else "") if H <= 6 else
             f"L{l} H{h}<br>{p.short()}"  # many heads: narrow thumbnails, two short lines
             for l in range(L) for h, p in enumerate(pats[l])]
st.caption(f"{L} layers (rows) × {H} heads (columns), {run.T} tokens. The label under each title is the "
           "head's dominant pattern (previous-token, next-token, self/diagonal, first-token sink, [CLS]/[SEP] "
           "sink (models with those tokens), broad/uniform or other) with the score that decided it. A head is \"other\" when no score reaches its threshold; "
           "the table below shows, for every head, the nearest pattern, its score and threshold, and all scores.")
show_fig(overview_grid(w, subtitles=subtitles, allowed=allowed), "overview_grid", filename="all_heads",
         table=lambda: table, alt="Thumbnails share the 0..1 Cividis scale; grey cells are masked.")
table = pd.DataFrame([{"layer": l, "head": h, "pattern": p.kind, "nearest pattern": p.nearest,
                       "its score": round(p.score, 4), "threshold": THRESHOLDS[p.nearest],
                       **{k: round(v, 4) for k, v in p.scores.items()}}
                      for l in range(L) for h, p in enumerate(pats[l])])
st.subheader("Labels and scores")
st.dataframe(table, width="stretch", hide_index=True)
download_npz(run)
