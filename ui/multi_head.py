"""Cached compute for the Multi-head mechanics page (classroom/multi_head.py): what it shows of the
cached model's weights."""
from __future__ import annotations

from .models import ModelSource, get_model


def allocated_parameters(source: ModelSource) -> int:
    """Parameters of the allocated model (to set beside the count from the config)."""
    return get_model(source)[0].num_parameters()
