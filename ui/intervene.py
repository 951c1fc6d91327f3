"""Cached calls for the Intervene page (classroom/intervene.py on the sidebar's model)."""
from __future__ import annotations

import threading
from collections import OrderedDict

import streamlit as st

from classroom import intervene

from .models import ModelSource, get_model


@st.cache_data(max_entries=32, show_spinner=False)
def compare(source: ModelSource, ids: tuple[int, ...], heads: tuple[tuple[int, int], ...], causal: bool,
            mode: str) -> dict:
    model, _ = get_model(source)
    return intervene.compare(model, list(ids), list(heads), causal=causal, mode=mode)


_IMPORTANCE: "OrderedDict[tuple, dict]" = OrderedDict()  # server-wide, the 32 most recent rankings
_lock = threading.Lock()


def importance(source: ModelSource, ids: tuple[int, ...], causal: bool, mode: str, progress=None) -> dict:
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
def flow(source: ModelSource, ids: tuple[int, ...], causal: bool):
    """classroom.intervene.attention_flow over the run's attention weights."""
    import numpy as np
    import torch
    model, _ = get_model(source)
    tr = model.trace(torch.tensor([list(ids)]), causal=causal)
    return intervene.attention_flow(np.stack([lt.attn.weights[0].numpy() for lt in tr.layers]))


@st.cache_data(max_entries=32, show_spinner=False)
def edit(source: ModelSource, ids: tuple[int, ...], causal: bool, row: tuple) -> dict:
    """One attention row replaced (model.intervene edit_rows): the next-token distributions as trained
    and edited, or the message saying why the row was refused."""
    import torch
    model, _ = get_model(source)
    x = torch.tensor([list(ids)])
    clean = model.trace(x, causal=causal)
    try:
        ed = model.trace(x, causal=causal, edit_rows=[row])
    except ValueError as e:
        return {"error": str(e)}
    l, h, q, _ = row
    out = {"error": None, "row": ed.layers[l].attn.weights[0, h, q].numpy(), "p_clean": None, "p_edited": None,
           "hidden_change": float((ed.final - clean.final).norm(dim=-1).max())}
    if clean.probs is not None:
        out["p_clean"] = clean.probs[0, -1].double().numpy()
        out["p_edited"] = ed.probs[0, -1].double().numpy()
    return out
