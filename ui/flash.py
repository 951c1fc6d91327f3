"""The tiled-attention page's helpers: one head's q, k, v from the sidebar run, the tile-by-tile walk
(model.flash.tiled_attention with record=True) beside attend(), and the cached memory measurement.

The numbers come from model/flash.py and model/attention.py; this module only selects and converts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st
import torch

from model.attention import attend
from model.flash import TiledResult, measure_peak_bytes, plain_attention, tiled_attention
from ui.runs import Run, layer_allowed

MEMORY_TS = (64, 128, 256, 512, 1024, 2048, 4096)  # sequence lengths of the memory chart
MEMORY_D = 64  # d_k = d_v of the memory measurement (one head)
MEMORY_TILES = (32, 64, 128, 256)  # key-tile sizes offered for the memory chart (smaller: slower to measure)


@dataclass(frozen=True)
class TileWalk:
    """One head of one layer of the sidebar run, attended tile by tile."""
    tiled: TiledResult  # numpy tree (B = H = 1): .steps[i].m / .l (1, 1, Tq), .out (1, 1, Tq, d_v), .output
    scaled: np.ndarray  # (Tq, Tk) q k^T * scale (what the tiles read, a block at a time)
    allowed: np.ndarray  # (Tq, Tk) bool, the layer's mask (True = may attend)
    plain: np.ndarray  # (Tq, d_v) attend(q, k, v, allowed).weights @ v: plain attention, same inputs
    model_heads: np.ndarray  # (Tq, d_v) the head output the model itself recorded (trace.layers[l].attn.heads)
    diff_plain: float  # max |tiled - plain|
    diff_model: float  # max |tiled - model_heads|


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
    """Tiled attention of one head with every step recorded. Raises ValueError (tile < 1)."""
    q, k, v, allowed = head_inputs(run, layer, head)
    a = run.trace.layers[layer].attn
    qt, kt, vt = (torch.from_numpy(np.array(x))[None, None] for x in (q, k, v))  # (1, 1, T, d)
    al = torch.from_numpy(np.array(allowed))
    res = tiled_attention(qt, kt, vt, al, tile=tile, scale=a.scale, record=True).numpy()
    ref = attend(qt, kt, vt, al, scale=a.scale)
    plain = (ref.weights @ vt)[0, 0].numpy()
    out = res.output[0, 0]
    model_heads = np.asarray(a.heads[0, head])
    return TileWalk(tiled=res, scaled=ref.scaled[0, 0].numpy(), allowed=np.asarray(allowed), plain=plain,
                    model_heads=model_heads, diff_plain=float(np.abs(out - plain).max()),
                    diff_model=float(np.abs(out - model_heads).max()))


@st.cache_data(max_entries=8, show_spinner="Measuring peak memory of plain and tiled attention up to T = 4,096…")
def memory_curve(tile: int) -> pd.DataFrame:
    """Peak bytes (MB) of plain vs tiled attention, one head, d = 64, float32, measured with torch's
    profiler (model.flash.measure_peak_bytes), with the score-matrix sizes beside them. Cached:
    measured once per tile size per server."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    rows = []
    try:
        for T in MEMORY_TS:
            g = torch.Generator().manual_seed(T)
            q, k, v = (torch.randn(1, 1, T, MEMORY_D, generator=g) for _ in range(3))
            p_plain, a = measure_peak_bytes(lambda: plain_attention(q, k, v))
            p_tiled, b = measure_peak_bytes(lambda: tiled_attention(q, k, v, tile=tile).output)
            rows.append({"T": T, "plain peak (MB)": p_plain / 2**20, "tiled peak (MB)": p_tiled / 2**20,
                         "T × T scores (MB)": T * T * 4 / 2**20,
                         "T × tile scores (MB)": T * min(tile, T) * 4 / 2**20,
                         "max |tiled − plain|": float((a - b).abs().max())})
    finally:
        torch.set_num_threads(old)
    return pd.DataFrame(rows).set_index("T")
