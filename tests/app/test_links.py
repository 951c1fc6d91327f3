"""Links that keep the view (issue 33): a sentence over URL_TEXT_CHARS travels compressed (text.z),
the model view's layer group on a deep model is in the link, and what cannot travel says so.
(The per-page round trips, Intervene's heads and the model view's token included, are in
test_pages.py's ROUND_TRIP.)"""
from __future__ import annotations

import random

import pytest

from tests.helpers import app_test, errors, figures
from ui import state

# a paragraph as a lecturer pastes it: ~4,000 characters of English
WORDS = ("the keys to the cabinet are on the table and a dog ran to the park while the cat sat on "
         "the mat because it was tired of attention heads that look at the previous token").split()
LONG = " ".join(random.Random(5).choice(WORDS) for _ in range(800))


def _open(query: dict, page: str = "pages/heads.py"):
    at = app_test(default_timeout=180)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(page).run()
    assert not errors(at), errors(at)
    return at


def test_zip_text_round_trips_and_refuses_what_is_not_one():
    for text in ["", "a", LONG, "注意力机制 🙂 שלום" * 50, "x" * state.MAX_TEXT_CHARS]:
        z = state.zip_text(text)
        assert set(z) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")  # nothing to escape
        assert state.unzip_text(z) == text
    assert len(state.zip_text(LONG)) < len(LONG) / 2
    for bad in ["%%%", "abc", state.zip_text("x" * (4 * state.MAX_TEXT_CHARS + 1)), state.zip_text(LONG)[:-8]]:
        with pytest.raises(ValueError):
            state.unzip_text(bad)


def test_a_long_sentence_reaches_the_link_and_comes_back():
    """Over 1,500 characters the sentence never reached the URL: a shared link showed the default."""
    assert len(LONG) > state.URL_TEXT_CHARS
    at = app_test()
    at.run()
    at.sidebar.text_input(key="text").input(LONG).run()
    assert not errors(at), errors(at)
    params = dict(at.query_params)
    assert "text" not in params and state.unzip_text(params["text" + state.ZIPPED]) == LONG
    assert len(params["text" + state.ZIPPED]) <= state.URL_ZIPPED_CHARS
    fresh = _open(params)  # the copied link in a new session
    assert fresh.session_state["text"] == LONG
    assert fresh.sidebar.text_input(key="text").value == LONG
    assert figures(fresh) == figures(at)
    assert not [w for w in fresh.warning if "link" in str(w.value).lower()]
    # a short sentence again: the compressed one leaves the link
    at.sidebar.text_input(key="text").input("a dog ran .").run()
    assert dict(at.query_params).get("text") == "a dog ran ." and "text" + state.ZIPPED not in at.query_params


def test_a_text_too_long_for_any_link_says_so():
    rng = random.Random(1)
    noise = "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(state.MAX_TEXT_CHARS))  # does not compress
    at = app_test()
    at.run()
    at.sidebar.text_input(key="text").input(noise).run()
    assert not errors(at), errors(at)
    assert "text" not in at.query_params and "text" + state.ZIPPED not in at.query_params
    assert any("too long for a link" in str(c.value) for c in at.sidebar.caption)
    at.sidebar.text_input(key="text").input(LONG).run()
    assert not any("too long for a link" in str(c.value) for c in at.sidebar.caption)


def test_a_broken_compressed_link_falls_back_with_a_notice():
    at = app_test()
    at.query_params["text" + state.ZIPPED] = "not-a-text"
    at.run()
    assert not errors(at), errors(at)
    assert at.session_state["text"] == state.DEFAULT_TEXT
    assert any("text.z" in str(w.value) for w in at.sidebar.warning)


@pytest.mark.slow
def test_the_model_views_layer_group_on_a_deep_model_is_in_the_link():
    from model.pretrained import PRETRAINED
    if not PRETRAINED["smollm2-135m"].installed():
        pytest.skip(f"SKIPPED LOUDLY: {PRETRAINED['smollm2-135m'].package} is not installed")
    at = _open({"src": "smollm2-135m"}, "pages/model-view.py")
    at.get("button_group")[0].set_value("layers 12–17").run()
    at.selectbox(key="mv_tok").set_value(4).run()
    assert not errors(at), errors(at)
    params = dict(at.query_params)
    assert params.get("mv_layers") == "layers 12–17" and params.get("mv_tok") == "4"
    fresh = _open(params, "pages/model-view.py")
    assert fresh.session_state["mv_layers"] == "layers 12–17" and fresh.session_state["mv_tok"] == 4
    grid = [str(h.proto) for h in fresh.get("html") if "mv-grid" in str(h.proto)]
    assert grid and "layer 12<" in grid[0] and "layer 17<" in grid[0] and "layer 0<" not in grid[0]
