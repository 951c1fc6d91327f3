"""The tiled-attention page's helpers: one head's q, k, v from the sidebar run, its tile-by-tile walk
(classroom.flash.tile_walk), and the memory measurement (classroom.flash.memory_curve), cached.

The numbers come from classroom/flash.py over model/flash.py and model/attention.py; this module
only selects, caches and tabulates.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from classroom import flash
from classroom.flash import MEMORY_D, MEMORY_TILES, MemoryCurve, TileWalk  # noqa: F401 (the page's controls)
from ui.runs import Run, layer_allowed


def sentence(text: str) -> str:
    """The message with its first letter in upper case (str.capitalize would lower "T" too)."""
    return text[:1].upper() + text[1:]


def head_inputs(run: Run, layer: int, head: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(q (Tq, d_k), k (Tk, d_k), v (Tk, d_v), allowed (Tq, Tk)) of one head, from the run's trace.
    Grouped-query models: the K/V head this query head reads (attn.kv_head)."""
    a = run.trace.layers[layer].attn
    kv = head if a.kv_head is None else int(a.kv_head[head])
    allowed = layer_allowed(run, layer)
    if allowed.ndim == 3:  # (H, Tq, Tk)
        allowed = allowed[head]
    T = a.q.shape[2]
    allowed = np.broadcast_to(allowed, (T, a.k.shape[2]))
    return a.q[0, head], a.k[0, kv], a.v[0, kv], allowed


def tile_walk(run: Run, layer: int, head: int, tile: int) -> TileWalk:
    """Tiled attention of one head of the run with every step recorded. Raises ValueError (tile < 1)."""
    a = run.trace.layers[layer].attn
    return flash.tile_walk(*head_inputs(run, layer, head), scale=a.scale, model_heads=a.heads[0, head], tile=tile)


@st.cache_data(max_entries=8, show_spinner="Measuring peak memory of plain and tiled attention up to T = 4,096…")
def memory_curve(tile: int) -> MemoryCurve:
    """classroom.flash.memory_curve, cached: measured once per tile size per server."""
    return flash.memory_curve(tile)


def memory_frame(curve: MemoryCurve) -> pd.DataFrame:
    """The measurement as a table, one row per sequence length T (the chart's data download)."""
    return pd.DataFrame({"T": curve.lengths, "plain peak (MiB)": curve.plain_mb, "tiled peak (MiB)": curve.tiled_mb,
                         "T × T scores (MiB)": curve.full_scores_mb, "T × tile scores (MiB)": curve.tile_scores_mb,
                         "max |tiled − plain|": curve.max_diff}).set_index("T")
