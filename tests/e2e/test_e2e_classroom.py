"""Real browser: the calculator (presets, an edited cell) and lesson mode (steps, predict-then-reveal,
presentation mode). Screenshots go to screenshots/ (looked at by hand)."""
import pytest
from playwright.sync_api import expect

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


def pick(page, label: str, option: str) -> None:
    """Choose an option of a selectbox. The grid scrolling in cells() can leave the page mid-scroll
    so that the first click does not open the list: scroll the box into view and retry."""
    box = page.get_by_role("combobox", name=label, exact=True)
    for attempt in range(3):
        box.scroll_into_view_if_needed()
        box.click()
        try:
            page.get_by_role("option", name=option, exact=True).click(timeout=10_000)
            return
        except Exception:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
            wait_idle(page)


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
    pick(page, "Worked example", "4-token padded batch: look-ahead × padding mask")
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


def go_step(page, button: str, n: int) -> None:
    """Click Back/Next and wait for step n (progress text and URL). On a loaded machine a click
    that lands while the previous rerun is still being drawn can be lost: click again only when
    the page still shows the old step (never twice for one step)."""
    old = n + 1 if "Back" in button else n - 1
    for attempt in range(3):
        page.get_by_role("button", name=button).click()
        try:
            page.get_by_text(f"Step {n} of 9", exact=False).first.wait_for(timeout=20_000)
            break
        except Exception:
            wait_idle(page)
            if attempt == 2 or f"Step {old} of 9" not in text(page):
                raise
    page.wait_for_url(f"**lesson_step={n}**", timeout=30_000)
    wait_idle(page)


def test_lesson_steps_and_reveal(server, page):
    open_page(page, server, "lesson")
    ready(page, '[data-testid="stAlert"]')
    assert exceptions(page) == 0
    # predict first: step 1's table (which holds the answer) waits for the question (issue 21)
    assert page.locator('[data-testid="stDataFrame"]').count() == 0
    page.get_by_role("button", name="Show them without predicting").click()
    ready(page, '[data-testid="stDataFrame"]')
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 0  # step 1: a table
    for n in (2, 3, 4):
        go_step(page, "Next ▶", n)
    assert "lesson_step=4" in page.url
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 0  # not before the answer
    page.get_by_text("more peaked", exact=True).click()
    check = page.get_by_role("button", name="Check my answer").first
    expect(check).to_be_enabled(timeout=30_000)  # enabled once the answer's rerun is drawn
    wait_idle(page)
    check.click()
    # a loaded machine may report idle before the click's rerun starts: wait for the reveal itself
    page.get_by_text("You said more peaked", exact=False).first.wait_for(timeout=30_000)
    wait_idle(page)
    assert "You said more peaked" in text(page)
    ready(page, '[data-testid="stPlotlyChart"]')  # the step's heatmap, now that the answer is in
    go_step(page, "◀ Back", 3)
    assert "lesson_step=3" in page.url
    assert exceptions(page) == 0
    screenshot(page, "lesson_step3")


def test_lesson_presentation_mode(server, page):
    open_page(page, server, "lesson", "present=true&lesson_step=6")
    ready(page, '[data-testid="stAlert"]')
    page.get_by_role("button", name="Show them without predicting").click()
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
