"""The one attention implementation (used by the model, the calculator page and the tests),
plus the masks that feed it. `allowed` (bool, True = may attend) is the source of truth."""
from __future__ import annotations

import math

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


def additive(allowed: Tensor) -> Tensor:
    """The additive form of a mask: 0.0 where allowed, -inf where not."""
    zero = torch.zeros((), dtype=torch.float32)
    return torch.where(allowed, zero, torch.tensor(float("-inf")))


def masked_softmax(x: Tensor, allowed: Tensor | None = None, temperature: float = 1.0
                   ) -> tuple[Tensor, Tensor, Tensor]:
    """Row softmax of x / temperature over the last axis where `allowed` (bool, broadcastable,
    True = may attend; None = everything). Returns (masked, weights, row_ok):
      masked  x / temperature, -inf where not allowed (what the page shows as "masked scores")
      weights softmax rows (sum 1); all-zero rows where nothing is allowed, never NaN
      row_ok  (..., Tq, 1) bool, False on fully masked rows
    The one masked softmax: attend, the classroom analyses and the calculator call it."""
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    x = x / temperature if temperature != 1.0 else x
    everything = allowed is None
    if everything:
        allowed = torch.ones(x.shape[-2:] if x.dim() >= 2 else x.shape, dtype=torch.bool, device=x.device)
    elif allowed.dtype != torch.bool:
        raise ValueError("allowed must be a bool tensor (True = may attend)")
    # Nothing masked: `masked` is x itself (torch.where would copy every value unchanged).
    neg_inf = torch.tensor(float("-inf"), dtype=x.dtype)
    masked = x if everything else torch.where(allowed, x, neg_inf)  # (..., Tq, Tk)
    row_ok = allowed.any(dim=-1, keepdim=True)  # (..., Tq, 1): at least one key allowed
    if bool(row_ok.all()):
        # No fully masked row: the guard below would be the identity (where keeps every value,
        # * True multiplies by one), so it is left out. Same values, bit for bit.
        return masked, torch.softmax(masked, dim=-1), row_ok
    safe = torch.where(row_ok, masked, torch.zeros((), dtype=x.dtype))  # no all -inf rows
    weights = torch.softmax(safe, dim=-1) * row_ok  # (..., Tq, Tk), zero rows when fully masked
    return masked, weights, row_ok


def attend(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None = None,
           scale: float | None = None) -> AttentionTrace:
    """Scaled dot-product attention, every intermediate recorded.

    q: (..., Tq, d_k)  k: (..., Tk, d_k)  v: (..., Tk, d_v)
    allowed: bool broadcastable to (..., Tq, Tk), True = may attend; None = everything allowed.
    scale: None -> 1/sqrt(d_k). Fully masked query rows get all-zero weights (never NaN) and are
    flagged in `fully_masked`.
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension (d_k); got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of positions; got {k.shape[-2]} and {v.shape[-2]}")
    d_k = q.shape[-1]
    scale = 1.0 / math.sqrt(d_k) if scale is None else float(scale)
    scores = q @ k.transpose(-2, -1)  # (..., Tq, Tk)
    scaled = scores * scale  # (..., Tq, Tk)
    masked, weights, row_ok = masked_softmax(scaled, allowed)  # (..., Tq, Tk) x2, (..., Tq, 1)
    if allowed is None:
        allowed = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device)  # (Tq, Tk)
    heads = weights @ v  # (..., Tq, d_v)
    # (..., Tq) with the batch/head axes of the scores, e.g. (B, H, Tq), even when `allowed` is a
    # shared (Tq, Tk) mask such as the causal one (a view: no copy).
    fully_masked = (~row_ok[..., 0]).expand(scores.shape[:-1])
    return AttentionTrace(q=q, k=k, v=v, scores=scores, scale=scale, scaled=scaled,
                          allowed=allowed, masked=masked, weights=weights,
                          fully_masked=fully_masked, heads=heads)
