"""The only Streamlit-aware helpers: shared controls and URL state, cached compute, display."""
import streamlit as st


def _use_router() -> None:
    """Streamlit treats an app with a pages/ folder as an old-style (MPA v1) app until app.py has
    called st.navigation once in this server process. A deep link (/mask-lab?...) as the very
    first request would then run pages/mask-lab.py alone, without app.py's sidebar and state, and
    fail. Every page imports ui, so this runs first: record that app.py routes with
    st.navigation (as st.navigation itself does) and rerun on the same URL path and query, which
    runs app.py, whose st.navigation then resolves the page by its URL path.

    MPA v1 finds a page by its file name, so every page's file is named like its URL path
    (pages/mask-lab.py for /mask-lab; tests/app/test_pages.py checks it). Otherwise that first
    request would show Streamlit's "Page not found" dialog before this code ever runs."""
    # Streamlit internals, imported inside the function: this runs once, at the first import of ui,
    # and a release that moves them only skips this fix (ImportError below), never the app.
    try:
        from streamlit.runtime.pages_manager import PagesManager
        from streamlit.runtime.scriptrunner import get_script_run_ctx
    except ImportError:  # pragma: no cover - other Streamlit layouts
        return
    ctx = get_script_run_ctx()
    if not PagesManager.uses_pages_directory or ctx is None:
        return
    PagesManager.uses_pages_directory = False
    try:
        from streamlit.runtime.scriptrunner_utils.exceptions import RerunException
        from streamlit.runtime.scriptrunner_utils.script_requests import RerunData
        pm = ctx.pages_manager
        name = pm.intended_page_name or ""
        if not name:
            info = (pm.get_pages() or {}).get(ctx.page_script_hash) or {}
            name = info.get("url_pathname", "")
        data = RerunData(query_string=ctx.query_string, page_name=name, context_info=ctx.context_info)
    except Exception:  # private API changed: a plain rerun still fixes the routing
        st.rerun()
    raise RerunException(data)


_use_router()
