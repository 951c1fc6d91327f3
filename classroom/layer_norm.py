"""Layer norm & residuals: the statistics of one token, batch vs layer norm, pre-LN vs post-LN.
Pure numpy/torch over the engine (never streamlit, plotly or ui/); every number on the page is
computed here, one hop from the page."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from model.config import ModelConfig
from model.layers import layer_norm as engine_layer_norm
from model.trace import ForwardTrace


def layer_norm(x: np.ndarray, gamma: np.ndarray | None = None, beta: np.ndarray | None = None,
               eps: float = 1e-5) -> dict:
    """Layer norm over the last axis through the engine's model.layers.layer_norm (float64):
    F.layer_norm's output, biased variance, eps inside the sqrt (std = sqrt(var + eps))."""
    x = torch.as_tensor(np.asarray(x, dtype=np.float64))
    g = None if gamma is None else torch.as_tensor(np.asarray(gamma, dtype=np.float64))
    b = None if beta is None else torch.as_tensor(np.asarray(beta, dtype=np.float64))
    tr = engine_layer_norm(x, g, b, eps)
    var = tr.var.numpy()[..., 0]
    return {"mean": tr.mean.numpy()[..., 0], "var": var, "eps": eps, "std": np.sqrt(var + eps),
            "normalized": tr.normalized.numpy(), "output": tr.output.numpy()}


def batch_vs_layer_norm(x: np.ndarray, eps: float = 1e-5) -> dict:
    """x (N samples, F features). Batch norm: statistics per feature (column, over the batch);
    layer norm: statistics per sample (row, over its features)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or min(x.shape) < 2:
        raise ValueError("x must be a (samples, features) matrix with at least 2 of each")
    bn_mean, bn_var = x.mean(0), x.var(0)
    ln = layer_norm(x, eps=eps)
    return {"x": x, "bn_mean": bn_mean, "bn_var": bn_var, "bn": (x - bn_mean) / np.sqrt(bn_var + eps),
            "ln_mean": ln["mean"], "ln_var": ln["var"], "ln": ln["normalized"]}


def token_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-token (row) mean and biased variance of a (T, D) matrix."""
    x = np.asarray(x, dtype=np.float64)
    return x.mean(-1), x.var(-1)


def residual_norms(trace: ForwardTrace) -> tuple[list[str], np.ndarray]:
    """L2 norm of every token's residual-stream vector at each stage: block input, after the
    attention sublayer, after the FFN sublayer, ... (a B = 1 trace, torch or numpy). Returns
    (stage names, (stages, T) norms)."""
    names, rows = ["embeddings"], [trace.embeddings.sum[0]]
    for l, block in enumerate(trace.layers):
        names += [f"L{l} after attn", f"L{l} after FFN"]
        rows += [block.resid_mid[0], block.resid_out[0]]
    return names, np.stack([np.linalg.norm(np.asarray(r, dtype=np.float64), axis=-1) for r in rows])


def norm_placement_comparison(cfg: ModelConfig, ids: Sequence[int], seed: int = 0) -> dict:
    """Fresh weights (same seed) with pre-LN and post-LN on the same ids: the residual stream's
    mean norm per stage. Pre-LN lets the stream grow (LN only feeds the sublayers); post-LN
    renormalises it after every sublayer."""
    from model.transformer import Transformer
    out = {}
    ids_t = torch.tensor([list(ids)[: cfg.max_len]], dtype=torch.long)
    for norm in ("pre", "post"):
        model = Transformer(cfg.replace(norm=norm, final_norm=None), seed=seed)
        names, norms = residual_norms(model.trace(ids_t).numpy())
        out[norm] = norms.mean(-1)
        out["stages"] = names
    return out
