"""Layer norm & residuals: the statistics of one token, batch vs layer norm, pre-LN vs post-LN.
Pure numpy/torch over the engine (never streamlit, plotly or ui/); every number on the page is
computed here, one hop from the page."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from model.config import ModelConfig
from model.layers import layer_norm as engine_layer_norm
from model.trace import ForwardTrace, LayerNormTrace, NormTrace
from model.families.disk import meta_model
from model.transformer import Transformer


@dataclass(frozen=True)
class LayerNormResult:
    """Layer norm of x (..., D) over its last axis, float64, every step."""
    mean: np.ndarray  # (...) mean of each row
    var: np.ndarray  # (...) biased variance of each row, as F.layer_norm
    eps: float  # inside the square root
    std: np.ndarray  # (...) sqrt(var + eps): what each row is divided by
    normalized: np.ndarray  # (..., D) (x − mean) / std, before gamma/beta
    output: np.ndarray  # (..., D) normalized * gamma + beta (F.layer_norm's output)


def layer_norm(x: np.ndarray, gamma: np.ndarray | None = None, beta: np.ndarray | None = None,
               eps: float = 1e-5) -> LayerNormResult:
    """Layer norm over the last axis through the engine's model.layers.layer_norm (float64):
    F.layer_norm's output, biased variance, eps inside the sqrt (std = sqrt(var + eps))."""
    x = torch.as_tensor(np.asarray(x, dtype=np.float64))
    g = None if gamma is None else torch.as_tensor(np.asarray(gamma, dtype=np.float64))
    b = None if beta is None else torch.as_tensor(np.asarray(beta, dtype=np.float64))
    tr = engine_layer_norm(x, g, b, eps)
    var = tr.var.numpy()[..., 0]
    return LayerNormResult(mean=tr.mean.numpy()[..., 0], var=var, eps=eps, std=np.sqrt(var + eps),
                           normalized=tr.normalized.numpy(), output=tr.output.numpy())


@dataclass(frozen=True)
class BatchVsLayerNorm:
    """One (N samples, F features) matrix normalised both ways, float64."""
    x: np.ndarray  # (N, F) the raw values
    bn_mean: np.ndarray  # (F,) batch norm: mean of each feature (column) over the batch
    bn_var: np.ndarray  # (F,) batch norm: biased variance of each column
    bn: np.ndarray  # (N, F) batch-normalised: each column to mean 0, variance 1
    ln_mean: np.ndarray  # (N,) layer norm: mean of each sample (row) over its features
    ln_var: np.ndarray  # (N,) layer norm: biased variance of each row
    ln: np.ndarray  # (N, F) layer-normalised: each row to mean 0, variance 1 (before gamma/beta)


def batch_vs_layer_norm(x: np.ndarray, eps: float = 1e-5) -> BatchVsLayerNorm:
    """x (N samples, F features). Batch norm: statistics per feature (column, over the batch);
    layer norm: statistics per sample (row, over its features)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or min(x.shape) < 2:
        raise ValueError("x must be a (samples, features) matrix with at least 2 of each")
    bn_mean, bn_var = x.mean(0), x.var(0)
    ln = layer_norm(x, eps=eps)
    return BatchVsLayerNorm(x=x, bn_mean=bn_mean, bn_var=bn_var, bn=(x - bn_mean) / np.sqrt(bn_var + eps),
                            ln_mean=ln.mean, ln_var=ln.var, ln=ln.normalized)


def token_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-token (row) mean and biased variance of a (T, D) matrix."""
    x = np.asarray(x, dtype=np.float64)
    return x.mean(-1), x.var(-1)


@dataclass(frozen=True)
class LayerNormTokenStats:
    """Per-token statistics of one layer norm of a sentence (T tokens): before, after normalizing,
    after gamma and beta."""
    mean_in: np.ndarray  # (T,) mean of each token's input, as the engine recorded it
    var_in: np.ndarray  # (T,) biased variance of the input, as the engine recorded it
    mean_normalized: np.ndarray  # (T,) float64 after normalizing (0)
    var_normalized: np.ndarray  # (T,) float64 after normalizing (1 up to eps)
    mean_out: np.ndarray  # (T,) float64 after gamma, beta
    var_out: np.ndarray  # (T,) float64 after gamma, beta


def layer_norm_token_stats(norm: LayerNormTrace) -> LayerNormTokenStats:
    """The per-token statistics of a layer norm's trace (numpy, B = 1)."""
    mean_n, var_n = token_stats(norm.normalized[0])
    mean_o, var_o = token_stats(norm.output[0])
    return LayerNormTokenStats(mean_in=norm.mean[0, :, 0], var_in=norm.var[0, :, 0], mean_normalized=mean_n,
                               var_normalized=var_n, mean_out=mean_o, var_out=var_o)


@dataclass(frozen=True)
class RMSNormTokenStats:
    """Per-token statistics of one RMSNorm of a sentence (T tokens): it rescales each vector to
    root mean square 1 and keeps its mean (only rescaled)."""
    mean_sq: np.ndarray  # (T,) mean(x²) of each token's input, as the engine recorded it
    rms_in: np.ndarray  # (T,) sqrt(mean_sq): the root mean square each token is divided by
    rms_normalized: np.ndarray  # (T,) float64 root mean square after normalizing (1 up to eps)
    mean_in: np.ndarray  # (T,) float64 mean of the input (RMSNorm does not remove it)
    mean_normalized: np.ndarray  # (T,) float64 mean after normalizing


def rms_norm_token_stats(norm: NormTrace) -> RMSNormTokenStats:
    """The per-token statistics of an RMSNorm's trace (numpy, B = 1)."""
    x_in, x_norm = norm.input[0], norm.normalized[0]  # (T, D)
    return RMSNormTokenStats(mean_sq=norm.mean_sq[0, :, 0], rms_in=np.sqrt(norm.mean_sq[0, :, 0]),
                             rms_normalized=np.sqrt((x_norm.astype(np.float64) ** 2).mean(-1)),
                             mean_in=x_in.astype(np.float64).mean(-1),
                             mean_normalized=x_norm.astype(np.float64).mean(-1))


def residual_norms(trace: ForwardTrace) -> tuple[list[str], np.ndarray]:
    """L2 norm of every token's residual-stream vector at each stage: block input, after the
    attention sublayer, after the FFN sublayer, ... (a B = 1 trace, torch or numpy). Returns
    (stage names, (stages, T) norms)."""
    names, rows = ["embeddings"], [trace.embeddings.sum[0]]
    for l, block in enumerate(trace.layers):
        names += [f"L{l} after attn", f"L{l} after FFN"]
        rows += [block.resid_mid[0], block.resid_out[0]]
    return names, np.stack([np.linalg.norm(np.asarray(r, dtype=np.float64), axis=-1) for r in rows])


OUTLIER_FACTOR = 10.0  # a token whose largest norm is this many times the typical token's dominates the colours


@dataclass(frozen=True)
class NormOutliers:
    """Tokens whose residual stream is far larger than the rest's (S stages, T tokens): Llama-style
    models such as SmolLM2 grow a few huge features on the first token ("massive activations",
    Sun et al. 2024), which then serves as an attention sink. On a linear colour scale such a token
    paints every other cell the same colour."""
    tokens: list[int]  # indices of the outlier tokens (largest norm > OUTLIER_FACTOR × typical)
    peak: np.ndarray  # (T,) float64 each token's largest norm over the stages
    typical: float  # median of the other tokens' peaks (all tokens' when there is no outlier)
    ratio: float  # max(peak) / typical (1.0 for a single token)


def norm_outliers(norms: np.ndarray, factor: float = OUTLIER_FACTOR) -> NormOutliers:
    """Which tokens dominate a (stages, tokens) norm matrix (residual_norms' second value): those
    whose peak over the stages exceeds `factor` times the median peak of the other tokens."""
    n = np.asarray(norms, dtype=np.float64)
    peak = n.max(axis=0) if n.size else np.zeros(0)
    if peak.size < 2:
        return NormOutliers(tokens=[], peak=peak, typical=float(peak.max()) if peak.size else 0.0, ratio=1.0)
    out = [i for i in range(peak.size) if peak[i] > factor * float(np.median(np.delete(peak, i)))]
    rest = np.delete(peak, out)
    typical = float(np.median(rest if rest.size else peak))
    return NormOutliers(tokens=out, peak=peak, typical=typical,
                        ratio=float(peak.max() / typical) if typical > 0 else float("inf"))


PLACEMENT_TOKENS = 128  # the pre-LN vs post-LN comparison reads the first this many tokens (a mean over
#                        tokens of fresh weights' stream norms: 128 say what 1,024 do, at an eighth of the time)


@dataclass(frozen=True)
class NormPlacement:
    """The residual stream's mean norm per stage (S = 1 + 2 L stages: residual_norms' names) with
    pre-LN and with post-LN, the same fresh weights otherwise."""
    stages: list[str]  # (S,) "embeddings", "L0 after attn", "L0 after FFN", ...
    pre: np.ndarray  # (S,) float64 mean over tokens of ‖stream‖, pre-LN
    post: np.ndarray  # (S,) float64 the same, post-LN
    n_tokens: int  # how many of the sentence's tokens it read (at most PLACEMENT_TOKENS)


def norm_placement_comparison(cfg: ModelConfig, ids: Sequence[int], seed: int = 0,
                              max_tokens: int = PLACEMENT_TOKENS) -> NormPlacement:
    """Fresh weights (same seed) with pre-LN and post-LN on the first max_tokens ids: the residual
    stream's mean norm per stage. Pre-LN lets the stream grow (LN only feeds the sublayers); post-LN
    renormalises it after every sublayer. The post-LN model is built on the meta device and given
    the pre-LN model's tensors (the same parameters and the same seeded values as building it with
    init: init_weights draws in parameter order, and a final norm holds no random values): one
    random init, not two (0.73 s of SmolLM2's 135M parameters)."""
    ids = list(ids)[: min(cfg.max_len, max_tokens)]
    ids_t = torch.tensor([ids], dtype=torch.long)
    pre_model = Transformer(cfg.replace(norm="pre", final_norm=None), seed=seed)
    post_model = meta_model(cfg.replace(norm="post", final_norm=None))
    own = post_model.state_dict()
    post_model.load_state_dict({k: v for k, v in pre_model.state_dict().items() if k in own}, assign=True)
    pre_buffers = dict(pre_model.named_buffers())
    for name, buf in list(post_model.named_buffers()):  # tables not in a state_dict (sinusoidal positions)
        if buf.is_meta:
            owner, _, attr = name.rpartition(".")
            setattr(post_model.get_submodule(owner) if owner else post_model, attr, pre_buffers[name])
    post_model.eval()

    def mean_stream_norms(model: Transformer) -> tuple[list[str], np.ndarray]:
        names, norms = residual_norms(model.trace(ids_t).numpy())
        return names, norms.mean(-1)

    names, pre = mean_stream_norms(pre_model)
    _, post = mean_stream_norms(post_model)
    return NormPlacement(stages=names, pre=pre, post=post, n_tokens=len(ids))
