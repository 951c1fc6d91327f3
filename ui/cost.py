"""Cached compute for the Cost of attention page (classroom/cost.py): timed forward passes."""
from __future__ import annotations

import json

import streamlit as st

from classroom import cost
from model.config import ModelConfig

from .models import ModelSource, get_model


@st.cache_data(max_entries=8, show_spinner="Timing forward passes…")
def forward_timing(source: ModelSource, Ts: tuple[int, ...], repeats: int) -> tuple[list[float], list[float]]:
    """Measured forward time (best of `repeats`, s) per T and the fitted FLOP curve; once per model."""
    model, _ = get_model(source)
    secs = cost.measure_forward_time(model, Ts, repeats=repeats, seed=0)
    fit = cost.fit_theory(Ts, secs, model.cfg)
    return secs.tolist(), fit["fit"].tolist()


@st.cache_data(max_entries=8, show_spinner="Timing one block and its attention at lengths up to 1,024…")
def block_timing(cfg_json: str, Ts: tuple[int, ...], repeats: int) -> dict[str, list[float]]:
    """Best-of-`repeats` seconds per T of attention alone and of one whole block with this
    architecture (cost.measure_block_time, fresh weights); once per architecture."""
    cfg = ModelConfig.from_dict(json.loads(cfg_json))
    r = cost.measure_block_time(cfg, Ts, repeats=repeats, seed=0)
    return {k: v.tolist() for k, v in r.items()}
