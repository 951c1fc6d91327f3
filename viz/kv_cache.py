"""Figures of the KV-cache page: bytes by variant. Arrays + labels in, figure out (no streamlit,
no torch)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from labels.units import byte_unit

from .common import FONT, figure, visible


def bytes_bars(names: Sequence[str], n_bytes: Sequence[float], *, title: str = "", what: str = "KV cache",
               height: int = 360) -> go.Figure:
    """One bar per variant (e.g. KV-cache bytes for a context). The axis, the text on each bar and
    the hover share one binary unit (labels.units: the largest bar's, e.g. MiB), so the axis and
    the labels beside it never disagree ("90.0 MiB" on a bar, an axis in MiB). Names escaped."""
    v = np.asarray(n_bytes, dtype=float).ravel()
    if len(names) != v.size:
        raise ValueError(f"names has {len(names)} entries but there are {v.size} values; pass one name per value")
    if not np.isfinite(v).all() or (v < 0).any():
        raise ValueError("values must be finite and non-negative (bytes)")
    unit = byte_unit(float(v.max()) if v.size else 0.0)
    y = v / unit.size
    fmt = ",.0f" if unit.size == 1 else ",.1f"
    cats = [visible(n) for n in names]
    bars = dict(type="bar", x=cats, y=y, marker=dict(color="#0072B2"),
                text=[f"{x:{fmt}} {unit.name}" for x in y], textposition="outside", cliponaxis=False,
                customdata=v, hovertemplate=f"%{{x}}<br>{visible(what)} %{{y:{fmt}}} {unit.name} "
                                            f"(%{{customdata:,.0f}} bytes)<extra></extra>")
    return figure([bars], dict(title=dict(text=title) if title else None, font=FONT, height=height,
                               margin=dict(l=60, r=10, t=60 if title else 20, b=80),
                               xaxis=dict(type="category"),
                               yaxis=dict(title=dict(text=f"{visible(what)} ({unit.name})"), rangemode="tozero")))
