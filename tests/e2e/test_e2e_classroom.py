"""Real browser: the calculator (presets, an edited cell) and lesson mode (steps, predict-then-reveal,
presentation mode). Screenshots go to screenshots/ (looked at by hand)."""
import pytest

from tests.e2e.browser import exceptions, open_page, screenshot, wait_idle

pytestmark = pytest.mark.e2e


def ready(page, selector: str) -> None:
    """Wait for this page's own content (tables and charts load lazily), then for the run to finish."""
    page.wait_for_selector(selector, timeout=90_000)
    wait_idle(page)


def cells(page) -> set[str]:
    """Text of every table cell (the data grid keeps an accessible copy of the cells it has drawn;
    it draws only what is on screen, so each table is scrolled into view first)."""
    out: set[str] = set()
    grids = page.locator('[data-testid="stDataFrame"]')
    for n in range(grids.count()):
        g = grids.nth(n)
        g.scroll_into_view_if_needed()
        page.wait_for_timeout(150)
        out.update(g.locator('[data-testid^="glide-cell"]').all_inner_texts())
    return out


def text(page) -> str:
    return page.locator('[data-testid="stMain"]').inner_text()


def test_calculator_presets(server, page):
    open_page(page, server, "calculator")
    ready(page, '[data-testid="stDataFrame"]')
    assert exceptions(page) == 0
    body = text(page)
    assert "Check your arithmetic" in body and "1.2669" in body
    assert {"0.8446", "0.5777", "0.4223", "0.5761"} <= cells(page)
    assert page.locator('[data-testid="stDataFrame"]').count() >= 10
    screenshot(page, "calculator_the_cat_sat")
    # switch preset with the selectbox
    page.locator('[data-testid="stSelectbox"]').filter(has_text="Worked example").first.click()
    page.get_by_role("option", name="4-token padded batch: look-ahead × padding mask").click()
    page.wait_for_url("**preset=padded-batch**", timeout=30_000)
    wait_idle(page)
    assert exceptions(page) == 0
    assert "preset=padded-batch" in page.url
    assert "padded query row" in text(page)
    ready(page, '[data-testid="stDataFrame"]')
    assert {"0.3729", "0.6271", "−∞", "2.2300"} <= cells(page)
    screenshot(page, "calculator_padded_batch")


def test_calculator_bad_input_message(server, page):
    open_page(page, server, "calculator", "preset=layernorm-2468")
    ready(page, '[data-testid="stDataFrame"]')
    box = page.get_by_label("Vector x")
    box.fill("1, two, 3")
    box.press("Enter")
    wait_idle(page)
    assert exceptions(page) == 0
    page.locator('[data-testid="stAlert"]').filter(has_text="'two' is not a number").first.wait_for(timeout=20_000)
    assert box.input_value() == "1, two, 3"  # what the user typed stays
    screenshot(page, "calculator_bad_input")


def test_calculator_encoder_decoder(server, page):
    open_page(page, server, "calculator", "preset=enc-dec-2x3")
    ready(page, '[data-testid="stDataFrame"]')
    assert exceptions(page) == 0
    assert {"0.6039", "2.2000", "0.4718", "0.8839"} <= cells(page)
    screenshot(page, "calculator_enc_dec")


def test_lesson_steps_and_reveal(server, page):
    open_page(page, server, "lesson")
    ready(page, '[data-testid="stDataFrame"]')
    assert exceptions(page) == 0
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 0  # step 1: a table
    for n in (2, 3, 4):
        page.get_by_role("button", name="Next ▶").click()
        page.wait_for_url(f"**lesson_step={n}**", timeout=30_000)
        wait_idle(page)
    assert "lesson_step=4" in page.url
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 1
    page.get_by_text("more peaked", exact=True).click()
    wait_idle(page)
    page.get_by_role("button", name="Check my answer").first.click()
    wait_idle(page)
    assert "You said more peaked" in text(page)
    page.get_by_role("button", name="◀ Back").click()
    page.wait_for_url("**lesson_step=3**", timeout=30_000)
    wait_idle(page)
    assert "lesson_step=3" in page.url
    assert exceptions(page) == 0
    screenshot(page, "lesson_step3")


def test_lesson_presentation_mode(server, page):
    open_page(page, server, "lesson", "present=true&lesson_step=6")
    ready(page, '[data-testid="stPlotlyChart"]')
    assert exceptions(page) == 0
    assert not page.locator('[data-testid="stSidebar"]').is_visible()
    size = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('[data-testid=\"stMarkdownContainer\"] p')).fontSize)")
    assert size >= 20, size
    screenshot(page, "lesson_present_step6")
    page.get_by_role("button", name="Next ▶").click()
    wait_idle(page)
    screenshot(page, "lesson_present_step7")
    assert exceptions(page) == 0
