"""Rotary positions on real weights (issue 18 point 4): how RoPE turns q and k, and a measurement
that the score between a query at position m and a key at position n depends on m − n only.

Uses the engine's own rotary code (model.layers.rope_tables / apply_rope), so what is measured
here is what the model computes. Pure numpy/torch, no Streamlit.
"""
from __future__ import annotations

import numpy as np
import torch

from model.layers import apply_rope, rope_tables


def pair_rotation(q_pre: np.ndarray, q_post: np.ndarray, pairs: list[int]) -> list[dict]:
    """For one query vector (d_k,) before and after rotation: each chosen pair i (dimensions i and
    i + d_k/2, the engine's layout) as 2-D points, with the angle it turned by (degrees) and its
    length (unchanged by a rotation)."""
    d = q_pre.shape[-1]
    half = d // 2
    out = []
    for i in pairs:
        if not 0 <= i < half:
            raise ValueError(f"pair index must be in [0, {half}), got {i}")
        a = np.array([q_pre[i], q_pre[i + half]], dtype=np.float64)  # (2,)
        b = np.array([q_post[i], q_post[i + half]], dtype=np.float64)  # (2,)
        turn = np.degrees(np.arctan2(b[1], b[0]) - np.arctan2(a[1], a[0]))
        out.append({"pair": i, "dims": (i, i + half), "before": a, "after": b,
                    "angle_deg": float((turn + 180) % 360 - 180), "norm_before": float(np.linalg.norm(a)),
                    "norm_after": float(np.linalg.norm(b))})
    return out


def pair_frequencies(d_k: int, theta: float) -> np.ndarray:
    """Radians per position of each pair i: theta^(-2i/d_k), (d_k/2,) (as rope_tables computes)."""
    cos, sin = rope_tables(torch.tensor([1]), d_k, theta)  # angle at position 1 = the frequency
    return np.arctan2(sin[0, : d_k // 2].numpy(), cos[0, : d_k // 2].numpy()).astype(np.float64)


def relative_scores(q: np.ndarray, k: np.ndarray, n_pos: int, theta: float) -> dict:
    """One query vector and one key vector (d_k,) taken before rotation, rotated to every position
    0 … n_pos−1 with the engine's rotary code; S[m, n] = rot(q, m) · rot(k, n). If RoPE encodes
    relative position, S is constant along each diagonal (m − n fixed). Returns S (n_pos, n_pos),
    by_offset {m − n: score}, and the largest spread (max − min) along any diagonal."""
    if n_pos < 2:
        raise ValueError("n_pos must be at least 2")
    d = q.shape[-1]
    cos, sin = rope_tables(torch.arange(n_pos), d, theta)  # (n_pos, d) each
    qt = torch.tensor(np.asarray(q, dtype=np.float32)).expand(n_pos, d)  # (n_pos, d), a copy (trace arrays are read-only)
    kt = torch.tensor(np.asarray(k, dtype=np.float32)).expand(n_pos, d)
    qr, kr = apply_rope(qt, cos, sin), apply_rope(kt, cos, sin)  # (n_pos, d): q at m, k at n
    S = (qr.double() @ kr.double().T).numpy()  # (m, n)
    offsets = np.arange(-(n_pos - 1), n_pos)
    diag = {int(o): np.diagonal(S, offset=-int(o)) for o in offsets}  # m − n = o  <=>  diagonal −o
    spread = max(float(v.max() - v.min()) for v in diag.values())
    return {"S": S, "offsets": offsets, "by_offset": np.array([diag[int(o)].mean() for o in offsets]),
            "spread": spread, "range": float(S.max() - S.min())}
