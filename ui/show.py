"""Display helpers: every chart with its PNG (modebar camera) and its numbers as CSV."""
from __future__ import annotations

import re

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

PLOT_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", s).strip("-")[:60] or "chart"


def show_fig(fig: go.Figure, key: str, *, table: pd.DataFrame | None = None, alt: str = "",
             filename: str | None = None) -> None:
    """Draw a figure (PNG via the camera button) with an optional CSV download of its numbers and
    a caption describing it (alt text for screen readers)."""
    name = _slug(filename or key)
    st.plotly_chart(fig, key=key, width="stretch",
                    config={**PLOT_CONFIG, "toImageButtonOptions": {"format": "png", "filename": name, "scale": 2}})
    if alt:
        st.caption(alt)
    if table is not None:
        st.download_button("⬇ CSV", table.to_csv().encode("utf-8"), file_name=f"{name}.csv",
                           mime="text/csv", key=f"{key}__csv")


def matrix_table(z, row_labels, col_labels) -> pd.DataFrame:
    """A labelled table of a matrix (unique row/column names like '3:the')."""
    rows = [f"{i}:{r}" for i, r in enumerate(row_labels)]
    cols = [f"{j}:{c}" for j, c in enumerate(col_labels)]
    return pd.DataFrame(z, index=rows, columns=cols)
