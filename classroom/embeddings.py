"""Embeddings and targets (issue 22, point 4 on the teaching models): the nearest neighbours of a
word in the embedding matrix (cosine similarity of its rows), and the one-hot target with the
cross-entropy at each position of a sentence. Pure numpy over arrays taken from model/."""
from __future__ import annotations

from typing import Sequence

import numpy as np

SPECIAL = ("<pad>", "<unk>", "<bos>", "<eos>", "<mask>")


def nearest_neighbours(E: np.ndarray, vocab: Sequence[str], word: str, k: int = 8,
                       skip: Sequence[str] = SPECIAL) -> list[tuple[str, float]]:
    """The k rows of E (V, D) most similar to `word`'s row by cosine similarity, best first (the
    word itself and special tokens left out). ValueError when the word is not in the vocabulary."""
    vocab = list(vocab)
    if word not in vocab:
        raise ValueError(f"{word!r} is not in this model's vocabulary")
    E = np.asarray(E, dtype=np.float64)
    if E.ndim != 2 or E.shape[0] != len(vocab):
        raise ValueError(f"E must be (V, D) with V = {len(vocab)} rows, got {E.shape}")
    unit = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
    w = vocab.index(word)
    cos = unit @ unit[w]  # (V,)
    banned = {w} | {i for i, t in enumerate(vocab) if t in skip}
    order = [i for i in np.argsort(-cos, kind="stable") if i not in banned][:max(1, int(k))]
    return [(vocab[i], float(cos[i])) for i in order]


def next_token_losses(probs: np.ndarray, ids: Sequence[int], vocab: Sequence[str]) -> list[dict]:
    """Per position t = 0 … T−2 of a causal run: the target is the true next token x_{t+1}, as a
    one-hot vector over the vocabulary (1 at its index, 0 elsewhere); the model's probability
    there; and the cross-entropy −Σ_i y_i log p_i = −log p(x_{t+1} | x_≤t). probs (T, V)."""
    p = np.asarray(probs, dtype=np.float64)
    ids = [int(i) for i in ids]
    rows = []
    for t in range(len(ids) - 1):
        target = ids[t + 1]
        onehot = np.zeros(p.shape[1])
        onehot[target] = 1.0
        pt = float(p[t, target])
        rows.append({"position": t, "target token": vocab[target], "target index": target,
                     "p(target)": pt, "loss −log p": float(-(onehot * np.log(np.maximum(p[t], np.finfo(float).tiny))).sum()),
                     "argmax": vocab[int(p[t].argmax())]})
    return rows
