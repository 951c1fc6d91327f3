"""Blockwise attention with the online softmax: FlashAttention's recurrence, computed tile by tile.

Plain attention (model.attention.attend) builds the whole (Tq, Tk) score matrix, softmaxes each
row and multiplies by V. The online softmax never holds a whole row: it reads the keys one block
("tile") at a time and keeps, per query i,
    m_i  the running max of the scaled scores seen so far,
    l_i  the running sum of exp(score - m_i) over the keys seen so far,
    O_i  the running (unnormalised) output sum_j exp(score_ij - m_i) v_j.
When a new block raises the max from m_old to m_new, what was summed so far was measured against
m_old, so l and O are rescaled by exp(m_old - m_new) before the block is added:
    m_new = max(m_old, rowmax(S_blk))
    P     = exp(S_blk - m_new)                         (0 where not allowed)
    l     = exp(m_old - m_new) * l + rowsum(P)
    O     = exp(m_old - m_new) * O + P @ V_blk
and at the end output = O / l, exactly softmax(S) @ V (Milakov & Gimelshein 2018; Dao et al.
2022, Algorithm 1). Only a (tile_q, tile_k) block of scores exists at any time.

Conventions come from model.attention: scale 1/sqrt(d_k) unless given, a boolean `allowed` mask
(True = may attend; causal_allowed / padding_allowed / combine build them), and a query row with
nothing allowed gets an all-zero output and is flagged in `fully_masked`, never NaN.

This is a teaching implementation in a Python loop: slower than one matmul (see
benchmarks/bench_flash.py); the point is the memory: (Tq_tile x tile) scores instead of Tq x Tk.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.profiler import ProfilerActivity, profile  # loaded by `import torch` anyway

from .attention import causal_allowed, combine
from .trace import TraceNode


@dataclass(frozen=True)
class TileStep(TraceNode):
    """The state after key tile `tile` has been read (query tile `q_start:q_end`)."""
    tile: int  # index of the key tile just read (0-based, within this query tile)
    q_start: int  # query rows of this query tile: q_start .. q_end - 1
    q_end: int
    k_start: int  # keys read in this step: k_start .. k_end - 1
    k_end: int
    m: Tensor  # (B, H, q_end - q_start)  running max of the scaled, allowed scores (-inf: none yet)
    l: Tensor  # (B, H, q_end - q_start)  running sum of exp(score - m)
    out: Tensor  # (B, H, q_end - q_start, d_v)  output so far: O / l (0 where l = 0)
    rescale: Tensor  # (B, H, q_end - q_start)  exp(m_old - m_new) applied to l and O in this step


@dataclass(frozen=True)
class TiledResult(TraceNode):
    output: Tensor  # (B, H, Tq, d_v)  softmax(q k^T * scale, masked) @ v, zeros on fully masked rows
    m: Tensor  # (B, H, Tq)  final row max (log-sum-exp = m + log l)
    l: Tensor  # (B, H, Tq)  final row sum of exp(score - m); 0 on fully masked rows
    fully_masked: Tensor  # bool (B, H, Tq): rows where nothing was allowed
    tile_q: int  # query-tile size actually used
    tile_k: int  # key-tile size actually used
    scale: float
    steps: tuple[TileStep, ...] = ()  # one per (query tile, key tile), when record=True
    notices: tuple[str, ...] = ()  # e.g. "tile 9 > T = 5: clamped to 5 (one tile = plain attention)"


def check_tile(tile, t: int, name: str = "tile") -> tuple[int, str | None]:
    """(tile size to use, notice or None). 0, negatives and non-integers raise ValueError with the
    fix; a tile larger than t is clamped to t (the limit case: one tile, plain attention)."""
    if isinstance(tile, bool) or not isinstance(tile, int):
        if isinstance(tile, float) and tile.is_integer():
            tile = int(tile)
        else:
            raise ValueError(f"{name} size must be a whole number of positions, got {tile!r}")
    if tile < 1:
        raise ValueError(f"{name} size must be at least 1 (got {tile}): each step reads at least one key")
    if tile > t:
        return t, (f"{name} size {tile} is larger than T = {t}: clamped to {t} "
                   "(a single tile, which is plain attention)")
    return tile, None


def tiled_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None = None, *,
                    tile: int = 64, tile_q: int | None = None, scale: float | None = None,
                    causal: bool = False, record: bool = False) -> TiledResult:
    """Attention computed key tile by key tile with the online softmax (see the module doc).

    q: (..., Tq, d_k)  k: (..., Tk, d_k)  v: (..., Tk, d_v); leading axes broadcast like attend's
    (usually (B, H)). allowed: bool broadcastable to (..., Tq, Tk), True = may attend.
    causal=True ANDs model.attention.causal_allowed(Tq, Tk) into `allowed` (the engine's masks,
    not re-implemented here). tile: key-tile size; tile_q: query-tile size (None = all queries at once). record=True keeps a
    TileStep per (query tile, key tile) for the page (copies of m, l and the output so far).
    Equals model.attention.attend(q, k, v, allowed, scale).heads."""
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension (d_k); got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of positions; got {k.shape[-2]} and {v.shape[-2]}")
    t_q, t_k = q.shape[-2], k.shape[-2]
    if t_q < 1 or t_k < 1:
        raise ValueError(f"need at least one query and one key (got Tq = {t_q}, Tk = {t_k})")
    if allowed is not None and allowed.dtype != torch.bool:
        raise ValueError("allowed must be a bool tensor (True = may attend)")
    if causal:
        allowed = combine(causal_allowed(t_q, t_k), allowed)
    notices = []
    tile_k, note = check_tile(tile, t_k, "key tile")
    if note:
        notices.append(note)
    tq, note = check_tile(t_q if tile_q is None else tile_q, t_q, "query tile")
    if note:
        notices.append(note)
    d_k = q.shape[-1]
    scale = 1.0 / math.sqrt(d_k) if scale is None else float(scale)  # attend's convention
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if allowed is not None:
        try:
            lead = torch.broadcast_shapes(lead, allowed.shape[:-2])
            allowed = allowed.expand(*lead, t_q, t_k)  # a view: no copy
        except RuntimeError:
            raise ValueError(f"allowed of shape {tuple(allowed.shape)} does not broadcast to "
                             f"{(*lead, t_q, t_k)} (..., Tq, Tk)") from None
    dtype = torch.result_type(q, k)
    neg_inf = torch.tensor(float("-inf"), dtype=dtype)
    zero = torch.zeros((), dtype=dtype)
    outs, ms, ls, steps = [], [], [], []
    for q0 in range(0, t_q, tq):
        q1 = min(q0 + tq, t_q)
        out, m, l = _query_tile(q, k, v, allowed, q0, q1, tile_k, scale, lead, neg_inf, zero,
                                steps if record else None)
        outs.append(out)
        ms.append(m)
        ls.append(l)
    out = torch.cat(outs, dim=-2)  # (..., Tq, d_v)
    l_all = torch.cat(ls, dim=-1)
    return TiledResult(output=out, m=torch.cat(ms, dim=-1), l=l_all, fully_masked=~(l_all > 0),
                       tile_q=tq, tile_k=tile_k, scale=scale, steps=tuple(steps), notices=tuple(notices))


def _query_tile(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None, q0: int, q1: int, tile_k: int,
                scale: float, lead: torch.Size, neg_inf: Tensor, zero: Tensor,
                steps: list[TileStep] | None) -> tuple[Tensor, Tensor, Tensor]:
    """The online softmax of queries q0 .. q1 - 1 over every key tile (the module doc's recurrence):
    (output (..., q1 - q0, d_v), final m, final l). With a `steps` list, a TileStep is appended after
    each key tile."""
    t_k, d_v = k.shape[-2], v.shape[-1]
    dtype = neg_inf.dtype
    qb = q[..., q0:q1, :]  # (..., tq, d_k)
    m = torch.full((*lead, q1 - q0), float("-inf"), dtype=dtype)  # running max
    l = torch.zeros((*lead, q1 - q0), dtype=dtype)  # running sum
    acc = torch.zeros((*lead, q1 - q0, d_v), dtype=dtype)  # running unnormalised output
    for i, k0 in enumerate(range(0, t_k, tile_k)):
        k1 = min(k0 + tile_k, t_k)
        s = (qb @ k[..., k0:k1, :].transpose(-2, -1)) * scale  # (..., tq, tile): the only scores held
        if allowed is not None:
            ok = allowed[..., q0:q1, k0:k1]
            s = torch.where(ok, s, neg_inf)
        m_new = torch.maximum(m, s.amax(-1))  # (..., tq)
        # Rows with nothing allowed so far keep m = -inf; shift by 0 there so exp() sees
        # -inf - 0 = -inf (-> 0), never -inf - (-inf) = NaN.
        m_safe = torch.where(torch.isfinite(m_new), m_new, zero)
        p = torch.exp(s - m_safe[..., None])  # (..., tq, tile), 0 where not allowed
        rescale = torch.exp(m - m_safe)  # exp(m_old - m_new); 0 when m_old = -inf
        l = rescale * l + p.sum(-1)
        acc = rescale[..., None] * acc + p @ v[..., k0:k1, :].to(dtype)
        m = m_new
        if steps is not None:
            so_far = torch.where(l[..., None] > 0, acc / l.clamp_min(torch.finfo(dtype).tiny)[..., None], zero)
            steps.append(TileStep(tile=i, q_start=q0, q_end=q1, k_start=k0, k_end=k1,
                                  m=m.clone(), l=l.clone(), out=so_far, rescale=rescale.clone()))
    ok_rows = l > 0  # (..., tq): False where no key was allowed
    return torch.where(ok_rows[..., None], acc / torch.where(ok_rows, l, 1.0)[..., None], zero), m, l


def plain_peak_elements(t_q: int, t_k: int) -> int:
    """Score-matrix elements plain attention holds at once: the whole Tq x Tk matrix."""
    return t_q * t_k


def tiled_peak_elements(t_q: int, t_k: int, tile_k: int, tile_q: int | None = None) -> int:
    """Score-block elements the tiled loop holds at once: tile_q x tile_k (tile_q None = Tq)."""
    return min(t_q, tile_q or t_q) * min(t_k, tile_k)


def plain_attention(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None) -> Tensor:
    """The plain computation the benchmark compares against: softmax(q k^T * scale) @ v with the
    whole (Tq, Tk) score matrix in memory, nothing else kept (attend() also keeps every
    intermediate for the trace, which would only make plain look worse)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1) @ v


def measure_peak_bytes(fn) -> tuple[int, object]:
    """(peak bytes of CPU tensor memory allocated while fn() runs, fn's result), measured with
    torch's profiler (profile_memory=True): every allocation and free is an event; their running
    sum in time order, at operator granularity, gives the peak above what existed before. The
    result itself counts (it is allocated inside)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    cur = peak = 0
    for e in events:  # self_* = this op's own net allocation (children counted on their own)
        cur += e.self_cpu_memory_usage
        peak = max(peak, cur)
    return peak, result
