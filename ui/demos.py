"""Cached calls for issue 22's demonstrations on the concept pages (classroom/order.py,
classroom/embeddings.py). Pages never touch the model: they get numpy results from here."""
from __future__ import annotations

import streamlit as st

from classroom import embeddings, order

from .compute import ModelSource, get_model


@st.cache_data(max_entries=16, show_spinner=False)
def positions_matter(source: ModelSource, ids: tuple[int, ...], seed: int) -> dict:
    """order.positions_matter on the source's model (its weights, positional encoding off)."""
    model, _ = get_model(source)
    return order.positions_matter(model, ids, seed)


def embedding_neighbours(source: ModelSource, word: str, k: int) -> tuple[str | None, list[tuple[str, float]], list[str]]:
    """The nearest rows to a typed word in the source model's token-embedding matrix
    (classroom.embeddings, any tokenizer): (the word's row label, [(neighbour label, cosine)], []);
    or (None, [], the pieces it splits into) when the word is not one token."""
    return _neighbours(source, word, k)


@st.cache_resource(max_entries=8, show_spinner=False)
def _special_rows(source: ModelSource):
    _, tok = get_model(source)
    return embeddings.special_rows(tok.vocab)


@st.cache_data(max_entries=32, show_spinner=False)
def _neighbours(source: ModelSource, word: str, k: int) -> tuple[str | None, list[tuple[str, float]], list[str]]:
    model, tok = get_model(source)
    row, pieces = embeddings.resolve_word(tok, word)
    if row is None:
        return None, [], pieces
    E = model.tok_emb.weight.detach().numpy()  # (V, d_model), shared read-only
    near = embeddings.neighbours_of_row(E, row, k, skip=_special_rows(source))
    return embeddings.row_label(tok, row), [(embeddings.row_label(tok, i), c) for i, c in near], []


@st.cache_data(max_entries=32, show_spinner=False)
def fill_blank(source: ModelSource, ids: tuple[int, ...], position: int, k: int) -> dict | None:
    """classroom.fill_blank.fill_in on the source's model; None when it has no mask token."""
    from classroom import fill_blank as fb
    model, tok = get_model(source)
    mask = fb.mask_id(tok.vocab)
    if mask is None:
        return None
    return fb.fill_in(model, ids, position, mask, k)
