"""Mistral: a Llama-style decoder whose every layer attends within a sliding window
(sliding_window: query i sees keys i - window < j <= i; model.layers.SlidingWindow with the
causal mask). Mistral's GGUF files use llama.cpp's "llama" architecture (model.families.llama).
"""
from __future__ import annotations

from ..config import ModelConfig
from .common import Family, decoder_converter, layer_windows, need_int
from .llama import decoder_config


def config(hf: dict, names: frozenset, what: str) -> ModelConfig:
    """ModelConfig of a MistralForCausalLM config.json."""
    window, window_layers = layer_windows(hf, need_int(hf, "num_hidden_layers", what), what)
    return decoder_config(hf, names, what, family="mistral", tied_default=False, window=window,
                          window_layers=window_layers)


FAMILY = Family(
    name="mistral", title="Mistral",
    model_types=("mistral",), architectures=("MistralForCausalLM", "MistralModel"),
    config=config, convert=decoder_converter(),
    notes=("sliding-window attention", "RMSNorm", "rotary positions", "grouped-query attention", "SwiGLU"),
)
