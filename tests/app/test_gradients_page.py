"""The Gradients page (issue 22, point 3) shows the numbers of classroom/gradients.py, and each
claim sits next to its measurement."""
from __future__ import annotations

import numpy as np

from classroom import gradients as G
from tests.helpers import app_test, decode, errors, figures


def open_gradients(**query):
    """The page, after its (background) training has finished: the first run shows the progress,
    the run after the job is done shows the results."""
    from ui import gradients as grad_ui
    at = app_test(default_timeout=300)
    for k, v in query.items():
        at.query_params[k] = str(v)
    at.run()
    at.switch_page("pages/gradients.py").run()
    assert not errors(at), errors(at)
    depth = int(query.get("grad_depth", grad_ui.DEFAULT_DEPTH))
    steps = int(query.get("grad_steps", grad_ui.STEPS))
    grad_ui.training_runs(steps=steps, depth=depth, variants=tuple(at.session_state["grad_runs"]))  # waits
    at.run()
    assert not errors(at), errors(at)
    return at


def test_gradients_page_shows_the_measurements():
    at = open_gradients()
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



def test_the_student_chooses_d_k_and_the_exploding_claim_is_measured():
    """Issue 34: "scaling keeps gradients alive" as an experiment the student controls (d_k, keys),
    with seed 004's "exploding" claim answered by a measurement: the gradient reaching the query
    vanishes for most queries (saturation), it does not explode."""
    at = open_gradients(grad_dk=512, grad_keys=8, grad_depth=2, grad_steps=50)
    ex = G.softmax_gradient_experiment(d_ks=tuple(sorted(set(G.DK_GRID) | {512})), n_keys=8)
    assert 512 in ex.d_k.tolist()
    near = {t["name"]: decode(t["y"]) for t in figures(at)[0]["data"]}
    np.testing.assert_allclose(near["unscaled q·k"], 100 * ex.unscaled.near_zero, rtol=1e-12)
    i = ex.d_k.tolist().index(512)
    text = " ".join(m.value for m in at.markdown)
    assert "Your d_k = 512, 8 keys" in text and "explode" in text and "vanishes" in text
    assert f"{100 * ex.unscaled.q_grad_dead[i]:.0f}% of the queries" in text
    assert ex.unscaled.q_grad_median[i] < 0.1 * ex.scaled.q_grad_median[i]  # vanishing, unscaled
    assert ex.unscaled.q_grad_dead[i] > 0.3 and ex.scaled.q_grad_dead[i] == 0.0


def test_query_gradient_is_the_chain_rule_through_the_softmax():
    """‖∂p/∂q‖ from J K · scale equals autograd through p = softmax(scale · K q) directly."""
    import torch
    g = torch.Generator().manual_seed(3)
    q = torch.randn(5, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(5, 6, 8, generator=g, dtype=torch.float64)
    scale = 0.35
    z = scale * torch.einsum("nkd,nd->nk", k, q)
    norms = G.query_gradient_norms(z.detach().numpy(), k.numpy(), scale)
    for n in range(5):
        jac = torch.autograd.functional.jacobian(lambda qq: torch.softmax(scale * k[n] @ qq, -1), q[n].detach())
        assert abs(float(jac.norm()) - norms[n]) < 1e-10


def test_depth_and_runs_are_the_students_choice():
    """Issue 34: "residuals and layer norm let depth train" with depth, runs and steps chosen on the
    page (not fixed runs): the page shows the runs trained with those settings."""
    at = open_gradients(grad_depth=3, grad_steps=50)
    from ui import gradients as grad_ui
    runs = grad_ui.training_runs(steps=50, depth=3)
    assert runs[0].grad_norms.shape == (50, 3)
    bars = {t["name"]: decode(t["y"]) for t in figures(at)[3]["data"]}
    for r in runs:
        np.testing.assert_allclose(bars[r.name], r.grad_norms.mean(axis=0))
    assert "(3 layers, d_model 32" in " ".join(m.value for m in at.markdown)
