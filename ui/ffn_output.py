"""Cached compute for the FFN & output layer page (classroom/ffn_output.py): what it shows of the
cached model's weights (FFN per position, weight tying, the output matrix)."""
from __future__ import annotations

import numpy as np
import streamlit as st

from classroom import embeddings, ffn_output

from .models import ModelSource, get_model, trained_causal
from .runs import Run


def ffn_position_check(run: Run, layer: int) -> float:
    """max |FFN on each position alone - FFN on all positions| for one layer of the run."""
    model, _ = get_model(run.source)
    ffn = run.trace.layers[layer].ffn
    return ffn_output.ffn_position_check(model, layer, ffn.input[0], ffn.output[0])


def output_layer_view(run: Run, n_rows: int) -> ffn_output.OutputLayerView:
    """Weight tying of the run's model (tied?, shape, max |recomputed - model logits|) plus the
    first n_rows of the embedding E and of the output matrix, (n, D)."""
    model, _ = get_model(run.source)
    return ffn_output.output_layer_view(model, run.trace.final[0], run.trace.logits[0], n_rows)


# ----------------------------------------------------------------------------- embeddings and fill-in-the-blank

def embedding_neighbours(source: ModelSource, word: str, k: int) -> embeddings.WordNeighbours:
    """The nearest rows to a typed word in the source model's token-embedding matrix
    (classroom.embeddings, any tokenizer), or the pieces it splits into when it is not one token."""
    return _neighbours(source, word, k)


@st.cache_resource(max_entries=8, show_spinner=False)
def _special_rows(source: ModelSource):
    _, tok = get_model(source)
    return embeddings.special_rows(tok.vocab)


@st.cache_data(max_entries=32, show_spinner=False)
def _neighbours(source: ModelSource, word: str, k: int) -> embeddings.WordNeighbours:
    model, tok = get_model(source)
    E = model.tok_emb.weight.detach().numpy()  # (V, d_model), shared read-only
    return embeddings.word_neighbours(E, tok, word, k, skip=_special_rows(source))


@st.cache_data(max_entries=32, show_spinner=False)
def fill_blank(source: ModelSource, ids: tuple[int, ...], position: int, k: int) -> ffn_output.FillIn | None:
    """classroom.ffn_output.fill_in on the source's model; None when it has no mask token."""
    model, tok = get_model(source)
    mask = ffn_output.mask_id(tok.vocab)
    if mask is None:
        return None
    return ffn_output.fill_in(model, ids, position, mask, k)


def fill_blank_capability(source: ModelSource) -> str | None:
    """classroom.ffn_output.fill_blank_capability of the source's model: MLM_HEAD (the toy masked
    LM; a BERT/RoBERTa opened from disk with its MLM head), ENCODER_ONLY (MiniLM) or None. The
    objective comes from ui.models.trained_causal (False = trained bidirectionally)."""
    model, tok = get_model(source)
    tc = trained_causal(source.name)
    return ffn_output.fill_blank_capability(model.cfg.output_head, tok.vocab, None if tc is None else not tc)


@st.cache_data(max_entries=32, show_spinner=False)
def nearest_rows(source: ModelSource, ids: tuple[int, ...], position: int, k: int) -> ffn_output.NearestRows | None:
    """classroom.ffn_output.nearest_rows on the source's model (special tokens left out); None
    when it has no mask token."""
    model, tok = get_model(source)
    mask = ffn_output.mask_id(tok.vocab)
    if mask is None:
        return None
    skip = [int(i) for i in np.flatnonzero(_special_rows(source))]
    return ffn_output.nearest_rows(model, ids, position, mask, k, skip=skip)
