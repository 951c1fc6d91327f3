"""A finished page lets its run go (issue 33, long inputs): Streamlit keeps a page's namespace
alive through the functions defined in it (a selectbox's format_func stays in the session's widget
state after the session has moved on), and with it the page's run: at SmolLM2's 1,024 tokens every
visited page kept a 2.5-2.9 GB trace and the server passed 11 GB in eight pages. After the page,
ui.runs.release_pages swaps each run the namespace holds for the same run without its trace, so
the shared trace cache alone decides which traces stay."""
import gc
import weakref

from tests.helpers import app_test, errors
from ui import runs, state


def test_a_visited_page_keeps_no_trace_alive():
    at = app_test(default_timeout=120)
    at.query_params["src"] = state.FRESH
    at.query_params["text"] = "a page that lets its trace go ."
    at.run()
    at.switch_page("pages/causal-vs-bidirectional.py").run()  # holds both runs in a selectbox's format_func
    assert not errors(at), errors(at)
    traces = [weakref.ref(v[0].trace) for v in runs.TRACES._items.values() if isinstance(v[0], runs.Run)]
    assert len(traces) >= 2
    at.switch_page("pages/scaling.py").run()
    assert not errors(at), errors(at)
    runs.TRACES.clear()  # the cache lets go: nothing else may hold them
    gc.collect()
    alive = [r for r in traces if r() is not None]
    assert not alive, f"{len(alive)} of {len(traces)} traces kept alive after the cache let them go"
    at.switch_page("pages/causal-vs-bidirectional.py").run()  # back: the page works (its selectbox included)
    assert not errors(at), errors(at)
    at.selectbox(key="cmp_head").set_value(0).run()  # its format_func reads the page's run again
    assert not errors(at), errors(at)


def test_release_pages_keeps_labels_and_drops_the_trace():
    g = {"__name__": "__main__"}  # a page script's namespace

    def page():
        exec("import ui.runs as R\nrun = R.get_run(SRC, 'the cat sat', True, 64)\nR.note_page(1)", g)

    from tests.app.test_heads_partial_trace import fresh_source
    g["SRC"] = fresh_source()
    page()
    run = g["run"]
    assert runs.release_pages() == 1
    assert g["run"].trace is None and g["run"].labels == run.labels and g["run"].ids == run.ids
    assert run.trace is not None  # the cached run itself is untouched
    assert runs.release_pages() == 0  # each script run's pages once


class _Held:
    """Something a page's namespace holds (weakly referable)."""


def test_released_namespaces_are_forgotten():
    """release_pages lets go of the namespaces it released: ui.runs keeps no page's namespace (nor
    what it holds) alive after the page, and a later script run does not touch it again."""
    from tests.app.test_heads_partial_trace import fresh_source
    g = {"__name__": "__main__", "SRC": fresh_source(), "held": _Held()}
    exec("import ui.runs as R\nrun = R.get_run(SRC, 'the dog sat', True, 64)\nR.note_page(1)", g)
    run = runs.get_run(g["SRC"], "the dog sat", True, 64)  # the cached run (trace kept by the cache)
    assert runs.release_pages() == 1 and g["run"].trace is None
    g["run"] = run  # the namespace holds a run with its trace again (not asked for in this script run)
    assert runs.release_pages() == 0 and g["run"].trace is not None
    held = weakref.ref(g["held"])
    del g
    gc.collect()
    assert held() is None, "a released page's namespace is still held"
