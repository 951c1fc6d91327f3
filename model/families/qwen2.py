"""Qwen2 / Qwen2.5: a Llama-style decoder with biases on W_Q, W_K, W_V (none on W_O or the MLP).

Numeric details: as Llama (RMSNorm, rotary positions, grouped-query attention, SwiGLU), plus
qkv_bias. A sliding window on the layers from max_window_layers on when use_sliding_window is set
(or as config.json's layer_types say). GGUF "qwen2": llama.cpp keeps W_Q / W_K in HF's layout
(its rotation for this architecture is NeoX-style, rotate_half), so nothing is un-permuted.
"""
from __future__ import annotations

from torch import Tensor

from ..config import ModelConfig
from .common import Family, decoder_converter, gguf_name, layer_windows, need_int, refuse_unless
from .llama import decoder_config, gguf_decoder_config


def qwen_windows(hf: dict, what: str) -> tuple[int | None, tuple[int, ...] | None]:
    """Qwen2/Qwen3's sliding window: config.json's layer_types, else the layers from
    max_window_layers on when use_sliding_window is set (transformers' rule)."""
    L = need_int(hf, "num_hidden_layers", what)
    hf = dict(hf)
    if not hf.get("use_sliding_window", False) and not hf.get("layer_types"):
        hf["sliding_window"] = None
    default = None
    if hf.get("sliding_window") is not None and not hf.get("layer_types"):
        start = int(hf.get("max_window_layers", 28))
        default = ["sliding_attention" if i >= start else "full_attention" for i in range(L)]
    return layer_windows(hf, L, what, default_types=default)


def config(hf: dict, names: frozenset, what: str) -> ModelConfig:
    """ModelConfig of a Qwen2ForCausalLM config.json."""
    window, window_layers = qwen_windows(hf, what)
    return decoder_config(hf, names, what, family="qwen2", tied_default=False, qkv_bias=True,
                          out_bias=False, window=window, window_layers=window_layers)


def gguf_config(meta: dict, names: frozenset, what: str) -> ModelConfig:
    arch = meta.get("general.architecture")
    refuse_unless(arch == "qwen2", what, f"architecture {arch!r}; this importer reads 'qwen2'")
    return gguf_decoder_config(meta, names, what, "qwen2", family="qwen2", qkv_bias=True, out_bias=False)


def gguf_convert(name: str, t: Tensor, cfg: ModelConfig) -> dict[str, Tensor]:
    ours = gguf_name(name)
    if ours == "lm_head.weight" and cfg.tie_weights:
        return {}
    return {ours: t}


FAMILY = Family(
    name="qwen2", title="Qwen2 / Qwen2.5",
    model_types=("qwen2",), architectures=("Qwen2ForCausalLM", "Qwen2Model"),
    config=config, convert=decoder_converter(),
    gguf_architectures=("qwen2",), gguf_config=gguf_config, gguf_convert=gguf_convert,
    notes=("biases on W_Q, W_K, W_V", "RMSNorm", "rotary positions", "grouped-query attention", "SwiGLU"),
)
