"""The one attention implementation (used by the model, the calculator page and the tests),
plus the masks that feed it. `allowed` (bool, True = may attend) is the source of truth."""
from __future__ import annotations

import math
import weakref
from typing import Callable, Sequence

import torch
from torch import Tensor

from .trace import AttentionTrace


def causal_allowed(t_q: int, t_k: int | None = None) -> Tensor:
    """(Tq, Tk) bool: query i may attend to keys j <= i (lower triangle incl. the diagonal)."""
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool).tril()


def padding_allowed(key_padding_mask: Tensor, *, mask_queries: bool = False) -> Tensor:
    """key_padding_mask (B, T) bool, True = real token -> (B, 1, Tq, Tk) bool.

    Keys that are padding are not allowed. With mask_queries=True, padded query rows are
    masked too (those rows end up fully masked: all-zero weights, flagged)."""
    if key_padding_mask.dtype != torch.bool or key_padding_mask.dim() != 2:
        raise ValueError("key_padding_mask must be a bool tensor of shape (B, T), True = real token")
    keys = key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
    if not mask_queries:
        return keys.expand(-1, 1, key_padding_mask.shape[1], -1)
    return keys & key_padding_mask[:, None, :, None]  # (B, 1, Tq, Tk)


def combine(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of any number of broadcastable `allowed` masks (None = allow everything).
    Same as the elementwise product of the 1/0 masks."""
    out: Tensor | None = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else (out & m)
    return out


def window_allowed(t_q: int, t_k: int | None = None, window: int | None = None) -> Tensor | None:
    """(Tq, Tk) bool band of sliding-window (local) attention: query row i (at position
    t_k - t_q + i: the last t_q of t_k positions, as in a KV-cached step) may attend to key j when
    |pos_i - j| < window. Combined with the causal mask this is Mistral's i - window < j <= i
    (window tokens including itself); bidirectional, a band of 2·window - 1 around the diagonal.
    window 1: each token sees only itself; window >= Tk: nothing is removed. None -> None (no window)."""
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive integer (1 = each token sees only itself), got {window!r}")
    t_k = t_q if t_k is None else t_k
    return relative_distance(t_q, t_k) < window


def relative_distance(t_q: int, t_k: int) -> Tensor:
    """(Tq, Tk) long |pos_i - j|, query row i at position t_k - t_q + i (self-attention, with or
    without a KV cache in front of the new rows)."""
    q_pos = torch.arange(t_k - t_q, t_k)[:, None]  # (Tq, 1)
    return (q_pos - torch.arange(t_k)[None, :]).abs()  # (Tq, Tk)


def alibi_slopes(n_heads: int) -> Tensor:
    """(H,) float32 ALiBi slopes (Press et al. 2022): for n a power of two the geometric sequence
    2^(-8/n), 2^(-16/n), ..., 2^(-8) (n = 8: 1/2 .. 1/256); otherwise the slopes of the nearest
    lower power of two 2^a, then every other slope of 2^(a+1) heads for the rest (the paper's code)."""
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"n_heads must be a positive integer, got {n_heads!r}")

    def power_of_2(n: int) -> list[float]:
        return [2.0 ** (-8.0 * k / n) for k in range(1, n + 1)]

    a = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = power_of_2(a)
    if a != n_heads:
        slopes += power_of_2(2 * a)[0::2][: n_heads - a]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(slopes: Tensor, t_q: int, t_k: int | None = None) -> Tensor:
    """(H, Tq, Tk) float32: -slope_h · |pos_i - j|, added to the scaled scores of head h. Under
    the causal mask this is the paper's -slope_h · (i - j); bidirectional, distance both ways."""
    t_k = t_q if t_k is None else t_k
    return -slopes[:, None, None] * relative_distance(t_q, t_k).to(torch.float32)[None]


def additive_energies(q: Tensor, k: Tensor, w_q: Tensor, w_k: Tensor, v_a: Tensor) -> Tensor:
    """Bahdanau's additive score e_ij = v_h · tanh(q_i W_q,h + k_j W_k,h), per head.
    q (..., H, Tq, d_k), k (..., H, Tk, d_k), w_q and w_k (H, d_k, d_a), v_a (H, d_a)
    -> energies (..., H, Tq, Tk). Holds a (..., H, Tq, Tk, d_a) temporary: small models only."""
    qa = q @ w_q  # (..., H, Tq, d_a)
    ka = k @ w_k  # (..., H, Tk, d_a)
    hidden = torch.tanh(qa[..., :, None, :] + ka[..., None, :, :])  # (..., H, Tq, Tk, d_a)
    return (hidden * v_a[:, None, None, :]).sum(-1)  # (..., H, Tq, Tk)


def additive(allowed: Tensor) -> Tensor:
    """The additive form of a mask: 0.0 where allowed, -inf where not."""
    zero = torch.zeros((), dtype=torch.float32)
    return torch.where(allowed, zero, torch.tensor(float("-inf")))


def _rows_allowed(allowed: Tensor) -> tuple[Tensor, bool, Tensor, Tensor]:
    """(row_ok (..., Tq, 1) bool: at least one key allowed, whether every row is ok,
    ~row_ok[..., 0] (..., Tq): the fully masked rows, and ~allowed: where -inf goes) of a mask. Remembered per mask tensor while
    it is unchanged (same object, same version counter): every layer of a pass attends with the
    same mask, so the check runs once per pass, not per layer."""
    try:
        key = (id(allowed), allowed._version)
    except RuntimeError:  # an inference-mode tensor has no version counter: nothing remembered
        row_ok = allowed.any(dim=-1, keepdim=True)
        return row_ok, bool(row_ok.all()), ~row_ok[..., 0], ~allowed
    hit = _ROWS_SEEN.get(key[0])
    if hit is not None and hit[0]() is allowed and hit[1] == key[1]:
        return hit[2]
    row_ok = allowed.any(dim=-1, keepdim=True)  # (..., Tq, 1): at least one key allowed
    rows = (row_ok, bool(row_ok.all()), ~row_ok[..., 0], ~allowed)
    if len(_ROWS_SEEN) >= 64:
        _ROWS_SEEN.clear()
    _ROWS_SEEN[key[0]] = (weakref.ref(allowed), key[1], rows)
    return rows


_ROWS_SEEN: dict[int, tuple] = {}  # id(mask) -> (weakref(mask), version, _rows_allowed's answer)


def _fits(small: torch.Size, big: torch.Size) -> bool:
    """Whether `small` broadcasts to `big` without growing it (torch.broadcast_shapes costs ~80 us)."""
    return len(small) <= len(big) and all(a == 1 or a == b for a, b in zip(reversed(small), reversed(big)))


def masked_softmax(x: Tensor, allowed: Tensor | None = None, temperature: float = 1.0, *,
                   in_place: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """Row softmax of x / temperature over the last axis where `allowed` (bool, broadcastable,
    True = may attend; None = everything). Returns (masked, weights, row_ok):
      masked  x / temperature, -inf where not allowed (what the page shows as "masked scores")
      weights softmax rows (sum 1); all-zero rows where nothing is allowed, never NaN
      row_ok  (..., Tq, 1) bool, False on fully masked rows
    in_place: x is a temporary the caller gives up (attend's scaled scores): -inf is written into
    it (masked_fill_, the same values as torch.where) and `masked` is x itself, no new buffer.
    The one masked softmax: attend, the classroom analyses and the calculator call it."""
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    x = x / temperature if temperature != 1.0 else x
    if allowed is None:
        # Nothing masked: `masked` is x itself (torch.where would copy every value unchanged) and
        # every row is ok: row_ok is all True, of the shape an all-True (Tq, Tk) mask gives.
        rows = x.shape[-2:-1] + (1,) if x.dim() >= 2 else (1,)
        return x, torch.softmax(x, dim=-1), torch.ones(rows, dtype=torch.bool, device=x.device)
    if allowed.dtype != torch.bool:
        raise ValueError("allowed must be a bool tensor (True = may attend)")
    row_ok, every, _, not_allowed = _rows_allowed(allowed)  # (..., Tq, 1): at least one key allowed
    if in_place and not x.requires_grad and _fits(allowed.shape, x.shape):
        masked = x.masked_fill_(not_allowed, float("-inf"))  # (..., Tq, Tk)
    else:
        masked = torch.where(allowed, x, float("-inf"))  # (..., Tq, Tk)
    if every:
        # No fully masked row: the guard below would be the identity (where keeps every value,
        # * True multiplies by one), so it is left out. Same values, bit for bit.
        return masked, torch.softmax(masked, dim=-1), row_ok
    safe = torch.where(row_ok, masked, 0.0)  # no all -inf rows
    weights = torch.softmax(safe, dim=-1) * row_ok  # (..., Tq, Tk), zero rows when fully masked
    return masked, weights, row_ok


def attend(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None = None,
           scale: float | None = None, *, bias: Tensor | None = None,
           energy_weights: tuple[Tensor, Tensor, Tensor] | None = None) -> AttentionTrace:
    """Scaled dot-product attention, every intermediate recorded.

    q: (..., Tq, d_k)  k: (..., Tk, d_k)  v: (..., Tk, d_v)
    allowed: bool broadcastable to (..., Tq, Tk), True = may attend; None = everything allowed.
    scale: None -> 1/sqrt(d_k). Fully masked query rows get all-zero weights (never NaN) and are
    flagged in `fully_masked`.
    bias: float, broadcastable to (..., Tq, Tk), added to the scaled scores before the mask and the
    softmax (ALiBi: alibi_bias); recorded as `bias`, `scaled` stays scores * scale.
    energy_weights: (W_q, W_k, v_a) of additive (Bahdanau) attention: the scores are then the
    energies v·tanh(q W_q + k W_k) (recorded as `scores` and `energies`), scale None -> 1.
    """
    return AttentionTrace(**attend_fields(q, k, v, allowed, scale, bias=bias, energy_weights=energy_weights))


def attend_fields(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None = None,
                  scale: float | None = None, *, bias: Tensor | None = None,
                  energy_weights: tuple[Tensor, Tensor, Tensor] | None = None,
                  maps: Sequence[Callable[[Tensor], Tensor]] = ()) -> dict:
    """attend's computation, as the keyword arguments of its AttentionTrace: the attention layer
    adds its own fields (concat, output, ...) and builds the trace once.
    maps: functions applied in order to scaled (+ bias) before the mask, each returning a new
    tensor (a score hook's, model.hooks, e.g. soft-capping); `masked` is then their result with
    -inf where not allowed."""
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension (d_k); got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of positions; got {k.shape[-2]} and {v.shape[-2]}")
    d_k = q.shape[-1]
    out = {}
    # The common path (no bias, no additive energies, no maps) keeps neither scores, scaled nor masked: q @ k^T
    # is scaled and masked in place and fed to the softmax, and all three are computed again on first read
    # (trace.derived: the same matmul and multiplication, the same values), as transformers
    # keeps only the weights. Its memory is reused by the next layer instead of kept in the trace.
    lazy = bias is None and energy_weights is None and not maps
    if energy_weights is None:
        scale = 1.0 / math.sqrt(d_k) if scale is None else float(scale)
        scores = q @ k.transpose(-2, -1)  # (..., Tq, Tk)
    else:
        scale = 1.0 if scale is None else float(scale)
        scores = additive_energies(q, k, *energy_weights)  # (..., Tq, Tk)
        out["energies"] = scores
    scaled = scores.mul_(scale) if lazy and not scores.requires_grad else scores * scale  # (..., Tq, Tk)
    logits = scaled
    if bias is not None:
        logits = scaled + bias  # (..., Tq, Tk)
        out["bias"] = bias
    for f in maps:
        logits = f(logits)  # (..., Tq, Tk)
    # lazy: the scaled scores are a temporary, masked in place (masked_softmax's in_place)
    masked, weights, row_ok = masked_softmax(logits, allowed, in_place=lazy)  # (..., Tq, Tk) x2, (..., Tq, 1)
    heads = weights @ v  # (..., Tq, d_v)
    # (..., Tq) with the batch/head axes of the scores, e.g. (B, H, Tq), even when `allowed` is a
    # shared (Tq, Tk) mask such as the causal one (a view: no copy).
    if allowed is None:
        allowed = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device)  # (Tq, Tk)
        fully_masked = torch.zeros((), dtype=torch.bool, device=q.device).expand(scores.shape[:-1])
    else:
        fully_masked = _rows_allowed(allowed)[2].expand(scores.shape[:-1])  # ~row_ok[..., 0]
    if lazy:  # scores, scaled and masked (the buffer softmax read) on first read
        masked = None if masked is scaled else masked
        scores = scaled = None
    out.update(q=q, k=k, v=v, scores=scores, scale=scale, scaled=scaled, allowed=allowed, masked=masked,
               weights=weights, fully_masked=fully_masked, heads=heads)
    return out
