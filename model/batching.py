"""Batching helpers for the mask lab and the causal-vs-bidirectional page (pure torch/numpy).

pad_batch: sentences of different lengths -> ids (B, T) padded on the right + key_padding_mask.
mask_steps: the masks the model builds, one step at a time, for one sentence of a batch, each as
    1/0 and as additive 0/-inf, made by the same functions the model uses (model/attention.py).
topk_change: how the top-k next-token distribution changes between two runs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .attention import additive, causal_allowed, combine, padding_allowed


@dataclass(frozen=True)
class Batch:
    ids: torch.Tensor  # (B, T) long, padded on the right with pad_id
    key_padding_mask: torch.Tensor  # (B, T) bool, True = real token
    lengths: list[int]  # real tokens per sentence


def pad_batch(seqs: list[list[int]], pad_id: int, max_len: int | None = None) -> Batch:
    """Right-pad token id lists to a common length (the longest, cut to max_len)."""
    if not seqs or any(len(s) == 0 for s in seqs):
        raise ValueError("pad_batch needs at least one sequence and every sequence must have >= 1 token")
    seqs = [list(s)[:max_len] if max_len else list(s) for s in seqs]
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), int(pad_id), dtype=torch.long)
    kpm = torch.zeros(len(seqs), T, dtype=torch.bool)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s, dtype=torch.long)
        kpm[b, : len(s)] = True
    return Batch(ids=ids, key_padding_mask=kpm, lengths=[len(s) for s in seqs])


@dataclass(frozen=True)
class MaskSteps:
    """Masks for one sentence; every (T, T) matrix is float 1/0 (1 = may attend)."""
    pad_1d: np.ndarray  # (T,)   1 = real token, 0 = padding
    pad_2d: np.ndarray  # (T, T) padding as a key mask (with queries masked too if chosen)
    look_ahead: np.ndarray  # (T, T) lower triangle (all ones when bidirectional)
    combined: np.ndarray  # (T, T) pad_2d * look_ahead (elementwise product)
    pad_2d_add: np.ndarray  # (T, T) 0 / -inf
    look_ahead_add: np.ndarray  # (T, T) 0 / -inf
    combined_add: np.ndarray  # (T, T) 0 / -inf
    fully_masked: np.ndarray  # (T,) bool: query rows where nothing is allowed


def mask_steps(key_padding_mask, b: int, *, causal: bool, mask_queries: bool) -> MaskSteps:
    """The masks the model combines, for sentence b of the batch. key_padding_mask (B, T) bool
    (tensor or numpy), True = real token."""
    key_padding_mask = torch.as_tensor(np.asarray(key_padding_mask, dtype=bool))
    T = key_padding_mask.shape[1]
    pad = padding_allowed(key_padding_mask, mask_queries=mask_queries)[b, 0]  # (T, T)
    la = causal_allowed(T) if causal else torch.ones(T, T, dtype=torch.bool)
    comb = combine(pad, la)
    f = lambda m: m.to(torch.float32).numpy()  # noqa: E731
    return MaskSteps(pad_1d=f(key_padding_mask[b]), pad_2d=f(pad), look_ahead=f(la), combined=f(comb),
                     pad_2d_add=additive(pad).numpy(), look_ahead_add=additive(la).numpy(),
                     combined_add=additive(comb).numpy(), fully_masked=(~comb.any(dim=-1)).numpy())


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
    k = min(k, p_a.shape[0])
    ids = list(dict.fromkeys([*np.argsort(-p_a, kind="stable")[:k], *np.argsort(-p_b, kind="stable")[:k]]))
    rows = [TopKRow(int(i), float(p_a[i]), float(p_b[i])) for i in ids]
    return sorted(rows, key=lambda r: -max(r.p_a, r.p_b))
