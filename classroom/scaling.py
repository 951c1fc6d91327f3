"""Scaling & softmax: why scores are divided by sqrt(d_k), and what a temperature does.
Pure numpy/torch over the engine (never streamlit, plotly or ui/); every number on the page is
computed here, one hop from the page."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from model.attention import masked_softmax


def softmax(x: np.ndarray, temperature: float = 1.0, axis: int = -1, allowed: np.ndarray | None = None
            ) -> np.ndarray:
    """Softmax of x / temperature (float64) through the engine's masked_softmax. Entries that are
    not allowed (allowed False, or x / temperature not finite, e.g. -inf) get weight 0; a row with
    nothing allowed gets all-zero weights (never NaN)."""
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    x = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    with np.errstate(over="ignore", invalid="ignore"):
        ok = np.isfinite(x / temperature)
    if allowed is not None:
        ok &= np.moveaxis(np.broadcast_to(np.asarray(allowed, dtype=bool), np.moveaxis(x, -1, axis).shape), axis, -1)
    _, weights, _ = masked_softmax(torch.from_numpy(np.where(ok, x, 0.0)), torch.from_numpy(ok), temperature)
    return np.moveaxis(weights.numpy(), -1, axis)


def entropy_bits(p: np.ndarray, axis: int = -1) -> np.ndarray:
    """Shannon entropy in bits of probability rows (0 log 0 = 0)."""
    p = np.asarray(p, dtype=np.float64)
    logs = np.log2(np.where(p > 0, p, 1.0))
    return -(p * logs).sum(axis=axis)


@dataclass(frozen=True)
class ScalingRow:
    """One query row over its K allowed keys, with and without the 1/sqrt(d_k) scale."""
    scores: np.ndarray  # (K,) float64 raw scores q·k
    scaled: np.ndarray  # (K,) scores / sqrt(d_k)
    weights_unscaled: np.ndarray  # (K,) softmax(scores / T), sums to 1
    weights_scaled: np.ndarray  # (K,) softmax(scores / sqrt(d_k) / T), sums to 1
    entropy_unscaled: float  # bits, of weights_unscaled
    entropy_scaled: float  # bits, of weights_scaled
    max_unscaled: float  # largest entry of weights_unscaled
    max_scaled: float  # largest entry of weights_scaled
    max_entropy: float  # log2(K) bits: the entropy of the uniform row


def scaling_row(scores_row: np.ndarray, d_k: int, temperature: float = 1.0) -> ScalingRow:
    """One query's raw scores q·k over its allowed keys -> scaled scores and both softmaxes.

    unscaled weights = softmax(scores / T); scaled weights = softmax(scores / sqrt(d_k) / T).
    """
    s = np.asarray(scores_row, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError("scores_row must be a non-empty 1-D array of the allowed keys' scores")
    scaled = s / math.sqrt(d_k)
    w_raw = softmax(s, temperature)
    w_scaled = softmax(scaled, temperature)
    return ScalingRow(
        scores=s, scaled=scaled, weights_unscaled=w_raw, weights_scaled=w_scaled,
        entropy_unscaled=float(entropy_bits(w_raw)), entropy_scaled=float(entropy_bits(w_scaled)),
        max_unscaled=float(w_raw.max()), max_scaled=float(w_scaled.max()),
        max_entropy=float(math.log2(s.size)))


@dataclass(frozen=True)
class WorkedScaling:
    """The notes' two-key example, every step."""
    q: np.ndarray  # (d_k,) the query [2, 3, 4, 1]
    k: np.ndarray  # (2, d_k) the keys k1, k2 as rows
    d_k: int  # 4
    sqrt_d_k: float  # 2.0
    scores: np.ndarray  # (2,) k @ q = [6, 4]
    weights_unscaled: np.ndarray  # (2,) softmax(scores) = [0.8808, 0.1192]
    scaled: np.ndarray  # (2,) scores / sqrt(d_k) = [3, 2]
    weights_scaled: np.ndarray  # (2,) softmax(scaled) = [0.7311, 0.2689]


def worked_scaling_example() -> WorkedScaling:
    """The notes' example: q = [2, 3, 4, 1], k1 = [1, 0, 1, 0], k2 = [0, 1, 0, 1], d_k = 4.
    Scores [6, 4]; softmax -> [0.8808, 0.1192]; scaled by sqrt(4) = 2 -> [3, 2] -> [0.7311, 0.2689]."""
    q = np.array([2.0, 3.0, 4.0, 1.0])
    k = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]])
    scores = k @ q
    d_k = q.size
    scaled = scores / math.sqrt(d_k)
    return WorkedScaling(q=q, k=k, d_k=d_k, sqrt_d_k=math.sqrt(d_k), scores=scores,
                         weights_unscaled=softmax(scores), scaled=scaled, weights_scaled=softmax(scaled))


DK_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class VarianceExperiment:
    """Var(q·k) sampled for each d_k of the grid (N grid points), beside the theory."""
    d_k: np.ndarray  # (N,) int64 the widths tried
    var_sampled: np.ndarray  # (N,) sample variance of q·k
    var_theory: np.ndarray  # (N,) float64 d_k itself (Var(q·k) = d_k)
    var_scaled_sampled: np.ndarray  # (N,) sample variance of q·k / sqrt(d_k) (theory: 1)
    n_samples: int  # (q, k) pairs per d_k


def variance_experiment(d_ks: Sequence[int] = DK_GRID, n_samples: int = 1500, seed: int = 0
                        ) -> VarianceExperiment:
    """Sample q, k with i.i.d. N(0, 1) components; measure Var(q·k) for each d_k.

    Theory: q·k = sum of d_k products of independent unit-variance terms -> Var = d_k, and
    Var(q·k / sqrt(d_k)) = 1. With n samples the relative standard error of the sample variance is
    about sqrt(2 / n) (~3.7% for n = 1500) for large d_k (sqrt(8/n) at d_k = 1, heavier tails)."""
    rng = np.random.default_rng(seed)
    var_raw, var_scaled = [], []
    for d in d_ks:
        q = rng.standard_normal((n_samples, d), dtype=np.float32)
        k = rng.standard_normal((n_samples, d), dtype=np.float32)
        dots = np.einsum("nd,nd->n", q, k, dtype=np.float64)
        var_raw.append(float(dots.var(ddof=1)))
        var_scaled.append(float((dots / math.sqrt(d)).var(ddof=1)))
    return VarianceExperiment(d_k=np.asarray(d_ks, dtype=np.int64), var_sampled=np.asarray(var_raw),
                              var_theory=np.asarray(d_ks, dtype=np.float64),
                              var_scaled_sampled=np.asarray(var_scaled), n_samples=n_samples)


@dataclass(frozen=True)
class EntropyExperiment:
    """Mean softmax entropy and largest weight for each d_k of the grid (N grid points), with and
    without the 1/sqrt(d_k) scale."""
    d_k: np.ndarray  # (N,) int64 the widths tried
    entropy_unscaled: np.ndarray  # (N,) bits, mean over the samples, softmax(q·k)
    entropy_scaled: np.ndarray  # (N,) bits, mean over the samples, softmax(q·k / sqrt(d_k))
    max_weight_unscaled: np.ndarray  # (N,) mean of each row's largest weight, unscaled
    max_weight_scaled: np.ndarray  # (N,) the same, scaled
    max_entropy: float  # log2(n_keys) bits: a uniform row
    n_keys: int  # keys per query
    n_samples: int  # queries per d_k


def entropy_experiment(d_ks: Sequence[int] = DK_GRID, n_keys: int = 16, n_samples: int = 100,
                       seed: int = 0) -> EntropyExperiment:
    """Mean softmax entropy (bits) over n_keys random keys, with and without 1/sqrt(d_k).

    Without scaling the scores' spread grows like sqrt(d_k), the softmax saturates (entropy -> 0,
    one key takes almost all weight); with scaling the spread stays ~1 and entropy stays put."""
    rng = np.random.default_rng(seed)
    h_raw, h_scaled, max_raw, max_scaled = [], [], [], []
    for d in d_ks:
        q = rng.standard_normal((n_samples, d), dtype=np.float32)
        k = rng.standard_normal((n_samples, n_keys, d), dtype=np.float32)
        s = np.einsum("nd,nkd->nk", q, k, dtype=np.float64)  # (n, n_keys)
        w_raw, w_scaled = softmax(s), softmax(s / math.sqrt(d))
        h_raw.append(float(entropy_bits(w_raw).mean()))
        h_scaled.append(float(entropy_bits(w_scaled).mean()))
        max_raw.append(float(w_raw.max(-1).mean()))
        max_scaled.append(float(w_scaled.max(-1).mean()))
    return EntropyExperiment(d_k=np.asarray(d_ks, dtype=np.int64), entropy_unscaled=np.asarray(h_raw),
                             entropy_scaled=np.asarray(h_scaled), max_weight_unscaled=np.asarray(max_raw),
                             max_weight_scaled=np.asarray(max_scaled), max_entropy=math.log2(n_keys),
                             n_keys=n_keys, n_samples=n_samples)
