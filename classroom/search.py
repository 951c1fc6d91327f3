"""Q, K, V as a search engine (the lecture notes): a query is matched against every document's key (dot
products), the softmax turns the matches into a blend, and the documents' values are returned
mixed by that blend. The numbers are those of the attention formula softmax(q Kᵀ / √d_k) V:
computed by model.attention.attend, the one implementation."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from model.attention import attend

FEATURES = ("animals", "food", "sport")  # what a key (and the query) describes
VALUE_NAMES = ("stars", "minutes")  # what a document returns


@dataclass(frozen=True)
class Library:
    titles: tuple[str, ...]
    keys: np.ndarray  # (n_docs, d_k): how much each document is about each feature
    values: np.ndarray  # (n_docs, d_v): what each document returns


LIBRARY = Library(
    titles=("cat videos", "dog training", "pizza recipes", "football highlights", "picnic with the dog"),
    keys=np.array([[3.0, 0.0, 0.0], [2.5, 0.0, 0.5], [0.0, 3.0, 0.0], [0.0, 0.5, 3.0], [1.5, 1.5, 0.0]]),
    values=np.array([[4.8, 3.0], [4.2, 12.0], [4.5, 25.0], [3.9, 90.0], [4.0, 8.0]]),
)


@dataclass(frozen=True)
class SearchResult:
    """One query matched against the library (n documents), every number from attend(q, K, V)."""
    scores: np.ndarray  # (n,) float64  q·k_j, the raw match of each document
    scale: float  # 1/√d_k, or 1.0 with scaling off
    scaled: np.ndarray  # (n,) float64  scores × scale
    weights: np.ndarray  # (n,) float64  softmax of the scaled scores: the blend (sums to 1)
    output: np.ndarray  # (d_v,) float64  Σ_j weights_j · value_j, the returned value


def search(query: Sequence[float], library: Library = LIBRARY, scale: bool = True) -> SearchResult:
    """One query against the library through attend(q, K, V)."""
    q = torch.tensor(np.asarray(query, dtype=float), dtype=torch.float64)[None]  # (1, d_k)
    if q.shape[1] != library.keys.shape[1]:
        raise ValueError(f"the query needs {library.keys.shape[1]} numbers (one per key feature), got {q.shape[1]}")
    k = torch.tensor(library.keys, dtype=torch.float64)  # (n, d_k)
    v = torch.tensor(library.values, dtype=torch.float64)  # (n, d_v)
    tr = attend(q, k, v, scale=None if scale else 1.0)
    return SearchResult(scores=tr.scores[0].numpy(), scale=float(tr.scale), scaled=tr.scaled[0].numpy(),
                        weights=tr.weights[0].numpy(), output=tr.heads[0].numpy())
