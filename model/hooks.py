"""Attention hooks: every variant and intervention of an attention layer is a small object that
the layer calls at fixed points of its one forward pass (model.layers.MultiHeadAttention.forward).
(Not torch's module hooks: plain objects the layer itself calls, in a fixed order, on its
intermediates.)

The forward is one fixed sequence of steps; between them it calls its hooks, in order (each
point: what it is called on, and the classes here that use it):

    q, k, v = x_q W_Q, x_kv W_K, x_kv W_V, split into heads
              q (B, H, Tq, d_k); k (B, H_kv, T_new, d_k); v (B, H_kv, T_new, d_v)
    1. qk(q, k, c) -> q, k   the new positions' queries and keys: Rotary (RoPE)
    2. kv(k, v, c) -> k, v   the keys and values of the whole context: CachedKV, KVSink (KV cache)
       (grouped-query attention: each K/V head repeated for the query heads that read it)
    3. scores(c)             before the softmax; the hook edits the call `c`:
                               c.allowed         the bool mask; c.mask(m) ANDs m in   SlidingWindow
                               c.bias            added to the scaled scores (c.add_bias)  AlibiBias
                               c.scale           the factor on the scores             AdditiveScore
                               c.energy_weights  Bahdanau's score in place of q . k   AdditiveScore
                               c.maps            functions on scaled + bias, before the mask
       model.attention.attend_fields, the one attention: scores = q k^T, scaled = scores * scale,
       + bias, maps, mask, softmax -> weights, heads = weights @ v
    4. weights(w, c) -> w    the softmax rows (B, H, Tq, Tk): EditedRows. New rows give new
                             head outputs (heads = w @ v again)
    5. heads(z, c) -> z      each head's output Z_h (B, H, Tq, d_v), what enters W_O: HeadAblation
    concat the heads, W_O

Where the hooks come from:
  - variants, options of the model: chosen ONCE from the ModelConfig when the layer is built
    (model.layers.attention_variants: Rotary, SlidingWindow, AlibiBias, AdditiveScore), the same
    for every call.
  - pass hooks, given with one forward pass and for that pass only (a PassContext from
    Transformer.run): interventions (model.intervene: HeadAblation, EditedRows, or any hook via
    Intervention(hooks=...)) and the KV cache of a generation step (model.generate: CachedKV,
    KVSink). They never change the (shared, cached) model. At a point, variants run first.

A hook records what it computed in the trace with `c.fields[name] = value`, name an
AttentionTrace field (a wrong name fails when the trace is made). A new kind is ONE new
AttentionHook subclass overriding the points it needs; the forward does not change. A variant's
parameters are registered on the layer by its `attach` (under the checkpoint's names) and read
through `c.layer` at call time (a pretrained model's tensors are assigned after it is built).

The pretrained families' attention details are hooks too (model.layers, chosen per layer by
attention_variants(cfg, layer=i)): Qwen3's q/k RMSNorm (QKNorm, a qk hook ahead of Rotary, whose
attach registers q_norm and k_norm), Gemma 2's soft-capping (SoftCap, a scores hook appending
cap * tanh(s / cap) to c.maps), a sliding window on some layers only (SlidingWindow on the layers
cfg.window_layers names: Gemma 2's local layers, Qwen2's upper layers), Mistral (SlidingWindow on
every layer, with the causal mask), Llama 3.1's rescaled rotary frequencies (Rotary's llama3).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from torch import Tensor, nn

from .attention import combine

# (cos, sin), each (T, d_k): the rotary tables of the positions in one pass (model.layers.rope_tables)
RopeTables = tuple[Tensor, Tensor]
POINTS = ("qk", "kv", "scores", "weights", "heads")  # in the order the forward calls them


class AttentionHook:
    """One change to what an attention layer computes. Override the points you need; each
    default changes nothing (and a point a class does not override is never called)."""

    def attach(self, layer: nn.Module) -> None:
        """Called once when the layer is built: register any parameters on `layer`."""

    def qk(self, q: Tensor, k: Tensor, c: AttentionCall) -> tuple[Tensor, Tensor]:
        """q (B, H, Tq, d_k), k (B, H_kv, T_new, d_k) of the new positions -> the same shapes."""
        return q, k

    def kv(self, k: Tensor, v: Tensor, c: AttentionCall) -> tuple[Tensor, Tensor]:
        """k (B, H_kv, T, d_k), v (B, H_kv, T, d_v) -> the whole context's (B, H_kv, T_ctx, .)."""
        return k, v

    def scores(self, c: AttentionCall) -> None:
        """Before the softmax: edit c.allowed / c.bias / c.scale / c.energy_weights / c.maps."""

    def weights(self, w: Tensor, c: AttentionCall) -> Tensor:
        """w (B, H, Tq, Tk) softmax rows -> weights of the same shape (a new tensor, or w itself)."""
        return w

    def heads(self, z: Tensor, c: AttentionCall) -> Tensor:
        """z (B, H, Tq, d_v) the per-head outputs -> what enters W_O (same shape)."""
        return z


class AttentionCall:
    """The state of one call of an attention layer, as its hooks see and edit it."""

    __slots__ = ("layer", "rope", "t_q", "t_k", "allowed", "scale", "bias", "energy_weights", "maps", "fields")

    def __init__(self, layer: nn.Module, rope: RopeTables | None, allowed: Tensor | None, scale: float):
        self.layer = layer  # the MultiHeadAttention (its parameters, its n_heads, d_k)
        self.rope = rope  # the rotary tables of this pass's positions, (cos, sin) (T, d_k) each; or None
        self.t_q = self.t_k = 0  # query rows and keys (the whole context), set before the scores point
        self.allowed = allowed  # bool, broadcastable to (B, H, Tq, Tk); None = everything
        self.scale = scale  # 1/sqrt(d_k), or 1.0 (cfg.scale_scores False)
        self.bias: Tensor | None = None  # float, broadcastable to (B, H, Tq, Tk), added to the scaled scores
        self.energy_weights: tuple[Tensor, Tensor, Tensor] | None = None  # additive score's (W_q, W_k, v)
        self.maps: list[Callable[[Tensor], Tensor]] = []  # applied in order to scaled + bias, before the mask
        self.fields: dict[str, object] = {}  # extra AttentionTrace fields

    def mask(self, allowed: Tensor) -> None:
        """AND a mask (bool, broadcastable; True = may attend) into the call's `allowed`."""
        self.allowed = combine(self.allowed, allowed)

    def add_bias(self, bias: Tensor) -> None:
        """Add a float term to the scaled scores (broadcastable to (B, H, Tq, Tk))."""
        self.bias = bias if self.bias is None else self.bias + bias


@functools.lru_cache(maxsize=None)
def _points_of(cls: type) -> tuple[str, ...]:
    """The points a hook class overrides (the others are never called for it)."""
    return tuple(p for p in POINTS if getattr(cls, p) is not getattr(AttentionHook, p))


class HookSet:
    """Hooks sorted by point, each point's in the given order: what the forward iterates."""

    __slots__ = ("all",) + POINTS

    def __init__(self, hooks: tuple[AttentionHook, ...] = ()):
        self.all = tuple(hooks)
        by_point: dict[str, list] = {p: [] for p in POINTS}
        for h in self.all:
            if not isinstance(h, AttentionHook):
                raise ValueError(f"an attention hook must be an AttentionHook (model.hooks), got {type(h).__name__}")
            for p in _points_of(type(h)):
                by_point[p].append(h)
        for p in POINTS:
            setattr(self, p, tuple(by_point[p]))

    def plus(self, more: tuple[AttentionHook, ...]) -> HookSet:
        """These hooks, then `more` (a pass's hooks after the model's variants)."""
        return HookSet(self.all + tuple(more)) if more else self


@dataclass(frozen=True)
class PassContext:
    """What one forward pass gives one layer's attention besides its input (Transformer.run makes
    it): the rotary tables of the pass's positions (read by the Rotary variant) and this pass's
    hooks for this layer (interventions, the KV cache), run after the layer's own variants."""
    rope: RopeTables | None = None  # (cos, sin), each (T, d_k)
    hooks: tuple[AttentionHook, ...] = ()
