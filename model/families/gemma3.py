"""Gemma 3 (text): Gemma 2's decoder with query/key normalisation, five sliding-window layers for
every global one, and two rotary bases, each an option of the one Transformer.

  - the layer types: `layer_types` ("sliding_attention" / "full_attention"), else Gemma 3's rule
    (transformers' Gemma3TextConfig, sliding_window_pattern 6): layer i is global when (i + 1) is a
    multiple of 6 (5, 11, 17, ...), local otherwise (window, window_layers);
  - rotary positions with a base per layer type: the local layers 10,000 (rope_local_base_freq,
    or rope_parameters["sliding_attention"]), the global ones rope_theta (1e6 by default), and the
    global layers' linear rescaling (rope_scaling / rope_parameters["full_attention"] with
    rope_type "linear": Gemma 3 4B and larger, factor 8) (rope_local_theta, rope_linear);
  - query_pre_attn_scalar: scores scaled by its -1/2 power (attn_scale; 256 by default);
  - QK-norm: an RMSNorm over each head's query and key, before the rotation (qk_norm), with the
    (1 + w) of Gemma's norms;
  - four RMSNorms per block, each scaling by (1 + w) (sandwich_norm, norm_unit_offset), and the
    final one;
  - the token embeddings times sqrt(d_model) (emb_scale, a float32 factor), GeGLU with GELU's tanh
    approximation, the output matrix tied to the embedding; soft-capping only when the config sets it
    (Gemma 3 has none).

GGUF "gemma3" (llama.cpp's converter): every norm weight is stored as 1 + w, the query/key norms
included; gguf_convert subtracts 1, as transformers does (Gemma2TensorProcessor for gemma3). The
metadata holds the global rotary base (rope.freq_base), the window (attention.sliding_window: a
query sees itself and the window - 1 keys before it), linear rope scaling when there is one
(rope.scaling.type / rope.scaling.factor), and lacks three things Gemma 3 defines: the local base
(10,000), which layers are global (every 6th) and the query scalar. Those are taken from Gemma 3's
own definition, as llama.cpp does: the scalar is head_dim (256), or d_model / heads for the 27B
model (62 layers), whose query_pre_attn_scalar is 168.
"""
from __future__ import annotations

from torch import Tensor

from ..config import ModelConfig
from .common import Family, decoder_converter, layer_windows, meta_get, need_int, refuse_unless
from .gemma2 import GEMMA2_LAYER, TANH_GELU, gguf_convert
from .llama import decoder_config, gguf_decoder_config

SLIDING_PATTERN = 6  # Gemma 3: every 6th layer is global (Gemma3TextConfig's sliding_window_pattern)
LOCAL_THETA = 10_000.0  # the local layers' rotary base (rope_local_base_freq)
GLOBAL_THETA = 1_000_000.0  # the global layers' rotary base when the config does not say
HEAD_DIM = 256  # Gemma3TextConfig's head_dim and query_pre_attn_scalar defaults
GEMMA3_LAYER = {**GEMMA2_LAYER, "self_attn.q_norm": "attn.q_norm", "self_attn.k_norm": "attn.k_norm"}


def layer_types(n_layers: int, pattern: int = SLIDING_PATTERN) -> list[str]:
    """Gemma 3's layer types when a config does not list them: global when (i + 1) % pattern == 0."""
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)]


def global_layers(n_layers: int, pattern: int = SLIDING_PATTERN) -> tuple[int, ...]:
    """The global layers of Gemma 3's rule: 5, 11, 17, ... (18 layers: 5, 11, 17)."""
    return tuple(i for i, t in enumerate(layer_types(n_layers, pattern)) if t == "full_attention")


def _rope_kind(d: dict, what: str, which: str) -> float | None:
    """The linear factor of one layer type's rotary parameters (None: no rescaling); others refused."""
    kind = d.get("rope_type", d.get("type", "default")) or "default"
    prf = d.get("partial_rotary_factor", 1.0)
    if prf not in (None, 1, 1.0):
        raise ValueError(f"{what}: rotary positions over part of each head (partial_rotary_factor={prf}) "
                         "are not supported")
    if kind == "default":
        return None
    if kind == "linear" and which == "full_attention":
        try:
            return float(d["factor"])
        except KeyError:
            raise ValueError(f"{what}: linear rotary scaling lacks 'factor'") from None
    raise ValueError(f"{what}: rotary scaling {kind!r} on the {which} layers is not supported; supported: "
                     "default, and linear on the global (full_attention) layers")


def rope_options(hf: dict, what: str) -> tuple[float, float, float | None]:
    """(global theta, local theta, global linear factor) from a Gemma 3 config.json in either
    spelling: transformers 5's `rope_parameters` per layer type {"full_attention": {...},
    "sliding_attention": {...}}, or the older `rope_theta`, `rope_local_base_freq` and
    `rope_scaling` (which applies to the global layers)."""
    params = hf.get("rope_parameters") or {}
    if params and not any(isinstance(v, dict) for v in params.values()):
        params = {"full_attention": dict(params)}  # one flat set: the global layers'
    full = dict(params.get("full_attention") or {})
    local = dict(params.get("sliding_attention") or {})
    if isinstance(hf.get("rope_scaling"), dict):
        for k, v in hf["rope_scaling"].items():
            full.setdefault(k, v)
    theta = float(full.get("rope_theta", hf.get("rope_theta", GLOBAL_THETA)) or GLOBAL_THETA)
    local_theta = float(local.get("rope_theta", hf.get("rope_local_base_freq", LOCAL_THETA)) or LOCAL_THETA)
    _rope_kind(local, what, "sliding_attention")
    return theta, local_theta, _rope_kind(full, what, "full_attention")


def config(hf: dict, names: frozenset, what: str) -> ModelConfig:
    """ModelConfig of a Gemma3ForCausalLM config.json (Gemma3TextConfig keys, model_type gemma3_text)."""
    if hf.get("model_type") == "gemma3" and isinstance(hf.get("text_config"), dict):
        raise ValueError(f"{what}: a multimodal Gemma 3 (Gemma3ForConditionalGeneration) is not supported; "
                         "open a text-only Gemma 3 (Gemma3ForCausalLM, gemma3_text)")
    act = hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh"
    refuse_unless(act in TANH_GELU, what, f"hidden_activation {act!r}: Gemma 3's MLP is GeGLU with "
                  "GELU's tanh approximation ('gelu_pytorch_tanh')")
    refuse_unless(not hf.get("use_bidirectional_attention"), what,
                  "use_bidirectional_attention (an embedding variant) is not supported")
    L = need_int(hf, "num_hidden_layers", what)
    D = need_int(hf, "hidden_size", what)
    pattern = int(hf.get("sliding_window_pattern") or SLIDING_PATTERN)
    window, window_layers = layer_windows(hf, L, what, default_types=layer_types(L, pattern))
    head_dim = int(hf.get("head_dim") or HEAD_DIM)
    scalar = float(hf.get("query_pre_attn_scalar") or HEAD_DIM)
    theta, local_theta, linear = rope_options(hf, what)
    flat = {k: v for k, v in hf.items() if k not in ("rope_parameters", "rope_scaling")}
    flat.update(rope_theta=theta, head_dim=head_dim)
    return decoder_config(flat, names, what, family="gemma3", tied_default=True, activation="geglu",
                          window=window, window_layers=window_layers, attn_scale=scalar ** -0.5,
                          attn_softcap=hf.get("attn_logit_softcapping"),
                          final_softcap=hf.get("final_logit_softcapping"), emb_scale=D ** 0.5,
                          norm_unit_offset=True, sandwich_norm=True, qk_norm=True,
                          rope_local_theta=local_theta if window is not None else None, rope_linear=linear)


def gguf_config(meta: dict, names: frozenset, what: str) -> ModelConfig:
    """ModelConfig of a GGUF "gemma3" file (module docstring: what the metadata lacks is Gemma 3's)."""
    arch = meta.get("general.architecture")
    refuse_unless(arch == "gemma3", what, f"architecture {arch!r}; this importer reads 'gemma3'")
    D = int(meta_get(meta, arch, "embedding_length", what, required=True))
    H = int(meta_get(meta, arch, "attention.head_count", what, required=True))
    L = int(meta_get(meta, arch, "block_count", what, required=True))
    head_dim = int(meta_get(meta, arch, "attention.key_length", what, 0) or D // H)
    scalar = D // H if L == 62 else head_dim  # llama.cpp: the 27B model scales by d_model / heads
    window = meta_get(meta, arch, "attention.sliding_window", what)
    linear = None
    scaling = meta_get(meta, arch, "rope.scaling.type", what, "none")
    if scaling == "linear":
        factor = float(meta_get(meta, arch, "rope.scaling.factor", what, required=True))
        linear = None if factor == 1.0 else factor
        meta = {k: v for k, v in meta.items() if not k.startswith(f"{arch}.rope.scaling.")}
    local = tuple(i for i in range(L) if i not in global_layers(L))
    return gguf_decoder_config(
        meta, names, what, arch, family="gemma3", activation="geglu",
        window=None if window is None else int(window),
        window_layers=None if window is None else local,
        attn_scale=float(scalar) ** -0.5,
        attn_softcap=meta_get(meta, arch, "attn_logit_softcapping", what),
        final_softcap=meta_get(meta, arch, "final_logit_softcapping", what),
        emb_scale=D ** 0.5, norm_unit_offset=True, sandwich_norm=True, qk_norm=True,
        rope_local_theta=None if window is None else LOCAL_THETA, rope_linear=linear)


def gemma3_gguf_convert(name: str, t: Tensor, cfg: ModelConfig) -> dict[str, Tensor]:
    """A gemma3 GGUF tensor in our terms: Gemma 2's names plus the query/key norms; every norm
    weight (all six kinds) stored as 1 + w gets w back."""
    return gguf_convert(name, t, cfg)


FAMILY = Family(
    name="gemma3", title="Gemma 3",
    model_types=("gemma3_text",), architectures=("Gemma3ForCausalLM", "Gemma3TextModel"),
    config=config, convert=decoder_converter(GEMMA3_LAYER),
    gguf_architectures=("gemma3",), gguf_config=gguf_config, gguf_convert=gemma3_gguf_convert,
    notes=("embeddings × √d_model", "RMSNorm with (1 + w), before and after each sublayer",
           "RMSNorm on each head's q and k", "GeGLU", "five local (sliding-window) layers for each global one",
           "rotary base 10,000 on local layers, 1,000,000 on global ones", "query_pre_attn_scalar"),
)
