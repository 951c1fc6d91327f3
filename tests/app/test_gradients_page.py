"""The Gradients page (issue 22, point 3) shows the numbers of classroom/gradients.py, and each
claim sits next to its measurement."""
from __future__ import annotations

import numpy as np

from classroom import gradients as G
from tests.helpers import app_test, decode, errors, figures


def test_gradients_page_shows_the_measurements():
    at = app_test(default_timeout=300)
    at.run()
    at.switch_page("pages/gradients.py").run()
    assert not errors(at), errors(at)
    figs = figures(at)
    assert len(figs) == 4
    ex = G.softmax_gradient_experiment()
    near = {t["name"]: decode(t["y"]) for t in figs[0]["data"]}
    np.testing.assert_allclose(near["unscaled q·k"], 100 * ex.unscaled.near_zero, rtol=1e-12)
    np.testing.assert_allclose(near["scaled q·k / √d_k"], 100 * ex.scaled.near_zero, rtol=1e-12)
    norm = {t["name"]: decode(t["y"]) for t in figs[1]["data"]}
    np.testing.assert_allclose(norm["unscaled q·k"], ex.unscaled.norm, rtol=1e-12)

    from ui import gradients as grad_ui
    runs = grad_ui.training_runs()  # the stored result the page drew (same process)
    losses = {t["name"]: decode(t["y"]) for t in figs[2]["data"]}
    assert set(losses) == set(G.VARIANTS)
    for r in runs:
        np.testing.assert_allclose(losses[r.name], r.losses)
    bars = {t["name"]: decode(t["y"]) for t in figs[3]["data"]}
    for r in runs:
        np.testing.assert_allclose(bars[r.name], r.grad_norms.mean(axis=0))
    text = " ".join(m.value for m in at.markdown)
    rows = {r.run: r for r in G.summarize(runs)}
    assert "Residuals let gradients flow through depth" in text and "Layer norm stabilises training" in text
    assert f"{rows['no residual'].first_over_last:.3f}×" in text
    assert f"{rows['no layer norm'].first_loss:.1f}" in text
    table = next(d.value for d in at.dataframe if "first loss" in d.value.columns)
    assert list(table.columns) == ["first loss", "largest loss", "mean loss, last 20 steps", "grad norm, block 0",
                                   "grad norm, last block", "block 0 ÷ last block"] and table.index.name == "run"
    for name, r in rows.items():
        np.testing.assert_allclose(table.loc[name].to_numpy(), [r.first_loss, r.largest_loss, r.mean_loss_last,
                                                                r.grad_norm_first, r.grad_norm_last, r.first_over_last])
    assert "Scaling keeps gradients alive" in " ".join(s.value for s in at.subheader)
