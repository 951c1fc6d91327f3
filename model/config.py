"""ModelConfig: the architecture of a Transformer, validated, with presets.

Everything here is plain Python: the parameter count is computed from the config alone, without
allocating a model (so the GPT-2 small preset can be inspected on any laptop).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

POS_ENCODINGS = ("sinusoidal", "learned", "rope", "none")  # "none": no position vector (order-blind demo)
NORMS = ("pre", "post")
ACTIVATIONS = ("gelu", "relu", "swiglu")
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
    # Attention variants (issue 20; defaults keep every model bit-identical):
    alibi: bool = False  # ALiBi (Press et al. 2022): add -slope_h·|i - j| to head h's scores
    #                      (layers.alibi_slopes); the paper pairs it with pos_encoding="none"
    window: int | None = None  # sliding-window (local) attention: query i sees keys j with
    #                            |i - j| < window (causal: i - window < j <= i); None = everything
    attn_score: str = "dot"  # "dot" (q·k, scaled) | "additive" (Bahdanau: v_h·tanh(W_q q + W_k k))

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
        if self.norm_kind not in NORM_KINDS:
            raise ValueError(f"norm_kind must be one of {NORM_KINDS}, got {self.norm_kind!r}")
        if (isinstance(self.rope_theta, bool) or not isinstance(self.rope_theta, (int, float))
                or not 1.0 < float(self.rope_theta) < float("inf")):
            raise ValueError(f"rope_theta must be a number > 1 (10000 in RoFormer, 100000 in SmolLM2), "
                             f"got {self.rope_theta!r}")
        object.__setattr__(self, "rope_theta", float(self.rope_theta))
        if self.d_ff == 0:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        if self.d_model % self.n_heads != 0:
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

    @property
    def d_k(self) -> int:
        """Per-head query/key/value width: d_model / n_heads."""
        return self.d_model // self.n_heads

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
    b = 1 if cfg.bias else 0
    ln = D if cfg.norm_kind == "rmsnorm" else 2 * D  # RMSNorm has gamma only
    kv = cfg.kv_heads * cfg.d_k  # width of K (D without grouped-query attention)
    kv_v = cfg.kv_heads * cfg.d_value  # width of V (= kv when d_v = d_k)
    HV = cfg.n_heads * cfg.d_value  # width of the concatenated heads (= D when d_v = d_k)
    # W_Q (D×D), W_K (kv×D), W_V (kv_v×D), W_O (D×HV), + biases
    attn = (D * D + b * D) + (D * kv + b * kv) + (D * kv_v + b * kv_v) + (HV * D + b * D)
    if cfg.attn_score == "additive":  # Bahdanau: per head W_q, W_k (d_k × d_k) and v (d_k)
        attn += cfg.n_heads * (2 * cfg.d_k * cfg.d_k + cfg.d_k)
    ffn = D * F + b * F + F * D + b * D
    if cfg.activation == "swiglu":
        ffn += D * F + b * F  # W_gate beside W_up (fc1)
    parts = {
        "token_embedding": V * D,
        "position_embedding": cfg.max_len * D if cfg.pos_encoding == "learned" else 0,
        "attention": L * attn,
        "ffn": L * ffn,
        "layer_norm": (L * 2 * ln if cfg.use_norm else 0) + (ln if cfg.final_norm else 0),  # RMSNorm's too
        "output": 0 if (cfg.tie_weights or not cfg.output_head) else V * D,
    }
    # BERT's parts appear only when present, so today's models keep their breakdown unchanged
    if cfg.type_vocab_size:
        parts["token_type_embedding"] = cfg.type_vocab_size * D  # type_vocab_size × d_model
    if cfg.emb_norm:
        parts["embedding_norm"] = ln  # gamma and beta of the embedding LayerNorm
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
