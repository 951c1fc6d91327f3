"""Hostile input in real Chromium: a shared link whose values are Markdown (an image pointing at
127.0.0.1:9, a javascript: link, KaTeX's \\href) draws no image, link or math and sends no request
for them; a refused model on disk shows its sentence in the sidebar (no exception), screenshotted on
the projector (1280x720) and a phone (390x844)."""
from __future__ import annotations

import json
import os
import shutil
import struct
from urllib.parse import quote

import pytest

from tests.e2e.browser import exceptions, guarded_page, open_page, screenshot, serving

pytestmark = pytest.mark.e2e

PAYLOADS = {"d": "![x](http://127.0.0.1:9/x)", "h": "[x](javascript:alert(1))",
            "layer": "$\\href{http://127.0.0.1:9/m}{m}$", "T": "![y](http://127.0.0.1:9/y)"}


@pytest.fixture(scope="module")
def broken_root(tmp_path_factory):
    """An allowed folder holding a model whose safetensors header is a JSON list."""
    pytest.importorskip("transformers")
    from tests.tiny_families import build
    root = tmp_path_factory.mktemp("e2e-roots")
    folder = build("gpt2", root / "list-header")
    header = b"[1, 2]"
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return root.resolve()


@pytest.fixture(scope="module")
def server_with_roots(broken_root):
    old = os.environ.get("ATTENTION_LAB_MODEL_ROOTS")
    os.environ["ATTENTION_LAB_MODEL_ROOTS"] = str(broken_root)
    try:
        with serving() as url:
            yield url
    finally:
        if old is None:
            os.environ.pop("ATTENTION_LAB_MODEL_ROOTS", None)
        else:
            os.environ["ATTENTION_LAB_MODEL_ROOTS"] = old


@pytest.mark.parametrize("shown", ["![x](http://127.0.0.1:9/x)", "[x](javascript:alert(1))",
                                   "$\\href{http://127.0.0.1:9/m}{m}$"])
def test_markdown_in_link_values_draws_no_image_link_or_math(browser, server_with_roots, shown):
    """Every payload in the shared keys, `shown` in the heads page's own `layer` (its notice is
    drawn where the control is, so it is on screen when the page is idle): the notice shows it as
    typed, and nothing on the page is an image, link or formula made from a payload."""
    query = "&".join(f"{k}={quote(v, safe='')}" for k, v in {**PAYLOADS, "layer": shown}.items())
    with guarded_page(browser, 1280, 1400) as page:
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url) if ":9/" in r.url or r.url.startswith("javascript") else None)
        open_page(page, server_with_roots, "heads", query)
        assert exceptions(page) == 0
        notices = page.locator('[data-testid="stAlert"]')
        text = " ".join(notices.all_inner_texts()).replace("\u2060", "")  # echo_literal's word joiners
        assert repr(shown)[1:-1] in text, text  # as the notice quotes it (repr: a backslash doubled)
        app = page.locator('[data-testid="stApp"]')
        assert app.locator('img[src*="127.0.0.1"]').count() == 0
        assert app.locator('a[href^="javascript"], a[href*="127.0.0.1:9"]').count() == 0
        assert notices.locator(".katex, math").count() == 0
        assert asked == []


@pytest.mark.parametrize("width, height", [(1280, 720), (390, 844)])
def test_a_refused_model_shows_its_sentence_in_the_sidebar(browser, server_with_roots, broken_root, width, height):
    value = "disk:" + str(broken_root / "list-header")
    with guarded_page(browser, width, height) as page:
        open_page(page, server_with_roots, "heads", "src=" + quote(value, safe=""))
        assert exceptions(page) == 0
        if width < 640:  # a phone folds the sidebar: open it
            page.locator('[data-testid="stExpandSidebarButton"], [data-testid="stSidebarCollapsedControl"] button'
                         ).first.click()
        alert = page.locator('[data-testid="stSidebar"] [data-testid="stAlert"]').filter(
            has_text="not a valid safetensors file")
        alert.first.wait_for()
        assert "re-save" in alert.first.inner_text()
        alert.first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot(page, f"disk-refusal-{width}x{height}").with_name(
            f"disk-refusal-{width}x{height}-viewport.png")))
