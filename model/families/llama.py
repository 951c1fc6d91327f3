"""Llama: Llama 2, Llama 3.x (llama3 rotary scaling), SmolLM/SmolLM2, TinyLlama, and the GGUF
"llama" architecture (SmolLM2's shipped file among them).

Numeric details, as options of the one Transformer: pre-norm RMSNorm (eps from the file), rotary
positions (theta; Llama 3.1+'s llama3 rescaling of the frequencies, model.layers.rope_inv_freq),
grouped-query attention, SwiGLU, no biases unless attention_bias / mlp_bias say so, a final norm,
the output matrix tied to the embedding or not (tie_word_embeddings). head_dim may differ from
d_model / heads.

GGUF: llama.cpp's converter permutes the rows of W_Q and W_K of every head from HF's rotate_half
layout to interleaved pairs; gguf_convert undoes it (model.gguf_loader.unpermute_qk), as
transformers does when it reads a GGUF. Llama 3.1+'s llama3 scaling is not in a GGUF's metadata:
the converter (convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors) stores it as the float32
tensor rope_freqs.weight, one factor per rotary pair (1 for wavelengths shorter than
original / high_freq_factor, `factor` for those longer than original / low_freq_factor,
1 / ((1 - smooth) / factor + smooth) between), and llama.cpp divides each pair's frequency by its
factor. gguf_config reads those factors into ModelConfig.rope_freq_factors as they are (the
file does not say low/high_freq_factor or the original length, so rope_llama3 cannot be
recovered from it; the factors are what llama.cpp runs). Only the "llama" architecture: llama.cpp
never applies rope_freqs to qwen2 / qwen3, and those importers refuse a file carrying one.
"""
from __future__ import annotations

import math

from torch import Tensor

from ..config import ModelConfig
from ..gguf_loader import unpermute_qk
from .common import (Family, decoder_converter, gguf_name, head_width, layer_windows, meta_get, need,
                     need_int, refuse_unless, rope_options)


def decoder_config(hf: dict, names: frozenset, what: str, *, family: str, tied_default: bool,
                   **options) -> ModelConfig:
    """The options every Llama-style decoder shares, from its config.json; `options` add or
    override the family's own (biases, q/k norms, windows, Gemma's details)."""
    act = hf.get("hidden_act", hf.get("hidden_activation", "silu"))
    if "activation" not in options:
        refuse_unless(act == "silu", what, f"hidden_act {act!r}: this family's MLP is SwiGLU ('silu')")
    D, H = need_int(hf, "hidden_size", what), need_int(hf, "num_attention_heads", what)
    L = need_int(hf, "num_hidden_layers", what)
    kv = int(hf.get("num_key_value_heads") or H)
    theta, llama3 = rope_options(hf, what)
    tied = bool(hf.get("tie_word_embeddings", tied_default))
    if not tied and "lm_head.weight" not in names:
        raise ValueError(f"{what}: tie_word_embeddings is false but the weights hold no lm_head.weight")
    archs = hf.get("architectures") or [""]
    base = dict(
        vocab_size=need_int(hf, "vocab_size", what), d_model=D, n_heads=H, n_layers=L,
        d_ff=need_int(hf, "intermediate_size", what), max_len=need_int(hf, "max_position_embeddings", what),
        pos_encoding="rope", rope_theta=theta, rope_llama3=llama3, norm="pre", norm_kind="rmsnorm",
        activation="swiglu", scale_scores=True, tie_weights=tied, bias=False,
        qkv_bias=bool(hf.get("attention_bias", False)), out_bias=bool(hf.get("attention_bias", False)),
        ffn_bias=bool(hf.get("mlp_bias", False)), ln_eps=float(need(hf, "rms_norm_eps", what)),
        final_norm=True, n_kv_heads=kv, d_head=head_width(D, H, hf.get("head_dim")),
        family=family, architecture=str(archs[0]),
    )
    base.update(options)
    return ModelConfig(**base)


def config(hf: dict, names: frozenset, what: str) -> ModelConfig:
    """ModelConfig of a LlamaForCausalLM config.json (Llama 2/3.x, SmolLM2, TinyLlama)."""
    L = need_int(hf, "num_hidden_layers", what)
    window, window_layers = layer_windows(hf, L, what)
    return decoder_config(hf, names, what, family="llama", tied_default=False, window=window,
                          window_layers=window_layers)


def gguf_decoder_config(meta: dict, names: frozenset, what: str, arch: str, *, family: str,
                        rope_freqs: Tensor | None = None, **options) -> ModelConfig:
    """The options every llama.cpp decoder shares, from a GGUF's metadata ({arch}.* keys).
    rope_freqs: the values of the file's rope_freqs.weight when the family reads it (llama); a
    file that carries one without it being given is refused (llama.cpp does not apply it there)."""
    def req(key):
        return meta_get(meta, arch, key, what, required=True)

    D, H = int(req("embedding_length")), int(req("attention.head_count"))
    kv = int(meta_get(meta, arch, "attention.head_count_kv", what, H))
    d_head = int(meta_get(meta, arch, "attention.key_length", what, 0) or 0)
    d_head = d_head or D // H
    rot = int(meta_get(meta, arch, "rope.dimension_count", what, d_head))
    refuse_unless(rot == d_head, what, f"rotary over {rot} of {d_head} head dimensions is not supported")
    scaling = meta_get(meta, arch, "rope.scaling.type", what, "none")
    refuse_unless(scaling in ("none", None), what, f"rope scaling {scaling!r} is not supported")
    factors = None
    if "rope_freqs.weight" in names:
        refuse_unless(rope_freqs is not None, what,
                      f"per-pair rotary factors (rope_freqs.weight) in a {arch!r} GGUF: llama.cpp applies them "
                      "only to the 'llama' architecture, so what this file computes is unclear")
        factors = tuple(float(v) for v in rope_freqs.reshape(-1).tolist())
        refuse_unless(len(factors) == rot // 2, what,
                      f"rope_freqs.weight holds {len(factors)} factors, but the rotary dimension {rot} has "
                      f"{rot // 2} pairs")
        refuse_unless(all(math.isfinite(v) and v > 0 for v in factors), what,
                      "rope_freqs.weight holds a factor that is not a positive number")
    vocab = int(meta_get(meta, arch, "vocab_size", what, 0) or 0)
    if not vocab and isinstance(names, dict) and "token_embd.weight" in names:
        vocab = int(names["token_embd.weight"][0])  # the embedding's rows (shapes given)
    vocab = vocab or len(meta.get("tokenizer.ggml.tokens", []))
    base = dict(
        vocab_size=vocab, d_model=D, n_heads=H, n_layers=int(req("block_count")),
        d_ff=int(req("feed_forward_length")), max_len=int(req("context_length")),
        pos_encoding="rope", rope_theta=float(meta_get(meta, arch, "rope.freq_base", what, 10000.0)),
        rope_freq_factors=factors, norm="pre", norm_kind="rmsnorm", activation="swiglu", scale_scores=True,
        tie_weights="output.weight" not in names, bias=False,
        ln_eps=float(req("attention.layer_norm_rms_epsilon")), final_norm=True, n_kv_heads=kv,
        d_head=head_width(D, H, d_head), family=family, architecture=f"gguf:{arch}",
    )
    base.update(options)
    return ModelConfig(**base)


def gguf_config(meta: dict, names: frozenset, what: str, values: dict[str, Tensor] | None = None) -> ModelConfig:
    """ModelConfig of a GGUF "llama" file: RMSNorm, rotary positions (theta from the file; Llama
    3.1+'s per-pair factors from rope_freqs.weight, given in `values` by the loader), grouped-query
    attention, SwiGLU, no biases, pre-norm with a final norm."""
    arch = meta.get("general.architecture")
    refuse_unless(arch == "llama", what, f"architecture {arch!r}; this importer reads 'llama'")
    has_bias = any(n.endswith(".bias") for n in names)
    rope_freqs = (values or {}).get("rope_freqs.weight")
    if "rope_freqs.weight" in names and rope_freqs is None:
        raise ValueError(f"{what}: the values of rope_freqs.weight were not read (the loader passes them)")
    return gguf_decoder_config(meta, names, what, "llama", family="llama", rope_freqs=rope_freqs,
                               qkv_bias=has_bias, out_bias=any(n.endswith("attn_output.bias") for n in names))


def gguf_convert(name: str, t: Tensor, cfg: ModelConfig) -> dict[str, Tensor]:
    """A llama GGUF tensor in our terms: W_Q / W_K rows (and biases) back in HF's layout."""
    if name == "rope_freqs.weight":  # read into cfg.rope_freq_factors by gguf_config
        return {}
    ours = gguf_name(name)
    if ".attn_q." in name:
        t = unpermute_qk(t, cfg.n_heads).contiguous()
    elif ".attn_k." in name:
        t = unpermute_qk(t, cfg.kv_heads).contiguous()
    if ours == "lm_head.weight" and cfg.tie_weights:
        return {}
    return {ours: t}


FAMILY = Family(
    name="llama", title="Llama (Llama 2, Llama 3.x, SmolLM/SmolLM2, TinyLlama)",
    model_types=("llama",), architectures=("LlamaForCausalLM", "LlamaModel"),
    config=config, convert=decoder_converter(),
    gguf_architectures=("llama",), gguf_config=gguf_config, gguf_convert=gguf_convert,
    gguf_config_tensors=("rope_freqs.weight",),
    notes=("RMSNorm", "rotary positions (llama3 scaling)", "grouped-query attention", "SwiGLU"),
)
