"""The app starts in a real browser on a meaningful sentence and shows a heatmap without a click;
nothing leaves localhost."""
import pytest

from tests.e2e.browser import X_TICKS, exceptions, open_page, screenshot

pytestmark = pytest.mark.e2e


def test_home_shows_heatmap(server, page):
    open_page(page, server)
    page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=60_000)
    assert exceptions(page) == 0
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 1
    ticks = page.locator('[data-testid="stPlotlyChart"]').first.locator(X_TICKS).all_text_contents()
    assert "5:cabinet" in ticks  # the default sentence, no click needed
    page.wait_for_timeout(500)
    screenshot(page, "smoke_home")
