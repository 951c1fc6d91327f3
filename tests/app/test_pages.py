"""Every page listed in app.PAGES that exists renders at the defaults: no exception, and at least
one chart or a clear message. Pages are discovered from app.py (read, not imported)."""
from __future__ import annotations

import pytest

from tests.helpers import app_pages, app_test, errors, figures

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
