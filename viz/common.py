"""Shared helpers for every figure: safe token labels, colour scales, shape checks."""
from __future__ import annotations

import html
import unicodedata
from typing import Sequence

import numpy as np

# Colour-blind-safe sequential scale for weights (0..1) and a diverging one for differences.
WEIGHT_SCALE = "Cividis"
DIVERGING_SCALE = "RdBu_r"
MASKED_COLOR = "#d9d9d9"  # masked cells are NaN in z and show this background (blank/grey)
FONT = dict(family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif")
# Okabe-Ito: a qualitative palette that stays distinguishable for colour-blind readers.
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
MASK_COLORS = ["#d9d9d9", "#2c7fb8"]  # 0 = masked (grey, as masked cells everywhere), 1 = allowed
NEG_INF = "−∞"


def visible(text: str) -> str:
    """Make control and invisible characters visible (\\x07, \\u200f ...) and escape HTML.
    Plotly renders a subset of HTML in labels, so user text is always escaped."""
    out = []
    for ch in str(text):
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Cf", "Zl", "Zp") or (cat == "Zs" and ch != " "):
            out.append(f"\\u{ord(ch):04x}" if ord(ch) > 0xFF else f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    s = "".join(out)
    return html.escape(s if s else "∅", quote=True)


def token_labels(labels: Sequence[str], max_chars: int = 14) -> list[str]:
    """Unique, HTML-escaped axis labels "i:token" (Plotly merges equal category labels)."""
    result = []
    for i, lab in enumerate(labels):
        lab = str(lab)
        short = lab if len(lab) <= max_chars else lab[: max_chars - 1] + "…"
        result.append(f"{i}:{visible(short)}")
    return result


def as_array(x, ndim: int, name: str, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {what} ({ndim}-D); got shape {a.shape}")
    return a


def check_labels(labels: Sequence[str], n: int, name: str) -> None:
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} labels but the matrix has {n} along that axis; pass one label per token")


def masked_z(weights: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """float32 weights with NaN where not allowed (rendered blank/grey, never as a colour)."""
    z = np.asarray(weights, dtype=np.float32).copy()
    if allowed is not None:
        z = np.where(np.broadcast_to(np.asarray(allowed, dtype=bool), z.shape), z, np.nan).astype(np.float32)
    return z
