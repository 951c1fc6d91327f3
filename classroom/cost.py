"""Cost of attention: FLOPs and bytes as T grows, measured times and the fitted curves.
Pure numpy/torch over the engine (never streamlit, plotly or ui/); every number on the page is
computed here, one hop from the page."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields
from typing import Callable, Sequence

import numpy as np
import torch

from model.attention import attend, causal_allowed
from model.config import GATED, ModelConfig
from model.layers import Block


@dataclass(frozen=True)
class AttentionCost:
    """Closed-form cost of one forward pass over T tokens (batch 1) of a model with L layers, H
    heads, width D and FFN width F. Counts are exact integers; a multiply-add is 2 FLOPs."""
    T: int  # sequence length
    scores_per_head_layer: int  # T²: one score per (query, key) pair
    scores_total: int  # L·H·T²: every head of every layer
    memory_bytes: int  # scores_total × bytes per value: the weights if kept (training keeps them)
    flops_attention: int  # L·4·T²·D: QKᵀ and weights·V, quadratic in T
    flops_linear: int  # L·2·T·(weights of W_Q, W_K, W_V, W_O and the FFN): linear in T; 4·D² + 2·D·F per
    #                    layer for GPT-2-style models, less with grouped-query attention, 3·D·F for SwiGLU
    flops_total: int  # flops_attention + flops_linear
    scores_windowed: int = 0  # the scores a sliding window leaves: a local layer (cfg.layer_window) scores at
    #                           most w keys per query, H·T·min(T, w); global layers H·T². = scores_total
    #                           without a window (the engine here computes every T² score and masks)


def attention_cost(cfg: ModelConfig, T: int, bytes_per_value: int = 4) -> AttentionCost:
    """Closed-form cost of one forward pass over T tokens (batch 1).

    scores per head per layer = T²; all heads and layers = L·h·T²; memory of the weights if kept
    (training keeps them for backward) = L·h·T²·bytes. FLOPs (multiply-add = 2): QKᵀ and
    weights·V cost 2·T²·(h·d_k + h·d_v) per layer (= 4·T²·d_model when h·d_k = h·d_v = d_model;
    quadratic in T); the projections and the FFN cost 2·T·(their weights) per layer (linear in T):
    2·T·(4·d_model² + 2·d_model·d_ff) for GPT-2-style models, from the config for the others
    (grouped-query attention's narrower W_K, W_V; SwiGLU's three matrices)."""
    L, H = cfg.n_layers, cfg.n_heads
    per_head = T * T
    total = L * H * per_head
    quad = L * 2 * T * T * _score_width(cfg)
    lin = L * 2 * T * _linear_weights(cfg)
    local = sum(1 for i in range(L) if cfg.layer_window(i) is not None)
    windowed = H * ((L - local) * T * T + local * T * min(T, cfg.window or T))
    return AttentionCost(T=T, scores_per_head_layer=per_head, scores_total=total,
                         memory_bytes=total * bytes_per_value, flops_attention=quad, flops_linear=lin,
                         flops_total=quad + lin, scores_windowed=windowed)


@dataclass(frozen=True)
class CostCurve:
    """attention_cost at N sequence lengths: each AttentionCost field as an (N,) float64 array."""
    T: np.ndarray  # (N,) the lengths
    scores_per_head_layer: np.ndarray  # (N,) T²
    scores_total: np.ndarray  # (N,) L·H·T²
    memory_bytes: np.ndarray  # (N,) bytes of all attention weights (float32)
    flops_attention: np.ndarray  # (N,) the T² FLOPs
    flops_linear: np.ndarray  # (N,) the T-linear FLOPs
    flops_total: np.ndarray  # (N,) their sum
    scores_windowed: np.ndarray  # (N,) the scores a sliding window leaves (local layers: T·min(T, w))


def cost_curve(cfg: ModelConfig, Ts: Sequence[int]) -> CostCurve:
    rows = [attention_cost(cfg, int(t)) for t in Ts]
    return CostCurve(**{f.name: np.asarray([getattr(r, f.name) for r in rows], dtype=np.float64)
                        for f in fields(AttentionCost)})


def plot_lengths(t_max: int, n: int = 24) -> np.ndarray:
    """(≤ n,) int: sequence lengths from 8 to t_max, geometric, for the cost charts."""
    return np.unique(np.geomspace(8, t_max, n).astype(int))


def _score_width(cfg: ModelConfig) -> int:
    """h·d_k + h·d_v: per token pair, the multiply-adds of QKᵀ and of weights·V over all heads."""
    return cfg.n_heads * (cfg.d_k + cfg.d_value)


def _linear_weights(cfg: ModelConfig) -> int:
    """Weights of one layer's W_Q, W_K, W_V, W_O and FFN (no biases): one multiply-add each per token."""
    D, F, kv = cfg.d_model, cfg.d_ff, cfg.kv_heads
    proj = D * cfg.n_heads * cfg.d_k + D * kv * cfg.d_k + D * kv * cfg.d_value + cfg.n_heads * cfg.d_value * D
    return proj + (3 if cfg.activation in GATED else 2) * D * F


def linear_quadratic_crossover(cfg: ModelConfig) -> int:
    """The T where the attention FLOPs (2·T²·(h·d_k + h·d_v) per layer) equal the projection and
    FFN FLOPs (2·T·weights): T = weights / (h·d_k + h·d_v); 2·D + d_ff for GPT-2-style models."""
    return int(round(_linear_weights(cfg) / _score_width(cfg)))


def crossover_formula(cfg: ModelConfig) -> str:
    """The equation linear_quadratic_crossover solves, in this model's symbols."""
    if cfg.kv_heads == cfg.n_heads and cfg.activation not in GATED and cfg.n_heads * cfg.d_k == cfg.d_model \
            and cfg.d_value == cfg.d_k:
        return "4·T·d_model = 2·(4·d_model² + 2·d_model·d_ff)"
    return (f"2·T·(h·d_k + h·d_v) = 2·T·{_score_width(cfg):,} against 2·(the {_linear_weights(cfg):,} weights of "
            "one layer's projections and FFN)")


def default_time_grid(max_len: int, n: int = 8) -> list[int]:
    """Up to n sequence lengths from 8 to max_len (capped at 512 to keep the measurement short)."""
    hi = min(int(max_len), 512)
    grid = sorted({int(round(x)) for x in np.geomspace(min(8, hi), hi, n)})
    return [t for t in grid if 1 <= t <= hi]


@torch.no_grad()
def measure_forward_time(model, Ts: Sequence[int], repeats: int = 5, seed: int = 0) -> np.ndarray:
    """Wall-clock seconds of model.forward (the engine, batch 1) for each T: the best of `repeats`
    runs after one warm-up. The rounds are interleaved (every T once per round), so a burst of load
    from other processes on a shared machine spoils one round of all lengths rather than all runs
    of one length. Random ids from a fixed seed. The model is not modified."""
    g = torch.Generator().manual_seed(seed)
    inputs = [torch.randint(0, model.cfg.vocab_size, (1, int(T)), generator=g) for T in Ts]
    for ids in inputs:
        model(ids)  # warm-up
    best = np.full(len(inputs), np.inf)
    for _ in range(max(1, int(repeats))):
        for i, ids in enumerate(inputs):
            t0 = time.perf_counter()
            model(ids)
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


@dataclass(frozen=True)
class TheoryFit:
    """seconds ≈ a + b·flops_linear + c·flops_attention over N lengths (a, b, c ≥ 0)."""
    fit: np.ndarray  # (N,) the fitted seconds
    constant: np.ndarray  # (N,) a at every length
    linear: np.ndarray  # (N,) b·flops_linear
    quadratic: np.ndarray  # (N,) c·flops_attention: the attention's part
    coef: np.ndarray  # (3,) a, b, c


def fit_theory(Ts: Sequence[int], seconds: np.ndarray, cfg: ModelConfig) -> TheoryFit:
    """Least-squares fit seconds ≈ a + b·flops_linear + c·flops_attention (a, b, c >= 0 by
    clipping), returning the fitted curve and each part (the T² part is the attention)."""
    c = cost_curve(cfg, Ts)
    A = np.stack([np.ones(len(Ts)), c.flops_linear, c.flops_attention], 1)
    scale = A.max(0)
    scale[scale == 0] = 1.0
    coef, *_ = np.linalg.lstsq(A / scale, np.asarray(seconds, dtype=np.float64), rcond=None)
    coef = np.clip(coef, 0, None) / scale
    return TheoryFit(fit=A @ coef, constant=np.full(len(Ts), coef[0]), linear=A[:, 1] * coef[1],
                     quadratic=A[:, 2] * coef[2], coef=coef)


def block_time_grid(max_len: int, n: int = 9, at_least: int = 1024) -> list[int]:
    """Lengths for the block timing: n lengths from 16 to max(max_len, at_least), geometric. The
    quadratic term only shows at long lengths, so the grid goes past a toy model's 128 positions
    (timed on a block with the model's sizes, which has no position limit)."""
    hi = max(int(max_len), int(at_least))
    return sorted({int(round(x)) for x in np.geomspace(16, hi, n)})


@dataclass(frozen=True)
class BlockTimes:
    """Measured seconds per sequence length (N lengths): the best of several interleaved runs."""
    attention: np.ndarray  # (N,) attend() alone: QKᵀ scores, softmax, weights·V (the T² part)
    block: np.ndarray  # (N,) one whole transformer block (norms, projections, attend, FFN)
    attention_spread: np.ndarray  # (N,) how much attention's runs varied: median / best − 1
    block_spread: np.ndarray  # (N,) the same for the block


def _block_inputs(cfg: ModelConfig, Ts: Sequence[int], g: torch.Generator) -> list[tuple]:
    """Per T: random q, k, v (1, H, T, d_k), the causal mask (T, T) and a block input (1, T, D)."""
    H, dk, D = cfg.n_heads, cfg.d_k, cfg.d_model
    inputs = []
    for T in Ts:
        T = int(T)
        q, k, v = (torch.randn(1, H, T, dk, generator=g) for _ in range(3))
        inputs.append((q, k, v, causal_allowed(T), torch.randn(1, T, D, generator=g)))
    return inputs


def _time_rounds(fns: dict[str, Callable], inputs: list, repeats: int) -> dict[str, np.ndarray]:
    """Seconds (repeats, N) of each function on each input, after one warm-up of all; the rounds
    are interleaved (every input and function once per round), so a burst of load from other
    processes spoils one round of all lengths rather than all runs of one length."""
    runs = {name: np.zeros((repeats, len(inputs))) for name in fns}
    for x in inputs:  # warm-up
        for fn in fns.values():
            fn(x)
    for r in range(repeats):
        for i, x in enumerate(inputs):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn(x)
                runs[name][r, i] = time.perf_counter() - t0
    return runs


@torch.no_grad()
def measure_block_time(cfg: ModelConfig, Ts: Sequence[int], repeats: int = 7, seed: int = 0) -> BlockTimes:
    """Wall-clock seconds (best of `repeats`, interleaved rounds after one warm-up) per T of
    attend() alone on random q, k, v of shape (1, H, T, d_k) with the causal mask, and of one whole
    transformer block of this architecture with fresh weights (seed) on random input (1, T, d_model),
    with how much the runs of each T varied. Fresh weights: the time does not depend on the
    values, and a block has no position limit."""
    torch.manual_seed(seed)
    block = Block(cfg.replace(max_len=max(cfg.max_len, max(int(t) for t in Ts)))).eval()
    inputs = _block_inputs(cfg, Ts, torch.Generator().manual_seed(seed))
    scale = 1.0 / math.sqrt(cfg.d_k)

    def run_attn(x):
        attend(x[0], x[1], x[2], allowed=x[3], scale=scale)

    def run_block(x):
        block(x[4], x[3], record=False)

    runs = _time_rounds({"attention": run_attn, "block": run_block}, inputs, max(1, int(repeats)))
    best = {name: t.min(0) for name, t in runs.items()}
    # how much the runs of one length varied: the median run over the fastest, minus 1
    spread = {name: np.median(t, 0) / best[name] - 1 for name, t in runs.items()}
    return BlockTimes(attention=best["attention"], block=best["block"], attention_spread=spread["attention"],
                      block_spread=spread["block"])


@dataclass(frozen=True)
class QuadraticFit:
    """seconds ≈ c + a·T + b·T² (c, a, b ≥ 0) over N measured lengths, fitted on relative errors."""
    c: float  # seconds: the fixed overhead
    a: float  # seconds per token
    b: float  # seconds per token²
    fit: np.ndarray  # (N,) the fitted seconds at each T
    quadratic: np.ndarray  # (N,) its T² part, b·T²
    share: np.ndarray  # (N,) the T² part's share of the fit (0 where the fit is 0)
    crossover: float | None  # the T where b·T² = c + a·T (None when b = 0)
    rel_err: np.ndarray  # (N,) fit / measured − 1


def fit_linear_quadratic(Ts: Sequence[int], seconds: Sequence[float]) -> QuadraticFit:
    """Least squares seconds ≈ c + a·T + b·T² with c, a, b >= 0 (a term whose coefficient comes out
    negative is dropped and the rest refitted), on relative errors (each row divided by its time):
    the times span two orders of magnitude, and a plain fit would match the longest lengths only
    and call the short ones' fixed overhead zero. Returns the coefficients, the fitted curve, its
    T² part, the T² share of the fit at each T, and `crossover`: the T where b·T² = c + a·T (the
    quadratic term is half the time beyond it; None when b = 0), and `rel_err`: fit / measured − 1
    at each T."""
    T = np.asarray(Ts, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    if T.shape != y.shape or T.size < 3:
        raise ValueError("need the same number (at least 3) of lengths and times")
    cols = {"c": np.ones_like(T), "a": T, "b": T ** 2}
    keep = list(cols)
    coef = {k: 0.0 for k in cols}
    if (y <= 0).any() or not np.isfinite(y).all():
        raise ValueError("times must be positive and finite")
    while keep:
        A = np.stack([cols[k] / cols[k].max() for k in keep], 1)
        sol, *_ = np.linalg.lstsq(A / y[:, None], np.ones_like(y), rcond=None)  # relative residuals
        if (sol >= 0).all():
            coef.update({k: float(v / cols[k].max()) for k, v in zip(keep, sol)})
            break
        keep.pop(int(np.argmin(sol)))  # the most negative term goes
    c, a, b = coef["c"], coef["a"], coef["b"]
    fit = c + a * T + b * T ** 2
    quad = b * T ** 2
    share = np.divide(quad, fit, out=np.zeros_like(fit), where=fit > 0)
    crossover = (a + math.sqrt(a * a + 4 * b * c)) / (2 * b) if b > 0 else None
    return QuadraticFit(c=c, a=a, b=b, fit=fit, quadratic=quad, share=share, crossover=crossover,
                        rel_err=fit / y - 1)  # the fit's error at each T, relative to the measured time


def timing_summary(Ts: Sequence[int], block_s: Sequence[float], attn_s: Sequence[float], max_len: int,
                   spread: Sequence[float] | None = None) -> str:
    """What the measurement shows, in sentences computed from the numbers (never a canned claim):
    how far the fitted c + a·T + b·T² is from the measured times (beside how much the runs of one
    length varied, `spread` = median / best − 1 per T, when given), where the fitted T² term passes
    half of the block time (inside or beyond the measured lengths), the attention's share of the
    block at the longest length, and whether the timings went down anywhere as T grew (noise)."""
    T = [int(t) for t in Ts]
    blk, att = np.asarray(block_s, dtype=float), np.asarray(attn_s, dtype=float)
    f = fit_linear_quadratic(T, blk)
    out = [fit_error_sentence(T, blk, f, spread)]
    x = f.crossover
    if x is None:
        out.append(f"The fit found no T² term in the block's time up to T = {T[-1]}: at these lengths the time "
                   "grows no faster than linearly (fixed overhead and the T-linear projections and FFN dominate).")
    elif x <= T[-1]:
        out.append(f"The fitted T² term is half of the block's time at T ≈ {x:,.0f} and more beyond it "
                   f"({100 * f.share[-1]:.0f}% at T = {T[-1]:,}).")
    else:
        out.append(f"Up to T = {T[-1]:,} the T² term stays under half of the block's time ({100 * f.share[-1]:.0f}% "
                   f"at T = {T[-1]:,}); the fit puts the crossing at T ≈ {x:,.0f}, beyond the lengths measured.")
    out.append(f"Attention alone (scores, softmax, weights·V) took {1e3 * att[-1]:.2f} ms beside the whole block's "
               f"{1e3 * blk[-1]:.2f} ms at T = {T[-1]:,}, and {1e3 * att[0]:.3f} ms beside {1e3 * blk[0]:.3f} ms "
               f"at T = {T[0]}.")
    over = [T[i] for i in range(len(T)) if att[i] > blk[i]]
    if over:
        out.append("Attention alone was measured slower than the whole block, which contains it, at T = " +
                   ", ".join(map(str, over)) + ": the machine was busy during those runs.")
    drops = [(T[i], T[i + 1]) for i in range(len(T) - 1) if blk[i + 1] < blk[i]]
    if drops:
        out.append("The block was measured faster at a longer length in " +
                   ", ".join(f"T = {a} → {b}" for a, b in drops) + ": timing noise on a shared machine "
                   "(each point is the best of several runs), not a real speed-up.")
    if T[-1] > max_len:
        out.append(f"This model reads at most {max_len} tokens; the longer lengths time a block of its size, "
                   "which has no such limit.")
    return " ".join(out)


FIT_OK = 0.05  # a fit within 5% of every measured time (or within the runs' own spread) is called close


def fit_error_sentence(Ts: Sequence[int], seconds: np.ndarray, f: QuadraticFit, spread: Sequence[float] | None = None) -> str:
    """One honest sentence on the fit c + a·T + b·T² (f from fit_linear_quadratic): within how many
    percent of every measured time it stays, or where it misses and by how much, beside the runs'
    spread (median / best − 1 per T) when given. A fit below the measurement at the longest length
    is named: it understates how fast the time grows there."""
    T = [int(t) for t in Ts]
    err = np.asarray(f.rel_err, dtype=float)
    y = np.asarray(seconds, dtype=float)
    sp = None if spread is None else np.asarray(spread, dtype=float)
    i = int(np.argmax(np.abs(err)))
    tol = max(FIT_OK, float(sp[i]) if sp is not None else 0.0)
    var = "" if sp is None else f" (the runs at one length varied by up to {100 * float(np.max(sp)):.0f}%)"
    if abs(err[i]) <= tol:
        return f"The fitted curve c + a·T + b·T² stays within {100 * abs(err[i]):.0f}% of every measured time{var}."
    side = "under" if err[i] < 0 else "over"
    s = (f"The fitted curve is a rough summary, not an exact law: it is {100 * abs(err[i]):.0f}% {side} the measured "
         f"time at T = {T[i]:,} (fit {1e3 * f.fit[i]:.2f} ms, measured {1e3 * y[i]:.2f} ms)")
    if sp is not None:
        s += f", more than the runs at that length varied ({100 * float(sp[i]):.0f}%)"
    s += ". "
    if i != len(T) - 1:
        s += f"At T = {T[-1]:,} it is {100 * abs(err[-1]):.0f}% {'under' if err[-1] < 0 else 'over'} the measurement. "
    if err[-1] < -tol:
        s += ("Under at the longest length means the time grows faster there than c + a·T + b·T² allows; "
              "the fit weighs every length's relative error alike, so the short lengths' overhead still counts.")
    else:
        s += "The fit weighs every length's relative error alike, so no single length dominates it."
    return s.strip()
