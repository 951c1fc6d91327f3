"""Figures of the KV-cache page: bytes by variant. Arrays + labels in, figure out (no streamlit,
no torch)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import FONT, figure, visible


def bytes_bars(names: Sequence[str], values: Sequence[float], *, title: str = "", yaxis: str = "bytes",
               text: Sequence[str] | None = None, height: int = 360) -> go.Figure:
    """One bar per variant (e.g. KV-cache bytes for a context), labels escaped, optional text on
    each bar (e.g. "90.0 MiB")."""
    v = np.asarray(values, dtype=float).ravel()
    if len(names) != v.size:
        raise ValueError(f"names has {len(names)} entries but there are {v.size} values; pass one name per value")
    if not np.isfinite(v).all() or (v < 0).any():
        raise ValueError("values must be finite and non-negative (bytes)")
    cats = [visible(n) for n in names]
    bars = dict(type="bar", x=cats, y=v, marker=dict(color="#0072B2"),
                hovertemplate=f"%{{x}}<br>{visible(yaxis)} %{{y:,.0f}}<extra></extra>")
    if text is not None:
        if len(text) != v.size:
            raise ValueError("text must have one entry per value")
        bars.update(text=[visible(t) for t in text], textposition="outside", cliponaxis=False)
    return figure([bars], dict(title=dict(text=title) if title else None, font=FONT, height=height,
                               margin=dict(l=60, r=10, t=60 if title else 20, b=80),
                               xaxis=dict(type="category"),
                               yaxis=dict(title=dict(text=visible(yaxis)), rangemode="tozero")))
