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
    score: float  # the score that decided it (for "other": the nearest kind's score, below its threshold)
    scores: dict  # every kind's score
    nearest: str = ""  # the kind whose score came closest to (or furthest past) its threshold

    def title(self) -> str:
        """Short label for a chart title: "previous-token 0.72", or for a head that clears no
        threshold "other (broad/uniform 0.85 < 0.9)": the nearest kind, its score and threshold
        (the score alone read as if 0.85 had decided "other")."""
        if self.kind != "other":
            return f"{self.kind} {self.score:.2f}"
        return f"other ({self.nearest} {self.score:.2f} < {THRESHOLDS[self.nearest]:g})"


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
    W = w[r]  # (n, Tk): the rows that have a choice; entropy of each over its allowed keys
    pos = W > 0
    n_allowed = pos.sum(axis=1)
    h = -np.where(pos, W * np.log(np.where(pos, W, 1.0)), 0.0).sum(axis=1)
    multi = n_allowed > 1
    uniform = float((h[multi] / np.log(n_allowed[multi])).mean()) if multi.any() else 0.0
    return {"previous-token": prev, "self/diagonal": diag, "first-token sink": sink, "broad/uniform": uniform}


def label_head(weights: np.ndarray) -> HeadPattern:
    """(Tq, Tk) attention weights -> the dominant pattern and the score that decided it."""
    s = pattern_scores(weights)
    margins = {k: s[k] - THRESHOLDS[k] for k in s}
    best = max(margins, key=margins.get)
    if margins[best] >= 0:
        return HeadPattern(kind=best, score=s[best], scores=s, nearest=best)
    return HeadPattern(kind="other", score=s[best], scores=s, nearest=best)
