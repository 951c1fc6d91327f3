"""Attention Lab: the router. Shared sidebar controls, then st.navigation over the pages."""
from __future__ import annotations

import time
from pathlib import Path

import streamlit as st

# A presentation link (?present=true) opens with the sidebar folded; Streamlit's arrow unfolds it.
st.set_page_config(page_title="Attention Lab", page_icon="🔍", layout="wide",
                   initial_sidebar_state="collapsed" if st.query_params.get("present", "").lower() in ("1", "true")
                   else "auto")

# numpy and pandas are imported first, whole: on a fresh server several sessions' first runs start
# at once (every tab reconnecting after a restart), and plotly's validators look numpy and pandas up
# in sys.modules without importing them, so a chart drawn while another session's thread is still
# importing them met a half-initialised numpy ("module 'numpy' has no attribute 'ndarray'"). An
# import waits for another thread's import of the same module to finish; a sys.modules look-up does not.
import numpy  # noqa: E402,F401
import pandas  # noqa: E402,F401

# A session's first run draws an empty 10-pixel Plotly chart here, before torch is imported and a
# model is loaded, so the browser fetches and compiles plotly.js (~3 s in headless Chromium on this
# machine) while the server is still working; the placeholder is emptied when the run ends. Later
# runs keep the (empty) placeholder, so the page's elements keep their places.
_prefetch = st.empty()
if not st.session_state.get("_plotly_prefetched"):
    st.session_state["_plotly_prefetched"] = True
    _prefetch.plotly_chart({"data": [{"type": "scatter", "x": [0], "y": [0], "mode": "markers", "marker": {"opacity": 0},
                                      "hoverinfo": "skip"}],
                            "layout": {"height": 10, "margin": {"l": 0, "r": 0, "t": 0, "b": 0},
                                       "xaxis": {"visible": False}, "yaxis": {"visible": False}}},
                           key="_plotly_prefetch", config={"staticPlot": True, "displayModeBar": False})
    # let the server's event loop send it now: importing torch (next line, on a fresh server) holds
    # the GIL for seconds at a time, and the chart would reach the browser only after it
    time.sleep(0.1)

from ui import runtime  # noqa: E402,F401  torch thread settings for a multi-user server (see ui/runtime.py)
from ui import live, runs, sidebar, state  # noqa: E402  (after set_page_config)

ROOT = Path(__file__).resolve().parent

# (section, file, title, url_path, icon). A page file that does not exist yet is skipped.
# Icons are Material Symbols (bundled with Streamlit): emoji render as boxes in some browsers.
PAGES = [
    ("Attention", "pages/heads.py", "Attention heads", "heads", ":material/grid_view:"),
    ("Attention", "pages/overview.py", "All heads overview", "overview", ":material/apps:"),
    ("Attention", "pages/causal-vs-bidirectional.py", "Causal vs bidirectional", "causal-vs-bidirectional",
     ":material/compare_arrows:"),
    ("Attention", "pages/mask-lab.py", "Mask lab", "mask-lab", ":material/masks:"),
    ("Attention", "pages/experts.py", "Heads as experts", "experts", ":material/psychology:"),
    ("Attention", "pages/model-view.py", "Model view (lines)", "model-view", ":material/timeline:"),
    ("Attention", "pages/intervene.py", "Intervene: switch heads off", "intervene", ":material/toggle_off:"),
    ("Attention", "pages/circuits.py", "Circuits: sinks, induction, lens", "circuits", ":material/cable:"),
    ("Attention", "pages/attribution.py", "Why this token?", "attribution", ":material/help:"),
    ("Concepts", "pages/scaling.py", "Scaling & softmax", "scaling", ":material/straighten:"),
    ("Concepts", "pages/positional.py", "Positional encoding", "positional", ":material/waves:"),
    ("Concepts", "pages/layer-norm.py", "Layer norm & residuals", "layer-norm", ":material/balance:"),
    ("Concepts", "pages/multi-head.py", "Multi-head mechanics", "multi-head", ":material/view_module:"),
    ("Concepts", "pages/ffn-output.py", "FFN & output layer", "ffn-output", ":material/output:"),
    ("Concepts", "pages/contextual.py", "Contextual embeddings", "contextual", ":material/hub:"),
    ("Concepts", "pages/cost.py", "Cost of attention", "cost", ":material/timer:"),
    ("Concepts", "pages/flash.py", "Tiled attention (FlashAttention)", "flash", ":material/view_week:"),
    ("Concepts", "pages/variants.py", "Attention variants", "variants", ":material/alt_route:"),
    ("Concepts", "pages/kv-cache.py", "KV-cache calculator", "kv-cache", ":material/memory:"),
    ("Concepts", "pages/gradients.py", "Gradients you can see", "gradients", ":material/trending_down:"),
    ("Models", "pages/flow.py", "The whole model", "flow", ":material/account_tree:"),
    ("Models", "pages/encoder-decoder.py", "Encoder–decoder", "encoder-decoder", ":material/sync_alt:"),
    ("Models", "pages/generate.py", "Generate text", "generate", ":material/edit_note:"),
    ("Models", "pages/train.py", "Train a model", "train", ":material/model_training:"),
    ("Classroom", "pages/calculator.py", "Calculator", "calculator", ":material/calculate:"),
    ("Classroom", "pages/lesson.py", "Lesson mode", "lesson", ":material/school:"),
]


DEFAULT_URL = "heads"  # the page that opens at "/"


def navigation_pages() -> dict[str, list]:
    """{section: [st.Page]}, built once per session: building all 15 (each resolves and stats its
    file) was ~5% of a heads-page rerun under load. Per session, never shared between sessions:
    st.navigation marks the page it runs on the object itself.

    Streamlit serves the default page at "/" only; "/heads" typed by hand would show "Page not
    found". So the default page gets an internal url_path, and a hidden page at "/heads" switches
    to it with the same query (the URL then reads "/?...")."""
    nav: dict[str, list] = {}
    for section, file, title, url, icon in PAGES:
        if (ROOT / file).exists():
            default = url == DEFAULT_URL
            page = st.Page(file, title=title, url_path=f"_{url}" if default else url, icon=icon, default=default)
            nav.setdefault(section, []).append(page)
            if default:
                nav[section].append(st.Page(switch_to(page), title=title, url_path=url, icon=icon,
                                            visibility="hidden"))
    return nav


def switch_to(page):
    """The body of an alias page: go to `page`, keeping the link's query (its settings)."""
    def alias() -> None:
        st.switch_page(page, query_params=st.query_params.to_dict())
    return alias


if "_nav_pages" not in st.session_state:
    st.session_state["_nav_pages"] = navigation_pages()
nav = st.session_state["_nav_pages"]

live.begin_run()  # a live class: ?room= joins; a follower takes the lecturer's view (ui/live.py)
state.begin_run()
sidebar.render()
pg = st.navigation(nav, expanded=True)  # every page listed on first load (no "View 8 more")
live.page_chosen(pg, nav)  # a follower moves to the lecturer's page
try:
    pg.run()
except state.PageEnd:  # a page ended early (state.end_page): what follows still reaches the browser
    pass
finally:
    state.sync_url()
    live.end_run()  # the lecturer's view goes to the room; a follower who changed it explores alone
    _prefetch.empty()
    runs.release_pages()  # the page's namespace outlives it (widgets' functions): its runs go (ui/runs.py)
