"""The KV-cache page's helpers (classroom/kv_cache.py): the engine's measured cache, cached, and the
page's two tables built from the typed rows."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from classroom import kv_cache


@st.cache_data(max_entries=32, show_spinner="Building the model's layers and running it to read its KV cache…")
def engine_cache_bytes(shape: kv_cache.KVShape, n_kv_heads: int, n_tokens: int) -> int:
    """kv_cache.engine_cache_bytes (cached: a GPT-2-sized stack takes about a second to build)."""
    return kv_cache.engine_cache_bytes(shape, n_kv_heads, n_tokens)


def engine_checks(shape: kv_cache.KVShape, gqa_kv_heads: int | None, n_tokens: int = 4) -> list[kv_cache.EngineCheck]:
    """kv_cache.engine_checks with the cached measurement."""
    return kv_cache.engine_checks(shape, gqa_kv_heads, n_tokens, measure=engine_cache_bytes)


def cache_frame(rows: list[kv_cache.CacheRow], readable: bool = False) -> pd.DataFrame:
    """The calculator's table, one row per variant; readable=True writes the context's bytes as
    text ("43.9 MiB") for the screen."""
    total = [kv_cache.human_bytes(r.context_bytes) if readable else r.context_bytes for r in rows]
    return pd.DataFrame({"variant": [r.variant for r in rows], "K/V heads": [r.kv_heads for r in rows],
                         "bytes per token": [r.bytes_per_token for r in rows],
                         "tokens cached": [r.tokens_cached for r in rows], "bytes for the context": total,
                         "share of MHA": [r.share_of_mha for r in rows]}).set_index("variant")


def engine_check_frame(checks: list[kv_cache.EngineCheck]) -> pd.DataFrame:
    """The check against the engine, one row per variant."""
    return pd.DataFrame({"variant": [c.variant for c in checks], "K/V heads": [c.kv_heads for c in checks],
                         "tokens run": [c.tokens for c in checks], "calculator (fp32)": [c.calculated for c in checks],
                         "engine KVCache.nbytes": [c.measured for c in checks],
                         "equal": ["yes" if c.equal else "NO" for c in checks]}).set_index("variant")
