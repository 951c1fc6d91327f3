"""ui.show.shared_fig: a figure built once per (run, key, presentation mode) and shared by the sessions
showing that run (a live class's followers), never another run's or another key's figure; and the
heads page's grid is the same object for two sessions on one input, and their own for another layer."""
from __future__ import annotations

import gc

import plotly.graph_objects as go
import pytest
import streamlit as st

from tests.helpers import app_test, errors
from ui import show


class FakeRun:  # a stand-in for ui.runs.Run: shared_fig only needs its identity (and a weak reference)
    pass


@pytest.fixture
def builds():
    made: list[str] = []

    def build(title: str):
        def make() -> go.Figure:
            made.append(title)
            return go.Figure(layout={"title": {"text": title}, "margin": {"t": 40, "l": 40, "b": 40}})
        return make
    st.session_state["present"] = False
    yield made, build
    st.session_state["present"] = False


def test_one_build_per_run_and_key(builds):
    made, build = builds
    a, b = FakeRun(), FakeRun()
    f1 = show.shared_fig(a, ("grid", 0), build("a0"))
    assert show.shared_fig(a, ("grid", 0), build("a0 again")) is f1 and made == ["a0"]
    f2 = show.shared_fig(a, ("grid", 1), build("a1"))  # another key: its own figure
    f3 = show.shared_fig(b, ("grid", 0), build("b0"))  # another run, the same key: its own figure
    assert made == ["a0", "a1", "b0"]
    assert [f.layout.title.text for f in (f1, f2, f3)] == ["a0", "a1", "b0"]


def test_presentation_mode_has_its_own_figure_with_its_fonts_set_once(builds):
    made, build = builds
    run = FakeRun()
    plain = show.shared_fig(run, ("grid", 0), build("plain"))
    st.session_state["present"] = True
    big = show.shared_fig(run, ("grid", 0), build("big"))
    assert big is not plain and made == ["plain", "big"]
    assert big.layout.font.size == show.PRESENT_FONT_PX and plain.layout.font.size is None
    t = big.layout.margin.t
    assert show.shared_fig(run, ("grid", 0), build("big again")) is big and big.layout.margin.t == t


def test_entries_go_with_their_run(builds):
    made, build = builds
    run = FakeRun()
    show.shared_fig(run, ("grid", 0), build("x"))
    rid = id(run)
    del run
    gc.collect()
    other = FakeRun()
    show.shared_fig(other, ("other",), build("y"))  # a later call drops the freed runs' entries
    assert all(ref() is not None for ref, _ in show._shared.values())
    assert id(other) in show._shared and (rid not in show._shared or rid == id(other))


def grid_of(at):
    return next(c for c in at.get("plotly_chart") if c.proto.id and "heads_grid" in c.proto.id)


def test_heads_page_sessions_share_the_grid_only_for_the_same_view():
    a, b, c = app_test(), app_test(), app_test()
    for at in (a, b, c):
        at.run()
    c.selectbox(key="layer").set_value(1).run()
    for at in (a, b, c):
        assert not errors(at), errors(at)
    ga, gb, gc_ = (grid_of(at).proto.spec for at in (a, b, c))
    assert ga == gb  # one input, one layer: the same figure
    assert "Layer 0:" in ga and "Layer 1:" in gc_ and "Layer 0:" not in gc_
    b.sidebar.text_input(key="text").input("a different sentence here .").run()
    assert "different" in grid_of(b).proto.spec and "different" not in grid_of(a).proto.spec


def test_a_shared_figure_is_drawn_as_itself_and_measured_once(monkeypatch):
    """show_fig keeps a shared figure's phone width, description and dict for Streamlit on the figure
    (made once for every session drawing it): the chart sent is the figure's own JSON, and another
    figure (not shared) is measured at every draw."""
    import json

    import plotly.io as pio
    from streamlit.testing.v1 import AppTest

    calls: list[str] = []
    real = show.phone_min_width
    monkeypatch.setattr(show, "phone_min_width", lambda f: calls.append(f.layout.title.text) or real(f))

    def script():
        import plotly.graph_objects as go
        import streamlit as st

        from ui import show as sh
        st.session_state["present"] = False
        shared = st.session_state.get("fig")
        if shared is None:
            shared = go.Figure(go.Heatmap(z=[[0.25, 0.75], [1, 0]]), layout={"title": {"text": "shared"}})
            shared._attn_lab_shared = True
            st.session_state["fig"] = shared
        sh.show_fig(shared, "a", csv=False)
        sh.show_fig(go.Figure(go.Bar(y=[1, 2]), layout={"title": {"text": "own"}}), "b", csv=False)

    at = AppTest.from_function(script)
    at.run()
    at.run()
    assert not at.exception
    fig = at.session_state["fig"]
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert specs[0] == json.loads(pio.to_json(fig, validate=False))
    assert specs[1]["layout"]["title"]["text"] == "own"
    assert calls == ["shared", "own", "own"]  # the shared figure once, the other at each run
