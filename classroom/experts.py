"""Heads as experts (issue 22 point 7): find the heads of a real model that do a linguistic job,
beyond position, measured over a small built-in set of sentences.

A task is a list of (sentence, query word, target word): for "pronoun → antecedent" the query is
the pronoun and the target the noun it refers to; for "verb → subject" the query is the verb and
the target its subject. A head's score on a task is the mean, over the sentences, of the attention
weight the query's (first) token gives to the target word (summed over the target's word pieces),
and its hit rate the share of sentences where the target holds the head's largest weight among the
ordinary tokens (special tokens such as [CLS]/[SEP] and the query itself left out). The baseline is
what a head spreading its weight evenly over those ordinary tokens would score. For causal models
the first token is left out of the candidates too: it is the attention sink such models park
weight on (and no target sits there). The targets sit at
different distances from their queries (listed with the result), so a fixed-offset head such as
"previous token" cannot score high everywhere. Pure Python over model/ (no Streamlit).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

TASKS: dict[str, list[tuple[str, str, str]]] = {
    "pronoun → antecedent": [
        ("The animal didn't cross the street because it was too tired.", "it", "animal"),
        ("The trophy didn't fit in the suitcase because it was too big.", "it", "trophy"),
        ("The boy ate the sandwich because he was hungry.", "he", "boy"),
        ("My sister lost her keys at the station.", "her", "sister"),
        ("The students finished their homework early.", "their", "students"),
        ("The company said that it would hire more people.", "it", "company"),
        ("The old man smiled because he liked the song.", "he", "man"),
        ("The nurses said they were tired after the night.", "they", "nurses"),
        ("The girl told her friend a secret.", "her", "girl"),
        ("After the dog ate, it slept for hours.", "it", "dog"),
    ],
    "verb → subject": [
        ("The cat on the warm mat sleeps all day.", "sleeps", "cat"),
        ("The old man walked slowly to the store.", "walked", "man"),
        ("The keys to the cabinet are on the table.", "are", "keys"),
        ("The children in the park laughed loudly.", "laughed", "children"),
        ("My neighbour often plays the piano at night.", "plays", "neighbour"),
        ("The teacher with the red scarf smiled.", "smiled", "teacher"),
        ("In winter, the birds fly south.", "fly", "birds"),
        ("The girl who won the race waved.", "waved", "girl"),
        ("The students in my class were writing essays.", "were", "students"),
        ("The river near our village flows into the sea.", "flows", "river"),
    ],
}

_SPECIAL = re.compile(r"^(\[[^\]]*\]|<\|[^|]*\|>|<[a-z_]+>)$")


def word_spans(labels: list[str], ids: list[int], vocab: list[str]) -> list[tuple[str, list[int]]]:
    """Group token positions into words: [(word, [positions])]. A WordPiece "##" piece or a BPE
    token without a leading space ("·") continues the word before it; special tokens are words of
    their own. Punctuation is stripped from the word's text (it is compared lower-cased)."""
    bpe = any(lab.startswith("·") for lab in labels)
    words: list[tuple[str, list[int]]] = []
    for t, (lab, i) in enumerate(zip(labels, ids)):
        special = bool(_SPECIAL.match(vocab[i]))
        cont = (lab.startswith("##") or (bpe and not lab.startswith("·") and lab[:1].isalnum())) and not special
        piece = lab[2:] if lab.startswith("##") else lab.lstrip("·")
        if cont and words and not words[-1][0].startswith("\0"):
            w, pos = words[-1]
            words[-1] = (w + piece, pos + [t])
        else:
            words.append(("\0" + lab if special else piece, [t]))
    return words


def _norm(w: str) -> str:
    return re.sub(r"[^\w']", "", w).lower()


def locate(labels: list[str], ids: list[int], vocab: list[str], query: str, target: str) -> tuple[int, list[int], list[int]]:
    """(query position, target positions, ordinary positions): the target is its first occurrence,
    the query the first occurrence of the query word after it. ValueError when either is missing."""
    words = word_spans(labels, ids, vocab)
    ordinary = [t for w, pos in words if not w.startswith("\0") for t in pos]
    tgt = next(((k, pos) for k, (w, pos) in enumerate(words) if _norm(w) == _norm(target)), None)
    if tgt is None:
        raise ValueError(f"the target word {target!r} is not a word of {labels}")
    q = next((pos for w, pos in words[tgt[0] + 1:] if _norm(w) == _norm(query)), None)
    if q is None:
        raise ValueError(f"the query word {query!r} does not follow {target!r} in {labels}")
    return q[0], tgt[1], ordinary


@dataclass(frozen=True)
class TopHead:
    """One head's numbers on a task (ExpertResult.top)."""
    layer: int
    head: int
    score: float  # mean attention weight query -> target over the sentences
    hit_rate: float  # share of sentences where the target gets the head's largest weight
    far: float  # the score over the sentences whose target is ≥ 2 tokens before the query
    previous: float  # mean weight on the token just before the query (a position-only control)


@dataclass(frozen=True)
class SentenceWeight:
    """One built-in sentence of a task, and the weight one head gives its query -> target link."""
    sentence: str
    query: str  # the word that looks (a pronoun, a verb)
    target: str  # the word it depends on (its antecedent, its subject)
    tokens_back: int  # query position − first target position
    weight: float  # the head's attention weight query -> target (summed over the target's pieces)


@dataclass(frozen=True)
class ExpertResult:
    task: str
    score: np.ndarray  # (L, H) mean attention weight query -> target over the sentences
    hits: np.ndarray  # (L, H) share of sentences where the target gets the largest weight
    baseline: float  # mean over sentences of 1 / (ordinary tokens other than the query)
    distances: list[int]  # (S,) query position − first target position, per sentence
    per_sentence: np.ndarray  # (S, L, H) the weight in each sentence
    far: np.ndarray  # (L, H) the score over the sentences whose target is ≥ 2 tokens before the query
    previous: np.ndarray  # (L, H) mean weight the query gives to the token just before it (a position-only control)
    sentences: list[str]  # (S,) the task's sentences, in TASKS order

    def top(self, n: int = 10) -> list[TopHead]:
        """The n best heads by score, best first."""
        L, H = self.score.shape
        order = np.argsort(-self.score, axis=None, kind="stable")[:n]
        return [TopHead(layer=int(i // H), head=int(i % H), score=float(self.score.flat[i]),
                        hit_rate=float(self.hits.flat[i]), far=self.far.flat[i], previous=self.previous.flat[i])
                for i in order]

    def sentence_weights(self, layer: int, head: int) -> list[SentenceWeight]:
        """Sentence by sentence (TASKS order), the weight this head gives the query -> target link."""
        return [SentenceWeight(sentence=sentence, query=query, target=target, tokens_back=d, weight=float(w))
                for (sentence, query, target), w, d in zip(TASKS[self.task], self.per_sentence[:, layer, head],
                                                           self.distances)]


@torch.no_grad()
def find_experts(model, tok, task: str, causal: bool) -> ExpertResult:
    """Score every head of `model` on TASKS[task] (module docstring). One traced forward per sentence."""
    items = TASKS[task]
    vocab = tok.vocab
    L, H = model.cfg.n_layers, model.cfg.n_heads
    per = np.zeros((len(items), L, H))
    hits = np.zeros((L, H))
    prev = np.zeros((L, H))
    base, dist = [], []
    for s, (sentence, query, target) in enumerate(items):
        enc = tok.encode(sentence)
        qpos, tpos, ordinary = locate(enc.labels, enc.ids, vocab, query, target)
        tr = model.trace(torch.tensor([enc.ids]), causal=causal)
        W = np.stack([layer.attn.weights[0, :, qpos].numpy() for layer in tr.layers])  # (L, H, T) the query's row
        per[s] = W[:, :, tpos].sum(-1)
        prev += W[:, :, qpos - 1]
        cand = [t for t in ordinary if t != qpos and (not causal or 0 < t < qpos)]
        best = np.asarray(cand)[W[:, :, cand].argmax(-1)]  # (L, H) the ordinary key with the largest weight
        hits += np.isin(best, tpos)
        base.append(len(tpos) / len(cand))
        dist.append(qpos - tpos[0])
    far = np.asarray(dist) >= 2
    return ExpertResult(task=task, score=per.mean(0), hits=hits / len(items), baseline=float(np.mean(base)),
                        distances=dist, per_sentence=per, sentences=[s for s, _, _ in items],
                        far=per[far].mean(0), previous=prev / len(items))
