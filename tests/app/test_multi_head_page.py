"""The Multi-head mechanics page (AppTest): d_v different from d_k."""
from __future__ import annotations


import numpy as np

from tests.app.test_concept_pages import engine, fig, start
from tests.helpers import decode


def test_multihead_page_with_dv_different_from_dk():
    at = start("multi-head", dv=8)
    model, tr, labels, _ = engine(d_v=8)
    a = tr.layers[0].attn
    assert a.k.shape[-1] == 16 and a.heads.shape[-1] == 8
    shapes = at.dataframe[0].value
    T = len(labels)
    assert shapes.loc["Q_j, K_j (one head)", "shape"] == f"{T} × 16"
    assert shapes.loc["Z_j = weights V_j (one head)", "shape"] == f"{T} × 8"
    assert shapes.loc["concat(Z_1 … Z_h)", "shape"] == f"{T} × 32" and shapes.loc["W_O", "shape"] == "32 × 64"
    np.testing.assert_allclose(decode(fig(at, "Z_0")["data"][0]["z"]), a.heads[0, 0].numpy(), atol=1e-6)
    np.testing.assert_allclose(decode(fig(at, "concat(")["data"][0]["z"]), a.concat[0].numpy(), atol=1e-6)
    qkv = decode(fig(at, "Q, K, V of token")["data"][0]["z"])
    ti = T - 1
    np.testing.assert_allclose(qkv[2, :8], a.v[0, 0, ti].numpy(), atol=1e-6)
    assert np.isnan(qkv[2, 8:]).all()
    assert "d_k = d_model / h = 64 / 4 = 16 and d_v = 8" in " ".join(c.value for c in at.caption)
