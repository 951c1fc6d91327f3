"""Every page listed in app.PAGES that exists renders at the defaults: no exception, and at least
one chart or a clear message. Pages are discovered from app.py (read, not imported)."""
from __future__ import annotations

import pytest

from tests.helpers import app_pages, app_test, errors, figures

PAGES = app_pages()


def test_the_attention_pages_are_listed():
    for p in ("pages/heads.py", "pages/overview.py", "pages/causal_vs_bidirectional.py", "pages/mask_lab.py"):
        assert p in PAGES


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
