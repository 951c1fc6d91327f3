"""Cached compute for the Positional encoding page (classroom/positional.py): position tables of
the cached models."""
from __future__ import annotations

import numpy as np
import streamlit as st

from classroom import positional
from model.transformer import Transformer

from .models import ModelSource, get_model, shipped_checkpoints


@st.cache_data(max_entries=16, show_spinner=False)
def comparison_position_table(source: ModelSource, n: int) -> tuple[np.ndarray, str, str]:
    """A learned position table to set beside the sinusoidal one, (n', D) with n' <= n, and where
    it comes from: ("current", "") the current model's own; ("checkpoint", name) a shipped
    checkpoint trained with learned positions and the same d_model; ("init", "") a fresh learned
    table at initialisation (seed 0). Built once, not per rerun."""
    model, _ = get_model(source)
    cfg = model.cfg
    if cfg.pos_encoding == "learned":
        return model.position_table(min(n, cfg.max_len)).detach().numpy().copy(), "current", ""
    for name, meta in shipped_checkpoints().items():
        if (meta.get("config") or {}).get("pos_encoding") == "learned":
            try:
                other, _ = get_model(ModelSource("checkpoint", name))
            except (OSError, ValueError):  # unreadable (e.g. being rewritten): try the next
                continue
            if other.cfg.d_model == cfg.d_model:
                n_other = min(n, other.cfg.max_len)
                return other.position_table(n_other).detach().numpy().copy(), "checkpoint", name
    fresh = Transformer(cfg.replace(n_layers=1, pos_encoding="learned"), seed=0)
    return fresh.position_table(min(n, cfg.max_len)).detach().numpy().copy(), "init", ""


@st.cache_data(max_entries=16, show_spinner=False)
def positions_matter(source: ModelSource, ids: tuple[int, ...], seed: int) -> dict:
    """positional.positions_matter on the source's model (its weights, positional encoding off)."""
    model, _ = get_model(source)
    return positional.positions_matter(model, ids, seed)
