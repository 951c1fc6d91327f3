"""What every family importer shares: the Family record the registry holds, reading config.json
values with clear errors, the rotary options in both spellings, per-layer sliding windows, the
Llama-style tensor names (Llama, Mistral, Qwen2, Qwen3 and Gemma 2 name their tensors alike) and
llama.cpp's GGUF tensor names.

A family importer turns a checkpoint into the one Transformer's terms:
    config(hf_config, tensor_names, what) -> ModelConfig      (HF config.json -> the options)
    convert(name, tensor, cfg) -> {our name: tensor}           (fused weights split, Conv1D
                                                               transposed; {} = a tensor the
                                                               traced model does not use)
and, for GGUF files, gguf_config(metadata, tensor_shapes, what) (a dict name -> shape: `in` works
as on the names) and gguf_convert(name, tensor, cfg). A family whose config needs the values of
some small tensors names them in gguf_config_tensors (llama: rope_freqs.weight, Llama 3.1's rotary
factors); the loader then reads them (float32) and passes gguf_config values={name: tensor}, and
does not count them among the tensors the traced model ignores.
A name the importer does not know raises ValueError naming it: nothing is dropped silently.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from torch import Tensor

from ..config import ModelConfig

Converter = Callable[[str, Tensor, ModelConfig], dict[str, Tensor]]
ConfigReader = Callable[[dict, frozenset, str], ModelConfig]


@dataclass(frozen=True)
class Family:
    """One family's importer, as the registry (model.families.FAMILIES) holds it."""

    name: str  # the registry key: "gpt2", "llama", "qwen2", ...
    title: str  # what a list of supported families shows
    model_types: tuple[str, ...]  # config.json "model_type" values it reads
    architectures: tuple[str, ...]  # config.json "architectures" names it reads
    config: ConfigReader  # (config.json, tensor names, what) -> ModelConfig
    convert: Converter  # (HF tensor name, tensor, cfg) -> {our name: tensor}
    gguf_architectures: tuple[str, ...] = ()  # GGUF general.architecture values it reads
    gguf_config: ConfigReader | None = None  # (GGUF metadata, {tensor name: shape}, what) -> ModelConfig
    gguf_convert: Converter | None = None  # (GGUF tensor name, float32 tensor, cfg) -> {ours: tensor}
    gguf_config_tensors: tuple[str, ...] = ()  # GGUF tensors whose values gguf_config reads (values=...)
    notes: tuple[str, ...] = field(default=())  # numeric details worth knowing (docs, the app)


class Unknown(ValueError):
    """A tensor name the importer does not know (the loader reports the file and the family)."""


def need(d: dict, key: str, what: str, *alts: str):
    """d[key] (or the first alternative key present); ValueError naming the file and the key."""
    for k in (key, *alts):
        if k in d and d[k] is not None:
            return d[k]
    names = " or ".join(repr(k) for k in (key, *alts))
    raise ValueError(f"{what}: the config lacks {names}")


def need_int(d: dict, key: str, what: str, *alts: str) -> int:
    v = need(d, key, what, *alts)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v <= 0:
        raise ValueError(f"{what}: {key} must be a positive integer, got {v!r}")
    return int(v)


def refuse_unless(ok: bool, what: str, message: str) -> None:
    if not ok:
        raise ValueError(f"{what}: {message}")


def head_width(d_model: int, n_heads: int, head_dim) -> int:
    """ModelConfig.d_head for a config.json head_dim: 0 (= d_model / n_heads) when it is that."""
    if head_dim is None:
        return 0
    head_dim = int(head_dim)
    return 0 if head_dim * n_heads == d_model else head_dim


ROPE_TYPES = ("default", "llama3")


def rope_options(hf: dict, what: str) -> tuple[float, tuple[float, float, float, int] | None]:
    """(rope_theta, rope_llama3) from a config.json in either spelling: the newer
    `rope_parameters` {"rope_type", "rope_theta", "factor", ...} or the older `rope_theta` beside
    `rope_scaling` {"type"/"rope_type", "factor", ...}. Types other than default and llama3
    (linear, dynamic, yarn, longrope) are refused naming the supported ones."""
    params = hf.get("rope_parameters")
    scaling = hf.get("rope_scaling")
    d: dict = {}
    if isinstance(params, dict) and params:
        if any(isinstance(v, dict) for v in params.values()):
            raise ValueError(f"{what}: rotary parameters that differ per layer type are not supported")
        d.update(params)
    if isinstance(scaling, dict):
        for k, v in scaling.items():
            d.setdefault(k, v)
    theta = d.get("rope_theta", hf.get("rope_theta", 10000.0))
    kind = d.get("rope_type", d.get("type", "default")) or "default"
    prf = d.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
    if prf not in (None, 1, 1.0):
        raise ValueError(f"{what}: rotary positions over part of each head (partial_rotary_factor={prf}) "
                         "are not supported")
    if kind == "default":
        return float(theta), None
    if kind == "llama3":
        try:
            llama3 = (float(d["factor"]), float(d["low_freq_factor"]), float(d["high_freq_factor"]),
                      int(d.get("original_max_position_embeddings") or hf["max_position_embeddings"]))
        except KeyError as e:
            raise ValueError(f"{what}: llama3 rotary scaling lacks {e.args[0]!r}") from None
        return float(theta), llama3
    raise ValueError(f"{what}: rotary scaling {kind!r} is not supported; supported: {', '.join(ROPE_TYPES)}")


def layer_windows(hf: dict, n_layers: int, what: str, *, default_types: list[str] | None = None
                  ) -> tuple[int | None, tuple[int, ...] | None]:
    """(window, window_layers) from config.json's `layer_types` ("sliding_attention" /
    "full_attention" per layer) and `sliding_window`; default_types: the family's rule when the
    file has no layer_types (None: every layer slides when sliding_window is set, as Mistral)."""
    window = hf.get("sliding_window")
    types = hf.get("layer_types") or default_types
    if window is None:
        return None, None
    window = int(window)
    if types is None:
        return window, None
    if len(types) != n_layers:
        raise ValueError(f"{what}: layer_types lists {len(types)} layers; the model has {n_layers}")
    unknown = sorted(set(types) - {"sliding_attention", "full_attention"})
    if unknown:
        raise ValueError(f"{what}: layer types {unknown} are not supported (sliding_attention, full_attention)")
    sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    if not sliding:
        return None, None
    return window, (None if len(sliding) == n_layers else sliding)


# ---- Llama-style tensor names (Llama, Mistral, Qwen2, Qwen3, Gemma 2) --------------------------

LLAMA_LAYER = {
    "self_attn.q_proj": "attn.q_proj", "self_attn.k_proj": "attn.k_proj",
    "self_attn.v_proj": "attn.v_proj", "self_attn.o_proj": "attn.o_proj",
    "self_attn.q_norm": "attn.q_norm", "self_attn.k_norm": "attn.k_norm",  # Qwen3
    "mlp.gate_proj": "ffn.gate", "mlp.up_proj": "ffn.fc1", "mlp.down_proj": "ffn.fc2",
    "input_layernorm": "ln1", "post_attention_layernorm": "ln2",  # Llama: the norm before the MLP
}
_DEC_LAYER_RE = re.compile(r"^(?:model\.)?layers\.(\d+)\.(.+)\.(weight|bias)$")
_DEC_IGNORED = re.compile(r"^(?:model\.)?layers\.\d+\.self_attn\.rotary_emb\.inv_freq$")  # old checkpoints' buffer


def decoder_name(name: str, cfg: ModelConfig, layer_map: dict[str, str] = LLAMA_LAYER) -> str | None:
    """Our name for a Llama-style HF tensor name (with or without the "model." prefix); None for
    one the traced model does not use (the tied lm_head, an old rotary buffer); Unknown otherwise."""
    if name in ("model.embed_tokens.weight", "embed_tokens.weight"):
        return "tok_emb.weight"
    if name in ("model.norm.weight", "norm.weight"):
        return "ln_f.weight"
    if name == "lm_head.weight":
        return None if cfg.tie_weights else "lm_head.weight"
    if _DEC_IGNORED.match(name):
        return None
    m = _DEC_LAYER_RE.match(name)
    if m and m.group(2) in layer_map:
        return f"blocks.{m.group(1)}.{layer_map[m.group(2)]}.{m.group(3)}"
    raise Unknown(name)


def decoder_converter(layer_map: dict[str, str] = LLAMA_LAYER) -> Converter:
    def convert(name: str, t: Tensor, cfg: ModelConfig) -> dict[str, Tensor]:
        ours = decoder_name(name, cfg, layer_map)
        return {} if ours is None else {ours: t}
    return convert


# ---- llama.cpp's GGUF tensor names (every architecture here) -----------------------------------

GGUF_TOP = {"token_embd.weight": "tok_emb.weight", "output_norm.weight": "ln_f.weight",
            "output.weight": "lm_head.weight"}
GGUF_LAYER = {"attn_norm": "ln1", "attn_q": "attn.q_proj", "attn_k": "attn.k_proj", "attn_v": "attn.v_proj",
              "attn_output": "attn.o_proj", "ffn_norm": "ln2", "ffn_gate": "ffn.gate", "ffn_up": "ffn.fc1",
              "ffn_down": "ffn.fc2", "attn_q_norm": "attn.q_norm", "attn_k_norm": "attn.k_norm"}
_GGUF_LAYER_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")


def gguf_name(name: str, layer_map: dict[str, str] = GGUF_LAYER) -> str:
    """Our name for a llama.cpp tensor name (token_embd, blk.N.attn_q, ...); Unknown otherwise."""
    if name in GGUF_TOP:
        return GGUF_TOP[name]
    m = _GGUF_LAYER_RE.match(name)
    if m and m.group(2) in layer_map:
        return f"blocks.{m.group(1)}.{layer_map[m.group(2)]}.{m.group(3)}"
    raise Unknown(name)


def meta_get(meta: dict, arch: str, key: str, what: str, default=None, *, required: bool = False):
    """A GGUF metadata value `{arch}.{key}`; ValueError naming it when required and absent."""
    full = f"{arch}.{key}"
    if full in meta:
        v = meta[full]
        return v.item() if hasattr(v, "item") and getattr(v, "size", 1) == 1 else v
    if required:
        raise ValueError(f"{what}: the metadata lacks {full}")
    return default
