"""Transformer building blocks. Each returns (y, trace); with record=False the trace is None but
the arithmetic is identical (one code path). Modules never store activations.

The attention layer's variants (rotary positions, a sliding window, ALiBi, the additive score)
are hooks (model.hooks) chosen once from the config when it is built (attention_variants); its
forward calls them, and a pass's own hooks, at fixed points."""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import alibi_bias, alibi_slopes, attend_fields, window_allowed
from .config import ModelConfig
from .hooks import AttentionCall, AttentionHook, HookSet, PassContext, RopeTables
from .trace import AttentionTrace, BlockTrace, FFNTrace, LayerNormTrace, NormTrace


def sinusoidal_table(max_len: int, d_model: int, *, start: int = 0, dtype: torch.dtype = torch.float32) -> Tensor:
    """(max_len, d_model) rows for positions start .. start + max_len - 1:
    PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same). Computed in float64 and
    returned as `dtype`: float32 for the model; float64 for the hand-checked tables of the
    classroom (cos(0.01) = 0.99995 at 4 decimals, not float32's 0.9999)."""
    pos = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]  # (T, 1)
    i2 = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(D/2),) = 2i
    angle = pos / torch.pow(10000.0, i2 / d_model)  # (T, ceil(D/2))
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.to(dtype)


def rope_tables(positions: Tensor, d_k: int, theta: float,
                llama3: tuple[float, float, float, int] | None = None,
                freq_factors: tuple[float, ...] | None = None, linear: float | None = None) -> RopeTables:
    """Rotary tables for absolute `positions` (T,) long: (cos, sin), each (T, d_k), float32.
    Pair i of a head (dimensions i and i + d_k/2, HF Llama's "rotate_half" layout) turns by the
    angle position * inv_freq_i, inv_freq_i = theta^(-2i/d_k) (rope_inv_freq: Llama 3.1's scaling
    when llama3 is given, per-pair divisors when freq_factors is, every frequency divided by
    `linear` when it is). The arithmetic is HF's (float32 inv_freq, float32 angles)."""
    inv_freq = rope_inv_freq(d_k, theta, llama3, freq_factors, linear)  # (d_k/2,)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (T, d_k/2)
    emb = torch.cat((angles, angles), dim=-1)  # (T, d_k)
    return emb.cos(), emb.sin()


@functools.lru_cache(maxsize=64)
def rope_inv_freq(d_k: int, theta: float, llama3: tuple[float, float, float, int] | None = None,
                  freq_factors: tuple[float, ...] | None = None, linear: float | None = None) -> Tensor:
    """(d_k/2,) float32 rotary frequencies theta^(-2i/d_k). llama3 = (factor, low_freq_factor,
    high_freq_factor, original_max_position_embeddings): Llama 3.1's rescaling, step for step as
    transformers' _compute_llama3_parameters (same float32 ops in the same order): wavelengths
    longer than original/low_freq_factor are divided by factor, shorter than original/high_freq_factor
    kept, those between interpolated smoothly.
    freq_factors (d_k/2 numbers): the same rescaling as a Llama 3.1+ GGUF stores it (llama.cpp's
    rope_freqs tensor, ModelConfig.rope_freq_factors): pair i's frequency divided by factor i, as
    llama.cpp's ggml_rope_ext divides each pair's angle by its freq_factor (1 kept, `factor` for
    long wavelengths, 1 / ((1 - smooth) / factor + smooth) between). The base frequencies are
    still HF's float32 ones; the division is one float32 op, so the smoothed pairs agree with the
    llama3 path to a few float32 roundings (not bit for bit). Not combined with llama3
    (ModelConfig refuses both). linear: linear scaling (position interpolation, transformers'
    rope_type "linear", Gemma 3's global layers in its larger models): every frequency divided by
    the factor, one float32 division as transformers' `inv_freq /= factor`. A constant of the
    config: made once and shared by every pass (read-only)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, d_k, 2, dtype=torch.int64).to(torch.float32) / d_k))  # (d_k/2,)
    if linear is not None:
        return inv_freq / linear  # (d_k/2,)
    if freq_factors is not None:
        if len(freq_factors) != inv_freq.shape[0]:
            raise ValueError(f"rotary frequency factors: {len(freq_factors)} given, but a head of d_k={d_k} "
                             f"has {inv_freq.shape[0]} pairs")
        return inv_freq / torch.tensor(freq_factors, dtype=torch.float32)  # (d_k/2,)
    if llama3 is None:
        return inv_freq
    factor, low_freq_factor, high_freq_factor, old_context_len = llama3
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def layer_rope_tables(cfg: ModelConfig, positions: Tensor) -> list[RopeTables]:
    """The rotary tables of each layer for one pass over `positions` (T,): one (cos, sin) pair per
    distinct set of rotary parameters (cfg.layer_rope: Gemma 3's local and global layers turn with
    different bases), shared by the layers that use it."""
    made: dict = {}
    out = []
    for layer in range(cfg.n_layers):
        spec = cfg.layer_rope(layer)
        if spec not in made:
            made[spec] = rope_tables(positions, cfg.d_k, *spec)  # (T, d_k) x 2
        out.append(made[spec])
    return out


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last axis: multiplying by i on pairs (j, j + d/2)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each pair (j, j + d_k/2) of x (..., T, d_k) by its position's angle: x cos + rotate_half(x) sin."""
    return x * cos + rotate_half(x) * sin


def layer_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
               ) -> LayerNormTrace:
    """Layer norm over the last axis, every step recorded. The output is F.layer_norm's own
    (bit-exact with torch and HF models: the same kernel, torch.native_layer_norm), and so are the
    statistics: that kernel also returns the mean and rstd = 1/sqrt(var + eps) it used; both are
    recorded, and `var` = 1/rstd^2 - eps (the biased variance F.layer_norm computed, to float
    rounding) is computed from rstd on first read (no extra pass over the values, as Tensor.var or
    a mean of squares would take, and no work in the forward for a field few readers look at).
    `normalized` = (x - mean) * rstd = (x - mean) / sqrt(var + eps), before gamma/beta, is
    F.layer_norm without gamma/beta; the forward does not need it, so it is computed on first read
    (trace.derived: the same kernel on the recorded input and eps, the same values). The one layer
    norm: the LayerNorm module, the classroom analyses and the calculator call it."""
    out, mean, rstd = torch.native_layer_norm(x, x.shape[-1:], weight, bias, eps)  # (B, T, D), (B, T, 1) x2
    # var = 1/rstd^2 - eps and normalized: on first read (trace.derived), not in the forward
    return LayerNormTrace(input=x, mean=mean, var=None, normalized=None, output=out,
                          gamma=weight, beta=bias, eps=eps, rstd=rstd)


class LayerNorm(nn.Module):
    """LayerNorm over the last axis, recording mean and (biased) variance as F.layer_norm."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))  # gamma (D,)
        self.bias = nn.Parameter(torch.zeros(d))  # beta (D,)

    def forward(self, x: Tensor, record: bool = True) -> tuple[Tensor, LayerNormTrace | None]:
        if not record:
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps), None  # (B, T, D)
        tr = layer_norm(x, self.weight, self.bias, self.eps)
        return tr.output, tr


class RMSNorm(nn.Module):
    """RMSNorm (Llama): gamma * x / sqrt(mean(x^2) + eps). No mean subtracted, no beta.
    unit_offset (Gemma): the scale is (1 + w), the stored weight w an offset from 1."""

    def __init__(self, d: int, eps: float = 1e-5, *, unit_offset: bool = False):
        super().__init__()
        self.eps = eps
        self.unit_offset = unit_offset
        self.weight = nn.Parameter(torch.ones(d))  # gamma (D,); Gemma: gamma - 1

    def forward(self, x: Tensor, record: bool = True) -> tuple[Tensor, NormTrace | None]:
        # HF LlamaRMSNorm's arithmetic, in its order (float32 models): parity to the last bit
        mean_sq = x.pow(2).mean(-1, keepdim=True)  # (B, T, 1)
        normalized = x * torch.rsqrt(mean_sq + self.eps)  # (B, T, D)
        gamma = (1.0 + self.weight) if self.unit_offset else self.weight  # (D,) Gemma2RMSNorm's (1 + w)
        out = gamma * normalized  # (B, T, D)
        if not record:
            return out, None
        # normalized (a temporary here) is recomputed from input and mean_sq on first read (trace.derived)
        return out, NormTrace(input=x, mean_sq=mean_sq, normalized=None, output=out, gamma=gamma, eps=self.eps)


def make_norm(cfg: ModelConfig, d: int | None = None) -> LayerNorm | RMSNorm:
    """The normalisation layer the config asks for (cfg.norm_kind): LayerNorm unless "rmsnorm"
    (with Gemma's (1 + w) when cfg.norm_unit_offset). d: its width (None = d_model)."""
    d = cfg.d_model if d is None else d
    if cfg.norm_kind == "rmsnorm":
        return RMSNorm(d, cfg.ln_eps, unit_offset=cfg.norm_unit_offset)
    return LayerNorm(d, cfg.ln_eps)


class NoNorm(nn.Module):
    """The identity in place of a LayerNorm (cfg.use_norm False): no parameters, no trace."""

    def forward(self, x: Tensor, record: bool = True) -> tuple[Tensor, None]:
        return x, None


@functools.lru_cache(maxsize=64)
def kv_head_index(n_heads: int, rep: int) -> Tensor:
    """(H,) long: the K/V head each query head reads under grouped-query attention, h // rep
    (HF's repeat_kv). A constant of the config: made once and shared by every trace (read-only)."""
    return torch.arange(n_heads) // rep


def repeat_kv(kv: Tensor, rep: int) -> Tensor:
    """K or V (B, H_kv, T, d) -> (B, H_kv * rep, T, d): each K/V head repeated for the rep query
    heads that read it (h // rep), by a broadcast view and one copy, as HF's repeat_kv. The same
    values as trace.kv_for_heads (index_select on kv_head_index), with one strided copy."""
    B, H_kv, T, d = kv.shape
    return kv[:, :, None].expand(B, H_kv, rep, T, d).reshape(B, H_kv * rep, T, d)


# ---- attention variants: options of the model, chosen once when a layer is built (model.hooks) ----

class Rotary(AttentionHook):
    """Rotary positions (cfg.pos_encoding "rope", Llama): q and k turned by their positions'
    angles before the scores; records q_pre_rope, k_pre_rope (what they were before). The tables
    come with the pass (Transformer.run makes them once for every layer); a layer called alone
    rotates positions 0 .. Tq-1."""

    def __init__(self, d_k: int, theta: float, llama3: tuple[float, float, float, int] | None = None,
                 freq_factors: tuple[float, ...] | None = None, linear: float | None = None):
        self.d_k, self.theta, self.llama3, self.freq_factors, self.linear = d_k, theta, llama3, freq_factors, linear

    def qk(self, q: Tensor, k: Tensor, c: AttentionCall) -> tuple[Tensor, Tensor]:
        rope = (c.rope if c.rope is not None
                else rope_tables(torch.arange(q.shape[2]), self.d_k, self.theta, self.llama3, self.freq_factors,
                                 self.linear))
        c.fields["q_pre_rope"], c.fields["k_pre_rope"] = q, k
        return apply_rope(q, *rope), apply_rope(k, *rope)  # rotated by their positions


class SlidingWindow(AttentionHook):
    """Sliding-window (local) attention (cfg.window): query i may attend to key j only when
    |i - j| < window; the band is AND-ed into the mask and recorded as `band` (Tq, Tk)."""

    def __init__(self, window: int):
        self.window = window

    def scores(self, c: AttentionCall) -> None:
        band = window_allowed(c.t_q, c.t_k, self.window)  # (Tq, Tk); row i sits at position Tk - Tq + i
        c.fields["band"] = band
        c.mask(band)


class AlibiBias(AttentionHook):
    """ALiBi (cfg.alibi, Press et al. 2022): -slope_h * |i - j| added to head h's scaled scores;
    records `alibi_slopes` (H,), and attend records the term as `bias` (H, Tq, Tk)."""

    def __init__(self, n_heads: int):
        self.n_heads = n_heads

    def scores(self, c: AttentionCall) -> None:
        slopes = alibi_slopes(self.n_heads)  # (H,)
        c.fields["alibi_slopes"] = slopes
        c.add_bias(alibi_bias(slopes, c.t_q, c.t_k))  # (H, Tq, Tk)


class AdditiveScore(AttentionHook):
    """Bahdanau's additive score (cfg.attn_score "additive"): e_ij = v_h . tanh(q_i W_q + k_j W_k)
    in place of q . k, and no 1/sqrt(d_k) (tanh bounds each term). Its parameters are the
    layer's add_wq, add_wk (H, d_k, d_a) and add_v (H, d_a), d_a = d_k (the checkpoint's names),
    registered after the projections (every other model's parameter order unchanged)."""

    def __init__(self, n_heads: int, d_k: int):
        self.n_heads, self.d_k = n_heads, d_k

    def attach(self, layer: nn.Module) -> None:
        H, dk = self.n_heads, self.d_k
        layer.add_wq = nn.Parameter(torch.empty(H, dk, dk))  # (H, d_k, d_a)
        layer.add_wk = nn.Parameter(torch.empty(H, dk, dk))  # (H, d_k, d_a)
        layer.add_v = nn.Parameter(torch.empty(H, dk))  # (H, d_a)

    def scores(self, c: AttentionCall) -> None:
        c.energy_weights, c.scale = (c.layer.add_wq, c.layer.add_wk, c.layer.add_v), 1.0


class QKNorm(AttentionHook):
    """Qwen3's q/k normalisation (cfg.qk_norm): an RMSNorm over each head's query and key (d_k
    weights, shared by the heads), before the rotation (qk point, ahead of Rotary). Its parameters
    are the layer's q_norm and k_norm (registered after the projections); records q_pre_norm,
    k_pre_norm (the projections' output), and q_pre_rope/k_pre_rope are then the normalised ones."""

    def __init__(self, d_k: int, eps: float, unit_offset: bool = False):
        self.d_k, self.eps, self.unit_offset = d_k, eps, unit_offset

    def attach(self, layer: nn.Module) -> None:
        layer.q_norm = RMSNorm(self.d_k, self.eps, unit_offset=self.unit_offset)  # (d_k,); Gemma 3: (1 + w)
        layer.k_norm = RMSNorm(self.d_k, self.eps, unit_offset=self.unit_offset)  # (d_k,)

    def qk(self, q: Tensor, k: Tensor, c: AttentionCall) -> tuple[Tensor, Tensor]:
        c.fields["q_pre_norm"], c.fields["k_pre_norm"] = q, k
        return c.layer.q_norm(q, False)[0], c.layer.k_norm(k, False)[0]  # (B, H, Tq, d_k), (B, H_kv, T, d_k)


class SoftCap(AttentionHook):
    """Gemma 2's attention soft-capping (cfg.attn_softcap): the scaled scores s become
    cap * tanh(s / cap) before the mask and the softmax (transformers' order: / cap, tanh, * cap),
    so no score exceeds cap in size. Recorded as `softcap`; `masked` holds the capped scores."""

    def __init__(self, cap: float):
        self.cap = cap

    def scores(self, c: AttentionCall) -> None:
        cap = self.cap
        c.fields["softcap"] = cap
        c.maps.append(lambda s: torch.tanh(s / cap) * cap)  # (B, H, Tq, Tk)


def attention_variants(cfg: ModelConfig, *, cross: bool = False, layer: int | None = None
                       ) -> tuple[AttentionHook, ...]:
    """The hooks every call of an attention layer of this config runs, chosen once when it is
    built. cross: a cross-attention layer (keys from the encoder's memory): rotary positions,
    ALiBi and a window relate a sequence to itself, so only the score function applies there.
    layer: the block's index, for options that differ per layer (Gemma 2's local layers:
    cfg.layer_window); None = a layer alone (every per-layer option on)."""
    hooks: list[AttentionHook] = []
    if not cross:
        if cfg.qk_norm:  # before the rotation (Qwen3; Gemma 3 with its (1 + w))
            hooks.append(QKNorm(cfg.d_k, cfg.ln_eps, cfg.norm_unit_offset))
        if cfg.pos_encoding == "rope":  # this layer's base and rescaling (Gemma 3: local or global)
            hooks.append(Rotary(cfg.d_k, *cfg.layer_rope(layer)))
        window = cfg.window if layer is None else cfg.layer_window(layer)
        if window is not None:
            hooks.append(SlidingWindow(window))
        if cfg.alibi:
            hooks.append(AlibiBias(cfg.n_heads))
    if cfg.attn_score == "additive":
        hooks.append(AdditiveScore(cfg.n_heads, cfg.d_k))
    if cfg.attn_softcap is not None:
        hooks.append(SoftCap(cfg.attn_softcap))
    return tuple(hooks)


class MultiHeadAttention(nn.Module):
    """Q = X W_Q^T + b, split into H heads of d_k; attend per head; concat; W_O.
    Grouped-query attention (cfg.n_kv_heads): K and V have H_kv heads; query head h reads K/V head
    h // (H / H_kv). Everything else a model or a pass changes (rotary positions, ALiBi, a window,
    the additive score; interventions; the KV cache) is a hook (model.hooks) the forward calls at
    its fixed points. cross=True: a cross-attention layer (seq2seq), without the positional variants."""

    def __init__(self, cfg: ModelConfig, *, cross: bool = False, layer: int | None = None):
        super().__init__()
        D = cfg.d_model
        self.n_heads, self.d_k, self.scale_scores = cfg.n_heads, cfg.d_k, cfg.scale_scores
        self.n_kv_heads = cfg.kv_heads
        kv = self.n_kv_heads * cfg.d_k  # D without grouped-query attention
        self.q_proj = nn.Linear(D, cfg.n_heads * cfg.d_k, bias=cfg.bias_qkv)  # (H*d_k, D): D x D unless d_head
        self.k_proj = nn.Linear(D, kv, bias=cfg.bias_qkv)
        self.v_proj = nn.Linear(D, self.n_kv_heads * cfg.d_value, bias=cfg.bias_qkv)  # (H_kv*d_v, D)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.d_value, D, bias=cfg.bias_out)  # (D, H*d_v)
        if cfg.attn_scale is not None:  # Gemma 2: query_pre_attn_scalar^-0.5
            self.scale = cfg.attn_scale
        else:
            self.scale = 1.0 / math.sqrt(self.d_k) if self.scale_scores else 1.0
        # The model's variants, chosen once (their parameters registered after the projections)
        self.variants = HookSet(attention_variants(cfg, cross=cross, layer=layer))
        for hook in self.variants.all:
            hook.attach(self)

    def split(self, x: Tensor, heads: int | None = None) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, heads or self.n_heads, -1).transpose(1, 2)  # (B, H, T, d_k), or d_v for values

    def forward(self, x_q: Tensor, x_kv: Tensor | None = None, allowed: Tensor | None = None,
                record: bool = True, *, ctx: PassContext | None = None) -> tuple[Tensor, AttentionTrace | None]:
        """x_q (B, Tq, D) attends over x_kv (B, Tk, D) (None: itself). ctx: this pass's rotary
        tables and hooks (interventions, the KV cache: model.hooks), after the layer's variants."""
        hooks = self.variants if ctx is None else self.variants.plus(ctx.hooks)
        c = AttentionCall(self, None if ctx is None else ctx.rope, allowed, self.scale)
        x_kv = x_q if x_kv is None else x_kv
        q = self.split(self.q_proj(x_q))  # (B, H, Tq, d_k)
        k = self.split(self.k_proj(x_kv), self.n_kv_heads)  # (B, H_kv, Tk, d_k)
        v = self.split(self.v_proj(x_kv), self.n_kv_heads)  # (B, H_kv, Tk, d_v)
        for h in hooks.qk:  # 1. the new positions' queries and keys (rotary positions)
            q, k = h.qk(q, k, c)
        for h in hooks.kv:  # 2. the whole context's keys and values (a KV cache in front)
            k, v = h.kv(k, v, c)
        k_all, v_all = k, v
        if self.n_kv_heads != self.n_heads:
            rep = self.n_heads // self.n_kv_heads
            c.fields["kv_head"] = kv_head_index(self.n_heads, rep)  # (H,)
            k_all, v_all = repeat_kv(k, rep), repeat_kv(v, rep)  # (B, H, Tk, .) query head h reads kv_head[h]
        c.t_q, c.t_k = q.shape[2], k.shape[2]  # query row i sits at position Tk - Tq + i
        for h in hooks.scores:  # 3. before the softmax: mask, bias, scale, score function
            h.scores(c)
        a = attend_fields(q, k_all, v_all, allowed=c.allowed, scale=c.scale, bias=c.bias,
                          energy_weights=c.energy_weights, maps=c.maps)
        if hooks.weights:  # 4. after the softmax: new weights give new head outputs
            w = a["weights"]
            for h in hooks.weights:
                w = h.weights(w, c)  # (B, H, Tq, Tk)
            if w is not a["weights"]:
                a["weights"], a["heads"] = w, w @ v_all  # (B, H, Tq, d_v)
        heads = a["heads"]  # (B, H, Tq, d_v)
        for h in hooks.heads:  # 5. the head outputs that enter W_O
            heads = h.heads(heads, c)
        a["heads"] = heads
        B, H, Tq, dv = heads.shape
        concat = heads.transpose(1, 2).reshape(B, Tq, H * dv)  # (B, Tq, H*d_v)
        out = self.o_proj(concat)  # (B, Tq, D)
        if not record:
            return out, None
        return out, AttentionTrace(**{**a, "k": k, "v": v, "concat": concat, "output": out, **c.fields})


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU's tanh approximation (GPT-2's gelu_new, Gemma's gelu_pytorch_tanh: the same function;
    transformers computes gelu_new by its formula, equal to float rounding)."""
    return F.gelu(x, approximate="tanh")


ACTIVATION_FNS = {"gelu": F.gelu, "relu": F.relu, "gelu_tanh": gelu_tanh}
GATE_FNS = {"swiglu": F.silu, "geglu": gelu_tanh}  # the gate's function of each gated unit


class FeedForward(nn.Module):
    """Position-wise FFN: the same W_1, W_2 at every position. D -> d_ff -> D.
    Gated units: fc2(act(x W_gate^T) * (x W_up^T)), W_up = fc1; act = silu for SwiGLU
    (cfg.activation "swiglu", Llama), GELU's tanh approximation for GeGLU ("geglu", Gemma)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias_ffn)
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias_ffn)
        gated = cfg.activation in GATE_FNS
        self.act = GATE_FNS[cfg.activation] if gated else ACTIVATION_FNS[cfg.activation]
        # registered after fc1/fc2: the parameter order of every other model is unchanged
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias_ffn) if gated else None

    def forward(self, x: Tensor, record: bool = True) -> tuple[Tensor, FFNTrace | None]:
        if self.gate is not None:  # SwiGLU / GeGLU
            gate = self.gate(x)  # (B, T, d_ff)
            up = self.fc1(x)  # (B, T, d_ff)
            act = self.act(gate)  # (B, T, d_ff)
            post = act * up if act.requires_grad else act.mul_(up)  # (B, T, d_ff) (no grad: in place)
            out = self.fc2(post)  # (B, T, D)
            return out, (FFNTrace(input=x, hidden_pre=gate, hidden_post=post, output=out, gate=gate, up=up)
                         if record else None)
        pre = self.fc1(x)  # (B, T, d_ff)
        post = self.act(pre)  # (B, T, d_ff)
        out = self.fc2(post)  # (B, T, D)
        return out, (FFNTrace(input=x, hidden_pre=pre, hidden_post=post, output=out) if record else None)


class Block(nn.Module):
    """One transformer block. pre-LN (GPT-2): x + Attn(LN(x)), then + FFN(LN(.)).
    post-LN (2017): LN(x + Attn(x)), then LN(. + FFN(.)).
    sandwich (Gemma 2, cfg.sandwich_norm): x + N1'(Attn(N1(x))), then + N2'(FFN(N2(.))).
    layer: the block's index (per-layer options such as Gemma 2's local layers)."""

    def __init__(self, cfg: ModelConfig, layer: int | None = None):
        super().__init__()
        self.pre, self.residual = cfg.norm == "pre", cfg.residual
        self.ln1 = make_norm(cfg) if cfg.use_norm else NoNorm()
        self.attn = MultiHeadAttention(cfg, layer=layer)
        self.ln2 = make_norm(cfg) if cfg.use_norm else NoNorm()
        self.ffn = FeedForward(cfg)
        # registered last: the parameter order of every other model is unchanged
        self.sandwich = cfg.has_sandwich
        if self.sandwich:
            self.ln1_post = make_norm(cfg)  # on the attention's output, before the residual add
            self.ln2_post = make_norm(cfg)  # on the FFN's output, before the residual add

    def forward(self, x: Tensor, allowed: Tensor | None, record: bool = True, *,
                ctx: PassContext | None = None) -> tuple[Tensor, BlockTrace | None]:
        """ctx: this pass's rotary tables and hooks for this layer's attention (model.hooks)."""
        ln1_post = ln2_post = None
        if self.pre:
            h, ln1 = self.ln1(x, record)  # (B, T, D)
            a, at = self.attn(h, allowed=allowed, record=record, ctx=ctx)  # (B, T, D)
            if self.sandwich:
                a, ln1_post = self.ln1_post(a, record)  # (B, T, D)
            mid = x + a if self.residual else a  # (B, T, D)
            h2, ln2 = self.ln2(mid, record)
            f, ft = self.ffn(h2, record)
            if self.sandwich:
                f, ln2_post = self.ln2_post(f, record)  # (B, T, D)
            out = mid + f if self.residual else f  # (B, T, D)
        else:
            a, at = self.attn(x, allowed=allowed, record=record, ctx=ctx)
            mid, ln1 = self.ln1(x + a if self.residual else a, record)  # (B, T, D)
            f, ft = self.ffn(mid, record)
            out, ln2 = self.ln2(mid + f if self.residual else f, record)  # (B, T, D)
        if not record:
            return out, None
        return out, BlockTrace(input=x, ln1=ln1, attn=at, resid_mid=mid, ln2=ln2, ffn=ft, resid_out=out,
                               ln1_post=ln1_post, ln2_post=ln2_post)
