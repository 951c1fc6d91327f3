"""Masks (the mask lab): the padding, causal and combined masks, step by step.
Pure numpy/torch over the engine (never streamlit, plotly or ui/); every number on the page is
computed here, one hop from the page."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model.attention import additive, causal_allowed, combine, padding_allowed


@dataclass(frozen=True)
class MaskSteps:
    """Masks for one sentence; every (T, T) matrix is float 1/0 (1 = may attend). The additive
    forms (0 / -inf) are model.attention.additive of the same masks."""
    pad_1d: np.ndarray  # (T,)   1 = real token, 0 = padding
    pad_2d: np.ndarray  # (T, T) padding as a key mask (with queries masked too if chosen)
    look_ahead: np.ndarray  # (T, T) lower triangle (all ones when bidirectional)
    combined: np.ndarray  # (T, T) pad_2d * look_ahead (elementwise product)
    pad_1d_add: np.ndarray  # (T,) 0 / -inf
    pad_2d_add: np.ndarray  # (T, T) 0 / -inf
    look_ahead_add: np.ndarray  # (T, T) 0 / -inf
    combined_add: np.ndarray  # (T, T) 0 / -inf
    fully_masked: np.ndarray  # (T,) bool: query rows where nothing is allowed


def mask_steps(key_padding_mask, b: int, *, causal: bool, mask_queries: bool) -> MaskSteps:
    """The masks the model combines, for sentence b of the batch, made by the engine's own mask
    functions (model/attention.py). key_padding_mask (B, T) bool (tensor or numpy), True = real token."""
    key_padding_mask = torch.as_tensor(np.asarray(key_padding_mask, dtype=bool))
    T = key_padding_mask.shape[1]
    pad = padding_allowed(key_padding_mask, mask_queries=mask_queries)[b, 0]  # (T, T)
    la = causal_allowed(T) if causal else torch.ones(T, T, dtype=torch.bool)
    comb = combine(pad, la)
    f = lambda m: m.to(torch.float32).numpy()  # noqa: E731
    return MaskSteps(pad_1d=f(key_padding_mask[b]), pad_2d=f(pad), look_ahead=f(la), combined=f(comb),
                     pad_1d_add=additive(key_padding_mask[b]).numpy(), pad_2d_add=additive(pad).numpy(),
                     look_ahead_add=additive(la).numpy(), combined_add=additive(comb).numpy(),
                     fully_masked=(~comb.any(dim=-1)).numpy())
