"""Real Chromium: the encoder–decoder page renders, translates a newly typed sentence, and shows
hostile text literally. The page fixture fails the test if a request leaves localhost or a
dialog fires (an injected script ran)."""
from __future__ import annotations

import pytest

from training.translation import translate_words
from tests.e2e.browser import X_TICKS, charts_drawn, exceptions, open_page, rerun, screenshot

pytestmark = pytest.mark.e2e
PATH = "encoder-decoder"
HEADING = "h4"  # "#### Translation: …"


@pytest.fixture(scope="module", autouse=True)
def warm(server, browser):
    """Open "/" once, so the tests below start warm (see the attention pages' e2e tests)."""
    ctx = browser.new_context()
    pg = ctx.new_page()
    open_page(pg, server)
    ctx.close()


def translation(page) -> str:
    return page.locator(HEADING).filter(has_text="Translation:").first.inner_text()


def type_source(page, text: str) -> None:
    box = page.get_by_role("textbox", name="English sentence")
    box.fill(text)
    rerun(page, lambda: box.press("Enter"))


def test_page_renders_and_translates_a_new_sentence(server, page):
    open_page(page, server, PATH)
    page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=60_000)
    assert exceptions(page) == 0
    assert translation(page).endswith("woru gran ta kasa vek ta ni miso lit ke vidu .")
    # charts arrive one by one (the first can be there before the last): wait for all, then count
    charts_drawn(page, 10)
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 10  # 7 Transformer charts, the RNN section's, the bottleneck's two
    screenshot(page, "encoder_decoder_default")

    sentence = "a happy child finds the red ball near a tall tree ."
    kalo = " ".join(translate_words(sentence.split())[0])
    type_source(page, sentence)
    page.wait_for_function(
        "(k) => [...document.querySelectorAll('h4')].some(h => h.innerText.endsWith(k))", arg=kalo, timeout=60_000)
    assert translation(page).endswith(kalo)
    assert exceptions(page) == 0
    beside = page.locator('[data-testid="stPlotlyChart"]').filter(has_text="RNN: additive attention")
    ticks = beside.locator(X_TICKS).all_text_contents()
    assert "2:child" in ticks  # the RNN-vs-Transformer alignment's source axis follows the new sentence
    # the step slider moves the bar chart to the next word
    page.get_by_role("slider", name="Step").focus()
    rerun(page, lambda: page.keyboard.press("ArrowRight"))
    want = "Step 2: “" + kalo.split()[1] + "”"
    page.wait_for_function("(w) => { const t = document.querySelector('[data-testid=stPlotlyChart] .gtitle'); "
                           "return !!t && t.textContent.startsWith(w); }", arg=want, timeout=30_000)
    title = page.locator('[data-testid="stPlotlyChart"]').first.locator(".gtitle").text_content()
    assert title.startswith(want)
    assert exceptions(page) == 0


def test_html_and_emoji_are_shown_literally(server, page):
    open_page(page, server, PATH)
    page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=60_000)
    type_source(page, '<img src=x onerror=alert(1)> the dog sees a cat 🐶 <b>bold</b>')
    page.wait_for_selector('[data-testid="stAlert"]', timeout=60_000)
    alert = page.locator('[data-testid="stAlert"]').filter(has_text="Not in the toy English vocabulary").inner_text()
    assert "<" in alert and "img" in alert and "🐶" in alert  # shown as text
    assert page.locator("img[src=x]").count() == 0 and page.locator('[data-testid="stMain"] b').count() == 0
    # the three-attentions chart labels every source word (SVG text: escaped labels render as typed)
    ticks = page.locator('[data-testid="stPlotlyChart"]').nth(2).locator(X_TICKS).all_text_contents()
    assert "0:<" in ticks and "1:img" in ticks and "17:🐶" in ticks
    assert exceptions(page) == 0
    assert "nan" not in page.locator('[data-testid="stMain"]').inner_text().lower().split()
    charts_drawn(page, 8)
    screenshot(page, "encoder_decoder_hostile_input")
