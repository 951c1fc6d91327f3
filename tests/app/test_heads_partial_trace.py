"""The heads page traces the layer it shows and nothing more (issue 31: a SmolLM2 class at layer 0
runs one block of 30 per keystroke, and keeps one layer of 30 at any layer): a partial trace
(stopped_after, recorded_from) unless the whole trace is already cached; its numbers are the whole
pass's, and the .npz button still exports the whole trace."""
import io
import json
import threading

import numpy as np

from model.config import ModelConfig
from tests.helpers import app_test, errors, figures, decode
from ui import models, runs, show, state


def fresh_source(L: int = 3, max_len: int = state.T_MAX) -> models.ModelSource:
    cfg = ModelConfig(vocab_size=len(models.fresh_tokenizer()), d_model=64, n_heads=4, n_layers=L, max_len=max_len)
    return models.ModelSource("fresh", "fresh", json.dumps(cfg.to_dict(), sort_keys=True), 0)


LONG_TEXT = " ".join(["the cat sat on the mat ."] * 130)  # 900+ tokens


def spy_get_run(monkeypatch, record) -> list:
    """Replace ui.runs.get_run by a spy: the list it returns gets record(causal, layer) per call."""
    asked = []
    real = runs.get_run

    def spy(source, text, causal, max_len, layer=None):
        asked.append(record(causal, layer))
        return real(source, text, causal, max_len, layer)

    monkeypatch.setattr(runs, "get_run", spy)
    return asked


def long_input_app():
    """An AppTest of fresh weights deep enough (10 layers) and an input long enough (LONG_TEXT, the
    1,024 context) for a whole pass to count as long (ui.runs.is_long_pass); the trace cache emptied."""
    runs.TRACES.clear()
    at = app_test(default_timeout=120)
    for k, v in {"src": state.FRESH, "L": "10", "d": "32", "ctx": "1024", "T": "1024", "text": LONG_TEXT}.items():
        at.query_params[k] = v
    return at


def test_get_run_of_one_layer_is_partial_unless_the_whole_trace_is_cached():
    src, text = fresh_source(), "a partial trace for the heads page ."
    runs.TRACES.clear()
    part = runs.get_run(src, text, True, 64, layer=0)
    assert part.trace.stopped_after == 0 and len(part.trace.layers) == 1 and not part.trace.complete
    assert runs.get_run(src, text, True, 64, layer=0) is part  # cached apart
    mid = runs.get_run(src, text, True, 64, layer=1)  # layer 1 alone: layer 0 run, not kept
    assert mid.trace.stopped_after == 1 and mid.trace.recorded_from == 1 and mid.trace.layers[0] is None
    last = runs.get_run(src, text, True, 64, layer=2)  # the last: the whole pass, one layer kept
    assert last.trace.stopped_after is None and last.trace.layers[:2] == (None, None) and not last.trace.complete
    whole = runs.get_run(src, text, True, 64)
    assert whole.trace.complete and whole is not last
    assert runs.get_run(src, text, True, 64, layer=0) is whole  # cached whole: served for any layer
    for lay, r in ((0, part), (1, mid), (2, last)):  # the same numbers as the whole pass's
        np.testing.assert_array_equal(r.trace.layers[lay].attn.weights, whole.trace.layers[lay].attn.weights)
        np.testing.assert_array_equal(r.trace.layers[lay].resid_out, whole.trace.layers[lay].resid_out)


def test_the_npz_of_a_partial_run_is_the_whole_trace(monkeypatch):
    made = {}
    monkeypatch.setattr(show.st, "download_button", lambda label, data, **kw: made.setdefault("data", data))
    src = fresh_source()
    part = runs._run(src, "the cat sat on the mat", True, 64, (1, 1))
    whole = runs._run(src, "the cat sat on the mat", True, 64)
    show.download_npz(part)
    got = np.load(io.BytesIO(made["data"]()))
    want = np.load(io.BytesIO(show.trace_npz(whole.trace, **whole.export_extras())))
    assert "layers.2.attn.weights" in got.files and "final" in got.files
    assert set(got.files) == set(want.files) and all(np.array_equal(got[k], want[k]) for k in want.files)


def test_the_heads_page_asks_for_its_layer_only(monkeypatch):
    real = runs.get_run
    asked = spy_get_run(monkeypatch, lambda causal, layer: layer)
    at = app_test()
    at.query_params["src"] = state.FRESH
    at.query_params["L"] = "3"
    at.query_params["layer"] = "1"
    at.query_params["text"] = "the heads page at layer one ."
    at.run()
    assert not errors(at), errors(at)
    assert asked and set(asked) == {1}
    grid = figures(at)[0]
    # the grid shows layer 1 of the whole pass
    z = [decode(t["z"]) for t in grid["data"] if t["type"] == "heatmap"]
    whole = real(at_source(at), "the heads page at layer one .", True, int(at.session_state["T"]))
    w = whole.trace.layers[1].attn.weights[0]  # (H, T, T)
    assert len(z) == w.shape[0]
    for h, zh in enumerate(z):
        np.testing.assert_allclose(np.nan_to_num(zh, nan=0.0), np.where(np.isnan(zh), 0.0, w[h]), atol=1e-6)


def at_source(at) -> models.ModelSource:
    """The session's model source, as the page saw it (the fresh model of the URL's L)."""
    cfg = ModelConfig(vocab_size=len(models.fresh_tokenizer()), d_model=int(at.session_state["d"]),
                      n_heads=int(at.session_state["h"]), n_layers=3, max_len=state.T_MAX)
    return models.ModelSource("fresh", "fresh", json.dumps(cfg.to_dict(), sort_keys=True), 0)


def test_cost_and_flash_ask_for_one_layer(monkeypatch):
    """The cost page reads the run's length and model (a trace of block 0 is enough); the flash page
    walks one head of one layer: neither traces the whole pass at a long input (issue 33: SmolLM2 at
    1,024 tokens, 2.4 s per whole trace)."""
    asked = spy_get_run(monkeypatch, lambda causal, layer: layer)
    runs.TRACES.clear()
    at = app_test()
    at.query_params["src"] = state.FRESH
    at.query_params["L"] = "3"
    at.query_params["text"] = "cost and flash read one layer ."
    at.switch_page("pages/cost.py").run()
    assert not errors(at), errors(at)
    assert asked and set(asked) == {0}
    asked.clear()
    at.query_params["flash_layer"] = "2"
    at.switch_page("pages/flash.py").run()
    assert not errors(at), errors(at)
    assert asked and set(asked) == {2}
    asked.clear()
    at.selectbox(key="flash_layer").set_value(1).run()
    assert not errors(at), errors(at)
    assert asked and set(asked) == {1}
    assert any(isinstance(v[0], runs.Run) and not v[0].trace.complete for v in runs.TRACES._items.values())


def test_overview_and_model_view_trace_the_page_of_layers_they_draw(monkeypatch):
    """A deep model at a long input: the overview (which then labels the shown layers only) and the
    model view trace the layer group they draw, not the whole pass (issue 33: SmolLM2 at 1,024
    tokens, 2.4 s per whole trace); a short input still labels every head from the whole trace."""
    asked = spy_get_run(monkeypatch, lambda causal, layer: layer)
    at = long_input_app()
    at.switch_page("pages/overview.py").run()
    assert not errors(at), errors(at)
    assert asked and set(asked) == {range(0, 6)}, asked
    assert any(isinstance(v[0], runs.Run) and v[0].trace.stopped_after == 5 for v in runs.TRACES._items.values())
    asked.clear()
    at.switch_page("pages/model-view.py").run()
    assert not errors(at), errors(at)
    assert asked and set(asked) == {range(0, 6)}, asked
    asked.clear()
    at.selectbox(key="mv_layer").set_value(8).run()  # the section below the grid: layers 0-5 and 8
    assert not errors(at), errors(at)
    assert asked and set(asked) == {range(0, 9)}, asked
    asked.clear()
    at.query_params["text"] = "a short sentence ."
    at.text_input(key="text").set_value("a short sentence .").run()
    at.switch_page("pages/overview.py").run()
    assert not errors(at), errors(at)
    assert None in asked  # short: every head labelled, from the whole trace


def test_causal_vs_bidirectional_at_a_long_input_waits_for_a_click_for_the_whole_passes(monkeypatch):
    asked = spy_get_run(monkeypatch, lambda causal, layer: (causal, layer))
    at = long_input_app()
    at.query_params["layer"] = "3"
    at.switch_page("pages/causal-vs-bidirectional.py").run()
    assert not errors(at), errors(at)
    assert set(asked) == {(True, 3), (False, 3)}, asked
    assert not any("Total variation distance" in c.value for c in at.caption)
    toggle = at.toggle(key="cvb_whole")
    assert toggle.value is False and "all 10 layers" in toggle.label
    asked.clear()
    toggle.set_value(True).run()
    assert not errors(at), errors(at)
    assert {(True, None), (False, None)} <= set(asked), asked
    assert any("Total variation distance" in c.value for c in at.caption)


def test_a_long_partial_run_prefetches_the_whole_trace():
    """Served a partial run of a long input on a deep model, the server traces the whole pass in the
    background, once, so the next page that needs every layer finds it cached; a short input does not."""
    def join_prefetch() -> None:
        for t in [t for t in threading.enumerate() if t.name == "trace-prefetch"]:
            t.join(timeout=120)

    join_prefetch()  # one left running by an earlier test (its long input) would hold the one slot
    src = fresh_source(L=10, max_len=1024)
    long_text = LONG_TEXT
    runs.TRACES.clear()
    short = runs.get_run(src, "a short sentence .", True, 1024, layer=0)
    assert runs.whole_pass_cost(short.cfg, short.T) <= runs.PREFETCH_ABOVE
    assert not [t for t in threading.enumerate() if t.name == "trace-prefetch"]
    part = runs.get_run(src, long_text, True, 1024, layer=range(0, 6))
    assert not part.trace.complete and runs.whole_pass_cost(part.cfg, part.T) > runs.PREFETCH_ABOVE
    join_prefetch()
    key = ("run", src, long_text, True, 1024)
    assert key in runs.TRACES and ("run", src, "a short sentence .", True, 1024) not in runs.TRACES
    whole = runs.get_run(src, long_text, True, 1024, layer=3)  # now served from the whole trace
    assert whole.trace.complete
    np.testing.assert_array_equal(whole.trace.layers[2].attn.weights, part.trace.layers[2].attn.weights)
    assert runs.prefetch_whole(src, long_text, True, 1024) is False  # cached: nothing to do
