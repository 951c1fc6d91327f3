"""Figures for the Generate page: the next-token distribution as horizontal bars, through the
sampling rule stage by stage, and the KV cache growing."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from labels.units import byte_unit

from .charts import line_chart
from .common import FONT, OKABE_ITO, legend_below_title, visible


def topk_bars(labels: Sequence[str], probs: Sequence[float], *, chosen: int | None = None, title: str = "",
              height: int | None = None) -> go.Figure:
    """The k most likely next tokens, most likely on top; `chosen` (an index into labels) is drawn
    in a second colour and named in the legend. Labels are escaped (user and model text)."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or len(labels) != p.shape[0]:
        raise ValueError(f"labels ({len(labels)}) and probs {p.shape} must be one entry per token")
    names = [f"{i + 1}. {visible(t)}" for i, t in enumerate(labels)]
    colors = [OKABE_ITO[1] if i == chosen else OKABE_ITO[0] for i in range(len(names))]
    fig = go.Figure(go.Bar(x=p, y=names, orientation="h", marker_color=colors, text=[f"{v:.3f}" for v in p],
                           textposition="outside", cliponaxis=False,
                           hovertemplate="%{y}: p = %{x:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title="probability", range=[0, max(1e-9, float(p.max())) * 1.18])
    fig.update_layout(title=dict(text=title, x=0, xanchor="left") if title else None, font=FONT,
                      height=height or 60 + 26 * len(names), margin=dict(l=10, r=10, t=40 if title else 10, b=10),
                      showlegend=False)
    return fig


MODEL_COLOR, TEMPERED_COLOR, RULE_COLOR = "#9ecae1", OKABE_ITO[1], OKABE_ITO[0]
KEPT_FILL = "rgba(0, 158, 115, 0.13)"  # Okabe-Ito green, light: the band behind the kept set


def sampling_bars(labels: Sequence[str], p_model: Sequence[float], p_tempered: Sequence[float] | None,
                  p_rule: Sequence[float], kept: Sequence[bool], dropped_by: Sequence[str] = (), *,
                  temperature_name: str = "÷ temperature", rule_name: str = "after top-k / top-p, renormalised",
                  chosen: int | None = None, title: str = "", height: int | None = None) -> go.Figure:
    """The next-token distribution through the sampling rule, one group of three bars per token
    (most likely on top): the model's probability (temperature 1), after the temperature, and what
    the next token is drawn from (kept and renormalised). The kept set has a green band behind it;
    a token the rule drops says why at the end of its row ("✕ top-k"). p_tempered None (greedy: no
    temperature) leaves the middle bar out. `chosen` (an index into labels) is starred. Labels are
    escaped (user and model text)."""
    pm, pr = np.asarray(p_model, dtype=np.float64), np.asarray(p_rule, dtype=np.float64)
    pt = pm if p_tempered is None else np.asarray(p_tempered, dtype=np.float64)
    keep = np.asarray(kept, dtype=bool)
    n = len(labels)
    for a, name in ((pm, "p_model"), (pt, "p_tempered"), (pr, "p_rule"), (keep, "kept")):
        if a.shape != (n,):
            raise ValueError(f"{name} has shape {a.shape}; pass one value per label ({n})")
    if dropped_by and len(dropped_by) != n:
        raise ValueError(f"dropped_by has {len(dropped_by)} entries; pass one per label ({n})")
    names = [f"{i + 1}. {visible(t)}" + (" ★" if i == chosen else "") for i, t in enumerate(labels)]
    fig = go.Figure()
    stages = [(pm, "model (temperature 1)", MODEL_COLOR), (pt, temperature_name, TEMPERED_COLOR), (pr, rule_name, RULE_COLOR)]
    for vals, name, color in (stages if p_tempered is not None else [stages[0], stages[2]]):
        fig.add_trace(go.Bar(x=vals, y=names, orientation="h", name=visible(name), marker_color=color,
                             hovertemplate=f"%{{y}}<br>{visible(name)}: p = %{{x:.4f}}<extra></extra>"))
    top = float(max(pm.max(initial=0), pt.max(initial=0), pr.max(initial=0), 1e-9))
    for i in np.flatnonzero(keep):  # the band behind each kept row
        fig.add_shape(type="rect", xref="x domain", yref="y", x0=0, x1=1, y0=i - 0.5, y1=i + 0.5,
                      fillcolor=KEPT_FILL, line=dict(width=0), layer="below")
    for i, why in enumerate(dropped_by):
        if why:
            fig.add_annotation(x=top * 1.02, y=names[i], text=f"✕ {visible(why)}", showarrow=False, xanchor="left",
                               font=dict(size=12, color="#7f7f7f"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title="probability", range=[0, top * 1.25])
    h = height or 110 + 30 * n
    fig.update_layout(title=dict(text=title, x=0, xanchor="left", y=1, yanchor="top", yref="container",
                                 pad=dict(t=8)) if title else None, font=FONT, height=h, barmode="group",
                      bargap=0.2, bargroupgap=0.0, margin=dict(l=10, r=10, t=(40 if title else 10) + 30, b=10),
                      showlegend=True, legend=legend_below_title(40 if title else 0, h))
    return fig


def cache_growth_chart(context: Sequence[int], series: dict[str, Sequence[float]], *, title: str = "",
                       height: int = 280) -> go.Figure:
    """KV-cache bytes against the positions cached, one line per series (bytes). The y axis is in
    one binary unit (labels.units: the largest value's); the x axis ticks whole positions only (a
    few points made Plotly tick at 5.5 positions; issue 33)."""
    x = np.asarray(context, dtype=np.int64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("context must be a non-empty 1-D list of positions")
    vals = {k: np.asarray(v, dtype=np.float64) for k, v in series.items()}
    for k, v in vals.items():
        if v.shape != x.shape:
            raise ValueError(f"series {k!r} has shape {v.shape}; pass one value per position ({x.size})")
    unit = byte_unit(max(float(v.max()) for v in vals.values()) if vals else 0.0)
    fig = line_chart(x, {k: v / unit.size for k, v in vals.items()}, xaxis="positions in the cache",
                     yaxis=f"{unit.name}", title=title, height=height)
    span = int(x.max() - x.min())
    step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000) if s * 8 >= span or s == 10_000)
    fig.update_xaxes(tick0=0, dtick=step, tickformat="d")
    fmt = ",.0f" if unit.size == 1 else ",.1f"
    fig.update_traces(hovertemplate=f"%{{fullData.name}}<br>%{{x}} positions: %{{y:{fmt}}} {unit.name}<extra></extra>")
    return fig
