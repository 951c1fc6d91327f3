"""Real browser: the calculator (presets, an edited cell) and lesson mode (steps, predict-then-reveal,
presentation mode). Screenshots go to screenshots/ (looked at by hand)."""
import pytest
from playwright.sync_api import expect

from tests.e2e.browser import exceptions, open_page, rerun, screenshot, wait_idle

FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"

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
        # the grid draws the cells now on screen in its next frames: wait for them, not for a time
        g.locator('[data-testid^="glide-cell"]').first.wait_for(state="attached", timeout=30_000)
        page.evaluate(FRAMES)
        out.update(g.locator('[data-testid^="glide-cell"]').all_inner_texts())
    return out


def pick(page, label: str, option: str) -> None:
    """Choose an option of a selectbox and wait for the rerun it causes. The box is scrolled into
    view and clicked until its list is open (a click while the page still scrolls after cells()
    can miss): the check is the list's state, not a time."""
    box = page.get_by_role("combobox", name=label, exact=True)
    opt = page.get_by_role("option", name=option, exact=True)
    for attempt in range(3):
        box.scroll_into_view_if_needed()
        page.evaluate(FRAMES)
        box.click()
        if box.get_attribute("aria-expanded") == "true" or opt.count():
            break
    rerun(page, opt.click)


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
    rerun(page, lambda: box.press("Enter"))
    assert exceptions(page) == 0
    page.locator('[data-testid="stAlert"]').filter(has_text="“two” is not a number").first.wait_for(timeout=20_000)
    assert box.input_value() == "1, two, 3"  # what the user typed stays
    screenshot(page, "calculator_bad_input")


def test_calculator_encoder_decoder(server, page):
    open_page(page, server, "calculator", "preset=enc-dec-2x3")
    ready(page, '[data-testid="stDataFrame"]')
    assert exceptions(page) == 0
    assert {"0.6039", "2.2000", "0.4718", "0.8839"} <= cells(page)
    screenshot(page, "calculator_enc_dec")


def go_step(page, button: str, n: int) -> None:
    """Click Back/Next and wait for the rerun it causes, then check step n (progress text, URL)."""
    rerun(page, page.get_by_role("button", name=button).click)
    assert f"Step {n} of 9" in text(page)
    assert f"lesson_step={n}" in page.url


def test_lesson_steps_and_reveal(server, page):
    open_page(page, server, "lesson")
    ready(page, '[data-testid="stAlert"]')
    assert exceptions(page) == 0
    # predict first: step 1's table (which holds the answer) waits for the question (issue 21)
    assert page.locator('[data-testid="stDataFrame"]').count() == 0
    rerun(page, page.get_by_role("button", name="Show them without predicting").click)
    ready(page, '[data-testid="stDataFrame"]')
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 0  # step 1: a table
    for n in (2, 3, 4):
        go_step(page, "Next ▶", n)
    assert "lesson_step=4" in page.url
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 0  # not before the answer
    rerun(page, page.get_by_text("more peaked", exact=True).click)
    check = page.get_by_role("button", name="Check my answer").first
    expect(check).to_be_enabled(timeout=30_000)  # enabled once the answer's rerun is drawn
    rerun(page, check.click)
    assert "You said more peaked" in text(page)
    ready(page, '[data-testid="stPlotlyChart"]')  # the step's heatmap, now that the answer is in
    go_step(page, "◀ Back", 3)
    assert "lesson_step=3" in page.url
    assert exceptions(page) == 0
    screenshot(page, "lesson_step3")


def test_lesson_presentation_mode(server, page):
    open_page(page, server, "lesson", "present=true&lesson_step=6")
    ready(page, '[data-testid="stAlert"]')
    rerun(page, page.get_by_role("button", name="Show them without predicting").click)
    ready(page, '[data-testid="stPlotlyChart"]')
    assert exceptions(page) == 0
    assert not page.locator('[data-testid="stSidebar"]').is_visible()
    size = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('[data-testid=\"stMarkdownContainer\"] p')).fontSize)")
    assert size >= 20, size
    screenshot(page, "lesson_present_step6")
    rerun(page, page.get_by_role("button", name="Next ▶").click)
    assert "Step 7 of 9" in text(page)
    screenshot(page, "lesson_present_step7")
    assert exceptions(page) == 0
