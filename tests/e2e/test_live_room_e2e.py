"""Real Chromium: the lecturer sees who follows and who explores, and locks the room. A student
already in reloads and stays (the browser's own id); a newcomer reads that the room is locked."""
from __future__ import annotations


import pytest

from tests.e2e.browser import exceptions, guarded_page, screenshot, wait_idle
from tests.e2e.test_live_e2e import start_class

pytestmark = pytest.mark.e2e


def test_roster_lock_and_reload(server, browser):
    with guarded_page(browser, 1280, 720) as lec, guarded_page(browser, 390, 844, is_mobile=True) as a, \
            guarded_page(browser, 1000, 900) as b, guarded_page(browser, 1000, 900) as late:
        link, code = start_class(lec, server)
        for p in (a, b):
            p.goto(link)
            wait_idle(p)
            p.get_by_text(f"Following room {code}").wait_for(timeout=30_000)
        b.get_by_role("button", name="Explore on my own").click()
        wait_idle(b)
        lec.get_by_text("1 following · 1 exploring").wait_for(timeout=30_000)
        lec.get_by_text("Lock the room", exact=True).click()
        wait_idle(lec)
        lec.get_by_text("(locked)").wait_for(timeout=30_000)
        screenshot(lec, "live_lecturer_locked_1280x720")
        late.goto(link)
        wait_idle(late)
        late.get_by_text(f"Room {code} is locked by the lecturer").wait_for(timeout=30_000)
        assert "Following room" not in late.locator('[data-testid="stMain"]').inner_text()
        a.reload()
        wait_idle(a)
        a.get_by_text(f"Following room {code}").wait_for(timeout=30_000)
        for p in (lec, a, b, late):
            assert exceptions(p) == 0
