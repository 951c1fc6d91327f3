"""Math behind the concept pages (scaling, positional encoding, layer norm, multi-head, FFN and
output, contextual embeddings, cost, masks, causal vs bidirectional). Pure torch/numpy over the
engine: never imports streamlit, plotly or ui/.

Every function takes arrays (or a model/config) and returns numbers or small dicts/DataFrames-ready
records, so each number on a concept page is computed here, in one hop from the page. The math the
engine already has is not written again: the masked softmax is model.attention.masked_softmax, the
additive mask model.attention.additive, layer norm model.layers.layer_norm and the positional table
model.layers.sinusoidal_table; the functions here convert numpy <-> torch (float64) around them.
Entropies are in bits (log base 2): a uniform softmax over n keys has entropy log2(n).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from model.attention import additive, attend, causal_allowed, combine, masked_softmax, padding_allowed
from model.config import ModelConfig, param_breakdown, param_count
from model.layers import layer_norm as engine_layer_norm
from model.layers import sinusoidal_table
from model.trace import ForwardTrace

from .text import token_labels

# --------------------------------------------------------------------------------------------
# 1. Scaling & softmax
# --------------------------------------------------------------------------------------------


def softmax(x: np.ndarray, temperature: float = 1.0, axis: int = -1, allowed: np.ndarray | None = None
            ) -> np.ndarray:
    """Softmax of x / temperature (float64) through the engine's masked_softmax. Entries that are
    not allowed (allowed False, or x / temperature not finite, e.g. -inf) get weight 0; a row with
    nothing allowed gets all-zero weights (never NaN)."""
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    x = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    with np.errstate(over="ignore", invalid="ignore"):
        ok = np.isfinite(x / temperature)
    if allowed is not None:
        ok &= np.moveaxis(np.broadcast_to(np.asarray(allowed, dtype=bool), np.moveaxis(x, -1, axis).shape), axis, -1)
    _, weights, _ = masked_softmax(torch.from_numpy(np.where(ok, x, 0.0)), torch.from_numpy(ok), temperature)
    return np.moveaxis(weights.numpy(), -1, axis)


def entropy_bits(p: np.ndarray, axis: int = -1) -> np.ndarray:
    """Shannon entropy in bits of probability rows (0 log 0 = 0)."""
    p = np.asarray(p, dtype=np.float64)
    logs = np.log2(np.where(p > 0, p, 1.0))
    return -(p * logs).sum(axis=axis)


def scaling_row(scores_row: np.ndarray, d_k: int, temperature: float = 1.0) -> dict:
    """One query's raw scores q·k over its allowed keys -> scaled scores and both softmaxes.

    unscaled weights = softmax(scores / T); scaled weights = softmax(scores / sqrt(d_k) / T).
    """
    s = np.asarray(scores_row, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError("scores_row must be a non-empty 1-D array of the allowed keys' scores")
    scaled = s / math.sqrt(d_k)
    w_raw = softmax(s, temperature)
    w_scaled = softmax(scaled, temperature)
    return {
        "scores": s, "scaled": scaled, "weights_unscaled": w_raw, "weights_scaled": w_scaled,
        "entropy_unscaled": float(entropy_bits(w_raw)), "entropy_scaled": float(entropy_bits(w_scaled)),
        "max_unscaled": float(w_raw.max()), "max_scaled": float(w_scaled.max()),
        "max_entropy": float(math.log2(s.size)),
    }


def worked_scaling_example() -> dict:
    """The notes' example: q = [2, 3, 4, 1], k1 = [1, 0, 1, 0], k2 = [0, 1, 0, 1], d_k = 4.
    Scores [6, 4]; softmax -> [0.8808, 0.1192]; scaled by sqrt(4) = 2 -> [3, 2] -> [0.7311, 0.2689]."""
    q = np.array([2.0, 3.0, 4.0, 1.0])
    k = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]])
    scores = k @ q
    d_k = q.size
    scaled = scores / math.sqrt(d_k)
    return {"q": q, "k": k, "d_k": d_k, "sqrt_d_k": math.sqrt(d_k), "scores": scores,
            "weights_unscaled": softmax(scores), "scaled": scaled, "weights_scaled": softmax(scaled)}


DK_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def variance_experiment(d_ks: Sequence[int] = DK_GRID, n_samples: int = 1500, seed: int = 0) -> dict:
    """Sample q, k with i.i.d. N(0, 1) components; measure Var(q·k) for each d_k.

    Theory: q·k = sum of d_k products of independent unit-variance terms -> Var = d_k, and
    Var(q·k / sqrt(d_k)) = 1. With n samples the relative standard error of the sample variance is
    about sqrt(2 / n) (~3.7% for n = 1500) for large d_k (sqrt(8/n) at d_k = 1, heavier tails)."""
    rng = np.random.default_rng(seed)
    var_raw, var_scaled = [], []
    for d in d_ks:
        q = rng.standard_normal((n_samples, d), dtype=np.float32)
        k = rng.standard_normal((n_samples, d), dtype=np.float32)
        dots = np.einsum("nd,nd->n", q, k, dtype=np.float64)
        var_raw.append(float(dots.var(ddof=1)))
        var_scaled.append(float((dots / math.sqrt(d)).var(ddof=1)))
    return {"d_k": np.asarray(d_ks, dtype=np.int64), "var_sampled": np.asarray(var_raw),
            "var_theory": np.asarray(d_ks, dtype=np.float64), "var_scaled_sampled": np.asarray(var_scaled),
            "n_samples": n_samples}


def entropy_experiment(d_ks: Sequence[int] = DK_GRID, n_keys: int = 16, n_samples: int = 100,
                       seed: int = 0) -> dict:
    """Mean softmax entropy (bits) over n_keys random keys, with and without 1/sqrt(d_k).

    Without scaling the scores' spread grows like sqrt(d_k), the softmax saturates (entropy -> 0,
    one key takes almost all weight); with scaling the spread stays ~1 and entropy stays put."""
    rng = np.random.default_rng(seed)
    h_raw, h_scaled, max_raw, max_scaled = [], [], [], []
    for d in d_ks:
        q = rng.standard_normal((n_samples, d), dtype=np.float32)
        k = rng.standard_normal((n_samples, n_keys, d), dtype=np.float32)
        s = np.einsum("nd,nkd->nk", q, k, dtype=np.float64)  # (n, n_keys)
        w_raw, w_scaled = softmax(s), softmax(s / math.sqrt(d))
        h_raw.append(float(entropy_bits(w_raw).mean()))
        h_scaled.append(float(entropy_bits(w_scaled).mean()))
        max_raw.append(float(w_raw.max(-1).mean()))
        max_scaled.append(float(w_scaled.max(-1).mean()))
    return {"d_k": np.asarray(d_ks, dtype=np.int64), "entropy_unscaled": np.asarray(h_raw),
            "entropy_scaled": np.asarray(h_scaled), "max_weight_unscaled": np.asarray(max_raw),
            "max_weight_scaled": np.asarray(max_scaled), "max_entropy": math.log2(n_keys),
            "n_keys": n_keys, "n_samples": n_samples}


# --------------------------------------------------------------------------------------------
# 2. Positional encoding
# --------------------------------------------------------------------------------------------


def pe_table(n_positions: int, d_model: int) -> np.ndarray:
    """(n_positions, d_model) sinusoidal table: exactly model.layers.sinusoidal_table."""
    return sinusoidal_table(n_positions, d_model).numpy()


def pe_wavelengths(d_model: int) -> np.ndarray:
    """(d_model,) wavelength in positions of each dimension: 2*pi * 10000^(2i/d) (dims 2i and 2i+1
    share one frequency)."""
    i2 = (np.arange(d_model) // 2) * 2
    return 2 * np.pi * np.power(10000.0, i2 / d_model)


def pe_similarity(pe: np.ndarray) -> np.ndarray:
    """(T, T) dot products PE(i)·PE(j). For the sinusoidal table it depends only on i - j."""
    pe = np.asarray(pe, dtype=np.float64)
    return pe @ pe.T


def cosine_matrix(x: np.ndarray) -> np.ndarray:
    """(T, T) cosine similarity of the rows of x (0 where a row is all zeros)."""
    x = np.asarray(x, dtype=np.float64)
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    u = np.divide(x, n, out=np.zeros_like(x), where=n > 0)
    return u @ u.T


NOTES_PE_EMBEDDINGS = {"the": [0.1, 0.2, 0.3, 0.4], "cat": [0.5, 0.6, 0.7, 0.8]}
NOTES_PE_HAND = {  # what the notes wrote by hand, to compare with the truth
    "PE(1)": [0.8415, 0.5403, 0.01, 0.99995],
    "PE for 'CAT' (diagram)": [0.84, 0.34, 0.01, 0.99],
    "the + PE(0)": [0.1, 1.2, 0.3, 0.4],
    "cat + PE(1)": [1.34, 0.94, 0.01, 1.79],
}


def worked_pe_example() -> dict:
    """The notes' d_model = 4 example at positions 0, 1, 2 and 'the' (pos 0) / 'cat' (pos 1) + PE."""
    pe = sinusoidal_table(3, 4, dtype=torch.float64).numpy()  # float64: cos 0.01 = 0.99995, not float32's 0.99994999
    the, cat = np.array(NOTES_PE_EMBEDDINGS["the"]), np.array(NOTES_PE_EMBEDDINGS["cat"])
    angles = np.array([[p / 10000 ** ((2 * (j // 2)) / 4) for j in range(4)] for p in range(3)])
    return {"pe": pe, "angles": angles, "the": the, "cat": cat,
            "the_sum": the + pe[0], "cat_sum": cat + pe[1]}


# --------------------------------------------------------------------------------------------
# 3. Layer norm & residuals
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# 4. Multi-head mechanics
# --------------------------------------------------------------------------------------------


def shape_rows(cfg: ModelConfig, T: int) -> list[dict]:
    """The dimension table of one multi-head attention layer for a T-token input. With a value
    width d_v different from d_k (cfg.d_v) the rows of K and V part: K_j is T × d_k, V_j and Z_j
    are T × d_v."""
    D, H, dk, dv = cfg.d_model, cfg.n_heads, cfg.d_k, cfg.d_value
    HV = H * dv
    if dv == dk:
        heads = [{"step": "Q_j, K_j, V_j (one head)", "shape": f"{T} × {dk}", "formula": f"T × d_k, d_k = d_model / h = {D} / {H}"}]
        wv = []
        z_formula, concat_formula = "T × d_v (d_v = d_k)", "T × h·d_v = T × d_model"
    else:
        heads = [{"step": "Q_j, K_j (one head)", "shape": f"{T} × {dk}", "formula": f"T × d_k, d_k = d_model / h = {D} / {H}"},
                 {"step": "V_j (one head)", "shape": f"{T} × {dv}", "formula": f"T × d_v, d_v = {dv} (≠ d_k)"}]
        wv = [{"step": "W_V (d_v ≠ d_k)", "shape": f"{D} × {HV}", "formula": "d_model × h·d_v"}]
        z_formula, concat_formula = f"T × d_v (d_v = {dv} ≠ d_k = {dk})", f"T × h·d_v = T × {H}·{dv}"
    return [
        {"step": "input X (token embedding + position)", "shape": f"{T} × {D}", "formula": "T × d_model"},
        {"step": "W_Q, W_K, W_V (each)" if dv == dk else "W_Q, W_K (each)", "shape": f"{D} × {D}",
         "formula": "d_model × d_model = h blocks of d_model × d_k"},
        *wv,
        {"step": "Q = X W_Q (all heads)", "shape": f"{T} × {D}", "formula": "T × d_model"},
        *heads,
        {"step": "scores Q_j K_jᵀ (one head)", "shape": f"{T} × {T}", "formula": "T × T"},
        {"step": "weights softmax(scores / √d_k)", "shape": f"{T} × {T}", "formula": "T × T, rows sum to 1"},
        {"step": "Z_j = weights V_j (one head)", "shape": f"{T} × {dv}", "formula": z_formula},
        {"step": "concat(Z_1 … Z_h)", "shape": f"{T} × {HV}", "formula": concat_formula},
        {"step": "W_O", "shape": f"{HV} × {D}", "formula": "h·d_v × d_model"},
        {"step": "output concat · W_O", "shape": f"{T} × {D}", "formula": "T × d_model"},
    ]


PART_FORMULAS = {
    "token_embedding": "V × d_model",
    "position_embedding": "max_len × d_model (learned only; sinusoidal has none)",
    "attention": "L × 4 (d_model² + d_model)  [W_Q, W_K, W_V, W_O + biases]",
    "ffn": "L × (2 d_model d_ff + d_ff + d_model)",
    "layer_norm": "L × 2 × 2 d_model (+ 2 d_model final LN)",
    "output": "0 when tied to the embedding, else V × d_model",
}


def param_rows(cfg: ModelConfig) -> list[dict]:
    """Parameter count per part (model.config.param_breakdown) with formula and share."""
    parts = param_breakdown(cfg)
    total = param_count(cfg)
    formulas = dict(PART_FORMULAS)
    if cfg.d_value != cfg.d_k:  # W_V is d_model × h·d_v and W_O h·d_v × d_model
        formulas["attention"] = "L × (2 (d_model² + d_model) + 2 d_model·h·d_v + h·d_v + d_model)"
    return [{"part": k, "parameters": int(v), "formula": formulas.get(k, ""),
             "share %": 100.0 * v / total if total else 0.0} for k, v in parts.items()]


def preset_rows(cfg: ModelConfig) -> list[dict]:
    """A config's headline shapes as rows (used for the GPT-2 small preset)."""
    return [
        {"quantity": "vocabulary V", "value": cfg.vocab_size},
        {"quantity": "context length (max_len)", "value": cfg.max_len},
        {"quantity": "d_model", "value": cfg.d_model},
        {"quantity": "heads h", "value": cfg.n_heads},
        {"quantity": "d_k = d_model / h", "value": cfg.d_k},
        {"quantity": "layers", "value": cfg.n_layers},
        {"quantity": "d_ff", "value": cfg.d_ff},
        {"quantity": "embedding matrix", "value": f"{cfg.vocab_size} × {cfg.d_model}"},
        {"quantity": "positions", "value": cfg.pos_encoding},
        {"quantity": "norm placement", "value": f"{cfg.norm}-LN" + (" + final LN" if cfg.final_norm else "")},
        {"quantity": "parameters", "value": f"{param_count(cfg):,}"},
    ]


# --------------------------------------------------------------------------------------------
# 5. FFN & output layer
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def ffn_position_check(model, layer: int, ffn_input: np.ndarray, ffn_output: np.ndarray) -> float:
    """Run the layer's FFN on each position alone and compare with the traced (all positions at
    once) output: the max |difference| (≈ 0 because the same W_1, W_2 apply at every position)."""
    ffn = model.blocks[layer].ffn
    x = torch.tensor(np.array(ffn_input, dtype=np.float32))
    rows = [ffn(x[t: t + 1][None], record=False)[0][0, 0] for t in range(x.shape[0])]
    alone = torch.stack(rows).numpy()
    return float(np.abs(alone - np.asarray(ffn_output)).max())


def topk(p: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries along the last axis, largest first (ties: lower index
    first); k is clipped to 1 .. size. The one top-k: topk_next and topk_change use it."""
    p = np.asarray(p, dtype=np.float64)
    k = max(1, min(int(k), p.shape[-1]))
    return np.argsort(-p, axis=-1, kind="stable")[..., :k]


def topk_next(probs: np.ndarray, vocab: Sequence[str], k: int = 5) -> tuple[np.ndarray, list[list[str]]]:
    """probs (T, V) -> top-k probabilities (T, k) (descending) and their tokens."""
    p = np.asarray(probs, dtype=np.float64)
    idx = topk(p, k)
    return np.take_along_axis(p, idx, -1), [[vocab[i] for i in row] for row in idx]


def sequence_logprob(probs: np.ndarray, ids: Sequence[int]) -> dict:
    """Autoregressive factorisation p(x) = Π_t p(x_t | x_<t) from a causal trace's probs (T, V).

    Position t-1's distribution predicts token t, so there are T-1 factors (the first token is
    given). Returns per-token p and log p (natural log) and the totals."""
    p = np.asarray(probs, dtype=np.float64)
    ids = np.asarray(ids)
    if len(ids) < 2:
        return {"p": np.zeros(0), "logp": np.zeros(0), "total_logp": 0.0, "total_p": 1.0, "perplexity": float("nan")}
    pt = p[np.arange(len(ids) - 1), ids[1:]]
    logp = np.log(np.maximum(pt, np.finfo(np.float64).tiny))
    total = float(logp.sum())
    return {"p": pt, "logp": logp, "total_logp": total, "total_p": float(math.exp(total)),
            "perplexity": float(math.exp(-total / len(pt)))}


def weight_tying(model, final: np.ndarray, logits: np.ndarray) -> dict:
    """Is the output matrix the token-embedding matrix (same storage)? And do the traced logits
    equal final · Eᵀ (max |difference|)?"""
    out_m = model.output_matrix
    emb = model.tok_emb.weight
    same = bool(out_m.data_ptr() == emb.data_ptr() and out_m.shape == emb.shape)
    recomputed = np.asarray(final, dtype=np.float64) @ out_m.detach().double().numpy().T
    return {"tied": same, "max_diff": float(np.abs(recomputed - np.asarray(logits)).max()),
            "shape": tuple(out_m.shape)}


def robust_limit(x: np.ndarray, q: float = 99.0) -> float:
    """The q-th percentile of |x| (> 0): a colour range that a few outlier values (trained
    embeddings have some) do not wash out."""
    v = float(np.percentile(np.abs(np.asarray(x, dtype=np.float64)), q))
    return v if v > 0 else 1.0


def last_layer_view(final: np.ndarray) -> dict:
    """What a model without an output layer (an encoder such as MiniLM) produces: its final hidden
    states (T, D) -> per-token L2 norms (T,), cosine similarity between tokens (T, T), and the
    mean over tokens (D,): MiniLM's sentence embedding (before its L2 normalisation)."""
    x = np.asarray(final, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"final must be (T, D); got shape {x.shape}")
    return {"norms": np.linalg.norm(x, axis=-1), "cosine": cosine_matrix(x), "mean": x.mean(axis=0)}


def state_change(a: np.ndarray, b: np.ndarray) -> dict:
    """Per-token change between two runs' hidden states, (T, D) each: cosine(a_t, b_t) (T,) and
    the L2 norm of b_t − a_t (T,) beside ‖a_t‖ (T,)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"a and b must both be (T, D); got {a.shape} and {b.shape}")
    return {"cosine": np.array([_cos(x, y) for x, y in zip(a, b)]),
            "distance": np.linalg.norm(b - a, axis=-1), "norm_a": np.linalg.norm(a, axis=-1)}


# --------------------------------------------------------------------------------------------
# 6. Contextual embeddings
# --------------------------------------------------------------------------------------------


def find_word(labels: Sequence[str], word: str) -> int | None:
    """Index of the first token whose typed text equals word (case-insensitive), or None."""
    w = str(word).strip().lower()
    for i, lab in enumerate(labels):
        if str(lab).lower() == w:
            return i
    return None


def common_words(labels_a: Sequence[str], labels_b: Sequence[str]) -> list[str]:
    """Words (lower-cased) present in both token lists, in order of first appearance in A."""
    b = {str(x).lower() for x in labels_b}
    out: list[str] = []
    for x in labels_a:
        w = str(x).lower()
        if w in b and w not in out and not w.startswith("<"):
            out.append(w)
    return out


def stage_states(trace: ForwardTrace) -> tuple[list[str], list[np.ndarray]]:
    """Per-token vectors at each depth: token embedding, + position, after each block (B = 1)."""
    names = ["token embedding", "+ position"] + [f"after layer {l}" for l in range(len(trace.layers))]
    states = [trace.embeddings.token[0], trace.embeddings.sum[0]]
    states += [block.resid_out[0] for block in trace.layers]
    return names, [np.asarray(s, dtype=np.float64) for s in states]


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else 0.0


def contextual_similarity(states_a: list[np.ndarray], states_b: list[np.ndarray], ia: int, ib: int,
                          labels_a: Sequence[str], labels_b: Sequence[str], k: int = 3) -> dict:
    """Cosine similarity of token ia (sentence A) and ib (sentence B) at each stage, and at each
    stage each occurrence's k nearest other tokens (by cosine) among both sentences' tokens."""
    sims, near_a, near_b = [], [], []
    pool_labels = ["A" + t for t in token_labels(labels_a, plain=True)] + ["B" + t for t in token_labels(labels_b, plain=True)]
    for sa, sb in zip(states_a, states_b):
        sims.append(_cos(sa[ia], sb[ib]))
        pool = np.concatenate([sa, sb])
        skip = {ia, len(labels_a) + ib}
        for vec, sink in ((sa[ia], near_a), (sb[ib], near_b)):
            cs = [(_cos(vec, pool[j]), j) for j in range(len(pool)) if j not in skip]
            cs.sort(key=lambda t: -t[0])
            sink.append([(pool_labels[j], c) for c, j in cs[:k]])
    return {"cosine": np.asarray(sims), "nearest_a": near_a, "nearest_b": near_b}


# --------------------------------------------------------------------------------------------
# 7. Cost of attention
# --------------------------------------------------------------------------------------------


def attention_cost(cfg: ModelConfig, T: int, bytes_per_value: int = 4) -> dict:
    """Closed-form cost of one forward pass over T tokens (batch 1).

    scores per head per layer = T²; all heads and layers = L·h·T²; memory of the weights if kept
    (training keeps them for backward) = L·h·T²·bytes. FLOPs (multiply-add = 2): QKᵀ and
    weights·V cost 2·2·T²·d_model per layer (quadratic in T); the projections and FFN cost
    2·T·(4·d_model² + 2·d_model·d_ff) per layer (linear in T)."""
    L, H, D, F = cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_ff
    per_head = T * T
    total = L * H * per_head
    quad = L * 4 * T * T * D
    lin = L * 2 * T * (4 * D * D + 2 * D * F)
    return {"T": T, "scores_per_head_layer": per_head, "scores_total": total,
            "memory_bytes": total * bytes_per_value, "flops_attention": quad, "flops_linear": lin,
            "flops_total": quad + lin}


def cost_curve(cfg: ModelConfig, Ts: Sequence[int]) -> dict[str, np.ndarray]:
    rows = [attention_cost(cfg, int(t)) for t in Ts]
    return {k: np.asarray([r[k] for r in rows], dtype=np.float64) for k in rows[0]}


def default_time_grid(max_len: int, n: int = 8) -> list[int]:
    """Up to n sequence lengths from 8 to max_len (capped at 512 to keep the measurement short)."""
    hi = min(int(max_len), 512)
    grid = sorted({int(round(x)) for x in np.geomspace(min(8, hi), hi, n)})
    return [t for t in grid if 1 <= t <= hi]


@torch.no_grad()
def measure_forward_time(model, Ts: Sequence[int], repeats: int = 5, seed: int = 0) -> np.ndarray:
    """Wall-clock seconds of model.forward (the engine, batch 1) for each T: the best of `repeats`
    runs after one warm-up. The rounds are interleaved (every T once per round), so a burst of load
    from other processes on a shared machine spoils one round of all lengths rather than all runs
    of one length. Random ids from a fixed seed. The model is not modified."""
    g = torch.Generator().manual_seed(seed)
    inputs = [torch.randint(0, model.cfg.vocab_size, (1, int(T)), generator=g) for T in Ts]
    for ids in inputs:
        model(ids)  # warm-up
    best = np.full(len(inputs), np.inf)
    for _ in range(max(1, int(repeats))):
        for i, ids in enumerate(inputs):
            t0 = time.perf_counter()
            model(ids)
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def fit_theory(Ts: Sequence[int], seconds: np.ndarray, cfg: ModelConfig) -> dict:
    """Least-squares fit seconds ≈ a + b·flops_linear + c·flops_attention (a, b, c >= 0 by
    clipping), returning the fitted curve and each part (the T² part is the attention)."""
    c = cost_curve(cfg, Ts)
    A = np.stack([np.ones(len(Ts)), c["flops_linear"], c["flops_attention"]], 1)
    scale = A.max(0)
    scale[scale == 0] = 1.0
    coef, *_ = np.linalg.lstsq(A / scale, np.asarray(seconds, dtype=np.float64), rcond=None)
    coef = np.clip(coef, 0, None) / scale
    return {"fit": A @ coef, "constant": np.full(len(Ts), coef[0]), "linear": A[:, 1] * coef[1],
            "quadratic": A[:, 2] * coef[2], "coef": coef}


def block_time_grid(max_len: int, n: int = 9, at_least: int = 1024) -> list[int]:
    """Lengths for the block timing: n lengths from 16 to max(max_len, at_least), geometric. The
    quadratic term only shows at long lengths, so the grid goes past a toy model's 128 positions
    (timed on a block with the model's sizes, which has no position limit)."""
    hi = max(int(max_len), int(at_least))
    return sorted({int(round(x)) for x in np.geomspace(16, hi, n)})


@torch.no_grad()
def measure_block_time(cfg: ModelConfig, Ts: Sequence[int], repeats: int = 7, seed: int = 0) -> dict[str, np.ndarray]:
    """Wall-clock seconds (best of `repeats`, interleaved rounds after one warm-up) per T of
    - "attention": the engine's attend() alone on random q, k, v of shape (1, H, T, d_k) with the
      causal mask: the QKᵀ scores, softmax and weights·V, the T² part;
    - "block": one whole transformer block (norms, Q/K/V/O projections, attend, FFN) of this
      architecture with fresh weights (seed), on random input (1, T, d_model);
    - "attention_spread", "block_spread": how much the runs of each T varied, median / best − 1.
    Fresh weights: the time does not depend on the values, and a block has no position limit."""
    from model.layers import Block
    torch.manual_seed(seed)
    block = Block(cfg.replace(max_len=max(cfg.max_len, max(int(t) for t in Ts)))).eval()
    g = torch.Generator().manual_seed(seed)
    H, dk, D = cfg.n_heads, cfg.d_k, cfg.d_model
    inputs = []
    for T in Ts:
        T = int(T)
        q, k, v = (torch.randn(1, H, T, dk, generator=g) for _ in range(3))
        inputs.append((q, k, v, causal_allowed(T), torch.randn(1, T, D, generator=g)))
    scale = 1.0 / math.sqrt(dk)

    def run_attn(x):
        attend(x[0], x[1], x[2], allowed=x[3], scale=scale)

    def run_block(x):
        block(x[4], x[3], record=False)

    runs = {"attention": np.zeros((max(1, int(repeats)), len(inputs))), "block": np.zeros((max(1, int(repeats)), len(inputs)))}
    for x in inputs:  # warm-up
        run_attn(x)
        run_block(x)
    for r in range(max(1, int(repeats))):
        for i, x in enumerate(inputs):
            for name, fn in (("attention", run_attn), ("block", run_block)):
                t0 = time.perf_counter()
                fn(x)
                runs[name][r, i] = time.perf_counter() - t0
    out = {}
    for name, t in runs.items():
        out[name] = t.min(0)
        # how much the runs of one length varied: the median run over the fastest, minus 1
        out[f"{name}_spread"] = np.median(t, 0) / out[name] - 1
    return out


def fit_linear_quadratic(Ts: Sequence[int], seconds: Sequence[float]) -> dict:
    """Least squares seconds ≈ c + a·T + b·T² with c, a, b >= 0 (a term whose coefficient comes out
    negative is dropped and the rest refitted), on relative errors (each row divided by its time):
    the times span two orders of magnitude, and a plain fit would match the longest lengths only
    and call the short ones' fixed overhead zero. Returns the coefficients, the fitted curve, its
    T² part, the T² share of the fit at each T, and `crossover`: the T where b·T² = c + a·T (the
    quadratic term is half the time beyond it; None when b = 0), and `rel_err`: fit / measured − 1
    at each T."""
    T = np.asarray(Ts, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    if T.shape != y.shape or T.size < 3:
        raise ValueError("need the same number (at least 3) of lengths and times")
    cols = {"c": np.ones_like(T), "a": T, "b": T ** 2}
    keep = list(cols)
    coef = {k: 0.0 for k in cols}
    if (y <= 0).any() or not np.isfinite(y).all():
        raise ValueError("times must be positive and finite")
    while keep:
        A = np.stack([cols[k] / cols[k].max() for k in keep], 1)
        sol, *_ = np.linalg.lstsq(A / y[:, None], np.ones_like(y), rcond=None)  # relative residuals
        if (sol >= 0).all():
            coef.update({k: float(v / cols[k].max()) for k, v in zip(keep, sol)})
            break
        keep.pop(int(np.argmin(sol)))  # the most negative term goes
    c, a, b = coef["c"], coef["a"], coef["b"]
    fit = c + a * T + b * T ** 2
    quad = b * T ** 2
    share = np.divide(quad, fit, out=np.zeros_like(fit), where=fit > 0)
    crossover = (a + math.sqrt(a * a + 4 * b * c)) / (2 * b) if b > 0 else None
    return {"c": c, "a": a, "b": b, "fit": fit, "quadratic": quad, "share": share, "crossover": crossover,
            "rel_err": fit / y - 1}  # the fit's error at each T, relative to the measured time


def timing_summary(Ts: Sequence[int], block_s: Sequence[float], attn_s: Sequence[float], max_len: int,
                   spread: Sequence[float] | None = None) -> str:
    """What the measurement shows, in sentences computed from the numbers (never a canned claim):
    how far the fitted c + a·T + b·T² is from the measured times (beside how much the runs of one
    length varied, `spread` = median / best − 1 per T, when given), where the fitted T² term passes
    half of the block time (inside or beyond the measured lengths), the attention's share of the
    block at the longest length, and whether the timings went down anywhere as T grew (noise)."""
    T = [int(t) for t in Ts]
    blk, att = np.asarray(block_s, dtype=float), np.asarray(attn_s, dtype=float)
    f = fit_linear_quadratic(T, blk)
    out = [fit_error_sentence(T, blk, f, spread)]
    x = f["crossover"]
    if x is None:
        out.append(f"The fit found no T² term in the block's time up to T = {T[-1]}: at these lengths the time "
                   "grows no faster than linearly (fixed overhead and the T-linear projections and FFN dominate).")
    elif x <= T[-1]:
        out.append(f"The fitted T² term is half of the block's time at T ≈ {x:,.0f} and more beyond it "
                   f"({100 * f['share'][-1]:.0f}% at T = {T[-1]:,}).")
    else:
        out.append(f"Up to T = {T[-1]:,} the T² term stays under half of the block's time ({100 * f['share'][-1]:.0f}% "
                   f"at T = {T[-1]:,}); the fit puts the crossing at T ≈ {x:,.0f}, beyond the lengths measured.")
    out.append(f"Attention alone (scores, softmax, weights·V) took {1e3 * att[-1]:.2f} ms beside the whole block's "
               f"{1e3 * blk[-1]:.2f} ms at T = {T[-1]:,}, and {1e3 * att[0]:.3f} ms beside {1e3 * blk[0]:.3f} ms "
               f"at T = {T[0]}.")
    over = [T[i] for i in range(len(T)) if att[i] > blk[i]]
    if over:
        out.append("Attention alone was measured slower than the whole block, which contains it, at T = " +
                   ", ".join(map(str, over)) + ": the machine was busy during those runs.")
    drops = [(T[i], T[i + 1]) for i in range(len(T) - 1) if blk[i + 1] < blk[i]]
    if drops:
        out.append("The block was measured faster at a longer length in " +
                   ", ".join(f"T = {a} → {b}" for a, b in drops) + ": timing noise on a shared machine "
                   "(each point is the best of several runs), not a real speed-up.")
    if T[-1] > max_len:
        out.append(f"This model reads at most {max_len} tokens; the longer lengths time a block of its size, "
                   "which has no such limit.")
    return " ".join(out)


FIT_OK = 0.05  # a fit within 5% of every measured time (or within the runs' own spread) is called close


def fit_error_sentence(Ts: Sequence[int], seconds: np.ndarray, f: dict, spread: Sequence[float] | None = None) -> str:
    """One honest sentence on the fit c + a·T + b·T² (f from fit_linear_quadratic): within how many
    percent of every measured time it stays, or where it misses and by how much, beside the runs'
    spread (median / best − 1 per T) when given. A fit below the measurement at the longest length
    is named: it understates how fast the time grows there."""
    T = [int(t) for t in Ts]
    err = np.asarray(f["rel_err"], dtype=float)
    y = np.asarray(seconds, dtype=float)
    sp = None if spread is None else np.asarray(spread, dtype=float)
    i = int(np.argmax(np.abs(err)))
    tol = max(FIT_OK, float(sp[i]) if sp is not None else 0.0)
    var = "" if sp is None else f" (the runs at one length varied by up to {100 * float(np.max(sp)):.0f}%)"
    if abs(err[i]) <= tol:
        return f"The fitted curve c + a·T + b·T² stays within {100 * abs(err[i]):.0f}% of every measured time{var}."
    side = "under" if err[i] < 0 else "over"
    s = (f"The fitted curve is a rough summary, not an exact law: it is {100 * abs(err[i]):.0f}% {side} the measured "
         f"time at T = {T[i]:,} (fit {1e3 * f['fit'][i]:.2f} ms, measured {1e3 * y[i]:.2f} ms)")
    if sp is not None:
        s += f", more than the runs at that length varied ({100 * float(sp[i]):.0f}%)"
    s += ". "
    if i != len(T) - 1:
        s += f"At T = {T[-1]:,} it is {100 * abs(err[-1]):.0f}% {'under' if err[-1] < 0 else 'over'} the measurement. "
    if err[-1] < -tol:
        s += ("Under at the longest length means the time grows faster there than c + a·T + b·T² allows; "
              "the fit weighs every length's relative error alike, so the short lengths' overhead still counts.")
    else:
        s += "The fit weighs every length's relative error alike, so no single length dominates it."
    return s.strip()


# --------------------------------------------------------------------------------------------
# 8. Masks (mask lab)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MaskSteps:
    """Masks for one sentence; every (T, T) matrix is float 1/0 (1 = may attend). The additive
    forms (0 / -inf) are model.attention.additive of the same masks."""
    pad_1d: np.ndarray  # (T,)   1 = real token, 0 = padding
    pad_2d: np.ndarray  # (T, T) padding as a key mask (with queries masked too if chosen)
    look_ahead: np.ndarray  # (T, T) lower triangle (all ones when bidirectional)
    combined: np.ndarray  # (T, T) pad_2d * look_ahead (elementwise product)
    pad_1d_add: np.ndarray  # (T,) 0 / -inf
    pad_2d_add: np.ndarray  # (T, T) 0 / -inf
    look_ahead_add: np.ndarray  # (T, T) 0 / -inf
    combined_add: np.ndarray  # (T, T) 0 / -inf
    fully_masked: np.ndarray  # (T,) bool: query rows where nothing is allowed


def mask_steps(key_padding_mask, b: int, *, causal: bool, mask_queries: bool) -> MaskSteps:
    """The masks the model combines, for sentence b of the batch, made by the engine's own mask
    functions (model/attention.py). key_padding_mask (B, T) bool (tensor or numpy), True = real token."""
    key_padding_mask = torch.as_tensor(np.asarray(key_padding_mask, dtype=bool))
    T = key_padding_mask.shape[1]
    pad = padding_allowed(key_padding_mask, mask_queries=mask_queries)[b, 0]  # (T, T)
    la = causal_allowed(T) if causal else torch.ones(T, T, dtype=torch.bool)
    comb = combine(pad, la)
    f = lambda m: m.to(torch.float32).numpy()  # noqa: E731
    return MaskSteps(pad_1d=f(key_padding_mask[b]), pad_2d=f(pad), look_ahead=f(la), combined=f(comb),
                     pad_1d_add=additive(key_padding_mask[b]).numpy(), pad_2d_add=additive(pad).numpy(),
                     look_ahead_add=additive(la).numpy(), combined_add=additive(comb).numpy(),
                     fully_masked=(~comb.any(dim=-1)).numpy())


# --------------------------------------------------------------------------------------------
# 9. Causal vs bidirectional: how the next-token distribution changes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopKRow:
    token_id: int
    p_a: float
    p_b: float

    @property
    def delta(self) -> float:
        return self.p_b - self.p_a


def topk_change(p_a: np.ndarray, p_b: np.ndarray, k: int = 5) -> list[TopKRow]:
    """Union of the top-k tokens of two distributions over the vocabulary (V,), ordered by the
    larger of the two probabilities (descending)."""
    p_a, p_b = np.asarray(p_a, dtype=np.float64), np.asarray(p_b, dtype=np.float64)
    if p_a.shape != p_b.shape or p_a.ndim != 1:
        raise ValueError(f"p_a and p_b must both be (V,); got {p_a.shape} and {p_b.shape}")
    ids = list(dict.fromkeys([*topk(p_a, k), *topk(p_b, k)]))
    rows = [TopKRow(int(i), float(p_a[i]), float(p_b[i])) for i in ids]
    return sorted(rows, key=lambda r: -max(r.p_a, r.p_b))


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """Total variation distance between two distributions over the same outcomes (float64):
    0.5 * sum |p - q|, from 0 (identical) to 1 (disjoint)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape; got {p.shape} and {q.shape}")
    return 0.5 * float(np.abs(p - q).sum())
