"""Display helpers: every chart with its PNG (modebar camera) and its numbers as CSV."""
from __future__ import annotations

import re
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

PLOT_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", s).strip("-")[:60] or "chart"


def show_fig(fig: go.Figure, key: str, *, table: pd.DataFrame | Callable[[], pd.DataFrame] | None = None,
             alt: str = "", filename: str | None = None) -> None:
    """Draw a figure (PNG via the camera button) with an optional CSV download of its numbers and
    a caption describing it (alt text for screen readers). `table` may be a callable: the CSV is
    then only made when the button is clicked."""
    name = _slug(filename or key)
    st.plotly_chart(fig, key=key, width="stretch",
                    config={**PLOT_CONFIG, "toImageButtonOptions": {"format": "png", "filename": name, "scale": 2}})
    if alt:
        st.caption(alt)
    if table is not None:
        make = table if callable(table) else (lambda: table)
        st.download_button("CSV of these numbers", lambda: make().to_csv().encode("utf-8"),
                           file_name=f"{name}.csv", mime="text/csv", key=f"{key}__csv",
                           on_click="ignore", icon=":material/download:")


def matrix_table(z, row_labels, col_labels) -> pd.DataFrame:
    """A labelled table of a matrix (unique row/column names like '3:the')."""
    rows = [f"{i}:{r}" for i, r in enumerate(row_labels)]
    cols = [f"{j}:{c}" for j, c in enumerate(col_labels)]
    return pd.DataFrame(z, index=rows, columns=cols)


def heads_table(weights: np.ndarray, labels: Sequence[str], layer: int) -> pd.DataFrame:
    """weights (H, Tq, Tk) as a long table: layer, head, query, key, weight (one row per cell)."""
    H, Tq, Tk = weights.shape
    h, q, k = np.meshgrid(np.arange(H), np.arange(Tq), np.arange(Tk), indexing="ij")
    lab = [f"{i}:{t}" for i, t in enumerate(labels)]
    return pd.DataFrame({"layer": layer, "head": h.ravel(), "query": np.asarray(lab, dtype=object)[q.ravel()],
                         "key": np.asarray(lab, dtype=object)[k.ravel()], "weight": weights.ravel()})


def download_npz(run, key: str = "npz") -> None:
    """The whole trace of the current input as .npz (keys follow the trace contract)."""
    from .compute import npz_bytes  # local import: compute imports streamlit state helpers
    st.download_button("Whole trace (.npz)", lambda: npz_bytes(run), file_name="attention_lab_trace.npz",
                       mime="application/octet-stream", key=key, on_click="ignore",
                       icon=":material/download:",
                       help="Every intermediate of this forward pass, keys like layers.0.attn.weights "
                            "(axes: batch, head, query, key), plus token_ids and token_labels.")
