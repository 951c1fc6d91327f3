"""Multi-head mechanics: every matrix's shape, the parameter counts, the presets side by side.
Pure numpy/torch over the engine (never streamlit, plotly or ui/); every number on the page is
computed here, one hop from the page."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from model.config import ModelConfig, param_breakdown, param_count
from model.generate import kv_cache_bytes_per_token


@dataclass(frozen=True)
class ShapeRow:
    """One row of the dimension table of a multi-head attention layer."""
    step: str  # the matrix or step, e.g. "Q = X W_Q (all heads)"
    shape: str  # its shape for this input, e.g. "12 × 64"
    formula: str  # the same in symbols, e.g. "T × d_model"


def shape_rows(cfg: ModelConfig, T: int) -> list[ShapeRow]:
    """The dimension table of one multi-head attention layer for a T-token input. With a value
    width d_v different from d_k (cfg.d_v) the rows of K and V part: K_j is T × d_k, V_j and Z_j
    are T × d_v."""
    D, H, dk, dv = cfg.d_model, cfg.n_heads, cfg.d_k, cfg.d_value
    HV = H * dv
    if dv == dk:
        heads = [ShapeRow("Q_j, K_j, V_j (one head)", f"{T} × {dk}", f"T × d_k, d_k = d_model / h = {D} / {H}")]
        wv = []
        z_formula, concat_formula = "T × d_v (d_v = d_k)", "T × h·d_v = T × d_model"
    else:
        heads = [ShapeRow("Q_j, K_j (one head)", f"{T} × {dk}", f"T × d_k, d_k = d_model / h = {D} / {H}"),
                 ShapeRow("V_j (one head)", f"{T} × {dv}", f"T × d_v, d_v = {dv} (≠ d_k)")]
        wv = [ShapeRow("W_V (d_v ≠ d_k)", f"{D} × {HV}", "d_model × h·d_v")]
        z_formula, concat_formula = f"T × d_v (d_v = {dv} ≠ d_k = {dk})", f"T × h·d_v = T × {H}·{dv}"
    return [
        ShapeRow("input X (token embedding + position)", f"{T} × {D}", "T × d_model"),
        ShapeRow("W_Q, W_K, W_V (each)" if dv == dk else "W_Q, W_K (each)", f"{D} × {D}",
                 "d_model × d_model = h blocks of d_model × d_k"),
        *wv,
        ShapeRow("Q = X W_Q (all heads)", f"{T} × {D}", "T × d_model"),
        *heads,
        ShapeRow("scores Q_j K_jᵀ (one head)", f"{T} × {T}", "T × T"),
        ShapeRow("weights softmax(scores / √d_k)", f"{T} × {T}", "T × T, rows sum to 1"),
        ShapeRow("Z_j = weights V_j (one head)", f"{T} × {dv}", z_formula),
        ShapeRow("concat(Z_1 … Z_h)", f"{T} × {HV}", concat_formula),
        ShapeRow("W_O", f"{HV} × {D}", "h·d_v × d_model"),
        ShapeRow("output concat · W_O", f"{T} × {D}", "T × d_model"),
    ]


PART_FORMULAS = {
    "token_embedding": "V × d_model",
    "position_embedding": "max_len × d_model (learned only; sinusoidal has none)",
    "attention": "L × 4 (d_model² + d_model)  [W_Q, W_K, W_V, W_O + biases]",
    "ffn": "L × (2 d_model d_ff + d_ff + d_model)",
    "layer_norm": "L × 2 × 2 d_model (+ 2 d_model final LN)",
    "output": "0 when tied to the embedding, else V × d_model",
}


@dataclass(frozen=True)
class ParamRow:
    """The parameters of one part of a model (model.config.param_breakdown)."""
    part: str  # "token_embedding", "position_embedding", "attention", "ffn", "layer_norm", "output"
    parameters: int  # how many
    formula: str  # the count in symbols, e.g. "V × d_model"
    share_pct: float  # percent of the whole model (0 … 100)


def param_rows(cfg: ModelConfig) -> list[ParamRow]:
    """Parameter count per part (model.config.param_breakdown) with formula and share."""
    parts = param_breakdown(cfg)
    total = param_count(cfg)
    formulas = dict(PART_FORMULAS)
    if cfg.d_value != cfg.d_k:  # W_V is d_model × h·d_v and W_O h·d_v × d_model
        formulas["attention"] = "L × (2 (d_model² + d_model) + 2 d_model·h·d_v + h·d_v + d_model)"
    return [ParamRow(part=k, parameters=int(v), formula=formulas.get(k, ""),
                     share_pct=100.0 * v / total if total else 0.0) for k, v in parts.items()]


@dataclass(frozen=True)
class PresetRow:
    """One headline number of a config."""
    quantity: str  # e.g. "d_model"
    value: int | str  # e.g. 768, or "50257 × 768"


def preset_rows(cfg: ModelConfig) -> list[PresetRow]:
    """A config's headline shapes as rows (used for the GPT-2 small preset)."""
    return [
        PresetRow("vocabulary V", cfg.vocab_size),
        PresetRow("context length (max_len)", cfg.max_len),
        PresetRow("d_model", cfg.d_model),
        PresetRow("heads h", cfg.n_heads),
        PresetRow("d_k = d_model / h", cfg.d_k),
        PresetRow("layers", cfg.n_layers),
        PresetRow("d_ff", cfg.d_ff),
        PresetRow("embedding matrix", f"{cfg.vocab_size} × {cfg.d_model}"),
        PresetRow("positions", cfg.pos_encoding),
        PresetRow("norm placement", f"{cfg.norm}-LN" + (" + final LN" if cfg.final_norm else "")),
        PresetRow("parameters", f"{param_count(cfg):,}"),
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


@dataclass(frozen=True)
class KVSavingsRow:
    """K/V sizes of one variant: this model's K/V heads, or full multi-head (one per query head)."""
    variant: str  # "this model" or "full multi-head"
    kv_heads: int  # K/V heads per layer
    kv_params: int  # K and V projection parameters, all layers, no biases
    cache_bytes_per_token: int  # KV cache per token at float32
    context: int  # the context length of cache_mb
    cache_mb: float  # KV cache for `context` tokens, MB (1e6 bytes)

    @property
    def cache_bytes(self) -> int:
        """KV cache for `context` tokens, bytes (the page writes it with labels.units.human_bytes)."""
        return self.cache_bytes_per_token * self.context


def savings(cfg: ModelConfig, context: int = 2048) -> list[KVSavingsRow]:
    """Rows comparing this model's K/V heads with full multi-head attention (one K/V head per
    query head): K and V projection parameters (all layers, no biases counted), and KV-cache bytes
    per token and for `context` tokens at float32 (2 × layers × kv_heads × d_head × 4 B per token)."""
    D, L = cfg.d_model, cfg.n_layers
    d_v = cfg.d_value
    cache = kv_cache_bytes_per_token(cfg)  # {"gqa": this model, "mha": one K/V head per query head}

    def row(variant: str, heads: int, per_tok: int) -> KVSavingsRow:
        return KVSavingsRow(variant=variant, kv_heads=heads, kv_params=L * D * heads * (cfg.d_k + d_v),
                            cache_bytes_per_token=per_tok, context=context, cache_mb=per_tok * context / 1e6)

    return [row("this model", cfg.kv_heads, cache["gqa"]), row("full multi-head", cfg.n_heads, cache["mha"])]
