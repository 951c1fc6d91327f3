"""Gemma 2: a decoder with Gemma's own numeric details, each an option of the one Transformer.

  - the token embeddings times sqrt(d_model) before block 0 (emb_scale; a float32 factor);
  - RMSNorm scaling by (1 + w) (norm_unit_offset), and four norms per block (sandwich_norm: one
    before and one after each sublayer, the latter before the residual add);
  - GeGLU: gelu_tanh(x W_gate) * (x W_up) (activation "geglu");
  - head_dim of its own, scores scaled by query_pre_attn_scalar^-0.5 (attn_scale);
  - attention soft-capping cap·tanh(s / cap) before the mask (attn_softcap, the SoftCap hook);
  - local (sliding-window) and global layers alternating (window, window_layers: layer_types,
    or layers 0, 2, 4, ... local);
  - the logits soft-capped (final_softcap), the output matrix tied to the embedding.

GGUF "gemma2": llama.cpp stores every norm weight as 1 + w; gguf_convert subtracts 1 (as
transformers does) and the model adds it back. The softcaps come from the metadata
(gemma2.attn_logit_softcapping, final_logit_softcapping); the query scale is llama.cpp's rule:
1/sqrt(head_dim), or 1/sqrt(d_model / heads) for the 27B model (46 layers).
"""
from __future__ import annotations

from torch import Tensor

from ..config import ModelConfig
from .common import (GGUF_LAYER, LLAMA_LAYER, Family, decoder_converter, gguf_name, layer_windows,
                     meta_get, need_int, refuse_unless)
from .llama import decoder_config, gguf_decoder_config

GEMMA2_LAYER = {**LLAMA_LAYER, "post_attention_layernorm": "ln1_post", "pre_feedforward_layernorm": "ln2",
                "post_feedforward_layernorm": "ln2_post"}
GGUF_GEMMA2_LAYER = {**GGUF_LAYER, "post_attention_norm": "ln1_post", "post_ffw_norm": "ln2_post"}
TANH_GELU = ("gelu_pytorch_tanh", "gelu_new", "gelu_tanh")


def config(hf: dict, names: frozenset, what: str) -> ModelConfig:
    """ModelConfig of a Gemma2ForCausalLM config.json."""
    act = hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh"
    refuse_unless(act in TANH_GELU, what, f"hidden_activation {act!r}: Gemma 2's MLP is GeGLU with "
                  "GELU's tanh approximation ('gelu_pytorch_tanh')")
    refuse_unless(not hf.get("use_bidirectional_attention"), what,
                  "use_bidirectional_attention (an embedding variant) is not supported")
    L = need_int(hf, "num_hidden_layers", what)
    D = need_int(hf, "hidden_size", what)
    default = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(L)]
    window, window_layers = layer_windows(hf, L, what, default_types=default)
    head_dim = int(hf.get("head_dim") or D // need_int(hf, "num_attention_heads", what))
    scalar = float(hf.get("query_pre_attn_scalar") or head_dim)
    return decoder_config(hf, names, what, family="gemma2", tied_default=True, activation="geglu",
                          window=window, window_layers=window_layers, attn_scale=scalar ** -0.5,
                          attn_softcap=hf.get("attn_logit_softcapping"),
                          final_softcap=hf.get("final_logit_softcapping"), emb_scale=D ** 0.5,
                          norm_unit_offset=True, sandwich_norm=True)


def gguf_config(meta: dict, names: frozenset, what: str) -> ModelConfig:
    arch = meta.get("general.architecture")
    refuse_unless(arch == "gemma2", what, f"architecture {arch!r}; this importer reads 'gemma2'")
    D = int(meta_get(meta, arch, "embedding_length", what, required=True))
    H = int(meta_get(meta, arch, "attention.head_count", what, required=True))
    L = int(meta_get(meta, arch, "block_count", what, required=True))
    head_dim = int(meta_get(meta, arch, "attention.key_length", what, 0) or D // H)
    scalar = D // H if L == 46 else head_dim  # llama.cpp: the 27B model scales by d_model / heads
    window = meta_get(meta, arch, "attention.sliding_window", what)
    return gguf_decoder_config(
        meta, names, what, arch, family="gemma2", activation="geglu",
        window=None if window is None else int(window),
        window_layers=None if window is None else tuple(range(0, L, 2)),
        attn_scale=float(scalar) ** -0.5,
        attn_softcap=meta_get(meta, arch, "attn_logit_softcapping", what),
        final_softcap=meta_get(meta, arch, "final_logit_softcapping", what),
        emb_scale=D ** 0.5, norm_unit_offset=True, sandwich_norm=True)


def gguf_convert(name: str, t: Tensor, cfg: ModelConfig) -> dict[str, Tensor]:
    """A gemma2 GGUF tensor in our terms: norm weights stored as 1 + w get w back (- 1, float32)."""
    ours = gguf_name(name, GGUF_GEMMA2_LAYER)
    if name.endswith("norm.weight") and not t.is_meta:  # (the shape check's meta tensors: arithmetic on
        t = t - 1                                      # them would import torch._dynamo, ~5 s, for nothing)
    if ours == "lm_head.weight" and cfg.tie_weights:
        return {}
    return {ours: t}


FAMILY = Family(
    name="gemma2", title="Gemma 2",
    model_types=("gemma2",), architectures=("Gemma2ForCausalLM", "Gemma2Model"),
    config=config, convert=decoder_converter(GEMMA2_LAYER),
    gguf_architectures=("gemma2",), gguf_config=gguf_config, gguf_convert=gguf_convert,
    notes=("embeddings × √d_model", "RMSNorm with (1 + w), before and after each sublayer", "GeGLU",
           "attention and final soft-capping", "alternating local (sliding-window) and global layers",
           "query_pre_attn_scalar"),
)
