"""Cached compute for the Layer norm & residuals page (classroom/layer_norm.py)."""
from __future__ import annotations

import json

import streamlit as st

from classroom import layer_norm
from model.config import ModelConfig

from .runs import Run


@st.cache_data(max_entries=16, show_spinner=False)
def _norm_placement(cfg_json: str, ids: tuple[int, ...]) -> layer_norm.NormPlacement:
    return layer_norm.norm_placement_comparison(ModelConfig.from_dict(json.loads(cfg_json)), ids, seed=0)


def get_norm_placement(run: Run) -> layer_norm.NormPlacement:
    """Pre-LN vs post-LN on the run's first ids (layer_norm.PLACEMENT_TOKENS) with fresh weights of
    its architecture (cached)."""
    return _norm_placement(json.dumps(run.cfg.to_dict(), sort_keys=True), tuple(run.ids[: layer_norm.PLACEMENT_TOKENS]))
