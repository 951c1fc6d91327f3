"""KV-cache memory calculator (issue 20, point 5): bytes per token and for a whole context under
multi-head (MHA), grouped-query (GQA), multi-query (MQA) attention and a sliding window.

The arithmetic is model.generate.kv_cache_bytes_per_token (the one formula: K and V, per layer, per
K/V head, d_head numbers each); this module builds the configs it reads and the table the page
shows. `engine_cache_bytes` measures the same thing on a real KVCache of the engine (a fresh model
of the same layers, K/V heads and head width: vocabulary and FFN shrunk, they do not touch the
cache), so the page and the tests can check the calculator against the real tensors.

Pure Python over model/ (no streamlit, no plotly).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from labels import units
from model.config import ModelConfig
from model.generate import generate_step, kv_cache_bytes_per_token
from model.transformer import Transformer

DTYPES = {"fp32": 4, "fp16 / bf16": 2, "int8": 1}  # bytes per cached number
ENGINE_DTYPE = "fp32"  # what the engine here stores (float32)


@dataclass(frozen=True)
class KVShape:
    """What the KV cache of a decoder depends on: layers, query heads, K/V heads, head width."""

    name: str
    n_layers: int
    n_heads: int  # query heads
    n_kv_heads: int  # K/V heads the model itself has (= n_heads: MHA; 1: MQA; in between: GQA)
    d_head: int  # d_k = d_v
    local_layers: int = 0  # of n_layers, those with a sliding window of their own (Gemma 3: 15 of 18)
    local_window: int | None = None  # their window: a local layer's cache stops growing at it (Gemma 3: 512)

    def check(self) -> None:
        """ValueError saying what to fix (the page shows it) unless the shape is a valid model."""
        for what, v in (("layers", self.n_layers), ("query heads", self.n_heads),
                        ("K/V heads", self.n_kv_heads), ("head width d_head", self.d_head)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{what} must be a positive whole number, got {v!r}")
        if self.local_layers and not (0 < self.local_layers <= self.n_layers and self.local_window
                                      and self.local_window >= 1):
            raise ValueError(f"local layers must be between 1 and the {self.n_layers} layers and have a window")
        if self.n_heads % self.n_kv_heads:
            ok = [h for h in range(1, self.n_heads + 1) if self.n_heads % h == 0]
            raise ValueError(f"{self.n_heads} query heads cannot be shared evenly by {self.n_kv_heads} K/V heads; "
                             f"choose K/V heads from {ok}")


PRESETS = {
    "GPT-2 small": KVShape("GPT-2 small", n_layers=12, n_heads=12, n_kv_heads=12, d_head=64),
    "SmolLM2-135M": KVShape("SmolLM2-135M", n_layers=30, n_heads=9, n_kv_heads=3, d_head=64),
    # 18 layers, 5 sliding-window layers (w = 512) for every global one; 4 query heads, 1 K/V head of 256
    "Gemma 3 270M": KVShape("Gemma 3 270M", n_layers=18, n_heads=4, n_kv_heads=1, d_head=256, local_layers=15,
                            local_window=512),
}


def shape_of(cfg: ModelConfig, name: str) -> KVShape:
    """The KV-cache shape of a model's config: its layers, heads, K/V heads, head width, and its
    sliding-window layers (cfg.layer_window) with their window."""
    local = [i for i in range(cfg.n_layers) if cfg.layer_window(i) is not None]
    return KVShape(name, cfg.n_layers, cfg.n_heads, cfg.kv_heads, cfg.d_k, local_layers=len(local),
                   local_window=cfg.window if local else None)


def kv_options(n_heads: int) -> list[int]:
    """K/V head counts a model with n_heads query heads can have: the divisors of n_heads
    (1 = MQA, n_heads = MHA, the rest GQA)."""
    return [h for h in range(1, n_heads + 1) if n_heads % h == 0]


def gqa_options(n_heads: int) -> list[int]:
    """The grouped K/V head counts: divisors of n_heads strictly between 1 (MQA) and n_heads (MHA)."""
    return [h for h in kv_options(n_heads) if 1 < h < n_heads]


def shape_config(shape: KVShape, n_kv_heads: int | None = None, *, max_len: int = 64) -> ModelConfig:
    """A ModelConfig with the shape's layers, heads and head width (vocabulary 8, d_ff 4, no
    position vectors: the cache does not depend on them). n_kv_heads None: the shape's own."""
    kv = shape.n_kv_heads if n_kv_heads is None else n_kv_heads
    return ModelConfig(vocab_size=8, d_model=shape.n_heads * shape.d_head, n_heads=shape.n_heads,
                       n_kv_heads=kv, n_layers=shape.n_layers, d_ff=4, max_len=max_len, pos_encoding="none")


def bytes_per_token(shape: KVShape, n_kv_heads: int | None = None, bytes_per_number: int = 4) -> int:
    """2 (K and V) × layers × K/V heads × d_head × bytes: model.generate.kv_cache_bytes_per_token."""
    return kv_cache_bytes_per_token(shape_config(shape, n_kv_heads), bytes_per_number)["gqa"]


@dataclass(frozen=True)
class CacheRow:
    """The KV cache of one variant for a context, one sequence."""
    variant: str  # e.g. "MHA (multi-head)", "sliding window w = 512 (3 K/V heads)"
    kv_heads: int  # K/V heads the variant keeps
    bytes_per_token: int  # 2 (K and V) × layers × kv_heads × d_head × bytes per number
    tokens_cached: int  # the context, or min(context, w) with a sliding window
    context_bytes: int  # bytes_per_token × tokens_cached
    share_of_mha: float  # context_bytes / the MHA row's context_bytes


def cache_table(shape: KVShape, context: int, bytes_per_number: int = 4, *, gqa_kv_heads: int | None = None,
                window: int | None = None) -> list[CacheRow]:
    """One row per variant: MHA (a K/V head per query head), GQA (gqa_kv_heads, default the
    shape's own when it is grouped, else the largest proper divisor), MQA (one K/V head), and a
    sliding window (the shape's own K/V heads, at most `window` tokens cached: Mistral's rolling
    buffer)."""
    shape.check()
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise ValueError(f"the context must be at least 1 token, got {context!r}")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"the window must be at least 1 token (1 = each token sees only itself), got {window!r}")
    H = shape.n_heads
    if gqa_kv_heads is None:
        proper = gqa_options(H)
        gqa_kv_heads = shape.n_kv_heads if 1 < shape.n_kv_heads < H else (proper[-1] if proper else H)
    if H % gqa_kv_heads:
        raise ValueError(f"GQA needs K/V heads that divide {H} query heads; choose from {kv_options(H)}")
    rows = [("MHA (multi-head)", H, context), (f"GQA ({H // gqa_kv_heads} query heads per K/V head)", gqa_kv_heads, context),
            ("MQA (multi-query)", 1, context)]
    if window is not None:
        rows.append((f"sliding window w = {window} ({shape.n_kv_heads} K/V heads)", shape.n_kv_heads, min(context, window)))
    mha_total = bytes_per_token(shape, H, bytes_per_number) * context
    out = []
    for name, kv, tokens in rows:
        per = bytes_per_token(shape, kv, bytes_per_number)
        out.append(CacheRow(variant=name, kv_heads=kv, bytes_per_token=per, tokens_cached=tokens,
                            context_bytes=per * tokens, share_of_mha=per * tokens / mha_total))
    if shape.local_layers:  # the model's own mix: local layers keep at most their window, global ones all
        per = bytes_per_token(shape, shape.n_kv_heads, bytes_per_number)  # every layer, per token
        per_layer = per // shape.n_layers
        n_glob, n_loc, w = shape.n_layers - shape.local_layers, shape.local_layers, shape.local_window
        total = per_layer * (n_glob * context + n_loc * min(context, w))
        out.append(CacheRow(variant=f"this model: {n_glob} global layers keep {context:,} tokens, {n_loc} local "
                                    f"layers at most w = {w:,}", kv_heads=shape.n_kv_heads, bytes_per_token=per,
                            tokens_cached=context, context_bytes=total, share_of_mha=total / mha_total))
    return out


def local_cache_bytes(shape: KVShape, context: int, bytes_per_number: int = 4) -> tuple[int, int]:
    """(one local layer's, one global layer's) cache bytes at `context` tokens: a local layer's stops
    growing at its window."""
    per_layer = bytes_per_token(shape, shape.n_kv_heads, bytes_per_number) // shape.n_layers
    w = shape.local_window or context
    return per_layer * min(context, w), per_layer * context


def human_bytes(n: float) -> str:
    """1,536 -> '1.5 KiB' (powers of 1024): the app's one convention, labels.units.human_bytes."""
    return units.human_bytes(n)


def engine_cache_bytes(shape: KVShape, n_kv_heads: int | None = None, n_tokens: int = 4) -> int:
    """Bytes of the engine's real KVCache (KVCache.nbytes, float32) after running n_tokens
    through a model of this shape: what bytes_per_token(...) × n_tokens must equal. The weights
    are zeros (allocated without a random fill: a GPT-2-sized stack in a fraction of a second);
    the cache's tensors, their shapes and dtype are the engine's own whatever the weights."""
    cfg = shape_config(shape, n_kv_heads, max_len=max(n_tokens, 1))
    with torch.device("meta"):
        model = Transformer(cfg, init=False)
    model = model.to_empty(device="cpu")
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    ids = torch.arange(n_tokens, dtype=torch.long)[None] % cfg.vocab_size  # (1, n_tokens)
    return generate_step(model, ids, record=False).cache.nbytes


@dataclass(frozen=True)
class EngineCheck:
    """The calculator against the engine's real cache, for one variant of a shape."""
    variant: str  # "MHA", "GQA" or "MQA"
    kv_heads: int
    tokens: int  # tokens run through the engine
    calculated: int  # bytes_per_token(shape, kv_heads, fp32) × tokens
    measured: int  # the engine's KVCache.nbytes after running them (engine_cache_bytes)

    @property
    def equal(self) -> bool:
        return self.measured == self.calculated


def engine_checks(shape: KVShape, gqa_kv_heads: int | None, n_tokens: int = 4,
                  measure: Callable[[KVShape, int, int], int] = engine_cache_bytes) -> list[EngineCheck]:
    """MHA, GQA (gqa_kv_heads; left out when None) and MQA of `shape`: the calculator's fp32 bytes
    for n_tokens beside what the engine's cache holds (measure(shape, kv_heads, n_tokens): a cached
    engine_cache_bytes on the page)."""
    out = []
    for name, kv in (("MHA", shape.n_heads), ("GQA", gqa_kv_heads), ("MQA", 1)):
        if kv is None:
            continue
        measured = measure(shape, kv, n_tokens)
        calculated = bytes_per_token(shape, kv, DTYPES[ENGINE_DTYPE]) * n_tokens
        out.append(EngineCheck(variant=name, kv_heads=kv, tokens=n_tokens, calculated=calculated, measured=measured))
    return out


def attention_parameters(shape: KVShape, n_kv_heads: int | None = None) -> int:
    """Attention weights of a model of this shape (what engine_cache_bytes must allocate)."""
    kv = shape.n_kv_heads if n_kv_heads is None else n_kv_heads
    D = shape.n_heads * shape.d_head
    return shape.n_layers * (2 * D * D + 2 * D * kv * shape.d_head)
