"""Encoder–decoder: the RNN bottleneck measured (issue 34 point 3). Two measurements of the notes'
claims about recurrent translators (004):

(a) "A fixed context vector is a bottleneck: accuracy falls with sentence length." The shipped
    translators on the same held-out sentences, grouped by source length: the RNN with attention
    (checkpoints/rnn-translator), the same RNN recipe without attention (one fixed context vector,
    checkpoints/rnn-translator-noattn) and the Transformer (checkpoints/translator).
(b) "RNNs are sequential, attention is parallel." The time of a GRU over T tokens (T steps, each
    waiting for the previous one) against one self-attention layer over the same T tokens (every
    position at once: a few matrix products), as T grows.

Pure Python over model/ and training/ (no streamlit). (a) is deterministic; (b) is wall-clock time
on this machine (best of several runs), so its numbers vary from run to run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from model.config import ModelConfig
from model.layers import MultiHeadAttention
from model.rnn import RNNSeq2Seq
from model.seq2seq import Seq2SeqTransformer, greedy_ids
from model.tokenizer import Tokenizer
from training.translation import MAX_SENTENCE, Example, encode_batch, one_thread

Translate = Callable[[list[Example]], list[list[int]]]  # a batch of examples -> greedy ids (with <eos>)


def transformer_outputs(s2s: Seq2SeqTransformer, tok: Tokenizer) -> Translate:
    """Greedy decoding of the Transformer translator (model.seq2seq.greedy_ids), <eos> appended
    where it was produced (greedy_ids drops it), so both kinds of translator compare alike."""
    def run(batch: list[Example]) -> list[list[int]]:
        src, src_mask, *_ = encode_batch(tok, batch)
        outs = greedy_ids(s2s, src, src_mask, MAX_SENTENCE + 2, tok.bos_id, tok.eos_id)
        return [o + [tok.eos_id] if len(o) < MAX_SENTENCE + 2 else o for o in outs]
    return run


def rnn_outputs(model: RNNSeq2Seq, tok: Tokenizer) -> Translate:
    """Greedy decoding of an RNN translator (model.rnn.RNNSeq2Seq.greedy: <eos> included)."""
    def run(batch: list[Example]) -> list[list[int]]:
        src, src_mask, *_ = encode_batch(tok, batch)
        return model.greedy(src, src_mask, MAX_SENTENCE + 2, tok.bos_id, tok.eos_id)
    return run


@dataclass(frozen=True)
class LengthAccuracy:
    """Greedy translation accuracy of M translators on held-out sentences grouped by G source lengths."""
    models: tuple[str, ...]  # (M,) the translators' names
    lengths: np.ndarray  # (G,) source length in words ("." included) of each group
    counts: np.ndarray  # (G,) sentences of that length
    exact: np.ndarray  # (M, G) share of sentences translated exactly (every word and <eos>)
    token: np.ndarray  # (M, G) share of target positions right (<eos> included), as the RNN's evaluation

    def overall(self, m: int) -> float:
        """Exact match of translator m over every sentence."""
        return float((self.exact[m] * self.counts).sum() / self.counts.sum())


def accuracy_by_length(translators: Sequence[tuple[str, Translate]], examples: Sequence[Example], tok: Tokenizer,
                       batch: int = 250) -> LengthAccuracy:
    """Every translator on every example (greedy, in batches, one torch thread), scored against the
    reference and grouped by source length."""
    examples = list(examples)
    lengths = np.array([len(e.src) for e in examples])
    groups = np.unique(lengths)
    exact = np.zeros((len(translators), len(groups)))
    token = np.zeros((len(translators), len(groups)))
    refs = [[tok.index[w] for w in e.tgt] + [tok.eos_id] for e in examples]
    with one_thread():
        for m, (_, run) in enumerate(translators):
            outs: list[list[int]] = []
            for i in range(0, len(examples), batch):
                outs += run(examples[i: i + batch])
            ok = np.array([o == r for o, r in zip(outs, refs)])
            hits = np.array([sum(a == b for a, b in zip(o, r)) for o, r in zip(outs, refs)])
            n = np.array([len(r) for r in refs])
            for g, L in enumerate(groups):
                sel = lengths == L
                exact[m, g] = ok[sel].mean()
                token[m, g] = hits[sel].sum() / n[sel].sum()
    return LengthAccuracy(models=tuple(name for name, _ in translators), lengths=groups,
                          counts=np.array([(lengths == L).sum() for L in groups]), exact=exact, token=token)


@dataclass(frozen=True)
class ParallelTiming:
    """Time of T recurrent steps against one attention layer over the same T tokens."""
    lengths: np.ndarray  # (G,) T, the number of tokens
    recurrent_ms: np.ndarray  # (G,) best time of a GRU (d → d) over the T tokens, milliseconds
    attention_ms: np.ndarray  # (G,) best time of one multi-head self-attention layer over them, ms
    recurrent_steps: np.ndarray  # (G,) steps that must run one after another: T for the GRU
    attention_steps: np.ndarray  # (G,) for attention: 1 (every position at once)
    d_model: int  # the width of both
    threads: int  # torch threads the timing ran on

    @property
    def attention_faster(self) -> np.ndarray:
        """(G,) bool: the attention layer took less time than the GRU at that T."""
        return self.attention_ms < self.recurrent_ms


def _best_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up (allocations, kernel selection)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best


@torch.no_grad()
def sequential_vs_parallel(lengths: Sequence[int] = (16, 64, 256, 1024), d_model: int = 64, n_heads: int = 4,
                           repeats: int = 5, seed: int = 0) -> ParallelTiming:
    """For each T: the best of `repeats` timings of torch's GRU over (1, T, d_model) (one
    recurrent step per token, each needing the previous state) and of the engine's
    MultiHeadAttention over the same input (Q, K, V for every position at once, one T × T score
    matrix per head), on the current torch threads."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    gru = torch.nn.GRU(d_model, d_model, batch_first=True).eval()
    attn = MultiHeadAttention(ModelConfig(vocab_size=2, d_model=d_model, n_heads=n_heads, max_len=max(lengths))).eval()
    rec, att = [], []
    for T in lengths:
        x = torch.randn(1, int(T), d_model, generator=g)
        rec.append(_best_ms(lambda: gru(x), repeats))
        att.append(_best_ms(lambda: attn(x, record=False), repeats))
    T = np.asarray(lengths)
    return ParallelTiming(lengths=T, recurrent_ms=np.array(rec), attention_ms=np.array(att), recurrent_steps=T.copy(),
                          attention_steps=np.ones_like(T), d_model=d_model, threads=torch.get_num_threads())
