"""Cached compute for the Positional encoding page (classroom/positional.py): position tables of
the cached models."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st

from classroom import positional
from model.transformer import Transformer

from .models import ModelSource, get_model, shipped_checkpoints


@dataclass(frozen=True)
class LearnedTable:
    """A learned position table to set beside the sinusoidal one, and where it comes from."""
    table: np.ndarray  # (n', D) float32, one row per position 0 … n' − 1
    origin: str  # "current": the current model's own; "checkpoint": a shipped checkpoint's;
    #              "init": a fresh learned table at initialisation (seed 0)
    checkpoint: str = ""  # the shipped checkpoint's name when origin == "checkpoint"


@st.cache_data(max_entries=16, show_spinner=False)
def comparison_position_table(source: ModelSource, n: int) -> LearnedTable:
    """A learned position table (n', D) with n' <= n: the current model's own when it learns its
    positions; else a shipped checkpoint's trained with learned positions and the same d_model;
    else a fresh learned table at initialisation (seed 0). Built once, not per rerun."""
    model, _ = get_model(source)
    cfg = model.cfg
    if cfg.pos_encoding == "learned":
        return LearnedTable(model.position_table(min(n, cfg.max_len)).detach().numpy().copy(), "current")
    for name, meta in shipped_checkpoints().items():
        if (meta.get("config") or {}).get("pos_encoding") == "learned":
            try:
                other, _ = get_model(ModelSource("checkpoint", name))
            except (OSError, ValueError):  # unreadable (e.g. being rewritten): try the next
                continue
            if other.cfg.d_model == cfg.d_model:
                n_other = min(n, other.cfg.max_len)
                return LearnedTable(other.position_table(n_other).detach().numpy().copy(), "checkpoint", name)
    fresh = Transformer(cfg.replace(n_layers=1, pos_encoding="learned"), seed=0)
    return LearnedTable(fresh.position_table(min(n, cfg.max_len)).detach().numpy().copy(), "init")


@st.cache_data(max_entries=16, show_spinner=False)
def positions_matter(source: ModelSource, ids: tuple[int, ...], seed: int) -> positional.PositionsMatter:
    """positional.positions_matter on the source's model (its weights, positional encoding off)."""
    model, _ = get_model(source)
    return positional.positions_matter(model, ids, seed)
