"""Interventions on a forward pass (issue 19): switch attention heads off, or edit one attention
row, as an argument of the one traced forward pass. The shared model is never changed.

    Intervention(ablate=((layer, head), ...), mode="zero")   # Z_h = 0 at every position
    Intervention(ablate=((1, 2),), mode="mean")              # Z_h = its mean over the positions
    Intervention(edit_rows=((layer, head, query, (w_0, ..., w_Tk-1)),))  # one row of weights, renormalised

"Ablating head h of layer l" sets that head's output Z_h (its d_v slice of the input to W_O) to
zero (or to its mean over the sentence) at every position; the layers after it recompute from
there. An edited row is divided by its sum (masked keys must stay 0) and replaces that query's
weights; Z_h of that row and everything downstream recompute.

For ranking heads, `keep` (B, L, H) gives each batch row its own set of heads switched off
(1 = keep, 0 = ablate): one forward pass of B copies of a sentence ablates B different heads.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

MODES = ("zero", "mean")


@dataclass(frozen=True)
class LayerIntervention:
    """What one layer's attention does differently. keep: (H,) or (B, H) float, 1 = keep the head,
    0 = replace its output (zero or mean, `mode`); edits: ((head, query, weights (Tk,)), ...)."""
    keep: Tensor | None = None
    mode: str = "zero"
    edits: tuple = ()


@dataclass(frozen=True)
class Intervention:
    ablate: tuple[tuple[int, int], ...] = ()  # (layer, head) switched off in every batch row
    mode: str = "zero"  # "zero" | "mean"
    edit_rows: tuple = ()  # ((layer, head, query, weights), ...)
    keep: Tensor | None = field(default=None, compare=False)  # (B, L, H): a set per batch row

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        object.__setattr__(self, "ablate", tuple((int(l), int(h)) for l, h in self.ablate))

    def check(self, n_layers: int, n_heads: int) -> None:
        bad = [(l, h) for l, h in self.ablate if not (0 <= l < n_layers and 0 <= h < n_heads)]
        bad += [(e[0], e[1]) for e in self.edit_rows if not (0 <= e[0] < n_layers and 0 <= e[1] < n_heads)]
        if bad:
            raise ValueError(f"heads {bad[:4]} do not exist: layers are 0..{n_layers - 1}, heads 0..{n_heads - 1}")
        if self.keep is not None and tuple(self.keep.shape[1:]) != (n_layers, n_heads):
            raise ValueError(f"keep must be (B, {n_layers}, {n_heads}); got {tuple(self.keep.shape)}")

    def layer(self, l: int, n_heads: int) -> LayerIntervention | None:
        """This layer's part, or None when nothing changes in it."""
        keep = None
        heads = [h for ll, h in self.ablate if ll == l]
        if heads:
            keep = torch.ones(n_heads)
            keep[heads] = 0.0
        if self.keep is not None:
            k = self.keep[:, l].to(torch.float32)  # (B, H)
            keep = k if keep is None else k * keep
            if bool((keep == 1).all()):
                keep = None
        edits = tuple((int(h), int(q), w) for ll, h, q, w in self.edit_rows if ll == l)
        if keep is None and not edits:
            return None
        return LayerIntervention(keep=keep, mode=self.mode, edits=edits)


def edited_weights(weights: Tensor, edits: tuple, allowed: Tensor | None) -> Tensor:
    """weights (B, H, Tq, Tk) with rows replaced: each edit's row divided by its sum. ValueError
    for a row that sums to 0, has a negative entry, or puts weight on a masked key."""
    w = weights.clone()
    Tk = w.shape[-1]
    for h, q, row in edits:
        r = torch.as_tensor(row, dtype=w.dtype).reshape(-1)
        if r.numel() != Tk:
            raise ValueError(f"an edited row needs {Tk} weights (one per key); got {r.numel()}")
        if not bool(torch.isfinite(r).all()) or bool((r < 0).any()):
            raise ValueError("edited weights must be finite and not negative")
        s = float(r.sum())
        if s <= 0:
            raise ValueError("the edited row sums to 0: give at least one key some weight")
        if allowed is not None:
            ok = torch.broadcast_to(allowed, w.shape)[0, h, q]
            if bool((r[~ok] > 0).any()):
                raise ValueError(f"query {q} may not attend to keys {torch.nonzero((r > 0) & ~ok).flatten().tolist()} "
                                 "(masked): give them 0")
        w[:, h, q] = r / s
    return w


def apply_to_heads(heads: Tensor, iv: LayerIntervention) -> tuple[Tensor, Tensor]:
    """heads (B, H, Tq, d_v) -> (the heads that enter W_O, ablated (B or 1, H) bool)."""
    keep = iv.keep
    if keep is None:
        return heads, torch.zeros(1, heads.shape[1], dtype=torch.bool)
    keep = keep.to(heads.dtype)
    k = keep.reshape(-1, heads.shape[1], 1, 1) if keep.dim() == 2 else keep.reshape(1, -1, 1, 1)  # (B|1, H, 1, 1)
    if iv.mode == "zero":
        out = heads * k
    else:  # the head's mean output over the sentence, at every position
        out = heads * k + heads.mean(dim=2, keepdim=True) * (1 - k)
    return out, (k[..., 0, 0] == 0)
