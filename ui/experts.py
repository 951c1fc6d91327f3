"""Cached calls for the Heads-as-experts page (classroom/experts.py over a real model)."""
from __future__ import annotations

import streamlit as st

from classroom import experts
from model.pretrained import PRETRAINED as ALL_PRETRAINED

from .models import pretrained_error, pretrained_model


def real_models() -> list[str]:
    """The pretrained models this page can score (every entry of model.pretrained's registry)."""
    return list(ALL_PRETRAINED)


def title(name: str) -> str:
    return ALL_PRETRAINED[name].title


def causal(name: str) -> bool:
    """Whether the model is a causal LM (it parks spare weight on the first token)."""
    return bool(ALL_PRETRAINED[name].causal)


def load_error(name: str) -> str | None:
    return pretrained_error(name)


@st.cache_data(max_entries=8, show_spinner="Scoring every head on the built-in sentences…")
def expert_scores(name: str, task: str) -> experts.ExpertResult:
    model, tok = pretrained_model(name)
    return experts.find_experts(model, tok, task, causal=bool(ALL_PRETRAINED[name].causal))
