"""Cached calls for the Intervene page (classroom/intervene.py on the sidebar's model)."""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import streamlit as st

from classroom import intervene

from .models import ModelSource, get_model


@st.cache_data(max_entries=32, show_spinner=False)
def compare(source: ModelSource, ids: tuple[int, ...], heads: tuple[tuple[int, int], ...], causal: bool,
            mode: str, _clean=None) -> intervene.Ablation:
    """classroom.intervene.compare; _clean (not hashed: the run's trace, which source, ids and causal
    already determine) saves tracing the clean sentence again on every click."""
    model, _ = get_model(source)
    return intervene.compare(model, list(ids), list(heads), causal=causal, mode=mode, clean=_clean)


_IMPORTANCE: "OrderedDict[tuple, intervene.HeadImportance]" = OrderedDict()  # server-wide, the 32 most recent rankings
_lock = threading.Lock()


def importance(source: ModelSource, ids: tuple[int, ...], causal: bool, mode: str, progress=None) -> intervene.HeadImportance:
    """classroom.intervene.head_importance, kept per (model, sentence, mask, mode). Not an
    st.cache_data: the progress bar it drives lives outside it (a cached call may not draw on a
    block made elsewhere), so results are kept here instead."""
    key = (source, ids, causal, mode)
    with _lock:
        if key in _IMPORTANCE:
            _IMPORTANCE.move_to_end(key)
            return _IMPORTANCE[key]
    model, _ = get_model(source)
    res = intervene.head_importance(model, list(ids), causal=causal, mode=mode, progress=progress)
    with _lock:
        _IMPORTANCE[key] = res
        while len(_IMPORTANCE) > 32:
            _IMPORTANCE.popitem(last=False)
    return res


@st.cache_data(max_entries=16, show_spinner="Computing the maximum flows…")
def flow(source: ModelSource, ids: tuple[int, ...], causal: bool) -> np.ndarray:
    """classroom.intervene.attention_flow over the run's attention weights, (T, T)."""
    model, _ = get_model(source)
    return intervene.flow_of(model, list(ids), causal)


@st.cache_data(max_entries=32, show_spinner=False)
def edit(source: ModelSource, ids: tuple[int, ...], causal: bool, row: tuple) -> intervene.RowEdit:
    """One attention row replaced (classroom.intervene.edit_row): the next-token distributions as
    trained and edited, or the message saying why the row was refused."""
    model, _ = get_model(source)
    return intervene.edit_row(model, list(ids), causal, row)
