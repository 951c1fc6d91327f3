"""Figures of the layer-norm page: the residual stream's norm per token and stage. Arrays + labels
in, figure out (no streamlit, no torch)."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .charts import matrix_heatmap
from .common import as_array


def residual_norm_heatmap(norms: np.ndarray, labels: Sequence[str], stages: Sequence[str], *, log: bool = False,
                          title: str = "", annotate: bool | None = None) -> go.Figure:
    """‖residual stream‖ per token (rows) and stage (columns): norms (S stages, T tokens), as
    classroom.layer_norm.residual_norms returns them. log=True colours by log10 of the norm (the
    colour bar labelled in norms: 10, 100, 1k …) while the cells and the hover keep the norms
    themselves: one token at ~20,000 (SmolLM2's first) no longer paints every other cell the same
    colour (issue 33)."""
    n = as_array(norms, 2, "norms", "(stages, tokens)").astype(np.float64)
    if (n < 0).any() or not np.isfinite(n).all():
        raise ValueError("norms must be finite and non-negative")
    z = n.T  # (T, S)
    annotate = (z.size <= 150) if annotate is None else annotate
    if not log:
        return matrix_heatmap(z, labels, stages, title=title, colorscale="Viridis", zmid=None, annotate=annotate,
                              fmt=".1f", value_name="L2 norm")
    floor = max(float(z[z > 0].min()) if (z > 0).any() else 1.0, 1e-6)
    zl = np.log10(np.maximum(z, floor))
    fig = matrix_heatmap(zl, labels, stages, title=title, colorscale="Viridis", zmid=None, annotate=False,
                         value_name="L2 norm (log scale)")
    lo, hi = math.floor(float(zl.min())), math.ceil(float(zl.max()))
    ticks = list(range(lo, hi + 1))
    fig.update_traces(customdata=z, hovertemplate="%{y}<br>%{x}<br>L2 norm %{customdata:,.1f}<extra></extra>",
                      colorbar=dict(title="L2 norm (log scale)", thickness=12, tickvals=ticks,
                                    ticktext=[f"{10 ** t:,.0f}" if t >= 0 else f"{10 ** t:g}" for t in ticks]))
    if annotate:
        fig.update_traces(text=np.vectorize(lambda v: format(v, ",.0f") if v >= 100 else format(v, ".1f"))(z),
                          texttemplate="%{text}")
    return fig
