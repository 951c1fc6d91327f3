"""ModelConfig: the architecture of a Transformer, validated, with presets.

Everything here is plain Python: the parameter count is computed from the config alone, without
allocating a model (so the GPT-2 small preset can be inspected on any laptop).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

POS_ENCODINGS = ("sinusoidal", "learned", "rope", "none")  # "none": no position vector (order-blind demo)
NORMS = ("pre", "post")
ACTIVATIONS = ("gelu", "relu", "swiglu", "gelu_tanh", "geglu")
GATED = ("swiglu", "geglu")  # gated units: act(x W_gate^T) * (x W_up^T) (Llama's SwiGLU, Gemma's GeGLU)
NORM_KINDS = ("layernorm", "rmsnorm")
ATTN_SCORES = ("dot", "additive")  # how a query scores a key: scaled dot product or Bahdanau's MLP

# The architecture choices the app offers (sidebar's fresh weights and the Train page): one list and
# one rule for both. 48, 96, 192 are multiples of 12 (BERT-style 12 heads).
D_MODEL_CHOICES = (8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768)  # 512: the 2017 paper; 768: GPT-2 small
HEAD_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16)
MIN_D_K = 4  # narrower heads (d_k of 1-3 numbers per query/key) are valid configs but teach nothing


def valid_heads(d_model: int) -> list[int]:
    """Head counts offered for a d_model: from HEAD_CHOICES, those that divide it (ModelConfig's
    rule) and leave every head at least MIN_D_K dimensions (d_k = d_model / heads)."""
    return [h for h in HEAD_CHOICES if d_model % h == 0 and d_model // h >= MIN_D_K]


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a decoder-only (or encoder-only) transformer.

    d_ff defaults to 4 * d_model (0 means "use the default"). Invalid values raise ValueError
    with a message that says what to change.
    """

    vocab_size: int = 64
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 0
    max_len: int = 128
    pos_encoding: str = "sinusoidal"  # "sinusoidal" | "learned" | "rope" (rotary, on q and k)
    norm: str = "pre"  # "pre" (GPT-2) | "post" (2017 paper)
    activation: str = "gelu"  # "gelu" | "relu" | "swiglu" (silu(x W_gate) * (x W_up), Llama)
    scale_scores: bool = True  # divide scores by sqrt(d_k)
    tie_weights: bool = True  # output layer shares the token-embedding matrix
    bias: bool = True  # biases in the linear layers (as in GPT-2)
    ln_eps: float = 1e-5
    final_norm: bool | None = None  # None: True for pre-LN (GPT-2), False for post-LN (2017)
    # BERT's pieces (defaults keep every other model unchanged):
    emb_norm: bool = False  # LayerNorm over token + position (+ type) before block 0 (BERT)
    type_vocab_size: int = 0  # token-type (segment) embeddings; 0 = none, BERT: 2 (sentence A/B)
    output_head: bool = True  # False: no output layer (an encoder such as MiniLM): no logits
    # Llama-style pieces (SmolLM2; defaults keep every other model unchanged):
    norm_kind: str = "layernorm"  # "layernorm" | "rmsnorm" (x / sqrt(mean(x^2) + eps) * gamma)
    rope_theta: float = 10000.0  # base of the rotary frequencies (used when pos_encoding="rope")
    n_kv_heads: int | None = None  # grouped-query attention: K/V heads shared by n_heads / n_kv_heads
    #                                query heads each; None = n_heads (ordinary multi-head attention)
    # Teaching switches (defaults keep every model bit-identical):
    d_v: int = 0  # per-head value width; 0 = d_k. W_V is d_model × h·d_v, W_O is h·d_v × d_model
    residual: bool = True  # False: blocks drop the skip connections (x + f(x) becomes f(x))
    use_norm: bool = True  # False: no layer norm anywhere (the LN steps are the identity)
    # Attention variants (defaults keep every model bit-identical):
    alibi: bool = False  # ALiBi (Press et al. 2022): add -slope_h·|i - j| to head h's scores
    #                      (layers.alibi_slopes); the paper pairs it with pos_encoding="none"
    window: int | None = None  # sliding-window (local) attention: query i sees keys j with
    #                            |i - j| < window (causal: i - window < j <= i); None = everything
    attn_score: str = "dot"  # "dot" (q·k, scaled) | "additive" (Bahdanau: v_h·tanh(W_q q + W_k k))
    # Pretrained families (model.families: GPT-2, Llama, Qwen2/3, Mistral, Gemma 2, the BERT
    # family). Defaults keep every other model bit-identical:
    d_head: int = 0  # per-head q/k (and v) width; 0 = d_model / n_heads. Qwen3 and Gemma 2 set it,
    #                  and then d_model need not be n_heads * d_head (W_Q is n_heads·d_head × d_model)
    qkv_bias: bool | None = None  # biases on W_Q, W_K, W_V; None = `bias` (Qwen2: True with bias False)
    out_bias: bool | None = None  # bias on W_O; None = `bias`
    ffn_bias: bool | None = None  # biases of the FFN's linear layers; None = `bias`
    qk_norm: bool = False  # Qwen3: an RMSNorm over each head's q and k (d_k weights), before the rotation
    attn_scale: float | None = None  # the factor on q·k; None = 1/sqrt(d_k) (scale_scores) or 1.
    #                                  Gemma 2: query_pre_attn_scalar^-0.5
    attn_softcap: float | None = None  # Gemma 2: scaled scores s -> cap·tanh(s / cap), before the mask
    final_softcap: float | None = None  # Gemma 2: logits z -> cap·tanh(z / cap)
    window_layers: tuple[int, ...] | None = None  # the layers that use `window`; None = every layer
    #                                               (Gemma 2: 0, 2, 4, ... local; the others global).
    # Each family option is read only where its base option is on (window_layers with a window,
    # sandwich_norm with pre-norm, mlm_head with an output layer, rope_llama3 and rope_freq_factors with
    # rotary positions, pos_offset with learned positions), so a page may vary one option of a pretrained config
    # (cfg.replace(norm="post"), n_layers=1, ...) without contradicting another.
    emb_scale: float | None = None  # Gemma: what block 0 sees is the token embedding times this
    #                                 (sqrt(d_model), rounded to float32 as the model multiplies)
    norm_unit_offset: bool = False  # Gemma: RMSNorm scales by (1 + w); the weights are offsets from 1
    sandwich_norm: bool = False  # Gemma 2: a norm after each sublayer too (before the residual add):
    #                              x + N(attn(N(x))), then mid + N(ffn(N(mid)))
    rope_llama3: tuple[float, float, float, int] | None = None  # Llama 3.1+ rotary scaling: (factor,
    #                low_freq_factor, high_freq_factor, original_max_position_embeddings); read
    #                only with pos_encoding "rope"
    rope_freq_factors: tuple[float, ...] | None = None  # the same scaling as a Llama 3.1+ GGUF stores
    #                it (llama.cpp's rope_freqs tensor): one divisor per rotary pair, d_k/2 positive
    #                numbers; pair i turns at inv_freq_i / factor_i (model.layers.rope_inv_freq). Kept
    #                as the file gives them, not turned back into rope_llama3: a GGUF does not store
    #                low/high_freq_factor or the original length, and the divisors are what llama.cpp
    #                runs. Read only with pos_encoding "rope"; not together with rope_llama3
    rope_local_theta: float | None = None  # Gemma 3: the sliding-window (local) layers rotate with a base of
    #                their own (10,000) beside the global layers' rope_theta (1e6), without rescaling; None =
    #                rope_theta on every layer. Read only with pos_encoding "rope" (cfg.layer_rope)
    rope_linear: float | None = None  # linear rotary scaling (position interpolation): the frequencies of the
    #                layers that turn with rope_theta divided by this factor (Gemma 3 4B+: 8 on its global
    #                layers; transformers' rope_type "linear"); None = none. Read only with "rope"
    pos_offset: int = 0  # RoBERTa: position p uses learned row p + pos_offset (padding_idx + 1);
    #                      the table then has max_len + pos_offset rows; read only with "learned"
    mlm_head: bool = False  # BERT family's masked-LM head: dense D×D, activation, LayerNorm, then
    #                         the (tied) output matrix plus a bias on the logits: fill in the blank
    family: str = ""  # which importer made this config (model.families: "gpt2", "llama", "bert", ...);
    #                   "" = a model built here. Descriptive: no number depends on it
    architecture: str = ""  # the checkpoint's own name for it ("Gemma2ForCausalLM"); "" = built here
    encoder: bool = False  # trained bidirectionally (BERT family): traced with causal=False by default

    def __post_init__(self) -> None:
        def need_pos_int(name: str) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"{name} must be an integer, got {v!r}")
            if v <= 0:
                raise ValueError(f"{name} must be positive, got {v}; choose a value >= 1")

        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_len"):
            need_pos_int(name)
        if isinstance(self.d_ff, bool) or not isinstance(self.d_ff, int) or self.d_ff < 0:
            raise ValueError(f"d_ff must be a non-negative integer (0 = 4*d_model), got {self.d_ff!r}")
        if (isinstance(self.type_vocab_size, bool) or not isinstance(self.type_vocab_size, int)
                or self.type_vocab_size < 0):
            raise ValueError(f"type_vocab_size must be a non-negative integer (0 = no token types, "
                             f"BERT uses 2), got {self.type_vocab_size!r}")
        if isinstance(self.d_v, bool) or not isinstance(self.d_v, int) or self.d_v < 0:
            raise ValueError(f"d_v must be a non-negative integer (0 = d_k), got {self.d_v!r}")
        for name in ("emb_norm", "output_head", "residual", "use_norm"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.n_kv_heads is not None:
            if isinstance(self.n_kv_heads, bool) or not isinstance(self.n_kv_heads, int) or self.n_kv_heads <= 0:
                raise ValueError(f"n_kv_heads must be a positive integer or None (= n_heads), got {self.n_kv_heads!r}")
            if self.n_heads % self.n_kv_heads != 0:
                ok = [h for h in range(1, self.n_heads + 1) if self.n_heads % h == 0]
                raise ValueError(f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}; "
                                 f"choose n_kv_heads from {ok} (each K/V head serves the same number of query heads)")
        if not isinstance(self.alibi, bool):
            raise ValueError(f"alibi must be True or False, got {self.alibi!r}")
        if self.window is not None and (isinstance(self.window, bool) or not isinstance(self.window, int)
                                        or self.window < 1):
            raise ValueError(f"window must be a positive integer (1 = each token sees only itself) or None "
                             f"(no window), got {self.window!r}")
        if self.attn_score not in ATTN_SCORES:
            raise ValueError(f"attn_score must be one of {ATTN_SCORES}, got {self.attn_score!r}")
        self._check_family_options()
        if self.norm_kind not in NORM_KINDS:
            raise ValueError(f"norm_kind must be one of {NORM_KINDS}, got {self.norm_kind!r}")
        if (isinstance(self.rope_theta, bool) or not isinstance(self.rope_theta, (int, float))
                or not 1.0 < float(self.rope_theta) < float("inf")):
            raise ValueError(f"rope_theta must be a number > 1 (10000 in RoFormer, 100000 in SmolLM2), "
                             f"got {self.rope_theta!r}")
        object.__setattr__(self, "rope_theta", float(self.rope_theta))
        if self.d_ff == 0:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        if self.d_head == 0 and self.d_model % self.n_heads != 0:
            ok = [h for h in range(1, self.d_model + 1) if self.d_model % h == 0]
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                f"choose n_heads from {ok[:12]} or change d_model to a multiple of {self.n_heads}"
            )
        for name, allowed in (("pos_encoding", POS_ENCODINGS), ("norm", NORMS),
                              ("activation", ACTIVATIONS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if not (isinstance(self.ln_eps, float) and 0 < self.ln_eps < 1):
            raise ValueError(f"ln_eps must be a small positive float, got {self.ln_eps!r}")
        if self.final_norm is None:
            object.__setattr__(self, "final_norm", self.norm == "pre" and self.use_norm)
        if self.final_norm and not self.use_norm:
            raise ValueError("final_norm=True needs use_norm=True (use_norm=False removes every layer norm)")
        if self.pos_encoding == "rope" and self.d_k % 2:
            raise ValueError(f"rotary positions rotate pairs of dimensions: d_k = d_model / n_heads = {self.d_k} "
                             f"must be even; change d_model or n_heads")
        if (self.pos_encoding == "rope" and self.rope_freq_factors is not None
                and len(self.rope_freq_factors) != self.d_k // 2):
            raise ValueError(f"rope_freq_factors has {len(self.rope_freq_factors)} values but a head of d_k={self.d_k} "
                             f"has {self.d_k // 2} rotary pairs; give one factor per pair")

    def _check_family_options(self) -> None:
        """ValueError for a bad value of the pretrained families' options."""
        if isinstance(self.d_head, bool) or not isinstance(self.d_head, int) or self.d_head < 0:
            raise ValueError(f"d_head must be a non-negative integer (0 = d_model / n_heads), got {self.d_head!r}")
        for name in ("qkv_bias", "out_bias", "ffn_bias"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True, False or None (= bias), got {getattr(self, name)!r}")
        for name in ("qk_norm", "norm_unit_offset", "sandwich_norm", "mlm_head", "encoder"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("attn_scale", "attn_softcap", "final_softcap", "emb_scale"):
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < float(v) < float("inf"):
                raise ValueError(f"{name} must be a positive number or None, got {v!r}")
            object.__setattr__(self, name, float(v))
        if self.window_layers is not None:
            wl = self.window_layers
            if isinstance(wl, list):
                wl = tuple(wl)
            if (not isinstance(wl, tuple) or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in wl)
                    or len(set(wl)) != len(wl)):
                raise ValueError(f"window_layers must be distinct non-negative layer indices or None (every "
                                 f"layer), got {self.window_layers!r}")
            object.__setattr__(self, "window_layers", tuple(sorted(wl)))
        if self.rope_llama3 is not None:
            r = self.rope_llama3
            if not isinstance(r, (tuple, list)) or len(r) != 4:
                raise ValueError("rope_llama3 must be (factor, low_freq_factor, high_freq_factor, "
                                 f"original_max_position_embeddings), got {r!r}")
            factor, low, high, orig = r
            if not (float(factor) > 0 and float(low) > 0 and float(high) > float(low) and int(orig) > 0):
                raise ValueError(f"rope_llama3 needs factor > 0, 0 < low_freq_factor < high_freq_factor and a "
                                 f"positive original length, got {r!r}")
            object.__setattr__(self, "rope_llama3", (float(factor), float(low), float(high), int(orig)))
        if self.rope_freq_factors is not None:
            r = self.rope_freq_factors
            if (not isinstance(r, (tuple, list)) or not r
                    or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < float(v) < float("inf")
                           for v in r)):
                raise ValueError("rope_freq_factors must be a non-empty sequence of positive numbers (one divisor "
                                 f"per rotary pair, d_k/2 of them) or None, got {r!r}")
            if self.rope_llama3 is not None:
                raise ValueError("rope_freq_factors and rope_llama3 are two spellings of one rescaling; set one "
                                 "(rope_llama3 from a config.json, rope_freq_factors from a GGUF's rope_freqs)")
            object.__setattr__(self, "rope_freq_factors", tuple(float(v) for v in r))
        for name in ("rope_local_theta", "rope_linear"):
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < float(v) < float("inf"):
                raise ValueError(f"{name} must be a positive number or None, got {v!r}")
            object.__setattr__(self, name, float(v))
        if self.rope_local_theta is not None and not self.rope_local_theta > 1:
            raise ValueError(f"rope_local_theta must be a number > 1 (Gemma 3: 10000), got {self.rope_local_theta!r}")
        if self.rope_linear is not None and (self.rope_llama3 is not None or self.rope_freq_factors is not None):
            raise ValueError("rope_linear is one rotary rescaling and rope_llama3 / rope_freq_factors another; "
                             "set one of them")
        if isinstance(self.pos_offset, bool) or not isinstance(self.pos_offset, int) or self.pos_offset < 0:
            raise ValueError(f"pos_offset must be a non-negative integer, got {self.pos_offset!r}")
        for name in ("family", "architecture"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a string, got {getattr(self, name)!r}")

    @property
    def d_k(self) -> int:
        """Per-head query/key width: d_head, or d_model / n_heads when d_head is 0."""
        return self.d_head or self.d_model // self.n_heads

    @property
    def bias_qkv(self) -> bool:
        """Whether W_Q, W_K, W_V have biases (qkv_bias, else bias)."""
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def bias_out(self) -> bool:
        """Whether W_O has a bias (out_bias, else bias)."""
        return self.bias if self.out_bias is None else self.out_bias

    @property
    def bias_ffn(self) -> bool:
        """Whether the FFN's linear layers have biases (ffn_bias, else bias)."""
        return self.bias if self.ffn_bias is None else self.ffn_bias

    @property
    def has_sandwich(self) -> bool:
        """Gemma 2's norms after each sublayer are built: sandwich_norm with pre-norm and norms on."""
        return self.sandwich_norm and self.norm == "pre" and self.use_norm

    @property
    def has_mlm_head(self) -> bool:
        """The masked-LM head is built: mlm_head with an output layer."""
        return self.mlm_head and self.output_head

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of layer `layer`: `window` when the layer is in window_layers (or
        window_layers is None), else None (global attention)."""
        if self.window is None or (self.window_layers is not None and layer not in self.window_layers):
            return None
        return self.window

    def layer_rope(self, layer: int | None
                   ) -> tuple[float, tuple[float, float, float, int] | None, tuple[float, ...] | None, float | None]:
        """The rotary parameters of layer `layer` (None: a layer alone, a global one): (theta,
        llama3, freq_factors, linear), the arguments of model.layers.rope_tables. Gemma 3's local
        layers (those with a window, when rope_local_theta is set) turn with rope_local_theta and no
        rescaling; every other layer with rope_theta and the model's rescaling."""
        if self.rope_local_theta is not None and layer is not None and self.layer_window(layer) is not None:
            return self.rope_local_theta, None, None, None
        return self.rope_theta, self.rope_llama3, self.rope_freq_factors, self.rope_linear

    @property
    def kv_heads(self) -> int:
        """Number of key/value heads: n_kv_heads, or n_heads without grouped-query attention."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def d_value(self) -> int:
        """Per-head value width (the width of each head's output Z_j): d_v, or d_k when d_v is 0."""
        return self.d_v or self.d_k

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        if not isinstance(d, dict):
            raise ValueError(f"a model config must be a JSON object, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; known keys are {sorted(names)}")
        return cls(**d)

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)


def param_breakdown(cfg: ModelConfig) -> dict[str, int]:
    """Parameter count per part, from the config alone (no model is allocated)."""
    D, F, V, L = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_layers
    bq, bo, bf = int(cfg.bias_qkv), int(cfg.bias_out), int(cfg.bias_ffn)  # each 1 or 0 (= bias by default)
    ln = D if cfg.norm_kind == "rmsnorm" else 2 * D  # RMSNorm has gamma only
    HQ = cfg.n_heads * cfg.d_k  # width of Q (D unless d_head is set)
    kv = cfg.kv_heads * cfg.d_k  # width of K (D without grouped-query attention)
    kv_v = cfg.kv_heads * cfg.d_value  # width of V (= kv when d_v = d_k)
    HV = cfg.n_heads * cfg.d_value  # width of the concatenated heads (= D when d_v = d_k)
    # W_Q (HQ×D), W_K (kv×D), W_V (kv_v×D), W_O (D×HV), + biases
    attn = (D * HQ + bq * HQ) + (D * kv + bq * kv) + (D * kv_v + bq * kv_v) + (HV * D + bo * D)
    if cfg.attn_score == "additive":  # Bahdanau: per head W_q, W_k (d_k × d_k) and v (d_k)
        attn += cfg.n_heads * (2 * cfg.d_k * cfg.d_k + cfg.d_k)
    ffn = D * F + bf * F + F * D + bf * D
    if cfg.activation in GATED:
        ffn += D * F + bf * F  # W_gate beside W_up (fc1)
    norms_per_layer = 4 if cfg.has_sandwich else 2  # Gemma 2: a norm after each sublayer too
    parts = {
        "token_embedding": V * D,
        "position_embedding": (cfg.max_len + cfg.pos_offset) * D if cfg.pos_encoding == "learned" else 0,
        "attention": L * attn,
        "ffn": L * ffn,
        "layer_norm": (L * norms_per_layer * ln if cfg.use_norm else 0) + (ln if cfg.final_norm else 0),
        "output": 0 if (cfg.tie_weights or not cfg.output_head) else V * D,
    }
    # BERT's parts appear only when present, so today's models keep their breakdown unchanged
    if cfg.type_vocab_size:
        parts["token_type_embedding"] = cfg.type_vocab_size * D  # type_vocab_size × d_model
    if cfg.emb_norm:
        parts["embedding_norm"] = ln  # gamma and beta of the embedding LayerNorm
    if cfg.qk_norm:
        parts["qk_norm"] = L * 2 * cfg.d_k  # Qwen3: gamma of the q and k RMSNorms (d_k each)
    if cfg.has_mlm_head:
        parts["mlm_head"] = D * D + D + 2 * D + V  # dense W, b; LayerNorm gamma, beta; logit bias
    return parts


def param_count(cfg: ModelConfig) -> int:
    """Total number of parameters of Transformer(cfg), computed without allocating it."""
    return sum(param_breakdown(cfg).values())


PRESETS: dict[str, ModelConfig] = {
    # The app's "fresh weights" default: small enough to trace in a few ms.
    "tiny": ModelConfig(vocab_size=64, d_model=64, n_heads=4, n_layers=2, max_len=128),
    # GPT-2 small shapes: 124,439,808 parameters (learned positions, biases, tied output, pre-LN).
    "gpt2-small": ModelConfig(vocab_size=50257, d_model=768, n_heads=12, n_layers=12,
                              d_ff=3072, max_len=1024, pos_encoding="learned", norm="pre",
                              activation="gelu", tie_weights=True, bias=True),
    # The 2017 paper's base model (post-LN, ReLU, sinusoidal), decoder-only shapes.
    "vaswani-base": ModelConfig(vocab_size=37000, d_model=512, n_heads=8, n_layers=6,
                                d_ff=2048, max_len=512, pos_encoding="sinusoidal", norm="post",
                                activation="relu", tie_weights=True),
}
