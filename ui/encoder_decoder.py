"""The encoder–decoder page's helpers: the shipped toy translator (shared, read-only), cached
translations keyed by the text, the reference alignment, the shapes table and the input notices.

The numbers come from training.translation.translate (greedy decoding that keeps every step's
trace); this module only selects and labels them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from labels import md_escape, token_label, token_labels
from model.trace import AttentionTrace
from training import translation
from training.rnn_translation import RNNTranslation, load_rnn_translator, rnn_translate
from training.translation import DEFAULT_MAX_SRC_LEN, TranslationResult, load_translator, translate, translate_words

DEFAULT_SENTENCE = "the big dog sees a small cat in the old house ."
MAX_CHARS = 1_000  # the text box accepts at most this many characters (longer sources are cut to words below)
MAX_SRC_WORDS = DEFAULT_MAX_SRC_LEN  # the encoder sees at most this many words (notice when cut)


@st.cache_resource(show_spinner=False)
def get_translator():
    """(model, tokenizer, info) of checkpoints/translator, shared by every session: never mutate."""
    s2s, tok, info = load_translator()
    for p in s2s.parameters():
        p.requires_grad_(False)
    return s2s.eval(), tok, info


@st.cache_data(max_entries=64, show_spinner=False)
def get_translation(text: str, max_src_len: int = MAX_SRC_WORDS) -> TranslationResult:
    """Greedy translation of `text` with every step's attention (training.translation.translate).
    Raises ValueError (with a friendly message) for an empty source."""
    s2s, tok, _ = get_translator()
    return translate(s2s, tok, str(text)[:MAX_CHARS], max_src_len=max_src_len)


@dataclass(frozen=True)
class Reference:
    """The reference (grammar) translation of the source, when the sentence is in the toy grammar."""
    words: list[str] | None  # reference Kalo words, None if the source is outside the grammar
    align: list[int] | None  # align[j] = source index of reference word j
    reason: str  # why there is no reference ("" when there is one)
    gold: list[int | None]  # per decoder row (= per produced token): its source word, None if unknown


def reference(r: TranslationResult) -> Reference:
    """Gold source word of each produced token: known while the model's output agrees with the
    reference translation (after the first mistake, or for <eos>, there is none)."""
    n_rows = len(r.steps)
    if any(t == "<unk>" for t in r.src_tokens):
        return Reference(None, None, "the sentence has words outside the vocabulary", [None] * n_rows)
    try:
        words, al = translate_words(r.src_tokens)
    except ValueError as e:
        return Reference(None, None, f"it is outside the toy grammar ({e})", [None] * n_rows)
    gold: list[int | None] = []
    ok = True
    for i, st_ in enumerate(r.steps):
        ok = ok and i < len(words) and st_.token == words[i]
        gold.append(al[i] if ok else None)
    return Reference(words, al, "", gold)


def head_weights(attn: AttentionTrace, head: int | None) -> np.ndarray:
    """(Tq, Tk) weights of one attention of the sentence (r.trace.encoder.layers[l].attn,
    .decoder.layers[l].self_attn or .cross_attn) for one head, or the mean over heads when head is None."""
    w = attn.weights[0]  # (H, Tq, Tk)
    return w.mean(0) if head is None else w[head]


def allowed_matrix(attn: AttentionTrace) -> np.ndarray:
    """The (Tq, Tk) `allowed` mask of one attention of the sentence (True = may attend)."""
    a = np.asarray(attn.allowed, dtype=bool)  # (Tq, Tk) or (1, 1, Tq, Tk): shared by the heads
    while a.ndim > 2:
        a = a[0]
    return np.broadcast_to(a, attn.weights.shape[-2:])


def alignment_rows(r: TranslationResult, ref: Reference, layer: int, head: int | None) -> pd.DataFrame:
    """Per produced word: the source word it attended to most (argmax of the cross-attention row
    that produced it) and, when known, the reference source word."""
    w = head_weights(r.trace.decoder.layers[layer].cross_attn, head)  # (T_dec, T_src)
    rows = []
    for i, st_ in enumerate(r.steps):
        j = int(np.argmax(w[i]))
        g = ref.gold[i]
        rows.append({"step": i + 1, "output word": st_.token, "attended most": token_label(j, r.src_labels[j]),
                     "weight": round(float(w[i, j]), 3),
                     "reference source word": "—" if g is None else token_label(g, r.src_labels[g]),
                     "match": "—" if g is None else ("yes" if j == g else "no")})
    return pd.DataFrame(rows).set_index("step")


def sentence_accuracy(r: TranslationResult, ref: Reference, layer: int, head: int | None) -> tuple[int, int]:
    """(hits, n): rows with a known gold source word whose cross-attention argmax points to it."""
    w = head_weights(r.trace.decoder.layers[layer].cross_attn, head)  # (T_dec, T_src)
    known = [(i, g) for i, g in enumerate(ref.gold) if g is not None]
    return sum(int(np.argmax(w[i]) == g) for i, g in known), len(known)


def shapes_table(r: TranslationResult, layer: int) -> pd.DataFrame:
    """The cross-attention of one layer, step by step, with the live sizes read from the trace."""
    block = r.trace.decoder.layers[layer]  # DecoderBlockTrace (numpy, B = 1)
    cross = block.cross_attn
    x_dec = block.resid_mid[0]  # (T_dec, D) the stream the queries read (via LN2 in pre-LN)
    mem = r.trace.encoder.output[0]  # (T_src, D)
    q, k, v = cross.q[0], cross.k[0], cross.v[0]  # (H, T, d_k)
    w, heads = cross.weights[0], cross.heads[0]  # (H, T_dec, T_src), (H, T_dec, d_v)
    concat, out = cross.concat[0], cross.output[0]  # (T_dec, H d_v), (T_dec, D)
    H = w.shape[0]

    def sz(a: np.ndarray, per_head: bool = False) -> str:
        s = " × ".join(str(n) for n in a.shape[-2:])
        return f"{s}  (× {H} heads)" if per_head else s

    rows = [
        ("X_dec", "decoder stream after self-attention: the queries come from here", "T_dec × d_model", sz(x_dec)),
        ("M", "encoder output (memory): keys and values come from here", "T_enc × d_model", sz(mem)),
        ("Q_j = X_dec W_Q,j", "queries of head j", "T_dec × d_k", sz(q, True)),
        ("K_j = M W_K,j", "keys of head j (source words)", "T_enc × d_k", sz(k, True)),
        ("V_j = M W_V,j", "values of head j (source words)", "T_enc × d_v", sz(v, True)),
        ("A_j = softmax(Q_j K_jᵀ / √d_k)", "cross-attention weights: row = output step, column = source word",
         "T_dec × T_enc", sz(w, True)),
        ("Z_j = A_j V_j", "context of head j: a mix of source values per output step", "T_dec × d_v", sz(heads, True)),
        ("concat(Z_0 … Z_h−1)", "heads side by side", "T_dec × h·d_v", sz(concat)),
        ("context = concat · W_O", "added to the decoder stream", "T_dec × d_model", sz(out)),
    ]
    return pd.DataFrame(rows, columns=["quantity", "what it is", "shape", "this sentence"]).set_index("quantity")


def input_notices(r: TranslationResult) -> None:
    """Friendly messages about the input (user text escaped: shown literally, never as markup)."""
    if r.unknown:
        words = [md_escape(w) for w in dict.fromkeys(w for _, w in r.unknown)]  # each word once
        shown = ", ".join(words[:12]) + (f" and {len(words) - 12} more" if len(words) > 12 else "")
        st.warning(f"Not in the toy English vocabulary: {shown}. The encoder sees each of them as `<unk>` "
                   "(the charts keep what you typed). The model has never seen these words, so what it "
                   "makes of them is a guess. The vocabulary is listed below.", icon=":material/help:")
    if r.truncated:
        st.warning(f"Your source has {r.n_words} words; the encoder sees only the first {r.max_src_len} "
                   "(the toy model was trained on sentences of at most 15 words).", icon=":material/content_cut:")
    if not r.finished:
        st.info(f"The model did not end the sentence (no `<eos>`) within {len(r.steps)} steps, so the "
                "translation stops there.", icon=":material/more_horiz:")


def step_weights(step, layer: int, head: int | None) -> np.ndarray:
    """(T_src,) cross-attention of the token produced at one step (TranslationStep), one head or
    the mean over heads."""
    w = step.cross_attn[layer]  # (H, T_src)
    return w.mean(0) if head is None else w[head]


def argmax(w: np.ndarray) -> int:
    return int(np.argmax(w))


def cross_table(weights: np.ndarray, rows: list[str], src_labels: list[str], layer: int) -> pd.DataFrame:
    """weights (H, T_dec, T_src) as a long table: layer, head, decoder step, source word, weight."""
    Hh, Tq, Tk = weights.shape
    h, q, k = np.meshgrid(np.arange(Hh), np.arange(Tq), np.arange(Tk), indexing="ij")
    ql = np.asarray(token_labels(rows, plain=True), dtype=object)
    kl = np.asarray(token_labels(src_labels, plain=True), dtype=object)
    return pd.DataFrame({"layer": layer, "head": h.ravel(), "decoder step": ql[q.ravel()],
                         "source word": kl[k.ravel()], "weight": weights.ravel()})


def vocabulary_table() -> pd.DataFrame:
    kinds = [("article", translation.DETERMINERS), ("noun", translation.NOUNS), ("adjective", translation.ADJECTIVES), ("verb", translation.VERBS),
             ("preposition", translation.PREPOSITIONS), ("punctuation", translation.PUNCT)]
    return pd.DataFrame([{"English": e, "Kalo": k, "kind": kind} for kind, d in kinds for e, k in d.items()])

# --------------------------------------------------------------------------------------------
# The encoder–decoder page's RNN section: the shipped RNN translator with additive attention
# (shared, read-only), its cached greedy translation of the page's sentence and the reference
# alignment of its own output. Numbers from training.rnn_translation / model.rnn.
# --------------------------------------------------------------------------------------------

@st.cache_resource(show_spinner=False)
def get_rnn():
    """(model, tokenizer, info) of checkpoints/rnn-translator, shared by every session: never mutate."""
    model, tok, info = load_rnn_translator()
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval(), tok, info


@st.cache_data(max_entries=64, show_spinner=False)
def get_rnn_translation(src_tokens: tuple[str, ...]) -> RNNTranslation:
    """Greedy translation of the words the Transformer's encoder saw (same sentence, <unk> alike)."""
    model, tok, _ = get_rnn()
    return rnn_translate(model, tok, list(src_tokens))


def gold_rows(src_tokens: list[str], produced: list[str]) -> list[int | None]:
    """Reference source word of each produced token while the output agrees with the reference
    translation (None after a mistake, for <eos>, or outside the grammar)."""
    try:
        words, al = translate_words(src_tokens)
    except ValueError:
        return [None] * len(produced)
    out: list[int | None] = []
    ok = True
    for i, t in enumerate(produced):
        ok = ok and i < len(words) and t == words[i]
        out.append(al[i] if ok else None)
    return out


def alignment_hits(weights: np.ndarray, gold: list[int | None]) -> tuple[int, int]:
    """(rows whose argmax is the reference source word, rows with a known reference)."""
    known = [(i, g) for i, g in enumerate(gold) if g is not None and i < weights.shape[0]]
    return sum(int(np.argmax(weights[i]) == g) for i, g in known), len(known)
