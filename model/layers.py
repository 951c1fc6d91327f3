"""Transformer building blocks. Each returns (y, trace); with record=False the trace is None but
the arithmetic is identical (one code path). Modules never store activations."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import attend
from .config import ModelConfig
from .trace import AttentionTrace, BlockTrace, FFNTrace, LayerNormTrace


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


def layer_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
               ) -> LayerNormTrace:
    """Layer norm over the last axis, every step recorded. The output is F.layer_norm's own
    (bit-exact with torch and HF models); mean and biased variance are recorded beside it, and
    `normalized` = (x - mean) / sqrt(var + eps) before gamma/beta. The one layer norm: the
    LayerNorm module, the classroom analyses and the calculator call it.
    var is the textbook mean of squared deviations (1/D) sum (x - mean)^2, computed from the
    centred values it shares with `normalized` (~10x faster than Tensor.var's Welford kernel on
    CPU; they agree to float rounding)."""
    mean = x.mean(dim=-1, keepdim=True)  # (B, T, 1)
    centered = x - mean  # (B, T, D)
    var = (centered * centered).mean(dim=-1, keepdim=True)  # (B, T, 1) biased, as F.layer_norm
    normalized = centered / torch.sqrt(var + eps)  # (B, T, D)
    out = F.layer_norm(x, x.shape[-1:], weight, bias, eps)  # (B, T, D)
    return LayerNormTrace(input=x, mean=mean, var=var, normalized=normalized, output=out,
                          gamma=weight, beta=bias)


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


class NoNorm(nn.Module):
    """The identity in place of a LayerNorm (cfg.use_norm False): no parameters, no trace."""

    def forward(self, x: Tensor, record: bool = True) -> tuple[Tensor, None]:
        return x, None


class MultiHeadAttention(nn.Module):
    """Q = X W_Q^T + b, split into H heads of d_k; attend per head; concat; W_O."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        D = cfg.d_model
        self.n_heads, self.d_k, self.scale_scores = cfg.n_heads, cfg.d_k, cfg.scale_scores
        self.q_proj = nn.Linear(D, D, bias=cfg.bias)
        self.k_proj = nn.Linear(D, D, bias=cfg.bias)
        self.v_proj = nn.Linear(D, cfg.n_heads * cfg.d_value, bias=cfg.bias)  # (H*d_v, D)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.d_value, D, bias=cfg.bias)  # (D, H*d_v)

    def split(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, -1).transpose(1, 2)  # (B, H, T, d_k), or d_v for values

    def forward(self, x_q: Tensor, x_kv: Tensor | None = None, allowed: Tensor | None = None,
                record: bool = True) -> tuple[Tensor, AttentionTrace | None]:
        x_kv = x_q if x_kv is None else x_kv
        q = self.split(self.q_proj(x_q))  # (B, H, Tq, d_k)
        k = self.split(self.k_proj(x_kv))  # (B, H, Tk, d_k)
        v = self.split(self.v_proj(x_kv))  # (B, H, Tk, d_v)
        scale = 1.0 / math.sqrt(self.d_k) if self.scale_scores else 1.0
        a = attend(q, k, v, allowed=allowed, scale=scale)
        B, H, Tq, dv = a.heads.shape
        concat = a.heads.transpose(1, 2).reshape(B, Tq, H * dv)  # (B, Tq, H*d_v)
        out = self.o_proj(concat)  # (B, Tq, D)
        if not record:
            return out, None
        return out, AttentionTrace(**{**a.__dict__, "concat": concat, "output": out})


class FeedForward(nn.Module):
    """Position-wise FFN: the same W_1, W_2 at every position. D -> d_ff -> D."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        self.act = F.gelu if cfg.activation == "gelu" else F.relu

    def forward(self, x: Tensor, record: bool = True) -> tuple[Tensor, FFNTrace | None]:
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
        self.ln1 = LayerNorm(cfg.d_model, cfg.ln_eps) if cfg.use_norm else NoNorm()
        self.attn = MultiHeadAttention(cfg)
        self.ln2 = LayerNorm(cfg.d_model, cfg.ln_eps) if cfg.use_norm else NoNorm()
        self.ffn = FeedForward(cfg)

    def forward(self, x: Tensor, allowed: Tensor | None, record: bool = True
                ) -> tuple[Tensor, BlockTrace | None]:
        if self.pre:
            h, ln1 = self.ln1(x, record)  # (B, T, D)
            a, at = self.attn(h, allowed=allowed, record=record)  # (B, T, D)
            mid = x + a if self.residual else a  # (B, T, D)
            h2, ln2 = self.ln2(mid, record)
            f, ft = self.ffn(h2, record)
            out = mid + f if self.residual else f  # (B, T, D)
        else:
            a, at = self.attn(x, allowed=allowed, record=record)
            mid, ln1 = self.ln1(x + a if self.residual else a, record)  # (B, T, D)
            f, ft = self.ffn(mid, record)
            out, ln2 = self.ln2(mid + f if self.residual else f, record)  # (B, T, D)
        if not record:
            return out, None
        return out, BlockTrace(input=x, ln1=ln1, attn=at, resid_mid=mid, ln2=ln2, ffn=ft, resid_out=out)
