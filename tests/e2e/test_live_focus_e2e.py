"""Real Chromium: the lecturer clicks a head's button under the heads grid; a student following on a
390 x 844 phone gets the focused head (focus=L.H travels with the view), drawn first, large and no
wider than the phone, and loses it when the lecturer clicks the head again. Screenshots:
screenshots/live_focus_*.png."""
from __future__ import annotations


import pytest

from tests.e2e.browser import charts_drawn, exceptions, guarded_page, screenshot, wait_idle
from tests.e2e.test_live_e2e import query, start_class, type_sentence, wait_tick

pytestmark = pytest.mark.e2e

# the first chart's title and right edge, once a chart is drawn
FIRST_CHART = """() => { const el = document.querySelector('[data-testid="stPlotlyChart"]');
  const p = el && el.querySelector('.js-plotly-plot'), fl = p && p._fullLayout;
  return fl ? {title: String((fl.title || {}).text || ''), right: el.getBoundingClientRect().right} : null; }"""


def test_the_lecturers_focused_head_reaches_a_phone(server, browser):
    with guarded_page(browser, 1280, 720) as lec, guarded_page(browser, 390, 844, is_mobile=True, has_touch=True) as a:
        link, code = start_class(lec, server)
        type_sentence(lec, "the dog sat on the mat .")
        a.goto(link)
        wait_idle(a)
        wait_tick(a, "2:dog")
        a.get_by_text(f"Following room {code}").wait_for(timeout=30_000)

        lec.locator(".st-key-focus_pick").get_by_role("radio", name="head 2").click()
        wait_idle(lec)
        lec.wait_for_function("() => new URL(location.href).searchParams.get('focus') === '0.2'", timeout=30_000)
        a.wait_for_function(f"() => {{ const c = ({FIRST_CHART})(); return c && c.title.includes('Focused: layer 0, head 2'); }}",
                            timeout=60_000)
        charts_drawn(a)
        first = a.evaluate(FIRST_CHART)
        assert first["right"] <= 391, first  # the focused head fits the phone
        assert query(a).get("focus") == "0.2"
        screenshot(lec, "live_focus_lecturer_1280x720")
        a.locator('[data-testid="stPlotlyChart"]').first.scroll_into_view_if_needed()
        screenshot(a, "live_focus_student_390x844")

        lec.locator(".st-key-focus_pick").get_by_role("radio", name="head 2").click()  # again: no focus
        wait_idle(lec)
        a.wait_for_function(f"() => {{ const c = ({FIRST_CHART})(); return c && !c.title.includes('Focused'); }}",
                            timeout=60_000)
        assert "focus" not in query(a)
        assert exceptions(lec) == 0 and exceptions(a) == 0
