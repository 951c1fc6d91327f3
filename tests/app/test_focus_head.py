"""The focused head (focus=L.H): drawn large above the grid on the heads and overview pages, with
the engine's weights of that layer and head, kept in the URL, set by the select or a head's button."""
from __future__ import annotations

import numpy as np
import pytest

from tests.app.test_attention_pages import check_grid, engine, masked, start
from tests.helpers import decode, errors, figures


def focus_fig(at):
    figs = [f for f in figures(at) if "Focused: layer" in str((f["layout"].get("title") or {}).get("text", ""))]
    return figs


@pytest.mark.parametrize("page", ["pages/heads.py", "pages/overview.py"])
def test_focus_from_the_link_draws_that_head_first(page):
    at = start(page, focus="1.2")
    assert at.session_state["focus"] == "1.2"
    first = figures(at)[0]
    assert "Focused: layer 1, head 2" in first["layout"]["title"]["text"]
    tr, labels = engine()
    w = tr.layers[1].attn.weights[0, 2].numpy()  # (T, T)
    (heat,) = [t for t in first["data"] if t["type"] == "heatmap"]
    T = w.shape[0]
    np.testing.assert_allclose(decode(heat["z"]), masked(w, np.tril(np.ones((T, T), bool))), rtol=1e-5, atol=1e-6)
    assert list(heat["y"]) == list(heat["x"]) and len(heat["x"]) == T  # every token's label, both axes
    assert dict(at.query_params)["focus"] == "1.2"


def test_heads_page_focus_of_another_layer_keeps_the_grid():
    at = start(focus="1.3")  # the grid shows layer 0
    figs = figures(at)
    assert "layer 1, head 3" in figs[0]["layout"]["title"]["text"]
    check_grid(figs[1], engine()[0], 0, True)


def test_select_and_head_buttons_set_and_clear_the_focus():
    at = start()
    assert not focus_fig(at) and "focus" not in dict(at.query_params)
    at.selectbox(key="focus").set_value("0.1").run()
    assert dict(at.query_params)["focus"] == "0.1" and len(focus_fig(at)) == 1
    at.selectbox(key="layer").set_value(1).run()
    at.button_group(key="focus_pick").set_value("1.3").run()  # a click on layer 1's "head 3" button
    assert not errors(at) and at.session_state["focus"] == "1.3"
    assert "layer 1, head 3" in focus_fig(at)[0]["layout"]["title"]["text"]
    assert dict(at.query_params)["focus"] == "1.3"
    at.button_group(key="focus_pick").set_value(None).run()  # clicked again: no focus
    assert at.session_state["focus"] == "" and not focus_fig(at) and "focus" not in dict(at.query_params)


@pytest.mark.parametrize("raw", ["7.0", "0.9", "x", "1.2.3", "-1.0"])
def test_a_focus_the_model_lacks_falls_back_with_a_notice(raw):
    at = start(focus=raw)  # 2 layers x 4 heads
    assert at.session_state["focus"] == ""
    assert not focus_fig(at)
    notes = " ".join(w.value for w in at.warning)
    assert "focus=" in notes, notes
