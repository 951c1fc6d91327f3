"""Embeddings and targets (issue 22, point 4 on the teaching models): the nearest neighbours of a
word in the embedding matrix (cosine similarity of its rows), and the one-hot target with the
cross-entropy at each position of a sentence. Pure numpy over arrays taken from model/."""
from __future__ import annotations

import re
from dataclasses import dataclass
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


@dataclass(frozen=True)
class TargetLoss:
    """Position t of a causal run scored against its one-hot target, the true next token x_{t+1}."""
    position: int  # t: the model has read tokens 0 … t
    target_token: str  # x_{t+1} as the vocabulary spells it
    target_index: int  # its id: the 1 of the one-hot target vector (|V| entries)
    p_target: float  # p(x_{t+1} | x_≤t), the model's probability there
    loss: float  # cross-entropy −Σ_i y_i log p_i = −log p_target (nats)
    argmax: str  # the model's most likely next token at t


def next_token_losses(probs: np.ndarray, ids: Sequence[int], vocab: Sequence[str]) -> list[TargetLoss]:
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
        rows.append(TargetLoss(position=t, target_token=vocab[target], target_index=target, p_target=pt,
                               loss=float(-(onehot * np.log(np.maximum(p[t], np.finfo(float).tiny))).sum()),
                               argmax=vocab[int(p[t].argmax())]))
    return rows


def mean_loss(rows: Sequence[TargetLoss]) -> float:
    """The mean cross-entropy over the positions: the loss training minimises (nats)."""
    return float(np.mean([r.loss for r in rows]))


# --- any tokenizer (the toy word vocabularies, MiniLM's WordPiece, SmolLM2's byte-level BPE) ---

_SPECIAL_NAME = re.compile(r"^(\[[^\]]*\]|<\|[^|]*\|>|<[a-z_]+>)$")  # [CLS] [unused3] <|endoftext|> <pad>


def special_rows(vocab: Sequence[str]) -> np.ndarray:
    """Boolean (V,) mask of the rows that are special tokens ([CLS], [unused7], <|im_start|>,
    <pad> …): left out of neighbour lists, where they would only add noise."""
    return np.array([bool(_SPECIAL_NAME.match(t)) for t in vocab], dtype=bool)


def display_vocab(tok) -> Sequence[str]:
    """One label per token id, as a reader sees it out of context (top-k tables, neighbour lists):
    a byte-level BPE vocabulary through the tokenizer's display_vocab ("ĠParis" -> "·Paris",
    made once per tokenizer), other vocabularies as spelled."""
    return getattr(tok, "display_vocab", tok.vocab)


def row_label(tok, i: int) -> str:
    """A vocabulary row as a reader sees it (display_vocab)."""
    return display_vocab(tok)[int(i)]


def resolve_word(tok, word: str) -> tuple[int | None, list[str]]:
    """The vocabulary row a typed word uses inside a sentence: (row id, []) when it is one token;
    (None, its pieces' labels) when the tokenizer splits it (or () for empty input). The word is
    encoded as it appears mid-sentence (after a space), so BPE finds "Ġcat", not "cat"."""
    word = str(word).strip()
    if not word or any(c.isspace() for c in word):
        return None, []
    enc = tok.encode(" " + word)
    special = special_rows(tok.vocab)
    keep = [(i, lab) for i, lab in zip(enc.ids, enc.labels) if not special[i]]
    if len(keep) == 1:
        return int(keep[0][0]), []
    return None, [lab for _, lab in keep]


def neighbours_of_row(E: np.ndarray, row: int, k: int = 8,
                      skip: np.ndarray | None = None) -> list[tuple[int, float]]:
    """The k rows of E (V, D) nearest to row `row` by cosine similarity, best first, as (row id,
    cosine); the row itself and the rows flagged in `skip` (V,) left out."""
    E = np.asarray(E, dtype=np.float32)
    if E.ndim != 2 or not 0 <= int(row) < E.shape[0]:
        raise ValueError(f"E must be (V, D) and row in [0, V); got E {E.shape}, row {row}")
    norms = np.maximum(np.linalg.norm(E, axis=1), 1e-12)  # (V,)
    cos = (E @ E[row]) / (norms * norms[row])  # (V,)
    cos = cos.astype(np.float64)
    banned = np.zeros(E.shape[0], dtype=bool) if skip is None else np.asarray(skip, dtype=bool).copy()
    banned[int(row)] = True
    cos_masked = np.where(banned, -np.inf, cos)
    k = max(1, min(int(k), int((~banned).sum())))
    top = np.argpartition(-cos_masked, k - 1)[:k]
    top = top[np.argsort(-cos_masked[top], kind="stable")]
    return [(int(i), float(cos[i])) for i in top]


@dataclass(frozen=True)
class WordNeighbours:
    """The rows of the token-embedding matrix E nearest to a typed word's row (cosine similarity)."""
    row_label: str | None  # the word's row as a reader sees it; None when the word is not one token
    tokens: list[str]  # (k,) the nearest rows' labels, most similar first ([] when row_label is None)
    cosines: list[float]  # (k,) their cosine similarity with the word's row
    pieces: list[str]  # the labels of the pieces the tokenizer splits the word into (when it is not one token)


def word_neighbours(E: np.ndarray, tok, word: str, k: int, skip: np.ndarray | None = None) -> WordNeighbours:
    """The k rows of E (V, D) nearest to `word`'s row (resolve_word), special rows `skip` (V,)
    left out; or no neighbours and the word's pieces when it is not one token."""
    row, pieces = resolve_word(tok, word)
    if row is None:
        return WordNeighbours(row_label=None, tokens=[], cosines=[], pieces=pieces)
    near = neighbours_of_row(E, row, k, skip=skip)
    return WordNeighbours(row_label=row_label(tok, row), tokens=[row_label(tok, i) for i, _ in near],
                          cosines=[c for _, c in near], pieces=[])
