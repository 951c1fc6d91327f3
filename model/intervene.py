"""Interventions on a forward pass: switch attention heads off, or edit one attention
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

Each kind is a small hook object (model.hooks) that the attention layer calls at its fixed points:
HeadAblation on the head outputs (zero or mean; `ablate` and `keep` together), EditedRows on the
weights after the softmax. `Intervention.layer_hooks(l)` gives layer l's. A new kind is one new
AttentionHook subclass, given per layer: Intervention(hooks=((layer, MyHook(...)), ...)).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .hooks import AttentionCall, AttentionHook

MODES = ("zero", "mean")


@dataclass(frozen=True)
class Intervention:
    ablate: tuple[tuple[int, int], ...] = ()  # (layer, head) switched off in every batch row
    mode: str = "zero"  # "zero" | "mean"
    edit_rows: tuple = ()  # ((layer, head, query, weights), ...)
    keep: Tensor | None = field(default=None, compare=False)  # (B, L, H): a set per batch row
    hooks: tuple = ()  # ((layer, AttentionHook), ...): any other kind, run in that layer's attention

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        object.__setattr__(self, "ablate", tuple((int(l), int(h)) for l, h in self.ablate))
        object.__setattr__(self, "hooks", tuple((int(l), hook) for l, hook in self.hooks))

    def check(self, n_layers: int, n_heads: int) -> None:
        bad = [(l, h) for l, h in self.ablate if not (0 <= l < n_layers and 0 <= h < n_heads)]
        bad += [(e[0], e[1]) for e in self.edit_rows if not (0 <= e[0] < n_layers and 0 <= e[1] < n_heads)]
        if bad:
            raise ValueError(f"heads {bad[:4]} do not exist: layers are 0..{n_layers - 1}, heads 0..{n_heads - 1}")
        if self.keep is not None and tuple(self.keep.shape[1:]) != (n_layers, n_heads):
            raise ValueError(f"keep must be (B, {n_layers}, {n_heads}); got {tuple(self.keep.shape)}")
        for l, hook in self.hooks:
            if not 0 <= l < n_layers:
                raise ValueError(f"a hook for layer {l}: layers are 0..{n_layers - 1}")
            if not isinstance(hook, AttentionHook):
                raise ValueError(f"hooks are (layer, AttentionHook) pairs (model.hooks); got a {type(hook).__name__}")

    def layer_hooks(self, l: int, n_heads: int) -> tuple[AttentionHook, ...]:
        """Layer l's hooks, () when nothing changes in it. A layer with any change gets a
        HeadAblation (its `ablated` says which heads, maybe none), after its EditedRows."""
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
        own = tuple(hook for ll, hook in self.hooks if ll == l)
        if keep is None and not edits:
            return own
        return ((EditedRows(edits),) if edits else ()) + (HeadAblation(keep, self.mode),) + own


class HeadAblation(AttentionHook):
    """Heads switched off (at the heads point): keep (H,) or (B, H) float, 1 = keep the head,
    0 = replace its output Z_h by zero (mode "zero") or its mean over the positions ("mean");
    None = none switched off. Records `ablated` (B or 1, H) bool."""

    def __init__(self, keep: Tensor | None, mode: str = "zero"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.keep, self.mode = keep, mode

    def heads(self, z: Tensor, c: AttentionCall) -> Tensor:
        out, c.fields["ablated"] = apply_to_heads(z, self)  # (B, H, Tq, d_v), (B|1, H)
        return out


class EditedRows(AttentionHook):
    """Attention rows replaced (at the weights point): edits ((head, query, weights (Tk,)), ...),
    each row divided by its sum; the layer then recomputes those heads' outputs."""

    def __init__(self, edits: tuple):
        self.edits = tuple(edits)

    def weights(self, w: Tensor, c: AttentionCall) -> Tensor:
        return edited_weights(w, self.edits, c.allowed)  # (B, H, Tq, Tk); c.allowed has any band in it


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


def apply_to_heads(heads: Tensor, iv: HeadAblation) -> tuple[Tensor, Tensor]:
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
