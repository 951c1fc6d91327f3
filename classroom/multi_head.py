"""Multi-head mechanics: every matrix's shape, the parameter counts, the presets side by side.
Pure numpy/torch over the engine (never streamlit, plotly or ui/); every number on the page is
computed here, one hop from the page."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from model.config import ModelConfig, param_breakdown, param_count
from model.generate import kv_cache_bytes_per_token

from .architecture import describe, param_formulas


@dataclass(frozen=True)
class ShapeRow:
    """One row of the dimension table of a multi-head attention layer."""
    step: str  # the matrix or step, e.g. "Q = X W_Q (all heads)"
    shape: str  # its shape for this input, e.g. "12 × 64"
    formula: str  # the same in symbols, e.g. "T × d_model"
    bias: str = ""  # weight matrices: "+ bias (64)" or "no bias"; "" for the other rows


def shape_rows(cfg: ModelConfig, T: int) -> list[ShapeRow]:
    """The dimension table of one multi-head attention layer for a T-token input, from the config
    (classroom.architecture.describe): W_K and W_V are d_model × h_kv·d_k with grouped-query
    attention; V_j and Z_j are T × d_v when the value width differs from d_k; "+ b" only where the
    model has biases; what X is depends on how the model adds positions."""
    a = describe(cfg)
    D, H, dk, dv, kv = a.d_model, a.n_heads, a.d_k, a.d_v, a.kv_heads
    HV = H * dv

    def b(m) -> str:
        return f"+ bias ({m.cols})" if m.bias else "no bias"

    same = a.w_q.shape == a.w_k.shape == a.w_v.shape
    if same:
        weights = [ShapeRow("W_Q, W_K, W_V (each)", a.w_q.shape, f"{a.w_q.formula} = h blocks of d_model × d_k", b(a.w_q))]
    elif a.w_k.shape == a.w_v.shape:
        weights = [ShapeRow("W_Q", a.w_q.shape, f"{a.w_q.formula} = h blocks of d_model × d_k", b(a.w_q)),
                   ShapeRow("W_K, W_V (each)", a.w_k.shape,
                            f"{a.w_k.formula} = {kv} K/V heads × d_k" if a.gqa else a.w_k.formula, b(a.w_k))]
    else:
        weights = [ShapeRow("W_Q, W_K (each)" if a.w_q.shape == a.w_k.shape else "W_Q",
                            a.w_q.shape, f"{a.w_q.formula} = h blocks of d_model × d_k", b(a.w_q))]
        if a.w_q.shape != a.w_k.shape:
            weights.append(ShapeRow("W_K", a.w_k.shape, a.w_k.formula, b(a.w_k)))
        weights.append(ShapeRow("W_V (d_v ≠ d_k)" if dv != dk else "W_V", a.w_v.shape, a.w_v.formula, b(a.w_v)))
    proj = [ShapeRow("Q = X W_Q (all heads)", f"{T} × {H * dk}", "T × h·d_k" + (" = T × d_model" if H * dk == D else ""))]
    if a.gqa:
        proj.append(ShapeRow("K = X W_K, V = X W_V (all K/V heads)", f"{T} × {kv * dk}" if dv == dk
                             else f"{T} × {kv * dk}, {T} × {kv * dv}", "T × h_kv·d_k (each K/V head serves "
                             f"{H // kv} query heads)"))
    dk_formula = f"T × d_k, d_k = d_model / h = {D} / {H}" if H * dk == D else f"T × d_k, d_k = {dk}"
    if dv == dk:
        heads = [ShapeRow("Q_j, K_j, V_j (one head)", f"{T} × {dk}", dk_formula)]
        z_formula = "T × d_v (d_v = d_k)"
        concat_formula = "T × h·d_v = T × d_model" if HV == D else "T × h·d_v"
    else:
        heads = [ShapeRow("Q_j, K_j (one head)", f"{T} × {dk}", dk_formula),
                 ShapeRow("V_j (one head)", f"{T} × {dv}", f"T × d_v, d_v = {dv} (≠ d_k)")]
        z_formula, concat_formula = f"T × d_v (d_v = {dv} ≠ d_k = {dk})", f"T × h·d_v = T × {H}·{dv}"
    weights_step = "weights softmax(scores / √d_k)" if cfg.scale_scores else "weights softmax(scores) (no scaling)"
    return [
        ShapeRow(f"input X ({a.positions.input_short})", f"{T} × {D}", "T × d_model"),
        *weights,
        *proj,
        *heads,
        ShapeRow("scores Q_j K_jᵀ (one head)", f"{T} × {T}", "T × T"),
        ShapeRow(weights_step, f"{T} × {T}", "T × T, rows sum to 1"),
        ShapeRow("Z_j = weights V_j (one head)", f"{T} × {dv}", z_formula),
        ShapeRow("concat(Z_1 … Z_h)", f"{T} × {HV}", concat_formula),
        ShapeRow("W_O", a.w_o.shape, a.w_o.formula, b(a.w_o)),
        ShapeRow(f"output {a.output_formula}", f"{T} × {D}", "T × d_model"),
    ]


@dataclass(frozen=True)
class ParamRow:
    """The parameters of one part of a model (model.config.param_breakdown)."""
    part: str  # "token_embedding", "position_embedding", "attention", "ffn", "layer_norm", "output"
    parameters: int  # how many
    formula: str  # the count in symbols for this config (classroom.architecture.param_formulas)
    share_pct: float  # percent of the whole model (0 … 100)


def param_rows(cfg: ModelConfig) -> list[ParamRow]:
    """Parameter count per part (model.config.param_breakdown) with this config's formula
    (classroom.architecture.param_formulas: GQA, SwiGLU, RMSNorm, biases as the config has them)
    and its share."""
    parts = param_breakdown(cfg)
    total = param_count(cfg)
    formulas = {f.part: f for f in param_formulas(cfg)}
    return [ParamRow(part=k, parameters=int(v), formula=formulas[k].formula,
                     share_pct=100.0 * v / total if total else 0.0) for k, v in parts.items()]


@dataclass(frozen=True)
class PresetRow:
    """One headline number of a config."""
    quantity: str  # e.g. "d_model"
    value: int | str  # e.g. 768, or "50257 × 768"


def preset_rows(cfg: ModelConfig) -> list[PresetRow]:
    """A config's headline shapes as rows (used for the GPT-2 small preset)."""
    a = describe(cfg)
    rows = [
        PresetRow("vocabulary V", cfg.vocab_size),
        PresetRow("context length (max_len)", cfg.max_len),
        PresetRow("d_model", cfg.d_model),
        PresetRow("heads h", cfg.n_heads),
    ]
    if a.gqa:
        rows.append(PresetRow("K/V heads h_kv", a.kv_heads))
    rows += [
        PresetRow("d_k = d_model / h" if cfg.n_heads * cfg.d_k == cfg.d_model else "d_k", cfg.d_k),
        PresetRow("layers", cfg.n_layers),
        PresetRow("d_ff", cfg.d_ff),
        PresetRow("embedding matrix", f"{cfg.vocab_size} × {cfg.d_model}"),
        PresetRow("positions", a.positions.name),
        PresetRow("norm placement", a.norm.short + (f" + final {a.norm.name}" if a.norm.final else "")),
        PresetRow("FFN activation", a.activation.name),
        PresetRow("biases", a.biases),
        PresetRow("parameters", f"{param_count(cfg):,}"),
    ]
    return rows


# --------------------------------------------------------------------------------------------
def width_note(cfg) -> str | None:
    """When the heads are not slices of d_model (h·d_k ≠ d_model: Qwen3, Gemma 3), say so with the
    model's numbers; None otherwise."""
    H, dk, D = cfg.n_heads, cfg.d_k, cfg.d_model
    if H * dk == D:
        return None
    return (f"Here h × d_k = {H} × {dk} = {H * dk:,} ≠ d_model = {D:,}: the heads are not slices of d_model. "
            f"W_Q maps each token's {D:,} numbers to {H * dk:,} ({H} heads of {dk}), and W_O maps the "
            f"{H * cfg.d_value:,} concatenated head outputs back to {D:,}.")


def sharing_sentence(cfg) -> str:
    """Grouped- or multi-query attention in words, with the model's numbers."""
    H, kv, dk = cfg.n_heads, cfg.kv_heads, cfg.d_k
    if kv == 1:
        return (f"This model has **{H} query heads sharing 1 key/value head** of width {dk} (multi-query "
                f"attention): Q is T × {H} × {dk}, K and V are T × 1 × {dk}. ")
    return (f"This model has **{H} query heads but only {kv} key/value heads**: Q is T × {H} × {dk}, "
            f"K and V are T × {kv} × {dk}. Each K/V head serves {H // kv} query heads, ")


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
