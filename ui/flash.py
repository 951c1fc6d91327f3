"""The tiled-attention page's helpers: one head's q, k, v from the sidebar run, its tile-by-tile walk
(classroom.flash.tile_walk), and the memory measurement (classroom.flash.memory_curve), cached.

The numbers come from classroom/flash.py over model/flash.py and model/attention.py; this module
only selects, caches and tabulates.
"""
from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import streamlit as st

from classroom import flash
from classroom.flash import MEMORY_D, MEMORY_TILES, MEMORY_TS, MemoryCurve, TileWalk  # noqa: F401 (the page's controls)
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


# torch's profiler is one per process: two sessions profiling at once (two threads measuring two tile
# sizes) crashed the process in a test run. Every measurement takes this lock.
_PROFILER = threading.Lock()


class MemoryMeasurements:
    """The peak-memory measurements (classroom.flash.memory_curve), one per key-tile size, each
    made once per server in a background thread: the first visit of the page used to wait for it
    (2–3 s of CPU: up to T = 4,096 under torch's profiler; 9–11 s on a loaded machine),
    now the page draws everything else at once and the chart joins when the measurement is done.
    The profiler counts only its own thread's allocations, so other sessions' work does not leak
    into the numbers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[int, MemoryCurve] = {}
        self._errors: dict[int, str] = {}
        self._threads: dict[int, threading.Thread] = {}

    def get(self, tile: int) -> MemoryCurve | None:
        """The measurement for this tile when it is done; else None (and it is started, once)."""
        with self._lock:
            if tile in self._done:
                return self._done[tile]
            if tile in self._errors:
                raise RuntimeError(self._errors[tile])
            if tile not in self._threads:
                t = threading.Thread(target=self._measure, args=(tile,), name=f"flash-memory-{tile}", daemon=True)
                self._threads[tile] = t
                t.start()
        return None

    def wait(self, tile: int, timeout: float | None = None) -> MemoryCurve | None:
        """Start (if needed) and wait for the measurement (tests, benchmarks)."""
        if (done := self.get(tile)) is not None:
            return done
        self._threads[tile].join(timeout)
        return self.get(tile)

    def _measure(self, tile: int) -> None:
        try:
            with _PROFILER:
                curve = flash.memory_curve(tile)
        except Exception as e:  # noqa: BLE001  (shown on the page, not lost in a thread)
            with self._lock:
                self._errors[tile] = f"{type(e).__name__}: {e}"
            return
        with self._lock:
            self._done[tile] = curve


_MEASUREMENTS = MemoryMeasurements()  # the server's one registry (module state: shared by every session)


def measurements() -> MemoryMeasurements:
    """The server's one registry of memory measurements (shared by every session)."""
    return _MEASUREMENTS


def memory_curve(tile: int) -> MemoryCurve | None:
    """classroom.flash.memory_curve for this key tile, measured once per server in the background:
    None until it is done (the page polls)."""
    return measurements().get(tile)


def memory_frame(curve: MemoryCurve) -> pd.DataFrame:
    """The measurement as a table, one row per sequence length T (the chart's data download)."""
    return pd.DataFrame({"T": curve.lengths, "plain peak (MiB)": curve.plain_mb, "tiled peak (MiB)": curve.tiled_mb,
                         "T × T scores (MiB)": curve.full_scores_mb, "T × tile scores (MiB)": curve.tile_scores_mb,
                         "max |tiled − plain|": curve.max_diff}).set_index("T")
