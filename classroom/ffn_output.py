"""FFN & output layer: the position-wise FFN, top-k next tokens, weight tying, the last layer.
Pure numpy/torch over the engine (never streamlit, plotly or ui/); every number on the page is
computed here, one hop from the page."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .positional import cosine_matrix


@torch.no_grad()
def ffn_position_check(model, layer: int, ffn_input: np.ndarray, ffn_output: np.ndarray) -> float:
    """Run the layer's FFN on each position alone and compare with the traced (all positions at
    once) output: the max |difference| (≈ 0 because the same W_1, W_2 apply at every position)."""
    ffn = model.blocks[layer].ffn
    x = torch.tensor(np.array(ffn_input, dtype=np.float32))
    rows = [ffn(x[t: t + 1][None], record=False)[0][0, 0] for t in range(x.shape[0])]
    alone = torch.stack(rows).numpy()
    return float(np.abs(alone - np.asarray(ffn_output)).max())


ACTIVE_ABOVE = 0.05  # a GELU/SiLU unit counts as "clearly positive" above this (ReLU: above 0)


def active_share(hidden: np.ndarray, activation: str) -> float:
    """Share of the FFN's hidden activations (T, d_ff) that are clearly positive: > 0 after a
    ReLU, > ACTIVE_ABOVE after a smooth activation (GELU, SwiGLU), whose small negative tail is not off."""
    h = np.asarray(hidden)
    return float((h > 0).mean()) if activation == "relu" else float((h > ACTIVE_ABOVE).mean())


def topk(p: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries along the last axis, largest first (ties: lower index
    first; NaN last); k is clipped to 1 .. size. The one top-k: topk_next and topk_change use it.
    Sorts only the candidates at or above each row's k-th largest value (np.partition), in the
    array's own dtype: a full stable sort of SmolLM2's 1,024 × 49,152 probabilities took 5 s."""
    p = np.asarray(p)
    n = p.shape[-1]
    k = max(1, min(int(k), n))
    if 8 * k >= n or not np.issubdtype(p.dtype, np.floating):
        return np.argsort(-np.asarray(p, dtype=np.float64), axis=-1, kind="stable")[..., :k]
    rows = p.reshape(-1, n)  # (R, n)
    kth = -np.partition(-rows, k - 1, axis=-1)[:, k - 1]  # (R,) the k-th largest value of each row
    out = np.empty((rows.shape[0], k), dtype=np.intp)
    for r in range(rows.shape[0]):
        row = rows[r]
        cand = np.flatnonzero(row >= kth[r]) if not np.isnan(kth[r]) else None
        if cand is None or cand.size < k:  # fewer than k numbers in the row: NaN go last, as argsort does
            out[r] = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        else:  # candidates in index order: a stable sort keeps ties lower index first
            out[r] = cand[np.argsort(-row[cand].astype(np.float64), kind="stable")[:k]]
    return out.reshape(*p.shape[:-1], k)


def topk_next(probs: np.ndarray, vocab: Sequence[str], k: int = 5) -> tuple[np.ndarray, list[list[str]]]:
    """probs (T, V) -> top-k probabilities (T, k) (descending, float64) and their tokens."""
    p = np.asarray(probs)
    idx = topk(p, k)
    return np.take_along_axis(p, idx, -1).astype(np.float64), [[vocab[i] for i in row] for row in idx]


@dataclass(frozen=True)
class SequenceLogprob:
    """p(x) = Π_t p(x_t | x_<t) of one causal run, factor by factor (T tokens, T − 1 factors)."""
    p: np.ndarray  # (T − 1,) float64: p(x_t | x_<t) for t = 1 … T − 1
    logp: np.ndarray  # (T − 1,) float64: natural log of p (floored at the smallest float64)
    total_logp: float  # Σ logp = log p(x); 0.0 for a single token
    total_p: float  # exp(total_logp) = p(x); 1.0 for a single token
    perplexity: float  # exp(−total_logp / (T − 1)); nan for a single token


def sequence_logprob(probs: np.ndarray, ids: Sequence[int]) -> SequenceLogprob:
    """Autoregressive factorisation p(x) = Π_t p(x_t | x_<t) from a causal trace's probs (T, V).

    Position t-1's distribution predicts token t, so there are T-1 factors (the first token is
    given): per-token p and log p (natural log) and the totals."""
    p = np.asarray(probs, dtype=np.float64)
    ids = np.asarray(ids)
    if len(ids) < 2:
        return SequenceLogprob(p=np.zeros(0), logp=np.zeros(0), total_logp=0.0, total_p=1.0, perplexity=float("nan"))
    pt = p[np.arange(len(ids) - 1), ids[1:]]
    logp = np.log(np.maximum(pt, np.finfo(np.float64).tiny))
    total = float(logp.sum())
    return SequenceLogprob(p=pt, logp=logp, total_logp=total, total_p=float(math.exp(total)),
                           perplexity=float(math.exp(-total / len(pt))))


TYING_POSITIONS = 64  # weight_tying recomputes the logits at this many positions, spread evenly
#                      (all 1,024 of SmolLM2's in float64 were 400 MB and 2 s of a page's first paint)


@dataclass(frozen=True)
class WeightTying:
    """Is the output layer the token-embedding matrix, and does h · Wᵀ give the model's logits?"""
    tied: bool  # the output matrix is the embedding matrix E (same storage, same shape)
    max_diff: float  # max |final · W_outᵀ (float64) − the traced logits| over the positions checked × V
    shape: tuple[int, int]  # (V, D) of the output matrix
    positions: int = 0  # how many positions were recomputed (every one up to TYING_POSITIONS)
    of: int = 0  # the sentence's positions T


def weight_tying(model, final: np.ndarray, logits: np.ndarray,
                 max_positions: int = TYING_POSITIONS) -> WeightTying:
    """Is the output matrix the token-embedding matrix (same storage)? And do the traced logits
    (T, V) equal final (T, D) · Eᵀ (max |difference|)? At most max_positions positions, spread
    evenly over the sentence (first and last included), are recomputed."""
    out_m = model.output_matrix
    emb = model.tok_emb.weight
    same = bool(out_m.data_ptr() == emb.data_ptr() and out_m.shape == emb.shape)
    T = len(final)
    rows = np.arange(T) if T <= max_positions else np.unique(np.linspace(0, T - 1, max_positions).round().astype(int))
    recomputed = np.asarray(final[rows], dtype=np.float64) @ out_m.detach().double().numpy().T
    return WeightTying(tied=same, max_diff=float(np.abs(recomputed - np.asarray(logits[rows])).max()),
                       shape=tuple(out_m.shape), positions=len(rows), of=T)


@dataclass(frozen=True)
class OutputLayerView:
    """What the page shows of the output layer: weight tying and the first rows of both matrices."""
    tying: WeightTying
    embedding_rows: np.ndarray  # (n, D) float32: the first n rows of the token-embedding matrix E (a copy)
    output_rows: np.ndarray  # (n, D) float32: the first n rows of the output matrix (a copy)


def output_layer_view(model, final: np.ndarray, logits: np.ndarray, n_rows: int) -> OutputLayerView:
    """weight_tying(model, final, logits) plus the first n_rows of E and of the output matrix."""
    return OutputLayerView(tying=weight_tying(model, final, logits),
                           embedding_rows=model.tok_emb.weight.detach().numpy()[:n_rows].copy(),
                           output_rows=model.output_matrix.detach().numpy()[:n_rows].copy())


def robust_limit(x: np.ndarray, q: float = 99.0) -> float:
    """The q-th percentile of |x| (> 0): a colour range that a few outlier values (trained
    embeddings have some) do not wash out."""
    v = float(np.percentile(np.abs(np.asarray(x, dtype=np.float64)), q))
    return v if v > 0 else 1.0


@dataclass(frozen=True)
class LastLayerView:
    """What an encoder's last layer produces for one sentence (T tokens, width D)."""
    norms: np.ndarray  # (T,) float64: L2 norm of each token's final vector
    cosine: np.ndarray  # (T, T) float64: cosine similarity between the tokens' final vectors
    mean: np.ndarray  # (D,) float64: mean over the tokens (MiniLM's sentence embedding before its L2 normalisation)


def last_layer_view(final: np.ndarray) -> LastLayerView:
    """What a model without an output layer (an encoder such as MiniLM) produces: its final hidden
    states (T, D) -> per-token L2 norms, cosine similarity between tokens, and the mean over tokens."""
    x = np.asarray(final, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"final must be (T, D); got shape {x.shape}")
    return LastLayerView(norms=np.linalg.norm(x, axis=-1), cosine=cosine_matrix(x), mean=x.mean(axis=0))


# --------------------------------------------------------------------------------------------
# Fill in the blank (issue 21 point 4): what a masked language model is for. Replace one token of
# a sentence by the mask token, run the model bidirectionally, and read its guesses at that position.
# Pure Python over model/.
# --------------------------------------------------------------------------------------------

MASK_TOKENS = ("<mask>", "[MASK]")


def mask_id(vocab: Sequence[str]) -> int | None:
    """The vocabulary's mask token id, or None (a model not trained to fill blanks)."""
    for name in MASK_TOKENS:
        if name in vocab:
            return list(vocab).index(name)
    return None


@dataclass(frozen=True)
class FillIn:
    """A masked language model's guesses for one hidden position of a sentence (vocabulary size V)."""
    masked_ids: list[int]  # (T,) the sentence's ids with the hidden position replaced by the mask id
    top_ids: np.ndarray  # (k,) int: the k most likely token ids at that position, most likely first
    top_p: np.ndarray  # (k,) float64: their probabilities
    true_id: int  # the hidden (true) token's id
    true_p: float  # its probability
    true_rank: int  # its rank among all V tokens (1 = the model's first guess)


def hide_word(ids: Sequence[int], position: int, mask: int) -> tuple[list[int], int]:
    """(ids with ids[position] replaced by `mask`, the hidden true id); a clear error off the sentence."""
    ids = [int(i) for i in ids]
    if not 0 <= position < len(ids):
        raise ValueError(f"position must be in [0, {len(ids) - 1}], got {position}")
    masked = ids.copy()
    masked[position] = int(mask)
    return masked, ids[position]


@torch.no_grad()
def fill_in(model, ids: Sequence[int], position: int, mask: int, k: int = 5) -> FillIn:
    """ids with ids[position] replaced by `mask`, traced bidirectionally: the top-k tokens at that
    position with their probabilities, and where the true token ranks (1 = the model's first guess)."""
    masked, true = hide_word(ids, position, mask)
    tr = model.trace(torch.tensor([masked]), causal=False)
    p = tr.probs[0, position].double().numpy()  # (V,)
    order = np.argsort(-p, kind="stable")
    return FillIn(masked_ids=masked, top_ids=order[:k], top_p=p[order[:k]], true_id=true, true_p=float(p[true]),
                  true_rank=int(np.nonzero(order == true)[0][0]) + 1)


def neighbours_note(source_kind: str) -> str:
    """The end of the embedding-neighbours caption: what the rows of E are, by where the model
    comes from (ui.models.ModelSource.kind). Fresh weights are random rows (no pattern to find);
    a model trained here learned them from the built-in corpus; a pretrained one from its own."""
    if source_kind == "fresh":
        return " (fresh weights: random rows, so no pattern)."
    if source_kind == "pretrained":
        return ": a pretrained model learned these rows from billions of words, so try cat, king, Paris or apple."
    if source_kind == "session":
        return ": this model learned these rows from its training text."
    return (": this model learned these rows from the built-in corpus (a few thousand short sentences), so words "
            "of one kind (fruit, animals, colours) can end up close.")
# What a model can do for "fill in the blank" (issue 33 item 3): a capability, not a model name, so
# that any masked LM plugs in (the toy masked LM; a BERT or RoBERTa checkpoint opened from disk with
# its MLM head, issue 32).
MLM_HEAD = "mlm-head"  # an output layer over the vocabulary, a mask token, a bidirectional objective
ENCODER_ONLY = "encoder-only"  # a masked LM's encoder whose MLM head is gone (MiniLM: sentence embeddings)


def fill_blank_capability(has_output_layer: bool, vocab: Sequence[str], bidirectional: bool | None) -> str | None:
    """MLM_HEAD when the model can score the vocabulary at a masked position (an output layer, a
    mask token in its vocabulary, trained bidirectionally); ENCODER_ONLY when it has the mask token
    and the bidirectional objective but no output layer; None otherwise (a causal LM, fresh weights)."""
    if bidirectional is not True or mask_id(vocab) is None:
        return None
    return MLM_HEAD if has_output_layer else ENCODER_ONLY


@dataclass(frozen=True)
class NearestRows:
    """The closest honest stand-in for an encoder without its MLM head: the vocabulary rows nearest
    (cosine) to the final hidden state at a masked position. Not a prediction: no head was trained
    to map that state onto the vocabulary (V tokens)."""
    masked_ids: list[int]  # (T,) the sentence's ids with the hidden position replaced by the mask id
    top_ids: np.ndarray  # (k,) int: the k rows of E nearest to the masked position's final state, nearest first
    top_cos: np.ndarray  # (k,) float64: their cosine similarity
    true_id: int  # the hidden (true) token's id
    true_cos: float  # its row's cosine similarity
    true_rank: int  # its rank among the rows compared (1 = nearest)
    compared: int  # rows compared (special tokens left out)


@torch.no_grad()
def nearest_rows(model, ids: Sequence[int], position: int, mask: int, k: int = 5,
                 skip: Sequence[int] = ()) -> NearestRows:
    """ids with ids[position] replaced by `mask`, traced bidirectionally; the rows of the token
    embedding matrix E (V, D) nearest by cosine to the final hidden state at that position (rows in
    `skip`, e.g. [CLS], [SEP], [MASK], left out), and where the true token's row ranks."""
    masked, true = hide_word(ids, position, mask)
    h = model.trace(torch.tensor([masked]), causal=False).final[0, position].double().numpy()  # (D,)
    E = model.tok_emb.weight.detach().double().numpy()  # (V, D)
    cos = (E @ h) / np.maximum(np.linalg.norm(E, axis=1) * np.linalg.norm(h), 1e-300)
    keep = np.ones(len(cos), dtype=bool)
    keep[list(skip)] = False
    keep[true] = True
    cand = np.flatnonzero(keep)
    order = cand[np.argsort(-cos[cand], kind="stable")]
    return NearestRows(masked_ids=masked, top_ids=order[:k], top_cos=cos[order[:k]], true_id=true,
                       true_cos=float(cos[true]), true_rank=int(np.nonzero(order == true)[0][0]) + 1,
                       compared=int(cand.size))


def is_special_token(label: str) -> bool:
    """<bos>, <eos>, <pad>, [CLS], [SEP] ...: not a word one would hide."""
    lab = str(label)
    return len(lab) > 2 and ((lab[0] == "<" and lab[-1] == ">") or (lab[0] == "[" and lab[-1] == "]"))
