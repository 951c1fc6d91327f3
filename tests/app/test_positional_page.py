"""The Positional encoding page (AppTest): the PE-off demonstration against a numpy permutation, the learned table's colour bars."""
from __future__ import annotations


import numpy as np

from tests.app.test_concept_pages import engine, fig, start
from tests.helpers import decode


def test_positional_pe_off_section_matches_a_numpy_permutation():
    at = start("positional", pe_shuffle=3)
    model, tr, labels, ids = engine()
    from classroom import positional
    perm = positional.shuffle_order(len(ids), 3)
    blind = positional.without_positions(model)
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


def test_learned_pe_colour_bars_sit_below_the_panels():
    """'colour-bar numbers overlap the learned-PE table's labels'."""
    from viz.charts import two_heatmaps
    fig = two_heatmaps(np.random.default_rng(0).normal(size=(8, 6)), np.ones((8, 6)), ("a", "b"))
    for ax, dom in ((fig.layout.coloraxis, fig.layout.xaxis.domain), (fig.layout.coloraxis2, fig.layout.xaxis2.domain)):
        cb = ax.colorbar
        assert cb.orientation == "h" and cb.y < 0  # under the plots, not between them
        assert dom[0] - 1e-9 <= cb.x - cb.len / 2 and cb.x + cb.len / 2 <= dom[1] + 1e-9  # within its own panel
