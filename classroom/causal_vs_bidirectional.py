"""Causal vs bidirectional: how the next-token distribution (or, without an output layer, each
token's final hidden state) changes.
Pure numpy/torch over the engine (never streamlit, plotly or ui/); every number on the page is
computed here, one hop from the page."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .contextual import cosine
from .ffn_output import topk


@dataclass(frozen=True)
class TopKRow:
    """One token of the union of two distributions' top k."""
    token_id: int  # its id in the vocabulary
    p_a: float  # its probability under distribution A (the causal run)
    p_b: float  # its probability under distribution B (the bidirectional run)

    @property
    def delta(self) -> float:
        """p_b − p_a: how much more likely under B."""
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


@dataclass(frozen=True)
class StateChange:
    """Per-token change between two runs' hidden states a and b (T tokens each)."""
    cosine: np.ndarray  # (T,) float64 cosine(a_t, b_t): 1 = the same direction
    distance: np.ndarray  # (T,) float64 ‖b_t − a_t‖
    norm_a: np.ndarray  # (T,) float64 ‖a_t‖: what distance compares with


def state_change(a: np.ndarray, b: np.ndarray) -> StateChange:
    """Per-token change between two runs' hidden states, (T, D) each (a model without an output
    layer: its final hidden states under the causal and the bidirectional mask)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"a and b must both be (T, D); got {a.shape} and {b.shape}")
    return StateChange(cosine=np.array([cosine(x, y) for x, y in zip(a, b)]),
                       distance=np.linalg.norm(b - a, axis=-1), norm_a=np.linalg.norm(a, axis=-1))
