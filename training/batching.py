"""Batching for training: the padding itself is the engine's (model/batching.py: inference pads the
same way), imported here so training code and its callers keep one name for it."""
from __future__ import annotations

from model.batching import Batch, pad_batch

__all__ = ["Batch", "pad_batch"]
