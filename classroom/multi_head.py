"""Multi-head mechanics: every matrix's shape, the parameter counts, the presets side by side.
Pure numpy/torch over the engine (never streamlit, plotly or ui/); every number on the page is
computed here, one hop from the page."""
from __future__ import annotations

from typing import Sequence

from model.config import ModelConfig, param_breakdown, param_count
from model.generate import kv_cache_bytes_per_token


def shape_rows(cfg: ModelConfig, T: int) -> list[dict]:
    """The dimension table of one multi-head attention layer for a T-token input. With a value
    width d_v different from d_k (cfg.d_v) the rows of K and V part: K_j is T × d_k, V_j and Z_j
    are T × d_v."""
    D, H, dk, dv = cfg.d_model, cfg.n_heads, cfg.d_k, cfg.d_value
    HV = H * dv
    if dv == dk:
        heads = [{"step": "Q_j, K_j, V_j (one head)", "shape": f"{T} × {dk}", "formula": f"T × d_k, d_k = d_model / h = {D} / {H}"}]
        wv = []
        z_formula, concat_formula = "T × d_v (d_v = d_k)", "T × h·d_v = T × d_model"
    else:
        heads = [{"step": "Q_j, K_j (one head)", "shape": f"{T} × {dk}", "formula": f"T × d_k, d_k = d_model / h = {D} / {H}"},
                 {"step": "V_j (one head)", "shape": f"{T} × {dv}", "formula": f"T × d_v, d_v = {dv} (≠ d_k)"}]
        wv = [{"step": "W_V (d_v ≠ d_k)", "shape": f"{D} × {HV}", "formula": "d_model × h·d_v"}]
        z_formula, concat_formula = f"T × d_v (d_v = {dv} ≠ d_k = {dk})", f"T × h·d_v = T × {H}·{dv}"
    return [
        {"step": "input X (token embedding + position)", "shape": f"{T} × {D}", "formula": "T × d_model"},
        {"step": "W_Q, W_K, W_V (each)" if dv == dk else "W_Q, W_K (each)", "shape": f"{D} × {D}",
         "formula": "d_model × d_model = h blocks of d_model × d_k"},
        *wv,
        {"step": "Q = X W_Q (all heads)", "shape": f"{T} × {D}", "formula": "T × d_model"},
        *heads,
        {"step": "scores Q_j K_jᵀ (one head)", "shape": f"{T} × {T}", "formula": "T × T"},
        {"step": "weights softmax(scores / √d_k)", "shape": f"{T} × {T}", "formula": "T × T, rows sum to 1"},
        {"step": "Z_j = weights V_j (one head)", "shape": f"{T} × {dv}", "formula": z_formula},
        {"step": "concat(Z_1 … Z_h)", "shape": f"{T} × {HV}", "formula": concat_formula},
        {"step": "W_O", "shape": f"{HV} × {D}", "formula": "h·d_v × d_model"},
        {"step": "output concat · W_O", "shape": f"{T} × {D}", "formula": "T × d_model"},
    ]


PART_FORMULAS = {
    "token_embedding": "V × d_model",
    "position_embedding": "max_len × d_model (learned only; sinusoidal has none)",
    "attention": "L × 4 (d_model² + d_model)  [W_Q, W_K, W_V, W_O + biases]",
    "ffn": "L × (2 d_model d_ff + d_ff + d_model)",
    "layer_norm": "L × 2 × 2 d_model (+ 2 d_model final LN)",
    "output": "0 when tied to the embedding, else V × d_model",
}


def param_rows(cfg: ModelConfig) -> list[dict]:
    """Parameter count per part (model.config.param_breakdown) with formula and share."""
    parts = param_breakdown(cfg)
    total = param_count(cfg)
    formulas = dict(PART_FORMULAS)
    if cfg.d_value != cfg.d_k:  # W_V is d_model × h·d_v and W_O h·d_v × d_model
        formulas["attention"] = "L × (2 (d_model² + d_model) + 2 d_model·h·d_v + h·d_v + d_model)"
    return [{"part": k, "parameters": int(v), "formula": formulas.get(k, ""),
             "share %": 100.0 * v / total if total else 0.0} for k, v in parts.items()]


def preset_rows(cfg: ModelConfig) -> list[dict]:
    """A config's headline shapes as rows (used for the GPT-2 small preset)."""
    return [
        {"quantity": "vocabulary V", "value": cfg.vocab_size},
        {"quantity": "context length (max_len)", "value": cfg.max_len},
        {"quantity": "d_model", "value": cfg.d_model},
        {"quantity": "heads h", "value": cfg.n_heads},
        {"quantity": "d_k = d_model / h", "value": cfg.d_k},
        {"quantity": "layers", "value": cfg.n_layers},
        {"quantity": "d_ff", "value": cfg.d_ff},
        {"quantity": "embedding matrix", "value": f"{cfg.vocab_size} × {cfg.d_model}"},
        {"quantity": "positions", "value": cfg.pos_encoding},
        {"quantity": "norm placement", "value": f"{cfg.norm}-LN" + (" + final LN" if cfg.final_norm else "")},
        {"quantity": "parameters", "value": f"{param_count(cfg):,}"},
    ]


# --------------------------------------------------------------------------------------------
# Grouped-query attention in numbers (issue 18 point 4): which query heads share each K/V head,
# and what sharing saves in K/V parameters and in the KV cache. Pure Python over model/.
# --------------------------------------------------------------------------------------------

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
