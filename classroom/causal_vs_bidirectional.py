"""Causal vs bidirectional: how the next-token distribution changes.
Pure numpy/torch over the engine (never streamlit, plotly or ui/); every number on the page is
computed here, one hop from the page."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ffn_output import topk


@dataclass(frozen=True)
class TopKRow:
    token_id: int
    p_a: float
    p_b: float

    @property
    def delta(self) -> float:
        return self.p_b - self.p_a


def topk_change(p_a: np.ndarray, p_b: np.ndarray, k: int = 5) -> list[TopKRow]:
    """Union of the top-k tokens of two distributions over the vocabulary (V,), ordered by the
    larger of the two probabilities (descending)."""
    p_a, p_b = np.asarray(p_a, dtype=np.float64), np.asarray(p_b, dtype=np.float64)
    if p_a.shape != p_b.shape or p_a.ndim != 1:
        raise ValueError(f"p_a and p_b must both be (V,); got {p_a.shape} and {p_b.shape}")
    ids = list(dict.fromkeys([*topk(p_a, k), *topk(p_b, k)]))
    rows = [TopKRow(int(i), float(p_a[i]), float(p_b[i])) for i in ids]
    return sorted(rows, key=lambda r: -max(r.p_a, r.p_b))


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """Total variation distance between two distributions over the same outcomes (float64):
    0.5 * sum |p - q|, from 0 (identical) to 1 (disjoint)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape; got {p.shape} and {q.shape}")
    return 0.5 * float(np.abs(p - q).sum())
