"""Positional encoding: the sinusoidal table, its wavelengths, and how positions compare.
Pure numpy/torch over the engine (never streamlit, plotly or ui/); every number on the page is
computed here, one hop from the page."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from classroom.architecture import rope_words  # noqa: F401  (the page reads it here, with the layer's own)
from model.layers import apply_rope, rope_tables, sinusoidal_table
from model.transformer import Transformer


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


@dataclass(frozen=True)
class WorkedPE:
    """The notes' d_model = 4 example, float64."""
    pe: np.ndarray  # (3, 4) PE rows of positions 0, 1, 2
    angles: np.ndarray  # (3, 4) pos / 10000^(2i/d) of each entry (dims 2i and 2i+1 share one)
    the: np.ndarray  # (4,) the notes' embedding of 'the'
    cat: np.ndarray  # (4,) the notes' embedding of 'cat'
    the_sum: np.ndarray  # (4,) the + PE(0)
    cat_sum: np.ndarray  # (4,) cat + PE(1)


def worked_pe_example() -> WorkedPE:
    """The notes' d_model = 4 example at positions 0, 1, 2 and 'the' (pos 0) / 'cat' (pos 1) + PE."""
    pe = sinusoidal_table(3, 4, dtype=torch.float64).numpy()  # float64: cos 0.01 = 0.99995, not float32's 0.99994999
    the, cat = np.array(NOTES_PE_EMBEDDINGS["the"]), np.array(NOTES_PE_EMBEDDINGS["cat"])
    angles = np.array([[p / 10000 ** ((2 * (j // 2)) / 4) for j in range(4)] for p in range(3)])
    return WorkedPE(pe=pe, angles=angles, the=the, cat=cat, the_sum=the + pe[0], cat_sum=cat + pe[1])


# --------------------------------------------------------------------------------------------
# Rotary positions on real weights (issue 18 point 4): how RoPE turns q and k, and a measurement
# that the score between a query at position m and a key at position n depends on m − n only.
#
# Uses the engine's own rotary code (model.layers.rope_tables / apply_rope), so what is measured
# here is what the model computes. Pure numpy/torch, no Streamlit.
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PairRotation:
    """One rotary pair of a query vector, before and after the rotation."""
    pair: int  # i: the pair's index, 0 <= i < d_k/2
    dims: tuple[int, int]  # (i, i + d_k/2): the two dimensions it holds (the engine's layout)
    before: np.ndarray  # (2,) float64 the pair before rotation
    after: np.ndarray  # (2,) float64 after rotation
    angle_deg: float  # the angle it turned by, degrees in [-180, 180)
    norm_before: float  # length before
    norm_after: float  # length after (the same: a rotation keeps it)


def pair_rotation(q_pre: np.ndarray, q_post: np.ndarray, pairs: list[int]) -> list[PairRotation]:
    """For one query vector (d_k,) before and after rotation: each chosen pair i (dimensions i and
    i + d_k/2, the engine's layout) as 2-D points, with the angle it turned by (degrees) and its
    length (unchanged by a rotation)."""
    d = q_pre.shape[-1]
    half = d // 2
    out = []
    for i in pairs:
        if not 0 <= i < half:
            raise ValueError(f"pair index must be in [0, {half}), got {i}")
        a = np.array([q_pre[i], q_pre[i + half]], dtype=np.float64)  # (2,)
        b = np.array([q_post[i], q_post[i + half]], dtype=np.float64)  # (2,)
        turn = np.degrees(np.arctan2(b[1], b[0]) - np.arctan2(a[1], a[0]))
        out.append(PairRotation(pair=i, dims=(i, i + half), before=a, after=b,
                                angle_deg=float((turn + 180) % 360 - 180), norm_before=float(np.linalg.norm(a)),
                                norm_after=float(np.linalg.norm(b))))
    return out


def pair_frequencies(d_k: int, theta: float) -> np.ndarray:
    """Radians per position of each pair i: theta^(-2i/d_k), (d_k/2,) (as rope_tables computes)."""
    cos, sin = rope_tables(torch.tensor([1]), d_k, theta)  # angle at position 1 = the frequency
    return np.arctan2(sin[0, : d_k // 2].numpy(), cos[0, : d_k // 2].numpy()).astype(np.float64)


@dataclass(frozen=True)
class RelativeScores:
    """Scores of one rotated query and key at every pair of positions (N = n_pos)."""
    S: np.ndarray  # (N, N) float64 S[m, n] = rot(q, m) · rot(k, n)
    offsets: np.ndarray  # (2N − 1,) int m − n = −(N − 1) … N − 1
    by_offset: np.ndarray  # (2N − 1,) mean of S along the diagonal of each offset
    spread: float  # the largest max − min along any diagonal (0 up to rounding: relative positions)
    range: float  # max − min of S over all pairs of positions


def relative_scores(q: np.ndarray, k: np.ndarray, n_pos: int, theta: float,
                    llama3: tuple[float, float, float, int] | None = None, freq_factors: tuple[float, ...] | None = None,
                    linear: float | None = None) -> RelativeScores:
    """One query vector and one key vector (d_k,) taken before rotation, rotated to every position
    0 … n_pos−1 with the engine's rotary code and the layer's own rotary parameters (theta and any
    rescaling: ModelConfig.layer_rope); S[m, n] = rot(q, m) · rot(k, n). If RoPE encodes relative
    position, S is constant along each diagonal (m − n fixed): the largest spread (max − min) along
    any diagonal is float rounding."""
    if n_pos < 2:
        raise ValueError("n_pos must be at least 2")
    d = q.shape[-1]
    cos, sin = rope_tables(torch.arange(n_pos), d, theta, llama3, freq_factors, linear)  # (n_pos, d) each
    qt = torch.tensor(np.asarray(q, dtype=np.float32)).expand(n_pos, d)  # (n_pos, d), a copy (trace arrays are read-only)
    kt = torch.tensor(np.asarray(k, dtype=np.float32)).expand(n_pos, d)
    qr, kr = apply_rope(qt, cos, sin), apply_rope(kt, cos, sin)  # (n_pos, d): q at m, k at n
    S = (qr.double() @ kr.double().T).numpy()  # (m, n)
    offsets = np.arange(-(n_pos - 1), n_pos)
    diag = {int(o): np.diagonal(S, offset=-int(o)) for o in offsets}  # m − n = o  <=>  diagonal −o
    spread = max(float(v.max() - v.min()) for v in diag.values())
    return RelativeScores(S=S, offsets=offsets, by_offset=np.array([diag[int(o)].mean() for o in offsets]),
                          spread=spread, range=float(S.max() - S.min()))


def layer_rope_words(cfg, layer: int) -> str:
    """Which θ layer `layer` turns with, and why (its kind of layer), from the config."""
    theta = cfg.layer_rope(layer)[0]
    if cfg.rope_local_theta is None:
        return f"Layer {layer} turns with θ = {theta:,.0f}, as every layer of this model."
    kind = (f"a sliding-window layer (window {cfg.layer_window(layer):,})" if cfg.layer_window(layer) is not None
            else "a global layer")
    return f"Layer {layer} is {kind}: its queries and keys turn with θ = {theta:,.0f}."


# --------------------------------------------------------------------------------------------
# Positions matter (issue 22, point 6): attention alone ignores order.
#
# With positional encoding switched off (ModelConfig pos_encoding="none") and no mask, shuffling the
# words shuffles the attention weights with them: W_shuffled = P W Pᵀ (and each word's output
# vector moves with the word). The causal mask alone breaks this: which words a token may see
# depends on where it stands, so the same words in another order give other outputs.
#
# Pure Python over model/ (torch for the forward passes, numpy for the comparison).
# --------------------------------------------------------------------------------------------

def without_positions(model: Transformer) -> Transformer:
    """A copy of `model` with positional encoding switched off (pos_encoding="none"): the same
    weights except the position table (a learned table is dropped). The model is not changed."""
    cfg = model.cfg.replace(pos_encoding="none")
    out = Transformer(cfg, init=False)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("pos_emb.")}
    out.load_state_dict(state, strict=True)
    for p in out.parameters():
        p.requires_grad_(False)
    return out.eval()


def shuffle_order(n: int, seed: int) -> np.ndarray:
    """A permutation of 0..n-1 that moves at least one position (n >= 2), from `seed`."""
    rng = np.random.default_rng(int(seed))
    for _ in range(100):
        perm = rng.permutation(n)
        if n < 2 or not np.array_equal(perm, np.arange(n)):
            return perm
    return np.roll(np.arange(n), 1)


def permutation_matrix(perm: Sequence[int]) -> np.ndarray:
    """P with P[i, perm[i]] = 1: (P x)[i] = x[perm[i]] (row i of the shuffled sentence is word perm[i])."""
    perm = np.asarray(perm)
    P = np.zeros((len(perm), len(perm)))
    P[np.arange(len(perm)), perm] = 1.0
    return P


def _weights_and_out(model: Transformer, ids: Sequence[int], causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """(L, H, T, T) attention weights and (T, D) final hidden states of one sentence."""
    tr = model.trace(torch.tensor([list(ids)], dtype=torch.long), causal=causal)
    w = np.stack([lt.attn.weights[0].numpy() for lt in tr.layers]).astype(np.float64)
    return w, tr.final[0].numpy().astype(np.float64)


@dataclass(frozen=True)
class OrderTest:
    """A sentence and its shuffle through one model, and how far the shuffle is from moving the
    words along (0 up to float rounding = the model cannot tell the orders apart)."""
    perm: np.ndarray  # (T,) the shuffle: row i of the shuffled sentence is word perm[i]
    weights: np.ndarray  # (L, H, T, T) float64 attention weights of the original sentence
    weights_shuffled: np.ndarray  # (L, H, T, T) float64 those of the shuffled sentence
    pwpT: np.ndarray  # (L, H, T, T) P W Pᵀ: the original weights, rows and columns moved
    weight_gap: float  # max |weights_shuffled − P W Pᵀ| over every layer and head
    output_gap: float  # max |out_shuffled − P out| over the final hidden states
    output_scale: float  # max |out|: what output_gap compares with


def order_test(model: Transformer, ids: Sequence[int], perm: Sequence[int], causal: bool) -> OrderTest:
    """Run `ids` and its shuffle ids[perm] through `model`: the weights of both, P W Pᵀ, and the
    measured gaps."""
    ids, perm = list(ids), np.asarray(perm)
    w, out = _weights_and_out(model, ids, causal)
    w_s, out_s = _weights_and_out(model, [ids[i] for i in perm], causal)
    P = permutation_matrix(perm)
    pwp = P @ w @ P.T  # (L, H, T, T): broadcast over layers and heads
    return OrderTest(perm=perm, weights=w, weights_shuffled=w_s, pwpT=pwp,
                     weight_gap=float(np.abs(w_s - pwp).max()), output_gap=float(np.abs(out_s - P @ out).max()),
                     output_scale=float(np.abs(out).max()))


@dataclass(frozen=True)
class PositionsMatter:
    """One shuffle of a sentence, tested three ways (each an order_test)."""
    perm: np.ndarray  # (T,) the shuffle: row i of the shuffled sentence is word perm[i]
    no_pe_bidirectional: OrderTest  # positions off, no mask: the weights only move with the words
    no_pe_causal: OrderTest  # positions off, causal mask: the mask alone leaks order
    with_pe_bidirectional: OrderTest  # the model's own positions, no mask


def positions_matter(model: Transformer, ids: Sequence[int], seed: int = 0) -> PositionsMatter:
    """The demonstration on one sentence: the shuffle of `seed` through the model without its
    positions (bidirectional, then causal) and with them (bidirectional)."""
    perm = shuffle_order(len(ids), seed)
    blind = without_positions(model)
    return PositionsMatter(perm=perm,
                           no_pe_bidirectional=order_test(blind, ids, perm, causal=False),
                           no_pe_causal=order_test(blind, ids, perm, causal=True),
                           with_pe_bidirectional=order_test(model, ids, perm, causal=False))
