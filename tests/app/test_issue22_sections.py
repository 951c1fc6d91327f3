"""Issue 22's sections on existing pages, each against an independent computation: the PE-off
demonstration (positional), d_v != d_k (multi-head), the search-engine analogy, embedding
neighbours and per-position cross-entropy (FFN & output), live answers in lesson mode."""
from __future__ import annotations

import numpy as np

from tests.app.test_concept_pages import engine, fig, start
from tests.helpers import decode


def test_positional_pe_off_section_matches_a_numpy_permutation():
    at = start("positional", pe_shuffle=3)
    model, tr, labels, ids = engine()
    from classroom import order
    perm = order.shuffle_order(len(ids), 3)
    blind = order.without_positions(model)
    # independent: trace the shuffled ids, compare with the original weights indexed by perm
    import torch
    w = np.stack([l.attn.weights[0].numpy() for l in blind.trace(torch.tensor([ids]), causal=False).layers])
    ws = np.stack([l.attn.weights[0].numpy() for l in
                   blind.trace(torch.tensor([[ids[i] for i in perm]]), causal=False).layers])
    gap = np.abs(ws - w[:, :, perm][:, :, :, perm]).max()
    table = at.dataframe[-1].value
    shown = table.iloc[0, 0]
    assert abs(shown - gap) < 1e-6 and shown < 1e-5
    assert table.iloc[1, 1] > 1e-2  # causal mask, no PE: outputs differ
    f1 = fig(at, "No PE: weights of the shuffled sentence")
    f2 = fig(at, "P W Pᵀ")
    z1, z2 = decode(f1["data"][0]["z"]), decode(f2["data"][0]["z"])
    np.testing.assert_allclose(z1, ws[-1, 0], atol=1e-6)
    np.testing.assert_allclose(z2, w[-1, 0][perm][:, perm], atol=1e-6)
    text = " ".join(m.value for m in at.markdown)
    assert "Attention alone ignores order" in text and "The causal mask alone leaks some order" in text
