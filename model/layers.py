"""Transformer building blocks. Each returns (y, trace); with record=False the trace is None but
the arithmetic is identical (one code path). Modules never store activations."""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import alibi_bias, alibi_slopes, attend_fields, combine, window_allowed
from .config import ModelConfig
from .intervene import LayerIntervention, apply_to_heads, edited_weights
from .trace import AttentionTrace, BlockTrace, FFNTrace, LayerNormTrace, NormTrace

# (cos, sin), each (T, d_k): the rotary tables of the positions in this pass (model.rope)
RopeTables = tuple[Tensor, Tensor]


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


def rope_tables(positions: Tensor, d_k: int, theta: float) -> RopeTables:
    """Rotary tables for absolute `positions` (T,) long: (cos, sin), each (T, d_k), float32.
    Pair i of a head (dimensions i and i + d_k/2, HF Llama's "rotate_half" layout) turns by the
    angle position * theta^(-2i/d_k). The arithmetic is HF's (float32 inv_freq, float32 angles)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, d_k, 2, dtype=torch.int64).to(torch.float32) / d_k))  # (d_k/2,)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (T, d_k/2)
    emb = torch.cat((angles, angles), dim=-1)  # (T, d_k)
    return emb.cos(), emb.sin()


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
    """RMSNorm (Llama): gamma * x / sqrt(mean(x^2) + eps). No mean subtracted, no beta."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))  # gamma (D,)

    def forward(self, x: Tensor, record: bool = True) -> tuple[Tensor, NormTrace | None]:
        # HF LlamaRMSNorm's arithmetic, in its order (float32 models): parity to the last bit
        mean_sq = x.pow(2).mean(-1, keepdim=True)  # (B, T, 1)
        normalized = x * torch.rsqrt(mean_sq + self.eps)  # (B, T, D)
        out = self.weight * normalized  # (B, T, D)
        if not record:
            return out, None
        # normalized (a temporary here) is recomputed from input and mean_sq on first read (trace.derived)
        return out, NormTrace(input=x, mean_sq=mean_sq, normalized=None, output=out, gamma=self.weight, eps=self.eps)


def make_norm(cfg: ModelConfig) -> LayerNorm | RMSNorm:
    """The normalisation layer the config asks for (cfg.norm_kind): LayerNorm unless "rmsnorm"."""
    if cfg.norm_kind == "rmsnorm":
        return RMSNorm(cfg.d_model, cfg.ln_eps)
    return LayerNorm(cfg.d_model, cfg.ln_eps)
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


class MultiHeadAttention(nn.Module):
    """Q = X W_Q^T + b, split into H heads of d_k; attend per head; concat; W_O.
    Grouped-query attention (cfg.n_kv_heads): K and V have H_kv heads; query head h reads K/V head
    h // (H / H_kv). Rotary positions: q and k are rotated (tables from the caller) before the scores.
    A KV cache (`past`: this layer's cached k, v) is put in front of the new keys and values."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        D = cfg.d_model
        self.n_heads, self.d_k, self.scale_scores = cfg.n_heads, cfg.d_k, cfg.scale_scores
        self.n_kv_heads = cfg.kv_heads
        kv = self.n_kv_heads * cfg.d_k  # D without grouped-query attention
        self.q_proj = nn.Linear(D, D, bias=cfg.bias)
        self.k_proj = nn.Linear(D, kv, bias=cfg.bias)
        self.v_proj = nn.Linear(D, self.n_kv_heads * cfg.d_value, bias=cfg.bias)  # (H_kv*d_v, D)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.d_value, D, bias=cfg.bias)  # (D, H*d_v)
        # Attention variants (issue 20), for self-attention: ALiBi biases, a sliding window, and
        # Bahdanau's additive score (its parameters registered last: other models' order unchanged)
        self.alibi, self.window = cfg.alibi, cfg.window
        self.add_wq = self.add_wk = self.add_v = None
        if cfg.attn_score == "additive":
            H, dk = cfg.n_heads, cfg.d_k
            self.add_wq = nn.Parameter(torch.empty(H, dk, dk))  # (H, d_k, d_a), d_a = d_k
            self.add_wk = nn.Parameter(torch.empty(H, dk, dk))  # (H, d_k, d_a)
            self.add_v = nn.Parameter(torch.empty(H, dk))  # (H, d_a)

    def split(self, x: Tensor, heads: int | None = None) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, heads or self.n_heads, -1).transpose(1, 2)  # (B, H, T, d_k), or d_v for values

    def forward(self, x_q: Tensor, x_kv: Tensor | None = None, allowed: Tensor | None = None,
                record: bool = True, *, rope: RopeTables | None = None,
                past: tuple[Tensor, Tensor] | None = None, kv_sink: list | None = None,
                intervene: LayerIntervention | None = None) -> tuple[Tensor, AttentionTrace | None]:
        """intervene (model.intervene): heads switched off (zero or mean) and edited attention rows
        for this call only; the module's weights are never touched."""
        x_kv = x_q if x_kv is None else x_kv
        q = self.split(self.q_proj(x_q))  # (B, H, Tq, d_k)
        k = self.split(self.k_proj(x_kv), self.n_kv_heads)  # (B, H_kv, Tk, d_k)
        v = self.split(self.v_proj(x_kv), self.n_kv_heads)  # (B, H_kv, Tk, d_v)
        extra = {}
        if rope is not None:
            extra = {"q_pre_rope": q, "k_pre_rope": k}
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)  # rotated by their positions
        if past is not None:  # cached keys/values of the earlier positions (already rotated)
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (B, H_kv, T_ctx, .)
        if kv_sink is not None:
            kv_sink.append((k, v))
        k_all, v_all = k, v
        if self.n_kv_heads != self.n_heads:
            rep = self.n_heads // self.n_kv_heads
            extra["kv_head"] = kv_head_index(self.n_heads, rep)  # (H,)
            k_all, v_all = repeat_kv(k, rep), repeat_kv(v, rep)  # (B, H, Tk, .) query head h reads kv_head[h]
        scale = 1.0 / math.sqrt(self.d_k) if self.scale_scores else 1.0
        bias, energy = None, None
        if x_kv is x_q and (self.alibi or self.window is not None):  # self-attention only
            Tq, Tk = q.shape[2], k.shape[2]  # query row i sits at position Tk - Tq + i
            if self.window is not None:
                extra["band"] = window_allowed(Tq, Tk, self.window)  # (Tq, Tk) |i - j| < window
                allowed = combine(allowed, extra["band"])
            if self.alibi:
                extra["alibi_slopes"] = alibi_slopes(self.n_heads)  # (H,)
                bias = alibi_bias(extra["alibi_slopes"], Tq, Tk)  # (H, Tq, Tk)
        if self.add_wq is not None:  # Bahdanau: no 1/sqrt(d_k) (tanh bounds each term)
            energy, scale = (self.add_wq, self.add_wk, self.add_v), 1.0
        a = attend_fields(q, k_all, v_all, allowed=allowed, scale=scale, bias=bias, energy_weights=energy)
        heads = a["heads"]  # (B, H, Tq, d_v)
        if intervene is not None:
            if intervene.edits:  # edited rows: new weights, new Z rows
                w = edited_weights(a["weights"], intervene.edits, allowed)  # (B, H, Tq, Tk)
                heads = w @ v_all  # (B, H, Tq, d_v)
                a["weights"] = w
            heads, ablated = apply_to_heads(heads, intervene)  # (B, H, Tq, d_v), (B|1, H)
            extra["ablated"] = ablated
            a["heads"] = heads
        B, H, Tq, dv = heads.shape
        concat = heads.transpose(1, 2).reshape(B, Tq, H * dv)  # (B, Tq, H*d_v)
        out = self.o_proj(concat)  # (B, Tq, D)
        if not record:
            return out, None
        return out, AttentionTrace(**{**a, "k": k, "v": v, "concat": concat, "output": out, **extra})


class FeedForward(nn.Module):
    """Position-wise FFN: the same W_1, W_2 at every position. D -> d_ff -> D.
    SwiGLU (cfg.activation "swiglu", Llama): fc2(silu(x W_gate^T) * (x W_up^T)), W_up = fc1."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        self.act = F.gelu if cfg.activation == "gelu" else F.relu
        # registered after fc1/fc2: the parameter order of every other model is unchanged
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias) if cfg.activation == "swiglu" else None

    def forward(self, x: Tensor, record: bool = True) -> tuple[Tensor, FFNTrace | None]:
        if self.gate is not None:  # SwiGLU
            gate = self.gate(x)  # (B, T, d_ff)
            up = self.fc1(x)  # (B, T, d_ff)
            act = F.silu(gate)  # (B, T, d_ff)
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
    post-LN (2017): LN(x + Attn(x)), then LN(. + FFN(.))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pre, self.residual = cfg.norm == "pre", cfg.residual
        self.ln1 = make_norm(cfg) if cfg.use_norm else NoNorm()
        self.attn = MultiHeadAttention(cfg)
        self.ln2 = make_norm(cfg) if cfg.use_norm else NoNorm()
        self.ffn = FeedForward(cfg)

    def forward(self, x: Tensor, allowed: Tensor | None, record: bool = True, *,
                rope: RopeTables | None = None, past: tuple[Tensor, Tensor] | None = None,
                kv_sink: list | None = None, intervene: LayerIntervention | None = None
                ) -> tuple[Tensor, BlockTrace | None]:
        """rope, past, kv_sink, intervene: passed to the attention (rotary tables, this layer's KV
        cache, a list that receives this layer's full-context (k, v), model.intervene's changes)."""
        kw = {"rope": rope, "past": past, "kv_sink": kv_sink, "intervene": intervene}
        if self.pre:
            h, ln1 = self.ln1(x, record)  # (B, T, D)
            a, at = self.attn(h, allowed=allowed, record=record, **kw)  # (B, T, D)
            mid = x + a if self.residual else a  # (B, T, D)
            h2, ln2 = self.ln2(mid, record)
            f, ft = self.ffn(h2, record)
            out = mid + f if self.residual else f  # (B, T, D)
        else:
            a, at = self.attn(x, allowed=allowed, record=record, **kw)
            mid, ln1 = self.ln1(x + a if self.residual else a, record)  # (B, T, D)
            f, ft = self.ffn(mid, record)
            out, ln2 = self.ln2(mid + f if self.residual else f, record)  # (B, T, D)
        if not record:
            return out, None
        return out, BlockTrace(input=x, ln1=ln1, attn=at, resid_mid=mid, ln2=ln2, ffn=ft, resid_out=out)
