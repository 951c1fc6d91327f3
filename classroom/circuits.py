"""Beyond the heatmap (issue 35): attention sinks, induction heads, the logit lens, two models on
one text, and what one head reads and writes. Pure numpy/torch over the engine (never streamlit,
plotly, ui/ or viz/); every result is a frozen dataclass whose fields say their shapes.

Public functions (checked from outside the tests, called exactly like this):

    from classroom.circuits import sink_scores, induction_scores, logit_lens
    sink_scores(trace)                          -> (layers, heads)
    induction_scores(model, n_tokens=50, seed=0) -> (layers, heads)
    logit_lens(model, trace, k=5)               -> LogitLens (top_ids, top_probs: (layers + 1, T, k))

`trace` is either the engine's ForwardTrace (torch tensors, `model.trace(ids)`) or its numpy twin
(`tr.numpy()`, what the app's runs hold): every function here reads both.

Definitions (the page and the tests use these words):
  sink score     mean weight that the queries t >= 1 put on the sink keys: key 0 (the first token,
                 BOS when the model has one) and, for BERT-family traces, also the [SEP] keys
                 (see `sink_keys`). Row 0 is left out: under a causal mask it has only key 0.
  induction test BOS, then n random tokens r_1..r_n, then the same n again (2n + 1 tokens).
  induction      per head, the mean weight from each position i of the second copy to position
                 i - n + 1: the token after the earlier occurrence of the current token.
  prefix-matching per head, the mean over the queries whose token occurred before of the total
                 weight on every key j whose previous token (j - 1) is the query's token (j <= i).
                 Random tokens repeat by chance inside a copy (drawn with replacement, as the
                 standard test does): the fixed offset then misses keys that this score counts.
                 It reads ids only, so it is also measured on any text (`prefix_matching`).
  previous-token per head, the mean weight from each query t >= 1 to key t - 1.
  logit lens     the residual stream after each block, read by the model's own final norm and
                 output layer as if the model ended there.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from model.intervene import Intervention
from model.patterns import hide_keys
from model.trace import output_logits

# Special tokens by their spelling: [CLS], [unused5], <|im_start|>, <bos>, <mask> (classroom.experts'
# rule). The random tokens of the induction test are drawn from the other ids.
_SPECIAL_PREFIXES = ("[", "<|", "<")


def _np(x) -> np.ndarray:
    """A trace field (torch tensor or numpy array) as a numpy array (no copy for CPU tensors)."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _t(x) -> torch.Tensor:
    """A trace field as a torch tensor (shares memory with a numpy field)."""
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.array(x, copy=True))


# ----------------------------------------------------------------------------------------------
# Attention sinks
# ----------------------------------------------------------------------------------------------

def is_bert_family(trace) -> bool:
    """A trace of a BERT-family model: the engine records token types exactly for models that have
    token-type embeddings (cfg.type_vocab_size > 0: BERT, MiniLM), and zeros when none were given."""
    return getattr(trace, "token_type_ids", None) is not None


def sink_keys(trace, batch: int = 0) -> np.ndarray:
    """bool (T,), True at the keys that count as the attention sink, decided from the trace alone:
      - key 0, the first token, always (BOS when the model has one; [CLS] for BERT);
      - BERT-family traces (`is_bert_family`) also every key holding the id of the sequence's last
        real token: the [SEP] that a WordPiece tokenizer puts at the end of every sequence (and
        between the two texts of a pair). If the input was cut before its final [SEP], that last
        token is an ordinary word and would be counted instead: callers that know the tokenizer
        pass the sink keys themselves (`sink_scores(trace, keys=...)`; the app passes the
        positions of [CLS] and [SEP] it tokenized).
    With a KV cache (trace.past_length) the keys are the whole context; only its first key is known
    here (no ids for the cached positions)."""
    w = _np(trace.layers[0].attn.weights)
    Tk = w.shape[-1]
    keys = np.zeros(Tk, dtype=bool)
    keys[0] = True
    if is_bert_family(trace) and not getattr(trace, "past_length", None):
        ids = _np(trace.ids)[batch]
        real = np.ones(len(ids), dtype=bool)
        if getattr(trace, "key_padding_mask", None) is not None:
            real = _np(trace.key_padding_mask)[batch].astype(bool)
        last = int(np.nonzero(real)[0][-1]) if real.any() else 0
        if last > 0:
            keys[: len(ids)] |= (ids == ids[last]) & real
    return keys


def sink_scores(trace, keys: Sequence[int] | np.ndarray | None = None, *, weights: Sequence[np.ndarray] | None = None
                ) -> np.ndarray:
    """(L, H): per head, the mean over the queries t >= 1 of the weight they put on the sink keys
    (module docstring). keys: the sink keys as positions or a bool (Tk,) mask; None = `sink_keys`
    (key 0, plus [SEP] for BERT-family traces). Queries that are padding or fully masked are left
    out; a batch is averaged over all its real query rows. A trace whose rows all lack a choice
    (T = 1) scores 0. weights: the per-layer (B, H, Tq, Tk) weights to score instead of the
    trace's own (the same queries and keys), e.g. after an edit."""
    layers = [_np(lt.attn.weights) for lt in trace.layers] if weights is None else [np.asarray(w) for w in weights]
    B, H, Tq, Tk = layers[0].shape
    if keys is None:
        mask = sink_keys(trace)
    else:
        k = np.asarray(keys)
        if k.dtype == bool:
            if k.shape != (Tk,):
                raise ValueError(f"keys as a mask must be bool ({Tk},), one flag per key; got {k.shape}")
            mask = k
        else:
            if k.size and (k.min() < 0 or k.max() >= Tk):
                raise ValueError(f"sink key positions must be in 0..{Tk - 1}; got {k.tolist()}")
            mask = np.zeros(Tk, dtype=bool)
            mask[k.astype(int)] = True
    past = int(getattr(trace, "past_length", None) or 0)
    rows = np.ones((B, Tq), dtype=bool)
    rows[:, : max(0, 1 - past)] = False  # absolute position 0 has no choice under a causal mask
    if getattr(trace, "key_padding_mask", None) is not None and not past:
        rows &= _np(trace.key_padding_mask).astype(bool)
    out = np.zeros((len(layers), H))
    for l, w in enumerate(layers):
        fm = getattr(trace.layers[l].attn, "fully_masked", None) if weights is None else None
        live = np.broadcast_to(rows[:, None, :], (B, H, Tq)).copy()  # (B, H, Tq)
        if fm is not None:
            live &= ~np.broadcast_to(_np(fm).astype(bool), (B, H, Tq))
        on_sink = w[..., mask].sum(-1, dtype=np.float64)  # (B, H, Tq)
        n = live.sum(axis=(0, 2))  # (H,)
        out[l] = np.divide((on_sink * live).sum(axis=(0, 2)), n, out=np.zeros(H), where=n > 0)
    return out


def hide_sink(weights: np.ndarray, keys: np.ndarray | None = None) -> np.ndarray:
    """The derived "sink hidden" view of attention rows (..., Tq, Tk), the same shape: the sink keys'
    columns (keys: bool (Tk,); None = key 0) set to 0 and each row divided by what is left of it.
    A row with nothing left (it gave everything to the sink) is all zero, never NaN. The one
    implementation is model.patterns.hide_keys (the head labels judge these rows too)."""
    w = np.asarray(weights)
    if keys is None:
        keys = np.zeros(w.shape[-1], dtype=bool)
        keys[0] = True
    return hide_keys(w, keys)


# ----------------------------------------------------------------------------------------------
# Induction heads
# ----------------------------------------------------------------------------------------------

def ordinary_ids(tok) -> np.ndarray:
    """Ids of a tokenizer's ordinary tokens: every id whose spelling is not a special token
    ([CLS], [unused7], <|im_start|>, <bos>, <mask>, tok.specials)."""
    specials = set(getattr(tok, "specials", ()) or ())
    out = [i for i, s in enumerate(tok.vocab)
           if s not in specials and not (len(s) > 2 and s.startswith(_SPECIAL_PREFIXES) and s.endswith(("]", ">")))]
    return np.asarray(out, dtype=np.int64)


def word_ids(tok) -> np.ndarray:
    """Ordinary ids whose readable spelling (classroom.embeddings.display_vocab) has two or more
    letters or digits and is neither a WordPiece continuation ("##ing") nor a byte ("<0xE2>"): the candidates a head's QK and
    OV tables are searched over (BERT's first thousand ordinary ids are single characters, a
    byte-level BPE's first few hundred single bytes)."""
    from .embeddings import display_vocab
    shown = display_vocab(tok)
    return np.asarray([i for i in ordinary_ids(tok) if not shown[i].startswith(("##", "<0x"))
                       and sum(ch.isalnum() for ch in shown[i]) >= 2], dtype=np.int64)


def repeated_tokens(vocab_size: int, n_tokens: int = 50, seed: int = 0, *, bos_id: int | None = None,
                    pool: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """The induction test's input (2n + 1,): BOS, then n tokens drawn uniformly with replacement
    from `pool` (numpy's Generator(seed)), then the same n again. bos_id None: id 0. pool None:
    every id but the BOS."""
    if n_tokens < 2:
        raise ValueError(f"n_tokens must be at least 2 (a copy of one token tests nothing); got {n_tokens}")
    bos = 0 if bos_id is None else int(bos_id)
    if not 0 <= bos < vocab_size:
        raise ValueError(f"bos_id {bos} is outside the vocabulary of {vocab_size}")
    ids = np.arange(vocab_size) if pool is None else np.asarray(pool, dtype=np.int64)
    ids = ids[ids != bos]
    if ids.size == 0:
        raise ValueError("no token to draw the random sequence from (the pool holds only the BOS)")
    r = np.random.default_rng(seed).choice(ids, size=n_tokens, replace=True)
    return np.concatenate([[bos], r, r]).astype(np.int64)


def induction_pattern(weights: np.ndarray, n: int) -> np.ndarray:
    """(..., T, T) weights of the test sequence (T = 2n + 1) -> (...): the mean weight from each
    second-copy position i (n + 1 .. 2n) to key i - n + 1."""
    w = np.asarray(weights)
    i = np.arange(n + 1, 2 * n + 1)
    return w[..., i, i - n + 1].mean(-1)


def previous_token_pattern(weights: np.ndarray) -> np.ndarray:
    """(..., T, T) -> (...): mean weight from each query t >= 1 to key t - 1."""
    w = np.asarray(weights)
    t = np.arange(1, w.shape[-2])
    return w[..., t, t - 1].mean(-1) if t.size else np.zeros(w.shape[:-2])


def prefix_targets(ids: Sequence[int]) -> np.ndarray:
    """bool (T, T): [i, j] True when key j's previous token (j - 1) is query i's token, with
    j - 1 < i: the keys a prefix-matching head at query i attends to (the token after each
    earlier occurrence of the current token)."""
    ids = np.asarray(ids)
    T = len(ids)
    out = np.zeros((T, T), dtype=bool)
    j = np.arange(1, T)
    for i in range(1, T):
        out[i, j[:i]] = ids[j[:i] - 1] == ids[i]
    return out


def prefix_matching(weights: np.ndarray, ids: Sequence[int]) -> tuple[np.ndarray, int]:
    """(..., T, T) weights and their ids (T,) -> ((...), n_queries): the mean, over the queries
    whose token occurred earlier, of the total weight on the keys `prefix_targets` marks. Zero
    (and n_queries 0) when no token repeats."""
    tgt = prefix_targets(ids)
    q = tgt.any(-1)
    w = np.asarray(weights, dtype=np.float64)
    if not q.any():
        return np.zeros(w.shape[:-2]), 0
    per = (w * tgt).sum(-1)[..., q]  # (..., n_q)
    return per.mean(-1), int(q.sum())


@dataclass(frozen=True)
class InductionTest:
    """The repeated-random-tokens test on one model (module docstring)."""
    ids: np.ndarray  # (2n + 1,) BOS, r_1..r_n, r_1..r_n
    n: int  # tokens per copy
    causal: bool  # the mask the test ran with
    induction: np.ndarray  # (L, H) mean weight second-copy i -> i - n + 1
    prefix_matching: np.ndarray  # (L, H) mean weight on every key whose previous token is the query's token
    previous_token: np.ndarray  # (L, H) mean weight t -> t - 1 (t >= 1)
    ablated: tuple[tuple[int, int], ...] = ()  # heads switched off (their Z_h zeroed) in this run
    loss: np.ndarray | None = None  # (2n,) loss[t] = -ln p(ids[t + 1] | ids[..t]) in nats; None
    #                                  without an output layer (MiniLM) or without a causal mask
    weights: np.ndarray | None = field(default=None, repr=False)  # (L, H, T, T) float32, kept only on request

    @property
    def first_copy_loss(self) -> float | None:
        """Mean loss on the first copy's tokens 2..n (targets at positions 2..n): the first random
        token follows BOS and is left out of both means, so each mean covers n - 1 guesses."""
        return None if self.loss is None else float(self.loss[1:self.n].mean())

    @property
    def second_copy_loss(self) -> float | None:
        """Mean loss on the second copy's tokens 2..n (targets at n + 2 .. 2n): each can be read off
        the first copy. Its first token (after r_n) cannot, and is left out as in the first copy."""
        return None if self.loss is None else float(self.loss[self.n + 1:].mean())

    @property
    def uniform(self) -> float:
        """The induction score of a head spreading its weight evenly over the keys it may see: the
        mean over second-copy queries i of 1 / (i + 1) (causal), or 1 / (2n + 1) (bidirectional)."""
        i = np.arange(self.n + 1, 2 * self.n + 1)
        return float(np.mean(1.0 / (i + 1))) if self.causal else 1.0 / (2 * self.n + 1)

    def top(self, k: int = 5, score: str = "induction") -> list[tuple[int, int, float]]:
        """The k heads with the highest `score` ("induction", "prefix_matching", "previous_token"),
        best first, as (layer, head, score)."""
        s = getattr(self, score)
        H = s.shape[1]
        order = np.argsort(-s, axis=None, kind="stable")[:k]
        return [(int(i // H), int(i % H), float(s.flat[i])) for i in order]


def control_heads(test: InductionTest, k: int, seed: int = 0) -> tuple[tuple[int, int], ...]:
    """k heads drawn at random (Generator(seed)) from those outside the test's top k induction
    heads: the control for switching the top k off (the same number of heads, chosen blindly)."""
    L, H = test.induction.shape
    top = {(l, h) for l, h, _ in test.top(k)}
    rest = [(l, h) for l in range(L) for h in range(H) if (l, h) not in top]
    pick = np.random.default_rng(seed).choice(len(rest), size=min(k, len(rest)), replace=False) if rest else []
    return tuple(sorted(rest[int(i)] for i in pick))


def default_bos(tok) -> int | None:
    """The token a test sequence starts with: the tokenizer's BOS (the toy models' <bos>, BERT's
    [CLS], SmolLM2's <|im_start|>); None for a tokenizer without one."""
    return getattr(tok, "bos_id", None) if tok is not None else None


@torch.no_grad()
def induction_test(model, n_tokens: int = 50, seed: int = 0, *, tok=None, bos_id: int | None = None,
                   causal: bool = True, ablate: Sequence[tuple[int, int]] = (), keep_weights: bool = False
                   ) -> InductionTest:
    """Run the induction test (module docstring) on `model`: one traced forward pass of the
    2n + 1 tokens (`repeated_tokens`). tok (optional): the model's tokenizer; its BOS starts the
    sequence and the random tokens are its ordinary tokens (`ordinary_ids`). Without it the
    sequence starts with id 0 and draws from every other id. bos_id overrides the BOS. causal:
    the mask (the test is made for decoders; an encoder such as MiniLM can be tested with
    causal=False, then every query also sees the copy after it). ablate [(layer, head)]: heads
    switched off (their output Z_h zeroed, model.intervene) in this pass; the model is unchanged."""
    cfg = model.cfg
    bos = bos_id if bos_id is not None else default_bos(tok)
    pool = ordinary_ids(tok) if tok is not None else None
    ids = repeated_tokens(cfg.vocab_size, n_tokens, seed, bos_id=bos, pool=pool)
    T = len(ids)
    if T > cfg.max_len:
        raise ValueError(f"the test needs 2 × {n_tokens} + 1 = {T} positions; this model takes at most "
                         f"{cfg.max_len}: lower n_tokens to {(cfg.max_len - 1) // 2} or less")
    x = torch.from_numpy(ids)[None]
    iv = Intervention(ablate=tuple(ablate)) if ablate else None
    tr = model.trace(x, causal=causal, intervention=iv)
    W = np.stack([_np(lt.attn.weights)[0] for lt in tr.layers])  # (L, H, T, T)
    n = int(n_tokens)
    loss = None
    if cfg.output_head and causal:
        logp = torch.log_softmax(_t(tr.logits)[0].double(), dim=-1)  # (T, V)
        loss = (-logp[:-1].gather(1, x[0, 1:, None])[:, 0]).numpy()  # (T - 1,)
    return InductionTest(ids=ids, n=n, causal=causal, induction=induction_pattern(W, n),
                         prefix_matching=prefix_matching(W, ids)[0], previous_token=previous_token_pattern(W),
                         ablated=tuple((int(l), int(h)) for l, h in ablate), loss=loss,
                         weights=W.astype(np.float32) if keep_weights else None)


def induction_scores(model, n_tokens: int = 50, seed: int = 0, **kw) -> np.ndarray:
    """(L, H): per head, the mean weight from each position i of the test's second copy to
    position i - n + 1 (module docstring; `induction_test` for the options and the other scores)."""
    return induction_test(model, n_tokens, seed, **kw).induction


# ----------------------------------------------------------------------------------------------
# Logit lens
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LogitLens:
    """The residual stream read by the model's own final norm and output layer at every depth.
    Row 0: the stream entering block 0 (the embeddings with positions, as block 0 sees them); row
    l (1..L): the output of block l - 1 ("after layer l"). Probabilities: softmax over the whole
    vocabulary. The last row is the model's own output distribution."""
    top_ids: np.ndarray  # (L + 1, T, k) int64, the k most likely tokens, most likely first
    top_probs: np.ndarray  # (L + 1, T, k) float32, their probabilities
    next_ids: np.ndarray  # (T - 1,) the token that actually follows each position (ids[t + 1])
    next_probs: np.ndarray  # (L + 1, T - 1) float32, the probability each row gives that token
    next_ranks: np.ndarray  # (L + 1, T - 1) int64, its rank (0 = the top prediction)
    rows: tuple[str, ...]  # L + 1 row names: "embeddings", "after layer 0", ...

    @property
    def n_rows(self) -> int:
        return self.top_ids.shape[0]


def residual_streams(trace, batch: int = 0) -> list[torch.Tensor]:
    """L + 1 tensors (1, T, D): what block 0 reads (embeddings.sum), then each block's output."""
    out = [_t(trace.embeddings.sum)[batch:batch + 1]]
    out += [_t(lt.resid_out)[batch:batch + 1] for lt in trace.layers]
    return out


LENS_CHUNK = 256  # stream vectors read out per matmul: 256 × V floats (SmolLM2: 50 MB) at a time


@torch.no_grad()
def logit_lens(model, trace, k: int = 5, *, batch: int = 0) -> LogitLens:
    """Every row of the residual stream (`residual_streams`) through the model's final norm
    (model.ln_f; none for post-LN models, whose blocks end with a norm) and its output layer
    (trace.output_logits, the matmul the forward uses), then a softmax over the vocabulary: the
    last row is the model's own output distribution, bit for bit. trace: the model's
    ForwardTrace or its numpy twin; `batch` picks the sentence. ValueError for a model without an
    output layer (MiniLM: nothing to read the stream with)."""
    cfg = model.cfg
    if not cfg.output_head:
        raise ValueError("the logit lens reads the residual stream with the model's output layer; this model "
                         "has none (cfg.output_head is False: an encoder such as MiniLM produces vectors, not "
                         "next-token scores)")
    if len(trace.layers) != cfg.n_layers:
        raise ValueError(f"the trace has {len(trace.layers)} layers; the model {cfg.n_layers}: pass the trace "
                         "this model made")
    w = model.output_matrix  # (V, D)
    k = int(min(max(1, k), cfg.vocab_size))
    ids = _np(trace.ids)[batch]
    T = len(ids)
    nxt = torch.from_numpy(np.array(ids[1:], dtype=np.int64))
    streams = residual_streams(trace, batch)  # L + 1 of (1, T, D)

    def read(h: torch.Tensor, positions: torch.Tensor) -> tuple:
        """h (N, D) or (1, T, D) stream rows, positions (N,) their positions -> top k, p(next), rank."""
        p = torch.softmax(output_logits(h, w), dim=-1).reshape(-1, cfg.vocab_size)  # (N, V)
        v, i = torch.topk(p, k, dim=-1)
        has = positions < T - 1
        tgt = nxt[positions.clamp(max=max(0, T - 2))] if T > 1 else positions
        pn = p.gather(1, tgt[:, None])[:, 0]  # (N,) meaningful where `has`
        rank = (p > pn[:, None]).sum(-1)
        return i, v, torch.where(has, pn, 0.0), torch.where(has, rank, 0)

    # rows 0 .. L - 1: all positions of all rows in chunks of CHUNK stream vectors, one matmul each
    # (a (1, T, D) @ (D, V) per row is several times slower at small T); the last row alone, by the
    # forward's own matmul on the same (1, T, D) tensor, so it equals the model's output bit for bit
    normed = [x if model.ln_f is None else model.ln_f(x, False)[0] for x in streams]  # (1, T, D) each
    flat = torch.cat([h[0] for h in normed[:-1]])  # (L T, D)
    pos = torch.arange(T).repeat(len(normed) - 1)
    parts = [read(flat[a:a + LENS_CHUNK], pos[a:a + LENS_CHUNK]) for a in range(0, len(flat), LENS_CHUNK)]
    parts.append(read(normed[-1], torch.arange(T)))
    top_i, top_v, p_next, r_next = (torch.cat(x).reshape(cfg.n_layers + 1, T, -1) for x in zip(*parts))
    tops, topp = top_i.numpy(), top_v.numpy()
    nprob, nrank = p_next[..., 0][:, :T - 1].numpy(), r_next[..., 0][:, :T - 1].numpy()
    rows = ("embeddings",) + tuple(f"after layer {l}" for l in range(cfg.n_layers))
    return LogitLens(top_ids=tops.astype(np.int64), top_probs=topp.astype(np.float32),
                     next_ids=np.asarray(ids[1:], dtype=np.int64), next_probs=nprob.astype(np.float32),
                     next_ranks=nrank.astype(np.int64), rows=rows)


# ----------------------------------------------------------------------------------------------
# Two models, one text: token boundaries by character offsets
# ----------------------------------------------------------------------------------------------

def char_spans(tok, text: str, ids: Sequence[int], labels: Sequence[str]) -> list[tuple[int, int]]:
    """[(start, end)) character offsets of each token in `text` (as the tokenizer encoded it:
    `ids`, `labels`, possibly cut to a prefix). Tokens that are not in the text (BOS, [CLS],
    [SEP]) get an empty span (start == end) where they stand.
    Byte-level BPE (SmolLM2): from each token's bytes (tok.token_bytes), so a token that holds
    part of a character (an emoji in two tokens) spans that whole character. Word-level and
    WordPiece: the labels are slices of the text (labels keep what the user typed; "##" marks a
    word continuation), found left to right."""
    text = str(text)
    spans: list[tuple[int, int]] = []
    if hasattr(tok, "token_bytes"):
        raw = text.encode("utf-8")
        char_of = np.zeros(len(raw) + 1, dtype=np.int64)  # byte offset -> index of the char holding it
        pos = 0
        for ci, ch in enumerate(text):
            nb = len(ch.encode("utf-8"))
            char_of[pos:pos + nb] = ci
            pos += nb
        char_of[len(raw)] = len(text)
        b = 0
        for tid in ids:
            b2 = min(b + len(tok.token_bytes(int(tid))), len(raw))
            start = int(char_of[b])
            if b2 >= len(raw):
                end = len(text)
            elif char_of[b2 - 1] == char_of[b2] and b2 > b:  # ends inside a character: it spans all of it
                end = int(char_of[b2]) + 1
            else:
                end = int(char_of[b2])
            spans.append((start, max(start, end)))
            b = b2
        return spans
    special = {i for i in (getattr(tok, "cls_id", None), getattr(tok, "sep_id", None)) if i is not None}
    bos = getattr(tok, "bos_id", None) if getattr(tok, "add_bos", False) else None
    cursor = 0
    lower = text.lower()
    for n, (tid, lab) in enumerate(zip(ids, labels)):
        if int(tid) in special or (n == 0 and bos is not None and int(tid) == bos):
            spans.append((cursor, cursor))
            continue
        piece = lab[2:] if lab.startswith("##") and len(lab) > 2 else lab
        at = text.find(piece, cursor)
        if at < 0:
            at = lower.find(piece.lower(), cursor)
        if at < 0:  # not found (should not happen): an empty span where we are
            spans.append((cursor, cursor))
            continue
        spans.append((at, at + len(piece)))
        cursor = at + len(piece)
    return spans


@dataclass(frozen=True)
class Alignment:
    """Two tokenizations of one text on shared character segments. A segment is the shortest
    stretch of text that both tokenizations cut at both ends and both have a token in, so each
    token lies in at most one segment. Tokens outside the text (BOS, [CLS], [SEP]) lie in none,
    nor do tokens in a stretch the other tokenization skips (a space that one makes a token of)."""
    segments: tuple[tuple[int, int], ...]  # (S,) character spans [start, end)
    seg_a: np.ndarray  # (T_a,) int, the segment of each token of A; -1 = not in the text
    seg_b: np.ndarray  # (T_b,) int, the same for B
    spans_a: tuple[tuple[int, int], ...]  # (T_a,) character spans of A's tokens
    spans_b: tuple[tuple[int, int], ...]  # (T_b,) character spans of B's tokens
    identical: bool  # both cut the text into the same tokens (same count, same spans)

    def segment_texts(self, text: str) -> list[str]:
        return [text[a:b] for a, b in self.segments]


def align(spans_a: Sequence[tuple[int, int]], spans_b: Sequence[tuple[int, int]]) -> Alignment:
    """Shared segments of two tokenizations of one text (Alignment). Only the text that both
    cover counts (one may be cut shorter): a segment ends at a boundary of both."""
    def cuts(spans):
        real = [(a, b) for a, b in spans if b > a]
        return real, {a for a, _ in real} | {b for _, b in real}
    ra, ca = cuts(spans_a)
    rb, cb = cuts(spans_b)
    end = min(max((b for _, b in ra), default=0), max((b for _, b in rb), default=0))
    start = max(min((a for a, _ in ra), default=0), min((a for a, _ in rb), default=0))
    shared = sorted(c for c in ca & cb if start <= c <= end)
    pieces = list(zip(shared, shared[1:]))

    def starts_in(spans):  # the piece each token starts in (-1: outside the shared text)
        cut = np.array([a for a, _ in pieces], dtype=np.int64)
        return [int(np.searchsorted(cut, a, side="right") - 1) if b > a and pieces and start <= a and b <= end
                else -1 for a, b in spans]
    pa, pb = starts_in(spans_a), starts_in(spans_b)
    # a piece that one tokenization has no token in (the space between two words, where the other
    # has a token of its own) is left out, with the tokens that start in it
    keep = [i for i in range(len(pieces)) if i in set(pa) and i in set(pb)]
    new_index = {old: new for new, old in enumerate(keep)}
    segments = tuple(pieces[i] for i in keep)

    def assign(p):
        return np.asarray([new_index.get(i, -1) for i in p], dtype=np.int64)
    same = len(spans_a) == len(spans_b) and list(map(tuple, spans_a)) == list(map(tuple, spans_b))
    return Alignment(segments=segments, seg_a=assign(pa), seg_b=assign(pb),
                     spans_a=tuple(map(tuple, spans_a)), spans_b=tuple(map(tuple, spans_b)), identical=same)


def pool_to_segments(weights: np.ndarray, seg: np.ndarray, n_segments: int) -> np.ndarray:
    """Attention (..., T, T) on one model's tokens -> (..., S, S) on the shared segments: a query
    segment's row is the mean of its tokens' rows, a key segment's column the sum of its tokens'
    columns (the weight that lands anywhere in it). Weight on tokens outside the text (BOS, [CLS],
    [SEP]) is not in any column: rows sum to 1 minus it. A segment no token of this model starts
    in cannot happen (segments are whole tokens of both)."""
    w = np.asarray(weights, dtype=np.float64)
    seg = np.asarray(seg)
    T = w.shape[-1]
    P = np.zeros((T, n_segments))
    ok = seg >= 0
    P[np.nonzero(ok)[0], seg[ok]] = 1.0  # (T, S) token -> segment
    counts = P.sum(0)
    keys = w @ P  # (..., T, S)
    rows = np.swapaxes(keys, -1, -2) @ P  # (..., S, S) summed over each segment's query tokens
    rows = np.swapaxes(rows, -1, -2)
    return np.divide(rows, counts[:, None], out=np.zeros_like(rows), where=counts[:, None] > 0)


# ----------------------------------------------------------------------------------------------
# What one head reads and writes: W_QK and W_OV through the embeddings
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HeadCircuit:
    """One head's two circuits (Elhage et al. 2021), read through the token embeddings.
    W_QK = W_Q W_Kᵀ (D × D): score(a, b) = x_a W_QK x_bᵀ for a query vector x_a and a key vector x_b.
    W_OV = W_V W_O (D × D): what the head adds to the stream when it attends to x_b: x_b W_OV.
    "x" for a token is its embedding as the layer's attention would read it with nothing else in
    the stream: the token embedding (BERT: + token type 0, then the embedding norm), then the
    layer's input norm (pre-LN). Position is left out (rotary heads: as at distance 0), and so is
    everything earlier layers add: in layers after the first this is a rough guide."""
    layer: int
    head: int
    kv_head: int  # the K/V head this query head reads (grouped-query attention: head // (H / H_kv))
    shapes: tuple[tuple[str, str, str], ...]  # (matrix, shape, meaning) rows for the page's table
    qk_rank: int  # rank bound of W_QK: d_k
    candidates: np.ndarray  # (N,) the token ids scored (ordinary tokens among the first ones + the text's)
    qk_pairs: np.ndarray  # (P, 2) int (query id, key id), the highest QK scores among candidates, best first
    qk_scores: np.ndarray  # (P,) their scores (x_a W_QK x_bᵀ + bias terms, times the model's scale)
    text_qk: np.ndarray  # (T, T) the score between the text's tokens as tokens (positions and context ignored)
    ov_pairs: np.ndarray  # (P, 2) int (attended id, raised id): the P attended candidates whose top rise is
    #                      largest, each with the token it raises most (one row per attended token)
    ov_logits: np.ndarray  # (P,) those increases (x_b W_OV through the final norm's scale and the unembedding)
    text_ov_ids: np.ndarray  # (T, k) int, for each token of the text: the tokens whose logits rise most if attended
    text_ov_logits: np.ndarray  # (T, k) those increases
    copying: float  # share of candidate tokens whose own logit is among the 10 its OV output raises most
    readout: str  # "unembedding" | "embedding" (models without an output layer: the token embeddings)
    notes: tuple[str, ...]  # what is approximate


@dataclass(frozen=True)
class HeadWeights:
    """One head's slices of its layer's projections, as (rows = what is read, cols = what is made).
    Grouped-query attention: K and V are those of K/V head kv_head = h // (H / H_kv), as the forward
    repeats them. Biases are None for a model without them (SmolLM2)."""
    w_q: torch.Tensor  # (D, d_k)  q = x W_Q + b_Q
    w_k: torch.Tensor  # (D, d_k)  of K/V head kv_head
    w_v: torch.Tensor  # (D, d_v)  of K/V head kv_head
    w_o: torch.Tensor  # (d_v, D)  this head's rows of the output matrix
    b_q: torch.Tensor | None  # (d_k,)
    b_k: torch.Tensor | None  # (d_k,)
    b_v: torch.Tensor | None  # (d_v,)
    kv_head: int


def head_weights(model, layer: int, head: int) -> HeadWeights:
    """The head's slices of the layer's projections (HeadWeights), read from the model (views, no copy)."""
    cfg = model.cfg
    if not 0 <= layer < cfg.n_layers or not 0 <= head < cfg.n_heads:
        raise ValueError(f"layer {layer}, head {head} does not exist: layers 0..{cfg.n_layers - 1}, "
                         f"heads 0..{cfg.n_heads - 1}")
    attn = model.blocks[layer].attn
    dk, dv = cfg.d_k, cfg.d_value
    g = head // (cfg.n_heads // cfg.kv_heads)

    def rows(lin, i, d):
        wt = lin.weight[i * d:(i + 1) * d]  # (d, D)
        b = None if lin.bias is None else lin.bias[i * d:(i + 1) * d]
        return wt.T, b
    wq, bq = rows(attn.q_proj, head, dk)
    wk, bk = rows(attn.k_proj, g, dk)
    wv, bv = rows(attn.v_proj, g, dv)
    wo = attn.o_proj.weight[:, head * dv:(head + 1) * dv].T  # (d_v, D)
    return HeadWeights(w_q=wq, w_k=wk, w_v=wv, w_o=wo, b_q=bq, b_k=bk, b_v=bv, kv_head=int(g))


@torch.no_grad()
def token_inputs(model, layer: int, ids: torch.Tensor) -> torch.Tensor:
    """(N, D): each token id as `layer`'s attention would read it with nothing else in the stream
    (HeadCircuit's docstring): embedding (+ type 0, embedding norm), then the layer's input norm
    for pre-LN blocks."""
    x = model.tok_emb.weight[ids]  # (N, D)
    if model.type_emb is not None:
        x = x + model.type_emb.weight[0]
    if model.emb_ln is not None:
        x = model.emb_ln(x, False)[0]
    block = model.blocks[layer]
    if block.pre:
        x = block.ln1(x, False)[0]
    return x


@torch.no_grad()
def head_circuit(model, layer: int, head: int, text_ids: Sequence[int] = (), *, vocab_ids: Sequence[int] | None = None,
                 max_candidates: int = 2000, top: int = 20, k: int = 5, chunk: int = 512) -> HeadCircuit:
    """W_QK and W_OV of one head (HeadCircuit) read through the embeddings. Candidates: the
    first `max_candidates` of `vocab_ids` (ordinary token ids; None = every id) plus the text's
    tokens. The top pairs are searched over candidates × candidates (QK) and candidates × the
    whole vocabulary (OV), in chunks, never a full V × V matrix."""
    cfg = model.cfg
    hw = head_weights(model, layer, head)
    wq, wk, wv, wo = hw.w_q, hw.w_k, hw.w_v, hw.w_o
    D, dk, dv = cfg.d_model, cfg.d_k, cfg.d_value
    pool = np.arange(cfg.vocab_size) if vocab_ids is None else np.asarray(vocab_ids, dtype=np.int64)
    text = np.asarray(list(text_ids), dtype=np.int64)
    cand = np.unique(np.concatenate([pool[:max_candidates], text])).astype(np.int64)
    ci = torch.from_numpy(cand)
    X = token_inputs(model, layer, ci)  # (N, D)
    scale = 1.0 / np.sqrt(dk) if cfg.scale_scores else 1.0
    Q = X @ wq + (0 if hw.b_q is None else hw.b_q)  # (N, d_k)
    K = X @ wk + (0 if hw.b_k is None else hw.b_k)  # (N, d_k)
    S = (Q @ K.T) * scale  # (N, N) candidates: for SmolLM2's 2,000 a 4M-entry matrix
    best = torch.topk(S.reshape(-1), min(top, S.numel()))
    N = len(cand)
    qk_pairs = np.stack([cand[(best.indices // N).numpy()], cand[(best.indices % N).numpy()]], 1)
    qk_scores = best.values.numpy().astype(np.float64)
    pos = {int(t): i for i, t in enumerate(cand)}
    ti = np.asarray([pos[int(t)] for t in text], dtype=np.int64)
    text_qk = S[ti][:, ti].numpy() if len(ti) else np.zeros((0, 0))

    # OV: the head's output for each attended candidate, through the final norm's scale, read by the
    # output layer (or the token embeddings when the model has none)
    if cfg.output_head:
        U, readout = model.output_matrix, "unembedding"  # (V, D)
    else:
        U, readout = model.tok_emb.weight, "embedding"
    # the final norm as a linear map on a small change of the stream, its division by the stream's
    # size frozen (it scales every logit of a position alike): gamma, and LayerNorm's mean removal
    gamma = None if model.ln_f is None else model.ln_f.weight
    centre = model.ln_f is not None and getattr(model.ln_f, "bias", None) is not None
    Vh = X @ wv + (0 if hw.b_v is None else hw.b_v)  # (N, d_v)
    Ug = U if gamma is None else U * gamma  # (V, D): gamma folded into the readout
    wo_c = wo - wo.mean(dim=1, keepdim=True) if centre else wo  # LayerNorm removes the change's mean over D
    M = wo_c @ Ug.T  # (d_v, V): head output coordinates -> logit change
    best_v, best_i = [], []
    kk = min(k, cfg.vocab_size)
    tk = max(kk, min(10, cfg.vocab_size))
    copies = 0
    for a in range(0, N, chunk):
        L_ = Vh[a:a + chunk] @ M  # (c, V) direct logit change per attended candidate
        v, i = torch.topk(L_, tk, dim=-1)
        best_v.append(v)
        best_i.append(i)
        copies += int((i[:, :10] == ci[a:a + chunk, None]).any(-1).sum())
    bv, bi = torch.cat(best_v), torch.cat(best_i)  # (N, tk)
    # one row per attended token (its largest rise): a few tokens with large outputs would fill the table
    best = torch.topk(bv[:, 0], min(top, N))
    rows_ = best.indices.numpy()
    ov_pairs = np.stack([cand[rows_], bi.numpy()[rows_, 0]], 1)
    ov_logits = best.values.numpy().astype(np.float64)
    text_ov_ids = bi[torch.from_numpy(ti)][:, :kk].numpy() if len(ti) else np.zeros((0, kk), dtype=np.int64)
    text_ov_logits = bv[torch.from_numpy(ti)][:, :kk].numpy() if len(ti) else np.zeros((0, kk))
    g = hw.kv_head
    gqa = cfg.kv_heads != cfg.n_heads
    shapes = (
        ("W_Q (head)", f"{D} × {dk}", "d_model × d_k: the query this head makes from a token"),
        ("W_K" + (f" (K/V head {g})" if gqa else " (head)"), f"{D} × {dk}",
         "d_model × d_k" + (f": shared by query heads {g * (cfg.n_heads // cfg.kv_heads)}–"
                            f"{(g + 1) * (cfg.n_heads // cfg.kv_heads) - 1} (grouped-query)" if gqa else "")),
        ("W_QK = W_Q W_Kᵀ", f"{D} × {D}", f"rank ≤ d_k = {dk}: score(a, b) = x_a W_QK x_bᵀ"),
        ("W_V" + (f" (K/V head {g})" if gqa else " (head)"), f"{D} × {dv}", "d_model × d_v"),
        ("W_O (head's rows)", f"{dv} × {D}", "d_v × d_model: this head's slice of the output matrix"),
        ("W_OV = W_V W_O", f"{D} × {D}", f"rank ≤ d_v = {dv}: what attending to x_b adds, x_b W_OV"),
        ("readout (" + readout + ")", f"{U.shape[0]} × {D}", "V × d_model: turns a change of the stream into logits"),
    )
    notes = [
        "Tokens enter as their embeddings" + (" (+ token type 0, through the embedding norm)" if model.emb_ln is not None else "")
        + (", through this layer's input norm" if model.blocks[layer].pre else "")
        + ": what earlier layers add to the stream is left out" + (" (this is layer 0: nothing is)." if layer == 0 else "."),
        "Positions are left out: " + ("rotary heads turn q and k by the position, so these are the scores at "
                                      "distance 0." if cfg.pos_encoding == "rope" else
                                      "the position vectors are not added." if cfg.pos_encoding in ("sinusoidal", "learned")
                                      else "this model has none."),
        "Biases are included in the QK scores and the OV outputs." if cfg.bias else "This model has no biases.",
        ("The OV output goes straight to the output layer (the direct path): later layers are skipped, and the final "
         "norm is taken as its scale" + (" and mean removal" if centre else "") + " with its division by the stream's "
         "size frozen (it scales all logits of a position alike, so the ranking stands).")
        if readout == "unembedding" else
        "This model has no output layer: the OV output is read against the token embeddings (a tied output layer's "
        "view), so 'raises' means 'points towards that token's embedding'.",
    ]
    return HeadCircuit(layer=layer, head=head, kv_head=int(g), shapes=shapes, qk_rank=dk, candidates=cand,
                       qk_pairs=qk_pairs.astype(np.int64), qk_scores=qk_scores,
                       text_qk=np.asarray(text_qk, dtype=np.float64), ov_pairs=ov_pairs.astype(np.int64),
                       ov_logits=ov_logits,
                       text_ov_ids=text_ov_ids.astype(np.int64), text_ov_logits=np.asarray(text_ov_logits, dtype=np.float64),
                       copying=copies / max(1, N), readout=readout, notes=tuple(notes))

