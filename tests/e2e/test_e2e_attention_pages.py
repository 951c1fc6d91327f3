"""Real Chromium: the attention pages render, react to the sidebar, keep their state in the URL,
and show hostile text literally. The page fixture fails the test if a request leaves localhost or
a dialog fires."""
from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.e2e.browser import (X_TICKS, apply_sentence, charts_drawn, count_runs, exceptions, open_page,
                               pick_sidebar_option, rerun, screenshot, ws_log)
from ui.state import FRESH

pytestmark = pytest.mark.e2e
FRESH_Q = "src=" + quote(FRESH)
ATTENTION = ["", "overview", "causal-vs-bidirectional", "mask-lab"]  # "" = the heads page (default, served at /)


@pytest.fixture(scope="module", autouse=True)
def warm(server, browser):
    """Open "/" once, so the timed tests below start with torch imported and the model built (a
    deep link as a fresh server's first request works too: test_e2e_smoke.py)."""
    ctx = browser.new_context()
    pg = ctx.new_page()
    open_page(pg, server)
    ctx.close()


def grid_titles(page) -> list[str]:
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    return [t for t in chart.locator("text.annotation-text").all_text_contents() if t.startswith("head ")]


def x_labels(page) -> list[str]:
    return page.locator('[data-testid="stPlotlyChart"]').first.locator(X_TICKS).all_text_contents()


@pytest.mark.parametrize("path", ATTENTION)
def test_attention_page_renders(server, page, path):
    open_page(page, server, path, FRESH_Q)
    charts_drawn(page)
    assert exceptions(page) == 0
    screenshot(page, f"attention_{path or 'heads'}")


def test_type_sentence_changes_labels_and_heads_change_grid(server, page):
    open_page(page, server, "", FRESH_Q)
    page.wait_for_selector(X_TICKS, timeout=60_000)
    assert "2:keys" in x_labels(page)
    assert len(grid_titles(page)) == 4
    # the sentence's run is in the address bar before the next change. In ~1 run of 3 a Heads change
    # made right after it left the grid at 4 heads: the browser had dropped the sidebar's values and
    # sent their defaults with it (src causal-lm, d 8); every run now sends them (state.begin_run;
    # test_e2e_smoke.py reproduces it on a fresh server). The recorder's log stays for a new cause.
    apply_sentence(page, "a dog ran to the park .")
    page.wait_for_function("() => [...document.querySelectorAll('g[class^=x][class$=tick] text')].some(t => t.textContent === '2:dog')")
    assert "2:keys" not in x_labels(page)
    pick_sidebar_option(page, "Heads", "8")
    try:
        page.wait_for_function("() => document.querySelectorAll('[data-testid=stPlotlyChart] text.annotation-text').length >= 8")
    except Exception as exc:  # the lost-change flake (see above): say which side lost it
        screenshot(page, "attention_heads_8_lost")
        sidebar = page.locator('[data-testid="stSidebar"]').inner_text()
        raise AssertionError(f"the grid did not reach 8 heads ({exc!r:.200}); url {page.url}; grid titles "
                             f"{grid_titles(page)}; sidebar {sidebar[:600]!r}\n{ws_log(page)}") from None
    assert len(grid_titles(page)) == 8
    assert "h=8" in page.url and "dog" in page.url
    screenshot(page, "attention_heads_8")
    url = page.url
    # the copied link in a fresh page (new context) gives the same view
    fresh = page.context.browser.new_context(viewport={"width": 1400, "height": 1800})
    count_runs(fresh)
    fresh.route("**/*", page.guard.route)
    p2 = fresh.new_page()
    try:
        open_page(p2, url)
        p2.wait_for_selector(X_TICKS, timeout=60_000)
        assert x_labels(p2) == x_labels(page)
        assert len(grid_titles(p2)) == 8
        assert p2.url == url
        assert exceptions(p2) == 0
    finally:
        fresh.close()


def test_copied_link_keeps_page_and_controls(server, page):
    q = FRESH_Q + "&mask=bidirectional&layer=1&cmp_head=2"
    open_page(page, server, "causal-vs-bidirectional", q)
    page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=60_000)
    assert page.url.split("?")[0].endswith("/causal-vs-bidirectional")
    assert "layer=1" in page.url and "cmp_head=2" in page.url and "mask=bidirectional" in page.url
    titles = page.locator('[data-testid="stPlotlyChart"]').first.locator("text.annotation-text").all_text_contents()
    assert "head 2: causal" in titles and "head 0: causal" not in titles


def test_hand_typed_heads_path_opens_the_heads_page_with_its_query(server, page):
    """The heads page is the default page (served at "/"); "/heads" typed by hand must not show
    Streamlit's "Page not found" and must keep the link's settings."""
    open_page(page, server, "heads", FRESH_Q + "&h=2&text=" + quote("a dog ran ."))
    page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=60_000)
    assert page.get_by_text("Page not found").count() == 0
    assert page.get_by_role("heading", name="Attention heads").count() == 1
    assert page.url.split("?")[0].rstrip("/") == server.rstrip("/")  # now at "/"
    assert "h=2" in page.url and "text=a+dog+ran" in page.url.replace("%20", "+")
    assert len(grid_titles(page)) == 2 and x_labels(page)[:2] == ["0:<bos>", "1:a"]
    assert exceptions(page) == 0


def test_invalid_url_values_show_notice(server, page):
    open_page(page, server, "", FRESH_Q + "&h=5&L=zzz&layer=7")
    page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=60_000)
    text = page.locator('[data-testid="stAlert"]').all_text_contents()
    joined = " ".join(text)
    assert "h='5'" in joined and "L='zzz'" in joined and "layer=" in joined
    assert len(grid_titles(page)) == 4
    assert exceptions(page) == 0


def type_sentence(page, server, text: str, tick: str):
    """Open the heads page (fresh weights), type `text` in the sidebar's Sentence box, press Enter,
    and wait until a chart's x tick reads `tick` (the chart repaints after the script ends: no fixed
    sleep). Returns the box."""
    open_page(page, server, "", FRESH_Q)
    box = page.get_by_role("textbox", name="Sentence", exact=True)
    box.fill(text)
    rerun(page, lambda: box.press("Enter"))
    page.wait_for_function("(tick) => [...document.querySelectorAll('[data-testid=stPlotlyChart] "
                           "g[class^=x][class$=tick] text')].some(t => t.textContent === tick)",
                           arg=tick, timeout=30_000)
    return box


@pytest.mark.parametrize("evil", ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>"])
def test_hostile_text_is_shown_literally(server, page, evil):
    box = type_sentence(page, server, evil, "1:<")
    labels = x_labels(page)
    assert "1:<" in labels  # the tokenizer splits punctuation; the "<" is shown as typed
    assert page.locator("img[src=x]").count() == 0
    assert exceptions(page) == 0
    assert box.input_value() == evil  # nothing typed is lost
    # line view tab (lazy: computed when opened; hover isolation is CSS only; labels escaped there too)
    rerun(page, page.get_by_text("One head in detail").click)  # the expander: closed (and not computed) by default
    rerun(page, page.get_by_role("tab", name="Lines").click)
    page.wait_for_selector(".al-lines .ln", timeout=60_000)
    assert page.locator(".al-lines .tok").filter(has_text="<").count() >= 1
    assert "head_tab=Lines" in page.url
    screenshot(page, "attention_hostile_" + ("script" if "script" in evil else "img"))


def test_quotes_in_labels_show_as_typed(server, page):
    """A typed quote was escaped as "&quot;", which Plotly draws literally (the top-k table showed
    ".&quot;"); labels now carry numeric references, which Plotly decodes: the tick reads 3:"."""
    type_sentence(page, server, 'he said "no" it\'s', '3:"')
    labels = x_labels(page)
    assert '5:"' in labels and "6:it's" in labels, labels
    assert not any("&quot;" in lab or "&#" in lab for lab in labels), labels
    assert exceptions(page) == 0


def test_line_view_hover_isolates_a_token(server, page):
    open_page(page, server, "", FRESH_Q + "&detail=true&head_tab=Lines&head=2")
    page.wait_for_selector(".al-lines .ln", timeout=60_000)
    assert exceptions(page) == 0
    shown = "() => [...document.querySelectorAll('.al-lines .ln')].filter(l => getComputedStyle(l).visibility !== 'hidden').length"
    total = page.locator(".al-lines .ln").count()
    assert total > 20 and page.evaluate(shown) == total
    # hover state is applied on the next frames (slow under load): poll for it, do not sleep
    settled = ("(n) => [...document.querySelectorAll('.al-lines .ln')]"
               ".filter(l => getComputedStyle(l).visibility !== 'hidden').length === n")
    page.locator(".al-lines .q5 .ql").hover()  # a query: only its lines stay
    q5 = page.locator(".al-lines .q5 .ln").count()
    assert q5 == 6  # causal: keys 0..5
    page.wait_for_function(settled, arg=q5, timeout=10_000)
    page.locator(".al-lines .kl.k3").hover()  # a key: only the lines into it stay
    k3 = page.locator(".al-lines .ln.k3").count()
    assert k3 > 1
    page.wait_for_function(settled, arg=k3, timeout=10_000)
    page.mouse.move(5, 5)
    screenshot(page, "attention_heads_lines")
