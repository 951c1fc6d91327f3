"""Training figures (pure: numpy in, plotly Figure out): the loss curve and per-head pattern
scores over training. Attention snapshots use viz.attention.head_grid."""
from __future__ import annotations

import html
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import FONT, OKABE_ITO, as_array


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over the last `window` values (fewer at the start); same length as values.
    Non-finite values are skipped (a window of only non-finite values gives NaN)."""
    v = as_array(values, 1, "values", "(steps,)").astype(np.float64)
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    ok = np.isfinite(v)
    csum = np.concatenate([[0.0], np.cumsum(np.where(ok, v, 0.0))])
    ccnt = np.concatenate([[0], np.cumsum(ok)])
    idx = np.arange(1, len(v) + 1)
    lo = np.maximum(0, idx - window)
    n = ccnt[idx] - ccnt[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (csum[idx] - csum[lo]) / np.maximum(n, 1), np.nan)


def loss_curve(losses: Sequence[float] | np.ndarray, *, total_steps: int | None = None, window: int | None = None,
               baseline: float | None = None, title: str = "") -> go.Figure:
    """Training loss per step (x = step 1..n): the raw loss (thin) and its moving average (bold).

    total_steps fixes the x range so a live curve grows towards the right edge. baseline: a
    reference loss drawn as a dotted line (e.g. ln(vocab) = a uniform guess). Non-finite losses
    are left as gaps (never drawn as huge numbers)."""
    y = as_array(np.asarray(losses, dtype=np.float64), 1, "losses", "(steps,)")
    n = len(y)
    if total_steps is not None and total_steps < n:
        raise ValueError(f"total_steps={total_steps} is smaller than the {n} losses given")
    y = np.where(np.isfinite(y), y, np.nan)
    x = np.arange(1, n + 1, dtype=np.int32)
    window = window or max(1, min(25, n // 10 or 1))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name="loss per step", line=dict(color=OKABE_ITO[4], width=1),
                             hovertemplate="step %{x}<br>loss %{y:.4f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=x, y=moving_average(y, window), mode="lines", name=f"mean of last {window}",
                             line=dict(color=OKABE_ITO[0], width=3),
                             hovertemplate=f"step %{{x}}<br>mean of last {window}: %{{y:.4f}}<extra></extra>"))
    if baseline is not None and np.isfinite(baseline):
        fig.add_hline(y=float(baseline), line=dict(color=OKABE_ITO[7], dash="dot", width=1),
                      annotation_text=f"uniform guess {baseline:.2f}", annotation_position="top right")
    if n == 0:
        fig.add_annotation(text="waiting for the first step …", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper", font=dict(size=16))
    hi = total_steps if total_steps else max(n, 1)
    fig.update_xaxes(title="step", range=[0, hi + 0.5])
    fig.update_yaxes(title="cross-entropy loss (nats)", rangemode="tozero")
    fig.update_layout(title=html.escape(title) or None, font=FONT, height=340,
                      margin=dict(l=10, r=10, t=40 if title else 10, b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=1, xanchor="right"))
    return fig


def score_curves(steps: np.ndarray, scores: np.ndarray, names: Sequence[str], *, score_name: str = "score",
                 highlight: float | None = None, title: str = "") -> go.Figure:
    """One line per head: a pattern score (0..1) at each snapshot step. steps (S,), scores (S, N),
    names N labels. highlight: the step of the snapshot shown above (a vertical marker)."""
    s = as_array(np.asarray(steps, dtype=np.float64), 1, "steps", "(S,)")
    z = as_array(np.asarray(scores, dtype=np.float64), 2, "scores", "(S, heads)")
    if z.shape[0] != len(s):
        raise ValueError(f"scores has {z.shape[0]} rows but there are {len(s)} steps; pass one row per snapshot")
    if len(names) != z.shape[1]:
        raise ValueError(f"names has {len(names)} entries but scores has {z.shape[1]} columns; pass one name per head")
    fig = go.Figure()
    for i, name in enumerate(names):
        label = html.escape(str(name))
        fig.add_trace(go.Scatter(x=s, y=z[:, i], mode="lines+markers", name=label,
                                 line=dict(color=OKABE_ITO[i % len(OKABE_ITO)], width=2,
                                           dash=["solid", "dash", "dot", "dashdot"][(i // len(OKABE_ITO)) % 4]),
                                 hovertemplate=f"{label}<br>step %{{x}}<br>{html.escape(score_name)} %{{y:.3f}}<extra></extra>"))
    if highlight is not None:
        fig.add_vline(x=float(highlight), line=dict(color="#888", dash="dot"))
    fig.update_xaxes(title="step")
    fig.update_yaxes(title=html.escape(score_name), range=[0, 1.02])
    fig.update_layout(title=html.escape(title) or None, font=FONT, height=320,
                      margin=dict(l=10, r=10, t=40 if title else 10, b=10))
    return fig
