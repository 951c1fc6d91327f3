"""The search-engine analogy for Q, K, V (classroom/search.py), drawn on the calculator page."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from classroom import search as se
from ui import state
from ui.show import show_fig
from viz.charts import bar_compare


def render() -> None:
    st.subheader("Q, K, V as a search engine")
    st.caption("A query is matched against every document's key (a dot product), the softmax turns the matches "
               "into a blend that sums to 1, and the documents' values come back mixed by that blend. The same "
               "numbers as the attention formula softmax(q Kᵀ / √d_k) V, computed by the model's own attention function.")
    lib = se.LIBRARY
    cols = st.columns(len(se.FEATURES) + 1)
    query = []
    for c, (f, dflt) in zip(cols, zip(se.FEATURES, (2.0, 0.0, 0.0))):
        state.bound(f"search_{f}", dflt)
        query.append(c.slider(f"Query: {f}", -3.0, 3.0, step=0.5, key=f"search_{f}",
                              help=f"How much the query asks for {f}."))
    state.bound("search_scale", True)
    scale = cols[-1].toggle("Scale by 1/√d_k", key="search_scale")
    r = se.search(query, lib, scale=scale)
    table = pd.DataFrame({**{f"key: {f}": lib.keys[:, i] for i, f in enumerate(se.FEATURES)},
                          "score q·k": r.scores, f"scaled (× {r.scale:.4f})": r.scaled, "weight (softmax)": r.weights,
                          **{f"value: {n}": lib.values[:, i] for i, n in enumerate(se.VALUE_NAMES)}},
                         index=pd.Index(lib.titles, name="document"))
    st.dataframe(table.style.format("{:.4f}"), width="stretch")
    out = ", ".join(f"{n} {v:.4f}" for n, v in zip(se.VALUE_NAMES, r.output))
    top = lib.titles[int(r.weights.argmax())]
    st.markdown(f"**Returned value** Σ_j weight_j · value_j: {out}. The best match is *{top}* "
                f"({r.weights.max():.1%} of the blend); unlike a search engine that returns one document, attention "
                "returns a blend of all of them.")
    show_fig(bar_compare(list(lib.titles), {"weight": r.weights}, tokens=False,
                         title="The blend: softmax of the scores (sums to 1)", yaxis="weight", text_format=".3f"),
             "search_weights", table=table[["weight (softmax)"]])
