"""Every page listed in app.PAGES that exists renders at the defaults: no exception, and at least
one chart or a clear message. Pages are discovered from app.py (read, not imported)."""
from __future__ import annotations

import pytest

from tests.helpers import ROOT, app_pages, app_test, errors, figures
from tests.helpers import all_text, open_page

PAGES = app_pages()


def test_the_attention_pages_are_listed():
    for p in ("pages/heads.py", "pages/overview.py", "pages/causal-vs-bidirectional.py", "pages/mask-lab.py"):
        assert p in PAGES


def test_every_page_file_is_named_like_its_url_path():
    """A deep link as a server process's first request is resolved by Streamlit's old pages/
    lookup, by file name, before app.py has run (ui/__init__.py): /mask-lab must be
    pages/mask-lab.py, or that user gets a "Page not found" dialog."""
    from pathlib import PurePosixPath

    from benchmarks.soak import app_constant
    entries = app_constant("PAGES")
    assert len(entries) == len(PAGES) >= 15
    wrong = [(file, url) for _, file, _, url, _ in entries if PurePosixPath(file).stem != url]
    assert wrong == [], wrong


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_at_defaults(page: str) -> None:
    at = app_test()
    at.run()
    at.switch_page(page).run()
    assert not errors(at), errors(at)
    n_charts = len(figures(at)) + len(at.get("vega_lite_chart")) + len(at.get("arrow_vega_lite_chart"))
    n_tables = len(at.dataframe) + len(at.table)  # e.g. a lesson step that starts with a table of numbers
    messages = [m.value for m in (*at.info, *at.warning, *at.success)]
    assert n_charts + n_tables >= 1 or messages, f"{page} shows neither a chart/table nor a message"
    assert not at.error, [e.value for e in at.error]


# URL round trip (issue 23): for every page that keeps settings in the link, change its controls
# (and one shared sidebar control), copy the link (the query params), open it in a fresh app and
# get the same view: same control values, same charts. {page: {widget key: new value}}.
ROUND_TRIP = {
    "pages/heads.py": {"layer": 1},
    "pages/overview.py": {},
    "pages/causal-vs-bidirectional.py": {"layer": 1, "cmp_head": 2},
    "pages/mask-lab.py": {"ml_s0": "a dog sat .", "ml_q": "keys and queries", "ml_head": 2, "layer": 1},
    "pages/scaling.py": {"sc_layer": 1, "sc_head": 2, "sc_query": 3, "sc_temp": 2.0},
    "pages/positional.py": {"pe_token": 3, "pe_dims_ms": [0, 1], "pe_shuffle": 5},
    "pages/layer-norm.py": {"ln_where": "layer 1 · ln2"},
    "pages/multi-head.py": {"mh_layer": 1, "mh_head": 3, "mh_token": 2},
    "pages/ffn-output.py": {"ffn_layer": 1, "ffn_k": 3, "emb_word": "red"},
    "pages/contextual.py": {"ctx_b": "an apple a day ."},
    "pages/cost.py": {"cost_tmax": 1024},
    "pages/flash.py": {"flash_tile": 3, "flash_step": 2, "flash_mem_tile": 128},
    "pages/encoder-decoder.py": {"s2s_layer": 0, "s2s_head": 2, "s2s_step": 3},
    "pages/calculator.py": {"preset": "pe-d4", "search_food": 1.5},
    "pages/lesson.py": {"lesson_head": 2, "lesson_query": 3},
    "pages/experts.py": {"ex_model": "smollm2-135m"},
    "pages/generate.py": {"gen_prompt": "a dog ran to the", "gen_max": 8, "gen_strategy": "sample"},
    "pages/variants.py": {"var_window": 2, "var_kv": 1, "var_shuffle": 4},
    "pages/kv-cache.py": {"kv_preset": "GPT-2 small", "kv_context": 4096, "kv_window": 1024, "kv_gqa": 4},
    # issue 33: the chosen heads and the model view's token never reached the link
    "pages/intervene.py": {"iv_heads": ["L0 H1", "L1 H2"], "iv_mode": "mean", "iv_layer": 0, "iv_how": "flow",
                           "iv_tok": 2},
    "pages/model-view.py": {"mv_tok": 3, "mv_layer": 1},
    "pages/circuits.py": {"circ_sink_layer": 0, "circ_sink_head": 3},
    "pages/attribution.py": {"attr_pair": "Fact (subject swapped)", "attr_head": "L1 H2"},
    "pages/gradients.py": {"grad_dk": 64, "grad_keys": 8, "grad_depth": 3},
}
WIDGET_KINDS = ("selectbox", "radio", "slider", "select_slider", "number_input", "text_input",
                "text_area", "multiselect", "checkbox", "toggle")


def widget(at, key):
    for kind in WIDGET_KINDS:
        found = [w for w in at.get(kind) if w.key == key]
        if found:
            return found[0]
    raise AssertionError(f"no widget with key {key!r}")


def test_round_trip_covers_every_page_with_link_settings():
    with_links = {p for p in PAGES if "state.bound(" in (ROOT / p).read_text()}
    with_links |= {"pages/calculator.py"}  # its controls are bound in ui/calculator.py
    assert len(with_links) >= 13 and with_links <= set(ROUND_TRIP), with_links - set(ROUND_TRIP)


@pytest.mark.parametrize("page", list(ROUND_TRIP))
def test_url_round_trip_gives_the_same_view(page: str) -> None:
    at = app_test()
    at.run()
    at.switch_page(page).run()
    at.sidebar.radio(key="mask").set_value("bidirectional").run()
    for key, value in ROUND_TRIP[page].items():
        widget(at, key).set_value(value).run()
        assert not errors(at), (key, errors(at))
    params = dict(at.query_params)
    assert params.get("mask") == "bidirectional"
    bound = [k for k in at.session_state if k in params]
    for key in ROUND_TRIP[page]:
        assert (key if key in params else key.removesuffix("_ms")) in params, (key, params)

    fresh = app_test()  # a new session opening the copied link
    for k, v in params.items():
        fresh.query_params[k] = v
    fresh.run()
    fresh.switch_page(page).run()
    assert not errors(fresh), errors(fresh)
    assert not [w.value for w in fresh.warning if "link" in w.value.lower()]
    for key in ROUND_TRIP[page]:
        assert widget(fresh, key).value == widget(at, key).value, key
    for key in bound:
        assert fresh.session_state[key] == at.session_state[key], key
    assert dict(fresh.query_params) == params
    before, after = figures(at), figures(fresh)
    assert len(before) == len(after)
    assert before == after  # same chart data and layout


def test_no_page_points_to_notes_the_student_does_not_have():
    """'Pages refer to "notes 001/004" and "the handwritten notes"'."""
    for page, query in (("pages/lesson.py", {}), ("pages/lesson.py", {"lesson_step": "4"}),
                        ("pages/encoder-decoder.py", {}), ("pages/positional.py", {}), ("pages/scaling.py", {})):
        at = open_page(page, **query)
        text = all_text(at)
        assert "notes 00" not in text.lower() and "handwritten" not in text.lower(), page
