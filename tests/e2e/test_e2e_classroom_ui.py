"""Issue 21 in a real browser: Enter applies the sentence (and the link holds no newline), the theme
follows the system preference with a switch in the menu, and charts export as SVG."""
from __future__ import annotations

import pytest

from tests.e2e.browser import charts_drawn, exceptions, guarded_page, open_page, rerun

pytestmark = pytest.mark.e2e


def test_enter_in_the_sentence_box_applies_it_and_keeps_the_link_clean(server, page):
    open_page(page, server)
    box = page.get_by_role("textbox", name="Sentence", exact=True)
    box.fill("a dog ran to the park .")
    rerun(page, lambda: box.press("Enter"))
    page.wait_for_function("() => [...document.querySelectorAll('g[class^=x][class$=tick] text')]"
                           ".some(t => t.textContent === '2:dog')", timeout=60_000)
    assert "%0A" not in page.url and "a+dog+ran" in page.url.replace("%20", "+")
    assert exceptions(page) == 0


def is_dark(rgb: str) -> bool:
    r, g, b = (int(v) for v in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3])
    return r + g + b < 150


@pytest.mark.parametrize("scheme, dark", [("dark", True), ("light", False)])
def test_the_theme_follows_the_system_preference(browser, server, scheme, dark):
    with guarded_page(browser, 1400, 900, color_scheme=scheme) as pg:
        open_page(pg, server)
        pg.wait_for_selector(".main-svg", timeout=60_000)
        rgb = pg.evaluate("() => getComputedStyle(document.querySelector('[data-testid=stApp]')).backgroundColor")
        assert is_dark(rgb) == dark, rgb
        pg.get_by_test_id("stMainMenu").click()  # the switch: ⋮ → System / Light / Dark
        pg.get_by_test_id("stMainMenuItem-theme-" + ("Light" if dark else "Dark")).click()
        pg.wait_for_function("(d) => { const c = getComputedStyle(document.querySelector('[data-testid=stApp]'))"
                             ".backgroundColor.match(/\\d+/g).slice(0, 3).map(Number); "
                             "return (c[0] + c[1] + c[2] < 150) === d; }", arg=not dark, timeout=10_000)


def test_the_camera_button_downloads_an_svg_with_the_charts_title(browser, server, tmp_path):
    with guarded_page(browser, 1400, 1000, accept_downloads=True) as pg:
        open_page(pg, server, "scaling", "img_fmt=SVG")
        pg.locator('[data-testid="stSidebar"]').get_by_text("SVG", exact=True).click()  # chosen already (the link)
        charts_drawn(pg)
        chart = pg.locator('[data-testid="stPlotlyChart"]').first
        chart.hover()
        with pg.expect_download(timeout=30_000) as dl:
            chart.locator('button[data-title^="Download plot"]').click()
        path = tmp_path / "chart.svg"
        dl.value.save_as(path)
        svg = path.read_text()
        assert svg.lstrip().startswith("<svg") and dl.value.suggested_filename.endswith(".svg")
        title = pg.locator('[data-testid="stPlotlyChart"]').first.locator(".gtitle").first.text_content()
        assert title and title in svg.replace("&amp;", "&")
