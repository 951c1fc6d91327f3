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


def embedding_neighbours(source: ModelSource, word: str, k: int) -> list[tuple[str, float]]:
    """embeddings.nearest_neighbours in the source model's token-embedding matrix."""
    return _neighbours(source, word, k)


@st.cache_data(max_entries=32, show_spinner=False)
def _neighbours(source: ModelSource, word: str, k: int) -> list[tuple[str, float]]:
    model, tok = get_model(source)
    return embeddings.nearest_neighbours(model.tok_emb.weight.detach().numpy(), tok.vocab, word, k)
