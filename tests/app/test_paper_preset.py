"""Issue 22, point 1: the sidebar's "2017 paper (base)" preset sets the architecture widgets, the
model built is the paper's configuration, and every page renders at that size."""
from __future__ import annotations

import pytest

from model.config import PRESETS
from tests.helpers import app_pages, app_test, errors
from ui import state

PAGES = app_pages()


def preset_app():
    at = app_test(default_timeout=120)
    at.query_params["src"] = state.FRESH
    at.run()
    at.sidebar.button(key="preset_2017").click().run()
    return at


def test_preset_sets_the_architecture_widgets_and_the_url():
    at = preset_app()
    assert not errors(at), errors(at)
    s = at.session_state
    p = PRESETS["vaswani-base"]
    assert (s["d"], s["h"], s["L"], s["pe"], s["norm"], s["act"], s["dv"]) == \
        (p.d_model, p.n_heads, p.n_layers, p.pos_encoding, p.norm, p.activation, 0) == \
        (512, 8, 6, "sinusoidal", "post", "relu", 0)
    q = dict(at.query_params)
    assert {k: (v[0] if isinstance(v, list) else v) for k, v in q.items() if k in ("d", "h", "L", "norm", "act")} == \
        {"d": "512", "h": "8", "L": "6", "norm": "post", "act": "relu"}
    # the model the pages see: the paper's shapes (multi-head page states them from the run's config)
    at.switch_page("pages/multi-head.py").run()
    cap = " ".join(c.value for c in at.caption)
    assert "d_model = 512" in cap and "h = 8 heads" in cap and "= 64" in cap, cap
    shape = at.dataframe[0].value
    assert "11 × 64" in list(shape["shape"]), shape  # Q_j, K_j, V_j: T × d_k with d_k = 64


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_with_the_2017_preset(page: str) -> None:
    at = preset_app()
    at.switch_page(page).run()
    assert not errors(at), errors(at)
    assert not at.error, [e.value for e in at.error]
