"""Automatic labels for attention heads: what pattern dominates a (Tq, Tk) weight matrix.

Scores (each in 0..1, averaged over the query rows that have a choice):
  previous-token: mean weight on key i-1 for query i (rows i >= 1)
  self/diagonal:  mean weight on key i for query i (rows i >= 1)
  first-token sink: mean weight on key 0 (rows i >= 1)
  broad/uniform:  mean normalised entropy of the rows (1 = perfectly uniform over allowed keys)
The head gets the kind with the highest score if that score clears its threshold, else "other".
Pure numpy: used by the app's overview, the training tests and the train page.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

THRESHOLDS = {"previous-token": 0.4, "self/diagonal": 0.4, "first-token sink": 0.5, "broad/uniform": 0.9}


@dataclass(frozen=True)
class HeadPattern:
    kind: str  # "previous-token" | "self/diagonal" | "first-token sink" | "broad/uniform" | "other"
    score: float  # the score that decided it (for "other": the best score that fell short)
    scores: dict  # every kind's score


def pattern_scores(weights: np.ndarray) -> dict[str, float]:
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2:
        raise ValueError(f"weights must be (Tq, Tk); got shape {w.shape}")
    Tq, Tk = w.shape
    if Tq < 2 or Tk < 2:
        return {k: 0.0 for k in THRESHOLDS}
    rows = np.arange(1, min(Tq, Tk))
    live = w.sum(axis=1) > 0.5  # rows that are not fully masked
    r = rows[live[rows]]
    prev = float(w[r, r - 1].mean()) if len(r) else 0.0
    # rows i >= 1 like the other scores: row 0 of a causal head has no choice but itself, and
    # counting it made short causal-uniform heads (T <= 4) look "self/diagonal".
    diag = float(w[r, r].mean()) if len(r) else 0.0
    sink = float(w[r, 0].mean()) if len(r) else 0.0
    ent = []
    for i in r:
        p = w[i][w[i] > 0]
        n_allowed = max(int((w[i] > 0).sum()), 1)
        if n_allowed > 1:
            ent.append(float(-(p * np.log(p)).sum() / np.log(n_allowed)))
    uniform = float(np.mean(ent)) if ent else 0.0
    return {"previous-token": prev, "self/diagonal": diag, "first-token sink": sink, "broad/uniform": uniform}


def label_head(weights: np.ndarray) -> HeadPattern:
    """(Tq, Tk) attention weights -> the dominant pattern and the score that decided it."""
    s = pattern_scores(weights)
    margins = {k: s[k] - THRESHOLDS[k] for k in s}
    best = max(margins, key=margins.get)
    if margins[best] >= 0:
        return HeadPattern(kind=best, score=s[best], scores=s)
    return HeadPattern(kind="other", score=s[best], scores=s)
