"""Tiled attention (FlashAttention's online softmax) on the tiled-attention page: one head of the
sidebar run read one key tile at a time beside plain attention, and the peak memory of both as the
sequence grows.

The numbers come from model/flash.py (tiled_attention, measure_peak_bytes, plain_attention) and
model/attention.py (attend); this module runs them and keeps what the page shows.

Pure Python over model/ (no streamlit, no plotly).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model.attention import attend
from model.flash import TiledResult, TileStep, measure_peak_bytes, plain_attention, tiled_attention

MEMORY_TS = (64, 128, 256, 512, 1024, 2048, 4096)  # sequence lengths of the memory chart
MEMORY_D = 64  # d_k = d_v of the memory measurement (one head)
MEMORY_TILES = (32, 64, 128, 256)  # key-tile sizes offered for the memory chart (smaller: slower to measure)
MB = 2**20  # the memory chart's unit: MiB (labels.units, the app's one convention for bytes)


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

    def rescaled(self, step: TileStep) -> np.ndarray:
        """(Tq,) bool: the queries whose running max rose in `step` (their sum and output so far were
        multiplied by exp(m_old − m_new) < 1 before the new tile was added)."""
        r = step.rescale[0, 0]
        return np.isfinite(r) & (r < 1)

    def gap_to_final(self, step: TileStep) -> float:
        """max |output so far − final output| after `step` (0 after the last tile)."""
        return float(np.abs(step.out[0, 0] - self.tiled.output[0, 0]).max())


def tile_walk(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray, *, scale: float,
              model_heads: np.ndarray, tile: int) -> TileWalk:
    """Tiled attention of one head (q (Tq, d_k), k (Tk, d_k), v (Tk, d_v), allowed (Tq, Tk)) with
    every step recorded, beside attend() on the same inputs and the head output the model recorded
    (model_heads (Tq, d_v)). Raises ValueError (tile < 1)."""
    qt, kt, vt = (torch.from_numpy(np.array(x))[None, None] for x in (q, k, v))  # (1, 1, T, d)
    al = torch.from_numpy(np.array(allowed))
    res = tiled_attention(qt, kt, vt, al, tile=tile, scale=scale, record=True).numpy()
    ref = attend(qt, kt, vt, al, scale=scale)
    plain = (ref.weights @ vt)[0, 0].numpy()
    out = res.output[0, 0]
    model_heads = np.asarray(model_heads)
    return TileWalk(tiled=res, scaled=ref.scaled[0, 0].numpy(), allowed=np.asarray(allowed), plain=plain,
                    model_heads=model_heads, diff_plain=float(np.abs(out - plain).max()),
                    diff_model=float(np.abs(out - model_heads).max()))


@dataclass(frozen=True)
class MemoryCurve:
    """Peak memory of plain vs tiled attention, one head, d = MEMORY_D, float32, by sequence length;
    n lengths."""
    tile: int  # key-tile size of the tiled loop
    lengths: np.ndarray  # (n,) int: the sequence lengths T measured
    plain_mb: np.ndarray  # (n,) MiB: plain attention's measured peak (model.flash.measure_peak_bytes)
    tiled_mb: np.ndarray  # (n,) MiB: the tiled loop's measured peak
    full_scores_mb: np.ndarray  # (n,) MiB: a T × T float32 score matrix
    tile_scores_mb: np.ndarray  # (n,) MiB: a T × min(tile, T) float32 score block
    max_diff: np.ndarray  # (n,) max |tiled − plain| of the outputs


def memory_curve(tile: int, lengths: tuple[int, ...] = MEMORY_TS, d: int = MEMORY_D) -> MemoryCurve:
    """Peak bytes of plain vs tiled attention on seeded random q, k, v (1, 1, T, d), measured with
    torch's profiler (model.flash.measure_peak_bytes) on one thread, with the score-matrix sizes
    beside them."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    plain_mb, tiled_mb, diff = [], [], []
    try:
        for T in lengths:
            g = torch.Generator().manual_seed(T)
            q, k, v = (torch.randn(1, 1, T, d, generator=g) for _ in range(3))
            p_plain, a = measure_peak_bytes(lambda: plain_attention(q, k, v))
            p_tiled, b = measure_peak_bytes(lambda: tiled_attention(q, k, v, tile=tile).output)
            plain_mb.append(p_plain / MB)
            tiled_mb.append(p_tiled / MB)
            diff.append(float((a - b).abs().max()))
    finally:
        torch.set_num_threads(old)
    Ts = np.array(lengths)
    return MemoryCurve(tile=tile, lengths=Ts, plain_mb=np.array(plain_mb), tiled_mb=np.array(tiled_mb),
                       full_scores_mb=np.array([T * T * 4 / MB for T in lengths]),
                       tile_scores_mb=np.array([T * min(tile, T) * 4 / MB for T in lengths]),
                       max_diff=np.array(diff))
