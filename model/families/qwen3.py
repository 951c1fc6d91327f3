"""Qwen3: a Llama-style decoder with an RMSNorm over each head's query and key (before the
rotation) and a head width of its own (head_dim, often not d_model / heads).

Numeric details: q_norm / k_norm (model.layers.QKNorm, a hook at the qk point ahead of the
rotation), d_head, attention_bias (no biases by default), windows as Qwen2. GGUF "qwen3": its
attn_q_norm / attn_k_norm tensors; W_Q / W_K in HF's layout (nothing un-permuted).
"""
from __future__ import annotations

from ..config import ModelConfig
from .common import Family, decoder_converter, refuse_unless
from .llama import decoder_config, gguf_decoder_config
from .qwen2 import gguf_convert, qwen_windows


def config(hf: dict, names: frozenset, what: str) -> ModelConfig:
    """ModelConfig of a Qwen3ForCausalLM config.json."""
    window, window_layers = qwen_windows(hf, what)
    return decoder_config(hf, names, what, family="qwen3", tied_default=False, qk_norm=True,
                          window=window, window_layers=window_layers)


def gguf_config(meta: dict, names: frozenset, what: str) -> ModelConfig:
    arch = meta.get("general.architecture")
    refuse_unless(arch == "qwen3", what, f"architecture {arch!r}; this importer reads 'qwen3'")
    bias = any(n.endswith("attn_q.bias") for n in names)
    return gguf_decoder_config(meta, names, what, "qwen3", family="qwen3", qk_norm=True, qkv_bias=bias,
                               out_bias=any(n.endswith("attn_output.bias") for n in names))


FAMILY = Family(
    name="qwen3", title="Qwen3",
    model_types=("qwen3",), architectures=("Qwen3ForCausalLM", "Qwen3Model"),
    config=config, convert=decoder_converter(),
    gguf_architectures=("qwen3",), gguf_config=gguf_config, gguf_convert=gguf_convert,
    notes=("RMSNorm on each head's q and k", "head_dim of its own", "rotary positions",
           "grouped-query attention", "SwiGLU"),
)
