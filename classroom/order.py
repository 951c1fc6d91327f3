"""Positions matter (issue 22, point 6): attention alone ignores order.

With positional encoding switched off (ModelConfig pos_encoding="none") and no mask, shuffling the
words shuffles the attention weights with them: W_shuffled = P W Pᵀ (and each word's output
vector moves with the word). The causal mask alone breaks this: which words a token may see
depends on where it stands, so the same words in another order give other outputs.

Pure Python over model/ (torch for the forward passes, numpy for the comparison).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from model.transformer import Transformer


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


def order_test(model: Transformer, ids: Sequence[int], perm: Sequence[int], causal: bool) -> dict:
    """Run `ids` and its shuffle ids[perm] through `model`. Returns the weights of both (L, H, T, T),
    P W Pᵀ, and the measured gaps: max |W_shuffled − P W Pᵀ| over every layer and head, and
    max |out_shuffled − P out| over the final hidden states (0 up to float rounding = the model
    cannot tell the orders apart beyond moving the words)."""
    ids, perm = list(ids), np.asarray(perm)
    w, out = _weights_and_out(model, ids, causal)
    w_s, out_s = _weights_and_out(model, [ids[i] for i in perm], causal)
    P = permutation_matrix(perm)
    pwp = P @ w @ P.T  # (L, H, T, T): broadcast over layers and heads
    return {"perm": perm, "weights": w, "weights_shuffled": w_s, "pwpT": pwp,
            "weight_gap": float(np.abs(w_s - pwp).max()), "output_gap": float(np.abs(out_s - P @ out).max()),
            "output_scale": float(np.abs(out).max())}


def positions_matter(model: Transformer, ids: Sequence[int], seed: int = 0) -> dict:
    """The demonstration on one sentence: {"perm", and per case ("no PE, bidirectional",
    "no PE, causal", "with PE, bidirectional") the order_test result}."""
    perm = shuffle_order(len(ids), seed)
    blind = without_positions(model)
    return {"perm": perm,
            "no PE, bidirectional": order_test(blind, ids, perm, causal=False),
            "no PE, causal": order_test(blind, ids, perm, causal=True),
            "with PE, bidirectional": order_test(model, ids, perm, causal=False)}
