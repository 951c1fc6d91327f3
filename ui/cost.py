"""Cached compute for the Cost of attention page (classroom/cost.py): timed blocks."""
from __future__ import annotations

import json

import streamlit as st

from classroom import cost
from model.config import ModelConfig


@st.cache_data(max_entries=8, show_spinner="Timing one block and its attention at lengths up to 1,024…")
def block_timing(cfg_json: str, Ts: tuple[int, ...], repeats: int) -> cost.BlockTimes:
    """Best-of-`repeats` seconds per T of attention alone and of one whole block with this
    architecture (cost.measure_block_time, fresh weights); once per architecture."""
    cfg = ModelConfig.from_dict(json.loads(cfg_json))
    return cost.measure_block_time(cfg, Ts, repeats=repeats, seed=0)
