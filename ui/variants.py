"""Cached compute for the Variants page (classroom/variants.py): one small model per variant
(st.cache_resource: shared, read-only), their traces and the shuffle test on small hashable keys
(st.cache_data)."""
from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from classroom import variants
from model.transformer import Transformer

from . import state
from .models import fresh_tokenizer

MAX_T = 24  # tokens shown per variant: 4 panels in a row stay readable up to about this many


@dataclass(frozen=True)
class Sentence:
    ids: tuple[int, ...]
    labels: tuple[str, ...]
    n_tokens: int  # before the cut to MAX_T
    unknown: tuple[str, ...]  # typed words that map to the toy vocabulary's unknown token
    vocab_size: int
    text_cut: bool = False  # the text was longer than state.MAX_TEXT_CHARS (only the start is used)


def sentence() -> Sentence | None:
    """The sidebar's text with the toy vocabulary (the fresh-weights tokenizer), cut to
    min(sidebar T, MAX_T) tokens. None when the text is empty."""
    text = str(st.session_state.get("text", state.DEFAULT_TEXT))
    if not text.strip():
        return None
    tok = fresh_tokenizer()
    enc = tok.encode(text[: state.MAX_TEXT_CHARS])
    n = min(int(st.session_state.get("T", 64)), MAX_T)
    ids, labels = tuple(enc.ids[:n]), tuple(enc.labels[:n])
    unknown = tuple(dict.fromkeys(lab for i, lab in zip(ids, labels) if i == tok.unk_id))
    return Sentence(ids=ids, labels=labels, n_tokens=len(enc.ids), unknown=unknown, vocab_size=len(tok),
                    text_cut=len(text) > state.MAX_TEXT_CHARS)


def _norm(key: str, window: int | None, n_kv_heads: int) -> tuple[int | None, int]:
    """Only the window variant reads the window and only GQA the K/V heads: other variants share
    one cache entry whatever those controls say."""
    return (window if key == "window" else 3), (n_kv_heads if key == "gqa" else 2)


@st.cache_resource(max_entries=64, show_spinner=False)
def _model(key: str, vocab_size: int, seed: int, window: int | None, n_kv_heads: int) -> Transformer:
    return variants.build_variant(key, vocab_size, seed=seed, window=window, n_kv_heads=n_kv_heads)


def variant_model(key: str, vocab_size: int, seed: int, window: int | None, n_kv_heads: int) -> Transformer:
    """The variant's model (shared by every session: never mutate it)."""
    return _model(key, vocab_size, seed, *_norm(key, window, n_kv_heads))


@st.cache_data(max_entries=128, show_spinner=False)
def _heads(key: str, vocab_size: int, seed: int, window: int | None, n_kv_heads: int,
           ids: tuple[int, ...], causal: bool) -> variants.VariantHeads:
    return variants.variant_heads(_model(key, vocab_size, seed, window, n_kv_heads), ids, causal)


def variant_heads(key: str, s: Sentence, seed: int, window: int | None, n_kv_heads: int,
                  causal: bool) -> variants.VariantHeads:
    """variants.variant_heads of the sentence through the variant's model (cached)."""
    return _heads(key, s.vocab_size, seed, *_norm(key, window, n_kv_heads), s.ids, causal)


@st.cache_data(max_entries=32, show_spinner=False)
def _shuffle(keys: tuple[str, ...], vocab_size: int, seed: int, window: int | None, n_kv_heads: int,
             ids: tuple[int, ...], shuffle_seed: int) -> variants.ShuffleTest:
    models = {k: _model(k, vocab_size, seed, *_norm(k, window, n_kv_heads)) for k in keys}
    return variants.shuffle_gaps(models, ids, shuffle_seed)


def shuffle_gaps(keys: tuple[str, ...], s: Sentence, seed: int, window: int | None, n_kv_heads: int,
                 shuffle_seed: int) -> variants.ShuffleTest:
    """variants.shuffle_gaps for these variants on the sentence (cached)."""
    return _shuffle(keys, s.vocab_size, seed, window, n_kv_heads, s.ids, shuffle_seed)
