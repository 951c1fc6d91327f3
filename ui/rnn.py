"""The encoder–decoder page's RNN section: the shipped RNN translator with additive attention
(shared, read-only), its cached greedy translation of the page's sentence and the reference
alignment of its own output. Numbers from training.rnn_translation / model.rnn."""
from __future__ import annotations

import numpy as np
import streamlit as st

from training.rnn_translation import RNNTranslation, load_rnn_translator, rnn_translate
from training.translation import translate_words


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
