"""Grouped-query attention in numbers (issue 18 point 4): which query heads share each K/V head,
and what sharing saves in K/V parameters and in the KV cache. Pure Python over model/."""
from __future__ import annotations

from typing import Sequence

from model.config import ModelConfig
from model.generate import kv_cache_bytes_per_token


def groups(kv_head: Sequence[int]) -> dict[int, list[int]]:
    """{K/V head: [query heads reading it]} from the trace's kv_head (H,)."""
    out: dict[int, list[int]] = {}
    for q, kv in enumerate(kv_head):
        out.setdefault(int(kv), []).append(q)
    return out


def savings(cfg: ModelConfig, context: int = 2048) -> list[dict]:
    """Rows comparing this model's K/V heads with full multi-head attention (one K/V head per
    query head): K and V projection parameters (all layers, no biases counted), and KV-cache bytes
    per token and for `context` tokens at float32 (2 × layers × kv_heads × d_head × 4 B per token)."""
    D, L = cfg.d_model, cfg.n_layers
    d_v = cfg.d_value
    kv_params = {"this model": L * D * cfg.kv_heads * (cfg.d_k + d_v), "full multi-head": L * D * cfg.n_heads * (cfg.d_k + d_v)}
    cache = kv_cache_bytes_per_token(cfg)  # {"gqa": this model, "mha": one K/V head per query head}
    rows = []
    for name, params, per_tok, heads in (("this model", kv_params["this model"], cache["gqa"], cfg.kv_heads),
                                         ("full multi-head", kv_params["full multi-head"], cache["mha"], cfg.n_heads)):
        rows.append({"K/V heads per layer": heads, "variant": name, "K and V projection parameters": params,
                     "KV cache per token (bytes)": per_tok, f"KV cache for {context:,} tokens (MB)": per_tok * context / 1e6})
    return rows
