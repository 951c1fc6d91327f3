"""Contextual embeddings: one word's state in two sentences, stage by stage.
Pure numpy/torch over the engine (never streamlit, plotly or ui/); every number on the page is
computed here, one hop from the page."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from labels import token_labels
from model.trace import ForwardTrace


def word_key(label: str) -> str:
    """The word a token label stands for, as the page compares it: lower case, without the space
    marker of byte-level BPE labels ("·bank" -> "bank": SmolLM2 reads " bank" as one token) and
    surrounding spaces."""
    return str(label).strip().lstrip("·").strip().lower()


def is_special(label: str) -> bool:
    """<bos>, <pad>, [CLS], [SEP] ...: tokens that are not words of the sentence."""
    lab = str(label)
    return len(lab) > 2 and ((lab[0] == "<" and lab[-1] == ">") or (lab[0] == "[" and lab[-1] == "]"))


def find_word(labels: Sequence[str], word: str) -> int | None:
    """Index of the first token that stands for `word` (word_key: case and a leading space marker
    ignored), or None."""
    w = word_key(word)
    for i, lab in enumerate(labels):
        if not is_special(lab) and word_key(lab) == w:
            return i
    return None


def common_words(labels_a: Sequence[str], labels_b: Sequence[str]) -> list[str]:
    """Words (word_key) present in both token lists, in order of first appearance in A; special
    tokens (<bos>, [CLS], [SEP]) and empty keys left out."""
    b = {word_key(x) for x in labels_b if not is_special(x)}
    out: list[str] = []
    for x in labels_a:
        w = word_key(x)
        if w and not is_special(x) and w in b and w not in out:
            out.append(w)
    return out


def same_context(ids_a: Sequence[int], ids_b: Sequence[int], ia: int, ib: int, causal: bool) -> bool:
    """True when token ia of A and token ib of B cannot differ at any depth: under the causal mask a
    token sees only itself and the tokens before it, so equal prefixes (ids up to and including the
    word, at the same positions) give equal vectors in every layer (cosine 1 throughout, e.g. the
    first word of two sentences that start alike)."""
    return bool(causal) and ia == ib and list(ids_a[: ia + 1]) == list(ids_b[: ib + 1])


def default_word(words: Sequence[str], ids_a: Sequence[int], ids_b: Sequence[int], labels_a: Sequence[str],
                 labels_b: Sequence[str], causal: bool, preferred: str = "") -> str | None:
    """The word the page opens on: `preferred` (the example's word) when it is offered, else the
    first common word whose two occurrences can differ (not same_context); None without words."""
    if not words:
        return None
    if preferred and word_key(preferred) in words:
        return word_key(preferred)
    for w in words:
        ia, ib = find_word(labels_a, w), find_word(labels_b, w)
        if not same_context(ids_a, ids_b, ia, ib, causal):
            return w
    return words[0]


def stage_states(trace: ForwardTrace) -> tuple[list[str], list[np.ndarray]]:
    """Per-token vectors at each depth: token embedding, + position, after each block (B = 1)."""
    names = ["token embedding", "+ position"] + [f"after layer {l}" for l in range(len(trace.layers))]
    states = [trace.embeddings.token[0], trace.embeddings.sum[0]]
    states += [block.resid_out[0] for block in trace.layers]
    return names, [np.asarray(s, dtype=np.float64) for s in states]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else 0.0


@dataclass(frozen=True)
class ContextualSimilarity:
    """One word in two sentences (A, B) compared at each of S stages (stage_states' names)."""
    cosine: np.ndarray  # (S,) float64 cosine(A's token, B's token) at each stage
    nearest_a: list[list[tuple[str, float]]]  # (S, k) A's token's k nearest other tokens of both
    #                                           sentences, closest first: (label, cosine), label "A3:cat"
    nearest_b: list[list[tuple[str, float]]]  # (S, k) the same for B's token


def contextual_similarity(states_a: list[np.ndarray], states_b: list[np.ndarray], ia: int, ib: int,
                          labels_a: Sequence[str], labels_b: Sequence[str], k: int = 3) -> ContextualSimilarity:
    """Cosine similarity of token ia (sentence A) and ib (sentence B) at each stage, and at each
    stage each occurrence's k nearest other tokens (by cosine) among both sentences' tokens."""
    sims, near_a, near_b = [], [], []
    pool_labels = ["A" + t for t in token_labels(labels_a, plain=True)] + ["B" + t for t in token_labels(labels_b, plain=True)]
    for sa, sb in zip(states_a, states_b):
        sims.append(cosine(sa[ia], sb[ib]))
        pool = np.concatenate([sa, sb])
        skip = {ia, len(labels_a) + ib}
        for vec, sink in ((sa[ia], near_a), (sb[ib], near_b)):
            cs = [(cosine(vec, pool[j]), j) for j in range(len(pool)) if j not in skip]
            cs.sort(key=lambda t: -t[0])
            sink.append([(pool_labels[j], c) for c, j in cs[:k]])
    return ContextualSimilarity(cosine=np.asarray(sims), nearest_a=near_a, nearest_b=near_b)
