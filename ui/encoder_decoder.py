"""The encoder–decoder page's helpers, for its two shipped toy translators (English -> Kalo): a
Transformer with cross-attention and, before it historically, an RNN with additive attention. Both
are shared and read-only; their translations are cached by the source text. This module also holds
the reference alignment of a translator's output, the attention rows and tables the page shows, the
evaluation scores the checkpoints carry (as typed records) and the notices about the input.

The numbers come from training.translation.translate and training.rnn_translation.rnn_translate
(greedy decoding that keeps the trace); this module only selects and labels them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st
import torch

from labels import md_escape, token_label, token_labels
from model.trace import AttentionTrace
from model.tokenizer import Tokenizer
from training import translation
from classroom import encoder_decoder as bottleneck_cls
from training.rnn_translation import NO_ATTENTION_DIR, RNNTranslation, load_rnn_translator, rnn_translate
from training.translation import DEFAULT_MAX_SRC_LEN, TranslationResult, load_translator, translate, translate_words

DEFAULT_SENTENCE = "the big dog sees a small cat in the old house ."
MAX_CHARS = 1_000  # the text box accepts at most this many characters (longer sources are cut to words below)
MAX_SRC_WORDS = DEFAULT_MAX_SRC_LEN  # the encoder sees at most this many words (notice when cut)


# ----------------------------------------------------------------------------- evaluation scores
@dataclass(frozen=True)
class AlignmentScores:
    """How often the Transformer's cross-attention points to the right source word: for each
    held-out target word, teacher-forced on the reference, is the argmax of the cross-attention row
    that produced it its source word? (training/translation.py `evaluate`)."""
    layer: int  # the decoder layer whose heads were scored
    best_head: int  # the head of that layer chosen as the best aligner
    best_head_chosen_on: str  # which sentences chose it (not the held-out ones)
    best_head_acc: float  # 0..1, the chosen head on held-out sentences
    head_average_acc: float  # 0..1, the average of the layer's heads on held-out sentences
    per_head_acc: np.ndarray  # (L, H) 0..1, every head of every decoder layer on held-out sentences
    n_target_words: int  # held-out target words scored


@dataclass(frozen=True)
class TranslatorScores:
    """The Transformer translator's evaluation, written into its checkpoint by `--train`."""
    exact_match: float  # 0..1, held-out sentences translated exactly (greedy decoding)
    n_heldout: int  # held-out sentences (never seen in training)
    alignment: AlignmentScores


@dataclass(frozen=True)
class RNNScores:
    """The RNN translator's evaluation and training record (checkpoints/rnn-translator)."""
    exact_match: float  # 0..1, held-out sentences translated exactly (greedy decoding)
    n_heldout: int  # held-out sentences
    token_acc: float  # 0..1, held-out target tokens predicted right
    alignment_acc: float  # 0..1, teacher-forced: argmax_j α_ij of the step producing each word is its source word
    steps: int  # training steps
    train_cpu_seconds: float  # CPU time of the training run
    parameters: int  # trainable parameters


def translator_scores(record: dict) -> TranslatorScores | None:
    """The scores in the translator checkpoint's record (config.json "extra"); None when it
    carries no alignment evaluation."""
    al = record.get("alignment")
    if not al:
        return None
    return TranslatorScores(
        exact_match=record["exact_match_heldout"], n_heldout=record["n_heldout"],
        alignment=AlignmentScores(
            layer=al["layer"], best_head=al["best_head"], best_head_chosen_on=al["best_head_chosen_on"],
            best_head_acc=al["best_head_acc_heldout"], head_average_acc=al["head_average_acc_heldout"],
            per_head_acc=np.asarray(al["per_head_acc_heldout"], dtype=float), n_target_words=al["n_target_words"]))


def rnn_scores(record: dict) -> RNNScores | None:
    """The scores in the RNN checkpoint's record; None when it has none."""
    if not record:
        return None
    return RNNScores(exact_match=record["exact_match_heldout"], n_heldout=record["n_heldout"],
                     token_acc=record["token_acc_heldout"], alignment_acc=record["alignment_acc_heldout"],
                     steps=record["steps"], train_cpu_seconds=record["train_cpu_seconds"],
                     parameters=record["parameters"])


# ----------------------------------------------------------------------------- the two translators
def _read_only(model: torch.nn.Module) -> torch.nn.Module:
    """A model every session shares: no gradients, eval mode."""
    return model.requires_grad_(False).eval()


@st.cache_resource(show_spinner=False)
def get_translator() -> tuple[torch.nn.Module, Tokenizer, TranslatorScores | None]:
    """(model, tokenizer, scores) of checkpoints/translator, shared by every session: never mutate."""
    s2s, tok, record = load_translator()
    return _read_only(s2s), tok, translator_scores(record)


@st.cache_resource(show_spinner=False)
def get_rnn() -> tuple[torch.nn.Module, Tokenizer, RNNScores | None]:
    """(model, tokenizer, scores) of checkpoints/rnn-translator, shared by every session: never mutate."""
    model, tok, record = load_rnn_translator()
    return _read_only(model), tok, rnn_scores(record)


@st.cache_resource(show_spinner=False)
def get_rnn_noattn() -> tuple[torch.nn.Module, Tokenizer] | None:
    """checkpoints/rnn-translator-noattn (the RNN recipe without attention), or None when it is
    not shipped; shared by every session: never mutate."""
    if not (NO_ATTENTION_DIR / "config.json").is_file():
        return None
    model, tok, _ = load_rnn_translator(NO_ATTENTION_DIR)
    return _read_only(model), tok


HELDOUT = 1000  # held-out sentences of the translators' own split (training.translation.make_splits)


@st.cache_resource(show_spinner="Translating 1,000 held-out sentences with each translator…")
def bottleneck() -> bottleneck_cls.LengthAccuracy | None:
    """Exact match and token accuracy by source length on the held-out split, for the RNN with
    attention, the RNN without it and the Transformer (classroom.encoder_decoder.accuracy_by_length).
    Computed once per server process (a few seconds), shared; None without the no-attention RNN."""
    noattn = get_rnn_noattn()
    if noattn is None:
        return None
    s2s, tok, _ = get_translator()
    rnn, rtok, _ = get_rnn()
    _, held = translation.make_splits(0, 20000, HELDOUT)
    return bottleneck_cls.accuracy_by_length(
        [("RNN without attention (one fixed context)", bottleneck_cls.rnn_outputs(noattn[0], noattn[1])),
         ("RNN with attention", bottleneck_cls.rnn_outputs(rnn, rtok)),
         ("Transformer", bottleneck_cls.transformer_outputs(s2s, tok))], held, tok)


@st.cache_resource(show_spinner="Timing a GRU and an attention layer at lengths up to 1,024…")
def parallel_timing() -> bottleneck_cls.ParallelTiming:
    """T recurrent steps vs one attention layer (classroom.encoder_decoder.sequential_vs_parallel),
    measured once per server process on its torch threads."""
    return bottleneck_cls.sequential_vs_parallel(lengths=(16, 64, 256, 512, 1024))


@st.cache_data(max_entries=64, show_spinner=False)
def get_translation(text: str, max_src_len: int = MAX_SRC_WORDS) -> TranslationResult:
    """Greedy translation of `text` with every step's attention (training.translation.translate).
    Raises ValueError (with a friendly message) for an empty source."""
    s2s, tok, _ = get_translator()
    return translate(s2s, tok, str(text)[:MAX_CHARS], max_src_len=max_src_len)


@st.cache_data(max_entries=64, show_spinner=False)
def get_rnn_translation(src_tokens: tuple[str, ...]) -> RNNTranslation:
    """Greedy translation of the words the Transformer's encoder saw (same sentence, <unk> alike)."""
    model, tok, _ = get_rnn()
    return rnn_translate(model, tok, list(src_tokens))


# ----------------------------------------------------------------------------- the reference alignment
@dataclass(frozen=True)
class Reference:
    """The reference (grammar) translation of the source, when the sentence is in the toy grammar."""
    words: list[str] | None  # reference Kalo words, None if the source is outside the grammar
    align: list[int] | None  # align[j] = source index of reference word j
    reason: str  # why there is no reference ("" when there is one)
    gold: list[int | None]  # per produced token (= per decoder row): its source word, None if unknown


def reference(src_tokens: list[str], produced: list[str]) -> Reference:
    """The reference translation of the source words and the gold source word of each produced
    token: known while a translator's output agrees with the reference (after its first mistake,
    or for <eos>, there is none)."""
    if any(t == "<unk>" for t in src_tokens):
        return Reference(None, None, "the sentence has words outside the vocabulary", [None] * len(produced))
    try:
        words, al = translate_words(src_tokens)
    except ValueError as e:
        return Reference(None, None, f"it is outside the toy grammar ({e})", [None] * len(produced))
    gold: list[int | None] = []
    ok = True
    for i, t in enumerate(produced):
        ok = ok and i < len(words) and t == words[i]
        gold.append(al[i] if ok else None)
    return Reference(words, al, "", gold)


def alignment_hits(weights: np.ndarray, gold: list[int | None]) -> tuple[int, int]:
    """(rows of weights (T_out, T_src) whose argmax is the gold source word, rows with a known gold)."""
    known = [(i, g) for i, g in enumerate(gold) if g is not None and i < weights.shape[0]]
    return sum(int(np.argmax(weights[i]) == g) for i, g in known), len(known)


# ----------------------------------------------------------------------------- attention rows
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


def step_weights(step, layer: int, head: int | None) -> np.ndarray:
    """(T_src,) cross-attention of the token produced at one step (TranslationStep), one head or
    the mean over heads."""
    w = step.cross_attn[layer]  # (H, T_src)
    return w.mean(0) if head is None else w[head]


def argmax(w: np.ndarray) -> int:
    return int(np.argmax(w))


# ----------------------------------------------------------------------------- tables
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


# ----------------------------------------------------------------------------- notices
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
